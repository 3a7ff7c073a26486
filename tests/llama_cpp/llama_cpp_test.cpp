// The llama.cpp adapter (specdec/llama_cpp.hpp) on real GGUF files: the shipped KJV pair
// converted by tools/spdc_to_gguf.py at build time, and a tiny random pair for statistics.
//
// - the converted pair reproduces the PyTorch golden logits (models/kjv-*.golden), prefill and
//   token by token, within stated tolerances;
// - greedy: SpeculativeDecoder over two llama.cpp models == AutoregressiveDecoder over the
//   target == a plain llama.cpp greedy loop (llama_sampler_init_greedy), token for token;
// - KV rollback: every row the cached adapter returns across decodes with rejections equals the
//   row a fresh context computes over the same tokens;
// - exactness at T > 0: chi-square of the first two tokens of speculative decoding over the tiny
//   pair against the target's own law (and the same test rejects the draft's law: power);
// - every error is specdec:-prefixed, leaves the KV cache and the adapter's record in agreement,
//   and is followed by a decode identical to a fresh model's.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <specdec/llama_cpp.hpp>
#include <specdec/specdec.hpp>
#include <specdec/testing.hpp>

#include "gpt/weights.hpp"

namespace {

namespace fs = std::filesystem;
namespace llama = specdec::llama_cpp;
using specdec::token_t;

const fs::path kGgufDir = SPECDEC_GGUF_DIR;
const fs::path kModelsDir = SPECDEC_MODELS_DIR;

/// The reference configuration: f32 weights, f32 KV cache, flash attention off — the closest
/// llama.cpp gets to the f32 reference. Default is llama.cpp's own defaults (f16 KV, FA auto).
llama::ContextOptions exact_options() { return {.flash_attention = 0, .kv_type = GGML_TYPE_F32}; }

std::vector<token_t> bytes_of(std::string_view text) {
  std::vector<token_t> tokens;
  for (const unsigned char byte : text) tokens.push_back(byte);
  return tokens;
}

std::vector<std::string> held_out_prompts(std::size_t count) {
  std::ifstream in(kModelsDir / "prompts.txt");
  std::vector<std::string> prompts;
  for (std::string line; prompts.size() < count && std::getline(in, line);) {
    prompts.push_back(line);
  }
  return prompts;
}

float max_abs_diff(std::span<const float> a, std::span<const float> b) {
  float worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a[i] - b[i]));
  return worst;
}

std::size_t argmax(std::span<const float> row) {
  return static_cast<std::size_t>(std::max_element(row.begin(), row.end()) - row.begin());
}

template <class Exception, class F>
void expect_error(F&& f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "expected an exception containing '" << needle << "'";
  } catch (const Exception& error) {
    const std::string message = error.what();
    EXPECT_EQ(message.rfind("specdec: ", 0), 0u) << message;
    EXPECT_NE(message.find(needle), std::string::npos) << message;
  }
}

// ---- golden logits ------------------------------------------------------------------------------

struct GoldenCase {
  const char* gguf;
  const char* golden;
  bool exact;       // f32 weights with the exact options, or llama.cpp's defaults
  float tolerance;  // max |logit - golden| over every row
};

class GoldenLogitsTest : public ::testing::TestWithParam<GoldenCase> {};

TEST_P(GoldenLogitsTest, PrefillAndTokenByTokenMatchPyTorch) {
  const GoldenCase& c = GetParam();
  const auto golden = specdec::examples::load_golden_logits(kModelsDir / c.golden);
  auto model = llama::LoadedModel::load(kGgufDir / c.gguf,
                                        c.exact ? exact_options() : llama::ContextOptions{});
  const std::size_t vocab = model.vocab_size();
  ASSERT_EQ(vocab, static_cast<std::size_t>(golden.logits.cols()));
  const std::vector<token_t> tokens(golden.tokens.begin(), golden.tokens.end());
  const std::size_t n = tokens.size();
  const std::span<const float> expected(golden.logits.data(), n * vocab);

  // Prefill: one call, every row.
  const std::span<const float> rows = model(tokens, n);
  ASSERT_EQ(rows.size(), n * vocab);
  const float prefill_error = max_abs_diff(rows, expected);
  EXPECT_LT(prefill_error, c.tolerance) << c.gguf;

  // Token by token: the KV cache grows one position per call.
  model.reset();
  float stepwise_error = 0;
  std::size_t argmax_differences = 0;
  for (std::size_t i = 1; i <= n; ++i) {
    const std::span<const float> row = model(std::span(tokens).first(i));
    const std::span<const float> want = expected.subspan((i - 1) * vocab, vocab);
    stepwise_error = std::max(stepwise_error, max_abs_diff(row, want));
    if (argmax(row) != argmax(want)) {
      // Only a near-tie may flip: the reference's top two within twice the tolerance.
      std::vector<float> sorted(want.begin(), want.end());
      std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<>());
      EXPECT_LT(sorted[0] - sorted[1], 2 * c.tolerance) << "position " << i - 1;
      ++argmax_differences;
    }
  }
  EXPECT_LT(stepwise_error, c.tolerance) << c.gguf;
  EXPECT_LE(argmax_differences, 2u);
  std::printf("[ measured ] %s (%s): max |diff| prefill %.3g, token by token %.3g\n", c.gguf,
              c.exact ? "f32 KV, no flash attention" : "llama.cpp defaults",
              static_cast<double>(prefill_error), static_cast<double>(stepwise_error));
}

// Tolerances: measured (2026-12-03) 0.003 (target) and 0.005 (draft) with f32 weights, f32 KV
// and no flash attention -- ggml's CPU GELU reads an f16 table (GGML_GELU_FP16), which bounds
// how close llama.cpp gets -- and 0.006 / 0.03 with f16 weights and llama.cpp's defaults; the
// bounds leave 2-3x room. On a Xeon with AVX512-FP16 (2026-12-07) the defaults token by token
// read 0.025 / 0.041, with two near-ties of the draft's flipped, while the f32 cases stayed
// within theirs (the f16 paths ggml takes on that CPU; not traced further): the target's bound
// is 0.05 and two flips are allowed, each still a near-tie. A wrong row, position or tensor
// layout is off by units.
INSTANTIATE_TEST_SUITE_P(
    ShippedPair, GoldenLogitsTest,
    ::testing::Values(GoldenCase{"kjv-target-f32.gguf", "kjv-target.golden", true, 0.01f},
                      GoldenCase{"kjv-draft-f32.gguf", "kjv-draft.golden", true, 0.015f},
                      GoldenCase{"kjv-target-f16.gguf", "kjv-target.golden", false, 0.05f},
                      GoldenCase{"kjv-draft-f16.gguf", "kjv-draft.golden", false, 0.1f}));

// ---- tokenizer and text -------------------------------------------------------------------------

TEST(LlamaCppText, ByteVocabularyTokenizesToByteIds) {
  auto model = llama::LoadedModel::load(kGgufDir / "kjv-target-f16.gguf");
  const std::string text = "\nPsalms 23:1 The LORD is my shepherd; \xc3\xa9\xe2\x82\xac!\t~";
  EXPECT_EQ(llama::tokenize(model.vocab(), text), bytes_of(text));
  const std::vector<token_t> all_bytes = [] {
    std::vector<token_t> bytes(256);
    for (int i = 0; i < 256; ++i) bytes[static_cast<std::size_t>(i)] = i;
    return bytes;
  }();
  // Every byte detokenizes to itself (invalid UTF-8 included), split at any point.
  llama::TextDecoder decoder(model.vocab());
  std::string round_trip;
  for (std::size_t i = 0; i < all_bytes.size(); i += 7) {
    round_trip += decoder.push(std::span(all_bytes).subspan(i, std::min<std::size_t>(7, 256 - i)));
  }
  round_trip += decoder.flush();
  ASSERT_EQ(round_trip.size(), 256u);
  for (std::size_t i = 0; i < 256; ++i) EXPECT_EQ(static_cast<unsigned char>(round_trip[i]), i);
}

TEST(LlamaCppText, StreamedUtf8CharactersAreNeverSplit) {
  auto model = llama::LoadedModel::load(kGgufDir / "kjv-target-f16.gguf");
  const std::string text =
      "a\xc3\xa9"
      "b\xe2\x82\xac"
      "c\xf0\x9f\x98\x80"
      "d";  // 2-, 3-, 4-byte
  const std::vector<token_t> tokens = bytes_of(text);
  llama::TextDecoder decoder(model.vocab());
  std::vector<std::string> pieces;
  for (const token_t token : tokens) pieces.emplace_back(decoder.push(std::span(&token, 1)));
  EXPECT_EQ(decoder.flush(), "");
  std::string joined;
  for (const std::string& piece : pieces) {
    // Every piece is whole characters: its last lead byte has all its continuation bytes.
    EXPECT_EQ(llama::TextDecoder::complete_prefix(piece), piece.size()) << piece;
    joined += piece;
  }
  EXPECT_EQ(joined, text);
  EXPECT_EQ(pieces[1], "");          // the first byte of \xc3\xa9 waits
  EXPECT_EQ(pieces[2], "\xc3\xa9");  // and comes out whole
}

// ---- greedy: token for token --------------------------------------------------------------------

/// llama.cpp's own greedy loop on a context of its own: decode the prompt, then one token at a
/// time, choosing with llama_sampler_init_greedy.
std::vector<token_t> llama_greedy(llama::LoadedModel& model, const std::vector<token_t>& prompt,
                                  std::size_t count) {
  model.reset();
  llama_context* context = model.context();
  llama_sampler* greedy = llama_sampler_init_greedy();
  std::vector<llama_token> tokens(prompt.begin(), prompt.end());
  std::vector<token_t> out;
  llama_batch batch = llama_batch_get_one(tokens.data(), static_cast<std::int32_t>(tokens.size()));
  for (std::size_t i = 0; i < count; ++i) {
    EXPECT_EQ(llama_decode(context, batch), 0);
    llama_token next = llama_sampler_sample(greedy, context, -1);
    out.push_back(next);
    tokens.assign(1, next);
    batch = llama_batch_get_one(tokens.data(), 1);
  }
  llama_sampler_free(greedy);
  model.reset();  // the adapter's record no longer describes the context: start over
  return out;
}

TEST(LlamaCppGreedy, SpeculativeEqualsPlainEqualsLlamaCppLoop) {
  auto target = llama::LoadedModel::load(kGgufDir / "kjv-target-f16.gguf");
  auto draft = llama::LoadedModel::load(kGgufDir / "kjv-draft-f16.gguf");
  llama::check_compatible(draft.model(), target.model());
  specdec::GenerationConfig config;
  config.max_new_tokens = 48;
  config.sampling.temperature = 0;
  config.max_context = std::min(target.max_context(), draft.max_context());
  specdec::AutoregressiveDecoder plain(target);
  specdec::SpeculativeDecoder speculative(draft, target);
  specdec::NgramDecoder lookup(target, {.min_ngram = 4, .max_ngram = 12});
  specdec::NgramThenModelDecoder both(draft, target, {.min_ngram = 4, .max_ngram = 12});
  for (const std::string& line : held_out_prompts(3)) {
    const std::vector<token_t> prompt = bytes_of("\n" + line);
    const std::vector<token_t> reference = llama_greedy(target, prompt, config.max_new_tokens);
    EXPECT_EQ(plain.generate(prompt, config).tokens, reference) << line;
    for (std::size_t k = 1; k <= 8; ++k) {
      config.draft_length = k;
      for (const auto verifier : {specdec::VerifierKind::token, specdec::VerifierKind::block}) {
        config.verifier = verifier;
        EXPECT_EQ(speculative.generate(prompt, config).tokens, reference) << line << " K=" << k;
      }
    }
    config.draft_length = 8;
    EXPECT_EQ(lookup.generate(prompt, config).tokens, reference) << line;
    EXPECT_EQ(both.generate(prompt, config).tokens, reference) << line;
  }
}

// ---- KV rollback: cached rows == fresh rows -----------------------------------------------------

/// A target that serves every call from the cached adapter and checks it against a second,
/// freshly reset context computing the whole context from scratch.
struct CheckedTarget {
  llama::ContextModel* cached;
  llama::ContextModel* fresh;
  float worst = 0;            // max |cached - fresh| over every row of every call
  float shifted_best = 1e9f;  // min over calls of max |cached - fresh rows one position earlier|
  std::size_t calls = 0;
  std::vector<float> rows;

  std::span<const float> operator()(std::span<const token_t> context, std::size_t n) {
    const std::span<const float> got = (*cached)(context, n);
    rows.assign(got.begin(), got.end());
    fresh->reset();
    const std::span<const float> want = (*fresh)(context, n);
    worst = std::max(worst, max_abs_diff(rows, want));
    if (context.size() > n) {
      // Power: the rows one position too early (the off-by-one a cached model can make) are
      // far from these; the tolerance below must tell them apart.
      fresh->reset();
      const std::span<const float> early = (*fresh)(context.first(context.size() - 1), n);
      shifted_best = std::min(shifted_best, max_abs_diff(rows, early));
    }
    ++calls;
    return rows;
  }
};

TEST(LlamaCppKvCache, CachedRowsEqualFreshRowsAcrossRejections) {
  for (const std::uint32_t n_batch : {0u, 4u}) {  // 4: prompts and K + 1 rows span several decodes
    llama::ContextOptions options = exact_options();
    options.n_batch = n_batch;
    auto target = llama::LoadedModel::load(kGgufDir / "kjv-target-f32.gguf", options);
    auto reference = llama::LoadedModel::load(kGgufDir / "kjv-target-f32.gguf", options);
    auto draft = llama::LoadedModel::load(kGgufDir / "kjv-draft-f32.gguf", options);
    CheckedTarget checked{&target, &reference, 0, 1e9f, 0, {}};
    specdec::SpeculativeDecoder decoder(draft, checked);
    specdec::GenerationConfig config;
    config.max_new_tokens = 40;
    config.draft_length = 6;
    config.sampling.temperature = 1.0f;  // sampled: rejections at every depth
    config.max_context = target.max_context();
    std::size_t rejecting_rounds = 0;
    for (const std::string& line : held_out_prompts(2)) {
      for (std::uint64_t seed = 0; seed < 3; ++seed) {
        config.seed = seed;
        rejecting_rounds += decoder.generate(bytes_of("\n" + line), config).stats.rejecting_rounds;
      }
    }
    EXPECT_GT(rejecting_rounds, 10u);
    // Cached and fresh rows come from different batch shapes (ggml picks kernels by shape):
    // measured (2026-12-03) up to 0.0018 apart; rows one position off are units apart.
    EXPECT_LT(checked.worst, 5e-3f) << "n_batch " << n_batch << " over " << checked.calls;
    EXPECT_GT(checked.shifted_best, 0.5f);
  }
}

// ---- trees: one llama_decode, one sequence per leaf ---------------------------------------------

/// Row after `committed` + the path to node i, from a fresh context (the reference).
std::vector<float> path_row(llama::ContextModel& fresh, std::span<const token_t> committed,
                            std::span<const token_t> tokens, std::span<const std::int32_t> parents,
                            std::int32_t node) {
  std::vector<token_t> context(committed.begin(), committed.end());
  std::vector<token_t> path;
  for (std::int32_t i = node; i >= 0; i = parents[static_cast<std::size_t>(i)]) {
    path.push_back(tokens[static_cast<std::size_t>(i)]);
  }
  context.insert(context.end(), path.rbegin(), path.rend());
  fresh.reset();
  const std::span<const float> row = fresh(context);
  return {row.begin(), row.end()};
}

TEST(LlamaCppTree, EveryRowEqualsItsPathAndTheCacheKeepsTheAcceptedPath) {
  llama::ContextOptions options = exact_options();
  options.n_seq_max = 16;
  auto target = llama::LoadedModel::load(kGgufDir / "kjv-target-f32.gguf", options);
  auto fresh = llama::LoadedModel::load(kGgufDir / "kjv-target-f32.gguf", exact_options());
  const std::size_t vocab = target.vocab_size();
  std::vector<token_t> committed = bytes_of("\nGenesis 1:1 In the beginning ");
  // Width 3 at the root (two siblings share a token, as i.i.d. siblings may), then 2, then 1;
  // topological but not depth-first order.
  const std::vector<token_t> tokens{'G', 'a', 'G', 'o', 'd', 'n', ' ', 'x', 'd'};
  const std::vector<std::int32_t> parents{-1, -1, -1, 0, 0, 1, 3, 3, 4};
  float worst = 0;
  for (int round = 0; round < 3; ++round) {
    const std::span<const float> rows = target.score_tree(committed, tokens, parents);
    ASSERT_EQ(rows.size(), (tokens.size() + 1) * vocab);
    const std::vector<float> all(rows.begin(), rows.end());
    for (std::int32_t node = -1; node < static_cast<std::int32_t>(tokens.size()); ++node) {
      const std::vector<float> want = path_row(fresh, committed, tokens, parents, node);
      const std::span<const float> got =
          std::span(all).subspan(static_cast<std::size_t>(node + 1) * vocab, vocab);
      worst = std::max(worst, max_abs_diff(got, want));
    }
    // Accept the path 0 -> 3 -> 6 ("God") and a next token; the next call (a chain call here,
    // a tree call in the next round) must see the cache of exactly that path.
    committed.insert(committed.end(), {'G', 'o', ' ', 'c'});
    const std::span<const float> next = target(committed, 2);
    const std::vector<float> got(next.begin(), next.end());
    fresh.reset();
    const std::span<const float> want = fresh(committed, 2);
    worst = std::max(worst, max_abs_diff(got, want));
    EXPECT_EQ(std::vector<token_t>(target.cached_tokens().begin(), target.cached_tokens().end()),
              committed);
    EXPECT_EQ(llama_memory_seq_pos_max(llama_get_memory(target.context()), 1), -1);
    committed.push_back('r');
  }
  // A tree whose path is rejected at the root: nothing of it may remain.
  (void)target.score_tree(committed, tokens, parents);
  committed.push_back('q');  // no child of the root has this token
  const std::span<const float> next = target(committed, 1);
  const std::vector<float> got(next.begin(), next.end());
  fresh.reset();
  const std::span<const float> want = fresh(committed, 1);
  worst = std::max(worst, max_abs_diff(got, want));
  EXPECT_LT(worst, 5e-3f);
}

/// The message of what `f` throws (std::invalid_argument), "" if it throws nothing.
template <class F>
std::string invalid_argument_message(F&& f) {
  try {
    f();
  } catch (const std::invalid_argument& error) {
    return error.what();
  }
  return {};
}

TEST(LlamaCppTree, KeepsThePathAndPositionsTreeContextCacheKeeps) {
  llama::ContextOptions options = exact_options();
  options.n_seq_max = 8;
  auto target = llama::LoadedModel::load(kGgufDir / "kjv-target-f32.gguf", options);
  auto fresh = llama::LoadedModel::load(kGgufDir / "kjv-target-f32.gguf", exact_options());
  const std::vector<token_t> committed = bytes_of("\nGenesis 1:1 In the beginning ");
  struct Case {
    std::vector<token_t> tokens;
    std::vector<std::int32_t> parents;
    std::string continuation;  // what the next context has after `committed`
    std::size_t kept;          // tree nodes TreeContextCache keeps
  };
  // Siblings sharing a token (drawn with replacement): the deeper path may run through any of
  // them, not only the first.
  const std::vector<Case> cases{
      {{'G', 'G', 'a', 'o', 'd'}, {-1, -1, 0, 1, 3}, "God ", 3},
      {{'G', 'G', 'a', 'o', 'd'}, {-1, -1, 0, 1, 3}, "Ga", 2},
      {{'G', 'G', 'a', 'o', 'd'}, {-1, -1, 0, 1, 3}, "Gx", 1},
      {{'G', 'G', 'a', 'o', 'd'}, {-1, -1, 0, 1, 3}, "q", 0},
      {{'G', 'o', 'o', 'd', ' '}, {-1, 0, 0, 2, 1}, "God", 3},
      {{'G', 'o', 'o', 'd', ' '}, {-1, 0, 0, 2, 1}, "Go c", 3},
      {{'G', 'o', 'o', 'd', ' '}, {-1, 0, 0, 2, 1}, "Go", 2},
  };
  llama_memory_t memory = llama_get_memory(target.context());
  for (const Case& c : cases) {
    SCOPED_TRACE(c.continuation);
    target.reset();
    (void)target.score_tree(committed, c.tokens, c.parents);
    specdec::TreeContextCache cache;
    (void)cache.update_tree(committed, c.tokens, c.parents);
    // The next context ends with a token outside the vocabulary: the call settles the tree,
    // plans, and throws before decoding, so what the adapter kept is left to read.
    std::vector<token_t> next = committed;
    next.insert(next.end(), c.continuation.begin(), c.continuation.end());
    next.push_back(999);
    const specdec::TreeCacheUpdate plan = cache.update(next, 1);
    ASSERT_EQ(plan.kept_nodes.size(), c.kept);
    EXPECT_THROW((void)target(next, 1), std::invalid_argument);
    const std::vector<token_t> kept(target.cached_tokens().begin(), target.cached_tokens().end());
    EXPECT_EQ(kept, std::vector<token_t>(next.begin(),
                                         next.begin() + static_cast<std::ptrdiff_t>(plan.keep)));
    ASSERT_EQ(kept.size(), committed.size() + c.kept);
    for (std::size_t d = 0; d < c.kept; ++d) {
      EXPECT_EQ(kept[committed.size() + d], c.tokens[plan.kept_nodes[d]]) << "depth " << d;
    }
    // Positions: sequence 0 holds exactly [0, keep); no path sequence remains.
    EXPECT_EQ(llama_memory_seq_pos_min(memory, 0), 0);
    EXPECT_EQ(llama_memory_seq_pos_max(memory, 0), static_cast<llama_pos>(plan.keep) - 1);
    for (llama_seq_id sequence = 1; sequence < 8; ++sequence) {
      EXPECT_EQ(llama_memory_seq_pos_max(memory, sequence), -1) << "sequence " << sequence;
    }
    // And the kept rows are right: the next call equals a fresh context's.
    next.back() = 'e';
    const std::span<const float> got_rows = target(next, 2);
    const std::vector<float> got(got_rows.begin(), got_rows.end());
    fresh.reset();
    EXPECT_LT(max_abs_diff(got, fresh(next, 2)), 5e-3f);
  }
}

TEST(LlamaCppTree, TopologyErrorsSayWhatTheOtherUsersSay) {
  llama::ContextOptions options;
  options.n_seq_max = 3;
  options.name = "target";
  auto target = llama::LoadedModel::load(kGgufDir / "kjv-target-f16.gguf", options);
  const std::vector<token_t> committed = bytes_of("\nExodus 2:3 ");
  const std::vector<token_t> tokens{'a', 'b', 'c'};
  for (const std::vector<std::int32_t>& parents :
       {std::vector<std::int32_t>{-1, 2, 0}, std::vector<std::int32_t>{-1, 0, -2},
        std::vector<std::int32_t>{-1, 0}}) {
    specdec::TreeContextCache cache;
    const std::string cache_error =
        invalid_argument_message([&] { (void)cache.update_tree(committed, tokens, parents); });
    ASSERT_FALSE(cache_error.empty());
    EXPECT_EQ(
        invalid_argument_message([&] { (void)target.score_tree(committed, tokens, parents); }),
        "specdec: llama.cpp model 'target' score_tree: " +
            std::string(specdec::message_without_prefix(cache_error)));
  }
  // Still usable after the errors.
  EXPECT_EQ(target.score_tree(committed, tokens, std::vector<std::int32_t>{-1, 0, 1}).size(),
            4 * target.vocab_size());
}

TEST(LlamaCppTree, BadTreesAreClearErrors) {
  llama::ContextOptions options;
  options.n_seq_max = 3;
  auto target = llama::LoadedModel::load(kGgufDir / "kjv-target-f16.gguf", options);
  const std::vector<token_t> committed = bytes_of("\nExodus 2:3 ");
  const std::vector<token_t> tokens{'a', 'b', 'c'};
  expect_error<std::invalid_argument>(
      [&] {
        (void)target.score_tree(committed, tokens, std::vector<std::int32_t>{-1, 2, 0});
      },
      "node 1 has parent 2");
  expect_error<std::invalid_argument>(
      [&] {
        (void)target.score_tree(committed, tokens, std::vector<std::int32_t>{-1, -1, -1});
      },
      "3 leaves needs 4 sequences");
  expect_error<std::invalid_argument>(
      [&] {
        (void)target.score_tree(committed, std::vector<token_t>{'a', 999},
                                std::vector<std::int32_t>{-1, 0});
      },
      "token 999");
  // Still usable: a valid tree scores, and the chain call after it is right.
  const std::span<const float> rows =
      target.score_tree(committed, tokens, std::vector<std::int32_t>{-1, 0, -1});
  EXPECT_EQ(rows.size(), 4 * target.vocab_size());
}

// ---- exactness at T > 0 -------------------------------------------------------------------------

/// The target's law of the first two tokens after `prompt` at temperature T (V^2 cells, x1 * V +
/// x2), from the adapter's own rows, in double.
std::vector<double> two_token_law(llama::ContextModel& target, const std::vector<token_t>& prompt,
                                  double temperature) {
  const std::size_t vocab = target.vocab_size();
  const auto softmax = [&](std::span<const float> row) {
    std::vector<double> p(row.size());
    const double top = *std::max_element(row.begin(), row.end());
    double sum = 0;
    for (std::size_t v = 0; v < row.size(); ++v)
      sum += p[v] = std::exp((row[v] - top) / temperature);
    for (double& x : p) x /= sum;
    return p;
  };
  target.reset();
  const std::vector<double> first = softmax(target(prompt));
  std::vector<double> law(vocab * vocab);
  std::vector<token_t> context = prompt;
  for (std::size_t x1 = 0; x1 < vocab; ++x1) {
    context.resize(prompt.size());
    context.push_back(static_cast<token_t>(x1));
    const std::vector<double> second = softmax(target(context));
    for (std::size_t x2 = 0; x2 < vocab; ++x2) law[x1 * vocab + x2] = first[x1] * second[x2];
  }
  return law;
}

TEST(LlamaCppExactness, FirstTwoTokensFollowTheTargetAtTemperatureOne) {
  auto target = llama::LoadedModel::load(kGgufDir / "tiny-target.gguf", exact_options());
  auto draft = llama::LoadedModel::load(kGgufDir / "tiny-draft.gguf", exact_options());
  llama::check_compatible(draft.model(), target.model());
  const std::size_t vocab = target.vocab_size();
  ASSERT_LE(vocab, 32u);  // V^2 cells must stay few for the test to have power
  const std::vector<token_t> prompt{1, 2, 3};
  const std::vector<double> law = two_token_law(target, prompt, 1.0);
  const std::vector<double> draft_law = two_token_law(draft, prompt, 1.0);

  specdec::SpeculativeDecoder decoder(draft, target);
  specdec::GenerationConfig config;
  config.max_new_tokens = 2;
  config.draft_length = 2;
  config.sampling.temperature = 1.0f;
  config.logprobs = false;
  constexpr std::size_t kRuns = 40000;
  for (const auto verifier : {specdec::VerifierKind::token, specdec::VerifierKind::block}) {
    config.verifier = verifier;
    std::vector<std::uint64_t> counts(vocab * vocab);
    std::size_t accepted = 0;
    for (std::size_t run = 0; run < kRuns; ++run) {
      config.seed = run;
      const auto result = decoder.generate(prompt, config);
      ++counts[specdec::testing::cell_of(result.tokens, vocab, 2)];
      accepted += result.stats.accepted;
    }
    const auto fit = specdec::testing::chi_square_test(counts, law);
    EXPECT_GT(fit.p_value, 1e-4) << "verifier " << static_cast<int>(verifier);
    // Power: the same counts against the draft's law must be rejected (the pair differs).
    EXPECT_LT(specdec::testing::chi_square_test(counts, draft_law).p_value, 1e-4);
    // Partial acceptance: the test exercised rejections and acceptances both.
    EXPECT_GT(accepted, kRuns / 10);
    EXPECT_LT(accepted, 2 * kRuns - kRuns / 10);
  }
}

// ---- errors -------------------------------------------------------------------------------------

/// Greedy tokens of a fresh decoder over fresh models: what every decode after an error must give.
std::vector<token_t> fresh_greedy(const std::vector<token_t>& prompt,
                                  const specdec::GenerationConfig& config) {
  auto target = llama::LoadedModel::load(kGgufDir / "kjv-target-f16.gguf");
  auto draft = llama::LoadedModel::load(kGgufDir / "kjv-draft-f16.gguf");
  specdec::SpeculativeDecoder decoder(draft, target);
  return decoder.generate(prompt, config).tokens;
}

TEST(LlamaCppErrors, MissingAndInvalidFiles) {
  expect_error<std::invalid_argument>(
      [] { (void)llama::LoadedModel::load("/nonexistent/model.gguf"); }, "no such file");
  const fs::path garbage = fs::temp_directory_path() / "specdec-not-a-gguf.gguf";
  std::ofstream(garbage) << "this is not a GGUF file, just some text of sufficient length";
  expect_error<std::invalid_argument>([&] { (void)llama::LoadedModel::load(garbage); },
                                      "cannot load GGUF model");
  fs::remove(garbage);
}

// llama_init_from_model aborts the process (GGML_ASSERT in output_reserve) when n_seq_max
// exceeds its output rows, min(n_ctx, n_batch): load must say so first. Each case runs in a
// child process, so an abort fails this test instead of killing the test binary.
TEST(LlamaCppErrorsDeathTest, SequencesBeyondTheOutputRowsAreInvalidArguments) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const auto expect_invalid = [](const llama::ContextOptions& options, const std::string& needle) {
    SCOPED_TRACE(needle);
    EXPECT_EXIT(
        {
          try {
            (void)llama::LoadedModel::load(kGgufDir / "kjv-draft-f16.gguf", options);
          } catch (const std::invalid_argument& error) {
            const std::string message = error.what();
            std::exit(message.rfind("specdec: cannot create a llama.cpp context", 0) == 0 &&
                              message.find(needle) != std::string::npos
                          ? 0
                          : 3);
          }
          std::exit(4);
        },
        ::testing::ExitedWithCode(0), "");
  };
  expect_invalid({.n_ctx = 8, .n_seq_max = 17},
                 "n_seq_max = 17 sequences need as many output rows");
  expect_invalid({.n_ctx = 64, .n_seq_max = 65}, "min(n_ctx = 64, n_batch = ");
  expect_invalid({.n_ctx = 256, .n_batch = 8, .n_seq_max = 9}, "expected n_seq_max <= 8");
  expect_invalid({.n_ctx = 256, .n_batch = 8, .n_ubatch = 2, .n_seq_max = 9}, "n_batch = 8)");
  expect_invalid({.n_seq_max = 257}, "expected at most 256");
  llama::ContextOptions named{.n_ctx = 16, .n_seq_max = 17};
  named.name = "draft";
  expect_invalid(named, "the draft model ('");
  // Right at the bound: a context is created, and scores a tree with n_seq_max - 1 leaves.
  auto model = llama::LoadedModel::load(kGgufDir / "kjv-draft-f16.gguf",
                                        {.n_ctx = 256, .n_batch = 8, .n_seq_max = 8});
  const std::vector<token_t> committed = bytes_of("\nRuth 1:1 ");
  EXPECT_EQ(model
                .score_tree(committed, std::vector<token_t>{'a', 'b', 'c'},
                            std::vector<std::int32_t>{-1, -1, -1})
                .size(),
            4 * model.vocab_size());
}

TEST(LlamaCppErrors, ErrorsNameTheModel) {
  // A TreeProposer's draft needs the sequences too: the error says which model lacks them.
  auto draft = llama::LoadedModel::load(kGgufDir / "kjv-draft-f16.gguf", {.name = "draft"});
  EXPECT_EQ(draft.name(), "draft");
  const std::vector<token_t> committed = bytes_of("\nRuth 1:2 ");
  expect_error<std::invalid_argument>(
      [&] {
        (void)draft.score_tree(committed, std::vector<token_t>{'a', 'b'},
                               std::vector<std::int32_t>{-1, -1});
      },
      "llama.cpp model 'draft' score_tree: a tree with 2 leaves needs 3 sequences");
  expect_error<std::invalid_argument>(
      [&] {
        (void)draft.score_tree(committed, std::vector<token_t>{'a', 'b'},
                               std::vector<std::int32_t>{-1, -1});
      },
      "a TreeProposer's draft needs it");
  // Unnamed: the GGUF file's name.
  auto target = llama::LoadedModel::load(kGgufDir / "kjv-target-f16.gguf");
  expect_error<std::invalid_argument>(
      [&] {
        (void)target(std::vector<token_t>{1, 300}, 1);
      },
      "llama.cpp model 'kjv-target-f16.gguf' got token 300");
  // Through TreeProposer and the decoder: the draft's context is too small for the tree.
  specdec::StrategyDecoder decoder(target,
                                   specdec::TreeProposer(draft, {specdec::TreeShape::parse("2x1")}),
                                   specdec::StaticDraftLength{}, specdec::TreeVerifier{});
  specdec::GenerationConfig config;
  config.draft_length = 4;
  config.max_new_tokens = 8;
  config.sampling.temperature = 0;
  expect_error<std::invalid_argument>([&] { (void)decoder.generate(committed, config); },
                                      "llama.cpp model 'draft' score_tree");
}

TEST(LlamaCppErrors, IncompatibleVocabulariesNameTheMismatch) {
  auto target = llama::LoadedModel::load(kGgufDir / "kjv-target-f16.gguf");
  auto tiny = llama::LoadedModel::load(kGgufDir / "tiny-target.gguf");
  expect_error<std::domain_error>(
      [&] { (void)llama::check_compatible(tiny.model(), target.model()); },
      "draft and target vocabularies are not identical: token-level intersection (16 shared "
      "tokens");
  // The decoder itself catches it too, before anything is emitted.
  specdec::SpeculativeDecoder decoder(tiny, target);
  specdec::GenerationConfig config;
  config.sampling.temperature = 0;
  EXPECT_THROW((void)decoder.generate(std::vector<token_t>{1, 2}, config), std::domain_error);
}

TEST(LlamaCppErrors, LearnedPositionsBoundTheContext) {
  // The tiny model has 128 learned positions; llama.cpp rounds n_ctx up to 256. A 200-token
  // context must be a clear error, not ggml's assertion in the position-embedding lookup.
  auto tiny = llama::LoadedModel::load(kGgufDir / "tiny-target.gguf", {.n_ctx = 200});
  EXPECT_EQ(tiny.max_context(), 128u);
  const std::vector<token_t> context(200, 1);
  expect_error<std::invalid_argument>([&] { (void)tiny(context, 1); }, "more than its n_ctx = 128");
  EXPECT_EQ(tiny(std::span(context).first(128), 1).size(), tiny.vocab_size());
}

TEST(LlamaCppErrors, BadCallsThenAFreshDecode) {
  auto target = llama::LoadedModel::load(kGgufDir / "kjv-target-f16.gguf", {.n_ctx = 64});
  auto draft = llama::LoadedModel::load(kGgufDir / "kjv-draft-f16.gguf", {.n_ctx = 64});
  specdec::SpeculativeDecoder decoder(draft, target);
  specdec::GenerationConfig config;
  config.max_new_tokens = 24;
  config.draft_length = 5;
  config.sampling.temperature = 0;
  const std::vector<token_t> prompt = bytes_of("\nGenesis 1:1 ");
  const std::vector<token_t> expected = fresh_greedy(prompt, config);

  // A prompt longer than n_ctx (llama.cpp may round the 64 asked for up: use what it chose),
  // from the adapter (no max_context set) and from the decoder (max_context set).
  const std::size_t n_ctx = target.max_context();
  ASSERT_GE(n_ctx, 64u);
  const std::vector<token_t> too_long(n_ctx + 1, 'a');
  expect_error<std::invalid_argument>([&] { (void)decoder.generate(too_long, config); },
                                      "more than its n_ctx = " + std::to_string(n_ctx));
  config.max_context = std::min(target.max_context(), draft.max_context());
  expect_error<std::invalid_argument>([&] { (void)decoder.generate(too_long, config); },
                                      "more than max_context = " + std::to_string(n_ctx));
  EXPECT_EQ(decoder.generate(prompt, config).tokens, expected);

  // A token outside the vocabulary never reaches llama_decode.
  expect_error<std::invalid_argument>(
      [&] {
        (void)target(std::vector<token_t>{1, 300, 2}, 1);
      },
      "token 300 at position 1");
  expect_error<std::invalid_argument>(
      [&] {
        (void)target(std::vector<token_t>{1, 2}, 3);
      },
      "asked for 3 rows");
  EXPECT_EQ(decoder.generate(prompt, config).tokens, expected);
}

TEST(LlamaCppErrors, FailedDecodeRollsBackTheKvCache) {
  // Micro-batches of 4 tokens; the abort callback stops llama_decode part-way through a
  // prompt, after some micro-batches are already in the KV cache (llama.h: they stay there).
  llama::ContextOptions options;
  options.n_batch = 64;
  options.n_ubatch = 4;
  auto target = llama::LoadedModel::load(kGgufDir / "kjv-target-f16.gguf", options);
  auto draft = llama::LoadedModel::load(kGgufDir / "kjv-draft-f16.gguf");
  struct Abort {
    std::size_t calls = 0, abort_after = SIZE_MAX;
  } abort;
  llama_set_abort_callback(
      target.context(),
      [](void* data) {
        auto* a = static_cast<Abort*>(data);
        return ++a->calls > a->abort_after;
      },
      &abort);
  specdec::SpeculativeDecoder decoder(draft, target);
  specdec::GenerationConfig config;
  config.max_new_tokens = 24;
  config.draft_length = 5;
  config.sampling.temperature = 0;
  config.max_context = target.max_context();
  const std::vector<token_t> prompt = bytes_of("\nGenesis 1:1 In the beginning God created");
  const std::vector<token_t> expected = fresh_greedy(prompt, config);
  (void)target(prompt, 1);  // count the callback's calls for one whole prompt
  const std::size_t per_prompt = abort.calls;
  target.reset();
  for (const std::size_t fraction : {0u, 1u, 2u}) {  // abort at once, a third in, two thirds in
    abort.calls = 0;
    abort.abort_after = per_prompt * fraction / 3;
    expect_error<std::runtime_error>([&] { (void)decoder.generate(prompt, config); },
                                     "llama_decode returned 2 (aborted");
    // The record and the KV cache agree: every cached position is really in the memory.
    const llama_pos max_position = llama_memory_seq_pos_max(llama_get_memory(target.context()), 0);
    EXPECT_EQ(static_cast<std::int64_t>(target.cached_tokens().size()) - 1, max_position);
    abort.abort_after = SIZE_MAX;
    EXPECT_EQ(decoder.generate(prompt, config).tokens, expected);
  }
}

}  // namespace

// BatchedModel (specdec/llama_cpp/batched_model.hpp) under BatchedDecoder, on the shipped KJV pair
// converted to GGUF (f16 weights, llama.cpp's default context settings):
//
// - greedy: every sequence of a batch (B = 1, 3; prompts of different lengths; one joining
//   mid-way) emits the tokens the single-sequence SpeculativeDecoder over ContextModels gives it
//   alone. llama.cpp's rows can depend on the batch's composition (ggml picks kernels and
//   summation orders by the shape of the call), so a greedy choice between two logits closer
//   than that rounding may flip: such a divergence is counted as a near-tie (the reference's top
//   two logits within kNearTie) and reported; any other divergence fails;
// - a sequence leaving frees its llama.cpp sequence (its KV cells dropped), and a later sequence
//   reuses it and decodes as alone;
// - more sequences than n_seq_max, and a KV cache too small for the call, are clear errors naming
//   the sequences, and the decodes after them equal fresh ones;
// - keep_freed_heap: a block of the size llama_decode copies and frees per call comes from the
//   heap and stays mapped when freed.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <specdec/batch.hpp>
#include <specdec/llama_cpp.hpp>
#include <specdec/specdec.hpp>

// glibc's malloc serves this program unless a sanitizer brings its own.
#if defined(__GLIBC__) && !defined(__SANITIZE_ADDRESS__)
#if !defined(__has_feature)
#define SPECDEC_TEST_GLIBC_MALLOC 1
#elif !__has_feature(address_sanitizer)
#define SPECDEC_TEST_GLIBC_MALLOC 1
#endif
#endif
#if defined(SPECDEC_TEST_GLIBC_MALLOC)
#include <unistd.h>
#endif

namespace {

namespace fs = std::filesystem;
namespace llama = specdec::llama_cpp;
using specdec::sequence_id;
using specdec::token_t;

const fs::path kGgufDir = SPECDEC_GGUF_DIR;
const fs::path kModelsDir = SPECDEC_MODELS_DIR;

/// The largest gap between the top two logits a batch's rounding may flip. Rows of one context
/// computed in calls of different shapes differ by ~1e-3 here (f16 weights and KV cache); a
/// wrong row (another position, another sequence's cells) is off by units.
constexpr float kNearTie = 0.02f;

std::vector<token_t> bytes_of(std::string_view text) {
  std::vector<token_t> tokens;
  for (const unsigned char byte : text) tokens.push_back(byte);
  return tokens;
}

/// Held-out verses of different lengths, as prompts after a newline (as in training).
std::vector<std::vector<token_t>> prompts(std::size_t count) {
  std::ifstream in(kModelsDir / "prompts.txt");
  std::vector<std::vector<token_t>> all;
  std::size_t cut = 12;
  for (std::string line; all.size() < count && std::getline(in, line);) {
    // Cut to different lengths: 12, 27, 42, ... bytes (or the whole verse).
    std::string text(1, '\n');
    text.append(line, 0, std::min(line.size(), cut));
    all.push_back(bytes_of(text));
    cut += 15;
  }
  return all;
}

specdec::GenerationConfig greedy_config(std::size_t max_new_tokens, std::size_t draft_length,
                                        std::size_t max_context) {
  specdec::GenerationConfig config;
  config.max_new_tokens = max_new_tokens;
  config.draft_length = draft_length;
  config.sampling.temperature = 0;
  config.max_context = max_context;
  return config;
}

/// The pair loaded for one sequence at a time: the reference decoder.
struct AlonePair {
  llama::LoadedModel target = llama::LoadedModel::load(kGgufDir / "kjv-target-f16.gguf");
  llama::LoadedModel draft = llama::LoadedModel::load(kGgufDir / "kjv-draft-f16.gguf");

  std::vector<token_t> decode(const std::vector<token_t>& prompt,
                              const specdec::GenerationConfig& config) {
    target.reset();
    draft.reset();
    specdec::SpeculativeDecoder decoder(draft, target);
    return decoder.generate(prompt, config).tokens;
  }

  /// The gap between the top two logits of the target's row after `context`.
  float top_two_gap(std::span<const token_t> context) {
    target.reset();
    const std::span<const float> row = target(context);
    std::vector<float> sorted(row.begin(), row.end());
    std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<>());
    target.reset();
    return sorted[0] - sorted[1];
  }
};

/// The pair loaded for `sequences` sequences at once; `kv_unified` as ContextOptions' (default:
/// batched_context_options's split cache).
struct BatchedPair {
  explicit BatchedPair(std::uint32_t sequences, std::uint32_t per_sequence = 384,
                       int kv_unified = -1)
      : target_context(llama::LoadedModel::load(
            kGgufDir / "kjv-target-f16.gguf",
            llama::batched_context_options(sequences, per_sequence,
                                           {.kv_unified = kv_unified, .name = "target"}))),
        draft_context(llama::LoadedModel::load(
            kGgufDir / "kjv-draft-f16.gguf",
            llama::batched_context_options(sequences, per_sequence,
                                           {.kv_unified = kv_unified, .name = "draft"}))),
        target(target_context),
        draft(draft_context) {}

  llama::LoadedModel target_context, draft_context;
  llama::BatchedModel target, draft;
};

using Decoder =
    specdec::BatchedDecoder<llama::BatchedModel, specdec::ModelProposer<llama::BatchedModel>>;

/// Compares a batched sequence's tokens with the reference's: equal, or a divergence at a
/// near-tie (counted); anything else fails the test.
std::size_t check_against_alone(AlonePair& alone, const std::vector<token_t>& prompt,
                                const std::vector<token_t>& batched,
                                const std::vector<token_t>& reference, const std::string& what) {
  EXPECT_EQ(batched.size(), reference.size()) << what;
  const auto [b, r] =
      std::mismatch(batched.begin(), batched.end(), reference.begin(), reference.end());
  if (b == batched.end() || r == reference.end()) return 0;
  const auto at = static_cast<std::size_t>(r - reference.begin());
  std::vector<token_t> context = prompt;
  context.insert(context.end(), reference.begin(), r);
  const float gap = alone.top_two_gap(context);
  std::printf("[ near-tie ] %s: first difference at token %zu, top-two gap %.4g\n", what.c_str(),
              at, static_cast<double>(gap));
  EXPECT_LT(gap, kNearTie) << what << ": tokens differ at " << at
                           << " where the reference's choice is not a near-tie";
  return 1;
}

/// The KV cache's layouts: split (batched_context_options's default), unified.
class LlamaCppBatchedLayout : public ::testing::TestWithParam<int> {};

TEST_P(LlamaCppBatchedLayout, GreedyBatchEqualsEachSequenceAlone) {
  AlonePair alone;
  const std::vector<std::vector<token_t>> all = prompts(4);
  std::size_t near_ties = 0, compared = 0;
  for (const std::uint32_t width : {1u, 3u}) {
    BatchedPair pair(width + 1, 384, GetParam());  // + 1: the sequence joining mid-way
    ASSERT_EQ(pair.target.max_sequences(), width + 1);
    const std::size_t max_context = std::min(pair.target.max_context(), pair.draft.max_context());
    ASSERT_EQ(max_context, 384u);
    Decoder decoder(pair.target, specdec::ModelProposer(pair.draft));
    std::map<sequence_id, specdec::GenerationConfig> configs;
    std::map<sequence_id, std::vector<token_t>> outputs;
    const auto add = [&](sequence_id id) {
      // Different budgets and draft lengths: sequences leave at different steps and their
      // calls have different row counts.
      configs[id] = greedy_config(40 + 8 * id, 3 + 2 * (id % 3), max_context);
      decoder.add(id, all[id], configs[id]);
    };
    for (sequence_id id = 0; id < width; ++id) add(id);
    std::size_t steps = 0;
    while (!decoder.empty()) {
      for (specdec::FinishedSequence& done : decoder.step()) {
        ASSERT_FALSE(done.error) << "sequence " << done.id;
        outputs[done.id] = std::move(done.result.tokens);
      }
      if (++steps == 3) add(width);  // joins mid-way, the others' KV caches in place
    }
    ASSERT_EQ(outputs.size(), width + 1u);
    EXPECT_EQ(pair.target.sequences_held(), 0u);
    EXPECT_EQ(pair.draft.sequences_held(), 0u);
    // Calls were shared: at most one target call per step.
    EXPECT_LE(decoder.stats().target_calls, decoder.stats().steps);
    if (width > 1) {
      EXPECT_GT(decoder.stats().rounds_per_target_call(), 1.5);
    }
    for (const auto& [id, tokens] : outputs) {
      const std::vector<token_t> reference = alone.decode(all[id], configs[id]);
      near_ties +=
          check_against_alone(alone, all[id], tokens, reference,
                              "B = " + std::to_string(width) + ", sequence " + std::to_string(id));
      ++compared;
    }
  }
  std::printf("[ measured ] %s KV cache: %zu of %zu sequences diverged at a near-tie\n",
              GetParam() == 0 ? "split" : "unified", near_ties, compared);
  EXPECT_LE(near_ties, 1u);
}

INSTANTIATE_TEST_SUITE_P(KvCache, LlamaCppBatchedLayout, ::testing::Values(0, 1),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return std::string(info.param == 0 ? "Split" : "Unified");
                         });

TEST(LlamaCppBatched, ALeavingSequenceFreesItsLlamaSequenceForTheNext) {
  AlonePair alone;
  BatchedPair pair(2);
  const std::vector<std::vector<token_t>> all = prompts(3);
  const std::size_t max_context = std::min(pair.target.max_context(), pair.draft.max_context());
  const specdec::GenerationConfig short_config = greedy_config(12, 4, max_context);
  const specdec::GenerationConfig long_config = greedy_config(64, 4, max_context);
  Decoder decoder(pair.target, specdec::ModelProposer(pair.draft));
  decoder.add(10, all[0], short_config);
  decoder.add(11, all[1], long_config);
  (void)decoder.step();
  const llama_seq_id held = pair.target.llama_sequence(10);
  ASSERT_GE(held, 0);
  ASSERT_NE(held, pair.target.llama_sequence(11));
  std::map<sequence_id, std::vector<token_t>> outputs;
  while (decoder.contains(10)) {
    for (specdec::FinishedSequence& done : decoder.step()) {
      outputs[done.id] = std::move(done.result.tokens);
    }
  }
  // Released: no llama.cpp sequence, no KV cells, in either model; 11 keeps its own.
  EXPECT_EQ(pair.target.llama_sequence(10), -1);
  EXPECT_EQ(pair.draft.llama_sequence(10), -1);
  EXPECT_EQ(pair.target.sequences_held(), 1u);
  EXPECT_EQ(llama_memory_seq_pos_max(llama_get_memory(pair.target.context()), held), -1);
  EXPECT_GT(pair.target.cached_tokens(11).size(), all[1].size());
  // The next sequence takes the freed llama.cpp sequence (n_seq_max = 2: the only one free).
  decoder.add(12, all[2], long_config);
  (void)decoder.step();
  EXPECT_EQ(pair.target.llama_sequence(12), held);
  for (specdec::FinishedSequence& done : decoder.run()) {
    outputs[done.id] = std::move(done.result.tokens);
  }
  ASSERT_EQ(outputs.size(), 3u);
  std::size_t near_ties = 0;
  near_ties += check_against_alone(alone, all[0], outputs[10], alone.decode(all[0], short_config),
                                   "sequence 10");
  near_ties += check_against_alone(alone, all[1], outputs[11], alone.decode(all[1], long_config),
                                   "sequence 11");
  near_ties += check_against_alone(alone, all[2], outputs[12], alone.decode(all[2], long_config),
                                   "sequence 12 (reusing 10's llama.cpp sequence)");
  EXPECT_LE(near_ties, 1u);
}

/// The error's message, nested ones included ("a: b: c").
std::string full_message(const std::exception& error) {
  std::string message = error.what();
  try {
    std::rethrow_if_nested(error);
  } catch (const std::exception& nested) {
    message += " <- " + full_message(nested);
  }
  return message;
}

TEST(LlamaCppBatched, TooManySequencesIsAClearErrorAndTheNextDecodeIsClean) {
  AlonePair alone;
  BatchedPair pair(2);
  const std::vector<std::vector<token_t>> all = prompts(3);
  const std::size_t max_context = std::min(pair.target.max_context(), pair.draft.max_context());
  const specdec::GenerationConfig config = greedy_config(24, 4, max_context);
  Decoder decoder(pair.target, specdec::ModelProposer(pair.draft));
  for (sequence_id id = 1; id <= 3; ++id) decoder.add(id, all[id - 1], config);
  try {
    (void)decoder.step();
    ADD_FAILURE() << "three sequences on n_seq_max = 2 decoded";
  } catch (const std::runtime_error& error) {
    const std::string message = full_message(error);
    EXPECT_EQ(message.rfind("specdec: the batched draft call for sequences 1, 2, 3 failed", 0), 0u)
        << message;
    EXPECT_NE(message.find("llama.cpp model 'draft': sequence 3 needs a llama.cpp sequence of "
                           "its own"),
              std::string::npos)
        << message;
    EXPECT_NE(message.find("n_seq_max = 2 (held by none; taken in this call by sequence 1, "
                           "sequence 2)"),
              std::string::npos)
        << message;
  }
  // The batch was dropped and every sequence released.
  EXPECT_TRUE(decoder.empty());
  EXPECT_EQ(pair.draft.sequences_held(), 0u);
  EXPECT_EQ(pair.target.sequences_held(), 0u);
  // The same ids decode again, as alone.
  decoder.add(1, all[0], config);
  decoder.add(3, all[2], config);
  std::map<sequence_id, std::vector<token_t>> outputs;
  for (specdec::FinishedSequence& done : decoder.run()) {
    ASSERT_FALSE(done.error);
    outputs[done.id] = std::move(done.result.tokens);
  }
  std::size_t near_ties = 0;
  near_ties += check_against_alone(alone, all[0], outputs[1], alone.decode(all[0], config),
                                   "sequence 1 after the error");
  near_ties += check_against_alone(alone, all[2], outputs[3], alone.decode(all[2], config),
                                   "sequence 3 after the error");
  EXPECT_LE(near_ties, 1u);
}

TEST(LlamaCppBatched, AFullKvCacheRollsBackEverySequenceOfTheCall) {
  // 2 sequences sharing the 256 cells of a unified cache (llama.cpp rounds n_ctx up to a
  // multiple of 256): two 150-token contexts do not fit together, each fits alone.
  BatchedPair pair(2, 100, 1);
  llama::BatchedModel& target = pair.target;
  ASSERT_EQ(llama_n_ctx(target.context()), 256u);
  std::vector<token_t> a = prompts(1)[0], b = bytes_of("\nAnd God said, ");
  while (a.size() < 150) a.push_back('a' + static_cast<token_t>(a.size() % 26));
  while (b.size() < 150) b.push_back('z' - static_cast<token_t>(b.size() % 26));
  const std::vector<specdec::ScoreRequest> both{
      {.id = 1, .context = a, .committed = 149, .rows = 2},
      {.id = 2, .context = b, .committed = 149, .rows = 2}};
  try {
    (void)target.score_batch(both);
    ADD_FAILURE() << "300 tokens fit in 256 cells";
  } catch (const std::runtime_error& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("llama_decode returned 1 (no KV cache slot"), std::string::npos)
        << message;
    EXPECT_NE(message.find("for sequence 1, sequence 2"), std::string::npos) << message;
  }
  // The records and the memory agree: nothing of the failed call is cached.
  llama_memory_t memory = llama_get_memory(target.context());
  for (const sequence_id id : {1u, 2u}) {
    EXPECT_TRUE(target.cached_tokens(id).empty());
    EXPECT_EQ(llama_memory_seq_pos_max(memory, target.llama_sequence(id)), -1);
  }
  // Each alone fits, and its rows are a fresh context's.
  llama::LoadedModel fresh = llama::LoadedModel::load(kGgufDir / "kjv-target-f16.gguf");
  for (const auto& request : both) {
    const std::span<const float> rows = target.score_batch(std::span(&request, 1));
    const std::vector<float> got(rows.begin(), rows.end());
    fresh.reset();
    const std::span<const float> want = fresh(request.context, request.rows);
    ASSERT_EQ(got.size(), want.size());
    float worst = 0;
    for (std::size_t i = 0; i < got.size(); ++i)
      worst = std::max(worst, std::abs(got[i] - want[i]));
    EXPECT_LT(worst, 5e-3f) << "sequence " << request.id;
    target.release(request.id);
  }
  EXPECT_EQ(target.sequences_held(), 0u);
}

TEST(LlamaCppBatched, BadRequestsAreClearErrorsAndChangeNothing) {
  BatchedPair pair(2);
  llama::BatchedModel& target = pair.target;
  const std::vector<token_t> context = bytes_of("\nRuth 1:1 ");
  const std::vector<token_t> bad{'a', 300, 'b'};
  (void)target.score_batch(std::vector<specdec::ScoreRequest>{
      {.id = 5, .context = context, .committed = context.size(), .rows = 1}});
  const std::vector<token_t> cached(target.cached_tokens(5).begin(), target.cached_tokens(5).end());
  const auto expect_invalid = [&](const std::vector<specdec::ScoreRequest>& requests,
                                  const std::string& needle) {
    try {
      (void)target.score_batch(requests);
      ADD_FAILURE() << "expected an error containing '" << needle << "'";
    } catch (const std::invalid_argument& error) {
      const std::string message = error.what();
      EXPECT_EQ(message.rfind("specdec: llama.cpp model 'target': ", 0), 0u) << message;
      EXPECT_NE(message.find(needle), std::string::npos) << message;
    }
    EXPECT_EQ(target.sequences_held(), 1u);
    EXPECT_TRUE(std::ranges::equal(target.cached_tokens(5), cached));
  };
  expect_invalid({{.id = 6, .context = bad, .committed = 3, .rows = 1}},
                 "sequence 6 has token 300 at position 1");
  expect_invalid({{.id = 5, .context = context, .committed = 3, .rows = 1},
                  {.id = 5, .context = context, .committed = 3, .rows = 1}},
                 "sequence 5 appears twice");
  expect_invalid({{.id = 7, .context = context, .committed = 1, .rows = 99}}, "asked for 99 rows");
  expect_invalid({{.id = 7, .context = context, .committed = 1, .rows = 1},
                  {.id = 8, .context = context, .committed = 1, .rows = 1}},
                 "sequence 8 needs a llama.cpp sequence of its own and none is left: this "
                 "context holds n_seq_max = 2 (held by 5; taken in this call by sequence 7)");
}

// keep_freed_heap (backend.hpp): every llama_decode copies its KV cache's cell state and frees
// it (99.5 KB at 8 sequences of 260 positions, ~400 KB at 32). After keep_freed_heap such a block
// comes from the heap, and freeing it leaves the heap's end where it was: the next call finds its
// pages mapped. With glibc's defaults both checks fail (a block over 128 KB is mmap'd and unmapped
// on free; one ending the heap trims it).
TEST(LlamaCppHeap, ABlockFreedPerCallStaysMapped) {
#if !defined(SPECDEC_TEST_GLIBC_MALLOC)
  GTEST_SKIP() << "glibc's malloc only (a sanitizer brings its own)";
#else
  ASSERT_TRUE(llama::keep_freed_heap());
  constexpr std::size_t kBlock = std::size_t{400} << 10;
  char* const block = static_cast<char*>(std::malloc(kBlock));
  ASSERT_NE(block, nullptr);
  std::memset(block, 1, kBlock);
  char* const heap_end = static_cast<char*>(sbrk(0));
  EXPECT_LE(block + kBlock, heap_end) << "the block was mapped apart from the heap";
  std::free(block);
  EXPECT_EQ(static_cast<char*>(sbrk(0)), heap_end) << "freeing the block shrank the heap";
#endif
}

}  // namespace

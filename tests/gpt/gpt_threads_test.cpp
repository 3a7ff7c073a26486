// The example GPT on several threads (GptModel::set_threads, examples/gpt/phase_pool.hpp): the
// logits of every kind of call — prompt prefill in chunks, one row, n target rows, trees, and the
// calls after KV-cache rollbacks and kept tree paths — are bitwise equal for 1, 2 and 3 threads;
// greedy speculative decoding on threads is plain one-thread greedy decoding token for token; a
// threaded model stays usable after moves and thread-count changes; calls allocate nothing.
//
// Models: the shipped pair (SPECDEC_MODELS_DIR) and random models whose widths are not multiples
// of the 16 dot lanes nor of the 24-row item alignment, with enough heads and rows that every
// phase splits into several items.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "gpt/gpt_model.hpp"
#include "specdec/specdec.hpp"

#ifndef SPECDEC_MODELS_DIR
#error "gpt_threads_test needs SPECDEC_MODELS_DIR (see tests/CMakeLists.txt)"
#endif

namespace {

using specdec::token_t;
using specdec::examples::GptConfig;
using specdec::examples::GptLayerWeights;
using specdec::examples::GptModel;
using specdec::examples::GptWeights;
using specdec::examples::RowMajorMatrixXf;

const std::string kModelsDir = SPECDEC_MODELS_DIR;

// ---------------------------------------------------------------------------------------------
// Helpers

RowMajorMatrixXf random_matrix(std::size_t rows, std::size_t cols, std::mt19937_64& gen,
                               float scale) {
  std::uniform_real_distribution<float> uniform(-scale, scale);
  RowMajorMatrixXf m(static_cast<Eigen::Index>(rows), static_cast<Eigen::Index>(cols));
  for (Eigen::Index i = 0; i < m.size(); ++i) m.data()[i] = uniform(gen);
  return m;
}

Eigen::VectorXf random_vector(std::size_t size, std::mt19937_64& gen, float center, float scale) {
  std::uniform_real_distribution<float> uniform(center - scale, center + scale);
  Eigen::VectorXf v(static_cast<Eigen::Index>(size));
  for (Eigen::Index i = 0; i < v.size(); ++i) v[i] = uniform(gen);
  return v;
}

/// Random weights: d_model 72 and 6 heads of 12 (so 6 attention items), d_ff 200 and vocab 97
/// (9 and 5 item units of 24 rows, the last one short), none a multiple of the 16 dot lanes.
GptWeights random_weights(std::uint64_t seed) {
  GptConfig c;
  c.vocab_size = 97;
  c.max_context = 64;
  c.n_layer = 2;
  c.n_head = 6;
  c.d_model = 72;
  c.d_ff = 200;
  std::mt19937_64 gen(seed);
  GptWeights w;
  w.config = c;
  w.token_embedding = random_matrix(c.vocab_size, c.d_model, gen, 0.5f);
  w.position_embedding = random_matrix(c.max_context, c.d_model, gen, 0.5f);
  for (std::size_t l = 0; l < c.n_layer; ++l) {
    GptLayerWeights layer;
    layer.ln1_weight = random_vector(c.d_model, gen, 1.0f, 0.2f);
    layer.ln1_bias = random_vector(c.d_model, gen, 0.0f, 0.1f);
    layer.qkv_weight = random_matrix(3 * c.d_model, c.d_model, gen, 0.2f);
    layer.qkv_bias = random_vector(3 * c.d_model, gen, 0.0f, 0.1f);
    layer.proj_weight = random_matrix(c.d_model, c.d_model, gen, 0.2f);
    layer.proj_bias = random_vector(c.d_model, gen, 0.0f, 0.1f);
    layer.ln2_weight = random_vector(c.d_model, gen, 1.0f, 0.2f);
    layer.ln2_bias = random_vector(c.d_model, gen, 0.0f, 0.1f);
    layer.fc1_weight = random_matrix(c.d_ff, c.d_model, gen, 0.2f);
    layer.fc1_bias = random_vector(c.d_ff, gen, 0.0f, 0.1f);
    layer.fc2_weight = random_matrix(c.d_model, c.d_ff, gen, 0.1f);
    layer.fc2_bias = random_vector(c.d_model, gen, 0.0f, 0.1f);
    w.layers.push_back(std::move(layer));
  }
  w.lnf_weight = random_vector(c.d_model, gen, 1.0f, 0.2f);
  w.lnf_bias = random_vector(c.d_model, gen, 0.0f, 0.1f);
  return w;
}

GptModel random_model(std::size_t threads, std::size_t chunk_rows = GptModel::kDefaultChunkRows) {
  return GptModel(random_weights(7), chunk_rows, GptModel::kDefaultMaxTreeNodes, threads);
}

std::vector<token_t> random_tokens(std::size_t count, std::size_t vocab, std::uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::vector<token_t> tokens(count);
  for (token_t& t : tokens) t = static_cast<token_t>(gen() % vocab);
  return tokens;
}

std::vector<token_t> genesis() {
  const std::string text =
      "\nIn the beginning God created the heaven and the earth. And the earth was without form, "
      "and void; and darkness was upon the face of the deep. And the Spirit of God moved upon "
      "the face of the waters.";
  return {text.begin(), text.end()};
}

/// One call of a scripted sequence: a chain call target(context[0..length), n), or a tree call
/// score_tree(context[0..length), tree tokens, tree parents).
struct Call {
  std::size_t length;
  std::size_t n;      // chain: rows; 0 = the tree call
  std::size_t nodes;  // tree: how many nodes of the script's tree
};

/// A tree of up to 12 nodes: two children of the root, then two per node, breadth first.
struct Tree {
  std::vector<token_t> tokens;
  std::vector<std::int32_t> parents;
};

Tree binary_tree(std::size_t nodes, std::size_t vocab) {
  Tree tree{random_tokens(nodes, vocab, 99), {}};
  for (std::size_t i = 0; i < nodes; ++i)
    tree.parents.push_back(static_cast<std::int32_t>(i / 2) - 1);
  return tree;
}

/// The logits of every call of `calls`, on `model`, in order (each call's rows copied).
std::vector<std::vector<float>> run_script(GptModel& model, std::span<const token_t> context,
                                           std::span<const Call> calls) {
  std::vector<std::vector<float>> outputs;
  model.reset();
  for (const Call& call : calls) {
    const std::span<const token_t> prefix = context.first(call.length);
    std::span<const float> rows;
    if (call.n > 0) {
      rows = model.target(prefix, call.n);
    } else {
      const Tree tree = binary_tree(call.nodes, model.vocab_size());
      rows = model.score_tree(prefix, tree.tokens, tree.parents);
    }
    outputs.emplace_back(rows.begin(), rows.end());
  }
  return outputs;
}

/// Prefill in several chunks, one-row steps, n-row verifications, rollbacks (shorter contexts
/// than the cache holds), tree calls, and the chain calls after a tree (which keep a path of it:
/// the tree's node tokens are random, so the next call's context keeps at most a prefix of it).
std::vector<Call> mixed_calls(std::size_t context_size) {
  std::vector<Call> calls = {
      {40, 40, 0},               // prompt: three chunks of 16 (the last short), every row's logits
      {41, 1, 0},  {42, 1, 0},   // plain steps
      {51, 9, 0},                // verify 8 drafts
      {45, 2, 0},                // roll back 6 positions, verify 1
      {46, 1, 0},  {46, 0, 6},   // a tree of 6 nodes on 46 committed tokens
      {48, 3, 0},                // after the tree (its path mostly not kept)
      {30, 0, 12},               // a tree after a rollback
      {31, 1, 0},  {20, 20, 0},  // a long rollback, then all rows again
      {60, 16, 0},               // 16 rows in one chunk
  };
  for (Call& call : calls) call.length = std::min(call.length, context_size);
  return calls;
}

void expect_same_outputs(const std::vector<std::vector<float>>& expected,
                         const std::vector<std::vector<float>>& actual, std::size_t threads) {
  ASSERT_EQ(actual.size(), expected.size());
  for (std::size_t i = 0; i < expected.size(); ++i) {
    ASSERT_EQ(actual[i].size(), expected[i].size()) << "call " << i;
    EXPECT_EQ(std::memcmp(actual[i].data(), expected[i].data(), expected[i].size() * sizeof(float)),
              0)
        << "call " << i << " differs with " << threads << " threads";
  }
}

// ---------------------------------------------------------------------------------------------
// Bitwise equality across thread counts

TEST(GptThreads, RandomModelCallsAreBitwiseEqualForOneTwoThreeThreads) {
  const std::vector<token_t> context = random_tokens(64, 97, 3);
  const std::vector<Call> calls = mixed_calls(context.size());
  GptModel one = random_model(1);
  const auto expected = run_script(one, context, calls);
  for (const std::size_t threads : {2u, 3u}) {
    GptModel model = random_model(threads);
    ASSERT_EQ(model.threads(), threads);
    expect_same_outputs(expected, run_script(model, context, calls), threads);
    expect_same_outputs(expected, run_script(model, context, calls), threads);  // warm pool
  }
}

TEST(GptThreads, RandomModelSmallChunksAreBitwiseEqual) {
  const std::vector<token_t> context = random_tokens(64, 97, 4);
  const std::vector<Call> calls = mixed_calls(context.size());
  GptModel one = random_model(1, 5);
  const auto expected = run_script(one, context, calls);
  GptModel three = random_model(3, 5);
  expect_same_outputs(expected, run_script(three, context, calls), 3);
}

TEST(GptThreads, ShippedPairCallsAreBitwiseEqualForOneTwoThreeThreads) {
  const std::vector<token_t> context = genesis();
  const std::vector<Call> calls = mixed_calls(context.size());
  for (const char* name : {"kjv-target.spdc", "kjv-draft.spdc"}) {
    GptModel model = GptModel::from_file(kModelsDir + "/" + name);
    const auto expected = run_script(model, context, calls);
    for (const std::size_t threads : {2u, 3u}) {
      model.set_threads(threads);
      expect_same_outputs(expected, run_script(model, context, calls), threads);
    }
  }
}

TEST(GptThreads, ThreadedRowsEqualOneThreadSingleRowCalls) {
  // Row i of an n-row call on 2 threads == the one-row call of the same prefix on 1 thread.
  GptModel reference = GptModel::from_file(kModelsDir + "/kjv-target.spdc");
  GptModel threaded =
      GptModel::from_file(kModelsDir + "/kjv-target.spdc", GptModel::kDefaultChunkRows,
                          GptModel::kDefaultMaxTreeNodes, 2);
  const std::vector<token_t> context = genesis();
  const std::size_t vocab = reference.vocab_size();
  const std::size_t n = 9;
  const auto rows = threaded.target(context, n);
  for (std::size_t i = 0; i < n; ++i) {
    const auto row = reference.draft(std::span(context).first(context.size() - n + 1 + i));
    EXPECT_EQ(std::memcmp(rows.data() + i * vocab, row.data(), vocab * sizeof(float)), 0)
        << "row " << i;
  }
}

// ---------------------------------------------------------------------------------------------
// Decoding

TEST(GptThreads, GreedySpeculativeOnThreadsEqualsOneThreadPlainGreedy) {
  GptModel target = GptModel::from_file(kModelsDir + "/kjv-target.spdc");
  GptModel draft = GptModel::from_file(kModelsDir + "/kjv-draft.spdc");
  std::ifstream in(kModelsDir + "/prompts.txt");
  std::vector<std::vector<token_t>> prompts;
  for (std::string line; prompts.size() < 3 && std::getline(in, line);) {
    if (line.empty()) continue;
    std::vector<token_t>& prompt = prompts.emplace_back(1, token_t{'\n'});
    for (const unsigned char byte : line) prompt.push_back(byte);
  }
  ASSERT_EQ(prompts.size(), 3u);
  specdec::GenerationConfig config;
  config.max_new_tokens = 48;
  config.sampling.temperature = 0.0f;
  config.draft_length = 8;
  for (const auto& prompt : prompts) {
    target.set_threads(1);
    draft.set_threads(1);
    target.reset();
    specdec::AutoregressiveDecoder plain(target);
    const auto reference = plain.generate(prompt, config);
    for (const auto& [target_threads, draft_threads] :
         {std::pair<std::size_t, std::size_t>{2, 1}, {2, 2}, {3, 1}}) {
      target.set_threads(target_threads);
      draft.set_threads(draft_threads);
      target.reset();
      draft.reset();
      specdec::SpeculativeDecoder speculative(draft, target);
      EXPECT_EQ(speculative.generate(prompt, config).tokens, reference.tokens)
          << target_threads << " target threads, " << draft_threads << " draft threads";
      target.reset();
      specdec::AutoregressiveDecoder threaded_plain(target);
      EXPECT_EQ(threaded_plain.generate(prompt, config).tokens, reference.tokens);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Lifetime and configuration

TEST(GptThreads, ModelStaysUsableAfterMovesAndThreadChanges) {
  const std::vector<token_t> context = random_tokens(64, 97, 5);
  const std::vector<Call> calls = mixed_calls(context.size());
  GptModel one = random_model(1);
  const auto expected = run_script(one, context, calls);

  GptModel first = random_model(2);
  expect_same_outputs(expected, run_script(first, context, calls), 2);
  GptModel moved(std::move(first));  // move construction: the pool goes with the model
  EXPECT_EQ(moved.threads(), 2u);
  expect_same_outputs(expected, run_script(moved, context, calls), 2);
  GptModel assigned = random_model(3);
  assigned.target(context, 4);  // a running pool to replace
  assigned = std::move(moved);  // move assignment: the old pool is joined
  EXPECT_EQ(assigned.threads(), 2u);
  expect_same_outputs(expected, run_script(assigned, context, calls), 2);

  std::vector<GptModel> models;  // moved again as the vector grows
  for (std::size_t i = 0; i < 4; ++i) models.push_back(random_model(1 + i % 3));
  for (GptModel& model : models) {
    expect_same_outputs(expected, run_script(model, context, calls), model.threads());
  }

  for (const std::size_t threads : {3u, 1u, 2u, 2u}) {  // changes between calls, cache kept
    assigned.set_threads(threads);
    EXPECT_EQ(assigned.threads(), threads);
    expect_same_outputs(expected, run_script(assigned, context, calls), threads);
  }
}

TEST(GptThreads, ThreadChangeKeepsTheCache) {
  GptModel model = random_model(1);
  GptModel reference = random_model(1);
  const std::vector<token_t> context = random_tokens(50, 97, 6);
  model.target(std::span(context).first(40), 1);
  const std::uint64_t computed = model.positions_computed();
  model.set_threads(3);
  const auto rows = model.target(context, 10);
  EXPECT_EQ(model.positions_computed() - computed, 10u);  // the 40 cached positions were kept
  const auto expected = reference.target(context, 10);
  EXPECT_EQ(std::memcmp(rows.data(), expected.data(), rows.size() * sizeof(float)), 0);
}

TEST(GptThreads, BadThreadCountsThrow) {
  GptModel model = random_model(2);
  EXPECT_THROW(model.set_threads(0), std::invalid_argument);
  EXPECT_THROW(model.set_threads(GptModel::kMaxThreads + 1), std::invalid_argument);
  EXPECT_EQ(model.threads(), 2u);  // unchanged
  EXPECT_THROW(random_model(0), std::invalid_argument);
  const std::vector<token_t> context = random_tokens(10, 97, 8);
  EXPECT_THROW(model.target(context, 11), std::invalid_argument);  // errors as on one thread
  EXPECT_NO_THROW(model.target(context, 10));
}

TEST(GptThreads, ManyShortCallsOnManyThreads) {
  // More threads than items in some phases, one-row calls back to back: a stress test of the
  // pool's phase hand-over (workers that miss phases, sleep and wake).
  GptModel reference = random_model(1);
  GptModel model = random_model(5);
  const std::vector<token_t> context = random_tokens(64, 97, 9);
  for (std::size_t length = 1; length <= context.size(); ++length) {
    const auto expected = reference.draft(std::span(context).first(length));
    const std::vector<float> copy(expected.begin(), expected.end());
    const auto rows = model.draft(std::span(context).first(length));
    ASSERT_EQ(std::memcmp(rows.data(), copy.data(), copy.size() * sizeof(float)), 0) << length;
  }
}

// ---------------------------------------------------------------------------------------------
// The pool alone

/// A job of `phases` phases of `items` items each: every item adds its phase's number to its own
/// slot; each phase's finish checks that every slot of the phase was written once.
struct CountingJob {
  std::size_t phases = 0, items = 0, phase = 0;
  std::vector<std::size_t> slots;  // (items)
  std::size_t errors = 0;

  static void run_item(void* context, std::uint32_t item, std::size_t) noexcept {
    auto& job = *static_cast<CountingJob*>(context);
    job.slots[item] += job.phase + 1;
  }
  static std::uint32_t finish_phase(void* context) noexcept {
    auto& job = *static_cast<CountingJob*>(context);
    ++job.phase;
    for (const std::size_t slot : job.slots) {
      if (slot != job.phase * (job.phase + 1) / 2) ++job.errors;  // 1 + 2 + ... + phase
    }
    return job.phase < job.phases ? static_cast<std::uint32_t>(job.items) : 0;
  }
};

TEST(PhasePool, ManyTinyJobsRunEveryItemOnceAndEnd) {
  // Tiny items make the hand-overs race: a claim that fails because the job just ended, a
  // worker that sleeps through whole jobs, a phase completed by a worker while the caller waits.
  for (const std::size_t threads : {2u, 3u}) {
    specdec::examples::detail::PhasePool pool(threads);
    ASSERT_EQ(pool.threads(), threads);
    CountingJob job;
    for (std::size_t run = 0; run < 20000; ++run) {
      job.phases = 1 + run % 4;
      job.items = 1 + run % 5;
      job.phase = 0;
      job.slots.assign(job.items, 0);
      pool.run({&job, &CountingJob::run_item, &CountingJob::finish_phase},
               static_cast<std::uint32_t>(job.items));
      ASSERT_EQ(job.phase, job.phases) << "run " << run;
    }
    EXPECT_EQ(job.errors, 0u);
  }
}

}  // namespace

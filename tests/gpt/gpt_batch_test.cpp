// The example GPT's batched calls (score_batch, draft_batch; examples/gpt/gpt_model.hpp): one
// forward for the rows of many sequences, each against its own KV cache.
//  * Bitwise batch invariance: a sequence's rows are bit for bit the rows it gets scored alone
//    (a model of its own, single-sequence calls), whatever else is in the call: sequences of
//    different lengths, joining mid-way and leaving, drafts rejected (the cache rolled back),
//    calls split into several chunks (batch_rows), 1 or 2 threads.
//  * The per-sequence caches: created on first sight, kept between calls, dropped by
//    release; a bad call throws naming the sequence and changes nothing.
//  * Through BatchedDecoder on the shipped KJV pair: each sequence's tokens are those
//    SpeculativeDecoder gives it alone with the same seed, greedy and at T = 1, and every
//    sequence's caches are released when it leaves.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "gpt/gpt_model.hpp"
#include "specdec/batch.hpp"
#include "specdec/specdec.hpp"

#ifndef SPECDEC_MODELS_DIR
#error "gpt_batch_test needs SPECDEC_MODELS_DIR (see tests/CMakeLists.txt)"
#endif

namespace {

using specdec::DraftStepRequest;
using specdec::ScoreRequest;
using specdec::sequence_id;
using specdec::token_t;
using specdec::examples::GptConfig;
using specdec::examples::GptModel;
using specdec::examples::GptWeights;
using specdec::examples::RowMajorMatrixXf;

static_assert(specdec::BatchedTargetModel<GptModel>, "GptModel must have score_batch");
static_assert(specdec::BatchedDraftModel<GptModel>, "GptModel must have draft_batch");
static_assert(specdec::detail::HasRelease<GptModel>, "GptModel must take release(id) noexcept");

const std::string kModelsDir = SPECDEC_MODELS_DIR;

bool bitwise_equal(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

/// Random weights of odd dimensions (not multiples of the 16 dot lanes, head_dim 8): every
/// kernel runs its tail code and edge tiles.
GptWeights random_weights(std::uint64_t seed) {
  GptConfig c;
  c.vocab_size = 41;
  c.max_context = 64;
  c.n_layer = 2;
  c.n_head = 3;
  c.d_model = 24;
  c.d_ff = 40;
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<float> uniform(-0.5f, 0.5f);
  const auto matrix = [&](std::size_t rows, std::size_t cols) {
    RowMajorMatrixXf m(static_cast<Eigen::Index>(rows), static_cast<Eigen::Index>(cols));
    for (Eigen::Index i = 0; i < m.size(); ++i) m.data()[i] = uniform(gen);
    return m;
  };
  const auto vector = [&](std::size_t size, float around) {
    Eigen::VectorXf v(static_cast<Eigen::Index>(size));
    for (Eigen::Index i = 0; i < v.size(); ++i) v[i] = around + uniform(gen);
    return v;
  };
  GptWeights w;
  w.config = c;
  w.token_embedding = matrix(c.vocab_size, c.d_model);
  w.position_embedding = matrix(c.max_context, c.d_model);
  for (std::size_t l = 0; l < c.n_layer; ++l) {
    specdec::examples::GptLayerWeights layer;
    layer.ln1_weight = vector(c.d_model, 1.0f);
    layer.ln1_bias = vector(c.d_model, 0.0f);
    layer.qkv_weight = matrix(3 * c.d_model, c.d_model);
    layer.qkv_bias = vector(3 * c.d_model, 0.0f);
    layer.proj_weight = matrix(c.d_model, c.d_model);
    layer.proj_bias = vector(c.d_model, 0.0f);
    layer.ln2_weight = vector(c.d_model, 1.0f);
    layer.ln2_bias = vector(c.d_model, 0.0f);
    layer.fc1_weight = matrix(c.d_ff, c.d_model);
    layer.fc1_bias = vector(c.d_ff, 0.0f);
    layer.fc2_weight = matrix(c.d_model, c.d_ff);
    layer.fc2_bias = vector(c.d_model, 0.0f);
    w.layers.push_back(std::move(layer));
  }
  w.lnf_weight = vector(c.d_model, 1.0f);
  w.lnf_bias = vector(c.d_model, 0.0f);
  return w;
}

GptModel synthetic_model(std::size_t batch_rows = GptModel::kDefaultBatchRows,
                         std::size_t threads = 1) {
  return GptModel(random_weights(7), GptModel::kDefaultChunkRows, GptModel::kDefaultMaxTreeNodes,
                  threads, batch_rows);
}

// ---------------------------------------------------------------------------------------------
// A simulated batch: sequences that join and leave, each round drafting a few random tokens,
// scored in one batched call, then keeping a random prefix of them plus one more token (the
// next call's context rolls the rejected ones back).

struct SimulatedSequence {
  sequence_id id = 0;
  std::size_t joins = 0;   // the round it joins
  std::size_t leaves = 0;  // the round it leaves (released before that round's call)
  std::vector<token_t> committed;
  std::vector<token_t> context;  // this round's: committed + drafted
  std::size_t rows = 0;          // drafted + 1
  GptModel* alone = nullptr;     // the reference: this sequence's calls only
};

struct Simulation {
  std::size_t rounds = 0;
  std::size_t max_drafted = 0;
  std::vector<SimulatedSequence> sequences;
};

/// Sequences of prompt lengths 1, 9, 23, 2, 40, ... joining at rounds 0, 0, 2, 3, ... and
/// leaving at different rounds (or staying to the end).
Simulation simulation(std::size_t count, std::size_t rounds, std::size_t max_drafted,
                      std::size_t vocab, std::uint64_t seed) {
  std::mt19937_64 gen(seed);
  Simulation s;
  s.rounds = rounds;
  s.max_drafted = max_drafted;
  const std::size_t prompt_lengths[] = {1, 9, 23, 2, 40, 5, 17, 3};
  for (std::size_t i = 0; i < count; ++i) {
    SimulatedSequence sequence;
    sequence.id = 1000 + 7 * i;
    sequence.joins = i < 2 ? 0 : gen() % (rounds / 2);
    sequence.leaves = i % 3 == 2 ? sequence.joins + 1 + gen() % (rounds / 2) : rounds;
    sequence.committed.resize(prompt_lengths[i % 8]);
    for (token_t& t : sequence.committed) t = static_cast<token_t>(gen() % vocab);
    s.sequences.push_back(std::move(sequence));
  }
  return s;
}

/// Runs `simulation` through `batched` (score_batch, or draft_batch when `draft`), checking
/// every sequence's rows against its own model's single-sequence call, bit for bit.
void run_simulation(Simulation& simulation, GptModel& batched,
                    const std::vector<GptModel*>& references, bool draft, std::uint64_t seed) {
  std::mt19937_64 gen(seed);
  const std::size_t vocab = batched.vocab_size();
  const std::size_t max_context = batched.max_context();
  for (std::size_t i = 0; i < simulation.sequences.size(); ++i) {
    simulation.sequences[i].alone = references[i];
  }
  for (std::size_t round = 0; round < simulation.rounds; ++round) {
    std::vector<SimulatedSequence*> in_call;
    for (SimulatedSequence& s : simulation.sequences) {
      if (round == s.leaves) batched.release(s.id);
      if (round < s.joins || round >= s.leaves) continue;
      if (s.committed.size() + simulation.max_drafted + 1 >= max_context) continue;  // full
      const std::size_t drafted = draft ? 0 : gen() % (simulation.max_drafted + 1);
      s.context = s.committed;
      for (std::size_t k = 0; k < drafted; ++k)
        s.context.push_back(static_cast<token_t>(gen() % vocab));
      s.rows = drafted + 1;
      in_call.push_back(&s);
    }
    if (in_call.empty()) continue;
    std::vector<ScoreRequest> score_requests;
    std::vector<DraftStepRequest> draft_requests;
    for (SimulatedSequence* s : in_call) {
      score_requests.push_back({s->id, s->context, s->committed.size(), s->rows});
      draft_requests.push_back({s->id, s->context});
    }
    const std::vector<float> rows = [&] {
      const std::span<const float> got =
          draft ? batched.draft_batch(draft_requests) : batched.score_batch(score_requests);
      return std::vector<float>(got.begin(), got.end());
    }();
    std::size_t total = 0;
    for (SimulatedSequence* s : in_call) total += s->rows;
    ASSERT_EQ(rows.size(), total * vocab) << "round " << round;
    std::size_t first = 0;
    for (SimulatedSequence* s : in_call) {
      const std::span<const float> want =
          draft ? s->alone->draft(s->context) : s->alone->target(s->context, s->rows);
      ASSERT_TRUE(
          bitwise_equal(std::span<const float>(rows).subspan(first * vocab, s->rows * vocab), want))
          << "sequence " << s->id << ", round " << round << ", " << in_call.size()
          << " sequences in the call, context " << s->context.size() << ", rows " << s->rows;
      first += s->rows;
      // Keep a random prefix of the drafts and one more token; the rest is rolled back.
      const std::size_t kept = gen() % s->rows;
      s->committed.assign(s->context.begin(), s->context.begin() + static_cast<std::ptrdiff_t>(
                                                                       s->committed.size() + kept));
      s->committed.push_back(static_cast<token_t>(gen() % vocab));
    }
  }
}

/// A model of its own for each of `count` sequences.
struct References {
  explicit References(std::size_t count) {
    for (std::size_t i = 0; i < count; ++i) {
      owned.push_back(std::make_unique<GptModel>(synthetic_model()));
      models.push_back(owned.back().get());
    }
  }
  std::vector<std::unique_ptr<GptModel>> owned;
  std::vector<GptModel*> models;
};

TEST(GptBatch, ScoreBatchRowsEqualEachSequenceAloneBitwise) {
  for (const std::size_t batch_rows : {std::size_t{128}, std::size_t{7}, std::size_t{3}}) {
    for (const std::size_t threads : {1u, 2u}) {
      SCOPED_TRACE(::testing::Message() << "batch_rows " << batch_rows << ", threads " << threads);
      GptModel batched = synthetic_model(batch_rows, threads);
      Simulation s = simulation(6, 14, 9, batched.vocab_size(), batch_rows + threads);
      const References references(s.sequences.size());
      run_simulation(s, batched, references.models, /*draft=*/false, 11 * batch_rows + threads);
    }
  }
}

TEST(GptBatch, DraftBatchRowsEqualEachSequenceAloneBitwise) {
  for (const std::size_t batch_rows : {std::size_t{128}, std::size_t{4}}) {
    SCOPED_TRACE(::testing::Message() << "batch_rows " << batch_rows);
    GptModel batched = synthetic_model(batch_rows);
    Simulation s = simulation(5, 20, 0, batched.vocab_size(), 3 + batch_rows);
    const References references(s.sequences.size());
    run_simulation(s, batched, references.models, /*draft=*/true, 5 + batch_rows);
  }
}

TEST(GptBatch, ABatchOfOneEqualsTheSingleSequenceCall) {
  GptModel batched = synthetic_model();
  GptModel alone = synthetic_model();
  std::vector<token_t> context{1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  for (std::size_t n = 1; n <= context.size(); ++n) {
    const ScoreRequest request{42, context, context.size() - n + 1, n};
    const std::vector<float> rows = [&] {
      const auto got = batched.score_batch(std::span(&request, 1));
      return std::vector<float>(got.begin(), got.end());
    }();
    EXPECT_TRUE(bitwise_equal(rows, alone.target(context, n))) << "n = " << n;
  }
}

TEST(GptBatch, CachesAreKeptPerSequenceAndReleased) {
  GptModel model = synthetic_model();
  const std::vector<token_t> a{1, 2, 3, 4, 5, 6};
  const std::vector<token_t> b{7, 8, 9};
  const std::vector<ScoreRequest> both{{1, a, 5, 2}, {2, b, 3, 1}};
  (void)model.score_batch(both);
  EXPECT_EQ(model.cached_sequences(), 2u);
  EXPECT_EQ(model.cached_tokens(1).size(), a.size());
  EXPECT_EQ(model.cached_tokens(2).size(), b.size());
  EXPECT_TRUE(model.cached_tokens().empty()) << "the single-sequence cache is apart";
  const std::uint64_t computed = model.positions_computed();
  // Sequence 1 again, its last token replaced (a rejected draft): the common prefix is reused.
  const std::vector<token_t> a2{1, 2, 3, 4, 5, 9, 10};
  const ScoreRequest again{1, a2, 6, 2};
  (void)model.score_batch(std::span(&again, 1));
  EXPECT_EQ(model.positions_computed() - computed, 2u);  // positions 5 and 6 only
  model.release(1);
  EXPECT_EQ(model.cached_sequences(), 1u);
  EXPECT_TRUE(model.cached_tokens(1).empty());
  EXPECT_TRUE(model.score_batch({}).empty());  // no requests: no rows
  EXPECT_TRUE(model.draft_batch({}).empty());
  model.release(99);  // unknown: nothing
  model.release_sequences();
  EXPECT_EQ(model.cached_sequences(), 0u);
}

TEST(GptBatch, BadCallsThrowNamingTheSequenceAndChangeNothing) {
  GptModel model = synthetic_model();
  GptModel fresh = synthetic_model();
  const std::vector<token_t> a{1, 2, 3, 4, 5, 6};
  const std::vector<token_t> b{7, 8, 9};
  const std::vector<token_t> bad_token{7, 8, 99};
  const std::vector<token_t> too_long(model.max_context() + 1, 1);
  (void)model.score_batch(std::vector<ScoreRequest>{{1, a, 6, 1}});
  const auto expect_throw = [&](const std::vector<ScoreRequest>& requests,
                                const std::string& expected) {
    try {
      (void)model.score_batch(requests);
      ADD_FAILURE() << "expected an error containing '" << expected << "'";
    } catch (const std::exception& error) {
      EXPECT_NE(std::string(error.what()).find(expected), std::string::npos) << error.what();
    }
  };
  expect_throw({{1, a, 4, 3}, {2, b, 3, 4}},
               "specdec: sequence 2: GptModel asked for 4 target rows");
  expect_throw({{1, a, 4, 3}, {2, bad_token, 2, 1}}, "specdec: sequence 2: token 99");
  expect_throw({{1, a, 4, 3}, {1, b, 3, 1}}, "specdec: sequence 1 appears twice");
  EXPECT_THROW((void)model.score_batch(std::vector<ScoreRequest>{{3, too_long, 1, 1}}),
               std::length_error);
  EXPECT_EQ(model.cached_sequences(), 1u);
  EXPECT_EQ(model.cached_tokens(1).size(), a.size());
  // The cache of sequence 1 is still right: its rows equal a fresh model's.
  const std::vector<float> rows = [&] {
    const auto got = model.score_batch(std::vector<ScoreRequest>{{1, a, 3, 4}});
    return std::vector<float>(got.begin(), got.end());
  }();
  EXPECT_TRUE(bitwise_equal(rows, fresh.target(a, 4)));
}

// ---------------------------------------------------------------------------------------------
// The shipped pair: rows, then BatchedDecoder against SpeculativeDecoder alone

class ShippedPairBatch : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    target_ = new GptModel(GptModel::from_file(kModelsDir + "/kjv-target.spdc"));
    draft_ = new GptModel(GptModel::from_file(kModelsDir + "/kjv-draft.spdc"));
  }
  static void TearDownTestSuite() {
    delete target_;
    delete draft_;
  }
  static GptModel* target_;
  static GptModel* draft_;
};
GptModel* ShippedPairBatch::target_ = nullptr;
GptModel* ShippedPairBatch::draft_ = nullptr;

std::vector<std::vector<token_t>> held_out_prompts(std::size_t count) {
  std::ifstream in(kModelsDir + "/prompts.txt");
  std::vector<std::vector<token_t>> prompts;
  for (std::string line; prompts.size() < count && std::getline(in, line);) {
    std::vector<token_t> tokens{'\n'};  // BOS: every training verse follows a newline
    for (const unsigned char byte : line) tokens.push_back(byte);
    prompts.push_back(std::move(tokens));
  }
  return prompts;
}

TEST_F(ShippedPairBatch, TargetAndDraftRowsEqualEachSequenceAloneBitwise) {
  // One reference model per role: a sequence's single-sequence call recomputes what the
  // reference's cache does not share with it, and rows do not depend on how a forward is split.
  for (const bool draft : {false, true}) {
    SCOPED_TRACE(draft ? "draft_batch" : "score_batch");
    GptModel& batched = draft ? *draft_ : *target_;
    GptModel reference =
        GptModel::from_file(kModelsDir + (draft ? "/kjv-draft.spdc" : "/kjv-target.spdc"));
    Simulation s = simulation(5, draft ? 12 : 6, draft ? 0 : 8, batched.vocab_size(), 21);
    const std::vector<GptModel*> references(s.sequences.size(), &reference);
    run_simulation(s, batched, references, draft, 23);
    batched.release_sequences();
  }
}

struct DecodeRequest {
  std::vector<token_t> prompt;
  specdec::GenerationConfig config;
};

/// Five prompts of different lengths with their own settings at temperature `temperature`:
/// fixed K = 4, 6 and 2, the schedule policy, block verification; seeds of their own.
std::vector<DecodeRequest> decode_requests(float temperature) {
  const auto prompts = held_out_prompts(5);
  std::vector<DecodeRequest> requests(prompts.size());
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    DecodeRequest& r = requests[i];
    r.prompt = prompts[i];
    r.config.max_new_tokens = 40 + 4 * i;
    r.config.sampling.temperature = temperature;
    r.config.seed = 100 + i;
    r.config.draft_length = i % 3 == 0 ? 4 : i % 3 == 1 ? 6 : 2;
  }
  requests[3].config.draft_length_policy.kind = specdec::DraftLengthKind::schedule;
  requests[4].config.verifier = specdec::VerifierKind::block;
  return requests;
}

TEST_F(ShippedPairBatch, EachSequenceDecodesAsAloneGreedyAndSampled) {
  using Decoder = specdec::BatchedDecoder<GptModel, specdec::ModelProposer<GptModel>>;
  for (const float temperature : {0.0f, 1.0f}) {
    SCOPED_TRACE(::testing::Message() << "T = " << temperature);
    const std::vector<DecodeRequest> requests = decode_requests(temperature);
    ASSERT_EQ(requests.size(), 5u);
    // Alone: the single-sequence decoder, the models' own caches.
    std::vector<specdec::GenerationResult> alone;
    specdec::SpeculativeDecoder single(*draft_, *target_);
    for (const DecodeRequest& r : requests) alone.push_back(single.generate(r.prompt, r.config));
    // Batched: four at once, the fifth joining after three steps.
    Decoder decoder(*target_, specdec::ModelProposer<GptModel>(*draft_));
    std::map<sequence_id, specdec::FinishedSequence> finished;
    const auto collect = [&](std::vector<specdec::FinishedSequence> done) {
      for (auto& sequence : done) finished.emplace(sequence.id, std::move(sequence));
    };
    for (std::size_t i = 0; i < 4; ++i) decoder.add(i, requests[i].prompt, requests[i].config);
    for (int step = 0; step < 3; ++step) collect(decoder.step());
    decoder.add(4, requests[4].prompt, requests[4].config);
    collect(decoder.run());
    ASSERT_EQ(finished.size(), requests.size());
    for (std::size_t i = 0; i < requests.size(); ++i) {
      const specdec::FinishedSequence& done = finished.at(i);
      ASSERT_FALSE(done.error) << "sequence " << i;
      EXPECT_EQ(done.result.tokens, alone[i].tokens) << "sequence " << i;
      EXPECT_EQ(done.result.stats.rounds, alone[i].stats.rounds) << "sequence " << i;
      EXPECT_EQ(done.result.stats.accepted, alone[i].stats.accepted) << "sequence " << i;
    }
    const specdec::BatchStats& stats = decoder.stats();
    EXPECT_GT(stats.rows_per_target_call(), 4.0) << "several sequences' rows per target call";
    EXPECT_LT(stats.draft_calls, stats.draft_rows) << "drafting shared";
    EXPECT_EQ(target_->cached_sequences(), 0u) << "every sequence released on leaving";
    EXPECT_EQ(draft_->cached_sequences(), 0u);
  }
}

}  // namespace

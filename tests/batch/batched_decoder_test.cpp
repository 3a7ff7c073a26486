// BatchedDecoder (batch/decoder.hpp): every sequence's tokens are those StrategyDecoder gives it
// alone, whatever else is in the batch and whenever it joins; the batched calls are shared;
// errors end one sequence (named) or, for a batched call, the whole batch, and a decode
// afterwards equals a fresh one.

#include <gtest/gtest.h>

#include <cstddef>
#include <exception>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "specdec/batch.hpp"
#include "specdec/decoder.hpp"
#include "specdec/draft_length/never.hpp"
#include "specdec/testing.hpp"

#include "batch_models.hpp"

namespace {

using specdec::BatchedDecoder;
using specdec::ConfiguredDraftLength;
using specdec::ConfiguredVerifier;
using specdec::FinishedSequence;
using specdec::FinishReason;
using specdec::GenerationConfig;
using specdec::GenerationResult;
using specdec::ModelProposer;
using specdec::sequence_id;
using specdec::token_t;
using specdec::testing::ScriptedPair;
using specdec_test::BatchedScriptedDraft;
using specdec_test::BatchedScriptedTarget;

using PlainDraft = ScriptedPair::Draft<float>;
using PlainTarget = ScriptedPair::Target<float>;

ScriptedPair make_pair() {
  ScriptedPair pair;
  pair.target_model.vocab = 8;
  pair.perturbation.vocab = 8;
  pair.noise = 0.6;
  return pair;
}

/// A request: its prompt and settings (different temperatures, filters, budgets, verifiers,
/// draft lengths and policies, stop tokens).
struct Request {
  std::vector<token_t> prompt;
  GenerationConfig config;
};

std::vector<Request> requests() {
  std::vector<Request> all(5);
  all[0].prompt = {1, 2, 3};
  all[0].config.sampling.temperature = 0.0f;  // greedy
  all[0].config.max_new_tokens = 23;
  all[0].config.draft_length = 3;
  all[0].config.seed = 11;

  all[1].prompt = {4};
  all[1].config.sampling.temperature = 0.7f;
  all[1].config.max_new_tokens = 31;
  all[1].config.draft_length = 4;
  all[1].config.seed = 12;

  all[2].prompt = {0, 7, 7, 2};
  all[2].config.sampling.temperature = 1.3f;
  all[2].config.sampling.top_k = 5;
  all[2].config.max_new_tokens = 17;
  all[2].config.draft_length = 2;
  all[2].config.verifier = specdec::VerifierKind::block;
  all[2].config.seed = 13;

  all[3].prompt = {5, 6};
  all[3].config.sampling.temperature = 1.0f;
  all[3].config.sampling.top_p = 0.9f;
  all[3].config.max_new_tokens = 40;
  all[3].config.draft_length = 5;
  all[3].config.draft_length_policy.kind = specdec::DraftLengthKind::schedule;
  all[3].config.stop_tokens = {3};
  all[3].config.seed = 14;

  all[4].prompt = {2, 2};
  all[4].config.sampling.temperature = 0.9f;
  all[4].config.max_new_tokens = 50;
  all[4].config.max_context = 20;  // ends at the context limit
  all[4].config.draft_length = 4;
  all[4].config.seed = 15;
  return all;
}

/// The reference: the request decoded alone by SpeculativeDecoder (StrategyDecoder).
GenerationResult alone(const ScriptedPair& pair, const Request& request) {
  PlainDraft draft = pair.draft<float>();
  PlainTarget target = pair.target<float>();
  specdec::SpeculativeDecoder decoder(draft, target);
  return decoder.generate(request.prompt, request.config);
}

void expect_same_generation(const GenerationResult& got, const GenerationResult& want,
                            const std::string& what) {
  EXPECT_EQ(got.tokens, want.tokens) << what;
  EXPECT_EQ(got.logprobs, want.logprobs) << what;
  EXPECT_EQ(got.finish_reason, want.finish_reason) << what;
  EXPECT_EQ(got.stats.rounds, want.stats.rounds) << what;
  EXPECT_EQ(got.stats.drafted, want.stats.drafted) << what;
  EXPECT_EQ(got.stats.accepted, want.stats.accepted) << what;
  EXPECT_EQ(got.stats.emitted, want.stats.emitted) << what;
  EXPECT_EQ(got.stats.draft_calls, want.stats.draft_calls) << what;
  EXPECT_EQ(got.stats.target_calls, want.stats.target_calls) << what;
  EXPECT_EQ(got.stats.accepted_at, want.stats.accepted_at) << what;
}

std::map<sequence_id, FinishedSequence> by_id(std::vector<FinishedSequence> finished) {
  std::map<sequence_id, FinishedSequence> out;
  for (FinishedSequence& done : finished) {
    const sequence_id id = done.id;
    out.emplace(id, std::move(done));
  }
  return out;
}

/// The models of one batched decoder: with the batched calls, or the plain ones.
template <bool Batched>
struct Models {
  explicit Models(const ScriptedPair& pair)
      : draft(pair.draft<float>()), target(pair.target<float>()) {}
  std::conditional_t<Batched, BatchedScriptedDraft, PlainDraft> draft;
  std::conditional_t<Batched, BatchedScriptedTarget, PlainTarget> target;

  using Decoder = BatchedDecoder<decltype(target), ModelProposer<decltype(draft)>>;
  Decoder decoder() { return Decoder(target, ModelProposer<decltype(draft)>(draft)); }
};

template <class T>
class BatchedDecoderTest : public ::testing::Test {};
struct WithBatchedCalls : std::true_type {};
struct WithPerSequenceCalls : std::false_type {};
using ModelKinds = ::testing::Types<WithBatchedCalls, WithPerSequenceCalls>;
TYPED_TEST_SUITE(BatchedDecoderTest, ModelKinds);

// ---- batch invariance ---------------------------------------------------------------------------

TYPED_TEST(BatchedDecoderTest, EachSequenceDecodesAsAloneInEveryBatch) {
  const ScriptedPair pair = make_pair();
  const std::vector<Request> all = requests();
  std::vector<GenerationResult> reference;
  for (const Request& request : all) reference.push_back(alone(pair, request));
  // Batches of 1 to 4 (5 for all) with different companions.
  const std::vector<std::vector<std::size_t>> batches = {
      {1}, {0, 1}, {1, 0}, {2, 3}, {3, 1, 4}, {4, 2, 0, 1}, {0, 1, 2, 3, 4}};
  for (const auto& batch : batches) {
    Models<TypeParam::value> models(pair);
    auto decoder = models.decoder();
    for (const std::size_t i : batch) decoder.add(100 + i, all[i].prompt, all[i].config);
    auto finished = by_id(decoder.run());
    ASSERT_EQ(finished.size(), batch.size());
    for (const std::size_t i : batch) {
      const FinishedSequence& done = finished.at(100 + i);
      ASSERT_FALSE(done.error);
      expect_same_generation(
          done.result, reference[i],
          "request " + std::to_string(i) + " in a batch of " + std::to_string(batch.size()));
    }
    EXPECT_TRUE(decoder.empty());
  }
}

TYPED_TEST(BatchedDecoderTest, SequencesJoiningMidwayDecodeAsAlone) {
  const ScriptedPair pair = make_pair();
  const std::vector<Request> all = requests();
  Models<TypeParam::value> models(pair);
  auto decoder = models.decoder();
  std::map<sequence_id, FinishedSequence> finished;
  const auto collect = [&](std::vector<FinishedSequence> done) {
    for (auto& [id, sequence] : by_id(std::move(done))) finished.emplace(id, std::move(sequence));
  };
  decoder.add(0, all[3].prompt, all[3].config);
  collect(decoder.step());
  collect(decoder.step());
  decoder.add(1, all[1].prompt, all[1].config);
  collect(decoder.step());
  decoder.add(2, all[2].prompt, all[2].config);
  decoder.add(3, all[0].prompt, all[0].config);
  for (int i = 0; i < 4; ++i) collect(decoder.step());
  // The same request again under a new id, joining a batch mid-way through the others.
  decoder.add(4, all[1].prompt, all[1].config);
  collect(decoder.run());
  ASSERT_EQ(finished.size(), 5u);
  const std::map<sequence_id, std::size_t> request_of{{0, 3}, {1, 1}, {2, 2}, {3, 0}, {4, 1}};
  for (const auto& [id, index] : request_of) {
    ASSERT_FALSE(finished.at(id).error);
    expect_same_generation(finished.at(id).result, alone(pair, all[index]),
                           "sequence " + std::to_string(id));
  }
}

TYPED_TEST(BatchedDecoderTest, StreamsEachSequencesChunksToItsOwnCallback) {
  const ScriptedPair pair = make_pair();
  const std::vector<Request> all = requests();
  Models<TypeParam::value> models(pair);
  auto decoder = models.decoder();
  std::vector<token_t> streamed_a;
  std::vector<token_t> streamed_b;
  decoder.add(7, all[1].prompt, all[1].config, [&](std::span<const token_t> chunk) {
    streamed_a.insert(streamed_a.end(), chunk.begin(), chunk.end());
    return true;
  });
  decoder.add(8, all[2].prompt, all[2].config, [&](std::span<const token_t> chunk) {
    streamed_b.insert(streamed_b.end(), chunk.begin(), chunk.end());
    return streamed_b.size() < 5;  // stops after 5 tokens or more
  });
  auto finished = by_id(decoder.run());
  EXPECT_EQ(streamed_a, finished.at(7).result.tokens);
  EXPECT_EQ(streamed_b, finished.at(8).result.tokens);
  EXPECT_EQ(finished.at(8).result.finish_reason, FinishReason::callback);
  const std::vector<token_t> full = alone(pair, all[2]).tokens;
  ASSERT_GE(full.size(), streamed_b.size());
  EXPECT_TRUE(std::equal(streamed_b.begin(), streamed_b.end(), full.begin()));
}

TYPED_TEST(BatchedDecoderTest, GreedyEqualsPlainTargetDecoding) {
  const ScriptedPair pair = make_pair();
  Models<TypeParam::value> models(pair);
  auto decoder = models.decoder();
  std::vector<Request> greedy = requests();
  for (Request& request : greedy) {
    request.config.sampling = {};
    request.config.sampling.temperature = 0.0f;
    request.config.stop_tokens.clear();
  }
  for (std::size_t i = 0; i < greedy.size(); ++i) {
    decoder.add(i, greedy[i].prompt, greedy[i].config);
  }
  auto finished = by_id(decoder.run());
  for (std::size_t i = 0; i < greedy.size(); ++i) {
    PlainTarget target = pair.target<float>();
    specdec::AutoregressiveDecoder plain(target);
    const GenerationResult want = plain.generate(greedy[i].prompt, greedy[i].config);
    EXPECT_EQ(finished.at(i).result.tokens, want.tokens) << "sequence " << i;
  }
}

TYPED_TEST(BatchedDecoderTest, ZeroBudgetFinishesWithoutModelCalls) {
  const ScriptedPair pair = make_pair();
  Models<TypeParam::value> models(pair);
  auto decoder = models.decoder();
  GenerationConfig config;
  config.max_new_tokens = 0;
  decoder.add(1, std::vector<token_t>{1}, config);
  const auto finished = decoder.step();
  ASSERT_EQ(finished.size(), 1u);
  EXPECT_TRUE(finished[0].result.tokens.empty());
  EXPECT_EQ(decoder.stats().target_calls, 0u);
  EXPECT_TRUE(decoder.empty());
}

// ---- what is shared
// ------------------------------------------------------------------------------

TEST(BatchedDecoderCalls, OneTargetCallPerStepAndOneDraftCallPerDraftedPosition) {
  const ScriptedPair pair = make_pair();
  const std::vector<Request> all = requests();
  Models<true> models(pair);
  auto decoder = models.decoder();
  std::size_t steps = 0;
  std::size_t rounds = 0;
  for (std::size_t i = 0; i < 4; ++i) decoder.add(i, all[i].prompt, all[i].config);
  while (!decoder.empty()) {
    rounds += decoder.size();
    ++steps;
    (void)decoder.step();
  }
  const specdec::BatchStats& stats = decoder.stats();
  EXPECT_EQ(stats.steps, steps);
  EXPECT_EQ(stats.target_calls, steps);  // one per step, whatever the batch's size
  EXPECT_EQ(models.target.batch_calls, steps);
  EXPECT_EQ(stats.target_rows, models.target.batch_rows);
  EXPECT_EQ(stats.rounds, rounds);
  EXPECT_GT(stats.rows_per_target_call(), 4.0);  // several sequences' rows per call
  EXPECT_EQ(stats.draft_calls, models.draft.batch_calls);
  EXPECT_EQ(stats.draft_rows, models.draft.batch_rows);
  EXPECT_LT(stats.draft_calls, stats.draft_rows);  // drafting shared too
  std::size_t tokens = 0;
  for (std::size_t i = 0; i < 4; ++i) tokens += alone(pair, all[i]).tokens.size();
  EXPECT_EQ(stats.tokens, tokens);
  EXPECT_EQ(stats.sequences_added, 4u);
  EXPECT_EQ(stats.sequences_finished, 4u);
  EXPECT_EQ(models.target.broken_promises, 0u);
  EXPECT_EQ(models.draft.broken_promises, 0u);
}

TEST(BatchedDecoderCalls, AnOwningBatchedResultIsHeldUntilTheNextCall) {
  const ScriptedPair pair = make_pair();
  const std::vector<Request> all = requests();
  BatchedScriptedDraft draft(pair.draft<float>());
  specdec_test::OwningBatchedScriptedTarget target(pair.target<float>());
  BatchedDecoder<specdec_test::OwningBatchedScriptedTarget, ModelProposer<BatchedScriptedDraft>>
      decoder(target, ModelProposer<BatchedScriptedDraft>(draft));
  for (std::size_t i = 0; i < 3; ++i) decoder.add(i, all[i].prompt, all[i].config);
  auto finished = by_id(decoder.run());
  for (std::size_t i = 0; i < 3; ++i) {
    expect_same_generation(finished.at(i).result, alone(pair, all[i]),
                           "sequence " + std::to_string(i));
  }
}

TEST(BatchedDecoderCalls, WithoutBatchedCallsOneTargetCallPerSequenceRound) {
  const ScriptedPair pair = make_pair();
  const std::vector<Request> all = requests();
  Models<false> models(pair);
  auto decoder = models.decoder();
  for (std::size_t i = 0; i < 3; ++i) decoder.add(i, all[i].prompt, all[i].config);
  (void)decoder.run();
  EXPECT_EQ(decoder.stats().target_calls, decoder.stats().rounds);
  EXPECT_DOUBLE_EQ(decoder.stats().rounds_per_target_call(), 1.0);
}

TEST(BatchedDecoderCalls, NeverDraftIsPlainBatchedDecoding) {
  const ScriptedPair pair = make_pair();
  const std::vector<Request> all = requests();
  Models<true> models(pair);
  BatchedDecoder decoder(models.target, ModelProposer<BatchedScriptedDraft>(models.draft),
                         specdec::NeverDraft{});
  for (std::size_t i = 0; i < 4; ++i) decoder.add(i, all[i].prompt, all[i].config);
  std::size_t rounds = 0;
  while (!decoder.empty()) {
    rounds += decoder.size();
    (void)decoder.step();
  }
  auto finished = by_id(decoder.run());
  const specdec::BatchStats& stats = decoder.stats();
  EXPECT_EQ(stats.draft_calls, 0u);
  EXPECT_EQ(models.draft.batch_calls, 0u);
  EXPECT_EQ(stats.target_calls, stats.steps);
  EXPECT_EQ(stats.target_rows, rounds);  // one row per sequence and step, nothing else
  // Greedy, the tokens of plain decoding; sampled, every token one of the target's (the law is
  // the target's by construction: no draft, the round samples the target's row).
  Request greedy = all[0];
  PlainTarget target = pair.target<float>();
  specdec::AutoregressiveDecoder plain(target);
  decoder.add(9, greedy.prompt, greedy.config);
  finished = by_id(decoder.run());
  EXPECT_EQ(finished.at(9).result.tokens, plain.generate(greedy.prompt, greedy.config).tokens);
  EXPECT_EQ(finished.at(9).result.stats.drafted, 0u);
  EXPECT_EQ(decoder.stats().draft_calls, 0u);
}

// ---- leaving: release(id) ----------------------------------------------------------------

TEST(BatchedDecoderRelease, EverySequenceThatLeavesIsReleasedOnceFromTargetAndDraft) {
  const ScriptedPair pair = make_pair();
  const std::vector<Request> all = requests();
  Models<true> models(pair);
  auto decoder = models.decoder();
  std::vector<sequence_id> left;  // in the order step() returned them
  const auto step = [&] {
    for (const FinishedSequence& done : decoder.step()) left.push_back(done.id);
    EXPECT_EQ(models.target.released, left);  // released as step() returns them, not before
  };
  decoder.add(0, all[0].prompt, all[0].config);
  decoder.add(1, all[1].prompt, all[1].config, [](std::span<const token_t>) { return false; });
  decoder.add(2, all[2].prompt, all[2].config);
  step();  // 1 stops by its callback
  EXPECT_EQ(models.target.released, std::vector<sequence_id>{1});
  decoder.add(3, all[3].prompt, all[3].config);
  ASSERT_TRUE(decoder.cancel(2));
  step();  // 2 cancelled
  while (!decoder.empty()) step();
  ASSERT_EQ(left.size(), 4u);
  EXPECT_EQ(models.target.released, left);
  EXPECT_EQ(models.draft.released, left);
  EXPECT_EQ(models.target.broken_promises, 0u);
  // An id released comes back as a new sequence: decoded as alone.
  decoder.add(1, all[1].prompt, all[1].config);
  auto finished = by_id(decoder.run());
  expect_same_generation(finished.at(1).result, alone(pair, all[1]), "sequence 1 again");
  EXPECT_EQ(models.target.released.back(), 1u);
}

TEST(BatchedDecoderRelease, AFailedBatchedCallReleasesEverySequenceOfTheBatch) {
  const ScriptedPair pair = make_pair();
  const std::vector<Request> all = requests();
  Models<true> models(pair);
  auto decoder = models.decoder();
  decoder.add(1, all[1].prompt, all[1].config);
  decoder.add(2, all[2].prompt, all[2].config);
  (void)decoder.step();
  models.target.throw_on_batch = true;
  EXPECT_THROW((void)decoder.step(), std::runtime_error);
  EXPECT_EQ(models.target.released, (std::vector<sequence_id>{1, 2}));
  EXPECT_EQ(models.draft.released, (std::vector<sequence_id>{1, 2}));
}

// ---- faults -----------------------------------------------------------------------------------

std::string message_of(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    return e.what();
  }
}

TYPED_TEST(BatchedDecoderTest, RejectsABadRequestNamingTheSequenceAndKeepsTheBatch) {
  const ScriptedPair pair = make_pair();
  const std::vector<Request> all = requests();
  Models<TypeParam::value> models(pair);
  auto decoder = models.decoder();
  decoder.add(5, all[1].prompt, all[1].config);
  const auto expect_rejected = [&](auto&& add, const std::string& expected) {
    try {
      add();
      ADD_FAILURE() << "expected std::invalid_argument: " << expected;
    } catch (const std::invalid_argument& error) {
      EXPECT_NE(std::string(error.what()).find(expected), std::string::npos) << error.what();
    }
    EXPECT_EQ(decoder.size(), 1u);
  };
  expect_rejected([&] { decoder.add(5, all[2].prompt, all[2].config); },
                  "specdec: sequence 5 is already in the batch");
  expect_rejected([&] { decoder.add(6, std::vector<token_t>{}, all[2].config); },
                  "specdec: sequence 6: prompt is empty");
  GenerationConfig short_context = all[2].config;
  short_context.max_context = 3;
  expect_rejected(
      [&] {
        decoder.add(7, std::vector<token_t>{1, 2, 3, 4}, short_context);
      },
      "specdec: sequence 7: prompt has 4 tokens, more than max_context = 3");
  GenerationConfig no_draft = all[2].config;
  no_draft.draft_length = 0;
  expect_rejected([&] { decoder.add(8, all[2].prompt, no_draft); },
                  "specdec: sequence 8: draft_length = 0");
  // The batch decodes on, unchanged.
  const auto finished = decoder.run();
  ASSERT_EQ(finished.size(), 1u);
  expect_same_generation(finished[0].result, alone(pair, all[1]), "after the rejections");
}

TYPED_TEST(BatchedDecoderTest, AThrowingCallbackEndsItsSequenceOnly) {
  const ScriptedPair pair = make_pair();
  const std::vector<Request> all = requests();
  Models<TypeParam::value> models(pair);
  auto decoder = models.decoder();
  int chunks = 0;
  decoder.add(1, all[1].prompt, all[1].config);
  decoder.add(2, all[2].prompt, all[2].config, [&](std::span<const token_t>) -> bool {
    if (++chunks == 3) throw std::runtime_error("client went away");
    return true;
  });
  decoder.add(3, all[3].prompt, all[3].config);
  auto finished = by_id(decoder.run());
  ASSERT_TRUE(finished.at(2).error);
  const std::string message = message_of(finished.at(2).error);
  EXPECT_EQ(message, "specdec: sequence 2: client went away");
  try {
    std::rethrow_exception(finished.at(2).error);
  } catch (const specdec::SequenceError& error) {
    EXPECT_EQ(error.id(), 2u);
    EXPECT_THROW(error.rethrow_nested(), std::runtime_error);
  }
  // Its tokens up to and including the chunk the callback saw; the others as alone.
  const std::vector<token_t> full = alone(pair, all[2]).tokens;
  const std::vector<token_t>& partial = finished.at(2).result.tokens;
  ASSERT_LE(partial.size(), full.size());
  EXPECT_TRUE(std::equal(partial.begin(), partial.end(), full.begin()));
  EXPECT_FALSE(finished.at(1).error);
  EXPECT_FALSE(finished.at(3).error);
  expect_same_generation(finished.at(1).result, alone(pair, all[1]), "sequence 1");
  expect_same_generation(finished.at(3).result, alone(pair, all[3]), "sequence 3");
}

TYPED_TEST(BatchedDecoderTest, ACancelledSequenceLeavesAtTheNextStep) {
  const ScriptedPair pair = make_pair();
  const std::vector<Request> all = requests();
  Models<TypeParam::value> models(pair);
  auto decoder = models.decoder();
  decoder.add(1, all[1].prompt, all[1].config);
  decoder.add(2, all[3].prompt, all[3].config);
  // Sequence 3 is cancelled from sequence 1's callback, mid-step.
  std::size_t chunks_of_1 = 0;
  decoder.add(3, all[4].prompt, all[4].config);
  decoder.add(4, all[2].prompt, all[2].config, [&](std::span<const token_t>) {
    if (++chunks_of_1 == 2) {
      EXPECT_TRUE(decoder.cancel(3));
    }
    return true;
  });
  EXPECT_TRUE(decoder.step().empty());
  EXPECT_TRUE(decoder.cancel(2));
  EXPECT_FALSE(decoder.cancel(99));
  std::map<sequence_id, FinishedSequence> finished;
  for (auto& done : decoder.step()) finished.emplace(done.id, std::move(done));
  ASSERT_EQ(finished.size(), 2u);  // 2 and 3
  EXPECT_EQ(finished.at(2).result.finish_reason, FinishReason::cancelled);
  EXPECT_EQ(finished.at(3).result.finish_reason, FinishReason::cancelled);
  EXPECT_FALSE(finished.at(2).error);
  for (const sequence_id id : {sequence_id{2}, sequence_id{3}}) {
    const std::vector<token_t> full = alone(pair, all[id == 2 ? 3 : 4]).tokens;
    const std::vector<token_t>& partial = finished.at(id).result.tokens;
    ASSERT_LE(partial.size(), full.size());
    EXPECT_TRUE(std::equal(partial.begin(), partial.end(), full.begin())) << id;
  }
  for (auto& done : decoder.run()) finished.emplace(done.id, std::move(done));
  expect_same_generation(finished.at(1).result, alone(pair, all[1]), "sequence 1");
  expect_same_generation(finished.at(4).result, alone(pair, all[2]), "sequence 4");
}

// ---- release(id): a sequence leaving is told to the models ------------------------------------

/// The batched models with the optional release(id), recording every call.
struct ReleasingTarget : BatchedScriptedTarget {
  using BatchedScriptedTarget::BatchedScriptedTarget;
  std::vector<sequence_id> released;
  void release(sequence_id id) noexcept { released.push_back(id); }
};
struct ReleasingDraft : BatchedScriptedDraft {
  using BatchedScriptedDraft::BatchedScriptedDraft;
  std::vector<sequence_id> released;
  void release(sequence_id id) noexcept { released.push_back(id); }
};

TEST(BatchedDecoderRelease, EverySequenceLeavingIsReleasedOnceFromBothModels) {
  const ScriptedPair pair = make_pair();
  const std::vector<Request> all = requests();
  ReleasingTarget target(pair.target<float>());
  ReleasingDraft draft(pair.draft<float>());
  using Released = std::vector<sequence_id>;
  {
    BatchedDecoder<ReleasingTarget, ModelProposer<ReleasingDraft>> decoder(
        target, ModelProposer<ReleasingDraft>(draft));
    decoder.add(1, all[0].prompt, all[0].config);  // 23 tokens
    decoder.add(2, all[3].prompt, all[3].config);  // 40 tokens
    decoder.add(3, all[1].prompt, all[1].config);
    decoder.cancel(3);
    (void)decoder.step();  // 3 leaves, cancelled
    EXPECT_EQ(target.released, Released({3}));
    while (decoder.contains(1)) (void)decoder.step();  // 1 finishes
    EXPECT_EQ(target.released, Released({3, 1}));
    EXPECT_EQ(draft.released, target.released);
    decoder.add(4, all[2].prompt, all[2].config);
    target.throw_on_batch = true;  // the batch is dropped: 2 and 4 leave
    EXPECT_THROW((void)decoder.step(), std::runtime_error);
    EXPECT_EQ(target.released, Released({3, 1, 2, 4}));
    target.throw_on_batch = false;
    decoder.add(5, all[0].prompt, all[0].config);
    (void)decoder.step();
    EXPECT_EQ(target.released.size(), 4u);  // 5 is still decoding...
  }
  EXPECT_EQ(target.released, Released({3, 1, 2, 4, 5}));  // ...until the decoder goes
  EXPECT_EQ(draft.released, target.released);
}

TEST(BatchedDecoderFaults, AThrowingBatchedTargetCallDropsTheBatchAndADecodeAfterIsFresh) {
  const ScriptedPair pair = make_pair();
  const std::vector<Request> all = requests();
  Models<true> models(pair);
  auto decoder = models.decoder();
  decoder.add(1, all[1].prompt, all[1].config);
  decoder.add(2, all[2].prompt, all[2].config);
  (void)decoder.step();
  models.target.throw_on_batch = true;
  try {
    (void)decoder.step();
    ADD_FAILURE() << "expected the batched target call's error";
  } catch (const std::runtime_error& error) {
    EXPECT_EQ(std::string(error.what()),
              "specdec: the batched target call for sequences 1, 2 failed; the batch was "
              "dropped: target engine out of memory");
    EXPECT_THROW(std::rethrow_if_nested(error), std::runtime_error);
  }
  EXPECT_TRUE(decoder.empty());
  models.target.throw_on_batch = false;
  decoder.add(1, all[1].prompt, all[1].config);
  decoder.add(3, all[3].prompt, all[3].config);
  auto finished = by_id(decoder.run());
  expect_same_generation(finished.at(1).result, alone(pair, all[1]), "sequence 1 again");
  expect_same_generation(finished.at(3).result, alone(pair, all[3]), "sequence 3");
}

TEST(BatchedDecoderFaults, AThrowingBatchedDraftCallDropsTheBatchAndADecodeAfterIsFresh) {
  const ScriptedPair pair = make_pair();
  const std::vector<Request> all = requests();
  Models<true> models(pair);
  auto decoder = models.decoder();
  decoder.add(4, all[1].prompt, all[1].config);
  decoder.add(5, all[3].prompt, all[3].config);
  (void)decoder.step();
  models.draft.throw_on_batch = true;
  try {
    (void)decoder.step();
    ADD_FAILURE() << "expected the batched draft call's error";
  } catch (const std::runtime_error& error) {
    EXPECT_EQ(std::string(error.what()),
              "specdec: the batched draft call for sequences 4, 5 failed; the batch was "
              "dropped: draft engine out of memory");
  }
  EXPECT_TRUE(decoder.empty());
  models.draft.throw_on_batch = false;
  decoder.add(4, all[1].prompt, all[1].config);
  auto finished = by_id(decoder.run());
  expect_same_generation(finished.at(4).result, alone(pair, all[1]), "sequence 4 again");
}

TEST(BatchedDecoderFaults, MalformedBatchedDraftRowsDropTheBatchNamingTheCall) {
  const ScriptedPair pair = make_pair();
  const std::vector<Request> all = requests();
  Models<true> models(pair);
  auto decoder = models.decoder();
  decoder.add(4, all[1].prompt, all[1].config);
  decoder.add(5, all[3].prompt, all[3].config);
  models.draft.drop_a_logit = true;
  try {
    (void)decoder.step();
    ADD_FAILURE() << "expected the batched draft call's error";
  } catch (const std::runtime_error& error) {
    EXPECT_EQ(std::string(error.what()),
              "specdec: the batched draft call for sequences 4, 5 failed; the batch was "
              "dropped: draft_batch returned 15 logits for 2 rows; expected a positive multiple "
              "of 2 (n rows of V logits)");
    EXPECT_THROW(std::rethrow_if_nested(error), std::domain_error);
  }
  EXPECT_TRUE(decoder.empty());
}

/// A target whose rows for one context are malformed (NaN): that sequence's error, not the
/// batch's.
struct PoisonedTarget : BatchedScriptedTarget {
  using BatchedScriptedTarget::BatchedScriptedTarget;
  token_t poison = 0;
  const std::vector<float>& score_batch(std::span<const specdec::ScoreRequest> requests) {
    BatchedScriptedTarget::score_batch(requests);
    std::size_t first = 0;
    const std::size_t vocab = rows.size() / batch_rows_of(requests);
    for (const specdec::ScoreRequest& request : requests) {
      if (request.context.front() == poison) rows[first * vocab] = std::nanf("");
      first += request.rows;
    }
    return rows;
  }
  static std::size_t batch_rows_of(std::span<const specdec::ScoreRequest> requests) {
    std::size_t total = 0;
    for (const auto& request : requests) total += request.rows;
    return total;
  }
};

TEST(BatchedDecoderFaults, BadRowsOfOneSequenceEndThatSequenceOnly) {
  const ScriptedPair pair = make_pair();
  const std::vector<Request> all = requests();
  BatchedScriptedDraft draft(pair.draft<float>());
  PoisonedTarget target(pair.target<float>());
  target.poison = 0;  // all[2]'s prompt starts with 0
  BatchedDecoder<PoisonedTarget, ModelProposer<BatchedScriptedDraft>> decoder(
      target, ModelProposer<BatchedScriptedDraft>(draft));
  decoder.add(1, all[1].prompt, all[1].config);
  decoder.add(2, all[2].prompt, all[2].config);
  auto finished = by_id(decoder.run());
  ASSERT_TRUE(finished.at(2).error);
  EXPECT_EQ(message_of(finished.at(2).error).rfind("specdec: sequence 2: ", 0), 0u)
      << message_of(finished.at(2).error);
  try {
    std::rethrow_exception(finished.at(2).error);
  } catch (const specdec::SequenceError& error) {
    EXPECT_THROW(error.rethrow_nested(), std::domain_error);
  }
  expect_same_generation(finished.at(1).result, alone(pair, all[1]), "sequence 1");
}

}  // namespace

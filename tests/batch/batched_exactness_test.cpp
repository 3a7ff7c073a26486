// Exactness per sequence through BatchedDecoder: the first tokens of a sequence follow the
// target's law (Pearson χ² against testing::target_law, exact in double), while other sequences
// at another temperature share its batched calls and join and leave around it.

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <map>
#include <vector>

#include "specdec/batch.hpp"
#include "specdec/testing.hpp"

#include "batch_models.hpp"

namespace {

using specdec::GenerationConfig;
using specdec::ModelProposer;
using specdec::sequence_id;
using specdec::token_t;
using specdec::testing::ScriptedPair;
using specdec_test::BatchedScriptedDraft;
using specdec_test::BatchedScriptedTarget;

constexpr std::size_t kVocab = 6;
constexpr std::size_t kLength = 3;     // tokens per sequence: kVocab^3 = 216 cells
constexpr std::size_t kRuns = 60'000;  // per temperature
constexpr std::size_t kBatch = 4;      // sequences decoded at once
// Significance threshold for each of the four assertions below: a correct decoder fails one of
// them with probability ~4e-4; the seeds are fixed, so a run's verdict is reproducible.
constexpr double kMinPValue = 1e-4;
const std::vector<token_t> kPrompt{2, 5};

std::vector<double> cell_probabilities(const specdec::testing::Law& law) {
  std::vector<double> probabilities(kVocab * kVocab * kVocab, 0.0);
  for (const auto& [sequence, probability] : law) {
    std::size_t cell = 0;
    for (const token_t token : sequence) cell = cell * kVocab + static_cast<std::size_t>(token);
    probabilities[cell] += probability;
  }
  return probabilities;
}

/// With `goodput`, both settings use the goodput policy and the batch plans their draft lengths
/// (batch/goodput.hpp) against `costs`: lengths that change with the batch and the verdicts.
template <class Target, class Draft>
void expect_target_law(Target& target, Draft& draft, bool batched, const char* what,
                       bool goodput = false, const specdec::BatchGoodputOptions& costs = {}) {
  ScriptedPair pair;
  pair.target_model.vocab = kVocab;
  pair.perturbation.vocab = kVocab;
  pair.noise = 0.8;
  // Two settings that share every batch: sequences alternate between them.
  GenerationConfig cool;
  cool.sampling.temperature = 0.8f;
  cool.max_new_tokens = kLength;
  cool.draft_length = 2;
  GenerationConfig hot;
  hot.sampling.temperature = 1.4f;
  hot.sampling.top_k = 4;
  hot.max_new_tokens = kLength;
  hot.draft_length = 3;
  hot.verifier = specdec::VerifierKind::block;
  if (goodput) {
    cool.draft_length_policy.kind = specdec::DraftLengthKind::goodput;
    hot.draft_length_policy.kind = specdec::DraftLengthKind::goodput;
  }
  const GenerationConfig* settings[2] = {&cool, &hot};

  target = Target(pair.target<float>());
  draft = Draft(pair.draft<float>());
  specdec::BatchedDecoder<Target, ModelProposer<Draft>> decoder(target, ModelProposer<Draft>(draft),
                                                                {}, {}, costs);
  std::size_t drafted_rows = 0, rows = 0;
  std::vector<std::uint64_t> counts[2] = {std::vector<std::uint64_t>(kVocab * kVocab * kVocab),
                                          std::vector<std::uint64_t>(kVocab * kVocab * kVocab)};
  sequence_id next = 0;
  std::size_t finished = 0;
  // Continuous batching: the batch is topped up to kBatch sequences before every step, so
  // sequences join while others are mid-way.
  while (finished < 2 * kRuns) {
    while (decoder.size() < kBatch && next < 2 * kRuns) {
      GenerationConfig config = *settings[next % 2];
      config.seed = 0x5eed0000 + next;
      decoder.add(next, kPrompt, config);
      ++next;
    }
    for (const specdec::FinishedSequence& done : decoder.step()) {
      ASSERT_FALSE(done.error);
      drafted_rows += done.result.stats.drafted;
      rows += done.result.stats.drafted + done.result.stats.rounds;
      ASSERT_EQ(done.result.tokens.size(), kLength);
      std::size_t cell = 0;
      for (const token_t token : done.result.tokens) {
        cell = cell * kVocab + static_cast<std::size_t>(token);
      }
      ++counts[done.id % 2][cell];
      ++finished;
    }
  }
  for (std::size_t s = 0; s < 2; ++s) {
    ScriptedPair law_pair = pair;
    law_pair.params = settings[s]->sampling;
    const std::vector<double> probabilities = cell_probabilities(
        specdec::testing::target_law(law_pair.target(), law_pair.params, kPrompt, kLength));
    const specdec::testing::GoodnessOfFit fit =
        specdec::testing::chi_square_test(counts[s], probabilities);
    std::printf("%s, setting %zu: chi2 = %.1f over %zu cells, p = %.3g\n", what, s, fit.statistic,
                fit.cells, fit.p_value);
    EXPECT_EQ(fit.impossible, 0u) << what << ", setting " << s;
    EXPECT_GT(fit.p_value, kMinPValue) << what << ", setting " << s << ": chi2 = " << fit.statistic
                                       << " over " << fit.cells << " cells";
  }
  if (goodput) {  // the plan drafted, but not every row it could
    EXPECT_GT(drafted_rows, rows / 5) << what;
    EXPECT_LT(drafted_rows, rows * 2 / 3) << what;
  }
  // Batched: the target call is shared by the batch's sequences; else one per sequence round.
  if (batched) {
    EXPECT_GT(decoder.stats().rounds_per_target_call(), 2.0) << what;
  } else {
    EXPECT_DOUBLE_EQ(decoder.stats().rounds_per_target_call(), 1.0) << what;
  }
}

TEST(BatchedExactnessTest, FirstTokensFollowTheTargetLawWithBatchedCalls) {
  ScriptedPair pair;
  BatchedScriptedTarget target(pair.target<float>());
  BatchedScriptedDraft draft(pair.draft<float>());
  expect_target_law(target, draft, true, "batched calls");
}

TEST(BatchedExactnessTest, FirstTokensFollowTheTargetLawWithPerSequenceCalls) {
  ScriptedPair pair;
  ScriptedPair::Target<float> target = pair.target<float>();
  ScriptedPair::Draft<float> draft = pair.draft<float>();
  expect_target_law(target, draft, false, "per-sequence calls");
}

// The goodput sequences' draft lengths planned for the batch (a call costs little more up to 6
// rows, then a step per row): they change with the batch's content and the verdicts.
TEST(BatchedExactnessTest, FirstTokensFollowTheTargetLawWithDraftLengthsPlannedForTheBatch) {
  ScriptedPair pair;
  BatchedScriptedTarget target(pair.target<float>());
  BatchedScriptedDraft draft(pair.draft<float>());
  specdec::BatchGoodputOptions costs;
  for (std::size_t n = 1; n <= kBatch * 4; ++n) {
    costs.target_call_costs.push_back(n <= 6 ? 1.0 + 0.03 * static_cast<double>(n)
                                             : 0.4 * static_cast<double>(n) - 1.0);
  }
  for (std::size_t n = 1; n <= kBatch; ++n) {
    costs.draft_call_costs.push_back(0.05 + 0.01 * static_cast<double>(n));
  }
  expect_target_law(target, draft, true, "planned draft lengths", true, costs);
}

}  // namespace

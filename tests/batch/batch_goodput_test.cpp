// Draft lengths planned for a whole batch (batch/goodput.hpp): the plan is the best allocation
// of drafted rows across sequences, checked by enumerating every allocation; it drafts less
// per sequence as the batch fills the target's call, is exactly plain batched decoding where no
// row pays, probes only where optimism pays; through BatchedDecoder the goodput sequences follow
// it, greedy output stays the target's, and fixed costs make sampled output reproducible.

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <functional>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "specdec/batch.hpp"
#include "specdec/decoder.hpp"
#include "specdec/measure/batch_call_costs.hpp"
#include "specdec/testing.hpp"

#include "batch_models.hpp"

namespace {

using specdec::BatchedDecoder;
using specdec::BatchGoodputOptions;
using specdec::BatchGoodputPlanner;
using specdec::GenerationConfig;
using specdec::ModelProposer;
using specdec::token_t;
using specdec::testing::ScriptedPair;
using specdec_test::BatchedScriptedDraft;
using specdec_test::BatchedScriptedTarget;

/// A curve of n = 1 .. size entries from f(n).
std::vector<double> curve(std::size_t size, const std::function<double(std::size_t)>& f) {
  std::vector<double> out(size);
  for (std::size_t n = 1; n <= size; ++n) out[n - 1] = f(n);
  return out;
}

BatchGoodputOptions fixed(std::vector<double> target, std::vector<double> draft) {
  BatchGoodputOptions options;
  options.target_call_costs = std::move(target);
  options.draft_call_costs = std::move(draft);
  return options;
}

/// The plain guard's curves: 4 sequences of up to 8 drafted tokens, T(n) = 1 + 0.02 (n - 1),
/// a draft call 0.01 whatever it advances.
BatchGoodputOptions four_sequence_curves() {
  return fixed(curve(4 * 9, [](std::size_t n) { return 1.0 + 0.02 * static_cast<double>(n - 1); }),
               curve(4, [](std::size_t) { return 0.01; }));
}

/// The step's expected rate for given lengths, written out as the planner's file comment
/// defines it: tokens sum_s (1 + sum_{i <= m_s} P_{s,i}); one target call of sum_s (m_s + 1)
/// rows; draft call k over the sequences with m_s >= k.
double rate_of(const std::vector<std::vector<double>>& acceptance,
               const std::vector<std::size_t>& lengths, const BatchGoodputOptions& options) {
  double tokens = 0;
  std::size_t rows = 0;
  std::size_t longest = 0;
  for (std::size_t s = 0; s < lengths.size(); ++s) {
    double survival = 1;
    tokens += 1;
    for (std::size_t i = 0; i < lengths[s]; ++i) tokens += (survival *= acceptance[s][i]);
    rows += lengths[s] + 1;
    longest = std::max(longest, lengths[s]);
  }
  double cost = options.target_call_costs.at(rows - 1);
  for (std::size_t k = 1; k <= longest; ++k) {
    std::size_t in_call = 0;
    for (const std::size_t m : lengths) in_call += m >= k;
    cost += options.draft_call_costs.at(in_call - 1);
  }
  return tokens / cost;
}

/// The best rate over every allocation (0 .. limit per sequence), by enumeration.
double best_rate(const std::vector<std::vector<double>>& acceptance,
                 const BatchGoodputOptions& options) {
  std::vector<std::size_t> lengths(acceptance.size(), 0);
  double best = 0;
  for (;;) {
    best = std::max(best, rate_of(acceptance, lengths, options));
    std::size_t s = 0;
    while (s < lengths.size() && lengths[s] == acceptance[s].size()) lengths[s++] = 0;
    if (s == lengths.size()) return best;
    ++lengths[s];
  }
}

struct Planned {
  std::vector<std::size_t> lengths;
  std::vector<bool> probing;
  double rate = 0;
};

/// The drafted rows of a plan, over all its sequences.
std::size_t drafted_rows(const Planned& planned) {
  return std::accumulate(planned.lengths.begin(), planned.lengths.end(), std::size_t{0});
}

Planned plan(BatchGoodputPlanner& planner, const std::vector<std::vector<double>>& acceptance,
             const BatchGoodputOptions& options, double optimistic = 0, bool probe_due = false,
             std::size_t plain_steps = 0) {
  std::size_t longest = 0;
  for (const auto& a : acceptance) longest = std::max(longest, a.size());
  planner.reserve(acceptance.size(), longest);
  planner.clear();
  for (const auto& a : acceptance) (void)planner.add_planned(a, optimistic, probe_due, plain_steps);
  planner.solve();
  Planned out;
  for (std::size_t s = 0; s < acceptance.size(); ++s) {
    out.lengths.push_back(planner.length(s));
    out.probing.push_back(planner.probing(s));
  }
  out.rate = rate_of(acceptance, out.lengths, options);
  return out;
}

/// The prompts' step, two plain steps timed at `plain_step`, the drafts' prefill, then two
/// drafting steps that emit 6 tokens (over `good.size()` sequences) in 3 plain steps' time:
/// the guard finds drafting losing.
void judge_drafting_losing(BatchGoodputPlanner& planner,
                           const std::vector<std::vector<double>>& good,
                           const BatchGoodputOptions& options, double plain_step) {
  const std::size_t width = good.size();
  planner.skip_step();  // the prompts' step
  for (int step = 0; step < 2; ++step) {
    EXPECT_EQ(drafted_rows(plan(planner, good, options)), 0u);
    planner.observe_step(plain_step, width, width);
  }
  planner.skip_step();  // the drafts read the prompts
  for (int step = 0; step < 2; ++step) {
    EXPECT_GT(drafted_rows(plan(planner, good, options)), 0u);
    planner.observe_step(3 * plain_step, 6, width);
  }
  EXPECT_TRUE(planner.drafting_loses());
}

// ---- the plan against every allocation ----------------------------------------------------------

// With draft calls whose cost is a sum over their rows, a step's cost depends only on how many
// rows are drafted, so the largest survivals are the best rows to draft: the plan must equal
// the best allocation, on curves with steps and dips.
TEST(BatchGoodputPlanner, WithDraftCostsPerRowThePlanIsTheBestAllocation) {
  std::mt19937 random(20261204);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  for (int instance = 0; instance < 300; ++instance) {
    const std::size_t sequences = 1 + instance % 3;
    const std::size_t limit = 1 + (instance / 3) % 4;
    std::vector<std::vector<double>> acceptance(sequences);
    for (auto& a : acceptance) {
      for (std::size_t i = 0; i < limit; ++i) a.push_back(0.1 + 0.9 * uniform(random));
    }
    const std::size_t rows = sequences * (limit + 1);
    // A rising curve with random steps and dips (a CPU engine's row tiles).
    double level = 1.0;
    const BatchGoodputOptions options =
        fixed(curve(rows,
                    [&](std::size_t) {
                      level *= 0.9 + 0.5 * uniform(random);
                      return level;
                    }),
              curve(sequences, [&](std::size_t n) { return 0.08 * static_cast<double>(n); }));
    BatchGoodputPlanner planner(options);
    const Planned got = plan(planner, acceptance, options);
    EXPECT_NEAR(got.rate, best_rate(acceptance, options), 1e-12) << "instance " << instance;
    EXPECT_NEAR(planner.expected_tokens() / planner.expected_cost(), got.rate, 1e-12);
  }
}

// With a fixed cost per draft call the best allocation also weighs how many calls the longest
// sequence needs; the plan ranks rows by survival alone, so it may miss it, by little.
TEST(BatchGoodputPlanner, WithACostPerDraftCallThePlanIsWithinTwoPercentOfTheBest) {
  std::mt19937 random(7);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  double worst = 1;
  for (int instance = 0; instance < 300; ++instance) {
    const std::size_t sequences = 1 + instance % 4;
    const std::size_t limit = 1 + (instance / 4) % 4;
    std::vector<std::vector<double>> acceptance(sequences);
    for (auto& a : acceptance) {
      for (std::size_t i = 0; i < limit; ++i) a.push_back(0.1 + 0.9 * uniform(random));
    }
    const double per_call = 0.05 + 0.2 * uniform(random);
    const BatchGoodputOptions options = fixed(
        curve(sequences * (limit + 1),
              [](std::size_t n) { return 1.0 + 0.1 * static_cast<double>(n - 1); }),
        curve(sequences, [&](std::size_t n) { return per_call + 0.01 * static_cast<double>(n); }));
    BatchGoodputPlanner planner(options);
    const Planned got = plan(planner, acceptance, options);
    worst = std::min(worst, got.rate / best_rate(acceptance, options));
  }
  std::printf("worst plan / best allocation: %.4f\n", worst);
  EXPECT_GT(worst, 0.98);
}

// ---- shapes
// ---------------------------------------------------------------------------------------

// A memory-bound target: a call costs the same up to 16 rows, then grows with them. Drafting
// fills the call's free rows; once plain decoding of the batch fills them, every drafted row
// costs its full share and the step is plain.
TEST(BatchGoodputPlanner, DraftsLessPerSequenceAsTheBatchFillsTheCall) {
  const std::vector<double> target =
      curve(32 * 9, [](std::size_t n) { return std::max(1.0, static_cast<double>(n) / 16.0); });
  std::size_t previous = 9;
  for (const std::size_t batch : {1u, 2u, 4u, 8u, 16u, 32u}) {
    const BatchGoodputOptions options =
        fixed(target, curve(32, [](std::size_t n) { return 0.02 + 0.002 * n; }));
    BatchGoodputPlanner planner(options);
    const Planned got = plan(
        planner, std::vector<std::vector<double>>(batch, std::vector<double>(8, 0.8)), options);
    const std::size_t most = *std::max_element(got.lengths.begin(), got.lengths.end());
    const std::size_t least = *std::min_element(got.lengths.begin(), got.lengths.end());
    EXPECT_LE(most, previous) << "B = " << batch;
    EXPECT_LE(most - least, 1u) << "B = " << batch << ": alike sequences, alike lengths";
    if (batch >= 16) {
      EXPECT_EQ(most, 0u) << "B = " << batch;
    }
    if (batch <= 2) {
      EXPECT_GE(least, 4u) << "B = " << batch;
    }
    previous = most;
  }
}

TEST(BatchGoodputPlanner, TheSequenceWhoseDraftIsBetterDraftsMore) {
  const BatchGoodputOptions options =
      fixed(curve(3 * 9, [](std::size_t n) { return 1.0 + 0.1 * static_cast<double>(n - 1); }),
            curve(3, [](std::size_t n) { return 0.05 * static_cast<double>(n); }));
  BatchGoodputPlanner planner(options);
  const Planned got =
      plan(planner,
           {std::vector<double>(8, 0.95), std::vector<double>(8, 0.6), std::vector<double>(8, 0.1)},
           options);
  EXPECT_GT(got.lengths[0], got.lengths[1]);
  EXPECT_GE(got.lengths[1], got.lengths[2]);
  EXPECT_EQ(got.lengths[2], 0u);
  EXPECT_NEAR(got.rate,
              best_rate({std::vector<double>(8, 0.95), std::vector<double>(8, 0.6),
                         std::vector<double>(8, 0.1)},
                        options),
              1e-12);
}

// Every extra row costs as much as a whole one-row call: no acceptance below 1 pays, and even
// an optimistic probe would not, so the plan is plain for every sequence.
TEST(BatchGoodputPlanner, WhenNoRowPaysEverySequenceIsPlainAndNoProbeIsMade) {
  const BatchGoodputOptions options =
      fixed(curve(4 * 9, [](std::size_t n) { return static_cast<double>(n); }),
            curve(4, [](std::size_t n) { return 0.1 * static_cast<double>(n); }));
  BatchGoodputPlanner planner(options);
  const Planned got =
      plan(planner, std::vector<std::vector<double>>(4, std::vector<double>(8, 0.99)), options,
           /*optimistic=*/1.0, /*probe_due=*/true);
  for (std::size_t s = 0; s < 4; ++s) {
    EXPECT_EQ(got.lengths[s], 0u);
    EXPECT_FALSE(got.probing[s]);
  }
  EXPECT_EQ(planner.rows(), 4u);
  EXPECT_DOUBLE_EQ(planner.threshold(), 1.0);
}

// A draft believed useless (acceptance 0.05) is left plain; once its probe is due, one row is
// drafted if the optimistic acceptance would pay for it by a clear margin (10 %), and only
// then: at an optimistic 0.5 its best case is 3.5 % above plain steps, which a probe's own
// costs (the draft's catch-up, new call shapes) outweigh.
TEST(BatchGoodputPlanner, AProbeIsOneRowAndOnlyWhenDueAndOptimismPays) {
  const BatchGoodputOptions options =
      fixed(curve(2 * 9, [](std::size_t n) { return 1.0 + 0.2 * static_cast<double>(n - 1); }),
            curve(2, [](std::size_t n) { return 0.05 * static_cast<double>(n); }));
  const std::vector<std::vector<double>> useless(2, std::vector<double>(8, 0.05));
  BatchGoodputPlanner planner(options);
  Planned got = plan(planner, useless, options, /*optimistic=*/0.9, /*probe_due=*/false);
  EXPECT_EQ(got.lengths, (std::vector<std::size_t>{0, 0}));
  got = plan(planner, useless, options, /*optimistic=*/0.9, /*probe_due=*/true);
  EXPECT_EQ(got.lengths, (std::vector<std::size_t>{1, 1}));
  EXPECT_TRUE(got.probing[0] && got.probing[1]);
  got = plan(planner, useless, options, /*optimistic=*/0.2, /*probe_due=*/true);
  EXPECT_EQ(got.lengths, (std::vector<std::size_t>{0, 0}));
  got = plan(planner, useless, options, /*optimistic=*/0.5, /*probe_due=*/true);
  EXPECT_EQ(got.lengths, (std::vector<std::size_t>{0, 0})) << "a best case 3.5 % above plain";
  // At 0.7 the first sequence's best case is 12.6 % above plain steps; the second's, over a
  // plan that already has the first one's probe, is less than 10 % above it.
  got = plan(planner, useless, options, /*optimistic=*/0.7, /*probe_due=*/true);
  EXPECT_EQ(got.lengths, (std::vector<std::size_t>{1, 0}));
}

// The plain step priced as plain decoding runs it (BatchGoodputOptions::plain_step_costs): a
// call of n rows costs 1 + 0.1 n among other shapes, a draft call 0.1 per sequence, and with
// every drafted token accepted at 0.9 the best plan (5 tokens each) emits 2.93 tokens per unit
// against plain steps' 1.67. In a run of plain calls the 2-row call costs 0.6: plain steps
// emit 3.33 tokens per unit, so every sequence is plain, and no probe either. A
// plain_step_costs entry above T(b) is noise: the plain step is priced at T(b).
TEST(BatchGoodputPlanner, ThePlainStepIsPricedAsARunOfPlainCalls) {
  BatchGoodputOptions options =
      fixed(curve(2 * 9, [](std::size_t n) { return 1.0 + 0.1 * static_cast<double>(n); }),
            curve(2, [](std::size_t n) { return 0.1 * static_cast<double>(n); }));
  const std::vector<std::vector<double>> acceptance(2, std::vector<double>(8, 0.9));
  BatchGoodputPlanner among_shapes(options);
  Planned got = plan(among_shapes, acceptance, options);
  EXPECT_GT(got.lengths[0] + got.lengths[1], 0u) << "drafting looks like a gain";
  options.plain_step_costs = {0.5, 0.6};
  BatchGoodputPlanner in_a_run(options);
  got = plan(in_a_run, acceptance, options, /*optimistic=*/0.95, /*probe_due=*/true);
  EXPECT_EQ(got.lengths, (std::vector<std::size_t>{0, 0}));
  EXPECT_FALSE(got.probing[0] || got.probing[1]);
  EXPECT_DOUBLE_EQ(in_a_run.expected_cost(), 0.6);
  options.plain_step_costs = {0.5, 1.5};
  BatchGoodputPlanner noisy(options);
  got = plan(noisy, acceptance, options);
  EXPECT_GT(got.lengths[0] + got.lengths[1], 0u);
  noisy.clear();
  (void)noisy.add_planned({}, 0, false);
  (void)noisy.add_planned({}, 0, false);
  noisy.solve();
  EXPECT_DOUBLE_EQ(noisy.expected_cost(), 1.2);
}

// Sequences the plan does not drive (another policy) count in the call's rows: with a free
// call up to 8 rows, a fixed sequence drafting 5 (6 rows) leaves the planned one (1 row) a
// single free row.
TEST(BatchGoodputPlanner, AFixedSequencesRowsCountInTheCall) {
  const BatchGoodputOptions options =
      fixed(curve(16, [](std::size_t n) { return n <= 8 ? 1.0 : static_cast<double>(n) / 2.0; }),
            curve(2, [](std::size_t n) { return 0.001 * static_cast<double>(n); }));
  BatchGoodputPlanner planner(options);
  planner.reserve(2, 7);
  planner.clear();
  (void)planner.add_fixed(5);
  const std::size_t planned = planner.add_planned(std::vector<double>(7, 0.9), 0, false);
  planner.solve();
  EXPECT_EQ(planner.length(planned), 1u);
  EXPECT_EQ(planner.rows(), 8u);
}

// An engine that cuts a call into equal micro-batches (llama.cpp's split KV cache) pays one
// pass per distinct row count. With passes that cost mostly their overhead, a sequence drafting
// alone costs a pass of its own, and the plan evens the lengths out: the weak draft drafts as
// much as the strong one, riding on the same passes.
TEST(BatchGoodputPlanner, WithEqualMicroBatchesItPricesAPassPerRowCountAndEvensLengthsOut) {
  const BatchGoodputOptions options =
      fixed(curve(2 * 5, [](std::size_t n) { return 1.0 + 0.01 * static_cast<double>(n); }),
            curve(2, [](std::size_t n) { return 0.01 * static_cast<double>(n); }));
  BatchGoodputPlanner one_pass(options), micro(options);
  micro.set_call_shape(true, true, /*equal_micro_batches=*/true);
  const std::vector<std::vector<double>> acceptance = {std::vector<double>(4, 0.9),
                                                       std::vector<double>(4, 0.3)};
  const Planned evened = plan(micro, acceptance, options);
  EXPECT_EQ(evened.lengths, (std::vector<std::size_t>{4, 4}));
  EXPECT_NEAR(micro.expected_cost(), 1.0 + 0.01 * 10 + 4 * 0.02, 1e-12);  // one pass of 10 rows
  // The same lengths unequal: passes of 2 rows (both sequences' first) and 3 (the second's).
  micro.clear();
  (void)micro.add_fixed(0);
  (void)micro.add_fixed(3);
  micro.solve();
  EXPECT_NEAR(micro.expected_cost(), (1.0 + 0.02) + (1.0 + 0.03) + 3 * 0.01, 1e-12);
  // One pass whatever the lengths: the weak draft drafts less.
  const Planned ranked = plan(one_pass, acceptance, options);
  EXPECT_GT(ranked.lengths[0], ranked.lengths[1]);
}

TEST(BatchGoodputPlanner, MeasuredCostsAreReadWhereSeenAndExtrapolatedFromBelow) {
  BatchGoodputPlanner planner;  // measured
  planner.reserve(2, 3);
  for (int i = 0; i < 3; ++i) {
    planner.observe_target_call(2, 0.010);
    planner.observe_target_call(4, 0.014);
  }
  const auto costs = planner.target_costs();
  ASSERT_EQ(costs.size(), 8u);
  EXPECT_DOUBLE_EQ(costs[1], 0.010);
  EXPECT_DOUBLE_EQ(costs[3], 0.014);
  EXPECT_NEAR(costs[5], 0.018, 1e-12);  // the line through 2 and 4 rows
  // Until a draft call is timed, a draft call costs 5 % of a target call of as many rows.
  EXPECT_NEAR(planner.draft_costs()[1], 0.05 * 0.010, 1e-12);
  for (int i = 0; i < 3; ++i) planner.observe_draft_call(2, 0.001);
  EXPECT_DOUBLE_EQ(planner.draft_costs()[1], 0.001);
}

// ---- the plain guard --------------------------------------------------------------------------

// Drafting that the curves call a gain but that delivers fewer tokens per sequence per second
// than plain steps: the guard makes the steps plain, tries the plan again after a wait, and
// reopens drafting when a trial delivers. Only with measured curves (or costs learnt while
// decoding): a user's own fixed curves keep the plan independent of timings.
TEST(BatchGoodputPlanner, ThePlainGuardStopsDraftingThatDeliversLessThanPlainSteps) {
  BatchGoodputOptions options = four_sequence_curves();
  const std::vector<std::vector<double>> acceptance(4, std::vector<double>(8, 0.9));
  const auto drafted = [&](BatchGoodputPlanner& planner) {
    return drafted_rows(plan(planner, acceptance, options));
  };
  // Steps of 4 sequences: plain ones emit 4 tokens in 1 s; drafting ones 6 tokens in 3 s.
  const auto run = [&](BatchGoodputPlanner& planner, std::size_t steps) {
    std::size_t drafting_steps = 0;
    for (std::size_t step = 0; step < steps; ++step) {
      const bool drafts = drafted(planner) > 0;
      drafting_steps += drafts;
      planner.observe_step(drafts ? 3.0 : 1.0, drafts ? 6 : 4, 4);
    }
    return drafting_steps;
  };

  options.measured_costs = true;
  BatchGoodputPlanner guarded(options);
  guarded.skip_step();  // the step that read the prompts
  // A plain step is timed before a step may draft, and the one right after the prompts' (on
  // llama.cpp a graph rebuilt for one row per sequence: 5 s here) is not a plain step's time:
  // judged against it, the drafting steps below would not lose.
  for (const double seconds : {5.0, 1.0}) {
    EXPECT_EQ(drafted(guarded), 0u) << "too few plain steps timed";
    guarded.observe_step(seconds, 4, 4);
  }
  EXPECT_GT(drafted(guarded), 0u) << "the curves call drafting a gain";
  // The first drafting step, in which the drafts read the prompts, is not observed
  // (BatchedDecoder skips it); the next two are judged.
  guarded.skip_step();
  EXPECT_EQ(run(guarded, 2), 2u);
  EXPECT_TRUE(guarded.drafting_loses());
  // Plain while it loses, but for a trial after 8 plain steps (two drafting steps: the
  // drafts' catch-up, then the step it is judged on), which loses too; the ledger then holds
  // the next one past the 60 steps.
  const std::size_t trials = run(guarded, 60);
  EXPECT_EQ(trials, 2u);
  EXPECT_TRUE(guarded.drafting_loses());
  // A trial that delivers (8 tokens in 1 s) reopens drafting. (The wait has doubled with each
  // lost trial, and the ledger affords trials as plain steps accrue: 2 plain steps' loss plus
  // 0.5 % of the time.)
  std::size_t waited = 0;
  while (drafted(guarded) == 0 && waited < 1000) {
    guarded.observe_step(1.0, 4, 4);
    ++waited;
  }
  ASSERT_LT(waited, 1000u) << "no trial";
  EXPECT_GE(waited, 64u);
  guarded.observe_step(1.0, 8, 4);  // its first step, the drafts' catch-up: no verdict
  EXPECT_TRUE(guarded.drafting_loses());
  ASSERT_GT(drafted(guarded), 0u) << "the trial's judged step";
  guarded.observe_step(1.0, 8, 4);
  EXPECT_FALSE(guarded.drafting_loses());
  EXPECT_GT(drafted(guarded), 0u);

  // Off, or with fixed curves of one's own: the plan drafts whatever the steps deliver.
  for (const bool guard_off : {true, false}) {
    BatchGoodputOptions unguarded = options;
    unguarded.plain_guard = !guard_off;
    unguarded.measured_costs = guard_off;  // on, but over fixed curves of one's own
    BatchGoodputPlanner planner(unguarded);
    EXPECT_EQ(run(planner, 20), 20u);
  }
}

// A trial wins on one step, and one step wins by luck (greedy, every drafted token accepted):
// the drafting it reopens is the trial's until it has held 16 judged steps. Reopened drafting
// that loses again 1 step later counts as a lost trial: the next trial waits twice as long
// (taken as won, the wait started over at 8 plain steps, and on llama.cpp six such trials
// cost 8 % of a run), and what the reopened step lost stays on the ledger. Drafting that held
// starts the wait over.
TEST(BatchGoodputPlanner, ATrialWonIsLostWhenTheDraftingItReopensDoesNotHold) {
  BatchGoodputOptions options = four_sequence_curves();
  options.measured_costs = true;
  const std::vector<std::vector<double>> acceptance(4, std::vector<double>(8, 0.9));
  const auto drafts = [&](BatchGoodputPlanner& planner) {
    return drafted_rows(plan(planner, acceptance, options)) > 0;
  };
  // Plain steps of 4 sequences emit 4 tokens in 1 s; returns the plain steps before a trial.
  const auto wait_for_trial = [&](BatchGoodputPlanner& planner) {
    std::size_t waited = 0;
    while (!drafts(planner) && waited < 1000) {
      planner.observe_step(1.0, 4, 4);
      ++waited;
    }
    return waited;
  };
  // A trial: the drafts' catch-up, then the step it is judged on, which wins (32 tokens in
  // 2 s: 4 plain steps' worth in 2 plain steps' time).
  const auto win_trial = [&](BatchGoodputPlanner& planner) {
    planner.observe_step(2.0, 32, 4);
    ASSERT_TRUE(drafts(planner));
    planner.observe_step(2.0, 32, 4);
    ASSERT_FALSE(planner.drafting_loses());
  };
  // Drafting steps that lose (6 tokens in 3 s) until the guard says so.
  const auto lose = [&](BatchGoodputPlanner& planner) {
    for (int step = 0; step < 10 && !planner.drafting_loses(); ++step) {
      EXPECT_TRUE(drafts(planner));
      planner.observe_step(3.0, 6, 4);
    }
    ASSERT_TRUE(planner.drafting_loses());
  };

  BatchGoodputPlanner planner(options);
  judge_drafting_losing(planner, acceptance, options, 1.0);
  EXPECT_EQ(wait_for_trial(planner), 8u);
  win_trial(planner);
  lose(planner);  // one step later
  // The trial lost: the wait doubled, and the ledger also holds the reopened step's loss.
  const std::size_t waited = wait_for_trial(planner);
  EXPECT_GE(waited, 16u);
  EXPECT_LT(waited, 1000u);
  win_trial(planner);
  for (int step = 0; step < 16; ++step) {  // held: 6 tokens a step in 1 s
    ASSERT_TRUE(drafts(planner));
    planner.observe_step(1.0, 6, 4);
  }
  lose(planner);
  EXPECT_EQ(wait_for_trial(planner), 8u) << "drafting held: the wait starts over";
}

/// Timings for guard_finds_drafting_losing (seconds; `context`: the steps' mean context).
struct GuardScript {
  double plain_call = 0, plain_step = 0;        // each plain step's target call and wall time
  double drafting_call = 0, drafting_step = 0;  // each drafting step's
  std::size_t context = 0;
  double plain_price = 0;  // > 0: the plan's price of the plain step, checked
};

/// 4 sequences that may draft 8 tokens at 0.9: the prompts' step, two plain steps, the
/// drafts' prefill, then two drafting steps that emit 6 tokens; whether the guard then finds
/// drafting losing.
bool guard_finds_drafting_losing(const BatchGoodputOptions& options, const GuardScript& script) {
  const std::vector<std::vector<double>> acceptance(4, std::vector<double>(8, 0.9));
  BatchGoodputPlanner planner(options);
  planner.skip_step();  // the prompts' step
  for (int step = 0; step < 2; ++step) {
    EXPECT_EQ(drafted_rows(plan(planner, acceptance, options)), 0u);
    if (script.plain_price > 0) {
      EXPECT_DOUBLE_EQ(planner.expected_cost(), script.plain_price);
    }
    planner.observe_target_call(4, script.plain_call);
    planner.observe_step(script.plain_step, 4, 4, script.context);
  }
  EXPECT_GT(drafted_rows(plan(planner, acceptance, options)), 0u);
  planner.skip_step();  // the drafts' prefill
  for (int step = 0; step < 2; ++step) {
    EXPECT_GT(drafted_rows(plan(planner, acceptance, options)), 0u);
    planner.observe_target_call(planner.rows(), script.drafting_call);
    planner.observe_step(script.drafting_step, 6, 4, script.context);
  }
  return planner.drafting_loses();
}

// The guard judges a plain step as plain decoding runs it (plain_step_costs): a plain step of
// 2.5 s whose target call took 2 s, where a run of plain calls takes 0.5 s, counts as 1 s.
// Against it, drafting steps of 6 tokens in 2 s lose (0.5 s per sequence for 1.5 tokens, where
// a plain step gives 1 token in 0.25 s); against the 2.5 s they would be a gain.
TEST(BatchGoodputPlanner, ThePlainGuardJudgesAgainstTheSettledPlainCall) {
  BatchGoodputOptions options = four_sequence_curves();
  options.measured_costs = true;
  const GuardScript script{
      .plain_call = 2.0, .plain_step = 2.5, .drafting_call = 1.5, .drafting_step = 2.0};
  EXPECT_FALSE(guard_finds_drafting_losing(options, script));
  options.plain_step_costs = curve(4, [](std::size_t b) { return 0.125 * static_cast<double>(b); });
  EXPECT_TRUE(guard_finds_drafting_losing(options, script));
}

// A run of plain calls timed above the same call among other shapes (T(b)) was timed in a
// slow moment, and the plan prices the plain step at T(b): so does the guard. Plain steps of
// 2.5 s whose target call took 2 s count as 1.56 s with T(4) = 1.06 (not 2.5 s, as under a
// plain_step_costs of 3 s): drafting steps of 6 tokens in 2.5 s then lose (1.6 plain steps
// for 1.5 tokens per sequence), where against 2.5 s they would be a gain.
TEST(BatchGoodputPlanner, ThePlainGuardCapsAPlainStepAtThePlansPriceOfIt) {
  BatchGoodputOptions options = four_sequence_curves();
  options.measured_costs = true;
  options.plain_step_costs = curve(4, [](std::size_t b) { return 0.75 * static_cast<double>(b); });
  EXPECT_TRUE(guard_finds_drafting_losing(options, {.plain_call = 2.0,
                                                    .plain_step = 2.5,
                                                    .drafting_call = 2.0,
                                                    .drafting_step = 2.5,
                                                    .plain_price = 1.06}));
}

// The settled call is capped at the step's context: plain_step_costs timed at context 0 and a
// plain step twice as dear at context 100 (plain_growth 0.01 per token). Plain steps of 1.2 s
// whose call took 1 s count as 0.6 s at context 0; capped at the price of context 0, they
// counted as 0.35 s, and drafting steps of 6 tokens in 1.5 s (1.25 plain steps for 1.5 tokens
// per sequence: a gain) looked a loss (2.1 plain steps).
TEST(BatchGoodputPlanner, ThePlainGuardCapsAPlainStepAtItsOwnContext) {
  BatchGoodputOptions options = four_sequence_curves();
  options.measured_costs = true;
  options.plain_step_costs = curve(4, [](std::size_t b) { return 0.125 * static_cast<double>(b); });
  options.plain_growth = 0.01;
  const GuardScript script{.plain_call = 1.0,
                           .plain_step = 1.2,
                           .drafting_call = 1.3,
                           .drafting_step = 1.5,
                           .context = 100};
  options.plain_step_context = 0;
  EXPECT_FALSE(guard_finds_drafting_losing(options, script));
  // Timed at context 100 themselves (twice the price of context 0), the same.
  options.plain_step_costs = curve(4, [](std::size_t b) { return 0.25 * static_cast<double>(b); });
  options.plain_step_context = 100;
  EXPECT_FALSE(guard_finds_drafting_losing(options, script));
}

// The correction (drafting steps' seconds per predicted unit over plain steps') makes a plan
// plain where drafting steps run dearer than their calls (2.5x here, where every plan loses
// by the steps as run and the calls promise 1.22x), and holds while the steps are plain: a
// fading correction, retrying drafting, failed the floor more often on llama.cpp.
TEST(BatchGoodputPlanner, TheCorrectionMakesThePlanPlainAndHoldsWhileTheStepsArePlain) {
  BatchGoodputOptions options =
      fixed(curve(2 * 9, [](std::size_t n) { return 1.0 + 0.1 * static_cast<double>(n - 1); }),
            curve(2, [](std::size_t) { return 0.05; }));
  options.measured_costs = true;
  options.plain_guard = false;  // the correction alone
  const std::vector<std::vector<double>> nothing(2, std::vector<double>(8, 0.0));
  const std::vector<std::vector<double>> acceptance(2, std::vector<double>(8, 0.5));
  BatchGoodputPlanner planner(options);
  for (int step = 0; step < 4; ++step) {  // plain steps, timed at their price
    ASSERT_EQ(drafted_rows(plan(planner, nothing, options)), 0u);
    planner.observe_step(1.1);
  }
  std::size_t drafting = 0;
  for (int step = 0; step < 200; ++step) {
    const Planned planned = plan(planner, acceptance, options);
    if (step == 0) {
      EXPECT_GT(planned.rate, 1.2 * 2.0 / 1.1) << "the calls promise a gain";
    }
    if (drafted_rows(planned) == 0) {
      planner.observe_step(1.1);
      continue;
    }
    ++drafting;
    planner.observe_step(2.5 * planner.expected_tokens() / planned.rate);
  }
  EXPECT_EQ(drafting, 4u) << "four drafting steps to measure, then plain";
  EXPECT_NEAR(planner.correction(), 2.5, 1e-9);
}

// A step the curves price below the plain step (a dip: 3 rows at 0.97 where 2 cost 1.0) keeps
// its price whatever the correction: the correction scales what drafting adds above the plain
// step, and scaled, a saving grew with it (drafting steps at twice their price made the
// one-token step 0.96 instead of 0.98, the dearer drafting ran, the cheaper it looked).
TEST(BatchGoodputPlanner, TheCorrectionDoesNotScaleASaving) {
  BatchGoodputOptions options =
      fixed(curve(2 * 9,
                  [](std::size_t n) {
                    return n <= 2 ? 0.5 * static_cast<double>(n) : n == 3 ? 0.97 : 5.0;
                  }),
            curve(2, [](std::size_t) { return 0.01; }));
  options.measured_costs = true;
  options.plain_guard = false;                        // the correction alone
  const std::vector<std::vector<double>> nothing(2);  // nothing to draft: plain steps
  const std::vector<std::vector<double>> acceptance{std::vector<double>(8, 0.9),
                                                    std::vector<double>(8, 0.5)};
  BatchGoodputPlanner planner(options);
  for (int step = 0; step < 4; ++step) {  // plain steps, timed at their price
    ASSERT_EQ(drafted_rows(plan(planner, nothing, options)), 0u);
    planner.observe_step(1.0);
  }
  for (int step = 0; step < 8; ++step) {
    const Planned planned = plan(planner, acceptance, options);
    ASSERT_EQ(planned.lengths, (std::vector<std::size_t>{1, 0})) << "step " << step;
    EXPECT_NEAR(planner.expected_cost(), 0.97 + 0.01, 1e-9) << "step " << step;
    planner.observe_step(2.0 * planner.expected_cost());
  }
  EXPECT_NEAR(planner.correction(), 2.0, 1e-9);
}

// The correction compares the steps at context 0 (plain_growth): plain steps timed early, at
// context 10, and drafting steps later, at context 200, where every call costs 1 + 0.01
// context times the curve. Each kind costs exactly its price at its context, so the correction
// stays 1 and the plan keeps drafting. (Compared as timed, it read (1 + 2) / (1 + 0.1) = 2.7:
// a decoder in service, whose plain samples come from a batch's start and drafting from all
// along it, then ran plain for good.)
TEST(BatchGoodputPlanner, TheCorrectionComparesStepsAtTheSameContext) {
  BatchGoodputOptions options =
      fixed(curve(2 * 9, [](std::size_t n) { return 1.0 + 0.1 * static_cast<double>(n - 1); }),
            curve(2, [](std::size_t) { return 0.05; }));
  options.measured_costs = true;
  options.plain_guard = false;  // the correction alone
  options.plain_growth = 0.01;
  const std::vector<std::vector<double>> nothing(2, std::vector<double>(8, 0.0));
  const std::vector<std::vector<double>> acceptance(2, std::vector<double>(8, 0.5));
  BatchGoodputPlanner planner(options);
  for (int step = 0; step < 8; ++step) {
    ASSERT_EQ(drafted_rows(plan(planner, nothing, options)), 0u);
    planner.observe_step(1.1 * (1 + 0.01 * 10), 2, 2, 10);
  }
  for (int step = 0; step < 50; ++step) {
    const Planned planned = plan(planner, acceptance, options);
    ASSERT_GT(drafted_rows(planned), 0u) << "step " << step;
    planner.observe_step(planner.expected_cost() * (1 + 0.01 * 200), 4, 2, 200);
  }
  EXPECT_NEAR(planner.correction(), 1.0, 1e-9);
}

// A step's time is not proportional to its sequences, and a decoder in service meets every
// width: T(n) = 0.1 n + 0.04 n^2 up to 8 rows (then +0.1 a row), so a plain step of 5
// sequences costs 0.3 per sequence and one of 8, 0.42. Plain steps timed at width 5, then
// steps of 8 sequences that draft a token each (T(16) + 0.05 = 4.21) and emit 13 tokens: 3.09
// tokens per unit against plain decoding's 2.38 at that width, a gain, which the guard must
// see. (Judged per sequence against the width-5 plain steps, they read 1.75 plain steps for
// 1.6 tokens: drafting losing.)
TEST(BatchGoodputPlanner, ThePlainGuardJudgesEachStepAgainstAPlainStepOfItsWidth) {
  const auto price = [](std::size_t n) {
    const double x = static_cast<double>(std::min<std::size_t>(n, 8));
    return 0.1 * x + 0.04 * x * x + 0.1 * static_cast<double>(n - std::min<std::size_t>(n, 8));
  };
  BatchGoodputOptions options =
      fixed(curve(8 * 9, price), curve(8, [](std::size_t) { return 0.05; }));
  options.measured_costs = true;
  const std::vector<std::vector<double>> useless(5, std::vector<double>(8, 0.05));
  const std::vector<std::vector<double>> good(8, std::vector<double>(1, 0.9));
  BatchGoodputPlanner planner(options);
  planner.skip_step();  // the prompts' step
  for (int step = 0; step < 6; ++step) {
    ASSERT_EQ(drafted_rows(plan(planner, useless, options)), 0u);
    planner.observe_step(price(5), 5, 5);
  }
  ASSERT_EQ(drafted_rows(plan(planner, good, options)), 8u);
  planner.skip_step();  // the drafts read their prompts
  for (int step = 0; step < 6; ++step) {
    ASSERT_EQ(drafted_rows(plan(planner, good, options)), 8u) << "step " << step;
    planner.observe_step(price(16) + 0.05, 13, 8);
  }
  EXPECT_FALSE(planner.drafting_loses());
}

// A batch's tail is plain as its sequences finish, and cheaper than its price: the engine's
// attention reads the caches still held, and the finished sequences' are freed. Steps of 8
// sequences (T(n) = 1 + 0.02 (n - 1)): two plain, then drafting at the curves' price, 2
// tokens per sequence; a tail of 4 sequences, plain, at half its price; then the next 8
// sequences. Neither the guard nor the correction may take the tail as a plain step's time:
// judged against it, the drafting steps (2 tokens per sequence in 1.15 plain steps of their
// width) read 2.3 steps, losing, and the correction read 2.
TEST(BatchGoodputPlanner, APlainStepOfAnotherWidthThanTheDraftingStepsIsNoSample) {
  BatchGoodputOptions options =
      fixed(curve(8 * 9, [](std::size_t n) { return 1.0 + 0.02 * static_cast<double>(n - 1); }),
            curve(8, [](std::size_t) { return 0.01; }));
  options.measured_costs = true;
  const std::vector<std::vector<double>> good(8, std::vector<double>(1, 0.9));
  const std::vector<std::vector<double>> tail(4, std::vector<double>(1, 0.0));
  BatchGoodputPlanner planner(options);
  const auto drafting_steps = [&](int steps) {
    for (int step = 0; step < steps; ++step) {
      ASSERT_EQ(drafted_rows(plan(planner, good, options)), 8u) << "step " << step;
      planner.observe_step(planner.expected_cost(), 16, 8);
    }
  };
  planner.skip_step();  // the prompts' step
  for (int step = 0; step < 2; ++step) {
    ASSERT_EQ(drafted_rows(plan(planner, tail, options)), 0u);
    planner.observe_step(options.target_call_costs[7], 8, 8);
  }
  planner.skip_step();  // the drafts read their prompts
  drafting_steps(8);
  for (int step = 0; step < 6; ++step) {
    ASSERT_EQ(drafted_rows(plan(planner, tail, options)), 0u);
    planner.observe_step(0.5 * options.target_call_costs[3], 4, 4);
  }
  EXPECT_NEAR(planner.correction(), 1.0, 1e-9);
  drafting_steps(8);
  EXPECT_FALSE(planner.drafting_loses());
  EXPECT_NEAR(planner.correction(), 1.0, 1e-9);
}

// The ledger's share of elapsed time grows with plain steps of any width. Steps of 3 sequences
// (a batch's tail) whose drafting loses (every drafted token rejected, at three plain steps'
// time) until the ledger cannot afford a trial; then a batch of 8 sequences, plain. Its plain
// steps are no samples (another width than the drafting steps'), but they are time: the ledger
// affords a trial again. (Counted only at the drafting steps' width, a decoder in service on
// the example GPT ran the 400 plain steps of its next batches without one.)
TEST(BatchGoodputPlanner, PlainStepsOfAnotherWidthStillPayIntoTheLedger) {
  BatchGoodputOptions options =
      fixed(curve(8 * 9, [](std::size_t n) { return 1.0 + 0.1 * static_cast<double>(n - 1); }),
            curve(8, [](std::size_t) { return 0.01; }));
  options.measured_costs = true;
  const auto price = [&](std::size_t rows) { return options.target_call_costs[rows - 1]; };
  BatchGoodputPlanner planner(options);
  const auto steps = [&](std::size_t width, int count) {
    const std::vector<std::vector<double>> good(width, std::vector<double>(4, 0.9));
    std::size_t drafting = 0;
    for (int step = 0; step < count; ++step) {
      const Planned planned = plan(planner, good, options);
      const bool drafts = drafted_rows(planned) > 0;
      drafting += drafts ? 1 : 0;
      planner.observe_step((drafts ? 3.0 : 1.0) * price(width), width, width);
    }
    return drafting;
  };
  planner.skip_step();  // the prompts' step
  EXPECT_GT(steps(3, 600), 2u) << "drafting, then trials until the ledger is spent";
  EXPECT_EQ(steps(3, 300), 0u) << "the ledger affords no trial (its share: 1.5 plain steps)";
  EXPECT_GT(steps(8, 1000), 0u) << "5 plain steps' share, a trial";
}

// The correction holds while the steps are plain, and the guard, which judges what steps
// deliver, cannot reopen drafting it never found losing. Here drafting steps run at 2.5x
// their calls' price but emit 8 tokens per sequence in 3.4 plain steps' time, a gain: after
// 16 plain steps the plan is taken without the correction (a retry), and the correction is
// formed again from the drafting steps after it. Drafting at its price, the plan keeps
// drafting; drafting again dear, the correction returns and the next retry waits 32 steps.
// (A decoder in service whose correction had read its steps' growth with context as
// drafting's cost ran plain for good.)
TEST(BatchGoodputPlanner, AfterAWaitThePlanIsRetriedWithoutTheCorrection) {
  BatchGoodputOptions options =
      fixed(curve(2 * 9, [](std::size_t n) { return 1.0 + 0.1 * static_cast<double>(n - 1); }),
            curve(2, [](std::size_t) { return 0.05; }));
  options.measured_costs = true;
  const std::vector<std::vector<double>> nothing(2, std::vector<double>(8, 0.0));
  const std::vector<std::vector<double>> acceptance(2, std::vector<double>(8, 0.5));
  const double plain_step = options.target_call_costs[1];
  const auto corrected = [&](BatchGoodputPlanner& planner) {
    planner.skip_step();                    // the prompts' step
    for (int step = 0; step < 4; ++step) {  // plain steps, timed at their price
      EXPECT_EQ(drafted_rows(plan(planner, nothing, options)), 0u);
      planner.observe_step(plain_step, 2, 2);
    }
    planner.skip_step();  // the drafts read their prompts
    std::size_t drafting = 0;
    while (drafted_rows(plan(planner, acceptance, options)) > 0 && drafting < 100) {
      planner.observe_step(2.5 * planner.expected_cost(), 16, 2);
      ++drafting;
    }
    EXPECT_EQ(drafting, 4u) << "four drafting steps to measure, then plain";
    EXPECT_NEAR(planner.correction(), 2.5, 1e-9);
    EXPECT_FALSE(planner.drafting_loses());
  };
  // Plain steps until the plan drafts again; returns how many.
  const auto until_retry = [&](BatchGoodputPlanner& planner) {
    std::size_t plain = 0;
    while (drafted_rows(plan(planner, acceptance, options)) == 0 && plain < 1000) {
      planner.observe_step(plain_step, 2, 2);
      ++plain;
    }
    planner.observe_step(4 * plain_step, 2 + 8, 2);  // the drafts' catch-up
    return plain;
  };

  BatchGoodputPlanner cheap(options);
  corrected(cheap);
  EXPECT_EQ(until_retry(cheap), 16u);
  for (int step = 0; step < 50; ++step) {
    ASSERT_GT(drafted_rows(plan(cheap, acceptance, options)), 0u) << "step " << step;
    cheap.observe_step(cheap.expected_cost(), 4, 2);
  }
  EXPECT_NEAR(cheap.correction(), 1.0, 1e-9);

  BatchGoodputPlanner dear(options);
  corrected(dear);
  EXPECT_EQ(until_retry(dear), 16u);
  std::size_t drafting = 0;
  while (drafted_rows(plan(dear, acceptance, options)) > 0 && drafting < 100) {
    dear.observe_step(2.5 * dear.expected_cost(), 16, 2);
    ++drafting;
  }
  EXPECT_EQ(drafting, 4u) << "the correction formed again";
  EXPECT_GT(dear.correction(), 2.0);
  EXPECT_EQ(until_retry(dear), 32u);

  // While drafting loses, the guard's trial is such a retry. Here the fourth drafting step
  // loses so much (1 token per sequence in some 9 plain steps' time) that the guard's verdict
  // turns on the step that forms the correction: the plan is plain by both, and the guard's
  // trial must still come, after its wait, as the plan without the correction.
  BatchGoodputPlanner lost(options);
  lost.skip_step();  // the prompts' step
  for (int step = 0; step < 4; ++step) {
    ASSERT_EQ(drafted_rows(plan(lost, nothing, options)), 0u);
    lost.observe_step(plain_step, 2, 2);
  }
  lost.skip_step();  // the drafts read their prompts
  for (int step = 0; step < 4; ++step) {
    ASSERT_GT(drafted_rows(plan(lost, acceptance, options)), 0u) << "step " << step;
    lost.observe_step((step < 3 ? 2.5 : 7.0) * lost.expected_cost(), step < 3 ? 8 : 2, 2);
  }
  ASSERT_TRUE(lost.drafting_loses());
  ASSERT_GT(lost.correction(), 2.0);
  const std::size_t waited = until_retry(lost);
  EXPECT_GE(waited, 8u);
  EXPECT_LT(waited, 1000u) << "no trial";
}

// While drafting loses, a step whose only drafted rows are probes stays plain however long
// the wait (the estimates expect probes to lose; each pays a draft's catch-up), as with the
// single-sequence policy; a trial is of the plan. Not losing, the same probes are planned.
TEST(BatchGoodputPlanner, WhileDraftingLosesProbesAloneAreNoTrial) {
  BatchGoodputOptions options = four_sequence_curves();
  options.measured_costs = true;
  const std::vector<std::vector<double>> good(4, std::vector<double>(8, 0.9));
  const std::vector<std::vector<double>> useless(4, std::vector<double>(8, 0.05));
  const auto timed = [&](BatchGoodputPlanner& planner) {
    planner.skip_step();  // the prompts' step
    // Plain steps, timed before any step may draft.
    for (int step = 0; step < 2; ++step) {
      EXPECT_EQ(drafted_rows(plan(planner, good, options)), 0u);
      planner.observe_step(1.0, 4, 4);
    }
  };

  BatchGoodputPlanner losing(options);
  timed(losing);
  ASSERT_GT(drafted_rows(plan(losing, good, options)), 0u);
  losing.skip_step();                     // the drafts read the prompts
  for (int step = 0; step < 2; ++step) {  // 6 tokens in 3 plain steps' time
    ASSERT_GT(drafted_rows(plan(losing, good, options)), 0u);
    losing.observe_step(3.0, 6, 4);
  }
  ASSERT_TRUE(losing.drafting_loses());
  for (std::size_t step = 0; step < 300; ++step) {
    ASSERT_EQ(drafted_rows(plan(losing, useless, options, /*optimistic=*/0.9, /*probe_due=*/true)),
              0u)
        << "step " << step;
    losing.observe_step(1.0, 4, 4);
  }
  EXPECT_GT(drafted_rows(plan(losing, good, options)), 0u) << "a trial of the plan is due";

  BatchGoodputPlanner winning(options);
  timed(winning);
  for (int step = 0; step < 3; ++step) {  // 12 tokens in 1.5 plain steps' time: a verdict
    ASSERT_GT(drafted_rows(plan(winning, good, options)), 0u);
    winning.observe_step(1.5, 12, 4);
  }
  ASSERT_FALSE(winning.drafting_loses());
  const Planned probes = plan(winning, useless, options, /*optimistic=*/0.9, /*probe_due=*/true);
  EXPECT_EQ(drafted_rows(probes), 4u);
  EXPECT_TRUE(probes.probing[0] && probes.probing[3]);
}

// While drafting loses, a trial is two steps: the first pays the drafts' catch-up on every
// token of the plain steps before it (here 4 plain steps' time for 2 tokens per sequence), and
// goes on the ledger; the second, at the plan's steady price (3 tokens per sequence in 1.5
// plain steps), is what the trial is judged on, and it reopens drafting. Judged on the
// catch-up, every trial lost and the wait doubled: a decoder kept in service stopped
// drafting for good. A trial whose judged step loses doubles the wait as before.
TEST(BatchGoodputPlanner, ATrialIsJudgedOnTheStepAfterItsCatchUp) {
  BatchGoodputOptions options = four_sequence_curves();
  options.measured_costs = true;
  const std::vector<std::vector<double>> good(4, std::vector<double>(8, 0.9));
  const auto losing = [&](BatchGoodputPlanner& planner) {
    judge_drafting_losing(planner, good, options, 1.0);
  };
  // Plain steps until the trial, and its catch-up step; returns the plain steps taken.
  const auto until_trial = [&](BatchGoodputPlanner& planner) {
    std::size_t plain = 0;
    while (drafted_rows(plan(planner, good, options)) == 0 && plain < 1000) {
      planner.observe_step(1.0, 4, 4);
      ++plain;
    }
    planner.observe_step(4.0, 8, 4);  // the catch-up
    return plain;
  };

  BatchGoodputPlanner reopened(options);
  losing(reopened);
  EXPECT_EQ(until_trial(reopened), 8u);
  EXPECT_TRUE(reopened.drafting_loses()) << "no verdict on the catch-up";
  ASSERT_GT(drafted_rows(plan(reopened, good, options)), 0u) << "the trial's judged step";
  reopened.observe_step(1.5, 12, 4);
  EXPECT_FALSE(reopened.drafting_loses());
  EXPECT_GT(drafted_rows(plan(reopened, good, options)), 0u);

  BatchGoodputPlanner still_losing(options);
  losing(still_losing);
  EXPECT_EQ(until_trial(still_losing), 8u);
  ASSERT_GT(drafted_rows(plan(still_losing, good, options)), 0u);
  still_losing.observe_step(3.0, 6, 4);  // the judged step loses
  EXPECT_TRUE(still_losing.drafting_loses());
  EXPECT_GE(until_trial(still_losing), 16u) << "the wait doubles (and the ledger must afford it)";
}

// A trial after plain steps first pays the drafts' catch-up on every token those steps
// emitted, so the ledger must afford that before the trial. Drafting lost, then plain steps of
// four sequences: with the catch-up at 0.01 plain steps per token the trial comes after the
// guard's wait of 8 steps (32 tokens: 0.3 plain steps, within the ledger's 2); at 0.1 per token
// (3.2 plain steps for the same 32) none comes, however long the wait: the catch-up grows with
// it faster than the ledger's share. Sequences that joined since (4 plain steps each: 1.6
// plain steps) are afforded a trial.
TEST(BatchGoodputPlanner, ATrialWaitsForTheLedgerToAffordTheDraftsCatchUp) {
  BatchGoodputOptions options = four_sequence_curves();
  options.measured_costs = true;
  const double plain_step = options.target_call_costs[3];
  const std::vector<std::vector<double>> good(4, std::vector<double>(8, 0.9));
  // Drafting judged losing, then plain steps until a trial (or `limit`); returns their count.
  const auto plain_until_trial = [&](double catch_up, std::size_t limit) {
    BatchGoodputOptions priced = options;
    priced.draft_catch_up_cost = catch_up * plain_step;
    BatchGoodputPlanner planner(priced);
    judge_drafting_losing(planner, good, priced, plain_step);
    std::size_t plain = 0;
    while (plain < limit && drafted_rows(plan(planner, good, priced, 0, false, plain)) == 0) {
      planner.observe_step(plain_step, 4, 4);
      ++plain;
    }
    if (plain == limit) {  // no trial yet: sequences that joined 4 steps ago
      EXPECT_GT(drafted_rows(plan(planner, good, priced, 0, false, 4)), 0u);
    }
    return plain;
  };
  EXPECT_EQ(plain_until_trial(0.01, 1000), 8u);
  EXPECT_EQ(plain_until_trial(0.1, 1000), 1000u);
}

// Before the guard's first verdict a probe drafts the length its optimistic acceptance plans,
// as long as the ledger affords its worst case, not one row: on a curve where a second row
// costs nearly a whole call, a one-token round cannot win, and the guard's first verdicts are
// on these rounds. After a verdict, one row.
TEST(BatchGoodputPlanner, BeforeTheGuardsFirstVerdictAProbeDraftsTheOptimisticLength) {
  // T(n) = 1.8 + 0.1 (n - 2) for n >= 2: two rows cost 1.8 calls, nine 2.5.
  BatchGoodputOptions options = fixed(
      curve(9, [](std::size_t n) { return n == 1 ? 1.0 : 1.8 + 0.1 * static_cast<double>(n - 2); }),
      curve(1, [](std::size_t) { return 0.02; }));
  options.measured_costs = true;
  const std::vector<std::vector<double>> useless(1, std::vector<double>(8, 0.05));
  // The prompt's step, then two plain steps timed: the guard may judge, and has no verdict.
  const auto timed = [&](BatchGoodputPlanner& planner, const BatchGoodputOptions& curves) {
    planner.skip_step();
    for (int step = 0; step < 2; ++step) {
      (void)plan(planner, useless, curves);
      planner.observe_step(1.0, 1, 1);
    }
  };
  BatchGoodputPlanner planner(options);
  timed(planner, options);
  const Planned cold = plan(planner, useless, options, /*optimistic=*/0.9, /*probe_due=*/true);
  ASSERT_TRUE(cold.probing[0]);
  EXPECT_GE(cold.lengths[0], 6u);  // 0.9 per token: the best rate at 8 rows, 6.1 tokens / 2.7
  // The draft's prefill (not observed), then two drafting steps that win: a verdict.
  planner.skip_step();
  for (int step = 0; step < 2; ++step) planner.observe_step(2.5, 5, 1);
  ASSERT_FALSE(planner.drafting_loses());
  const Planned warm = plan(planner, useless, options, /*optimistic=*/0.9, /*probe_due=*/true);
  ASSERT_TRUE(warm.probing[0]);
  EXPECT_EQ(warm.lengths[0], 1u);
  // A steeper curve (T(n) = 1 + 0.6 (n - 1)) where the optimistic plan is 8 rows: the probe
  // is cut to what the ledger affords in its worst case, one token for the step's whole cost:
  // 3 rows (T(4) + 3 draft rows = 2.86 calls, 1.86 lost <= 2 allowed; 4 rows would lose 2.48).
  BatchGoodputOptions steep =
      fixed(curve(9, [](std::size_t n) { return 1.0 + 0.6 * static_cast<double>(n - 1); }),
            curve(1, [](std::size_t) { return 0.02; }));
  steep.measured_costs = true;
  BatchGoodputPlanner bounded(steep);
  timed(bounded, steep);
  const Planned cut = plan(bounded, useless, steep, /*optimistic=*/0.95, /*probe_due=*/true);
  ASSERT_TRUE(cut.probing[0]);
  EXPECT_EQ(cut.lengths[0], 3u);
  // Without the guard, probes are one row from the start.
  options.plain_guard = false;
  BatchGoodputPlanner unguarded(options);
  const Planned plain = plan(unguarded, useless, options, /*optimistic=*/0.9, /*probe_due=*/true);
  EXPECT_EQ(plain.lengths[0], 1u);
}

// A step's time grows with its sequences' context (0.15 % per token: the shipped pair's f16
// GGUF). The plain step is timed early, after ~30 tokens; every drafting step then delivers
// 3.75 tokens per sequence in 3.3 plain steps of time at its own context. Told the growth, the
// guard sees drafting that pays all along; not told, it compares the late steps with the early
// plain ones, finds them ~30 % dearer than they are, and stops them.
TEST(BatchGoodputPlanner, ThePlainGuardJudgesEachStepAgainstAPlainStepAtItsContext) {
  constexpr double kGrowth = 0.0015;
  const auto plain_at = [&](std::size_t context) {
    return 1.0 + kGrowth * static_cast<double>(context);
  };
  const std::vector<std::vector<double>> acceptance(4, std::vector<double>(8, 0.9));
  for (const bool told : {true, false}) {
    SCOPED_TRACE(told ? "growth told" : "growth not told");
    BatchGoodputOptions options = four_sequence_curves();
    options.measured_costs = true;
    options.plain_growth = told ? kGrowth : 0.0;
    BatchGoodputPlanner planner(options);
    planner.skip_step();  // the prompts' step
    std::size_t context = 30;
    for (; context < 32; ++context) {  // plain until a plain step is timed (not the first)
      ASSERT_EQ(drafted_rows(plan(planner, acceptance, options)), 0u);
      planner.observe_step(plain_at(context), 4, 4, context);
    }
    ASSERT_GT(drafted_rows(plan(planner, acceptance, options)), 0u);
    planner.skip_step();  // the drafts read the prompts: BatchedDecoder does not observe it
    bool stopped = false;
    for (context += 4; context < 230 && !stopped; context += 4) {
      ASSERT_GT(drafted_rows(plan(planner, acceptance, options)), 0u);
      planner.observe_step(3.3 * plain_at(context), 15, 4, context);
      stopped = planner.drafting_loses();
    }
    EXPECT_EQ(stopped, !told) << "at context " << context;
  }
}

TEST(BatchGoodputOptions, RejectsBadCurvesNamingTheField) {
  const auto message = [](const BatchGoodputOptions& options) {
    try {
      options.validate();
    } catch (const std::invalid_argument& error) {
      return std::string(error.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message(fixed({1.0, 1.1}, {})).find("both curves"), std::string::npos);
  EXPECT_NE(message(fixed({1.0, -1.0}, {0.1})).find("target_call_costs[1] = -1"),
            std::string::npos);
  EXPECT_NE(message(fixed({1.0}, {0.0})).find("draft_call_costs[0] = 0"), std::string::npos);
  BatchGoodputOptions no_probes;
  no_probes.probe_interval = 0;
  EXPECT_NE(message(no_probes).find("probe_interval"), std::string::npos);
  BatchGoodputOptions shrinking;
  shrinking.plain_growth = -0.001;
  EXPECT_NE(message(shrinking).find("plain_growth = -0.001"), std::string::npos);
  BatchGoodputOptions before_the_start;
  before_the_start.plain_step_context = -1;
  EXPECT_NE(message(before_the_start).find("plain_step_context = -1"), std::string::npos);
  BatchGoodputOptions plain_alone;
  plain_alone.plain_step_costs = {1.0};
  EXPECT_NE(message(plain_alone).find("plain_step_costs has 1 entries without target_call_costs"),
            std::string::npos);
  BatchGoodputOptions free_plain = fixed({1.0}, {0.1});
  free_plain.plain_step_costs = {0.0};
  EXPECT_NE(message(free_plain).find("plain_step_costs[0] = 0"), std::string::npos);
  EXPECT_THROW(BatchGoodputPlanner(fixed({1.0}, {})), std::invalid_argument);
  EXPECT_EQ(message(fixed({1.0}, {0.1})), "no error");
}

// ---- through BatchedDecoder
// -------------------------------------------------------------------------

ScriptedPair make_pair() {
  ScriptedPair pair;
  pair.target_model.vocab = 8;
  pair.perturbation.vocab = 8;
  pair.noise = 0.3;
  return pair;
}

GenerationConfig goodput_config(float temperature, std::uint64_t seed) {
  GenerationConfig config;
  config.sampling.temperature = temperature;
  config.max_new_tokens = 60;
  config.draft_length = 8;
  config.draft_length_policy.kind = specdec::DraftLengthKind::goodput;
  config.seed = seed;
  return config;
}

using Decoder = BatchedDecoder<BatchedScriptedTarget, ModelProposer<BatchedScriptedDraft>>;

struct BatchRun {
  std::map<specdec::sequence_id, std::vector<token_t>> tokens;
  specdec::BatchStats stats;
};

/// Four goodput sequences (two greedy, two sampled) decoded together under `options`.
BatchRun run_batch(const ScriptedPair& pair, const BatchGoodputOptions& options) {
  BatchedScriptedTarget target(pair.target<float>());
  BatchedScriptedDraft draft(pair.draft<float>());
  Decoder decoder(target, ModelProposer<BatchedScriptedDraft>(draft), {}, {}, options);
  const std::vector<std::vector<token_t>> prompts = {{1, 2}, {3}, {4, 5, 6}, {7}};
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    decoder.add(i, prompts[i], goodput_config(i < 2 ? 0.0f : 1.0f, 40 + i));
  }
  BatchRun run;
  for (specdec::FinishedSequence& done : decoder.run()) {
    EXPECT_FALSE(done.error);
    run.tokens[done.id] = done.result.tokens;
  }
  run.stats = decoder.stats();
  EXPECT_EQ(target.broken_promises, 0u);
  return run;
}

std::vector<token_t> greedy_alone(const ScriptedPair& pair, std::vector<token_t> prompt) {
  auto target = pair.target<float>();
  specdec::AutoregressiveDecoder plain(target);
  return plain.generate(prompt, goodput_config(0.0f, 1)).tokens;
}

// Every drafted row costs a whole call: the goodput sequences' steps are exactly plain batched
// decoding: one row per sequence, no draft call.
TEST(BatchedDecoderGoodput, WhereNoRowPaysTheStepsArePlainBatchedDecoding) {
  const ScriptedPair pair = make_pair();
  const BatchRun run = run_batch(
      pair, fixed(curve(4 * 9, [](std::size_t n) { return 1.0 * static_cast<double>(n); }),
                  curve(4, [](std::size_t n) { return 0.1 * static_cast<double>(n); })));
  EXPECT_EQ(run.stats.draft_calls, 0u);
  EXPECT_EQ(run.stats.draft_rows, 0u);
  EXPECT_EQ(run.stats.target_rows, run.stats.rounds);
  EXPECT_EQ(run.tokens.at(0), greedy_alone(pair, {1, 2}));
  EXPECT_EQ(run.tokens.at(1), greedy_alone(pair, {3}));
}

// Cheap rows: every sequence drafts, the calls carry several rows per sequence, and greedy
// output is still the target's argmax path.
TEST(BatchedDecoderGoodput, WhereRowsAreCheapTheSequencesDraftAndGreedyIsTheTargets) {
  const ScriptedPair pair = make_pair();
  const BatchRun run =
      run_batch(pair, fixed(curve(4 * 9, [](std::size_t n) { return 1.0 + 0.02 * (n - 1); }),
                            curve(4, [](std::size_t n) { return 0.02 + 0.005 * n; })));
  EXPECT_GT(run.stats.draft_calls, 0u);
  EXPECT_GT(run.stats.rows_per_target_call(), 2.0 * run.stats.rounds_per_target_call());
  EXPECT_EQ(run.tokens.at(0), greedy_alone(pair, {1, 2}));
  EXPECT_EQ(run.tokens.at(1), greedy_alone(pair, {3}));
}

// With fixed curves the plan depends on no timing: the same batch gives the same tokens.
TEST(BatchedDecoderGoodput, FixedCostsMakeSampledOutputReproducible) {
  const ScriptedPair pair = make_pair();
  const BatchGoodputOptions options =
      fixed(curve(4 * 9, [](std::size_t n) { return 1.0 + 0.15 * (n - 1); }),
            curve(4, [](std::size_t n) { return 0.05 + 0.01 * n; }));
  const BatchRun first = run_batch(pair, options);
  const BatchRun second = run_batch(pair, options);
  EXPECT_EQ(first.tokens, second.tokens);
  EXPECT_EQ(first.stats.target_rows, second.stats.target_rows);
  EXPECT_GT(first.stats.draft_calls, 0u);
}

// Measured costs (the default): the decoder times its calls into the plan's curves.
TEST(BatchedDecoderGoodput, MeasuredCostsAreLearntFromTheCalls) {
  const ScriptedPair pair = make_pair();
  const BatchRun run = run_batch(pair, {});
  EXPECT_EQ(run.tokens.at(0), greedy_alone(pair, {1, 2}));
  EXPECT_EQ(run.tokens.at(1), greedy_alone(pair, {3}));
  EXPECT_GT(run.stats.target_calls, 0u);
}

// A sequence alone in the batch shares no call: its policy plans its rounds as the
// single-sequence decoder's does (re-planning at every drafted token), in the batch's curves at
// one sequence. Same curves as the single decoder's fixed costs: the same rounds, token for token,
// greedy and sampled.
TEST(BatchedDecoderGoodput, ASequenceAloneDraftsAsTheSingleSequenceDecoder) {
  const ScriptedPair pair = make_pair();
  const std::vector<double> target_curve =
      curve(9, [](std::size_t n) { return 1.0 + 0.12 * static_cast<double>(n - 1); });
  const BatchGoodputOptions batch_costs =
      fixed(target_curve, curve(1, [](std::size_t) { return 0.06; }));
  specdec::GoodputOptions single_costs;
  single_costs.draft_token_cost = 0.06;
  single_costs.verify_costs = target_curve;
  const std::vector<token_t> prompt = {1, 2};
  for (const float temperature : {0.0f, 1.0f}) {
    GenerationConfig config = goodput_config(temperature, 7);
    config.max_new_tokens = 120;
    config.draft_length_policy.goodput = single_costs;
    auto single_target = pair.target<float>();
    auto single_draft = pair.draft<float>();
    specdec::SpeculativeDecoder single(single_draft, single_target);
    const specdec::GenerationResult want = single.generate(prompt, config);

    BatchedScriptedTarget target(pair.target<float>());
    BatchedScriptedDraft draft(pair.draft<float>());
    Decoder decoder(target, ModelProposer<BatchedScriptedDraft>(draft), {}, {}, batch_costs);
    decoder.add(0, prompt, config);
    const std::vector<specdec::FinishedSequence> done = decoder.run();
    ASSERT_EQ(done.size(), 1u);
    ASSERT_FALSE(done[0].error);
    const specdec::GenerationResult& got = done[0].result;
    EXPECT_EQ(got.tokens, want.tokens) << "T = " << temperature;
    EXPECT_EQ(got.stats.rounds, want.stats.rounds) << "T = " << temperature;
    EXPECT_EQ(got.stats.drafted, want.stats.drafted) << "T = " << temperature;
    EXPECT_EQ(got.stats.accepted_at, want.stats.accepted_at) << "T = " << temperature;
    EXPECT_EQ(got.stats.draft_length_histogram(), want.stats.draft_length_histogram())
        << "T = " << temperature;
    // Not plain throughout: the rounds drafted at several lengths.
    EXPECT_GT(got.stats.drafted, got.stats.rounds) << "T = " << temperature;
  }
}

TEST(BatchedDecoderGoodput, BadOptionsAreRejectedByTheConstructor) {
  const ScriptedPair pair = make_pair();
  BatchedScriptedTarget target(pair.target<float>());
  BatchedScriptedDraft draft(pair.draft<float>());
  EXPECT_THROW(
      Decoder(target, ModelProposer<BatchedScriptedDraft>(draft), {}, {}, fixed({1.0}, {})),
      std::invalid_argument);
}

// ---- measure_batch_call_costs
// ------------------------------------------------------------------------

void spin_for(std::chrono::microseconds duration) {
  const auto end = std::chrono::steady_clock::now() + duration;
  while (std::chrono::steady_clock::now() < end) {
  }
}

// A fake batched engine whose call costs 100 us per row plus 1 us per token of its sequences'
// contexts: a plain step grows by 0.01 per token. measure_batch_call_costs finds it from one
// sequence's plain steps through the context, as measure_call_costs does.
TEST(MeasureBatchCallCosts, MeasuresHowAPlainStepGrowsWithTheContext) {
  struct GrowingTarget : BatchedScriptedTarget {
    using BatchedScriptedTarget::BatchedScriptedTarget;
    const std::vector<float>& score_batch(std::span<const specdec::ScoreRequest> requests) {
      std::size_t work = 0;
      for (const specdec::ScoreRequest& request : requests) {
        work += 100 * request.rows + request.context.size();
      }
      spin_for(std::chrono::microseconds(work));
      return BatchedScriptedTarget::score_batch(requests);
    }
  };
  const ScriptedPair pair = make_pair();
  GrowingTarget target(pair.target<float>());
  BatchedScriptedDraft draft(pair.draft<float>());
  const std::vector<token_t> context(64, 1);
  const specdec::BatchCallCosts costs =
      specdec::measure_batch_call_costs(draft, target, context, 1, 2, 5);
  EXPECT_NEAR(costs.plain_growth, 0.01, 0.003);
  EXPECT_EQ(costs.goodput_options().plain_growth, costs.plain_growth);
  EXPECT_EQ(target.broken_promises, 0u);
  // Too short a context to tell: no growth.
  const std::vector<token_t> short_context(24, 1);
  EXPECT_EQ(specdec::measure_batch_call_costs(draft, target, short_context, 1, 2, 3).plain_growth,
            0.0);
}

// A fake batched engine that settles: a call costs 100 us per row, and 400 us more while one
// of the last 4 calls had another row count (an engine whose caches and graphs settle over a
// run of identical calls). The target curve, timed among other shapes, reads the unsettled
// call; plain_seconds, timed in runs of plain calls, the settled one.
TEST(MeasureBatchCallCosts, TimesPlainStepsInARunOfPlainCalls) {
  struct SettlingTarget : BatchedScriptedTarget {
    using BatchedScriptedTarget::BatchedScriptedTarget;
    std::vector<std::size_t> last_rows;
    const std::vector<float>& score_batch(std::span<const specdec::ScoreRequest> requests) {
      std::size_t rows = 0;
      for (const specdec::ScoreRequest& request : requests) rows += request.rows;
      const bool settled = std::all_of(last_rows.begin(), last_rows.end(),
                                       [&](std::size_t before) { return before == rows; });
      spin_for(std::chrono::microseconds(100 * rows + (settled ? 0 : 400)));
      last_rows.push_back(rows);
      if (last_rows.size() > 4) last_rows.erase(last_rows.begin());
      return BatchedScriptedTarget::score_batch(requests);
    }
  };
  const ScriptedPair pair = make_pair();
  SettlingTarget target(pair.target<float>());
  BatchedScriptedDraft draft(pair.draft<float>());
  std::vector<token_t> context;
  for (int i = 0; i < 24; ++i) context.push_back(static_cast<token_t>(i % 8));
  const specdec::BatchCallCosts costs =
      specdec::measure_batch_call_costs(draft, target, context, 3, 2, 3);
  ASSERT_EQ(costs.plain_seconds.size(), 3u);
  for (std::size_t b = 1; b <= 3; ++b) {
    EXPECT_LT(costs.plain_seconds[b - 1], 1e-4 * static_cast<double>(b) + 2e-4) << b;
    EXPECT_GT(costs.target_seconds[b - 1], 1e-4 * static_cast<double>(b) + 3e-4) << b;
  }
  EXPECT_EQ(costs.goodput_options().plain_step_costs, costs.plain_seconds);
  // Timed in the context's second half, walked again and again: 13 .. 24 tokens.
  EXPECT_GE(costs.plain_context, 13.0);
  EXPECT_LE(costs.plain_context, 24.0);
  EXPECT_EQ(costs.goodput_options().plain_step_context, costs.plain_context);
  EXPECT_EQ(target.broken_promises, 0u);
}

// A slow moment of the host that outlasts a run of plain calls does not price the plain step:
// it is the quietest run's median. Here the first two runs of every width take 1 ms more per
// call (two thirds of the timed calls: their median over all runs would be a slow one).
TEST(MeasureBatchCallCosts, APlainStepIsPricedByItsQuietestRun) {
  struct SlowMomentTarget : BatchedScriptedTarget {
    using BatchedScriptedTarget::BatchedScriptedTarget;
    std::size_t run_rows = 0, run_length = 0;
    std::map<std::size_t, std::size_t> long_runs;  // rows -> runs of 5 calls or more so far
    const std::vector<float>& score_batch(std::span<const specdec::ScoreRequest> requests) {
      std::size_t rows = 0;
      for (const specdec::ScoreRequest& request : requests) rows += request.rows;
      run_length = rows == run_rows ? run_length + 1 : 1;
      run_rows = rows;
      if (run_length == 5) ++long_runs[rows];
      const bool slow = run_length >= 5 && long_runs[rows] <= 2;
      spin_for(std::chrono::microseconds(100 * rows + (slow ? 1000 : 0)));
      return BatchedScriptedTarget::score_batch(requests);
    }
  };
  const ScriptedPair pair = make_pair();
  SlowMomentTarget target(pair.target<float>());
  BatchedScriptedDraft draft(pair.draft<float>());
  std::vector<token_t> context;
  for (int i = 0; i < 24; ++i) context.push_back(static_cast<token_t>(i % 8));
  const specdec::BatchCallCosts costs =
      specdec::measure_batch_call_costs(draft, target, context, 2, 2, 3);
  ASSERT_EQ(costs.plain_seconds.size(), 2u);
  for (std::size_t b = 1; b <= 2; ++b) {
    EXPECT_LT(costs.plain_seconds[b - 1], 1e-4 * static_cast<double>(b) + 5e-4) << b;
  }
  EXPECT_EQ(target.broken_promises, 0u);
}

// The draft's catch-up: a call reading tokens the draft has not read costs per token, and a
// trial after plain steps pays it for every token they emitted. Timed as a call reading 16
// more tokens than a step, less the step; not at all for a draft without release() (no
// sequence it could be made to read again).
TEST(MeasureBatchCallCosts, TimesTheDraftsCatchUpPerToken) {
  struct CatchingUpDraft : BatchedScriptedDraft {
    using BatchedScriptedDraft::BatchedScriptedDraft;
    std::map<specdec::sequence_id, std::size_t> read;  // tokens each sequence's cache holds
    void release(specdec::sequence_id id) noexcept { read.erase(id); }
    std::span<const float> draft_batch(std::span<const specdec::DraftStepRequest> requests) {
      std::size_t fresh = 0;
      for (const specdec::DraftStepRequest& request : requests) {
        std::size_t& cached = read[request.id];
        fresh += request.context.size() - std::min(cached, request.context.size() - 1);
        cached = request.context.size();
      }
      spin_for(std::chrono::microseconds(100 + 50 * fresh));
      return BatchedScriptedDraft::draft_batch(requests);
    }
  };
  struct NoReleaseDraft {
    BatchedScriptedDraft draft;
    std::span<const float> draft_batch(std::span<const specdec::DraftStepRequest> requests) {
      return draft.draft_batch(requests);
    }
    std::vector<float> operator()(std::span<const specdec::token_t> context) const {
      return draft(context);
    }
  };
  const ScriptedPair pair = make_pair();
  BatchedScriptedTarget target(pair.target<float>());
  CatchingUpDraft draft(pair.draft<float>());
  std::vector<token_t> context;
  for (int i = 0; i < 48; ++i) context.push_back(static_cast<token_t>(i % 8));
  const specdec::BatchCallCosts costs =
      specdec::measure_batch_call_costs(draft, target, context, 2, 2, 5);
  EXPECT_GT(costs.draft_catch_up_seconds, 45e-6);
  EXPECT_LT(costs.draft_catch_up_seconds, 80e-6);
  EXPECT_EQ(costs.goodput_options().draft_catch_up_cost, costs.draft_catch_up_seconds);

  NoReleaseDraft plain{BatchedScriptedDraft(pair.draft<float>())};
  EXPECT_EQ(
      specdec::measure_batch_call_costs(plain, target, context, 2, 2, 2).draft_catch_up_seconds,
      0.0);
}

// A call of n rows is timed in the shape the plan prices it at. One pass (no
// batch_call_shape): over min(n, sequences) sequences, as even as they go, as a full batch's
// step has every sequence in it (over the largest divisor of n, 5 rows were one sequence's:
// on an engine with a cost per sequence in the call, cheaper than 4 rows of four). Equal
// micro-batches: equal rows per sequence where a divisor allows, one micro-batch.
TEST(MeasureBatchCallCosts, TimesEachRowCountInTheShapeThePlanPricesItAt) {
  struct ShapeRecordingTarget : BatchedScriptedTarget {
    using BatchedScriptedTarget::BatchedScriptedTarget;
    specdec::BatchCallShape shape = specdec::BatchCallShape::one_pass;
    std::vector<std::vector<std::size_t>> calls;  // each call's rows per request
    [[nodiscard]] specdec::BatchCallShape batch_call_shape() const noexcept { return shape; }
    const std::vector<float>& score_batch(std::span<const specdec::ScoreRequest> requests) {
      std::vector<std::size_t>& call = calls.emplace_back();
      for (const specdec::ScoreRequest& request : requests) call.push_back(request.rows);
      return BatchedScriptedTarget::score_batch(requests);
    }
  };
  const ScriptedPair pair = make_pair();
  BatchedScriptedDraft draft(pair.draft<float>());
  std::vector<token_t> context;
  for (int i = 0; i < 24; ++i) context.push_back(static_cast<token_t>(i % 8));
  const auto shapes_of = [&](specdec::BatchCallShape shape) {
    ShapeRecordingTarget target(pair.target<float>());
    target.shape = shape;
    (void)specdec::measure_batch_call_costs(draft, target, context, 4, 2, 2);
    EXPECT_EQ(target.broken_promises, 0u);
    std::map<std::size_t, std::set<std::vector<std::size_t>>> by_rows;  // total rows -> shapes
    for (const auto& call : target.calls) {
      by_rows[std::accumulate(call.begin(), call.end(), std::size_t{0})].insert(call);
    }
    return by_rows;
  };
  using Shapes = std::set<std::vector<std::size_t>>;
  auto one_pass = shapes_of(specdec::BatchCallShape::one_pass);
  EXPECT_EQ(one_pass[3], (Shapes{{1, 1, 1}}));
  EXPECT_EQ(one_pass[5], (Shapes{{2, 1, 1, 1}}));
  EXPECT_EQ(one_pass[6], (Shapes{{2, 2, 1, 1}}));
  EXPECT_EQ(one_pass[11], (Shapes{{3, 3, 3, 2}}));
  auto equal = shapes_of(specdec::BatchCallShape::equal_micro_batches);
  EXPECT_EQ(equal[5], (Shapes{{5}}));
  EXPECT_EQ(equal[6], (Shapes{{2, 2, 2}}));
  EXPECT_EQ(equal[9], (Shapes{{3, 3, 3}}));
}

TEST(MeasureBatchCallCosts, TimesEveryRowCountAndDraftWidthWithinTheContractAndReleases) {
  const ScriptedPair pair = make_pair();
  BatchedScriptedTarget target(pair.target<float>());
  BatchedScriptedDraft draft(pair.draft<float>());
  std::vector<token_t> context;
  for (int i = 0; i < 24; ++i) context.push_back(static_cast<token_t>(i % 8));
  const specdec::BatchCallCosts costs =
      specdec::measure_batch_call_costs(draft, target, context, 3, 4, 3, /*first_id=*/7);
  ASSERT_EQ(costs.target_seconds.size(), 15u);  // 3 sequences x (4 + 1) rows
  ASSERT_EQ(costs.draft_seconds.size(), 3u);
  ASSERT_EQ(costs.plain_seconds.size(), 3u);
  for (const double t : costs.target_seconds) EXPECT_GT(t, 0.0);
  for (const double t : costs.plain_seconds) EXPECT_GT(t, 0.0);
  EXPECT_EQ(target.broken_promises, 0u);
  EXPECT_EQ(draft.broken_promises, 0u);
  EXPECT_EQ(target.released, (std::vector<specdec::sequence_id>{7, 8, 9}));
  EXPECT_EQ(draft.released, (std::vector<specdec::sequence_id>{7, 8, 9}));
  const BatchGoodputOptions options = costs.goodput_options();
  EXPECT_EQ(options.target_call_costs, costs.target_seconds);
  EXPECT_DOUBLE_EQ(costs.target_ratios().front(), 1.0);
  EXPECT_THROW((void)specdec::measure_batch_call_costs(draft, target, context, 0, 4),
               std::invalid_argument);
  EXPECT_THROW((void)specdec::measure_batch_call_costs(draft, target, context, 2, 12),
               std::invalid_argument);
}

}  // namespace

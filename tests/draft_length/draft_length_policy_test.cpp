// Draft-length policies (schedule, confidence stop, goodput) and what keeps them exact.
//
// Exact part: speculative_law (specdec/testing.hpp) follows every policy along every path of
// its history (observe() after each enumerated round) and compares the law of the first four
// emitted tokens with the target's: TV < 1e-12 for each policy with token-level and block
// verification, at T = 1, T = 0.7 with top-k, and greedy. A policy that reads the target's rows
// for the drafted tokens is exact too (the rows are a function of the tokens, which the draft
// side may compute anything from); what breaks exactness is a proposal that depends on a drawn
// token after the fact. Two such mutants (llama.cpp's "drop the unsure token" applied to sampled
// drafts, and dropping a token the target dislikes) miss by >= 1e-4.
//
// Goodput: its decision equals the brute-force argmax of its own expected-tokens-per-second
// formula on random estimates (including non-convex verification costs); acceptance calibrates
// against the draft's probability; it falls back to plain steps when drafting cannot pay and
// probes with exponential backoff.
//
// Decoder: greedy output is token for token the plain decoder's with every policy; a χ² test of
// the full float decoder with the goodput and schedule policies at T = 1.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <set>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "specdec/specdec.hpp"
#include "specdec/testing.hpp"

namespace {

using specdec::BlockVerifier;
using specdec::ConfidenceDraftLength;
using specdec::ConfidenceOptions;
using specdec::ConfiguredDraftLength;
using specdec::DraftLengthKind;
using specdec::DraftState;
using specdec::GenerationConfig;
using specdec::GoodputDraftLength;
using specdec::GoodputEstimates;
using specdec::GoodputOptions;
using specdec::RoundReport;
using specdec::SamplingParams;
using specdec::ScheduleDraftLength;
using specdec::ScheduleOptions;
using specdec::token_t;
using specdec::TokenVerifier;
using specdec::testing::Law;
using specdec::testing::ScriptedPair;
using specdec::testing::Sequence;

constexpr double kExact = 1e-12;
constexpr double kMutantMinError = 1e-4;

GenerationConfig config_with(std::size_t draft_length) {
  GenerationConfig config;
  config.draft_length = draft_length;
  return config;
}

RoundReport report(std::size_t drafted, std::size_t accepted,
                   std::span<const double> probabilities = {}) {
  return RoundReport{drafted, accepted, drafted, 0.0, 0.0, probabilities};
}

/// How many tokens a policy lets a proposer draft with the given probabilities (one per
/// token) and round limit.
template <class Policy>
std::size_t drafted_by(Policy& policy, std::span<const double> probabilities, std::size_t limit) {
  std::size_t n = 0;
  while (n < limit && policy.draft_more(DraftState{n, limit, probabilities.first(n)})) ++n;
  return n;
}

/// A policy's rounds as a decoder times them: each drafts what the policy lets it (every token
/// accepted) and takes 1 ms if plain, else `seconds_per_token` per token emitted; the context
/// grows by the tokens emitted. `before_round` runs first (a batch of one's price_alone).
template <class Policy>
class TimedRounds {
 public:
  TimedRounds(Policy& policy, std::span<const double> probabilities, std::size_t limit,
              std::function<void()> before_round = {})
      : policy_(policy),
        probabilities_(probabilities),
        limit_(limit),
        before_round_(std::move(before_round)) {}

  /// Runs one round; returns the tokens it drafted.
  std::size_t operator()(double seconds_per_token) {
    if (before_round_) before_round_();
    const std::size_t n = drafted_by(policy_, probabilities_, limit_);
    const double seconds = n == 0 ? 1e-3 : seconds_per_token * static_cast<double>(n + 1);
    policy_.observe(RoundReport{n, n, limit_, 0.0, seconds, probabilities_.first(n), context_});
    context_ += n + 1;
    return n;
  }

 private:
  Policy& policy_;
  std::span<const double> probabilities_;
  std::size_t limit_;
  std::function<void()> before_round_;
  std::size_t context_ = 16;
};

// ---- the baselines -------------------------------------------------------------------------

TEST(ScheduleDraftLengthTest, GrowsByTwoAfterFullAcceptanceAndShrinksByOneAfterRejection) {
  ScheduleDraftLength policy(ScheduleOptions{.initial_draft_length = 3});
  policy.begin(config_with(8));
  EXPECT_EQ(policy.current_draft_length(), 3u);
  policy.observe(report(3, 3));
  EXPECT_EQ(policy.current_draft_length(), 5u);
  policy.observe(report(5, 5));
  EXPECT_EQ(policy.current_draft_length(), 7u);
  policy.observe(report(7, 7));
  EXPECT_EQ(policy.current_draft_length(), 8u);  // capped by draft_length
  policy.observe(report(8, 2));
  EXPECT_EQ(policy.current_draft_length(), 7u);
  // A round cut short by the budget that accepted all it drafted is no evidence for growing.
  policy.observe(report(2, 2));
  EXPECT_EQ(policy.current_draft_length(), 7u);
  for (int i = 0; i < 10; ++i) policy.observe(report(1, 0));
  EXPECT_EQ(policy.current_draft_length(), 1u);  // never below 1
  const std::vector<double> sure(8, 1.0);
  EXPECT_EQ(drafted_by(policy, sure, 8), 1u);
  policy.begin(config_with(8));  // every generate() starts over
  EXPECT_EQ(policy.current_draft_length(), 3u);
  EXPECT_EQ(drafted_by(policy, sure, 2), 2u);  // and the round limit still rules
}

// grow = SIZE_MAX means "to the cap after a full acceptance": K + grow must not wrap (it gave
// K = 0 from K = 1, and K = 1 from K = 3 with SIZE_MAX - 1).
TEST(ScheduleDraftLengthTest, AHugeGrowSaturatesAtTheCap) {
  constexpr std::size_t kMax = std::numeric_limits<std::size_t>::max();
  for (const std::size_t initial : {std::size_t{1}, std::size_t{3}}) {
    for (const std::size_t grow : {kMax, kMax - 1, kMax - 7}) {
      SCOPED_TRACE(::testing::Message() << "initial " << initial << ", grow " << grow);
      ScheduleDraftLength policy(
          ScheduleOptions{.initial_draft_length = initial, .grow = grow, .shrink = kMax});
      policy.begin(config_with(8));
      policy.observe(report(initial, initial));
      EXPECT_EQ(policy.current_draft_length(), 8u);
      policy.observe(report(8, 3));  // a huge shrink floors at 1
      EXPECT_EQ(policy.current_draft_length(), 1u);
      policy.observe(report(1, 1));
      EXPECT_EQ(policy.current_draft_length(), 8u);
    }
  }
}

TEST(ConfidenceDraftLengthTest, StopsAfterTheFirstTokenBelowTheThreshold) {
  ConfidenceDraftLength policy(ConfidenceOptions{.min_probability = 0.6});
  EXPECT_EQ(drafted_by(policy, std::vector<double>{0.9, 0.7, 0.5, 0.9, 0.9}, 5), 3u);
  EXPECT_EQ(drafted_by(policy, std::vector<double>{0.1, 0.9}, 2), 1u);  // the first is drafted
  EXPECT_EQ(drafted_by(policy, std::vector<double>{0.9, 0.9, 0.9}, 3), 3u);
  EXPECT_EQ(drafted_by(policy, std::vector<double>{0.6, 0.6}, 2), 2u);  // at the threshold
  // A proposer without probabilities (n-gram lookups) counts as sure.
  EXPECT_TRUE(policy.draft_more(DraftState{2, 4, {}}));
}

TEST(DraftLengthPolicyOptionsTest, BadParametersAreRejectedWithTheFieldName) {
  auto message_of = [](const GenerationConfig& config) -> std::string {
    try {
      config.validate();
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
    return "";
  };
  GenerationConfig config = config_with(4);
  config.draft_length_policy.confidence.min_probability = 1.5;
  EXPECT_NE(message_of(config).find("min_probability = 1.5"), std::string::npos);
  config = config_with(4);
  config.draft_length_policy.schedule.initial_draft_length = 0;
  EXPECT_NE(message_of(config).find("initial_draft_length = 0"), std::string::npos);
  config = config_with(4);
  config.draft_length_policy.goodput.forgetting = 0.0;
  EXPECT_NE(message_of(config).find("forgetting = 0"), std::string::npos);
  config = config_with(4);
  config.draft_length_policy.goodput.probe_interval = 0;
  EXPECT_NE(message_of(config).find("probe_interval = 0"), std::string::npos);
  config = config_with(4);
  config.draft_length_policy.goodput.draft_token_cost = 0.1;  // without verify_row_cost
  EXPECT_NE(message_of(config).find("both finite and >= 0"), std::string::npos);
  config.draft_length_policy.goodput.verify_row_cost = std::numeric_limits<double>::infinity();
  EXPECT_NE(message_of(config).find("verify_row_cost = inf"), std::string::npos);
  config.draft_length_policy.goodput.verify_row_cost = 0.1;
  EXPECT_EQ(message_of(config), "");
  // A measured cost table: entries finite and > 0, a draft cost in its unit, no line as well.
  config.draft_length_policy.goodput.verify_costs = {1.0, 1.5};
  EXPECT_NE(message_of(config).find("verify_row_cost = 0.1"), std::string::npos);
  config.draft_length_policy.goodput.verify_row_cost = -1;
  EXPECT_EQ(message_of(config), "");
  config.draft_length_policy.goodput.verify_costs = {1.0, std::nan("")};
  EXPECT_NE(message_of(config).find("verify_costs[1] = nan (T_v(2))"), std::string::npos);
  config.draft_length_policy.goodput.verify_costs = {0.0};
  EXPECT_NE(message_of(config).find("verify_costs[0] = 0"), std::string::npos);
  config.draft_length_policy.goodput.verify_costs = {1.0};
  config.draft_length_policy.goodput.draft_token_cost = -1;
  EXPECT_NE(message_of(config).find("expected a finite draft_token_cost >= 0"), std::string::npos);
  EXPECT_THROW(ScheduleDraftLength(ScheduleOptions{.initial_draft_length = 0}),
               std::invalid_argument);
  EXPECT_THROW(GoodputDraftLength(GoodputOptions{.forgetting = 2.0}), std::invalid_argument);
}

// ---- goodput: its decisions are the optimum of its own formula -----------------------------

// G(m) = (1 + sum_{i<=m} P_i) / (m t_d + T_v(m + 1)), P_i = survival[i - 1] for drafted tokens
// and survival_j a^(i - j) beyond; the argmax over m in [j, max] (ties: smallest), by brute
// force with pow(), independently of the library's one-pass loop.
std::size_t brute_force_best(const GoodputEstimates& e, std::size_t max_length) {
  const std::size_t j = e.survival.size();
  const double survival_j = j == 0 ? 1.0 : e.survival[j - 1];
  std::size_t best = j;
  double best_rate = -1;
  for (std::size_t m = j; m <= max_length; ++m) {
    double tokens = 1.0;
    for (std::size_t i = 1; i <= m; ++i) {
      if (i <= j) {
        tokens += e.survival[i - 1];
        continue;
      }
      double survival = survival_j;  // beyond the drafted tokens: the projected acceptances
      for (std::size_t k = 0; k < i - j; ++k) survival *= e.acceptance[k];
      tokens += survival;
    }
    const double rate = tokens / (static_cast<double>(m) * e.draft_token_cost + e.verify_cost[m]);
    if (rate > best_rate * (1 + 1e-12)) {
      best_rate = rate;
      best = m;
    }
  }
  return best;
}

TEST(GoodputFormulaTest, BestDraftLengthEqualsTheBruteForceOptimum) {
  std::mt19937_64 gen(2026);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  std::size_t drafted_somewhere = 0, stopped_somewhere = 0;
  for (int trial = 0; trial < 20000; ++trial) {
    const std::size_t max_length = 1 + gen() % 16;
    const std::size_t j = gen() % (max_length + 1);
    std::vector<double> survival(j);
    double s = 1.0;
    for (double& p : survival) p = (s *= std::pow(unit(gen), 0.3));
    std::vector<double> verify(max_length + 1);
    const int shape = trial % 3;  // flat, linear, non-convex (noisy steps)
    for (std::size_t n = 1; n <= verify.size(); ++n) {
      const double x = static_cast<double>(n - 1);
      verify[n - 1] = shape == 0   ? 1.0
                      : shape == 1 ? 1.0 + 0.1 * x
                                   : 1.0 + 0.08 * x + 0.3 * unit(gen) * (n % 3 == 0);
    }
    std::vector<double> acceptance(max_length - j);
    for (double& a : acceptance) a = unit(gen);
    GoodputEstimates estimates;
    estimates.survival = survival;
    estimates.acceptance = acceptance;
    estimates.draft_token_cost = 0.2 * unit(gen) * unit(gen);
    estimates.verify_cost = verify;
    const std::size_t best = specdec::best_draft_length(estimates, max_length);
    ASSERT_EQ(best, brute_force_best(estimates, max_length)) << "trial " << trial;
    drafted_somewhere += best > j;
    stopped_somewhere += best == j && j < max_length;
  }
  EXPECT_GT(drafted_somewhere, 1000u);  // both decisions occur: the comparison is not vacuous
  EXPECT_GT(stopped_somewhere, 1000u);
}

TEST(GoodputDraftLengthTest, DecisionsEqualTheBruteForceOptimumOfItsEstimates) {
  std::mt19937_64 gen(11);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  std::size_t yes = 0, no = 0;
  for (int history = 0; history < 200; ++history) {
    GoodputDraftLength policy(GoodputOptions{.forgetting = 0.9,
                                             .draft_token_cost = 0.15 * unit(gen),
                                             .verify_row_cost = 0.2 * unit(gen)});
    policy.begin(config_with(12));
    const double skill = unit(gen);
    for (int round = 0; round < 20; ++round) {  // a random history of rounds
      std::vector<double> probabilities(1 + gen() % 12);
      std::size_t accepted = 0;
      for (double& p : probabilities) p = unit(gen);
      while (accepted < probabilities.size() && unit(gen) < skill * probabilities[accepted]) {
        ++accepted;
      }
      policy.observe(report(probabilities.size(), accepted, probabilities));
    }
    for (int decision = 0; decision < 20; ++decision) {
      const std::size_t limit = 1 + gen() % 12;
      const std::size_t j = gen() % limit;
      std::vector<double> probabilities(j);
      for (double& p : probabilities) p = unit(gen);
      const DraftState state{j, limit, probabilities};
      const GoodputEstimates estimates = policy.estimates_for(state);
      const std::vector<double> verify(estimates.verify_cost.begin(), estimates.verify_cost.end());
      const std::vector<double> survival(estimates.survival.begin(), estimates.survival.end());
      const std::vector<double> acceptance(estimates.acceptance.begin(),
                                           estimates.acceptance.end());
      GoodputEstimates copy = estimates;
      copy.survival = survival;
      copy.acceptance = acceptance;
      copy.verify_cost = verify;
      const bool expected = brute_force_best(copy, limit) > j;
      ASSERT_EQ(policy.draft_more(state), expected) << "history " << history;
      (expected ? yes : no)++;
    }
  }
  EXPECT_GT(yes, 100u);
  EXPECT_GT(no, 100u);
}

TEST(GoodputDraftLengthTest, CalibratesAcceptanceAgainstTheDraftsProbability) {
  GoodputDraftLength policy(
      GoodputOptions{.forgetting = 1.0, .draft_token_cost = 0.05, .verify_row_cost = 0.05});
  policy.begin(config_with(8));
  // Confident tokens (0.95) are always accepted, unsure ones (0.25) always rejected.
  for (int round = 0; round < 50; ++round) {
    const std::vector<double> probabilities{0.95, 0.95, 0.25, 0.95};
    policy.observe(report(4, 2, probabilities));
  }
  const std::vector<double> confident{0.95};
  const std::vector<double> unsure{0.25};
  const GoodputEstimates after_confident = policy.estimates_for(DraftState{1, 8, confident});
  EXPECT_GT(after_confident.survival[0], 0.95);
  const double survival_confident = after_confident.survival[0];
  const GoodputEstimates after_unsure = policy.estimates_for(DraftState{1, 8, unsure});
  EXPECT_LT(after_unsure.survival[0], 0.1);
  EXPECT_LT(after_unsure.survival[0], survival_confident);
  // So: after an unsure token, stop; after a confident one, go on.
  EXPECT_FALSE(policy.draft_more(DraftState{1, 8, unsure}));
  EXPECT_TRUE(policy.draft_more(DraftState{1, 8, confident}));
}

TEST(GoodputDraftLengthTest, CalibrationSeparatesUnsureFromPlausibleAndSureFromFairlySure) {
  // A draft unsure of its token gives it ~1/V (here 1/256), an ordinary token may get 1/16; at
  // the top, 0.6 and 0.97 are different degrees of sure. Equal-width bins of [0, 1] put 1/256
  // and 1/16 together: the estimates must tell each pair apart.
  GoodputDraftLength policy(
      GoodputOptions{.forgetting = 1.0, .draft_token_cost = 0.05, .verify_row_cost = 0.05});
  policy.begin(config_with(8));
  for (int round = 0; round < 60; ++round) {
    // 1/16 accepted, 1/256 rejected; in other rounds 0.97 accepted, 0.6 rejected.
    const std::vector<double> low{1.0 / 16, 1.0 / 16, 1.0 / 256};
    const std::vector<double> high{0.97, 0.97, 0.6};
    policy.observe(report(3, 2, round % 2 == 0 ? low : high));
  }
  const auto survival_of = [&](double probability) {
    const std::vector<double> drafted{probability};
    return policy.estimates_for(DraftState{1, 8, drafted}).survival[0];
  };
  EXPECT_GT(survival_of(1.0 / 16), 0.8);
  EXPECT_LT(survival_of(1.0 / 256), 0.2);
  EXPECT_LT(survival_of(1.0 / 200), 0.2);  // in [1/256, 1/128): the same bin
  EXPECT_GT(survival_of(0.97), 0.8);
  EXPECT_LT(survival_of(0.6), 0.2);
}

TEST(GoodputDraftLengthTest, CalibrationByProbabilityCarriesOverWhileTheSamplingStaysTheSame) {
  // One generate() learns that unsure tokens (1/256) fail and sure ones (0.95) pass; the next
  // one, with the same sampling parameters, starts from that, while the evidence about the text
  // (the recent rate) starts over. New sampling parameters, a logits processor or
  // keep_calibration = false start from nothing.
  const std::vector<double> unsure{1.0 / 256}, sure{0.95};
  auto learnt = [&](GoodputDraftLength& policy, const GenerationConfig& config) {
    policy.begin(config);
    for (int round = 0; round < 30; ++round) {
      policy.observe(report(4, 3, std::vector<double>{0.95, 0.95, 0.95, 1.0 / 256}));
    }
  };
  auto unsure_survival = [&](GoodputDraftLength& policy) {
    return policy.estimates_for(DraftState{1, 8, unsure}).survival[0];
  };
  const GoodputOptions options{.draft_token_cost = 0.05, .verify_row_cost = 0.05};
  GoodputDraftLength fresh(options);
  fresh.begin(config_with(8));
  const double prior = unsure_survival(fresh);
  EXPECT_GT(prior, 0.3);

  GenerationConfig config = config_with(8);
  GoodputDraftLength policy(options);
  learnt(policy, config);
  EXPECT_LT(unsure_survival(policy), 0.1);
  policy.begin(config);  // the next generate()
  EXPECT_LT(unsure_survival(policy), 0.1);
  EXPECT_GT(policy.estimates_for(DraftState{1, 8, sure}).survival[0], 0.8);
  EXPECT_FALSE(policy.draft_more(DraftState{1, 8, unsure}));

  GenerationConfig hotter = config;
  hotter.sampling.temperature = 1.5f;
  policy.begin(hotter);
  EXPECT_DOUBLE_EQ(unsure_survival(policy), prior);

  learnt(policy, config);
  GenerationConfig processed = config;
  processed.sampling.logits_processor = [](std::span<const token_t>, std::span<float>) {};
  policy.begin(processed);
  EXPECT_DOUBLE_EQ(unsure_survival(policy), prior);

  // A config without sampling parameters (a user's own decoder): nothing to key on, start over.
  struct BareConfig {
    std::size_t draft_length = 8;
  };
  learnt(policy, config);
  policy.begin(BareConfig{});
  EXPECT_DOUBLE_EQ(unsure_survival(policy), prior);

  GoodputOptions forgetful = options;
  forgetful.keep_calibration = false;
  GoodputDraftLength alone(forgetful);
  learnt(alone, config);
  alone.begin(config);
  EXPECT_DOUBLE_EQ(unsure_survival(alone), prior);
}

TEST(GoodputDraftLengthTest, ASureTokenAfterAHardStretchIsRatedByItsProbability) {
  // Easy and hard stretches alternate, and the draft knows which is which: sure (0.95) and
  // accepted in the easy ones, unsure (1/256) and rejected in the hard ones. Right after a hard
  // stretch the recent rate is low; the product of the two estimates then counts the hardness
  // twice (the level is low because of the unsure tokens the bins already explain) and would
  // rate a sure token far below the 0.95 acceptance its bin has seen. The estimators' weights
  // learn from the verdicts that the bin alone predicts them.
  GoodputDraftLength policy(
      GoodputOptions{.forgetting = 0.9, .draft_token_cost = 0.05, .verify_row_cost = 0.05});
  policy.begin(config_with(8));
  const std::vector<double> unsure{1.0 / 256}, sure{0.95};
  const std::vector<double> easy_round{0.95, 0.95, 0.95, 0.95};
  double first_stretch = 0;
  for (int stretch = 0; stretch < 6; ++stretch) {
    for (int round = 0; round < 8; ++round) policy.observe(report(4, 4, easy_round));
    for (int round = 0; round < 16; ++round) policy.observe(report(1, 0, unsure));
    if (stretch == 0) first_stretch = policy.estimates_for(DraftState{1, 8, sure}).survival[0];
  }
  EXPECT_LT(first_stretch, 0.5);  // at first the product dominates (0.23)
  EXPECT_GT(policy.estimates_for(DraftState{1, 8, sure}).survival[0], 0.8);  // (0.83)
  EXPECT_LT(policy.estimates_for(DraftState{1, 8, unsure}).survival[0], 0.1);
}

TEST(GoodputDraftLengthTest, CalibrationByProbabilityOutlastsALongEasyStretch) {
  // Hard text, where the draft is unsure (1/256) and rejected; then 40 easy rounds, where it is
  // sure and accepted. The recent-rate evidence forgets the hard stretch (forgetting 0.9), but
  // an unsure token must still be expected to fail when the text turns hard again.
  GoodputDraftLength policy(
      GoodputOptions{.forgetting = 0.9, .draft_token_cost = 0.1, .verify_row_cost = 0.0});
  policy.begin(config_with(8));
  const std::vector<double> unsure{1.0 / 256};
  for (int round = 0; round < 20; ++round) policy.observe(report(1, 0, unsure));
  for (int round = 0; round < 40; ++round) {
    policy.observe(report(8, 8, std::vector<double>(8, 0.95)));
  }
  EXPECT_LT(policy.estimates_for(DraftState{1, 8, unsure}).survival[0], 0.2);
  EXPECT_FALSE(policy.draft_more(DraftState{1, 8, unsure}));  // even with free verify rows
  const std::vector<double> sure{0.95};
  EXPECT_TRUE(policy.draft_more(DraftState{1, 8, sure}));
}

TEST(GoodputDraftLengthTest, AcceptanceFollowsTheRecentAcceptanceRate) {
  // Text of changing difficulty: long fully accepted rounds come in runs, and so do rejections
  // at the first token.
  GoodputDraftLength policy(
      GoodputOptions{.forgetting = 0.95, .draft_token_cost = 0.05, .verify_row_cost = 0.3});
  policy.begin(config_with(8));
  const std::vector<double> probabilities(8, 0.5);
  for (int segment = 0; segment < 6; ++segment) {
    for (int round = 0; round < 5; ++round) policy.observe(report(8, 7, probabilities));
    for (int round = 0; round < 5; ++round) policy.observe(report(1, 0, probabilities));
  }
  const double after_rejections = policy.estimates_for(DraftState{0, 8, {}}).acceptance[0];
  policy.observe(report(8, 7, probabilities));  // one good round, ending in a rejection
  const double after_a_run = policy.estimates_for(DraftState{0, 8, {}}).acceptance[0];
  EXPECT_GT(after_a_run, after_rejections + 0.2);
  // So a round after a run of acceptances drafts more than a round after rejections.
  const std::size_t long_round = drafted_by(policy, probabilities, 8);
  for (int round = 0; round < 3; ++round) policy.observe(report(1, 0, probabilities));
  EXPECT_LT(drafted_by(policy, probabilities, 8), long_round);
  // Along a round the projected acceptance rises: every later token follows an acceptance.
  const GoodputEstimates estimates = policy.estimates_for(DraftState{0, 8, {}});
  EXPECT_GT(estimates.acceptance[4], estimates.acceptance[0]);
}

TEST(GoodputDraftLengthTest, PlainStepsAfterAHardStretchRaiseTheExpectedAcceptanceAgain) {
  // Easy and hard stretches: the filter learns both rates, believes the text hard after a run of
  // first-token rejections, and, with every plain step (no verdict), believes more that the
  // hard stretch is over, up to the share of easy positions seen.
  GoodputDraftLength policy(
      GoodputOptions{.forgetting = 1.0, .draft_token_cost = 0.05, .verify_row_cost = 0.1});
  policy.begin(config_with(8));
  const std::vector<double> probabilities(8, 0.5);
  for (int segment = 0; segment < 4; ++segment) {
    for (int round = 0; round < 4; ++round) policy.observe(report(8, 8, probabilities));
    for (int round = 0; round < 8; ++round) policy.observe(report(1, 0, probabilities));
  }
  auto first_token = [&] { return policy.estimates_for(DraftState{0, 8, {}}).acceptance[0]; };
  const double hard = first_token();
  EXPECT_LT(hard, 0.2);
  double previous = hard;
  for (int step = 0; step < 40; ++step) {
    policy.observe(report(0, 0));
    const double now = first_token();
    EXPECT_GT(now, previous) << "plain step " << step;
    previous = now;
  }
  EXPECT_GT(previous, hard + 0.25);
  EXPECT_LT(previous, 0.85);  // the mix of the two stretches, not the easy rate
  // One fully accepted round makes the easy stretch the likely one again.
  policy.observe(report(8, 8, probabilities));
  EXPECT_GT(first_token(), 0.9);
}

TEST(GoodputDraftLengthTest, WithStationaryAcceptanceTheLastVerdictsMatterLittle) {
  // Verdicts independent at rate 0.8: both regimes learn about the same rate, so the estimate
  // after a rejection is not far from the one after an acceptance.
  GoodputDraftLength policy(
      GoodputOptions{.forgetting = 0.9, .draft_token_cost = 0.05, .verify_row_cost = 0.1});
  policy.begin(config_with(8));
  const std::vector<double> probabilities(8, 0.5);
  specdec::Rng rng(7);
  double after_rejection = 0, after_acceptance = 0;
  int rejections = 0, acceptances = 0;
  for (int round = 0; round < 2000; ++round) {
    std::size_t accepted = 0;
    while (accepted < 4 && rng.uniform01() < 0.8) ++accepted;
    policy.observe(report(4, accepted, probabilities));
    if (round < 200) continue;
    const double estimate = policy.estimates_for(DraftState{0, 8, {}}).acceptance[0];
    if (accepted < 4) {
      after_rejection += estimate;
      ++rejections;
    } else {
      after_acceptance += estimate;
      ++acceptances;
    }
  }
  after_rejection /= rejections;
  after_acceptance /= acceptances;
  EXPECT_NEAR(after_acceptance, 0.8, 0.06);
  EXPECT_LT(after_acceptance - after_rejection, 0.15);
}

TEST(GoodputDraftLengthTest, FallsBackToPlainStepsWhenDraftingCannotPayAndProbesWithBackoff) {
  GoodputDraftLength policy(GoodputOptions{
      .forgetting = 0.9, .probe_interval = 4, .draft_token_cost = 0.1, .verify_row_cost = 0.1});
  policy.begin(config_with(8));
  const std::vector<double> none;
  EXPECT_TRUE(policy.draft_more(DraftState{0, 8, none}));  // the prior says drafting may pay
  const std::vector<double> half{0.5};
  for (int round = 0; round < 10; ++round) policy.observe(report(1, 0, half));  // useless draft
  // Now every round is a plain step, except one probe after every 4 plain rounds; after 4 probes
  // that did not restart drafting the wait would double, but by then 14 verdicts in a row were
  // rejections: not even an optimistic acceptance (two standard errors above their rate) pays,
  // so there is no further probe (exactly plain decoding).
  std::vector<int> probes_at;
  for (int round = 0; round < 60; ++round) {
    const bool drafts = policy.draft_more(DraftState{0, 8, none});
    if (drafts) {
      probes_at.push_back(round);
      EXPECT_FALSE(policy.draft_more(DraftState{1, 8, half}));  // a probe is one token
      policy.observe(report(1, 0, half));
    } else {
      policy.observe(report(0, 0));
    }
  }
  EXPECT_EQ(probes_at, (std::vector<int>{4, 9, 14, 19}));
  // A good probe restarts drafting, and the backoff resets.
  for (int round = 0; round < 30; ++round)
    policy.observe(report(4, 4, std::vector<double>(4, 0.9)));
  EXPECT_TRUE(policy.draft_more(DraftState{0, 8, none}));
}

TEST(GoodputDraftLengthTest, DraftsToTheCapWhenEveryTokenIsAcceptedAndCheapToVerify) {
  GoodputDraftLength policy(GoodputOptions{.draft_token_cost = 0.01, .verify_row_cost = 0.0});
  policy.begin(config_with(6));
  for (int round = 0; round < 30; ++round)
    policy.observe(report(6, 6, std::vector<double>(6, 0.9)));
  EXPECT_EQ(drafted_by(policy, std::vector<double>(6, 0.9), 6), 6u);
  // With a costly verification row the same acceptance buys fewer tokens.
  GoodputDraftLength costly(GoodputOptions{.draft_token_cost = 0.01, .verify_row_cost = 0.6});
  costly.begin(config_with(6));
  for (int round = 0; round < 30; ++round)
    costly.observe(report(6, 5, std::vector<double>(6, 0.9)));
  const std::size_t fewer = drafted_by(costly, std::vector<double>(6, 0.9), 6);
  EXPECT_GE(fewer, 1u);
  EXPECT_LT(fewer, 6u);
}

// A sequence alone in its batch plans as a decoder of its own (price_alone), and the guard's
// trial after plain rounds first pays the draft's catch-up on their tokens, so the ledger must
// afford it (AloneRoundCosts::catch_up_cost). Curves: T(n) = 1 + 0.1 (n - 1) ms, a draft call
// 0.05 ms, acceptance 0.9: the plan drafts; its rounds, every token accepted, take 3 plain
// steps per token emitted: the guard finds drafting losing. Then plain rounds: with the
// catch-up at 0.01 ms per token the trial comes after the guard's wait of 8 rounds; at 0.5 ms
// (4 plain steps for those 8 tokens, beyond the ledger's 2) none comes within 300 rounds.
TEST(GoodputDraftLengthTest, AloneATrialWaitsForTheLedgerToAffordTheCatchUp) {
  std::vector<double> curve;
  for (std::size_t n = 1; n <= 9; ++n)
    curve.push_back(1e-3 * (1.0 + 0.1 * static_cast<double>(n - 1)));
  const std::vector<double> sure(8, 0.9);
  const auto plain_rounds_until_trial = [&](double catch_up) {
    GoodputDraftLength policy;  // measured costs: the guard judges the rounds
    policy.begin(config_with(8));
    const specdec::AloneRoundCosts costs{curve, 0.05e-3, 0.0, 0.0, true, catch_up};
    TimedRounds round(policy, sure, 8, [&] { policy.price_alone(costs); });
    (void)round(50e-3);  // the prompt's round
    EXPECT_EQ(round(1e-3), 0u) << "a plain step after the prompt's: not a sample";
    EXPECT_EQ(round(1e-3), 0u) << "the plain step timed";
    // The first drafting round also reads the prompt into the draft: not judged. The second
    // loses at least 3 plain steps: verdict enough.
    EXPECT_GT(round(3e-3), 0u);
    EXPECT_GT(round(3e-3), 0u);
    std::size_t plain = 0;
    while (plain < 300 && round(3e-3) == 0) ++plain;
    return plain;
  };
  EXPECT_EQ(plain_rounds_until_trial(0.01e-3), 8u);
  EXPECT_EQ(plain_rounds_until_trial(0.5e-3), 300u);
}

// A sequence alone in its batch prices a plain round as the batch plan does, at a plain step
// in a run of them (AloneRoundCosts::plain_step_cost, the batch's plain_step_costs[0]) where that
// is below the curve's one-row call, which follows calls of other shapes. Curve: T(n) = 1 +
// 0.6 (n - 1) ms, a draft call 0.05 ms, every drafted token accepted so far: priced
// at 1 ms, plain decoding loses to drafting; at 0.7 ms, a run's price, it wins.
TEST(GoodputDraftLengthTest, AloneAPlainRoundIsPricedAsARunOfPlainSteps) {
  std::vector<double> curve;
  for (std::size_t n = 1; n <= 9; ++n)
    curve.push_back(1e-3 * (1.0 + 0.6 * static_cast<double>(n - 1)));
  const auto planned = [&](double plain_step) {
    GoodputDraftLength policy;
    policy.begin(config_with(8));
    const std::vector<double> sure(8, 0.9);
    for (int round = 0; round < 30; ++round) policy.observe(report(8, 8, sure));
    policy.price_alone(specdec::AloneRoundCosts{curve, 0.05e-3, 0.0, 0.0, false, 0.0, plain_step});
    const GoodputEstimates estimates = policy.estimates_for(DraftState{0, 8, {}});
    EXPECT_DOUBLE_EQ(estimates.verify_cost[0], plain_step > 0 ? std::min(plain_step, 1e-3) : 1e-3);
    EXPECT_DOUBLE_EQ(estimates.verify_cost[3], curve[3]);
    return specdec::best_draft_length(estimates, 8);
  };
  EXPECT_GT(planned(0.0), 0u);     // not given: T(1)
  EXPECT_GT(planned(1.2e-3), 0u);  // above T(1): T(1)
  EXPECT_EQ(planned(0.7e-3), 0u);
}

// Before the plain guard's first verdict a round may lose at most what would stop drafting at
// once (3 plain steps) plus the ledger's allowance (2, and a share of the time decoded): its
// worst case, one token emitted for the whole round's cost, must fit. Costs in one-row calls:
// T(n) = 1 + 0.5 (n - 1), drafted tokens free, every token accepted, so the plan drafts all it
// may (12); 12 tokens cost 7 calls, a loss of 6 at worst, so the cold rounds draft 10 (a loss
// of 5 at worst). Once two judged rounds have won (the verdict), the plan drafts 12 again.
TEST(GoodputDraftLengthTest, BeforeTheFirstVerdictARoundsWorstCaseFitsTheLedger) {
  GoodputOptions options{.draft_token_cost = 0.0};
  for (std::size_t n = 1; n <= 13; ++n)
    options.verify_costs.push_back(1.0 + 0.5 * static_cast<double>(n - 1));
  options.measured_costs = true;  // timings judge the rounds: the guard applies
  GoodputDraftLength policy(options);
  const std::vector<double> sure(12, 1.0);
  policy.begin(config_with(12));
  TimedRounds round(policy, sure, 12);
  (void)round(50e-3);  // the prompt's round
  // Rounds without timings: the acceptance estimates learn that every token is accepted; the
  // guard learns nothing.
  for (int untimed = 0; untimed < 30; ++untimed) policy.observe(report(12, 12, sure));
  EXPECT_EQ(round(1e-3), 0u) << "a plain step after the prompt's: not a sample";
  EXPECT_EQ(round(1e-3), 0u) << "the plain step timed";
  // The first drafting round (the draft's prefill, not judged), then two judged rounds, each
  // emitting a token per 0.6 plain steps: drafting wins.
  EXPECT_EQ(round(0.6e-3), 10u);
  EXPECT_EQ(round(0.6e-3), 10u);
  EXPECT_EQ(round(0.6e-3), 10u);
  EXPECT_EQ(round(0.6e-3), 12u) << "after the verdict the plan is the model's";
}

TEST(GoodputDraftLengthTest, MeasuredCostsFollowTheRoundTimings) {
  GoodputDraftLength policy;  // measured costs
  policy.begin(config_with(8));
  EXPECT_FALSE(policy.prediction().has_value());
  // Draft 1 ms per token; target 10 ms + 1 ms per row beyond the first; rounds of 2..6 tokens,
  // after the prompt's round and one plain step (until a plain step is timed, the plain guard
  // keeps the rounds plain: GoodputOptions::plain_guard).
  policy.observe(RoundReport{0, 0, 8, 0, 50e-3, {}});
  policy.observe(RoundReport{0, 0, 8, 0, 10e-3, {}});
  for (int round = 0; round < 40; ++round) {
    const std::size_t n = 2 + static_cast<std::size_t>(round % 5);
    const std::vector<double> probabilities(n, 0.8);
    policy.observe(RoundReport{n, n / 2, 8, 1e-3 * static_cast<double>(n),
                               10e-3 + 1e-3 * static_cast<double>(n), probabilities});
  }
  const GoodputEstimates estimates = policy.estimates_for(DraftState{0, 8, {}});
  EXPECT_NEAR(estimates.draft_token_cost, 1e-3, 1e-9);
  EXPECT_NEAR(estimates.verify_cost[0], 10e-3, 1e-6);  // n = 1: extrapolated by the line
  EXPECT_NEAR(estimates.verify_cost[4], 14e-3, 1e-6);  // n = 5: seen
  EXPECT_NEAR(estimates.verify_cost[8], 18e-3, 1e-6);  // n = 9: extrapolated
  (void)policy.draft_more(DraftState{0, 8, {}});
  ASSERT_TRUE(policy.prediction().has_value());
  EXPECT_GT(policy.prediction()->seconds, 10e-3);
  EXPECT_GE(policy.prediction()->tokens, 1.0);
}

// A target whose call cost steps up past 6 rows (T(n) = 1 + 0.04 (n - 1), times 1.5 past 6: the
// shape of a CPU target whose rows outgrow a register tile), a draft at c = 0.05 and acceptance
// 0.8: the best static K is 5, right below the step (2.544 tokens per unit against 2.472 at K = 4
// and 1.829 at K = 6). Goodput, timed exactly, must settle there. (A line through every measured
// row count rated 6 rows by the counts above the step, 1.44 units for a true 1.20, and the policy
// drafted 4 in most rounds and never measured 6 rows: 0.96 of K = 5.) A delayed call among the
// first samples of 6 rows did the same, until a row count's first estimate became a median.
struct SteppedRounds {
  static double cost(std::size_t rows) {
    const double linear = 1.0 + 0.04 * static_cast<double>(rows - 1);
    return rows > 6 ? 1.5 * linear : linear;
  }
  std::vector<std::size_t> histogram = std::vector<std::size_t>(9, 0);
  double units = 0;
  std::size_t emitted = 0;

  /// 40 generations of 256 tokens, acceptance 0.8, every token's probability 0.8; timings exact
  /// (1 ms per unit) except that every `delayed`-th call takes 4 times as long (a scheduler
  /// slice on a shared machine).
  void run(GoodputDraftLength& policy, std::size_t delayed) {
    std::mt19937_64 gen(11);
    std::bernoulli_distribution accept(0.8);
    GenerationConfig config = config_with(8);
    config.max_new_tokens = 256;
    std::size_t calls = 0;
    for (int generation = 0; generation < 40; ++generation) {
      policy.begin(config);
      std::size_t done = 0;
      while (done < 256) {
        const std::size_t limit = std::min<std::size_t>(8, 256 - done - 1);
        std::vector<double> probabilities;
        std::size_t n = 0;
        while (n < limit && policy.draft_more(DraftState{n, limit, probabilities})) {
          probabilities.push_back(0.8);
          ++n;
        }
        std::size_t accepted = 0;
        while (accepted < n && accept(gen)) ++accepted;
        done += accepted + 1;
        emitted += accepted + 1;
        ++histogram[n];
        units += 0.05 * static_cast<double>(n) + cost(n + 1);
        const double delay = delayed != 0 && ++calls % delayed == 0 ? 4.0 : 1.0;
        policy.observe(RoundReport{n, accepted, limit, 0.05e-3 * static_cast<double>(n),
                                   1e-3 * cost(n + 1) * delay, probabilities});
      }
    }
  }
  [[nodiscard]] double speedup() const { return static_cast<double>(emitted) / units; }
};

TEST(GoodputDraftLengthTest, SettlesBelowAStepInTheVerificationCost) {
  const double best_static = (1 - std::pow(0.8, 6)) / 0.2 / (5 * 0.05 + SteppedRounds::cost(6));
  for (const std::size_t delayed : {std::size_t{0}, std::size_t{23}}) {
    SCOPED_TRACE(::testing::Message() << "every " << delayed << "th call delayed");
    GoodputDraftLength policy;
    SteppedRounds rounds;
    rounds.run(policy, delayed);
    const auto mode = std::max_element(rounds.histogram.begin(), rounds.histogram.end());
    EXPECT_EQ(mode - rounds.histogram.begin(), 5) << ::testing::PrintToString(rounds.histogram);
    // Within 2 % of K = 5 with exact timings; a call in 23 taking 4 times as long costs ~1 % more.
    EXPECT_GT(rounds.speedup(), (delayed == 0 ? 0.98 : 0.97) * best_static);
    const GoodputEstimates estimates = policy.estimates_for(DraftState{0, 8, {}});
    // T(1) rests on the few plain steps the policy takes (the plain guard times one first);
    // a delayed call among them moves it more than the drafting rounds' counts.
    EXPECT_NEAR(estimates.verify_cost[5] / estimates.verify_cost[0], 1.20,
                delayed == 0 ? 0.02 : 0.06)
        << ::testing::PrintToString(rounds.histogram);
  }
}

// A measured cost curve with a dip, shaped like llama.cpp's CPU backend on the shipped pair
// (T(9) < T(8), T(2) ~ 1.8 T(1)). Told the table, the policy plans on it exactly (beyond the
// table: its last step per row) and, with acceptance 0.9 and a draft token at 0.1, settles at
// K = 8, the static optimum, not at K = 4 where a line through the cheaper counts keeps it.
constexpr std::array<double, 10> kDippedCosts{1.0, 1.8, 2.0, 2.2, 2.5, 3.0, 3.2, 4.6, 2.9, 4.2};

TEST(GoodputDraftLengthTest, AMeasuredCostTableIsUsedAsIs) {
  GoodputOptions options{.draft_token_cost = 0.1};
  options.verify_costs.assign(kDippedCosts.begin(), kDippedCosts.end());
  GoodputDraftLength policy(options);
  policy.begin(config_with(12));
  const GoodputEstimates estimates = policy.estimates_for(DraftState{0, 12, {}});
  ASSERT_GE(estimates.verify_cost.size(), 13u);
  for (std::size_t n = 1; n <= kDippedCosts.size(); ++n) {
    EXPECT_EQ(estimates.verify_cost[n - 1], kDippedCosts[n - 1]) << n;
  }
  EXPECT_NEAR(estimates.verify_cost[10], 5.5, 1e-12);  // 4.2 + (4.2 - 2.9)
  EXPECT_NEAR(estimates.verify_cost[12], 8.1, 1e-12);
  EXPECT_DOUBLE_EQ(estimates.draft_token_cost, 0.1);
  EXPECT_FALSE(policy.prediction().has_value());  // fixed costs: no prediction in seconds
  EXPECT_TRUE(options.fixed_costs());
}

TEST(GoodputDraftLengthTest, WithAMeasuredTableSettlesAtTheDipLikeTheBestStaticK) {
  const auto cost = [](std::size_t rows) { return kDippedCosts[rows - 1]; };
  const auto static_rate = [&](std::size_t k) {
    return (1 - std::pow(0.9, static_cast<double>(k + 1))) / 0.1 /
           (0.1 * static_cast<double>(k) + cost(k + 1));
  };
  std::size_t best_k = 1;
  for (std::size_t k = 2; k <= 8; ++k) best_k = static_rate(k) > static_rate(best_k) ? k : best_k;
  ASSERT_EQ(best_k, 8u);  // the dip: K = 8 (1.656 tokens per unit) beats K = 4 (1.412)

  GoodputOptions options{.draft_token_cost = 0.1};
  options.verify_costs.assign(kDippedCosts.begin(), kDippedCosts.end());
  GoodputDraftLength policy(options);
  std::mt19937_64 gen(5);
  std::bernoulli_distribution accept(0.9);
  std::vector<std::size_t> histogram(10, 0);
  double units = 0;
  std::size_t emitted = 0;
  for (int generation = 0; generation < 20; ++generation) {
    policy.begin(config_with(9));
    for (std::size_t done = 0; done < 256;) {
      const std::size_t limit = std::min<std::size_t>(9, 256 - done - 1);
      std::vector<double> probabilities;
      std::size_t n = 0;
      while (n < limit && policy.draft_more(DraftState{n, limit, probabilities})) {
        probabilities.push_back(0.9);
        ++n;
      }
      std::size_t accepted = 0;
      while (accepted < n && accept(gen)) ++accepted;
      done += accepted + 1;
      emitted += accepted + 1;
      ++histogram[n];
      units += 0.1 * static_cast<double>(n) + cost(n + 1);
      policy.observe(RoundReport{n, accepted, limit, 0.0, 0.0, probabilities});
    }
  }
  const auto mode = std::max_element(histogram.begin(), histogram.end()) - histogram.begin();
  EXPECT_EQ(mode, 8) << ::testing::PrintToString(histogram);
  EXPECT_GT(static_cast<double>(emitted) / units, 0.97 * static_rate(8));
}

// measure_call_costs calls each model as documented and hands over a valid fixed cost model;
// bad arguments are refused before any call, and a model's exception passes through.
TEST(MeasureCallCostsTest, TimesEveryRowCountAndMakesGoodputOptions) {
  constexpr std::size_t kVocab = 4;
  std::vector<std::size_t> target_calls(6, 0);
  std::size_t draft_calls = 0;
  std::vector<float> row(kVocab, 0.0f), rows(5 * kVocab, 0.0f);
  auto draft = [&](std::span<const token_t>) -> std::span<const float> {
    ++draft_calls;
    return row;
  };
  auto target = [&](std::span<const token_t>, std::size_t n) -> std::span<const float> {
    ++target_calls[n];
    return std::span<const float>(rows).first(n * kVocab);
  };
  const std::vector<token_t> context{0, 1, 2, 3, 0, 1, 2};
  const specdec::CallCosts costs = specdec::measure_call_costs(draft, target, context, 5, 3);
  EXPECT_EQ(draft_calls, 61u);  // a warm-up, then n - 1 per round, two rounds per n and repeat
  EXPECT_EQ(target_calls, (std::vector<std::size_t>{0, 6, 6, 6, 6, 7}));  // two per repeat
  ASSERT_EQ(costs.verify_seconds.size(), 5u);
  for (const double seconds : costs.verify_seconds) EXPECT_GT(seconds, 0.0);
  const GoodputOptions options = costs.goodput_options(GoodputOptions{.forgetting = 0.5});
  EXPECT_EQ(options.verify_costs.size(), 5u);
  EXPECT_EQ(options.verify_costs[0], 1.0);
  EXPECT_DOUBLE_EQ(options.draft_token_cost, costs.draft_token_seconds / costs.verify_seconds[0]);
  EXPECT_EQ(options.forgetting, 0.5);
  EXPECT_TRUE(options.fixed_costs());

  draft_calls = 0;
  const std::vector<token_t> empty;
  EXPECT_THROW((void)specdec::measure_call_costs(draft, target, empty, 1), std::invalid_argument);
  EXPECT_THROW((void)specdec::measure_call_costs(draft, target, context, 0), std::invalid_argument);
  EXPECT_THROW((void)specdec::measure_call_costs(draft, target, context, 8), std::invalid_argument);
  EXPECT_THROW((void)specdec::measure_call_costs(draft, target, context, 2, 0),
               std::invalid_argument);
  EXPECT_EQ(draft_calls, 0u);
  try {
    (void)specdec::measure_call_costs(draft, target, context, 8);
  } catch (const std::invalid_argument& error) {
    EXPECT_NE(std::string(error.what()).find("context of 7 tokens, max_rows = 8"),
              std::string::npos);
  }
  auto failing = [&](std::span<const token_t>, std::size_t) -> std::span<const float> {
    throw std::runtime_error("engine failed");
  };
  EXPECT_THROW((void)specdec::measure_call_costs(draft, failing, context, 2), std::runtime_error);
  EXPECT_THROW((void)specdec::CallCosts{}.goodput_options(), std::invalid_argument);
}

// One call delayed among a row count's first three (a scheduler slice on a shared machine) does
// not make the count look expensive: its first estimate is the median of three.
TEST(GoodputDraftLengthTest, ARowCountsFirstEstimateIsTheMedianOfThreeCalls) {
  specdec::detail::MeasuredCosts costs;
  costs.resize(4);
  costs.observe(1, 1e-4, 10e-3);  // 2 rows
  costs.observe(1, 1e-4, 40e-3);  // delayed
  costs.observe(1, 1e-4, 11e-3);
  std::vector<double> table(3);
  costs.fill_verify(table);
  EXPECT_DOUBLE_EQ(table[1], 11e-3);
}

// ---- exactness by enumeration --------------------------------------------------------------

enum class Mode { t1, t07_top_k, greedy };

SamplingParams params_for(Mode mode) {
  SamplingParams params;
  params.temperature = mode == Mode::greedy ? 0.0f : mode == Mode::t1 ? 1.0f : 0.7f;
  if (mode == Mode::t07_top_k) params.top_k = 3;
  return params;
}

ScriptedPair pair_for(Mode mode, std::uint64_t salt) {
  ScriptedPair pair;
  pair.target_model = {.salt = salt, .vocab = 4, .scale = 2.0};
  pair.perturbation = {.salt = salt * 31 + 7, .vocab = 4, .scale = 2.0};
  pair.noise = 0.9;
  pair.params = params_for(mode);
  return pair;
}

const Sequence kPrompt{1, 2};
constexpr std::size_t kLength = 4;
constexpr std::size_t kCap = 3;

template <class Policy, class Verifier, class Proposer>
double law_error(const Proposer& proposer, const Policy& policy, const Verifier& verifier,
                 const ScriptedPair& pair) {
  const Law law = specdec::testing::speculative_law(
      proposer, policy, verifier, pair.target<double>(), pair.params, kPrompt, kLength, kCap);
  const Law want =
      specdec::testing::target_law(pair.target<double>(), pair.params, kPrompt, kLength);
  return specdec::testing::total_variation(law, want);
}

/// Every policy, configured the way a user would, with its begin() called.
std::vector<std::pair<std::string, ConfiguredDraftLength>> all_policies() {
  std::vector<std::pair<std::string, ConfiguredDraftLength>> policies;
  for (DraftLengthKind kind : {DraftLengthKind::fixed, DraftLengthKind::schedule,
                               DraftLengthKind::confidence, DraftLengthKind::goodput}) {
    GenerationConfig config = config_with(kCap);
    config.draft_length_policy.kind = kind;
    config.draft_length_policy.schedule.initial_draft_length = 1;
    config.draft_length_policy.confidence.min_probability = 0.5;
    // Fixed costs that make the goodput policy change its mind along the paths.
    config.draft_length_policy.goodput = {
        .forgetting = 0.95, .probe_interval = 1, .draft_token_cost = 0.02, .verify_row_cost = 0.1};
    ConfiguredDraftLength policy;
    policy.begin(config);
    if (kind == DraftLengthKind::goodput) {
      // A history in which confident tokens were accepted and unsure ones rejected, so the
      // policy's decisions depend on this round's draft probabilities from the first round.
      for (int round = 0; round < 40; ++round) {
        const std::vector<double> probability{0.05 + 0.1 * (round % 10)};
        policy.observe(report(1, probability[0] >= 0.5 ? 1 : 0, probability));
      }
    }
    policies.emplace_back(std::to_string(static_cast<int>(kind)), policy);
  }
  return policies;
}

TEST(PolicyExactnessTest, EveryPolicyIsExactWithTokenAndBlockVerification) {
  for (Mode mode : {Mode::t1, Mode::t07_top_k, Mode::greedy}) {
    const ScriptedPair pair = pair_for(mode, 5);
    auto draft = pair.draft<double>();
    const specdec::ModelProposer<ScriptedPair::Draft<double>> proposer(draft);
    for (const auto& [name, policy] : all_policies()) {
      SCOPED_TRACE("policy " + name + " mode " + std::to_string(static_cast<int>(mode)));
      EXPECT_LT(law_error(proposer, policy, TokenVerifier{}, pair), kExact);
      if (mode != Mode::greedy) {
        EXPECT_LT(law_error(proposer, policy, BlockVerifier{}, pair), kExact);
      }
    }
  }
}

TEST(PolicyExactnessTest, AdaptivePoliciesReallyVaryTheDraftLength) {
  // The enumeration above would prove little if every policy drafted the full cap.
  const ScriptedPair pair = pair_for(Mode::t1, 5);
  auto draft = pair.draft<double>();
  const specdec::ModelProposer<ScriptedPair::Draft<double>> proposer(draft);
  for (const auto& [name, policy] : all_policies()) {
    if (name == "0") continue;  // fixed
    const auto round = specdec::testing::round_law(
        proposer, policy, TokenVerifier{}, pair.target<double>(), pair.params, kPrompt, kCap);
    std::set<std::size_t> lengths;
    for (const auto& [outcome, probability] : round.outcomes) {
      lengths.insert(outcome.token_probabilities.size());
    }
    SCOPED_TRACE("policy " + name);
    if (name == "1") {  // schedule starts at 1 and only grows after a round
      EXPECT_EQ(lengths, (std::set<std::size_t>{1}));
    } else {
      EXPECT_GE(lengths.size(), 2u);
    }
  }
}

// A policy that computes the target's rows for the drafted tokens and drafts on only while the
// target would have drafted the same token: its decisions use target information, but of the
// tokens already drafted, i.e. a function of them. Such a stopping rule keeps both verifiers
// exact (certified below); what a policy must never see is this round's verification coins,
// which do not exist before the proposal is complete.
const std::vector<token_t>* g_drafting_context = nullptr;
const ScriptedPair* g_peeked_pair = nullptr;

template <class Inner>
struct ContextExposingProposer {
  Inner inner;
  template <class Coins>
  specdec::Proposal<double> propose(specdec::DraftRequest& request, Coins& coins) {
    g_drafting_context = &request.context;
    return inner.propose(request, coins);
  }
};

struct TargetRowPeekingPolicy {
  int unused = 0;  // not an empty type: followed along every path
  bool draft_more(const DraftState& state) const {
    if (state.drafted == 0) return true;
    const std::vector<token_t>& context = *g_drafting_context;
    const std::vector<double> row =
        g_peeked_pair->target_rows(std::span<const token_t>(context.data(), context.size() - 1), 1);
    const auto best = static_cast<token_t>(std::max_element(row.begin(), row.end()) - row.begin());
    return context.back() == best;
  }
  void observe(const RoundReport& /*report*/) const {}
};

TEST(PolicyExactnessTest, APolicyReadingTargetRowsOfDraftedTokensIsStillExact) {
  for (Mode mode : {Mode::t1, Mode::t07_top_k}) {
    const ScriptedPair pair = pair_for(mode, 9);
    g_peeked_pair = &pair;
    auto draft = pair.draft<double>();
    using Inner = specdec::ModelProposer<ScriptedPair::Draft<double>>;
    const ContextExposingProposer<Inner> proposer{Inner(draft)};
    EXPECT_LT(law_error(proposer, TargetRowPeekingPolicy{}, TokenVerifier{}, pair), kExact);
    EXPECT_LT(law_error(proposer, TargetRowPeekingPolicy{}, BlockVerifier{}, pair), kExact);
  }
}

// Mutants: the proposal depends on a drawn token's value after the draw. The proposer draws
// x ~ q and then drops x (ends the proposal before it) when `drop` says so, reporting q as the
// law of the tokens it kept: llama.cpp's p_min rule (drop a token the draft gave less than
// p_min) applied to sampled drafts, and a rule that peeks at the target's p(x).
enum class Drop { unsure_token, target_dislikes };

struct DroppingProposer {
  const ScriptedPair* pair;
  Drop drop;
  std::vector<token_t> tokens = std::vector<token_t>(8);
  std::vector<double> weights = std::vector<double>(8 * 8);
  std::vector<double> normalizers = std::vector<double>(8, 1.0);

  template <class Coins>
  specdec::Proposal<double> propose(specdec::DraftRequest& request, Coins& coins) {
    const std::size_t vocab = pair->vocab();
    std::vector<double> filter_scratch;
    std::size_t n = 0;
    while (n < request.limit && request.draft_more(DraftState{n, request.limit, {}})) {
      const std::span<const token_t> context(request.context);
      const std::vector<double> row = pair->draft_logits(context);
      const specdec::TokenDistribution<double> q =
          specdec::process_logits(std::span<const double>(row), request.params, filter_scratch);
      std::vector<double> q_row(vocab);
      for (std::size_t v = 0; v < vocab; ++v) q_row[v] = q.probability(static_cast<token_t>(v));
      const token_t x = coins.draw(specdec::WeightsLaw<double>{q_row, {}});
      bool dropped = false;
      if (drop == Drop::unsure_token) {
        dropped = q_row[static_cast<std::size_t>(x)] < 0.4;
      } else {
        std::vector<double> p_row = pair->target_rows(context, 1);
        const specdec::TokenDistribution<double> p =
            specdec::process_logits(std::span<const double>(p_row), request.params, filter_scratch);
        dropped = p.probability(x) < q_row[static_cast<std::size_t>(x)];
      }
      if (dropped) break;
      std::copy(q_row.begin(), q_row.end(),
                weights.begin() + static_cast<std::ptrdiff_t>(n * vocab));
      tokens[n] = x;
      request.context.push_back(x);
      ++n;
    }
    specdec::Proposal<double> proposal;
    proposal.tokens = std::span<const token_t>(tokens.data(), n);
    proposal.q_weights = specdec::LogitsRows<double>(
        std::span<const double>(weights.data(), n * vocab), vocab, vocab);
    proposal.q_normalizers = std::span<const double>(normalizers.data(), n);
    return proposal;
  }
};

TEST(PolicyExactnessTest, DroppingADrawnTokenAfterTheFactIsCaught) {
  for (Drop drop : {Drop::unsure_token, Drop::target_dislikes}) {
    const ScriptedPair pair = pair_for(Mode::t1, 5);
    const DroppingProposer proposer{&pair, drop};
    SCOPED_TRACE(drop == Drop::unsure_token ? "unsure_token" : "target_dislikes");
    EXPECT_GT(law_error(proposer, specdec::StaticDraftLength{}, TokenVerifier{}, pair),
              kMutantMinError);
    EXPECT_GT(law_error(proposer, specdec::StaticDraftLength{}, BlockVerifier{}, pair),
              kMutantMinError);
  }
}

// ---- the full decoder ----------------------------------------------------------------------

/// The V = 32 pair of the decoder tests: the draft is the target plus `noise` times a
/// perturbation (0: identical, 50: unrelated).
ScriptedPair decoder_pair(double noise) {
  ScriptedPair pair;
  pair.target_model = {.salt = 3, .vocab = 32, .scale = 3.0};
  pair.perturbation = {.salt = 4, .vocab = 32, .scale = 3.0};
  pair.noise = noise;
  return pair;
}

GenerationConfig decoder_config(DraftLengthKind kind, std::size_t draft_length) {
  GenerationConfig config = config_with(draft_length);
  config.draft_length_policy.kind = kind;
  return config;
}

TEST(PolicyDecoderTest, GreedyOutputIsThePlainDecodersWithEveryPolicy) {
  for (double noise : {0.3, 1.5, 6.0}) {
    ScriptedPair pair;
    pair.target_model = {.salt = 21, .vocab = 32, .scale = 3.0};
    pair.perturbation = {.salt = 22, .vocab = 32, .scale = 3.0};
    pair.noise = noise;
    auto draft = pair.draft<float>();
    auto target = pair.target<float>();
    specdec::SpeculativeDecoder decoder(draft, target);
    specdec::AutoregressiveDecoder plain(target);
    for (DraftLengthKind kind : {DraftLengthKind::fixed, DraftLengthKind::schedule,
                                 DraftLengthKind::confidence, DraftLengthKind::goodput}) {
      for (std::size_t prompt_start = 0; prompt_start < 4; ++prompt_start) {
        GenerationConfig config = decoder_config(kind, 8);
        config.sampling.temperature = 0.0f;
        config.max_new_tokens = 150;
        const std::vector<token_t> prompt{static_cast<token_t>(prompt_start), 7};
        const auto speculative = decoder.generate(prompt, config);
        const auto reference = plain.generate(prompt, config);
        ASSERT_EQ(speculative.tokens, reference.tokens)
            << "kind " << static_cast<int>(kind) << " noise " << noise;
        ASSERT_EQ(speculative.logprobs, reference.logprobs);
        // The same policies drive the model-free decoders.
        specdec::NgramDecoder lookup(target, {.min_ngram = 1, .max_ngram = 4});
        specdec::NgramThenModelDecoder combined(draft, target, {.min_ngram = 1, .max_ngram = 4});
        ASSERT_EQ(lookup.generate(prompt, config).tokens, reference.tokens);
        ASSERT_EQ(combined.generate(prompt, config).tokens, reference.tokens);
      }
    }
  }
}

TEST(PolicyDecoderTest, GoodputFallsBackToPlainStepsWithAnUnrelatedDraftAndDraftsWithAGoodOne) {
  for (double noise : {0.0, 50.0}) {
    const ScriptedPair pair = decoder_pair(noise);
    auto draft = pair.draft<float>();
    auto target = pair.target<float>();
    specdec::SpeculativeDecoder decoder(draft, target);
    GenerationConfig config = decoder_config(DraftLengthKind::goodput, 8);
    config.draft_length_policy.goodput.draft_token_cost = 0.05;  // reproducible
    config.draft_length_policy.goodput.verify_row_cost = 0.05;
    config.sampling.temperature = 1.0f;
    config.max_new_tokens = 400;
    const auto result = decoder.generate(std::vector<token_t>{1, 2}, config);
    const std::vector<std::size_t> histogram = result.stats.draft_length_histogram();
    std::size_t rounds = 0;
    for (std::size_t count : histogram) rounds += count;
    EXPECT_EQ(rounds, result.stats.rounds);
    EXPECT_EQ(histogram[0], result.stats.plain_rounds());
    if (noise == 0.0) {  // identical draft: everything is accepted, draft the cap
      EXPECT_GT(histogram[8], result.stats.rounds * 8 / 10);
    } else {  // unrelated draft: mostly plain steps
      EXPECT_GT(result.stats.plain_rounds(), result.stats.rounds * 8 / 10);
    }
    // Fixed costs: no decision depends on a timing. The calibration by the draft's probability
    // carries over, so the same sequence of calls on a fresh decoder gives the same tokens...
    specdec::SpeculativeDecoder replay(draft, target);
    EXPECT_EQ(replay.generate(std::vector<token_t>{1, 2}, config).tokens, result.tokens);
    const auto second = decoder.generate(std::vector<token_t>{1, 2}, config).tokens;
    EXPECT_EQ(replay.generate(std::vector<token_t>{1, 2}, config).tokens, second);
    // ...and without keep_calibration every call is a function of its own arguments.
    config.draft_length_policy.goodput.keep_calibration = false;
    const auto alone = decoder.generate(std::vector<token_t>{1, 2}, config).tokens;
    EXPECT_EQ(decoder.generate(std::vector<token_t>{1, 2}, config).tokens, alone);
    EXPECT_EQ(replay.generate(std::vector<token_t>{1, 2}, config).tokens, alone);
  }
}

TEST(PolicyDecoderTest, MeasuredGoodputRecordsItsPredictions) {
  const ScriptedPair pair = decoder_pair(0.5);
  auto draft = pair.draft<float>();
  auto target = pair.target<float>();
  specdec::SpeculativeDecoder decoder(draft, target);
  GenerationConfig config = decoder_config(DraftLengthKind::goodput, 8);
  config.max_new_tokens = 200;
  const auto result = decoder.generate(std::vector<token_t>{1, 2}, config);
  EXPECT_GT(result.stats.predicted_rounds, result.stats.rounds / 2);
  EXPECT_GT(result.stats.predicted_tokens_per_second(), 0.0);
  EXPECT_GE(result.stats.predicted_tokens, static_cast<double>(result.stats.predicted_rounds));
}

// A huge K with a small budget is valid (the round length is min(K, budget - 1)); no policy
// may size anything by K itself (found by the fuzzer: goodput resized its tables to K + 1).
TEST(PolicyDecoderTest, AHugeDraftLengthWithASmallBudgetWorksWithEveryPolicy) {
  const ScriptedPair pair = decoder_pair(0.5);
  auto draft = pair.draft<float>();
  auto target = pair.target<float>();
  specdec::SpeculativeDecoder decoder(draft, target);
  specdec::AutoregressiveDecoder plain(target);
  for (DraftLengthKind kind : {DraftLengthKind::fixed, DraftLengthKind::schedule,
                               DraftLengthKind::confidence, DraftLengthKind::goodput}) {
    for (std::size_t huge : {std::size_t{1} << 40, std::numeric_limits<std::size_t>::max()}) {
      GenerationConfig config = decoder_config(kind, huge);
      config.sampling.temperature = 0.0f;
      config.max_new_tokens = 6;
      const std::vector<token_t> prompt{1, 2};
      const auto result = decoder.generate(prompt, config);
      EXPECT_EQ(result.tokens, plain.generate(prompt, config).tokens)
          << "kind " << static_cast<int>(kind);
    }
  }
}

// χ² of the first three emitted tokens of the full float decoder against the target's law
// (V = 6: 216 cells, 100k runs each; threshold p > 1e-4 for a correct decoder).
TEST(PolicyDecoderTest, AdaptivePoliciesPassChiSquareAtTemperatureOne) {
  ScriptedPair pair;
  pair.target_model = {.salt = 13, .vocab = 6, .scale = 2.0};
  pair.perturbation = {.salt = 14, .vocab = 6, .scale = 2.0};
  pair.noise = 0.8;
  pair.params.temperature = 1.0f;
  const Law want = specdec::testing::target_law(pair.target<double>(), pair.params, kPrompt, 3);
  std::vector<double> probabilities(216, 0.0);
  for (const auto& [sequence, probability] : want) {
    probabilities[static_cast<std::size_t>(sequence[0] * 36 + sequence[1] * 6 + sequence[2])] =
        probability;
  }
  auto draft = pair.draft<float>();
  auto target = pair.target<float>();
  for (DraftLengthKind kind :
       {DraftLengthKind::schedule, DraftLengthKind::confidence, DraftLengthKind::goodput}) {
    specdec::SpeculativeDecoder decoder(draft, target);
    GenerationConfig config = decoder_config(kind, 4);
    config.draft_length_policy.schedule.initial_draft_length = 2;
    config.sampling = pair.params;
    config.max_new_tokens = 3;
    config.logprobs = false;
    std::vector<std::uint64_t> counts(216, 0);
    for (std::uint64_t seed = 0; seed < 100000; ++seed) {
      config.seed = seed;
      const auto tokens = decoder.generate(kPrompt, config).tokens;
      ++counts[static_cast<std::size_t>(tokens[0] * 36 + tokens[1] * 6 + tokens[2])];
    }
    const auto fit = specdec::testing::chi_square_test(counts, probabilities);
    EXPECT_GT(fit.p_value, 1e-4) << "kind " << static_cast<int>(kind);
    EXPECT_EQ(fit.impossible, 0u);
  }
}

TEST(DecodeStatsTest, DraftLengthHistogramIsDerivedFromDraftedAt) {
  specdec::DecodeStats stats;
  stats.rounds = 10;
  stats.drafted_at = {7, 5, 5, 1};  // 3 plain, 2 of length 1, 0 of 2, 4 of 3, 1 of 4
  EXPECT_EQ(stats.draft_length_histogram(), (std::vector<std::size_t>{3, 2, 0, 4, 1}));
  EXPECT_EQ(stats.plain_rounds(), 3u);
  specdec::DecodeStats merged = stats + stats;
  EXPECT_EQ(merged.draft_length_histogram(), (std::vector<std::size_t>{6, 4, 0, 8, 2}));
}

}  // namespace

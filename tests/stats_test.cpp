// Tests for stats.hpp: each derived statistic against its definition.
#include "specdec/stats.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace {

specdec::DecodeStats example_stats() {
  specdec::DecodeStats stats;
  stats.rounds = 10;
  stats.drafted = 40;
  stats.accepted = 30;
  stats.emitted = 40;
  stats.rejecting_rounds = 6;
  stats.draft_calls = 40;
  stats.target_calls = 10;
  stats.draft_seconds = 0.4;   // 0.01 s per draft call
  stats.target_seconds = 1.0;  // 0.1 s per target call
  return stats;
}

TEST(StatsTest, DerivedStatisticsFollowTheirDefinitions) {
  const auto stats = example_stats();
  EXPECT_DOUBLE_EQ(stats.acceptance_rate(), 30.0 / 40.0);
  EXPECT_DOUBLE_EQ(stats.alpha_hat(), 30.0 / 36.0);
  EXPECT_DOUBLE_EQ(stats.tokens_per_round(), 4.0);
  EXPECT_DOUBLE_EQ(stats.cost_ratio(), 0.1);
}

TEST(StatsTest, PredictedSpeedupFormula) {
  const double a = 0.8;
  const double c = 0.1;
  const std::size_t k = 4;
  const double expected = (1 - std::pow(a, 5)) / ((1 - a) * (k * c + 1));
  EXPECT_DOUBLE_EQ(specdec::predicted_speedup(a, k, c), expected);
  // a = 1: every draft accepted, K + 1 tokens per round.
  EXPECT_DOUBLE_EQ(specdec::predicted_speedup(1.0, k, c), 5.0 / 1.4);
  // a = 0: one token per round at the price of K draft calls.
  EXPECT_DOUBLE_EQ(specdec::predicted_speedup(0.0, k, c), 1.0 / 1.4);
  // Free perfect drafts give K + 1.
  EXPECT_DOUBLE_EQ(specdec::predicted_speedup(1.0, k, 0.0), 5.0);
  const auto stats = example_stats();
  EXPECT_DOUBLE_EQ(stats.predicted_speedup(k),
                   specdec::predicted_speedup(stats.alpha_hat(), k, stats.cost_ratio()));
}

TEST(StatsTest, VerifyCostAwarePrediction) {
  // A CPU target whose 5-row call costs 1.6 one-row calls: alpha 0.8, K 4, c 0.01.
  const double flat = specdec::predicted_speedup(0.8, 4, 0.01);
  EXPECT_DOUBLE_EQ(specdec::predicted_speedup(0.8, 4, 0.01, 1.6), flat / 1.6);
  EXPECT_DOUBLE_EQ(specdec::predicted_speedup(0.8, 4, 0.01, 1.0), flat);
  EXPECT_EQ(specdec::predicted_speedup(0.8, 4, 0.01, 0.0), 0.0);  // meaningless ratio
  EXPECT_EQ(specdec::predicted_speedup(0.8, 4, 0.01, std::nan("")), 0.0);
  const auto stats = example_stats();
  EXPECT_DOUBLE_EQ(stats.predicted_speedup(4, 2.0), stats.predicted_speedup(4) / 2.0);
}

TEST(StatsTest, EmptyStatsGiveZeroNotNaN) {
  const specdec::DecodeStats stats;
  EXPECT_EQ(stats.acceptance_rate(), 0.0);
  EXPECT_EQ(stats.alpha_hat(), 0.0);
  EXPECT_EQ(stats.tokens_per_round(), 0.0);
  EXPECT_EQ(stats.cost_ratio(), 0.0);
  EXPECT_FALSE(std::isnan(stats.predicted_speedup(4)));
}

TEST(StatsTest, AlphaHatIsUnbiasedByTruncatedRounds) {
  // Two rounds accept everything (truncated by K, no failure observed), one rejects at once.
  specdec::DecodeStats stats;
  stats.drafted = 9;
  stats.accepted = 8;
  stats.rejecting_rounds = 1;
  EXPECT_DOUBLE_EQ(stats.alpha_hat(), 8.0 / 9.0);
}

// Merged statistics sum every counter and time, and per-position counts elementwise (growing
// to the longer), so the derived figures of the merge are those of the pooled runs.
TEST(StatsTest, MergedStatsPoolTheRuns) {
  specdec::DecodeStats a = example_stats();
  a.drafted_at = {10, 10, 10, 10};
  a.accepted_at = {9, 8, 7, 6};
  a.total_seconds = 1.5;
  a.library_seconds = 0.1;
  specdec::DecodeStats b;
  b.rounds = 5;
  b.drafted = 10;
  b.accepted = 2;
  b.emitted = 7;
  b.rejecting_rounds = 5;
  b.draft_calls = 10;
  b.target_calls = 5;
  b.draft_seconds = 0.3;
  b.target_seconds = 0.2;
  b.total_seconds = 0.6;
  b.library_seconds = 0.1;
  b.drafted_at = {5, 5};
  b.accepted_at = {2, 0};
  a.drafted_at_rank = {30, 10};  // tree rounds: drafted / accepted nodes by sibling rank
  a.accepted_at_rank = {20, 3};
  b.drafted_at_rank = {10};
  b.accepted_at_rank = {9};

  const specdec::DecodeStats sum = a + b;
  EXPECT_EQ(sum.rounds, 15u);
  EXPECT_EQ(sum.drafted, 50u);
  EXPECT_EQ(sum.accepted, 32u);
  EXPECT_EQ(sum.emitted, 47u);
  EXPECT_EQ(sum.rejecting_rounds, 11u);
  EXPECT_EQ(sum.draft_calls, 50u);
  EXPECT_EQ(sum.target_calls, 15u);
  EXPECT_DOUBLE_EQ(sum.draft_seconds, 0.7);
  EXPECT_DOUBLE_EQ(sum.target_seconds, 1.2);
  EXPECT_DOUBLE_EQ(sum.total_seconds, 2.1);
  EXPECT_DOUBLE_EQ(sum.library_seconds, 0.2);
  EXPECT_EQ(sum.drafted_at, (std::vector<std::size_t>{15, 15, 10, 10}));
  EXPECT_EQ(sum.accepted_at, (std::vector<std::size_t>{11, 8, 7, 6}));
  EXPECT_EQ(sum.drafted_at_rank, (std::vector<std::size_t>{40, 10}));
  EXPECT_EQ(sum.accepted_at_rank, (std::vector<std::size_t>{29, 3}));
  // Derived figures of the pooled counters.
  EXPECT_DOUBLE_EQ(sum.acceptance_rate(), 32.0 / 50.0);
  EXPECT_DOUBLE_EQ(sum.alpha_hat(), 32.0 / 43.0);
  EXPECT_DOUBLE_EQ(sum.tokens_per_round(), 47.0 / 15.0);
  EXPECT_DOUBLE_EQ(sum.cost_ratio(), (0.7 / 50.0) / (1.2 / 15.0));
  EXPECT_DOUBLE_EQ(sum.predicted_speedup(4),
                   specdec::predicted_speedup(32.0 / 43.0, 4, (0.7 / 50.0) / (1.2 / 15.0)));

  // Order does not matter; the shorter side grows; += is +.
  const specdec::DecodeStats other_order = b + a;
  EXPECT_EQ(other_order.drafted_at, sum.drafted_at);
  EXPECT_EQ(other_order.accepted_at, sum.accepted_at);
  specdec::DecodeStats accumulated;
  accumulated += a;
  accumulated += b;
  EXPECT_EQ(accumulated.rounds, sum.rounds);
  EXPECT_EQ(accumulated.drafted_at, sum.drafted_at);
  EXPECT_DOUBLE_EQ(accumulated.alpha_hat(), sum.alpha_hat());
  // Adding empty stats changes nothing.
  const specdec::DecodeStats same = a + specdec::DecodeStats{};
  EXPECT_EQ(same.drafted_at, a.drafted_at);
  EXPECT_DOUBLE_EQ(same.alpha_hat(), a.alpha_hat());
}

}  // namespace

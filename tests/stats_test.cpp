// Tests for stats.hpp: each derived statistic against its definition.
#include "specdec/stats.hpp"

#include <gtest/gtest.h>

#include <cmath>

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

}  // namespace

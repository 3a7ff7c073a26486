// Tests for sampling.hpp: parameter validation, the filter thresholds against sort-based
// references, TokenDistribution, inverse-CDF sampling, the logits processor hook.
#include "specdec/sampling.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

using specdec::token_t;

std::vector<double> random_logits(std::size_t size, unsigned seed, double scale = 2.0) {
  std::mt19937 gen(seed);
  std::normal_distribution<double> normal(0.0, scale);
  std::vector<double> logits(size);
  for (auto& x : logits) x = normal(gen);
  return logits;
}

void expect_invalid(const specdec::SamplingParams& params, const std::string& field) {
  try {
    params.validate();
    ADD_FAILURE() << "expected std::invalid_argument for " << field;
  } catch (const std::invalid_argument& error) {
    const std::string message = error.what();
    EXPECT_EQ(message.rfind("specdec: ", 0), 0u) << message;
    EXPECT_NE(message.find(field), std::string::npos) << message;
  }
}

TEST(SamplingParamsTest, ValidateNamesTheBadField) {
  specdec::SamplingParams params;
  EXPECT_NO_THROW(params.validate());
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  for (float t : {-0.5f, nan, inf}) {
    auto bad = params;
    bad.temperature = t;
    expect_invalid(bad, "temperature");
  }
  auto bad_k = params;
  bad_k.top_k = -1;
  expect_invalid(bad_k, "top_k");
  for (float p : {0.0f, -0.1f, 1.5f, nan}) {
    auto bad = params;
    bad.top_p = p;
    expect_invalid(bad, "top_p");
  }
  for (float m : {-0.1f, 1.0f, nan}) {
    auto bad = params;
    bad.min_p = m;
    expect_invalid(bad, "min_p");
  }
  auto greedy = params;
  greedy.temperature = 0.0f;
  EXPECT_NO_THROW(greedy.validate());
  EXPECT_TRUE(greedy.greedy());
}

// Reference processed distribution: sort, then apply top-k, top-p, min-p literally.
std::vector<double> reference_distribution(const std::vector<double>& logits,
                                           const specdec::SamplingParams& params) {
  const double t = params.temperature;
  const std::size_t v = logits.size();
  std::vector<std::size_t> order(v);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](auto a, auto b) { return logits[a] > logits[b]; });
  std::vector<bool> kept(v, true);
  if (params.top_k > 0 && static_cast<std::size_t>(params.top_k) < v) {
    const double kth = logits[order[static_cast<std::size_t>(params.top_k) - 1]];
    for (std::size_t i = 0; i < v; ++i) kept[i] = logits[i] >= kth;  // ties kept
  }
  const double max = logits[order[0]];
  auto mass = [&] {
    double z = 0;
    for (std::size_t i = 0; i < v; ++i) z += kept[i] ? std::exp((logits[i] - max) / t) : 0;
    return z;
  };
  if (params.top_p < 1.0f) {
    const double z = mass();
    double cumulative = 0;
    double boundary = -INFINITY;
    for (auto i : order) {
      if (!kept[i]) continue;
      cumulative += std::exp((logits[i] - max) / t) / z;
      if (cumulative >= params.top_p) {
        boundary = logits[i];
        break;
      }
    }
    for (std::size_t i = 0; i < v; ++i) kept[i] = kept[i] && logits[i] >= boundary;
  }
  if (params.min_p > 0.0f) {
    for (std::size_t i = 0; i < v; ++i) {
      kept[i] = kept[i] && std::exp((logits[i] - max) / t) >= params.min_p;
    }
  }
  const double z = mass();
  std::vector<double> p(v);
  for (std::size_t i = 0; i < v; ++i) p[i] = kept[i] ? std::exp((logits[i] - max) / t) / z : 0;
  return p;
}

struct FilterCase {
  float temperature;
  int top_k;
  float top_p;
  float min_p;
};

class FilterTest : public ::testing::TestWithParam<FilterCase> {};

TEST_P(FilterTest, MatchesSortBasedReference) {
  const FilterCase c = GetParam();
  specdec::SamplingParams params;
  params.temperature = c.temperature;
  params.top_k = c.top_k;
  params.top_p = c.top_p;
  params.min_p = c.min_p;
  std::vector<double> scratch;
  for (std::size_t size : {5u, 64u, 3000u}) {
    for (unsigned seed = 0; seed < 20; ++seed) {
      const auto logits = random_logits(size, seed * 31 + static_cast<unsigned>(size));
      const auto expected = reference_distribution(logits, params);
      const auto dist = specdec::process_logits<double>(logits, params, scratch);
      std::vector<double> weights(size);
      const auto stored = specdec::process_logits<double>(logits, params, scratch, weights);
      EXPECT_NEAR(stored.normalizer, dist.normalizer, 1e-12 * dist.normalizer);
      double total = 0;
      for (std::size_t i = 0; i < size; ++i) {
        const auto token = static_cast<token_t>(i);
        ASSERT_NEAR(dist.probability(token), expected[i], 1e-12) << "size " << size << " i " << i;
        EXPECT_NEAR(weights[i] / stored.normalizer, expected[i], 1e-12);
        if (expected[i] > 0) {
          EXPECT_NEAR(dist.log_probability(token), std::log(expected[i]), 1e-10);
        } else {
          EXPECT_EQ(dist.log_probability(token), -std::numeric_limits<double>::infinity());
        }
        total += dist.probability(token);
      }
      EXPECT_NEAR(total, 1.0, 1e-12);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Filters, FilterTest,
    ::testing::Values(FilterCase{1.0f, 0, 1.0f, 0.0f}, FilterCase{0.7f, 0, 1.0f, 0.0f},
                      FilterCase{1.0f, 3, 1.0f, 0.0f}, FilterCase{1.0f, 0, 0.9f, 0.0f},
                      FilterCase{1.3f, 0, 0.5f, 0.0f}, FilterCase{1.0f, 0, 1.0f, 0.1f},
                      FilterCase{0.8f, 40, 0.95f, 0.05f}, FilterCase{2.0f, 10, 0.3f, 0.0f}));

TEST(SamplingTest, TopKKeepsTiesAtTheBoundary) {
  const std::vector<double> logits{1, 3, 2, 2, 0};
  specdec::SamplingParams params;
  params.top_k = 2;  // 3 and 2 are the two largest; both tokens equal to 2 survive
  std::vector<double> scratch;
  const auto dist = specdec::process_logits<double>(logits, params, scratch);
  EXPECT_EQ(dist.threshold, 2.0);
  EXPECT_FALSE(dist.kept(0));
  EXPECT_TRUE(dist.kept(2));
  EXPECT_TRUE(dist.kept(3));
  EXPECT_EQ(dist.probability(4), 0.0);
}

TEST(SamplingTest, TopPOnFlatDistributionKeepsEnoughMass) {
  const std::vector<double> logits(1000, 0.0);
  specdec::SamplingParams params;
  params.top_p = 0.5f;
  std::vector<double> scratch;
  const auto dist = specdec::process_logits<double>(logits, params, scratch);
  // All tied: top-p cannot split a tie, everything survives.
  EXPECT_NEAR(dist.probability(999), 1e-3, 1e-15);
}

TEST(SamplingTest, MinPThresholdIsRelativeToTheMax) {
  specdec::SamplingParams params;
  params.min_p = 0.25f;
  params.temperature = 2.0f;
  const std::vector<double> logits{0.0, -2.0, -2.8, -2.7};  // p/p_max = e^{-1}, e^{-1.4}, e^{-1.35}
  std::vector<double> scratch;
  const auto dist = specdec::process_logits<double>(logits, params, scratch);
  EXPECT_TRUE(dist.kept(1));   // e^{-1} = 0.37 >= 0.25
  EXPECT_FALSE(dist.kept(2));  // e^{-1.4} = 0.247 < 0.25
  EXPECT_TRUE(dist.kept(3));   // e^{-1.35} = 0.259
}

TEST(SamplingTest, InverseCdfFollowsTheCoin) {
  const std::vector<double> logits{std::log(0.1), std::log(0.2), -INFINITY, std::log(0.7)};
  specdec::SamplingParams params;
  std::vector<double> scratch, weights(4);
  const auto dist = specdec::process_logits<double>(logits, params, scratch);
  EXPECT_EQ(specdec::sample(dist, 0.0, std::span<double>(weights)), 0);
  EXPECT_EQ(specdec::sample(dist, 0.0999, std::span<double>(weights)), 0);
  EXPECT_EQ(specdec::sample(dist, 0.1001, std::span<double>(weights)), 1);
  EXPECT_EQ(specdec::sample(dist, 0.2999, std::span<double>(weights)), 1);
  EXPECT_EQ(specdec::sample(dist, 0.3001, std::span<double>(weights)), 3);
  EXPECT_EQ(specdec::sample(dist, 1.0 - 0x1.0p-53, std::span<double>(weights)), 3);
}

TEST(SamplingTest, CoinGridReproducesTheDistribution) {
  // Stratified coins (i + 0.5) / N: the sampled frequencies equal p to within 1/N.
  const auto logits = random_logits(3000, 5, 1.0);
  specdec::SamplingParams params;
  params.top_p = 0.8f;
  std::vector<double> scratch, weights(logits.size());
  const auto dist = specdec::process_logits<double>(logits, params, scratch);
  constexpr int kCoins = 200000;
  std::vector<int> counts(logits.size());
  for (int i = 0; i < kCoins; ++i) {
    const token_t token = specdec::sample(dist, (i + 0.5) / kCoins, std::span<double>(weights));
    ASSERT_GT(dist.probability(token), 0.0);
    ++counts[static_cast<std::size_t>(token)];
  }
  for (std::size_t i = 0; i < logits.size(); ++i) {
    EXPECT_NEAR(counts[i] / double(kCoins), dist.probability(static_cast<token_t>(i)),
                1.0 / kCoins + 1e-12);
  }
}

TEST(SamplingTest, NeverSamplesAFilteredToken) {
  const auto logits = random_logits(5000, 9);
  specdec::SamplingParams params;
  params.top_k = 5;
  std::vector<float> logits_f(logits.begin(), logits.end());
  std::vector<float> scratch, weights(logits_f.size());
  const auto dist = specdec::process_logits<float>(logits_f, params, scratch, weights);
  for (double coin : {0.0, 0.5, 0.999999, 1.0 - 0x1.0p-53}) {
    const token_t token = specdec::sample_from_weights<float>(weights, dist.normalizer, coin);
    EXPECT_TRUE(dist.kept(token));
    EXPECT_GT(weights[static_cast<std::size_t>(token)], 0.0f);
  }
}

TEST(SamplingTest, BadRowsThrowDomainError) {
  specdec::SamplingParams params;
  std::vector<float> scratch;
  const std::vector<float> nan_row{0.0f, std::numeric_limits<float>::quiet_NaN(), 1.0f};
  const std::vector<float> inf_row{0.0f, std::numeric_limits<float>::infinity()};
  const std::vector<float> dead_row(4, -std::numeric_limits<float>::infinity());
  EXPECT_THROW((void)specdec::process_logits<float>(nan_row, params, scratch), std::domain_error);
  EXPECT_THROW((void)specdec::process_logits<float>(inf_row, params, scratch), std::domain_error);
  EXPECT_THROW((void)specdec::process_logits<float>(dead_row, params, scratch), std::domain_error);
  params.temperature = 0.0f;
  const std::vector<float> fine{0.0f, 1.0f};
  EXPECT_THROW((void)specdec::process_logits<float>(fine, params, scratch), std::invalid_argument);
}

TEST(SamplingTest, LogitsProcessorIsZeroCopyWhenAbsent) {
  specdec::SamplingParams params;
  const std::vector<float> logits{1.0f, 2.0f, 3.0f};
  const std::vector<token_t> context{1, 2};
  std::vector<float> scratch;
  const auto same = specdec::apply_logits_processor(params, context, logits, scratch);
  EXPECT_EQ(same.data(), logits.data());
  EXPECT_TRUE(scratch.empty());

  std::size_t seen_context = 0;
  params.logits_processor = [&](std::span<const token_t> ctx, std::span<float> row) {
    seen_context = ctx.size();
    row[2] = -std::numeric_limits<float>::infinity();
  };
  const auto processed = specdec::apply_logits_processor(params, context, logits, scratch);
  EXPECT_EQ(seen_context, 2u);
  EXPECT_NE(processed.data(), logits.data());
  EXPECT_EQ(processed[1], 2.0f);
  EXPECT_EQ(processed[2], -std::numeric_limits<float>::infinity());
  EXPECT_EQ(logits[2], 3.0f);  // the model's memory is untouched
}

}  // namespace

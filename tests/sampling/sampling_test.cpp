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
      // The stored weights may share a reference logit below the max (single-pass draft
      // path); on the max's scale their sum is the target path's normalizer.
      const double stored_on_max_scale =
          stored.normalizer * std::exp(specdec::detail::reference_shift(
                                  stored.max_logit, dist.max_logit, stored.inv_temperature));
      EXPECT_NEAR(stored_on_max_scale, dist.normalizer, 1e-12 * dist.normalizer);
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

// ---- top-p against a brute-force sort, on many rows -------------------------------------------

// The rows the top-p search is checked on: easy (peaked) and hard (heavy tails, where the
// search narrows its bracket several times), ties everywhere (quantised logits, a flat tail
// the narrowing cannot split), -inf tokens.
std::vector<std::vector<double>> top_p_rows() {
  std::vector<std::vector<double>> rows;
  std::mt19937 gen(77);
  std::normal_distribution<double> normal(0.0, 1.0);
  for (std::size_t size : {2u, 10u, 100u, 3000u, 40000u}) {
    for (double sigma : {0.5, 2.0, 5.0}) {
      std::vector<double> row(size);
      for (double& x : row) x = sigma * normal(gen);
      rows.push_back(row);
      std::vector<double> quantised = row;  // ties
      for (double& x : quantised) x = std::round(x * 4.0) / 4.0;
      rows.push_back(quantised);
      std::vector<double> peaked = row;  // a few tokens far above a heavy tail
      for (std::size_t i = 0; i < std::min<std::size_t>(size, 4); ++i) {
        peaked[(i * 7919) % size] = std::log(static_cast<double>(size)) + 2.0 - 1.5 * i;
      }
      rows.push_back(peaked);
    }
  }
  {
    // A huge flat tail tied at one value below a few peaks: the boundary falls in a tie group
    // of 30000 tokens that no level can split.
    std::vector<double> row(30000, 0.0);
    row[5] = 9.0;
    row[17] = 8.5;
    rows.push_back(row);
  }
  {
    std::vector<double> row(20000);
    for (double& x : row) x = 2.0 * normal(gen);
    for (std::size_t i = 0; i < row.size(); i += 5) row[i] = -INFINITY;
    rows.push_back(row);
  }
  {
    // V = 128256 like the benchmark rows: Gaussian background, peaks taking part of the mass.
    std::vector<double> row(128256);
    for (double& x : row) x = 2.0 * normal(gen);
    const double tail = std::log(static_cast<double>(row.size())) + 2.0;
    row[1000] = tail + 1.0;
    row[90000] = tail - 0.5;
    rows.push_back(row);
  }
  return rows;
}

struct BruteForceTopP {
  double threshold;  // top-k then top-p
  double kept_mass;  // sum of exp((x - max) / T) over x >= threshold
  double margin;     // distance of top_p Z from the nearest cumulative mass, relative to Z
};

BruteForceTopP brute_force_top_p(const std::vector<double>& logits, double temperature, int top_k,
                                 double top_p) {
  std::vector<double> sorted = logits;
  std::sort(sorted.begin(), sorted.end(), std::greater<double>());
  const double max = sorted[0];
  double floor = -INFINITY;
  if (top_k > 0 && static_cast<std::size_t>(top_k) < sorted.size()) floor = sorted[top_k - 1];
  double z = 0;
  for (double x : sorted) z += x >= floor ? std::exp((x - max) / temperature) : 0.0;
  const double target = top_p * z;
  double cumulative = 0;
  for (std::size_t i = 0; i < sorted.size() && sorted[i] >= floor;) {
    // One tie group at a time: a group is never split.
    std::size_t end = i;
    double group = 0;
    while (end < sorted.size() && sorted[end] == sorted[i]) {
      group += std::exp((sorted[end] - max) / temperature);
      ++end;
    }
    if (cumulative + group >= target) {
      const double margin = std::min(target - cumulative, cumulative + group - target) / z;
      return {sorted[i], cumulative + group, margin};
    }
    cumulative += group;
    i = end;
  }
  return {floor, z, 1.0};
}

TEST(TopPThreshold, MatchesABruteForceSortOnManyRows) {
  std::vector<double> scratch;
  std::size_t checked = 0;
  std::size_t too_close_to_call = 0;
  for (const std::vector<double>& row : top_p_rows()) {
    for (const float top_p : {0.1f, 0.5f, 0.63f, 0.9f, 0.95f, 0.999f}) {
      for (const int top_k : {0, 1, 5, 50}) {
        for (const float temperature : {1.0f, 0.6f}) {
          specdec::SamplingParams params;
          params.temperature = temperature;
          params.top_p = top_p;
          params.top_k = top_k;
          const BruteForceTopP expected =
              brute_force_top_p(row, static_cast<double>(temperature), top_k, top_p);
          if (expected.margin < 1e-9) {
            ++too_close_to_call;  // top_p Z equals a cumulative mass to rounding: either is right
            continue;
          }
          const auto dist = specdec::process_logits<double>(row, params, scratch);
          ASSERT_EQ(dist.threshold, expected.threshold)
              << "V " << row.size() << " top_p " << top_p << " top_k " << top_k << " T "
              << temperature;
          EXPECT_NEAR(dist.normalizer, expected.kept_mass, 1e-12 * expected.kept_mass);
          // The draft path (stored weights) keeps the same tokens with the same normalizer.
          std::vector<double> weights(row.size());
          std::vector<double> block_sums(specdec::weight_block_count(row.size()));
          const auto stored = specdec::process_logits<double>(
              row, params, scratch, std::span<double>(weights), std::span<double>(block_sums));
          ASSERT_EQ(stored.threshold, expected.threshold);
          EXPECT_NEAR(stored.normalizer, expected.kept_mass, 1e-12 * expected.kept_mass);
          double total = 0;
          for (std::size_t i = 0; i < row.size(); ++i) {
            if (row[i] < expected.threshold) {
              ASSERT_EQ(weights[i], 0.0) << i;
            }
            total += weights[i];
          }
          EXPECT_NEAR(total, stored.normalizer, 1e-10 * total);
          // The public filter_threshold agrees.
          EXPECT_EQ(specdec::filter_threshold<double>(row, dist.max_logit, dist.inv_temperature,
                                                      params, scratch),
                    expected.threshold);
          ++checked;
        }
      }
    }
  }
  EXPECT_GT(checked, 1000u);
  EXPECT_LT(too_close_to_call, checked / 100);
}

TEST(TopPThreshold, FloatRowsKeepTheNucleusUpToRounding) {
  // Float rows sum float weights: the boundary is exact up to ~1e-6 of Z, so check the
  // defining property with that slack instead of equality with a double reference.
  std::vector<float> scratch;
  for (const std::vector<double>& row_d : top_p_rows()) {
    const std::vector<float> row(row_d.begin(), row_d.end());
    for (const float top_p : {0.5f, 0.9f, 0.95f}) {
      for (const int top_k : {0, 50}) {
        specdec::SamplingParams params;
        params.top_p = top_p;
        params.top_k = top_k;
        const auto dist = specdec::process_logits<float>(row, params, scratch);
        const double b = dist.threshold;
        ASSERT_NE(std::find(row.begin(), row.end(), dist.threshold), row.end());
        std::vector<float> sorted = row;
        std::sort(sorted.begin(), sorted.end(), std::greater<float>());
        const double floor = top_k > 0 && static_cast<std::size_t>(top_k) < row.size()
                                 ? sorted[top_k - 1]
                                 : -INFINITY;
        double z = 0, at_or_above = 0, above = 0;
        for (float x : row) {
          const double w = x >= floor ? std::exp(static_cast<double>(x) - sorted[0]) : 0.0;
          z += w;
          if (x >= b) at_or_above += w;
          if (x > b) above += w;
        }
        EXPECT_GE(at_or_above, top_p * z * (1 - 1e-5));  // enough mass kept
        EXPECT_LT(above, top_p * z * (1 + 1e-5));        // and no tie group too many
        EXPECT_NEAR(dist.normalizer, at_or_above, 1e-5 * at_or_above);
      }
    }
  }
}

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

// sample() sums the weights per block without storing them and recomputes one block: it must
// pick exactly the token the inverse CDF over the stored weights picks, for every coin.
TEST(SamplingTest, SampleIsTheInverseCdfOfTheStoredWeights) {
  for (const std::size_t size : {3u, 1024u, 5000u, 40000u}) {
    for (const float top_p : {1.0f, 0.9f}) {
      const auto logits_d = random_logits(size, static_cast<unsigned>(size), 2.0);
      std::vector<float> logits(logits_d.begin(), logits_d.end());
      logits[size / 2] = -INFINITY;  // a banned token
      specdec::SamplingParams params;
      params.top_p = top_p;
      params.temperature = 0.8f;
      std::vector<float> scratch, weights(size), sample_scratch(size);
      const auto dist = specdec::process_logits<float>(logits, params, scratch);
      const double total = specdec::detail::store_weights<float>(
          logits, dist.max_logit, dist.inv_temperature, dist.threshold, std::span<float>(weights));
      for (int i = 0; i < 3000; ++i) {
        const double coin = i == 0 ? 1.0 - 0x1.0p-53 : (i + 0.5) / 3000.0;
        const token_t expected =
            specdec::detail::inverse_cdf(std::span<const float>(weights), total, coin);
        const token_t got = specdec::sample(dist, coin, std::span<float>(sample_scratch));
        ASSERT_EQ(got, expected) << "size " << size << " coin " << coin;
        ASSERT_GT(dist.probability(got), 0.0f);
      }
    }
  }
}

// Recorded block sums (process_logits with BlockSumBuffers, the decoder's target rows): sample()
// skips its summing pass and moves the recorded sums onto the max. Every token must be the exact
// inverse CDF's answer (double-precision softmax) up to a 1e-5 relative slack around its CDF
// interval, on rows whose running max climbs (older blocks recorded against smaller references,
// at T = 1 and at T = 0.05, where a block is e^200 below the next), with banned tokens and a
// whole -inf block; a wrong rescale (sign, or none) moves whole blocks of mass and fails.
TEST(SamplingTest, RecordedBlockSumsSampleTheExactInverseCdf) {
  for (const float temperature : {1.0f, 0.05f}) {
    for (const std::size_t size : {5u, 1024u, 4100u, 40000u}) {
      const auto noise = random_logits(size, static_cast<unsigned>(size) + 1, 1.0);
      std::vector<float> logits(size);
      for (std::size_t i = 0; i < size; ++i) {
        // Climbs by 1.5 per block: every block raises the running max.
        logits[i] = static_cast<float>(noise[i] + 1.5 * static_cast<double>(i / 1024));
      }
      logits[size / 3] = -INFINITY;
      if (size > 2048) std::fill(logits.begin() + 1024, logits.begin() + 2048, -INFINITY);
      specdec::SamplingParams params;
      params.temperature = temperature;
      std::vector<float> scratch, sample_scratch(size);
      const std::size_t blocks = specdec::weight_block_count(size);
      std::vector<float> sums(blocks), references(blocks);
      const auto dist = specdec::process_logits<float>(
          logits, params, scratch, specdec::BlockSumBuffers<float>{sums, references});
      ASSERT_EQ(dist.block_sums.size(), blocks);
      // Exact CDF in double.
      double max = -INFINITY;
      for (float x : logits) max = std::max(max, static_cast<double>(x));
      std::vector<double> cdf(size + 1, 0.0);
      for (std::size_t i = 0; i < size; ++i) {
        cdf[i + 1] = cdf[i] + std::exp((static_cast<double>(logits[i]) - max) / temperature);
      }
      for (int i = 0; i < 4000; ++i) {
        const double coin = i == 0 ? 1.0 - 0x1.0p-53 : (i + 0.5) / 4000.0;
        const token_t got = specdec::sample(dist, coin, std::span<float>(sample_scratch));
        ASSERT_GE(got, 0);
        ASSERT_GT(dist.probability(got), 0.0f) << "token " << got;
        const double target = coin * cdf[size];
        const auto t = static_cast<std::size_t>(got);
        EXPECT_LE(cdf[t], target * (1 + 1e-5) + 1e-300)
            << "T " << temperature << " size " << size << " coin " << coin;
        EXPECT_GE(cdf[t + 1], target * (1 - 1e-5))
            << "T " << temperature << " size " << size << " coin " << coin;
      }
      // Filtered rows record nothing (their thresholds need the max first).
      params.top_k = 3;
      const auto filtered = specdec::process_logits<float>(
          logits, params, scratch, specdec::BlockSumBuffers<float>{sums, references});
      EXPECT_TRUE(filtered.block_sums.empty());
    }
  }
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

// The smallest usable temperature: at T = kMinTemperature the row still normalises (a point
// mass at the argmax for well-separated logits up to 1e8 in magnitude); below it validate() and
// process_logits reject T by name instead of failing later on weights that overflowed to NaN.
TEST(SamplingTest, TemperatureBoundary) {
  constexpr float kMin = specdec::SamplingParams::kMinTemperature;
  EXPECT_EQ(kMin, 1e-30f);
  std::vector<float> scratch;
  std::vector<float> weights(4);
  std::vector<float> block_sums(specdec::weight_block_count(4));
  for (const float scale : {1.0f, 1e8f}) {
    SCOPED_TRACE(scale);
    // Max logit 0: the exponents are x / T exactly, on every build (see below for others).
    const std::vector<float> logits{-1.0f * scale, -0.5f * scale, 0.0f, -0.25f * scale};
    specdec::SamplingParams params;
    params.temperature = kMin;
    EXPECT_NO_THROW(params.validate());
    const auto p = specdec::process_logits<float>(logits, params, scratch);
    EXPECT_TRUE(std::isfinite(p.normalizer));
    EXPECT_EQ(p.probability(2), 1.0f);
    EXPECT_EQ(p.probability(1), 0.0f);
    std::vector<float> sample_scratch(4);
    EXPECT_EQ(specdec::sample(p, 0.999, std::span<float>(sample_scratch)), 2);
    const auto q = specdec::process_logits<float>(logits, params, scratch, weights, block_sums);
    EXPECT_TRUE(std::isfinite(q.normalizer));
    EXPECT_EQ(specdec::sample_from_weights<float>(weights, block_sums, 0.999), 2);
  }
  // Max logit 1.3: with FMA exponents (native builds) the rounding of max / T = 1.3e30 is a factor
  // that underflows, and that is reported as a temperature too small for the logits, naming
  // both; without FMA the row is a point mass at the argmax.
  {
    const std::vector<float> logits{-1.0f, 0.5f, 1.3f, -0.25f};
    specdec::SamplingParams params;
    params.temperature = kMin;
    for (const bool store : {false, true}) {
      try {
        const auto p =
            store ? specdec::process_logits<float>(logits, params, scratch, weights, block_sums)
                  : specdec::process_logits<float>(logits, params, scratch);
        EXPECT_FALSE(specdec::detail::kExponentByFma);
        EXPECT_EQ(p.probability(2), 1.0f);
      } catch (const std::domain_error& error) {
        EXPECT_TRUE(specdec::detail::kExponentByFma);
        const std::string message = error.what();
        EXPECT_NE(message.find("temperature = 1e-30 is too small"), std::string::npos) << message;
        EXPECT_NE(message.find("max logit = 1.3"), std::string::npos) << message;
      }
    }
  }
  const std::vector<float> logits{-1.0f, 0.5f, 1.0f, -0.25f};
  for (const float t :
       {std::nextafter(kMin, 0.0f), 1e-35f, 1e-40f, std::numeric_limits<float>::denorm_min()}) {
    SCOPED_TRACE(t);
    specdec::SamplingParams params;
    params.temperature = t;
    expect_invalid(params, "temperature");
    try {
      params.validate();
    } catch (const std::invalid_argument& error) {
      EXPECT_NE(std::string(error.what()).find("1e-30"), std::string::npos) << error.what();
    }
    EXPECT_THROW((void)specdec::process_logits<float>(logits, params, scratch),
                 std::invalid_argument);
    EXPECT_THROW((void)specdec::process_logits<float>(logits, params, scratch, weights, block_sums),
                 std::invalid_argument);
  }
}

// process_logits is public: called directly, it validates its params as generate() does
// (min_p = 2.75 used to return a normalizer of 0).
TEST(SamplingTest, ProcessLogitsValidatesItsParams) {
  const std::vector<float> logits{-1.0f, 0.5f, 1.0f, -0.25f};
  std::vector<float> scratch;
  std::vector<float> weights(4);
  std::vector<float> block_sums(specdec::weight_block_count(4));
  std::vector<float> references(specdec::weight_block_count(4));
  struct Bad {
    const char* field;
    void (*apply)(specdec::SamplingParams&);
  };
  const Bad bad_params[] = {
      {"min_p = 2.75", [](specdec::SamplingParams& p) { p.min_p = 2.75f; }},
      {"top_p = 1.5", [](specdec::SamplingParams& p) { p.top_p = 1.5f; }},
      {"top_k = -3", [](specdec::SamplingParams& p) { p.top_k = -3; }},
      {"temperature = -1", [](specdec::SamplingParams& p) { p.temperature = -1.0f; }},
  };
  for (const Bad& bad : bad_params) {
    SCOPED_TRACE(bad.field);
    specdec::SamplingParams params;
    bad.apply(params);
    auto names_field = [&](auto&& call) {
      try {
        (void)call();
        ADD_FAILURE() << "no exception";
      } catch (const std::invalid_argument& error) {
        const std::string message = error.what();
        EXPECT_EQ(message.rfind("specdec: ", 0), 0u) << message;
        EXPECT_NE(message.find(bad.field), std::string::npos) << message;
      }
    };
    names_field([&] { return specdec::process_logits<float>(logits, params, scratch); });
    names_field([&] {
      return specdec::process_logits<float>(
          logits, params, scratch, specdec::BlockSumBuffers<float>{block_sums, references});
    });
    names_field([&] {
      return specdec::process_logits<float>(logits, params, scratch, weights, block_sums);
    });
    names_field([&] { return specdec::process_logits<float>(logits, params, scratch, weights); });
    names_field(
        [&] { return specdec::filter_threshold<float>(logits, 1.0f, 1.0f, params, scratch); });
  }
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

// Tests for detail/row_kernels.hpp: the single-pass (online softmax by blocks) kernels against
// the two-pass ones, the shared reference and lazy rescale of stored weights, recorded block
// sums and the inverse CDF that uses them, the NaN / +inf / all -inf checks, determinism.
#include "specdec/detail/kernels/row_kernels.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

using specdec::token_t;
namespace detail = specdec::detail;

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// The rows every kernel test runs over: sizes around the block and packet boundaries, the max
// in the first / a middle / the last block, -inf tokens and whole -inf blocks, huge ranges, and
// rows that climb block after block (at low temperature they force the stored-weights kernel
// to move its reference, possibly more than once).
struct Row {
  std::string name;
  std::vector<float> logits;
};

std::vector<Row> test_rows() {
  std::vector<Row> rows;
  std::mt19937 gen(20261130);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  auto gaussian = [&](std::size_t size, float scale = 1.0f) {
    std::vector<float> row(size);
    for (float& x : row) x = scale * normal(gen);
    return row;
  };
  for (std::size_t size : {1u, 7u, 31u, 33u, 1023u, 1024u, 1025u, 3000u, 5000u, 32000u}) {
    rows.push_back({"gaussian_" + std::to_string(size), gaussian(size)});
  }
  {
    auto row = gaussian(5000);
    row[4999] = 30.0f;  // the max in the (partial) last block
    rows.push_back({"max_in_last_block", row});
  }
  {
    auto row = gaussian(4096);
    row[0] = 25.0f;  // the max in the first block
    rows.push_back({"max_in_first_block", row});
  }
  {
    auto row = gaussian(6000);
    for (std::size_t i = 0; i < row.size(); i += 3) row[i] = -kInf;  // banned tokens
    std::fill(row.begin(), row.begin() + 2048, -kInf);               // two whole -inf blocks
    rows.push_back({"minus_inf_tokens_and_blocks", row});
  }
  {
    auto row = gaussian(5000);
    std::fill(row.begin(), row.end() - 1, -kInf);  // a single finite token, in the last block
    rows.push_back({"single_finite_token_last", row});
  }
  {
    std::uniform_real_distribution<float> wide(-1e4f, 1e4f);
    std::vector<float> row(7000);
    for (float& x : row) x = wide(gen);
    rows.push_back({"huge_range", row});
  }
  {
    auto row = gaussian(3000, 0.01f);
    for (float& x : row) x += 1e4f;  // large magnitude, small spread
    rows.push_back({"large_offset", row});
  }
  {
    // Climbing: block b is centred on 2.5 b, so at T = 0.05 each block's max is ~50 nats
    // above the previous block's: the reference moves several times.
    std::vector<float> row(9 * 1024 + 100);
    for (std::size_t i = 0; i < row.size(); ++i) {
      row[i] = 2.5f * static_cast<float>(i / 1024) + 0.3f * normal(gen);
    }
    rows.push_back({"climbing", row});
  }
  {
    // Each block a little higher: climbs by far more than 64 nats per block at T = 0.05.
    std::vector<float> row(6 * 1024);
    for (std::size_t i = 0; i < row.size(); ++i) {
      row[i] = 10.0f * static_cast<float>(i / 1024) + normal(gen);
    }
    rows.push_back({"steep_climb", row});
  }
  return rows;
}

constexpr float kTemperatures[] = {1.0f, 0.7f, 0.05f, 3.0f};

// Two-pass reference in double: max, then sum exp((x - max) / T).
double reference_normalizer(const std::vector<float>& row, double temperature, double& max) {
  max = -INFINITY;
  for (float x : row) max = std::max(max, static_cast<double>(x));
  double sum = 0;
  for (float x : row) sum += std::exp((static_cast<double>(x) - max) / temperature);
  return sum;
}

TEST(OnlineExpSum, MatchesTheTwoPassNormalizer) {
  for (const Row& row : test_rows()) {
    for (const float t : kTemperatures) {
      SCOPED_TRACE(row.name + " T=" + std::to_string(t));
      const float inv_t = 1.0f / t;
      const std::span<const float> logits(row.logits);
      const auto online = detail::online_exp_sum(logits, inv_t);
      const float max = detail::scan_max(logits).value;
      EXPECT_EQ(online.reference, max);  // the true max, not just some reference
      const double two_pass = detail::exp_sum(logits, max, inv_t, -kInf);
      EXPECT_NEAR(online.sum, two_pass, 1e-6 * two_pass);
      // p(x) = exp(scaled_exponent(x)) / Z, as TokenDistribution forms it, is the softmax.
      double exact_max = 0;
      const double exact =
          reference_normalizer(row.logits, 1.0 / static_cast<double>(inv_t), exact_max);
      double p_sum = 0;
      for (const float x : logits) {
        const double p =
            std::exp(static_cast<double>(detail::scaled_exponent(x, max, inv_t))) / online.sum;
        const double expected = std::exp((static_cast<double>(x) - exact_max) * inv_t) / exact;
        if (expected > 1e-20) {
          ASSERT_NEAR(p, expected, 1e-5 * expected);
        }
        p_sum += p;
      }
      EXPECT_NEAR(p_sum, 1.0, 1e-6);
    }
  }
}

struct Stored {
  std::vector<float> weights, block_sums, references;
  detail::OnlineSum<float> result{};
};

Stored store_online(std::span<const float> logits, float inv_t) {
  Stored s;
  const std::size_t blocks = detail::block_count(logits.size());
  s.weights.assign(logits.size(), -1.0f);
  s.block_sums.assign(blocks, -1.0f);
  s.references.assign(blocks, 0.0f);
  s.result =
      detail::online_store_weights(logits, inv_t, std::span<float>(s.weights),
                                   std::span<float>(s.block_sums), std::span<float>(s.references));
  return s;
}

TEST(OnlineStoreWeights, OneReferenceOneNormalizerAndExactBlockSums) {
  for (const Row& row : test_rows()) {
    for (const float t : kTemperatures) {
      SCOPED_TRACE(row.name + " T=" + std::to_string(t));
      const float inv_t = 1.0f / t;
      const std::span<const float> logits(row.logits);
      const Stored s = store_online(logits, inv_t);
      const float max = detail::scan_max(logits).value;
      const float reference = s.result.reference;
      ASSERT_LE(reference, max);
      const double exponent_rounding =
          2.0 * (static_cast<double>(max) - reference) * inv_t * 0x1.0p-24;
      // The shared reference is within 64 T of the max, so no weight overflows ...
      EXPECT_LE((static_cast<double>(max) - reference) * inv_t, detail::kMaxWeightExponent);
      // ... and the max token's weight is >= 1 (the normalizer cannot underflow).
      const auto argmax = static_cast<std::size_t>(
          std::max_element(row.logits.begin(), row.logits.end()) - row.logits.begin());
      EXPECT_GE(s.weights[argmax], 0.99999f);

      // Block sums are exactly the sums of the stored weights; the total is their double sum.
      double total = 0;
      for (std::size_t b = 0; b < s.block_sums.size(); ++b) {
        const std::size_t offset = b * detail::kBlockSize;
        const std::size_t length = std::min(detail::kBlockSize, logits.size() - offset);
        EXPECT_EQ(s.block_sums[b], detail::block_sum(s.weights.data() + offset, length))
            << "block " << b;
        total += static_cast<double>(s.block_sums[b]);
      }
      EXPECT_EQ(s.result.sum, total);

      // Every weight is exp((x - reference) / T): finite, 0 exactly for -inf, and q = w / Z
      // sums to 1 and matches the two-pass distribution.
      double exact_max = 0;
      const double exact =
          reference_normalizer(row.logits, 1.0 / static_cast<double>(inv_t), exact_max);
      double q_sum = 0;
      for (std::size_t i = 0; i < logits.size(); ++i) {
        ASSERT_TRUE(std::isfinite(s.weights[i])) << i;
        ASSERT_GE(s.weights[i], 0.0f) << i;
        if (logits[i] == -kInf) {
          ASSERT_EQ(s.weights[i], 0.0f) << i;
        }
        const double q = static_cast<double>(s.weights[i]) / s.result.sum;
        q_sum += q;
        const double p = std::exp((static_cast<double>(logits[i]) - exact_max) * inv_t) / exact;
        if (p > 1e-20) {
          ASSERT_NEAR(q, p, (1e-5 + exponent_rounding) * p + 1e-30) << i;
        }
      }
      EXPECT_NEAR(q_sum, 1.0, 1e-6);

      // On the max's scale the normalizer is the two-pass one. Weights above the reference
      // have exponents up to (max - reference) / T, rounded to float: a relative error of up to
      // that times 2^-24 in the heaviest weights (documented at online_store_weights).
      const double on_max_scale =
          s.result.sum * std::exp(detail::reference_shift(reference, max, inv_t));
      const double two_pass = detail::exp_sum(logits, max, inv_t, -kInf);
      EXPECT_NEAR(on_max_scale, two_pass, (1e-6 + exponent_rounding) * two_pass);
      if (reference == max) {
        EXPECT_NEAR(on_max_scale, two_pass, 1e-6 * two_pass);
      }
    }
  }
}

TEST(OnlineStoreWeights, ClimbingRowsAtLowTemperatureMoveTheReference) {
  // The test above covers correctness; this makes sure its rows do exercise the lazy rescale
  // (a kernel that never moved its reference would overflow on them instead).
  for (const Row& row : test_rows()) {
    if (row.name != "climbing" && row.name != "steep_climb") continue;
    const Stored s = store_online(row.logits, 1.0f / 0.05f);
    std::vector<float> references = s.references;
    references.erase(std::unique(references.begin(), references.end()), references.end());
    EXPECT_GE(references.size(), 3u) << row.name;
    EXPECT_EQ(references.back(), s.result.reference);
    // At T = 1 the same rows never climb 64 nats: one reference for every block.
    const Stored calm = store_online(row.logits, 1.0f);
    for (float r : calm.references) EXPECT_EQ(r, calm.references.front());
  }
}

TEST(OnlineKernels, ResultsDoNotDependOnWhereTheRowLives) {
  for (const Row& row : test_rows()) {
    SCOPED_TRACE(row.name);
    const float inv_t = 1.0f / 0.7f;
    for (std::size_t shift : {1u, 3u, 8u}) {
      std::vector<float> moved(row.logits.size() + shift);
      std::copy(row.logits.begin(), row.logits.end(), moved.begin() + static_cast<long>(shift));
      const std::span<const float> a(row.logits);
      const std::span<const float> b(moved.data() + shift, row.logits.size());
      EXPECT_EQ(detail::online_exp_sum(a, inv_t).sum, detail::online_exp_sum(b, inv_t).sum);
      const Stored sa = store_online(a, inv_t);
      const Stored sb = store_online(b, inv_t);
      EXPECT_EQ(sa.result.sum, sb.result.sum);
      EXPECT_EQ(sa.weights, sb.weights);
      EXPECT_EQ(sa.block_sums, sb.block_sums);
    }
  }
}

TEST(InverseCdf, BlockSumsGiveTheSameTokensAsResumming) {
  for (const Row& row : test_rows()) {
    SCOPED_TRACE(row.name);
    const Stored s = store_online(row.logits, 1.0f);
    for (int i = 0; i < 2000; ++i) {
      const double coin = (i + 0.5) / 2000.0;
      const token_t with_sums = detail::inverse_cdf(std::span<const float>(s.weights),
                                                    std::span<const float>(s.block_sums), coin);
      const token_t resummed =
          detail::inverse_cdf(std::span<const float>(s.weights), s.result.sum, coin);
      ASSERT_EQ(with_sums, resummed) << "coin " << coin;
      ASSERT_GT(s.weights[static_cast<std::size_t>(with_sums)], 0.0f);
    }
    const token_t last = detail::inverse_cdf(std::span<const float>(s.weights),
                                             std::span<const float>(s.block_sums), 1.0 - 0x1.0p-53);
    ASSERT_GT(s.weights[static_cast<std::size_t>(last)], 0.0f);
  }
}

TEST(ArgmaxAndLogProbability, MatchesArgmaxAndLogSoftmax) {
  for (Row row : test_rows()) {
    SCOPED_TRACE(row.name);
    for (const bool tie : {false, true}) {
      if (tie && row.logits.size() > 1) {
        // The max repeated in a later block: the lowest index must win.
        const auto first = std::max_element(row.logits.begin(), row.logits.end());
        row.logits.back() = *first;
      }
      const std::span<const float> logits(row.logits);
      const auto [token, log_p] = detail::argmax_and_log_probability(logits);
      const auto first_max = std::max_element(row.logits.begin(), row.logits.end());
      EXPECT_EQ(token, first_max - row.logits.begin());
      EXPECT_EQ(token, detail::argmax_checked(logits).first);
      double exact_max = 0;
      const double z = reference_normalizer(row.logits, 1.0, exact_max);
      EXPECT_NEAR(log_p, -std::log(z), 1e-6 * std::max(1.0, std::log(z)));
    }
  }
}

// The max's first index is found a packet at a time: the lowest of two tied maxima must win
// wherever they sit -- the same packet, neighbouring packets, the block's scalar tail, the first
// and last positions of a block.
TEST(Argmax, LowestIndexOfTiedMaximaAtEveryPosition) {
  std::mt19937 gen(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (const std::size_t size : {1000u, 1024u, 3000u, 3077u}) {
    std::vector<float> row(size);
    for (float& x : row) x = normal(gen);
    for (std::size_t first = 0; first < size; first += 37) {
      for (const std::size_t gap : {0u, 1u, 3u, 15u, 16u, 17u, 100u}) {
        std::vector<float> tied = row;
        tied[first] = 9.0f;
        const std::size_t second = std::min(size - 1, first + gap);
        tied[second] = 9.0f;
        EXPECT_EQ(detail::argmax_checked(std::span<const float>(tied)).first,
                  static_cast<token_t>(first))
            << "size " << size << ", max at " << first << " and " << second;
      }
    }
    std::vector<float> last = row;
    last[size - 1] = 9.0f;
    EXPECT_EQ(detail::argmax_checked(std::span<const float>(last)).first,
              static_cast<token_t>(size - 1));
  }
}

// ---- the row check: NaN first, then +inf, then all -inf; same messages on every path ----------

std::string what_online(std::span<const float> logits, bool store) {
  try {
    if (store) {
      (void)store_online(logits, 1.0f);
    } else {
      (void)detail::online_exp_sum(logits, 1.0f);
    }
  } catch (const std::domain_error& error) {
    return error.what();
  }
  return "no exception";
}

std::string what_scan(std::span<const float> logits) {
  try {
    (void)detail::scan_max(logits);
  } catch (const std::domain_error& error) {
    return error.what();
  }
  return "no exception";
}

TEST(RowCheck, NaNInfAndDeadRowsThrowTheSameMessagesOnEveryPath) {
  const std::string nan_message =
      "specdec: logits row contains NaN (max logit = nan); expected finite logits (-inf allowed "
      "for impossible tokens)";
  const std::string inf_message =
      "specdec: logits row contains +inf (max logit = inf); expected finite logits (-inf allowed "
      "for impossible tokens)";
  const std::string dead_message =
      "specdec: every logit in the row is -inf after the logits processor and filters; expected "
      "at least one finite logit";
  struct Case {
    std::string name;
    std::vector<float> row;
    std::string message;
  };
  std::vector<Case> cases;
  for (std::size_t size : {3u, 40u, 3000u}) {
    for (std::size_t at : {std::size_t{0}, size / 2, size - 1}) {
      std::vector<float> row(size, 0.5f);
      row[at] = kNaN;
      cases.push_back({"nan", row, nan_message});
      row[at] = kInf;
      cases.push_back({"inf", row, inf_message});
      // NaN wins over +inf wherever they are.
      row[size - 1 - at] = kNaN;
      if (size - 1 - at != at) cases.push_back({"nan_and_inf", row, nan_message});
    }
    cases.push_back({"dead", std::vector<float>(size, -kInf), dead_message});
  }
  cases.push_back({"empty", {}, dead_message});
  {
    // NaN among -inf before the first finite block, and NaN in a block after it.
    std::vector<float> row(5000, -kInf);
    row[1500] = kNaN;
    row[2500] = 1.0f;
    cases.push_back({"nan_before_first_finite", row, nan_message});
    row[1500] = -kInf;
    row[4999] = kNaN;
    cases.push_back({"nan_after_first_finite", row, nan_message});
  }
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name + " size " + std::to_string(c.row.size()));
    EXPECT_EQ(what_online(c.row, false), c.message);
    EXPECT_EQ(what_online(c.row, true), c.message);
    EXPECT_EQ(what_scan(c.row), c.message);
  }
}

}  // namespace

// ---- packet_exp: the exp every kernel uses (on AVX-512 builds our own, elsewhere Eigen's) ----

// Evaluates packet_exp on `x` packet by packet (the tail padded with zeros).
std::vector<float> packet_exp_of(const std::vector<float>& x) {
  namespace ei = Eigen::internal;
  using Packet = ei::packet_traits<float>::type;
  constexpr auto kLanes = static_cast<std::size_t>(ei::packet_traits<float>::size);
  std::vector<float> in(x), out((x.size() + kLanes - 1) / kLanes * kLanes);
  in.resize(out.size(), 0.0f);
  for (std::size_t i = 0; i < in.size(); i += kLanes) {
    ei::pstoreu(out.data() + i, detail::packet_exp(ei::ploadu<Packet>(in.data() + i)));
  }
  out.resize(x.size());
  return out;
}

// Accuracy on normal results: within 2 ulp (relative 2^-22) of the correctly rounded exp plus
// the range reduction's 1.9e-9 |m| (ln 2 rounded to float, as in Eigen's AVX-512 exp), over
// every exponent a kernel forms (weights relative to a reference: <= 0 for target rows, <= 64
// for stored draft weights), on a grid fine enough to hit every polynomial interval many times.
// The AVX-512 overload replaces Eigen's 2^m construction and rounding; a wrong constant, a
// truncating instead of rounding m (|r| up to ln 2, outside the polynomial's interval) or a
// dropped polynomial term fails here by orders of magnitude.
TEST(PacketExp, WithinTwoUlpPlusRangeReductionErrorOnNormalResults) {
  std::vector<float> x;
  for (double v = -87.0; v <= 80.0; v += 0.000731) x.push_back(static_cast<float>(v));
  const std::vector<float> got = packet_exp_of(x);
  double worst = 0;
  float worst_x = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double want = std::exp(static_cast<double>(x[i]));
    const double m = std::abs(std::nearbyint(static_cast<double>(x[i]) * 1.4426950408889634));
    const double rel =
        std::abs(static_cast<double>(got[i]) - want) / want / (std::ldexp(1.0, -22) + 1.91e-9 * m);
    if (rel > worst) {
      worst = rel;
      worst_x = x[i];
    }
  }
  EXPECT_LE(worst, 1.0) << "worst error / bound at x = " << worst_x;
}

// Special values: NaN stays NaN (the kernels detect NaN logits through NaN weights), exp(0) = 1,
// and where the kernels rely on it (packet_exp_of_minus_inf_is_zero: AVX-512), -inf and
// everything whose exp is below half the least subnormal give exactly 0, while subnormal
// results are within two subnormal steps of the truth.
TEST(PacketExp, SpecialValues) {
  const std::vector<float> x = {kNaN,    -kNaN,   0.0f,    -kInf,  -1e30f,
                                -200.0f, -104.0f, -100.0f, -95.0f, -88.0f};
  const std::vector<float> got = packet_exp_of(x);
  EXPECT_TRUE(std::isnan(got[0]));
  EXPECT_TRUE(std::isnan(got[1]));
  EXPECT_EQ(got[2], 1.0f);
  if (detail::packet_exp_of_minus_inf_is_zero<float>()) {
    EXPECT_EQ(got[3], 0.0f);
    EXPECT_EQ(got[4], 0.0f);
    EXPECT_EQ(got[5], 0.0f);
    EXPECT_EQ(got[6], 0.0f);  // e^-104 < 2^-150
    const double least_subnormal = std::ldexp(1.0, -149);
    for (std::size_t i = 7; i < x.size(); ++i) {
      EXPECT_NEAR(got[i], std::exp(static_cast<double>(x[i])), 2 * least_subnormal) << x[i];
    }
  }
}

// ---- top-p level masses: mass of the tokens with logit >= level, ties at a level included ----

// Both the exp pass that sums the masses (exp_block_with_level_masses) and the narrowing pass
// over stored weights (level_masses) against a scalar loop, with every level equal to some
// token's logit (so ">=" vs ">" matters) and a level between logits, on a row with many ties.
TEST(LevelMasses, IncludeTokensExactlyAtALevel) {
  std::mt19937 gen(11);
  std::uniform_int_distribution<int> quantised(-40, 10);
  std::vector<float> logits(3000);
  for (float& x : logits) x = 0.25f * static_cast<float>(quantised(gen));  // many ties
  const float max = *std::max_element(logits.begin(), logits.end());
  const float levels[6] = {max, max - 0.25f, max - 1.0f, max - 2.5f, max - 3.6f, max - 7.0f};
  std::vector<float> weights(logits.size());
  double masses[6] = {};
  double sum = 0;
  detail::for_each_block(logits.size(), [&](std::size_t offset, std::size_t length) {
    sum += detail::exp_block_with_level_masses<float, false, false, 6>(
        logits.data() + offset, length, max, 1.0f, -kInf, levels, weights.data() + offset, masses);
  });
  double stored_masses[6] = {};
  detail::level_masses<float, 6>(logits, weights, levels, stored_masses);
  for (std::size_t j = 0; j < 6; ++j) {
    double expected = 0;
    for (std::size_t i = 0; i < logits.size(); ++i) {
      if (logits[i] >= levels[j]) expected += static_cast<double>(weights[i]);
    }
    EXPECT_NEAR(masses[j], expected, 1e-5 * expected) << "level " << j;
    EXPECT_NEAR(stored_masses[j], expected, 1e-5 * expected) << "level " << j;
  }
  EXPECT_GT(sum, 0.0);
}

// The top-p candidate gather: every token with lo <= logit < hi, in index order, with its
// weight; lo and hi equal to logits that occur (ties at both ends), ranges hitting the scalar
// tail, and the early "more than capacity" exit.
TEST(GatherRange, TakesExactlyTheHalfOpenRangeInIndexOrder) {
  std::mt19937 gen(5);
  std::uniform_int_distribution<int> quantised(-60, 20);
  for (const std::size_t size : {40u, 1000u, 4099u}) {
    std::vector<float> logits(size), weights(size);
    for (std::size_t i = 0; i < size; ++i) {
      logits[i] = 0.5f * static_cast<float>(quantised(gen));
      weights[i] = static_cast<float>(i) + 0.25f;  // identifies the token
    }
    for (const auto& [lo, hi] : {std::pair{0.0f, 3.0f}, std::pair{-10.0f, -9.5f},
                                 std::pair{9.5f, 10.5f}, std::pair{-30.0f, 10.0f}}) {
      std::vector<float> expected_logits, expected_weights;
      for (std::size_t i = 0; i < size; ++i) {
        if (logits[i] >= lo && logits[i] < hi) {
          expected_logits.push_back(logits[i]);
          expected_weights.push_back(weights[i]);
        }
      }
      std::vector<float> got_logits(size + 1), got_weights(size + 1);
      const std::size_t count = detail::gather_range<float>(
          logits, weights, lo, hi, got_logits.data(), got_weights.data(), size);
      ASSERT_EQ(count, expected_logits.size()) << "size " << size << " [" << lo << ", " << hi;
      got_logits.resize(count);
      got_weights.resize(count);
      EXPECT_EQ(got_logits, expected_logits);
      EXPECT_EQ(got_weights, expected_weights);
      if (count > 1) {
        EXPECT_EQ(detail::gather_range<float>(logits, weights, lo, hi, got_logits.data(),
                                              got_weights.data(), count - 1),
                  count);  // capacity + 1: "too many"
      }
    }
  }
}

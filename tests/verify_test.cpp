// Tests for verify.hpp: acceptance rule, residual, laziness, greedy matching, and the exactness
// identity for one position, enumerated in double precision.
#include "specdec/verify.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <initializer_list>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

using specdec::token_t;

std::vector<double> random_logits(std::size_t size, unsigned seed, double scale = 1.5) {
  std::mt19937 gen(seed);
  std::normal_distribution<double> normal(0.0, scale);
  std::vector<double> logits(size);
  for (auto& x : logits) x = normal(gen);
  return logits;
}

// sample_residual never stores the residual (it sums blocks, then recomputes one): it must
// pick exactly the token the inverse CDF over residual_distribution picks, for every coin.
TEST(VerifyTest, SampleResidualIsTheInverseCdfOfTheResidual) {
  for (const std::size_t size : {5u, 1024u, 3000u, 20000u}) {
    for (const int top_k : {0, 40}) {
      std::mt19937 gen(static_cast<unsigned>(size) + static_cast<unsigned>(top_k));
      std::normal_distribution<float> normal(0.0f, 2.0f);
      std::vector<float> draft(size), target(size);
      for (std::size_t i = 0; i < size; ++i) {
        target[i] = normal(gen);
        draft[i] = target[i] + 0.7f * normal(gen);
      }
      specdec::SamplingParams params;
      params.top_k = top_k;
      std::vector<float> scratch, q_weights(size), residual(size), sample_scratch(size);
      const auto q = specdec::process_logits<float>(draft, params, scratch, q_weights);
      const auto p = specdec::process_logits<float>(target, params, scratch);
      const double total = specdec::residual_distribution<float>(p, q_weights, q.normalizer,
                                                                 std::span<float>(residual));
      ASSERT_GT(total, 0.0);
      for (int i = 0; i < 3000; ++i) {
        const double coin = i == 0 ? 1.0 - 0x1.0p-53 : (i + 0.5) / 3000.0;
        const token_t expected =
            specdec::detail::inverse_cdf(std::span<const float>(residual), total, coin);
        const token_t got = specdec::sample_residual<float>(p, q_weights, q.normalizer, coin,
                                                            std::span<float>(sample_scratch));
        ASSERT_EQ(got, expected) << "size " << size << " coin " << coin;
        ASSERT_GT(residual[static_cast<std::size_t>(got)], 0.0f);
      }
    }
  }
}

TEST(VerifyTest, AcceptanceProbabilityIsMinOfOneAndRatio) {
  EXPECT_EQ(specdec::acceptance_probability(0.3, 0.2), 1.0);
  EXPECT_EQ(specdec::acceptance_probability(0.2, 0.2), 1.0);
  EXPECT_DOUBLE_EQ(specdec::acceptance_probability(0.1, 0.4), 0.25);
  EXPECT_EQ(specdec::acceptance_probability(0.0, 0.4), 0.0);
}

// For one position, P(emit y) = q(y) a(y) + P(reject) r(y) must equal p(y) for every y.
TEST(VerifyTest, OnePositionEnumerationGivesTheTargetDistribution) {
  for (unsigned seed = 0; seed < 10; ++seed) {
    for (std::size_t size : {3u, 50u, 2100u}) {
      const auto draft_logits = random_logits(size, seed);
      const auto target_logits = random_logits(size, seed + 1000);
      specdec::SamplingParams params;
      params.temperature = 0.9f;
      params.top_k = seed % 2 == 0 ? 0 : static_cast<int>(size / 2 + 1);
      std::vector<double> scratch, q_weights(size), residual(size);
      const auto q = specdec::process_logits<double>(draft_logits, params, scratch, q_weights);
      const auto p = specdec::process_logits<double>(target_logits, params, scratch);
      const double residual_mass = specdec::residual_distribution<double>(
          p, q_weights, q.normalizer, std::span<double>(residual));
      double reject = 0;
      for (std::size_t x = 0; x < size; ++x) {
        const double q_x = q_weights[x] / q.normalizer;
        if (q_x == 0) continue;
        reject += q_x * (1 - specdec::acceptance_probability(p.probability(token_t(x)), q_x));
      }
      EXPECT_NEAR(reject, residual_mass, 1e-12);
      for (std::size_t y = 0; y < size; ++y) {
        const auto token = static_cast<token_t>(y);
        const double q_y = q_weights[y] / q.normalizer;
        const double accepted =
            q_y == 0 ? 0 : q_y * specdec::acceptance_probability(p.probability(token), q_y);
        const double emitted =
            accepted + (residual_mass > 0 ? reject * residual[y] / residual_mass : 0);
        EXPECT_NEAR(emitted, p.probability(token), 1e-12);
      }
    }
  }
}

struct Fixture {
  static constexpr std::size_t kVocab = 6;
  std::vector<double> draft_logits, target_logits, draft_weights, normalizers, scratch_values;
  std::vector<double> scratch = std::vector<double>(kVocab);
  std::vector<token_t> drafted;
  specdec::SamplingParams params;

  // K drafted tokens from random rows; target has K+1 rows.
  explicit Fixture(std::size_t k, unsigned seed) {
    draft_weights.resize(k * kVocab);
    for (std::size_t j = 0; j < k; ++j) {
      const auto row = random_logits(kVocab, seed + static_cast<unsigned>(j));
      draft_logits.insert(draft_logits.end(), row.begin(), row.end());
    }
    for (std::size_t j = 0; j <= k; ++j) {
      const auto row = random_logits(kVocab, seed + 100 + static_cast<unsigned>(j));
      target_logits.insert(target_logits.end(), row.begin(), row.end());
    }
    for (std::size_t j = 0; j < k; ++j) {
      const std::span<double> weights(draft_weights.data() + j * kVocab, kVocab);
      const auto q = specdec::process_logits<double>(
          std::span<const double>(draft_logits).subspan(j * kVocab, kVocab), params, scratch_values,
          weights);
      normalizers.push_back(q.normalizer);
      drafted.push_back(specdec::sample_from_weights<double>(weights, q.normalizer, 0.5));
    }
  }
  specdec::LogitsRows<double> weights_rows() const { return {draft_weights, kVocab}; }
  specdec::LogitsRows<double> target_rows() const { return {target_logits, kVocab}; }
};

TEST(VerifyTest, CoinZeroAcceptsEverythingAndSamplesTheBonusFromRowK) {
  Fixture f(3, 1);
  const std::vector<double> coins(3, 0.0);
  const auto result = specdec::verify_stochastic<double>(
      f.drafted, f.weights_rows(), f.normalizers, f.target_rows(), f.params, coins, 0.0,
      std::span<double>(f.scratch), f.scratch_values);
  EXPECT_EQ(result.accepted, 3u);
  EXPECT_TRUE(result.bonus);
  // The bonus with coin 0 is the first token of positive probability in target row 3.
  EXPECT_EQ(result.next_token, 0);
}

TEST(VerifyTest, RejectionSamplesFromTheResidualAndIsLazy) {
  Fixture f(3, 2);
  std::vector<double> coins(3, 1.0 - 0x1.0p-53);  // rejects unless p(x) >= q(x)
  std::vector<std::size_t> processed;
  const auto result = specdec::verify_stochastic<double>(
      f.drafted, f.weights_rows(), f.normalizers,
      [&](std::size_t j) {
        processed.push_back(j);
        return specdec::process_logits(f.target_rows().row(j), f.params, f.scratch_values);
      },
      coins, 0.5, std::span<double>(f.scratch));
  ASSERT_LE(result.accepted, 3u);
  // Rows are processed in order and never beyond the rejection.
  ASSERT_EQ(processed.size(), result.accepted + 1);
  for (std::size_t j = 0; j < processed.size(); ++j) EXPECT_EQ(processed[j], j);
  if (result.accepted < 3) {
    EXPECT_FALSE(result.bonus);
    // The correction has positive residual mass: p(y) > q(y).
    const auto p =
        specdec::process_logits(f.target_rows().row(result.accepted), f.params, f.scratch_values);
    const auto y = static_cast<std::size_t>(result.next_token);
    const double q_y =
        f.draft_weights[result.accepted * Fixture::kVocab + y] / f.normalizers[result.accepted];
    EXPECT_GT(p.probability(result.next_token), q_y);
  }
}

TEST(VerifyTest, EmptyDraftSamplesFromRowZero) {
  Fixture f(0, 3);
  const auto result =
      specdec::verify_stochastic<double>({}, f.weights_rows(), {}, f.target_rows(), f.params, {},
                                         0.0, std::span<double>(f.scratch), f.scratch_values);
  EXPECT_EQ(result.accepted, 0u);
  EXPECT_TRUE(result.bonus);
}

TEST(VerifyTest, GreedyAcceptsWhileTargetArgmaxMatches) {
  // Target rows' argmaxes: 2, 0, 1, 3.
  const std::vector<double> target{0, 1, 5, 0,  //
                                   4, 1, 0, 0,  //
                                   0, 3, 3, 0,  //
                                   0, 0, 0, 1};
  const specdec::LogitsRows<double> rows(target, 4);
  const std::vector<token_t> all_match{2, 0, 1};
  auto result = specdec::verify_greedy(all_match, rows);
  EXPECT_EQ(result.accepted, 3u);
  EXPECT_EQ(result.next_token, 3);
  EXPECT_TRUE(result.bonus);
  const std::vector<token_t> mismatch_at_1{2, 3, 1};
  result = specdec::verify_greedy(mismatch_at_1, rows);
  EXPECT_EQ(result.accepted, 1u);
  EXPECT_EQ(result.next_token, 0);
  EXPECT_FALSE(result.bonus);
}

TEST(VerifyTest, WrongShapesThrowInvalidArgument) {
  Fixture f(2, 4);
  const std::vector<double> coins(1, 0.0);  // one coin for two drafted tokens
  EXPECT_THROW((void)specdec::verify_stochastic<double>(
                   f.drafted, f.weights_rows(), f.normalizers, f.target_rows(), f.params, coins,
                   0.0, std::span<double>(f.scratch), f.scratch_values),
               std::invalid_argument);
  const std::vector<double> two_rows(2 * Fixture::kVocab, 0.0);
  const std::vector<token_t> three{0, 0, 0};
  EXPECT_THROW(
      (void)specdec::verify_greedy(three, specdec::LogitsRows<double>(two_rows, Fixture::kVocab)),
      std::invalid_argument);
}

// The public functions that take token ids check them once per call (O(K)), and check that
// the target rows' vocabulary is the draft weights': out-of-range ids used to be read out of
// bounds.
::testing::AssertionResult rejects_token(const std::function<void()>& call,
                                         std::initializer_list<std::string> keys) {
  try {
    call();
  } catch (const std::invalid_argument& error) {
    const std::string message = error.what();
    if (message.rfind("specdec: ", 0) != 0) {
      return ::testing::AssertionFailure() << "no \"specdec: \" prefix: " << message;
    }
    for (const std::string& key : keys) {
      if (message.find(key) == std::string::npos) {
        return ::testing::AssertionFailure() << "\"" << message << "\" lacks \"" << key << "\"";
      }
    }
    return ::testing::AssertionSuccess();
  } catch (const std::exception& error) {
    return ::testing::AssertionFailure() << "threw something else: " << error.what();
  }
  return ::testing::AssertionFailure() << "no exception";
}

TEST(VerifyTest, OutOfRangeTokensAndVocabularyMismatchesThrow) {
  for (const token_t bad : {token_t{6}, token_t{-1}, token_t{1000000}}) {
    SCOPED_TRACE(bad);
    Fixture f(3, 4);
    f.drafted[1] = bad;
    const std::vector<double> coins(3, 0.0);
    const std::string token = "token " + std::to_string(bad);
    EXPECT_TRUE(rejects_token(
        [&] {
          (void)specdec::verify_stochastic<double>(f.drafted, f.weights_rows(), f.normalizers,
                                                   f.target_rows(), f.params, coins, 0.0,
                                                   std::span<double>(f.scratch), f.scratch_values);
        },
        {"verify_stochastic", token, "[0, 6)"}));
    EXPECT_TRUE(rejects_token(
        [&] {
          (void)specdec::verify_stochastic<double>(
              f.drafted, f.weights_rows(), f.normalizers,
              [&](std::size_t j) {
                return specdec::process_logits(f.target_rows().row(j), f.params, f.scratch_values);
              },
              coins, 0.0, std::span<double>(f.scratch));
        },
        {"verify_stochastic", token, "[0, 6)"}));
    EXPECT_TRUE(rejects_token([&] { (void)specdec::verify_greedy(f.drafted, f.target_rows()); },
                              {"verify_greedy", token, "[0, 6)"}));
    const auto p = specdec::process_logits(f.target_rows().row(0), f.params, f.scratch_values);
    EXPECT_TRUE(rejects_token([&] { (void)specdec::acceptance_probability(p, p, bad); },
                              {"acceptance_probability", token, "[0, 6)"}));
  }

  // Target rows of V = 5 against draft weights of V = 6.
  Fixture f(2, 5);
  f.drafted = {5, 5};  // valid for the draft's V = 6, out of range for the target's
  const std::vector<double> coins(2, 0.0);
  std::vector<double> narrow;
  for (std::size_t j = 0; j < 3; ++j) {
    for (std::size_t v = 0; v < 5; ++v) narrow.push_back(f.target_logits[j * 6 + v]);
  }
  const specdec::LogitsRows<double> narrow_rows(narrow, 5);
  EXPECT_TRUE(rejects_token(
      [&] {
        (void)specdec::verify_stochastic<double>(f.drafted, f.weights_rows(), f.normalizers,
                                                 narrow_rows, f.params, coins, 0.0,
                                                 std::span<double>(f.scratch), f.scratch_values);
      },
      {"verify_stochastic", "5", "6"}));
  EXPECT_TRUE(rejects_token(
      [&] {
        (void)specdec::verify_stochastic<double>(
            f.drafted, f.weights_rows(), f.normalizers,
            [&](std::size_t j) {
              return specdec::process_logits(narrow_rows.row(j), f.params, f.scratch_values);
            },
            coins, 0.0, std::span<double>(f.scratch));
      },
      {"verify_stochastic", "5", "6"}));
  const auto p5 = specdec::process_logits(narrow_rows.row(0), f.params, f.scratch_values);
  const auto p6 = specdec::process_logits(f.target_rows().row(0), f.params, f.scratch_values);
  EXPECT_TRUE(rejects_token([&] { (void)specdec::acceptance_probability(p5, p6, 0); },
                            {"acceptance_probability", "5", "6"}));
  // The residual functions take no token, and already check q's size against p's V.
  std::vector<double> out(5);
  EXPECT_THROW((void)specdec::residual_distribution<double>(
                   p5, std::span<const double>(f.draft_weights).first(6), f.normalizers[0],
                   std::span<double>(out)),
               std::invalid_argument);
  EXPECT_THROW(
      (void)specdec::sample_residual<double>(p5, std::span<const double>(f.draft_weights).first(6),
                                             f.normalizers[0], 0.5, std::span<double>(out)),
      std::invalid_argument);
}

}  // namespace

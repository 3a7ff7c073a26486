// Tests for softmax.hpp: stability, agreement with a naive reference, argmax ties, NaN / inf.
#include "specdec/softmax.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

using specdec::token_t;

template <class Scalar>
class SoftmaxTest : public ::testing::Test {};
using Scalars = ::testing::Types<float, double>;
TYPED_TEST_SUITE(SoftmaxTest, Scalars);

template <class Scalar>
std::vector<Scalar> random_logits(std::size_t size, unsigned seed, double scale = 3.0) {
  std::mt19937 gen(seed);
  std::normal_distribution<double> normal(0.0, scale);
  std::vector<Scalar> logits(size);
  for (auto& x : logits) x = static_cast<Scalar>(normal(gen));
  return logits;
}

TYPED_TEST(SoftmaxTest, MatchesLongDoubleReference) {
  using Scalar = TypeParam;
  for (std::size_t size : {1u, 7u, 1024u, 1025u, 5000u}) {
    const auto logits = random_logits<Scalar>(size, static_cast<unsigned>(size));
    std::vector<Scalar> probabilities(size), log_probabilities(size);
    specdec::softmax(logits, probabilities);
    specdec::log_softmax(logits, log_probabilities);
    long double max = -INFINITY, total = 0;
    for (auto x : logits) max = std::max<long double>(max, x);
    for (auto x : logits) total += std::exp(static_cast<long double>(x) - max);
    const double tolerance = std::is_same_v<Scalar, float> ? 1e-5 : 1e-13;
    for (std::size_t i = 0; i < size; ++i) {
      const long double expected = std::exp(static_cast<long double>(logits[i]) - max) / total;
      EXPECT_NEAR(probabilities[i], static_cast<double>(expected),
                  tolerance * static_cast<double>(expected) + 1e-30);
      EXPECT_NEAR(log_probabilities[i], static_cast<double>(std::log(expected)), tolerance * 10);
    }
    EXPECT_NEAR(specdec::logsumexp(logits), static_cast<double>(max + std::log(total)),
                tolerance * 10);
  }
}

TYPED_TEST(SoftmaxTest, HugeLogitsDoNotOverflow) {
  using Scalar = TypeParam;
  const std::vector<Scalar> logits{Scalar(1000), Scalar(1001), Scalar(-1000)};
  std::vector<Scalar> probabilities(3);
  specdec::softmax(logits, probabilities);
  const double e = std::exp(-1.0);
  EXPECT_NEAR(probabilities[0], e / (1 + e), 1e-6);
  EXPECT_NEAR(probabilities[1], 1 / (1 + e), 1e-6);
  EXPECT_EQ(probabilities[2], Scalar(0));
  EXPECT_NEAR(specdec::logsumexp(logits), 1001 + std::log1p(e), 1e-4);
}

TYPED_TEST(SoftmaxTest, NegativeInfinityMeansProbabilityZero) {
  using Scalar = TypeParam;
  const Scalar inf = std::numeric_limits<Scalar>::infinity();
  const std::vector<Scalar> logits{-inf, Scalar(0), -inf, Scalar(0)};
  std::vector<Scalar> probabilities(4), log_probabilities(4);
  specdec::softmax(logits, probabilities);
  specdec::log_softmax(logits, log_probabilities);
  EXPECT_EQ(probabilities, (std::vector<Scalar>{0, Scalar(0.5), 0, Scalar(0.5)}));
  EXPECT_EQ(log_probabilities[0], -inf);
  EXPECT_NEAR(log_probabilities[1], -std::log(2.0), 1e-6);
}

TYPED_TEST(SoftmaxTest, ArgmaxTakesLowestIndexOnTies) {
  using Scalar = TypeParam;
  EXPECT_EQ(specdec::argmax(std::vector<Scalar>{1, 3, 2, 3}), 1);
  EXPECT_EQ(specdec::argmax(std::vector<Scalar>{5}), 0);
  // Ties spread over several internal blocks: the first one wins.
  std::vector<Scalar> logits(5000, Scalar(0));
  logits[4000] = 2;
  logits[1500] = 2;
  logits[3000] = 2;
  logits[10] = 1;
  EXPECT_EQ(specdec::argmax(logits), 1500);
  const Scalar inf = std::numeric_limits<Scalar>::infinity();
  EXPECT_EQ(specdec::argmax(std::vector<Scalar>{-inf, -inf, Scalar(-3), -inf}), 2);
}

TYPED_TEST(SoftmaxTest, NonFiniteRowsThrowDomainError) {
  using Scalar = TypeParam;
  const Scalar inf = std::numeric_limits<Scalar>::infinity();
  const Scalar nan = std::numeric_limits<Scalar>::quiet_NaN();
  std::vector<Scalar> with_nan(3000, Scalar(0));
  with_nan[2500] = nan;  // NaN in a late block must still be seen
  std::vector<Scalar> with_inf(3000, Scalar(0));
  with_inf[2999] = inf;
  std::vector<Scalar> all_neg_inf(10, -inf);
  for (const auto* row : {&with_nan, &with_inf, &all_neg_inf}) {
    EXPECT_THROW((void)specdec::argmax(*row), std::domain_error);
    std::vector<Scalar> out_row(row->size());
    EXPECT_THROW(specdec::softmax(*row, out_row), std::domain_error);
    EXPECT_THROW(specdec::log_softmax(*row, out_row), std::domain_error);
  }
  try {
    (void)specdec::argmax(with_nan);
    FAIL();
  } catch (const std::domain_error& error) {
    const std::string message = error.what();
    EXPECT_EQ(message.rfind("specdec: ", 0), 0u) << message;
    EXPECT_NE(message.find("NaN"), std::string::npos) << message;
  }
  EXPECT_TRUE(std::isnan(specdec::logsumexp(with_nan)));
  EXPECT_EQ(specdec::logsumexp(all_neg_inf), -inf);
}

TEST(SoftmaxSizeTest, MismatchedOutputThrowsInvalidArgument) {
  const std::vector<double> logits{1, 2, 3};
  std::vector<double> out(2);
  EXPECT_THROW(specdec::softmax(logits, out), std::invalid_argument);
}

}  // namespace

// TargetRows: the rows of one verification call, processed lazily. distribution(j) and
// argmax(j) answer in any order and any number of times (a user's verifier may mix them), and
// the logits processor runs once per row whichever asks first.

#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <span>
#include <vector>

#include "specdec/specdec.hpp"
#include "specdec/testing.hpp"

namespace {

using specdec::token_t;

constexpr std::size_t kVocab = 7;
constexpr std::size_t kRows = 3;

// Row r: a pattern whose argmax is at (3 + 2 r) mod V, so each row's answer differs.
std::vector<float> make_rows() {
  std::vector<float> values(kRows * kVocab);
  for (std::size_t r = 0; r < kRows; ++r) {
    for (std::size_t v = 0; v < kVocab; ++v) {
      values[r * kVocab + v] = 0.25f * static_cast<float>((v * 5 + r) % kVocab);
    }
    values[r * kVocab + (3 + 2 * r) % kVocab] = 4.0f;
  }
  return values;
}

token_t row_argmax(std::size_t r) { return static_cast<token_t>((3 + 2 * r) % kVocab); }

struct Fixture {
  std::vector<float> values = make_rows();
  std::vector<token_t> context{1, 2, 5, 6};  // 2 committed, 2 drafted: 3 rows
  specdec::SamplingParams params;
  specdec::TargetRowBuffers<float> buffers;
  std::size_t processor_calls = 0;

  specdec::TargetRows<float> rows() {
    return specdec::TargetRows<float>(specdec::LogitsRows<float>(values, kVocab), context, 2,
                                      params, true, buffers);
  }
};

// Every probability of `p` against a distribution computed on fresh buffers.
void expect_same_distribution(const specdec::TokenDistribution<float>& p,
                              const specdec::TokenDistribution<float>& expected) {
  ASSERT_EQ(p.vocab_size(), expected.vocab_size());
  for (token_t x = 0; x < static_cast<token_t>(kVocab); ++x) {
    EXPECT_EQ(p.probability(x), expected.probability(x)) << "token " << x;
  }
}

class TargetRowsAccessOrder : public ::testing::TestWithParam<bool> {};

INSTANTIATE_TEST_SUITE_P(WithAndWithoutProcessor, TargetRowsAccessOrder, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "Processor" : "NoProcessor";
                         });

// argmax(j) then distribution(j), and the reverse, on the same rows; each answer equals the one
// the accessor gives alone. (distribution(j) after argmax(j) used to return the default
// distribution over an empty row, and argmax(j) after distribution(j) token 0.)
TEST_P(TargetRowsAccessOrder, EitherAccessorAnswersAfterTheOther) {
  Fixture fixture;
  fixture.params.temperature = 0.8f;
  if (GetParam()) {
    fixture.params.logits_processor = [&fixture](std::span<const token_t>,
                                                 std::span<float> logits) {
      ++fixture.processor_calls;
      logits[0] += 0.5f;  // leaves every argmax where it is
    };
  }
  Fixture reference_fixture;
  reference_fixture.params = fixture.params;
  reference_fixture.params.logits_processor = nullptr;
  if (GetParam()) {
    reference_fixture.params.logits_processor = [](std::span<const token_t>,
                                                   std::span<float> logits) { logits[0] += 0.5f; };
  }
  specdec::TargetRows<float> reference = reference_fixture.rows();

  specdec::TargetRows<float> rows = fixture.rows();
  EXPECT_EQ(rows.argmax(0), row_argmax(0));
  expect_same_distribution(rows.distribution(0), reference.distribution(0));
  expect_same_distribution(rows.distribution(1), reference.distribution(1));
  EXPECT_EQ(rows.argmax(1), row_argmax(1));
  // Again, in both orders: cached answers.
  EXPECT_EQ(rows.argmax(1), row_argmax(1));
  expect_same_distribution(rows.distribution(0), reference.distribution(0));
  EXPECT_EQ(rows.argmax(2), row_argmax(2));
  EXPECT_EQ(rows.argmax(0), row_argmax(0));
  expect_same_distribution(rows.distribution(2), reference.distribution(2));
  if (GetParam()) {
    EXPECT_EQ(fixture.processor_calls, kRows);  // once per row
  }
}

// A new TargetRows over the same buffers (the next round) starts with nothing cached.
TEST(TargetRowsTest, TheNextRoundRecomputesEveryRow) {
  Fixture fixture;
  fixture.params.temperature = 1.0f;
  {
    specdec::TargetRows<float> rows = fixture.rows();
    (void)rows.distribution(0);
    (void)rows.argmax(1);
  }
  for (float& x : fixture.values) x = -x;  // another model output: other argmaxes
  specdec::TargetRows<float> rows = fixture.rows();
  for (std::size_t j = 0; j < kRows; ++j) EXPECT_NE(rows.argmax(j), row_argmax(j)) << j;
  Fixture negated;
  negated.params = fixture.params;
  negated.values = fixture.values;
  specdec::TargetRows<float> expected = negated.rows();
  expect_same_distribution(rows.distribution(0), expected.distribution(0));
}

// A user verifier that asks for argmax(j) before distribution(j) of every row it reads (say, to
// log the target's top choice) and then verifies token-level: its output is TokenVerifier's,
// token for token and bitwise in log-probs.
struct ArgmaxFirstVerifier {
  template <class Scalar, class Coins>
  specdec::VerifyResult verify(const specdec::Proposal<Scalar>& proposal,
                               specdec::TargetRows<Scalar>& target, Coins& coins) const {
    for (std::size_t j = 0; j < target.size(); ++j) (void)target.argmax(j);
    return specdec::TokenVerifier{}.verify(proposal, target, coins);
  }
};

TEST(TargetRowsTest, AVerifierMixingTheAccessorsVerifiesAsTokenVerifier) {
  specdec::testing::ScriptedPair pair;
  auto draft = pair.draft<float>();
  auto target = pair.target<float>();
  using Draft = decltype(draft);
  using Target = decltype(target);
  specdec::StrategyDecoder<Target, specdec::ModelProposer<Draft>, specdec::StaticDraftLength,
                           ArgmaxFirstVerifier>
      mixing(target, specdec::ModelProposer<Draft>(draft));
  specdec::StrategyDecoder<Target, specdec::ModelProposer<Draft>, specdec::StaticDraftLength,
                           specdec::TokenVerifier>
      plain(target, specdec::ModelProposer<Draft>(draft));
  specdec::GenerationConfig config;
  config.draft_length = 4;
  config.max_new_tokens = 60;
  config.sampling.temperature = 0.9f;
  config.sampling.top_k = 4;
  config.sampling.logits_processor = [](std::span<const token_t> context, std::span<float> logits) {
    logits[static_cast<std::size_t>(context.back()) % logits.size()] -= 0.5f;
  };
  const std::vector<token_t> prompt{1, 2};
  for (std::uint64_t seed = 0; seed < 8; ++seed) {
    config.seed = seed;
    const specdec::GenerationResult got = mixing.generate(prompt, config);
    const specdec::GenerationResult expected = plain.generate(prompt, config);
    EXPECT_EQ(got.tokens, expected.tokens) << "seed " << seed;
    EXPECT_EQ(got.logprobs, expected.logprobs) << "seed " << seed;
  }
}

}  // namespace

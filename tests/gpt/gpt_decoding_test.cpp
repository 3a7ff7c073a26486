// specdec on the shipped KJV pair (models/kjv-{target,draft}.spdc): the library's guarantees hold
// on real weights, not only on scripted models.
//  * greedy: speculative output == plain greedy output, token for token, for several held-out
//    prompts and K (this needs the GPT's batched rows to be bitwise equal to single rows);
//  * sampling at T = 1: a chi-square sanity check of the first emitted tokens against the exact
//    target distribution computed from the target's own logits;
//  * the BPE draft (models/kjv-bpe-draft.spdc, its own tokenizer) drafting by text: greedy
//    identity, several bytes proposed per draft call.
#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <fstream>
#include <span>
#include <string>
#include <vector>

#include "gpt/bpe_tokenizer.hpp"
#include "gpt/gpt_model.hpp"
#include "specdec/specdec.hpp"

namespace {

using specdec::token_t;
using specdec::examples::GptModel;

std::string models_dir() { return SPECDEC_MODELS_DIR; }

std::vector<token_t> encode(const std::string& text) {
  std::vector<token_t> tokens{'\n'};  // every training verse follows a newline: our BOS
  for (unsigned char c : text) tokens.push_back(c);
  return tokens;
}

std::vector<std::string> held_out_prompts(std::size_t count) {
  std::ifstream in(models_dir() + "/prompts.txt");
  std::vector<std::string> prompts;
  for (std::string line; prompts.size() < count && std::getline(in, line);) prompts.push_back(line);
  return prompts;
}

class ShippedPair : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    target_ = new GptModel(GptModel::from_file(models_dir() + "/kjv-target.spdc"));
    draft_ = new GptModel(GptModel::from_file(models_dir() + "/kjv-draft.spdc"));
  }
  static void TearDownTestSuite() {
    delete target_;
    delete draft_;
  }
  static GptModel* target_;
  static GptModel* draft_;
};
GptModel* ShippedPair::target_ = nullptr;
GptModel* ShippedPair::draft_ = nullptr;

TEST_F(ShippedPair, GreedySpeculativeEqualsGreedyPlainTokenForToken) {
  const auto prompts = held_out_prompts(4);
  ASSERT_EQ(prompts.size(), 4u);
  specdec::SpeculativeDecoder speculative(*draft_, *target_);
  specdec::AutoregressiveDecoder plain(*target_);
  specdec::GenerationConfig config;
  config.max_new_tokens = 48;
  config.sampling.temperature = 0.0f;
  std::size_t rejections = 0;
  for (const std::string& prompt : prompts) {
    const auto tokens = encode(prompt);
    const auto reference = plain.generate(tokens, config);
    for (std::size_t k : {1u, 3u, 5u, 8u}) {
      config.draft_length = k;
      const auto result = speculative.generate(tokens, config);
      EXPECT_EQ(result.tokens, reference.tokens) << "prompt '" << prompt << "', K=" << k;
      rejections += result.stats.rejecting_rounds;
    }
  }
  EXPECT_GT(rejections, 0u) << "the draft never disagreed: the test did not exercise rollback";
}

// Regularised upper incomplete gamma Q(a, x): the chi-square survival function is Q(df/2, x/2).
double upper_incomplete_gamma_q(double a, double x) {
  if (x <= 0) return 1.0;
  if (x < a + 1) {  // series for P, then Q = 1 - P
    double term = 1.0 / a, sum = term;
    for (int n = 1; n < 1000; ++n) {
      term *= x / (a + n);
      sum += term;
      if (term < sum * 1e-15) break;
    }
    return 1.0 - sum * std::exp(-x + a * std::log(x) - std::lgamma(a));
  }
  // Continued fraction (modified Lentz) for Q.
  double b = x + 1 - a, c = 1e300, d = 1 / b, h = d;
  for (int i = 1; i < 1000; ++i) {
    const double an = -i * (i - a);
    b += 2;
    d = an * d + b;
    if (std::fabs(d) < 1e-300) d = 1e-300;
    c = b + an / c;
    if (std::fabs(c) < 1e-300) c = 1e-300;
    d = 1 / d;
    const double delta = d * c;
    h *= delta;
    if (std::fabs(delta - 1) < 1e-15) break;
  }
  return std::exp(-x + a * std::log(x) - std::lgamma(a)) * h;
}

// Chi-square p-value of observed counts against expected probabilities; cells expected < 5 are
// pooled into one (the usual validity condition for the chi-square approximation).
double chi_square_p_value(const std::vector<double>& probabilities,
                          const std::vector<std::size_t>& counts, std::size_t runs) {
  double statistic = 0, pooled_expected = 0, pooled_observed = 0;
  std::size_t cells = 0;
  for (std::size_t i = 0; i < probabilities.size(); ++i) {
    const double expected = probabilities[i] * static_cast<double>(runs);
    if (expected < 5) {
      pooled_expected += expected;
      pooled_observed += static_cast<double>(counts[i]);
      continue;
    }
    const double diff = static_cast<double>(counts[i]) - expected;
    statistic += diff * diff / expected;
    ++cells;
  }
  if (pooled_expected > 0) {
    const double diff = pooled_observed - pooled_expected;
    statistic += diff * diff / std::max(pooled_expected, 1e-12);
    ++cells;
  }
  return upper_incomplete_gamma_q(static_cast<double>(cells - 1) / 2, statistic / 2);
}

TEST(ChiSquare, SurvivalFunctionMatchesKnownValues) {
  // Tabulated: chi2(df=1) > 3.841 has p = 0.05; chi2(df=10) > 23.209 has p = 0.01.
  EXPECT_NEAR(upper_incomplete_gamma_q(0.5, 3.841 / 2), 0.05, 1e-3);
  EXPECT_NEAR(upper_incomplete_gamma_q(5.0, 23.209 / 2), 0.01, 1e-4);
}

// First two emitted tokens at T = 1 with top-k = 4 (16 cells): exact probabilities from the
// target's processed rows, against the speculative decoder with K = 2 over many seeds.
TEST_F(ShippedPair, SampledFirstTwoTokensFollowTheTargetDistribution) {
  const auto prompt = encode("Genesis 50:1 And Joseph ");
  specdec::SamplingParams params;
  params.temperature = 1.0f;
  params.top_k = 4;
  std::vector<float> scratch;

  // Exact target distribution of (y1, y2) under the same processing.
  auto row_probabilities = [&](std::vector<token_t> context) {
    const auto rows = target_->target(context, 1);
    const auto dist = specdec::process_logits<float>(rows, params, scratch);
    std::vector<double> p(256);
    for (std::size_t v = 0; v < 256; ++v) p[v] = dist.probability(static_cast<token_t>(v));
    return p;
  };
  const std::vector<double> first = row_probabilities(prompt);
  std::vector<double> joint(256 * 256, 0.0);
  for (std::size_t y1 = 0; y1 < 256; ++y1) {
    if (first[y1] == 0) continue;
    auto context = prompt;
    context.push_back(static_cast<token_t>(y1));
    const std::vector<double> second = row_probabilities(context);
    for (std::size_t y2 = 0; y2 < 256; ++y2) joint[y1 * 256 + y2] = first[y1] * second[y2];
  }

  specdec::SpeculativeDecoder decoder(*draft_, *target_);
  specdec::GenerationConfig config;
  config.draft_length = 2;
  config.max_new_tokens = 2;
  config.sampling = params;
  config.logprobs = false;
  // Each run costs ~3 target rows of a 10.9M-parameter model; sanitizer builds (~10x slower)
  // run fewer, which keeps the check meaningful at a coarser resolution.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_UNDEFINED__)
  constexpr std::size_t kRuns = 300;
#else
  constexpr std::size_t kRuns = 1500;
#endif
  std::vector<std::size_t> counts(256 * 256, 0);
  std::size_t accepted = 0, drafted = 0;
  for (std::size_t run = 0; run < kRuns; ++run) {
    config.seed = 1000 + run;
    const auto result = decoder.generate(prompt, config);
    ASSERT_EQ(result.tokens.size(), 2u);
    ++counts[static_cast<std::size_t>(result.tokens[0]) * 256 +
             static_cast<std::size_t>(result.tokens[1])];
    accepted += result.stats.accepted;
    drafted += result.stats.drafted;
  }
  // Both draft and target disagree sometimes, so corrections (residual samples) are exercised.
  EXPECT_LT(accepted, drafted);
  EXPECT_GT(accepted, 0u);
  // Threshold 1e-4: a correct decoder fails it once in 10,000 seeds-sets; a biased residual at
  // this sample size shifts cells by several standard deviations.
  EXPECT_GT(chi_square_p_value(joint, counts, kRuns), 1e-4);
}

// The BPE draft (models/kjv-bpe-draft.spdc over models/kjv-bpe.tokenizer) drafts text for the
// byte-level target (StringLevelDecoder): greedy output is the target's token for token, with
// draft tokens of several bytes proposing several target tokens per draft call.
TEST_F(ShippedPair, BpeDraftByTextGreedyEqualsGreedyPlainTokenForToken) {
  GptModel bpe_draft = GptModel::from_file(models_dir() + "/kjv-bpe-draft.spdc");
  const auto bpe = specdec::examples::BpeTokenizer::load(models_dir() + "/kjv-bpe.tokenizer");
  ASSERT_EQ(bpe.size(), bpe_draft.vocab_size());
  const specdec::ByteTokenizer bytes;
  specdec::StringLevelDecoder by_text(bpe_draft, bpe, *target_, bytes);
  specdec::AutoregressiveDecoder plain(*target_);
  specdec::GenerationConfig config;
  config.max_new_tokens = 64;
  config.sampling.temperature = 0.0f;
  std::size_t accepted = 0, rejections = 0;
  for (const std::string& prompt : held_out_prompts(3)) {
    const auto tokens = encode(prompt);
    const auto reference = plain.generate(tokens, config);
    for (const std::size_t k : {3u, 8u}) {
      for (const auto verifier : {specdec::VerifierKind::token, specdec::VerifierKind::block}) {
        config.draft_length = k;
        config.verifier = verifier;
        const auto result = by_text.generate(tokens, config);
        EXPECT_EQ(result.tokens, reference.tokens) << "prompt '" << prompt << "', K=" << k;
        accepted += result.stats.accepted;
        rejections += result.stats.rejecting_rounds;
      }
    }
  }
  EXPECT_GT(accepted, 100u) << "the BPE draft's text is rarely the target's";
  EXPECT_GT(rejections, 0u);
  EXPECT_GT(by_text.proposer().work().tokens_per_draft_call(), 1.5)
      << "a BPE token should propose several bytes per draft call";
}

}  // namespace

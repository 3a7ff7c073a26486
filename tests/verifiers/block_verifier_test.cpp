// Block verification (BlockVerifier) is exact, never accepts fewer tokens than token-level
// verification in expectation, reduces to token-level for deterministic drafts, and the
// certification harness (specdec/testing.hpp) catches every mutant of it.
//
// Exact part: certify_round enumerates one round of the library's own strategies, instantiated
// with double, over every branch of their coins (draft tokens, acceptance decisions, final
// token) and compares the law of the first K + 1 tokens (the round's chunk continued by the
// target) with the target's: TV < 1e-9 for K = 1..4, T in {0.7, 1}, no filter, top-k, top-p,
// min-p and a context-dependent logits processor. Mutants must miss that bound by >= 1e-4.
//
// Statistical part: the full float decoder with config.verifier = block passes a χ² test on its
// first three tokens, and the same decoder with an early-exit mutant fails it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "specdec/specdec.hpp"
#include "specdec/testing.hpp"

namespace {

using specdec::BlockVerifier;
using specdec::SamplingParams;
using specdec::StaticDraftLength;
using specdec::token_t;
using specdec::TokenVerifier;
using specdec::testing::ScriptedPair;
using specdec::testing::Sequence;

constexpr double kExact = 1e-9;
constexpr double kMutantMinError = 1e-4;

// ---- cases ---------------------------------------------------------------------------------

enum class Filter { none, top_k, top_p, min_p, processor };

const char* name_of(Filter filter) {
  switch (filter) {
    case Filter::none:
      return "none";
    case Filter::top_k:
      return "top_k";
    case Filter::top_p:
      return "top_p";
    case Filter::min_p:
      return "min_p";
    case Filter::processor:
      return "processor";
  }
  return "?";
}

SamplingParams params_for(float temperature, Filter filter) {
  SamplingParams params;
  params.temperature = temperature;
  switch (filter) {
    case Filter::none:
      break;
    case Filter::top_k:
      params.top_k = 3;
      break;
    case Filter::top_p:
      params.top_p = 0.8f;
      break;
    case Filter::min_p:
      params.min_p = 0.2f;
      break;
    case Filter::processor:
      // Context dependent: penalise the last token, ban (last + 2) mod V after odd lengths.
      params.logits_processor = [](std::span<const token_t> context, std::span<float> logits) {
        const auto last = static_cast<std::size_t>(context.back());
        logits[last] -= 1.5f;
        if (context.size() % 2 == 1) {
          logits[(last + 2) % logits.size()] = -std::numeric_limits<float>::infinity();
        }
      };
      break;
  }
  return params;
}

struct Case {
  std::size_t draft_length;
  float temperature;
  Filter filter;
  std::uint64_t salt;
};

std::string describe(const Case& c) {
  return "K=" + std::to_string(c.draft_length) + " T=" + std::to_string(c.temperature) +
         " filter=" + name_of(c.filter) + " salt=" + std::to_string(c.salt);
}

// Vocabulary by K keeps the enumeration small (V^K draft branches x 2^K decisions x V tokens).
ScriptedPair pair_for(const Case& c) {
  ScriptedPair pair;
  const std::size_t vocab = c.draft_length <= 3 ? 6 : 5;
  pair.target_model = {.salt = c.salt, .vocab = vocab, .scale = 2.0, .bans = c.salt % 2 == 0};
  pair.perturbation = {.salt = c.salt * 31 + 7, .vocab = vocab, .scale = 2.0};
  pair.noise = 0.9;
  pair.params = params_for(c.temperature, c.filter);
  return pair;
}

std::vector<Case> all_cases() {
  std::vector<Case> cases;
  for (std::size_t k = 1; k <= 4; ++k) {
    for (float t : {0.7f, 1.0f}) {
      for (Filter f :
           {Filter::none, Filter::top_k, Filter::top_p, Filter::min_p, Filter::processor}) {
        cases.push_back({k, t, f, 3 + k});
      }
    }
  }
  return cases;
}

const Sequence kContext{1, 2};

// ---- a deterministic proposer (point-mass q), like an n-gram lookup ----------------------------

// Proposes the draft model's argmax, deterministically, and reports point masses.
template <class DraftFn>
struct ArgmaxProposer {
  DraftFn draft;
  std::vector<token_t> tokens = std::vector<token_t>(8);
  std::vector<std::uint8_t> ones = std::vector<std::uint8_t>(8, 1);
  std::vector<double> probabilities = std::vector<double>(8, 1.0);

  template <class Coins>
  specdec::Proposal<double> propose(specdec::DraftRequest& request, Coins& /*coins*/) {
    std::size_t n = 0;
    while (
        n < request.limit &&
        request.draft_more({n, request.limit, std::span<const double>(probabilities.data(), n)})) {
      const std::vector<double> row = draft(std::span<const token_t>(request.context));
      tokens[n] = specdec::argmax(std::span<const double>(row));
      request.context.push_back(tokens[n]);
      ++n;
    }
    specdec::Proposal<double> proposal;
    proposal.tokens = std::span<const token_t>(tokens.data(), n);
    proposal.point_mass = std::span<const std::uint8_t>(ones.data(), n);
    return proposal;
  }
};

// ---- mutants of block verification (restated from the paper, one bug each) --------------------

enum class Mutation {
  none,                // the rule itself, restated here
  early_exit,          // stop at the first coin that fails instead of taking the LAST success
  residual_ignores_w,  // residual max(0, p - q) instead of max(0, w p - q)
  scalar_residual,     // the seed's bug: max(0, p(y) - q(x)) with the drafted token's q(x)
  wrong_bonus_row,     // bonus from row n - 1 instead of row n
};

template <class Scalar>
struct ScalarResidualLaw {  // max(0, p(y) - q_x) for every y: the seed's scalar residual
  specdec::TokenDistribution<Scalar> p;
  double q_x;
  std::size_t vocab_size() const { return p.vocab_size(); }
  token_t sample(double) const { return 0; }  // enumeration only
  double mass(token_t y) const {
    double total = 0;  // the seed fell back to p when its residual vanished
    for (std::size_t v = 0; v < vocab_size(); ++v) total += residual(static_cast<token_t>(v));
    return total > 0 ? residual(y) : static_cast<double>(p.probability(y));
  }
  double residual(token_t y) const {
    return std::max(0.0, static_cast<double>(p.probability(y)) - q_x);
  }
};

struct MutantBlockVerifier {
  Mutation mutation = Mutation::none;

  template <class Scalar, class Coins>
  specdec::VerifyResult verify(const specdec::Proposal<Scalar>& proposal,
                               specdec::TargetRows<Scalar>& target, Coins& coins) const {
    const std::size_t n = proposal.size();
    double w = 1.0;
    std::size_t tau = 0;
    double w_tau = 1.0;
    for (std::size_t i = 1; i <= n; ++i) {
      const token_t x = proposal.tokens[i - 1];
      w = std::min(1.0, w * target.distribution(i - 1).probability(x) / proposal.q(i - 1, x));
      double h = w;
      if (i < n) {
        const auto& p = target.distribution(i);
        double z = 0;
        for (std::size_t v = 0; v < p.vocab_size(); ++v) {
          z += std::max(0.0, w * p.probability(static_cast<token_t>(v)) -
                                 proposal.q(i, static_cast<token_t>(v)));
        }
        h = z + 1.0 - w > 0 ? z / (z + 1.0 - w) : 1.0;
      }
      const bool success = coins.accept(i - 1, h);
      if (success) {
        tau = i;
        w_tau = w;
      } else if (mutation == Mutation::early_exit) {
        break;
      }
    }
    if (tau == n) {
      const std::size_t row = mutation == Mutation::wrong_bonus_row && n > 0 ? n - 1 : n;
      return {
          n,
          coins.draw(specdec::DistributionLaw<Scalar>{target.distribution(row), target.scratch()}),
          true};
    }
    const auto& p = target.distribution(tau);
    if (mutation == Mutation::scalar_residual) {
      const token_t x = proposal.tokens[tau];
      return {tau,
              coins.draw(ScalarResidualLaw<Scalar>{p, static_cast<double>(proposal.q(tau, x))}),
              false};
    }
    const double scale = mutation == Mutation::residual_ignores_w ? 1.0 : w_tau;
    return {tau,
            coins.draw(specdec::ResidualLaw<Scalar>{p, proposal.q_weights.row(tau),
                                                    proposal.q_normalizers[tau],
                                                    static_cast<Scalar>(scale), target.scratch()}),
            false};
  }
};

template <class VerifierT>
specdec::testing::RoundCertificate certify(const Case& c, const VerifierT& verifier) {
  const ScriptedPair pair = pair_for(c);
  auto draft = pair.draft();
  const specdec::ModelProposer proposer(draft);
  return specdec::testing::certify_round(proposer, StaticDraftLength{}, verifier, pair.target(),
                                         pair.params, kContext, c.draft_length);
}

// ---- exactness and acceptance
// --------------------------------------------------------------------

TEST(BlockVerifierTest, ExactByEnumerationAndNeverAcceptsFewerThanTokenLevel) {
  std::size_t strictly_better = 0;
  std::size_t branches = 0;
  double max_tv = 0;
  for (const Case& c : all_cases()) {
    SCOPED_TRACE(describe(c));
    const auto block = certify(c, BlockVerifier{});
    const auto token = certify(c, TokenVerifier{});
    EXPECT_LT(block.total_variation, kExact);
    EXPECT_LT(token.total_variation, kExact);
    EXPECT_GE(block.expected_accepted, token.expected_accepted - 1e-12);
    if (block.expected_accepted > token.expected_accepted + 1e-6) ++strictly_better;
    max_tv = std::max({max_tv, block.total_variation, token.total_variation});
    branches += block.branches + token.branches;
    // The restated rule (the mutants' baseline) agrees with the library.
    if (c.draft_length <= 2) {
      const auto restated = certify(c, MutantBlockVerifier{Mutation::none});
      EXPECT_LT(restated.total_variation, kExact);
      EXPECT_NEAR(restated.expected_accepted, block.expected_accepted, 1e-12);
    }
  }
  // K = 1 is token-level by construction; from K = 2 on block verification gains somewhere.
  EXPECT_GE(strictly_better, 10u);
  std::printf("max TV over %zu cases (%zu enumerated runs): %.3g; block > token-level in %zu\n",
              all_cases().size(), branches, max_tv, strictly_better);
}

TEST(BlockVerifierTest, EqualsTokenLevelForOneDraftedToken) {
  for (const Case& c : all_cases()) {
    if (c.draft_length != 1) continue;
    SCOPED_TRACE(describe(c));
    const ScriptedPair pair = pair_for(c);
    auto draft = pair.draft();
    const specdec::ModelProposer proposer(draft);
    const auto block = specdec::testing::round_law(proposer, StaticDraftLength{}, BlockVerifier{},
                                                   pair.target(), pair.params, kContext, 1);
    const auto token = specdec::testing::round_law(proposer, StaticDraftLength{}, TokenVerifier{},
                                                   pair.target(), pair.params, kContext, 1);
    EXPECT_LT(specdec::testing::total_variation(block.chunks, token.chunks), 1e-12);
  }
}

TEST(BlockVerifierTest, ReducesToTokenLevelForPointMassDrafts) {
  for (const Case& c : all_cases()) {
    SCOPED_TRACE(describe(c));
    const ScriptedPair pair = pair_for(c);
    const ArgmaxProposer<ScriptedPair::Draft<double>> proposer{pair.draft()};
    const auto block =
        specdec::testing::round_law(proposer, StaticDraftLength{}, BlockVerifier{}, pair.target(),
                                    pair.params, kContext, c.draft_length);
    const auto token =
        specdec::testing::round_law(proposer, StaticDraftLength{}, TokenVerifier{}, pair.target(),
                                    pair.params, kContext, c.draft_length);
    EXPECT_LT(specdec::testing::total_variation(block.chunks, token.chunks), 1e-12);
    EXPECT_NEAR(block.expected_accepted, token.expected_accepted, 1e-12);
    const auto cert =
        specdec::testing::certify_round(proposer, StaticDraftLength{}, BlockVerifier{},
                                        pair.target(), pair.params, kContext, c.draft_length);
    EXPECT_LT(cert.total_variation, kExact);
  }
}

TEST(BlockVerifierTest, DecoderLawOfFirstTokensUnderTheBudgetRule) {
  // Rounds composed as the decoder composes them (limit = min(K, remaining - 1)).
  for (const Case& c : all_cases()) {
    if (c.draft_length > 3) continue;  // the budget caps the first round at 2 drafts anyway
    SCOPED_TRACE(describe(c));
    const ScriptedPair pair = pair_for(c);
    auto draft = pair.draft();
    const specdec::ModelProposer proposer(draft);
    const auto law =
        specdec::testing::speculative_law(proposer, StaticDraftLength{}, BlockVerifier{},
                                          pair.target(), pair.params, kContext, 3, c.draft_length);
    const auto target = specdec::testing::target_law(pair.target(), pair.params, kContext, 3);
    EXPECT_LT(specdec::testing::total_variation(law, target), kExact);
  }
}

// ---- mutants the harness must catch -------------------------------------------------------------

double worst_error(Mutation mutation) {
  double worst = 0;
  for (const Case& c : all_cases()) {
    if (c.draft_length < 2 || c.draft_length > 3) continue;
    worst = std::max(worst, certify(c, MutantBlockVerifier{mutation}).total_variation);
  }
  return worst;
}

TEST(BlockVerifierMutantTest, EarlyExitIsCaught) {
  EXPECT_GT(worst_error(Mutation::early_exit), kMutantMinError);
}
TEST(BlockVerifierMutantTest, ResidualIgnoringWIsCaught) {
  EXPECT_GT(worst_error(Mutation::residual_ignores_w), kMutantMinError);
}
TEST(BlockVerifierMutantTest, ScalarResidualIsCaught) {
  EXPECT_GT(worst_error(Mutation::scalar_residual), kMutantMinError);
}
TEST(BlockVerifierMutantTest, BonusFromTheWrongRowIsCaught) {
  EXPECT_GT(worst_error(Mutation::wrong_bonus_row), kMutantMinError);
}

// ---- the full float decoder ---------------------------------------------------------------------

constexpr std::size_t kVocab = 5;
constexpr std::size_t kRuns = 60'000;
constexpr double kMinPValue = 1e-4;

struct FloatModels {
  ScriptedPair pair;
  ScriptedPair::Draft<float> draft{&pair};
  ScriptedPair::Target<float> target{&pair};
};

template <class Decoder>
std::vector<std::uint64_t> first_three_counts(Decoder& decoder, specdec::GenerationConfig config) {
  std::vector<std::uint64_t> counts(kVocab * kVocab * kVocab, 0);
  config.max_new_tokens = 3;
  for (std::size_t run = 0; run < kRuns; ++run) {
    config.seed = 1000 + run;
    const auto result = decoder.generate(kContext, config);
    const auto& t = result.tokens;
    ++counts[(static_cast<std::size_t>(t[0]) * kVocab + static_cast<std::size_t>(t[1])) * kVocab +
             static_cast<std::size_t>(t[2])];
  }
  return counts;
}

std::vector<double> target_three_token_law(const ScriptedPair& pair) {
  std::vector<double> law(kVocab * kVocab * kVocab, 0.0);
  for (const auto& [s, p] : specdec::testing::target_law(pair.target(), pair.params, kContext, 3)) {
    law[(static_cast<std::size_t>(s[0]) * kVocab + static_cast<std::size_t>(s[1])) * kVocab +
        static_cast<std::size_t>(s[2])] = p;
  }
  return law;
}

FloatModels float_models(float temperature, Filter filter) {
  FloatModels models;
  models.pair.target_model = {.salt = 11, .vocab = kVocab, .scale = 2.0};
  models.pair.perturbation = {.salt = 12, .vocab = kVocab, .scale = 2.0};
  models.pair.noise = 1.0;
  models.pair.params = params_for(temperature, filter);
  return models;
}

TEST(BlockVerifierStatisticalTest, FullDecoderFollowsTheTarget) {
  for (Filter filter : {Filter::none, Filter::top_p, Filter::processor}) {
    SCOPED_TRACE(name_of(filter));
    FloatModels models = float_models(0.8f, filter);
    specdec::SpeculativeDecoder decoder(models.draft, models.target);
    specdec::GenerationConfig config;
    config.draft_length = 3;
    config.sampling = models.pair.params;
    config.verifier = specdec::VerifierKind::block;
    const auto counts = first_three_counts(decoder, config);
    const auto fit = specdec::testing::chi_square_test(counts, target_three_token_law(models.pair));
    EXPECT_EQ(fit.impossible, 0u);
    EXPECT_GT(fit.p_value, kMinPValue) << "chi2 = " << fit.statistic << " over " << fit.cells;
  }
}

TEST(BlockVerifierStatisticalTest, EarlyExitMutantFailsTheSameTest) {
  FloatModels models = float_models(0.8f, Filter::none);
  specdec::StrategyDecoder decoder(models.target, specdec::ModelProposer(models.draft),
                                   StaticDraftLength{}, MutantBlockVerifier{Mutation::early_exit});
  specdec::GenerationConfig config;
  config.draft_length = 3;
  config.sampling = models.pair.params;
  const auto counts = first_three_counts(decoder, config);
  const auto fit = specdec::testing::chi_square_test(counts, target_three_token_law(models.pair));
  EXPECT_LT(fit.p_value, kMinPValue) << "the early-exit mutant passed: the test is blind";
}

TEST(BlockVerifierTest, GreedyIsArgmaxMatchingWhateverTheVerifier) {
  FloatModels models = float_models(0.0f, Filter::none);
  specdec::SpeculativeDecoder decoder(models.draft, models.target);
  specdec::AutoregressiveDecoder plain(models.target);
  specdec::GenerationConfig config;
  config.draft_length = 4;
  config.max_new_tokens = 40;
  config.sampling.temperature = 0;
  const auto expected = plain.generate(kContext, config);
  config.verifier = specdec::VerifierKind::block;
  const auto got = decoder.generate(kContext, config);
  EXPECT_EQ(got.tokens, expected.tokens);
  EXPECT_EQ(got.logprobs, expected.logprobs);
}

// ---- the harness polices the coin contract
// -------------------------------------------------------

struct ReadsACoinTwice {
  template <class Scalar, class Coins>
  specdec::VerifyResult verify(const specdec::Proposal<Scalar>& proposal,
                               specdec::TargetRows<Scalar>& target, Coins& coins) const {
    (void)coins.accept(0, 0.5);
    (void)coins.accept(0, 0.7);
    return {0,
            coins.draw(specdec::DistributionLaw<Scalar>{target.distribution(0), target.scratch()}),
            proposal.size() == 0};
  }
};

TEST(CertificationHarnessTest, RejectsAVerifierThatReadsACoinTwice) {
  const Case c{2, 1.0f, Filter::none, 5};
  EXPECT_THROW((void)certify(c, ReadsACoinTwice{}), std::logic_error);
}

TEST(CertificationHarnessTest, BranchProbabilitiesSumToOne) {
  const Case c{3, 0.7f, Filter::none, 6};
  const ScriptedPair pair = pair_for(c);
  auto draft = pair.draft();
  const specdec::ModelProposer proposer(draft);
  const auto law = specdec::testing::round_law(proposer, StaticDraftLength{}, BlockVerifier{},
                                               pair.target(), pair.params, kContext, 3);
  double total = 0;
  for (const auto& [chunk, p] : law.chunks) total += p;
  EXPECT_NEAR(total, 1.0, 1e-12);
  EXPECT_GT(law.branches, 1000u);  // 6^3 drafts x up to 2^3 decisions x final tokens
}

// ---------------------------------------------------------------------------------------------
// The running weights w_i of a backward scan: bit-identical to the direct recurrence, and a
// full scan of n = 4096 positions takes O(n * 64) steps, not n^2 / 2 (found by the fuzzer: a
// rejecting block-verification round at K = 4096 took seconds).

TEST(BlockVerifierRunningWeights, BitIdenticalToTheDirectRecurrenceAndLinearInN) {
  for (const std::size_t n :
       {std::size_t{0}, std::size_t{1}, std::size_t{5}, std::size_t{64}, std::size_t{65},
        std::size_t{1000}, std::size_t{4096}, std::size_t{5000}}) {
    std::vector<double> ratios(n);
    for (std::size_t j = 0; j < n; ++j) {  // clipping (ratio > 1), zeros and small ratios
      ratios[j] = j % 7 == 0 ? 3.0 : j % 97 == 96 ? 0.0 : 0.5 + 0.1 * static_cast<double>(j % 5);
    }
    std::size_t steps = 0;
    const auto step = [&](std::size_t j, double w) {
      ++steps;
      return std::min(1.0, w * ratios[j]);
    };
    std::vector<double> direct(n + 1, 1.0);
    for (std::size_t j = 0; j < n; ++j) direct[j + 1] = std::min(1.0, direct[j] * ratios[j]);

    const specdec::detail::RunningWeights weights(n, step);
    for (std::size_t i = n + 1; i-- > 0;) {  // the verifier's order: n, n-1, ..., 0
      EXPECT_EQ(weights.at(i, step), direct[i]) << "n = " << n << ", i = " << i;
    }
    const std::size_t stride = std::max<std::size_t>(1, (n + 63) / 64);
    EXPECT_LE(steps, n + (n + 1) * stride) << "n = " << n;
  }
}

}  // namespace

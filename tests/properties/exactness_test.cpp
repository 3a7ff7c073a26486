// Exact enumeration: speculative sampling, run as the library's own strategies (ModelProposer,
// StaticDraftLength, TokenVerifier) instantiated with double, emits exactly the target's
// autoregressive distribution.
//
// The certification harness (specdec/testing.hpp) replaces the decoder's coins with
// EnumeratingCoins: every draft draw branches over the tokens of its law, every acceptance coin
// over accept / reject, the final coin over the correction or bonus law, each branch weighted by
// its exact probability. speculative_law() composes rounds under the decoder's budget rule
// (limit = min(K, remaining - 1)); target_law() is the target alone, token by token:
//   P_spec(t_1..t_L) == prod_i p(t_i | prompt, t_<i)      (TV and max abs error < 1e-9)
// The "unlimited" budget (K drafted every round, the law of the first L tokens) is checked two
// ways: certify_round() from every context such a run can start a round in, and the decoder's
// law with a budget of L + K tokens (whose rounds all draft K before L tokens are out) cut to
// its first L tokens.
//
// Besides the library's TokenVerifier, a re-statement of the rule written here from the math
// (acceptance_probability, residual_distribution) is certified the same way; it is also the
// baseline of the power checks: the same verifier with the seed's bugs injected (the scalar
// residual, the bonus from the wrong target row) must miss the bound by orders of magnitude, so
// a pass here means something.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "specdec/specdec.hpp"
#include "specdec/testing.hpp"

#include "../restated_token_verifier.hpp"

namespace {

using specdec_test::Mutation;
using specdec_test::RestatedTokenVerifier;

using specdec::SamplingParams;
using specdec::StaticDraftLength;
using specdec::token_t;
using specdec::TokenDistribution;
using specdec::TokenVerifier;
using specdec::VerifyResult;
using specdec::testing::Law;
using specdec::testing::ScriptedModel;
using specdec::testing::ScriptedPair;
using specdec::testing::Sequence;

constexpr double kExactnessBound = 1e-9;
// A broken verification step must miss the bound by at least this much (>= 1e5 x the bound).
constexpr double kMutantMinError = 1e-4;

const Sequence kPrompt{1, 2};

// ---- laws --------------------------------------------------------------------------------------

double total_mass(const Law& law) {
  double sum = 0;
  for (const auto& [seq, p] : law) sum += p;
  return sum;
}

// The verification rule restated and its two mutants: tests/restated_token_verifier.hpp.

// ---- cases -----------------------------------------------------------------------------------

struct ModeCase {
  std::string name;
  SamplingParams params;
};

std::vector<ModeCase> sampling_modes() {
  std::vector<ModeCase> modes;
  auto add = [&](std::string name, float temperature, int top_k, float top_p, float min_p) {
    SamplingParams params;
    params.temperature = temperature;
    params.top_k = top_k;
    params.top_p = top_p;
    params.min_p = min_p;
    modes.push_back({std::move(name), params});
  };
  add("T=1", 1.0f, 0, 1.0f, 0.0f);
  add("T=0.7", 0.7f, 0, 1.0f, 0.0f);
  add("top_k=2", 1.0f, 2, 1.0f, 0.0f);
  add("top_p=0.7", 1.0f, 0, 0.7f, 0.0f);
  add("min_p=0.2", 1.0f, 0, 1.0f, 0.2f);
  add("T=1.3,top_k=3,top_p=0.9,min_p=0.05", 1.3f, 3, 0.9f, 0.05f);
  // Context dependent: penalise the last token, ban (last + 2) mod V after odd lengths.
  SamplingParams processed;
  processed.temperature = 0.9f;
  processed.logits_processor = [](std::span<const token_t> context, std::span<float> logits) {
    const auto last = static_cast<std::size_t>(context.back());
    logits[last] -= 1.5f;
    if (context.size() % 2 == 1) {
      logits[(last + 2) % logits.size()] = -std::numeric_limits<float>::infinity();
    }
  };
  modes.push_back({"T=0.9+processor", processed});
  return modes;
}

struct ModelCase {
  std::string name;
  std::size_t vocab;
  bool bans;
  double noise;  // draft = target + noise * unrelated logits
};

std::vector<ModelCase> model_cases() {
  return {
      {"V=5,close_draft", 5, false, 0.5},
      {"V=5,far_draft,banned_tokens", 5, true, 1.5},
      {"V=3,identical_draft", 3, false, 0.0},
  };
}

ScriptedPair make_pair(const ModelCase& model, const SamplingParams& params) {
  ScriptedPair pair;
  pair.target_model = {.salt = 11, .vocab = model.vocab, .scale = 2.0, .bans = model.bans};
  pair.perturbation = {.salt = 23, .vocab = model.vocab, .scale = 2.0, .bans = model.bans};
  pair.noise = model.noise;
  pair.params = params;
  return pair;
}

// Draft lengths and how many tokens to follow: L = K + 1 (one full round incl. the bonus) and
// L = 3 for K = 1 (several rounds composed).
std::vector<std::pair<std::size_t, std::size_t>> length_cases() {
  return {{1, 2}, {1, 3}, {2, 3}, {3, 4}};
}

std::string describe(const std::string& what, std::size_t draft_length, std::size_t length) {
  return what + " K=" + std::to_string(draft_length) + " L=" + std::to_string(length);
}

// ---- the checks ------------------------------------------------------------------------------

struct Worst {
  double error = 0;
  std::size_t laws = 0;
  void add(double e) {
    error = std::max(error, e);
    ++laws;
  }
};

// Exact under the decoder's budget (max_new_tokens = L): the law of the L emitted tokens.
template <class VerifierT>
void expect_exact_under_budget(const ScriptedPair& pair, const VerifierT& verifier,
                               std::size_t draft_length, std::size_t length, const Law& expected,
                               Worst& worst) {
  auto draft = pair.draft();
  const specdec::ModelProposer proposer(draft);
  const Law got =
      specdec::testing::speculative_law(proposer, StaticDraftLength{}, verifier, pair.target(),
                                        pair.params, kPrompt, length, draft_length);
  const double tv = specdec::testing::total_variation(got, expected);
  const double error = specdec::testing::max_abs_difference(got, expected);
  worst.add(std::max(tv, error));
  EXPECT_LT(tv, kExactnessBound) << "budget=L";
  EXPECT_LT(error, kExactnessBound) << "budget=L";
  EXPECT_NEAR(total_mass(got), 1.0, 1e-12) << "budget=L";
  for (const auto& [seq, p] : got) {
    EXPECT_EQ(seq.size(), length) << "budget=L: the decoder's budget is exact";
  }
}

// Exact with K drafted every round (no budget cut before L tokens are out): every round a run
// can start before L tokens is certified, and the composed law of the first L tokens is exact.
template <class VerifierT>
void expect_exact_unlimited(const ScriptedPair& pair, const VerifierT& verifier,
                            std::size_t draft_length, std::size_t length, const Law& expected,
                            Worst& worst) {
  auto draft = pair.draft();
  const specdec::ModelProposer proposer(draft);
  for (std::size_t emitted = 0; emitted < length; ++emitted) {
    for (const auto& [prefix, p] :
         specdec::testing::target_law(pair.target(), pair.params, kPrompt, emitted)) {
      Sequence context = kPrompt;
      context.insert(context.end(), prefix.begin(), prefix.end());
      const auto cert =
          specdec::testing::certify_round(proposer, StaticDraftLength{}, verifier, pair.target(),
                                          pair.params, context, draft_length);
      worst.add(cert.total_variation);
      EXPECT_LT(cert.total_variation, kExactnessBound)
          << "unlimited: round from a context of " << context.size() << " tokens";
    }
  }
  // K drafted every round; the law of the first L tokens.
  const Law got = specdec::testing::speculative_law(
      proposer, StaticDraftLength{}, verifier, pair.target(), pair.params, kPrompt, length,
      draft_length, specdec::testing::Budget::unlimited);
  const double error = specdec::testing::max_abs_difference(got, expected);
  worst.add(error);
  EXPECT_LT(specdec::testing::total_variation(got, expected), kExactnessBound) << "unlimited";
  EXPECT_LT(error, kExactnessBound) << "unlimited";
  EXPECT_NEAR(total_mass(got), 1.0, 1e-12) << "unlimited";
}

TEST(ExactnessTest, SpeculativeSamplingEqualsTargetDistribution) {
  Worst worst;
  for (const ModelCase& model : model_cases()) {
    for (const ModeCase& mode : sampling_modes()) {
      const ScriptedPair pair = make_pair(model, mode.params);
      for (const auto& [draft_length, length] : length_cases()) {
        SCOPED_TRACE(describe(model.name + " " + mode.name, draft_length, length));
        const Law expected =
            specdec::testing::target_law(pair.target(), pair.params, kPrompt, length);
        ASSERT_NEAR(total_mass(expected), 1.0, 1e-12);
        {
          SCOPED_TRACE("verifier library (TokenVerifier)");
          expect_exact_under_budget(pair, TokenVerifier{}, draft_length, length, expected, worst);
          expect_exact_unlimited(pair, TokenVerifier{}, draft_length, length, expected, worst);
        }
        {
          SCOPED_TRACE("verifier restated");
          const RestatedTokenVerifier restated{};
          expect_exact_under_budget(pair, restated, draft_length, length, expected, worst);
          expect_exact_unlimited(pair, restated, draft_length, length, expected, worst);
        }
      }
    }
  }
  std::printf("[ exact ] %zu laws and rounds compared, worst error %.3g\n", worst.laws,
              worst.error);
}

// The draft's support differs from the target's and one side is sometimes nearly a point mass:
// acceptance probabilities of exactly 0 and 1 and residuals concentrated on tokens the draft
// never proposes must all be handled.
TEST(ExactnessTest, DisjointSupportsAndSharpDistributions) {
  ScriptedPair pair;
  pair.target_model = {.salt = 101, .vocab = 4, .scale = 9.0, .bans = true};
  pair.perturbation = {.salt = 202, .vocab = 4, .scale = 9.0, .bans = true};
  pair.noise = 1.0;
  Worst worst;
  for (float temperature : {1.0f, 0.4f}) {
    pair.params.temperature = temperature;
    for (std::size_t draft_length : {1u, 2u, 3u}) {
      const std::size_t length = draft_length + 1;
      SCOPED_TRACE(describe("T=" + std::to_string(temperature), draft_length, length));
      const Law expected =
          specdec::testing::target_law(pair.target(), pair.params, kPrompt, length);
      expect_exact_under_budget(pair, TokenVerifier{}, draft_length, length, expected, worst);
      expect_exact_under_budget(pair, RestatedTokenVerifier{}, draft_length, length, expected,
                                worst);
      auto draft = pair.draft();
      const specdec::ModelProposer proposer(draft);
      EXPECT_LT(specdec::testing::certify_round(proposer, StaticDraftLength{}, TokenVerifier{},
                                                pair.target(), pair.params, kPrompt, draft_length)
                    .total_variation,
                kExactnessBound);
    }
  }
  std::printf("[ exact ] disjoint supports: %zu laws, worst error %.3g\n", worst.laws, worst.error);
}

// verify_stochastic (the pure function of verify.hpp) and TokenVerifier are one rule: given the
// same proposal, target rows and coins they return the same verdict, so the certificate of
// TokenVerifier above covers verify_stochastic too.
TEST(ExactnessTest, VerifyStochasticIsTokenVerifierCoinForCoin) {
  std::size_t compared = 0;
  std::size_t rejections = 0;
  for (const ModelCase& model : model_cases()) {
    for (const ModeCase& mode : sampling_modes()) {
      const ScriptedPair pair = make_pair(model, mode.params);
      auto draft = pair.draft();
      specdec::ModelProposer proposer(draft);
      for (std::size_t draft_length : {1u, 2u, 3u}) {
        specdec::Rng rng(1000 * draft_length + compared);
        for (int proposal_index = 0; proposal_index < 40; ++proposal_index) {
          std::vector<token_t> context = kPrompt;
          std::size_t vocab_size = 0;
          specdec::DecodeStats stats;
          specdec::DraftRequest request(context, draft_length, pair.params, vocab_size, stats);
          StaticDraftLength policy;
          request.bind_policy(policy);
          specdec::DraftCoins draft_coins(rng);
          const auto proposal = proposer.propose(request, draft_coins);
          const std::size_t n = proposal.size();
          ASSERT_EQ(n, draft_length);
          context.resize(kPrompt.size());
          context.insert(context.end(), proposal.tokens.begin(), proposal.tokens.end());
          const std::vector<double> rows = pair.target()(context, n + 1);
          const specdec::LogitsRows<double> view(std::span<const double>(rows), pair.vocab());
          for (int coin_index = 0; coin_index < 25; ++coin_index) {
            std::vector<double> coins(n);
            for (double& coin : coins) coin = rng.uniform01();
            const double final_coin = rng.uniform01();
            specdec::TargetRowBuffers<double> buffers_a, buffers_b;
            specdec::TargetRows<double> rows_a(view, context, kPrompt.size(), pair.params, false,
                                               buffers_a);
            specdec::TargetRows<double> rows_b(view, context, kPrompt.size(), pair.params, false,
                                               buffers_b);
            const specdec::VerificationCoins verification_coins(coins, final_coin);
            const VerifyResult a = TokenVerifier{}.verify(proposal, rows_a, verification_coins);
            const VerifyResult b = specdec::verify_stochastic(
                proposal.tokens, proposal.q_weights, proposal.q_normalizers,
                [&](std::size_t j) { return rows_b.distribution(j); },
                std::span<const double>(coins), final_coin, rows_b.scratch());
            EXPECT_EQ(a.accepted, b.accepted) << model.name << " " << mode.name;
            EXPECT_EQ(a.next_token, b.next_token) << model.name << " " << mode.name;
            EXPECT_EQ(a.bonus, b.bonus) << model.name << " " << mode.name;
            ++compared;
            rejections += static_cast<std::size_t>(!a.bonus);
          }
        }
      }
    }
  }
  EXPECT_GT(rejections, compared / 10) << "too few rejections to compare the residual paths";
  std::printf("[ exact ] verify_stochastic == TokenVerifier on %zu verifications (%zu rejected)\n",
              compared, rejections);
}

// ---- power checks: the same harness must catch the seed's bugs -------------------------------

struct MutantErrors {
  double speculative = 0;  // worst max-abs error of the decoder's law (budget L) over the cases
  double round = 0;        // worst total variation of certify_round over the cases
};

MutantErrors worst_errors_over_cases(Mutation mutation) {
  MutantErrors worst;
  const RestatedTokenVerifier verifier{mutation};
  for (const ModelCase& model : model_cases()) {
    if (model.noise == 0.0) continue;  // identical draft: nothing is ever rejected
    for (const ModeCase& mode : sampling_modes()) {
      const ScriptedPair pair = make_pair(model, mode.params);
      auto draft = pair.draft();
      const specdec::ModelProposer proposer(draft);
      for (const auto& [draft_length, length] : length_cases()) {
        const Law got = specdec::testing::speculative_law(proposer, StaticDraftLength{}, verifier,
                                                          pair.target(), pair.params, kPrompt,
                                                          length, draft_length);
        worst.speculative = std::max(
            worst.speculative,
            specdec::testing::max_abs_difference(
                got, specdec::testing::target_law(pair.target(), pair.params, kPrompt, length)));
        worst.round = std::max(worst.round, specdec::testing::certify_round(
                                                proposer, StaticDraftLength{}, verifier,
                                                pair.target(), pair.params, kPrompt, draft_length)
                                                .total_variation);
      }
    }
  }
  return worst;
}

// On a plain T = 1 case with a close draft (K = 1, L = 2) a mutant must already fail the bound.
double one_case_error(Mutation mutation) {
  const ScriptedPair pair = make_pair(model_cases()[0], sampling_modes()[0].params);
  auto draft = pair.draft();
  const specdec::ModelProposer proposer(draft);
  return specdec::testing::max_abs_difference(
      specdec::testing::speculative_law(proposer, StaticDraftLength{},
                                        RestatedTokenVerifier{mutation}, pair.target(), pair.params,
                                        kPrompt, 2, 1),
      specdec::testing::target_law(pair.target(), pair.params, kPrompt, 2));
}

void expect_mutant_detected(Mutation mutation) {
  const MutantErrors errors = worst_errors_over_cases(mutation);
  const double one_case = one_case_error(mutation);
  ::testing::Test::RecordProperty("max_abs_error", std::to_string(errors.speculative));
  EXPECT_GT(errors.speculative, kMutantMinError)
      << specdec_test::name_of(mutation) << " mutant looked exact: the test is blind";
  EXPECT_GT(errors.round, kMutantMinError)
      << specdec_test::name_of(mutation) << " mutant passed certify_round: the harness is blind";
  EXPECT_GT(one_case, kMutantMinError) << specdec_test::name_of(mutation);
  std::printf("[ power ] %s: worst error %.3g (round TV %.3g), V=5 T=1 K=1 L=2: %.3g\n",
              specdec_test::name_of(mutation), errors.speculative, errors.round, one_case);
}

TEST(ExactnessPowerTest, ScalarResidualMutantIsDetected) {
  expect_mutant_detected(Mutation::scalar_residual);
}

TEST(ExactnessPowerTest, WrongBonusRowMutantIsDetected) {
  expect_mutant_detected(Mutation::wrong_bonus_row);
}

// The harness refuses a verdict that keeps more tokens than were drafted (instead of building a
// chunk past the proposal): the decoder's budget can only hold if verifiers respect it.
struct AcceptsOneTooMany {
  template <class Scalar, class Coins>
  VerifyResult verify(const specdec::Proposal<Scalar>& proposal,
                      specdec::TargetRows<Scalar>& /*target*/, Coins& /*coins*/) const {
    return {proposal.size() + 1, 0, true};
  }
};

TEST(ExactnessPowerTest, HarnessRejectsAVerdictBeyondTheProposal) {
  const ScriptedPair pair = make_pair(model_cases()[0], sampling_modes()[0].params);
  auto draft = pair.draft();
  const specdec::ModelProposer proposer(draft);
  EXPECT_THROW(
      (void)specdec::testing::speculative_law(proposer, StaticDraftLength{}, AcceptsOneTooMany{},
                                              pair.target(), pair.params, kPrompt, 3, 2),
      std::logic_error);
}

// ---- greedy: a point mass on the target's argmax path ---------------------------------------

// Independent reference: argmax, lowest index on ties, written out here.
Sequence greedy_target(const ScriptedModel& target, const Sequence& prompt, std::size_t length) {
  Sequence context = prompt;
  for (std::size_t n = 0; n < length; ++n) {
    const std::vector<double> row = target.logits(context);
    std::size_t best = 0;
    for (std::size_t v = 1; v < row.size(); ++v) {
      if (row[v] > row[best]) best = v;
    }
    context.push_back(static_cast<token_t>(best));
  }
  return Sequence(context.begin() + static_cast<std::ptrdiff_t>(prompt.size()), context.end());
}

TEST(ExactnessTest, GreedyIsAPointMassOnTheTargetArgmaxPath) {
  std::size_t ties_seen = 0;
  for (double quantum : {0.0, 1.0}) {  // 1.0: logits on an integer grid, many exact ties
    ScriptedPair pair;
    pair.target_model = {.salt = 31, .vocab = 5, .scale = 2.5, .quantum = quantum};
    pair.perturbation = {.salt = 47, .vocab = 5, .scale = 2.5, .quantum = quantum};
    pair.noise = 1.0;
    pair.params.temperature = 0.0f;
    auto draft = pair.draft();
    const specdec::ModelProposer proposer(draft);
    for (token_t a = 0; a < 5; ++a) {
      for (token_t b = 0; b < 5; ++b) {
        const Sequence prompt{a, b};
        const std::vector<double> row = pair.target_model.logits(prompt);
        const double top = *std::max_element(row.begin(), row.end());
        ties_seen += static_cast<std::size_t>(std::count(row.begin(), row.end(), top) > 1);
        for (std::size_t draft_length = 1; draft_length <= 3; ++draft_length) {
          for (std::size_t length = 1; length <= 6; ++length) {
            const Law expected{{greedy_target(pair.target_model, prompt, length), 1.0}};
            const Law got = specdec::testing::speculative_law(
                proposer, StaticDraftLength{}, TokenVerifier{}, pair.target(), pair.params, prompt,
                length, draft_length);
            EXPECT_EQ(got, expected)
                << "prompt " << a << "," << b << " K=" << draft_length << " L=" << length;
            EXPECT_EQ(specdec::testing::target_law(pair.target(), pair.params, prompt, length),
                      expected);
          }
        }
      }
    }
  }
  EXPECT_GT(ties_seen, 3u) << "the tie grid no longer produces ties; the test lost its edge";
}

}  // namespace

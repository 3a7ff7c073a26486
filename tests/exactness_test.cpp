// Exact enumeration: speculative sampling, built from specdec's own kernels instantiated with
// double, emits exactly the target's autoregressive distribution.
//
// The decoder is a deterministic function of its coins (draft coins, acceptance coins, one final
// coin per round). Every kernel it calls is piecewise constant in each coin: inverse-CDF
// sampling is constant on the cells [C(i-1), C(i)) / W of its weights, an acceptance test is
// constant on [0, a) and [a, 1). So the law of the emitted tokens is an exact, finite sum over
// those cells: evaluate the kernels once per cell (at its midpoint) and weight the result by the
// cell's width. We do that for whole rounds and compose rounds over every reachable committed
// prefix until L tokens are emitted, then compare with the target alone, token by token:
//   P_spec(t_1..t_L) == prod_i p(t_i | prompt, t_<i)      (max abs error < 1e-9)
//
// Power checks: the same harness with a deliberately broken verification step (the seed's
// scalar residual, and the bonus taken from the wrong target row) must miss the bound by orders
// of magnitude, so a pass here means something.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <map>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "specdec/sampling.hpp"
#include "specdec/softmax.hpp"
#include "specdec/types.hpp"
#include "specdec/verify.hpp"

namespace {

using specdec::LogitsRows;
using specdec::SamplingParams;
using specdec::token_t;
using specdec::TokenDistribution;
using Sequence = std::vector<token_t>;
using Law = std::map<Sequence, double>;  // emitted tokens -> probability

constexpr double kExactnessBound = 1e-9;
// A broken verification step must miss the bound by at least this much (>= 1e5 x the bound).
constexpr double kMutantMinError = 1e-4;
constexpr double kInf = std::numeric_limits<double>::infinity();

// ---- deterministic, context-dependent toy models ------------------------------------------------

std::uint64_t mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Uniform in [0, 1), a pure function of the arguments.
double hash_unit(std::uint64_t salt, std::uint64_t a, std::uint64_t b, std::uint64_t c,
                 std::uint64_t d) {
  const std::uint64_t h = mix(mix(mix(mix(mix(salt) ^ a) ^ b) ^ c) ^ d);
  return static_cast<double>(h >> 11) * 0x1.0p-53;
}

// Logits are a deterministic function of the last two tokens and the context length's parity.
// Optionally one token per context is banned (-inf), so the draft and the target can disagree
// about the support (q(x) > 0 = p(x), or p(y) > 0 = q(y): the residual must cover y).
// `quantum` > 0 rounds logits to a grid, which creates exact ties (for greedy).
struct ContextModel {
  std::uint64_t salt = 1;
  std::size_t vocab = 5;
  double scale = 2.0;
  bool bans = false;
  double quantum = 0.0;

  std::vector<double> logits(std::span<const token_t> context) const {
    const auto last = static_cast<std::uint64_t>(context.back());
    const auto before =
        context.size() >= 2 ? static_cast<std::uint64_t>(context[context.size() - 2]) : 99;
    const std::uint64_t parity = context.size() % 2;
    std::vector<double> row(vocab);
    for (std::size_t v = 0; v < vocab; ++v) {
      double logit = scale * (2.0 * hash_unit(salt, last, before, parity, v) - 1.0);
      if (quantum > 0) logit = quantum * std::floor(logit / quantum);
      row[v] = logit;
    }
    if (bans && hash_unit(salt ^ 0xb4aULL, last, before, parity, 0) < 0.5) {
      const auto banned = static_cast<std::size_t>(
          hash_unit(salt ^ 0xb4bULL, last, before, parity, 0) * static_cast<double>(vocab));
      row[banned] = -kInf;
    }
    return row;
  }
};

// The draft: the target's logits plus `noise` times an independent model's logits, so its
// quality is tunable (noise 0 = identical, large = unrelated).
struct Scenario {
  ContextModel target;
  ContextModel perturbation;
  double noise = 0.7;
  SamplingParams params;

  std::vector<double> draft_logits(std::span<const token_t> context) const {
    std::vector<double> row = target.logits(context);
    const std::vector<double> extra = perturbation.logits(context);
    for (std::size_t v = 0; v < row.size(); ++v) row[v] += noise * extra[v];
    return row;
  }
  // TargetModel contract: n rows, row i follows the first context.size() - n + 1 + i tokens.
  std::vector<double> target_rows(std::span<const token_t> context, std::size_t n) const {
    std::vector<double> rows;
    for (std::size_t i = 0; i < n; ++i) {
      const std::vector<double> row = target.logits(context.first(context.size() - n + 1 + i));
      rows.insert(rows.end(), row.begin(), row.end());
    }
    return rows;
  }
  std::size_t vocab() const { return target.vocab; }
};

Sequence concat(const Sequence& a, const Sequence& b) {
  Sequence out = a;
  out.insert(out.end(), b.begin(), b.end());
  return out;
}

// ---- exact integration over one coin --------------------------------------------------------

struct CoinCell {
  double midpoint;  // a coin inside the cell
  double width;     // its probability
};

// The cells on which inverse-CDF sampling from `weights` (sum `total`) is constant: token i owns
// [C(i-1), C(i)) / total. Zero-weight tokens own nothing.
std::vector<CoinCell> inverse_cdf_cells(std::span<const double> weights, double total) {
  std::vector<CoinCell> cells;
  double cumulative = 0;
  for (double w : weights) {
    if (w > 0) cells.push_back({(cumulative + 0.5 * w) / total, w / total});
    cumulative += w;
  }
  return cells;
}

// ---- the verification step: the library's, a local re-statement, and two mutants -----------

enum class Verifier {
  library,          // specdec::verify_stochastic itself, integrated over its coins
  local,            // the same rule composed here from acceptance_probability / residual_distribution
  scalar_residual,  // MUTANT (seed bug 1): residual max(0, p(y) - q(x)) with the scalar q(x)
  wrong_bonus_row,  // MUTANT (seed bug 2): bonus sampled from target row K-1 instead of row K
};

std::string name_of(Verifier v) {
  switch (v) {
    case Verifier::library: return "library";
    case Verifier::local: return "local";
    case Verifier::scalar_residual: return "scalar_residual";
    case Verifier::wrong_bonus_row: return "wrong_bonus_row";
  }
  return "?";
}

struct Outcome {
  std::size_t accepted;
  token_t next_token;
  double probability;
};

// Everything verification sees in one round (K = drafted.size()).
struct RoundState {
  std::vector<token_t> drafted;           // x_0..x_{K-1}
  std::vector<double> draft_weights;      // (K, V) weights each x_j was sampled from
  std::vector<double> draft_normalizers;  // (K)
  std::vector<double> target_logits;      // (K+1, V)
};

// The exact law of (accepted, next_token) for one verification, by the chosen verifier.
std::vector<Outcome> verification_law(const RoundState& round, const SamplingParams& params,
                                      std::size_t vocab, Verifier verifier) {
  const std::size_t k = round.drafted.size();
  const LogitsRows<double> target_rows(round.target_logits, vocab);
  const LogitsRows<double> draft_rows(round.draft_weights, vocab);
  std::vector<double> filter_scratch;
  std::vector<double> scratch(vocab);
  auto p_row = [&](std::size_t j) {
    return specdec::process_logits(target_rows.row(j), params, filter_scratch);
  };
  auto q_of = [&](std::size_t j, token_t y) {
    return draft_rows.row(j)[static_cast<std::size_t>(y)] / round.draft_normalizers[j];
  };
  auto bonus_weights = [&](const TokenDistribution<double>& p, std::vector<double>& w) {
    w.assign(vocab, 0.0);
    for (std::size_t y = 0; y < vocab; ++y) w[y] = p.probability(static_cast<token_t>(y));
  };

  std::vector<Outcome> law;
  if (verifier == Verifier::library) {
    // Acceptance cells of coin j: [0, a_j) accepts, [a_j, 1) rejects. Pattern r = "accept
    // positions < r, reject r" (r = K: all accepted); coins after r are never read.
    double reach = 1.0;
    std::vector<double> coins(k, 0.5);
    for (std::size_t r = 0; r <= k && reach > 0; ++r) {
      double pattern = reach;
      double accept_r = 0.0;
      std::vector<double> final_weights;
      if (r < k) {
        const TokenDistribution<double> p = p_row(r);
        accept_r = specdec::acceptance_probability(p.probability(round.drafted[r]),
                                                   q_of(r, round.drafted[r]));
        pattern *= 1.0 - accept_r;
        coins[r] = 0.5 * (accept_r + 1.0);  // inside the reject cell
        final_weights.assign(vocab, 0.0);
        const double total = specdec::residual_distribution(
            p, draft_rows.row(r), round.draft_normalizers[r], std::span<double>(final_weights));
        if (!(total > 0)) bonus_weights(p, final_weights);  // documented fallback: sample p
      } else {
        bonus_weights(p_row(k), final_weights);
      }
      if (pattern > 0) {
        double total = 0;
        for (double w : final_weights) total += w;
        for (const CoinCell& cell : inverse_cdf_cells(final_weights, total)) {
          const specdec::VerifyResult result = specdec::verify_stochastic(
              std::span<const token_t>(round.drafted), draft_rows,
              std::span<const double>(round.draft_normalizers), target_rows, params,
              std::span<const double>(coins), cell.midpoint, std::span<double>(scratch),
              filter_scratch);
          law.push_back({result.accepted, result.next_token, pattern * cell.width});
        }
      }
      if (r < k) {
        coins[r] = 0.5 * accept_r;  // inside the accept cell, for the longer patterns
        reach *= accept_r;
      }
    }
    return law;
  }

  // Local re-statement of the rule (and the mutants), straight from the math.
  double reach = 1.0;
  std::vector<double> weights(vocab);
  for (std::size_t j = 0; j < k && reach > 0; ++j) {
    const TokenDistribution<double> p = p_row(j);
    const token_t x = round.drafted[j];
    const double accept = specdec::acceptance_probability(p.probability(x), q_of(j, x));
    double total = 0;
    if (verifier == Verifier::scalar_residual) {
      for (std::size_t y = 0; y < vocab; ++y) {
        weights[y] = std::max(0.0, p.probability(static_cast<token_t>(y)) - q_of(j, x));
        total += weights[y];
      }
    } else {
      total = specdec::residual_distribution(p, draft_rows.row(j), round.draft_normalizers[j],
                                             std::span<double>(weights));
    }
    if (!(total > 0)) {
      bonus_weights(p, weights);
      total = 1.0;
    }
    const double reject = reach * (1.0 - accept);
    for (std::size_t y = 0; y < vocab; ++y) {
      if (weights[y] > 0 && reject > 0) {
        law.push_back({j, static_cast<token_t>(y), reject * weights[y] / total});
      }
    }
    reach *= accept;
  }
  if (reach > 0) {
    const std::size_t bonus_row = verifier == Verifier::wrong_bonus_row && k > 0 ? k - 1 : k;
    const TokenDistribution<double> p = p_row(bonus_row);
    for (std::size_t y = 0; y < vocab; ++y) {
      const double py = p.probability(static_cast<token_t>(y));
      if (py > 0) law.push_back({k, static_cast<token_t>(y), reach * py});
    }
  }
  return law;
}

// ---- one round: draft K_eff tokens (integrated over draft coins), then verify ----------------

void enumerate_drafts(const Scenario& scenario, Verifier verifier, const Sequence& committed,
                      std::size_t round_length, RoundState& round, double probability,
                      std::vector<std::pair<Sequence, double>>& chunks) {
  const std::size_t vocab = scenario.vocab();
  const std::size_t j = round.drafted.size();
  const Sequence context = concat(committed, round.drafted);
  if (j == round_length) {
    round.target_logits = scenario.target_rows(context, round_length + 1);
    for (const Outcome& o : verification_law(round, scenario.params, vocab, verifier)) {
      Sequence chunk(round.drafted.begin(),
                     round.drafted.begin() + static_cast<std::ptrdiff_t>(o.accepted));
      chunk.push_back(o.next_token);
      chunks.emplace_back(std::move(chunk), probability * o.probability);
    }
    return;
  }
  // The decoder's draft step: process_logits with stored weights, sample_from_weights(coin).
  const std::vector<double> logits = scenario.draft_logits(context);
  std::vector<double> filter_scratch;
  std::vector<double> weights(vocab);
  const TokenDistribution<double> q = specdec::process_logits(
      std::span<const double>(logits), scenario.params, filter_scratch, std::span<double>(weights));
  for (const CoinCell& cell : inverse_cdf_cells(weights, q.normalizer)) {
    const token_t x =
        specdec::sample_from_weights(std::span<const double>(weights), q.normalizer, cell.midpoint);
    round.drafted.push_back(x);
    round.draft_weights.insert(round.draft_weights.end(), weights.begin(), weights.end());
    round.draft_normalizers.push_back(q.normalizer);
    enumerate_drafts(scenario, verifier, committed, round_length, round, probability * cell.width,
                     chunks);
    round.drafted.pop_back();
    round.draft_weights.resize(round.draft_weights.size() - vocab);
    round.draft_normalizers.pop_back();
  }
}

// ---- composing rounds ----------------------------------------------------------------------

enum class Budget {
  exact,      // the decoder's rule: max_new_tokens = L, K_eff = min(K, remaining - 1)
  unlimited,  // K_eff = K every round; the law of the first L emitted tokens
};

// Law of the first `length` emitted tokens. Mass flows through committed prefixes of
// increasing length; each prefix runs one round (the future depends only on the context).
Law speculative_law(const Scenario& scenario, const Sequence& prompt, std::size_t length,
                    std::size_t draft_length, Verifier verifier, Budget budget) {
  std::vector<Law> pending(length);
  pending[0][Sequence{}] = 1.0;
  Law emitted;
  for (std::size_t n = 0; n < length; ++n) {
    for (const auto& [prefix, mass] : pending[n]) {
      const std::size_t remaining = length - n;
      const std::size_t round_length =
          budget == Budget::exact ? std::min(draft_length, remaining - 1) : draft_length;
      std::vector<std::pair<Sequence, double>> chunks;
      RoundState round;
      enumerate_drafts(scenario, verifier, concat(prompt, prefix), round_length, round, mass, chunks);
      for (auto& [chunk, probability] : chunks) {
        if (budget == Budget::exact) {
          EXPECT_LE(chunk.size(), remaining) << "budget overshoot";
        }
        Sequence extended = concat(prefix, chunk);
        if (extended.size() >= length) {
          extended.resize(length);
          emitted[extended] += probability;
        } else {
          pending[extended.size()][extended] += probability;
        }
      }
    }
  }
  return emitted;
}

// The target alone: P(t_1..t_L) = prod_i p(t_i | prompt, t_<i), same processing.
Law target_law(const Scenario& scenario, const Sequence& prompt, std::size_t length) {
  Law law{{Sequence{}, 1.0}};
  for (std::size_t n = 0; n < length; ++n) {
    Law next;
    for (const auto& [prefix, mass] : law) {
      const std::vector<double> logits = scenario.target.logits(concat(prompt, prefix));
      std::vector<double> filter_scratch;
      const TokenDistribution<double> p =
          specdec::process_logits(std::span<const double>(logits), scenario.params, filter_scratch);
      for (std::size_t y = 0; y < scenario.vocab(); ++y) {
        const double py = p.probability(static_cast<token_t>(y));
        if (py > 0) next[concat(prefix, Sequence{static_cast<token_t>(y)})] = mass * py;
      }
    }
    law = std::move(next);
  }
  return law;
}

double max_abs_difference(const Law& a, const Law& b) {
  double worst = 0;
  for (const auto& [seq, pa] : a) {
    const auto it = b.find(seq);
    worst = std::max(worst, std::abs(pa - (it == b.end() ? 0.0 : it->second)));
  }
  for (const auto& [seq, pb] : b) {
    if (!a.contains(seq)) worst = std::max(worst, pb);
  }
  return worst;
}

double total_mass(const Law& law) {
  double sum = 0;
  for (const auto& [seq, p] : law) sum += p;
  return sum;
}

// ---- the cases -----------------------------------------------------------------------------

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

Scenario make_scenario(const ModelCase& model, const SamplingParams& params) {
  Scenario scenario;
  scenario.target = ContextModel{11, model.vocab, 2.0, model.bans, 0.0};
  scenario.perturbation = ContextModel{23, model.vocab, 2.0, model.bans, 0.0};
  scenario.noise = model.noise;
  scenario.params = params;
  return scenario;
}

// Draft lengths and how many tokens to follow: L = K + 1 (one full round incl. the bonus) and
// L = 3 for K = 1 (several rounds composed).
std::vector<std::pair<std::size_t, std::size_t>> length_cases() {
  return {{1, 2}, {1, 3}, {2, 3}, {3, 4}};
}

const Sequence kPrompt{1, 2};

TEST(ExactnessTest, SpeculativeSamplingEqualsTargetDistribution) {
  double worst = 0;
  std::size_t laws = 0;
  for (const ModelCase& model : model_cases()) {
    for (const ModeCase& mode : sampling_modes()) {
      const Scenario scenario = make_scenario(model, mode.params);
      for (const auto& [draft_length, length] : length_cases()) {
        const Law expected = target_law(scenario, kPrompt, length);
        ASSERT_NEAR(total_mass(expected), 1.0, 1e-12);
        for (Budget budget : {Budget::exact, Budget::unlimited}) {
          for (Verifier verifier : {Verifier::library, Verifier::local}) {
            const Law got =
                speculative_law(scenario, kPrompt, length, draft_length, verifier, budget);
            const double error = max_abs_difference(got, expected);
            worst = std::max(worst, error);
            ++laws;
            EXPECT_LT(error, kExactnessBound)
                << model.name << " " << mode.name << " K=" << draft_length << " L=" << length
                << (budget == Budget::exact ? " budget=L" : " unlimited") << " verifier "
                << name_of(verifier);
            EXPECT_NEAR(total_mass(got), 1.0, 1e-12);
          }
        }
      }
    }
  }
  std::printf("[ exact ] %zu laws compared, worst max-abs error %.3g\n", laws, worst);
}

// The draft's support differs from the target's and one side is sometimes nearly a point mass:
// acceptance probabilities of exactly 0 and 1 and residuals concentrated on tokens the draft
// never proposes must all be handled.
TEST(ExactnessTest, DisjointSupportsAndSharpDistributions) {
  SamplingParams params;
  Scenario scenario;
  scenario.target = ContextModel{101, 4, 9.0, true, 0.0};
  scenario.perturbation = ContextModel{202, 4, 9.0, true, 0.0};
  scenario.noise = 1.0;
  for (float temperature : {1.0f, 0.4f}) {
    scenario.params.temperature = temperature;
    for (std::size_t draft_length : {1u, 2u, 3u}) {
      const std::size_t length = draft_length + 1;
      const Law expected = target_law(scenario, kPrompt, length);
      for (Verifier verifier : {Verifier::library, Verifier::local}) {
        const Law got =
            speculative_law(scenario, kPrompt, length, draft_length, verifier, Budget::exact);
        EXPECT_LT(max_abs_difference(got, expected), kExactnessBound)
            << "T=" << temperature << " K=" << draft_length << " " << name_of(verifier);
      }
    }
  }
}

// ---- power checks: the harness must catch the seed's bugs -----------------------------------

double worst_error_over_cases(Verifier verifier) {
  double worst = 0;
  for (const ModelCase& model : model_cases()) {
    if (model.noise == 0.0) continue;  // identical draft: nothing is ever rejected
    for (const ModeCase& mode : sampling_modes()) {
      const Scenario scenario = make_scenario(model, mode.params);
      for (const auto& [draft_length, length] : length_cases()) {
        const double error =
            max_abs_difference(speculative_law(scenario, kPrompt, length, draft_length, verifier,
                                               Budget::exact),
                               target_law(scenario, kPrompt, length));
        worst = std::max(worst, error);
      }
    }
  }
  return worst;
}

TEST(ExactnessPowerTest, ScalarResidualMutantIsDetected) {
  const double error = worst_error_over_cases(Verifier::scalar_residual);
  RecordProperty("max_abs_error", std::to_string(error));
  EXPECT_GT(error, kMutantMinError) << "scalar-residual mutant looked exact: the test is blind";
  // And per case: on a plain T=1 case with a close draft it must already fail the bound.
  const Scenario scenario = make_scenario(model_cases()[0], sampling_modes()[0].params);
  const double one_case = max_abs_difference(
      speculative_law(scenario, kPrompt, 2, 1, Verifier::scalar_residual, Budget::exact),
      target_law(scenario, kPrompt, 2));
  EXPECT_GT(one_case, kMutantMinError);
  std::printf("[ power ] scalar residual: worst error %.3g, V=5 T=1 K=1 L=2: %.3g\n", error,
              one_case);
}

TEST(ExactnessPowerTest, WrongBonusRowMutantIsDetected) {
  const double error = worst_error_over_cases(Verifier::wrong_bonus_row);
  EXPECT_GT(error, kMutantMinError) << "wrong-bonus-row mutant looked exact: the test is blind";
  const Scenario scenario = make_scenario(model_cases()[0], sampling_modes()[0].params);
  const double one_case = max_abs_difference(
      speculative_law(scenario, kPrompt, 2, 1, Verifier::wrong_bonus_row, Budget::exact),
      target_law(scenario, kPrompt, 2));
  EXPECT_GT(one_case, kMutantMinError);
  std::printf("[ power ] wrong bonus row: worst error %.3g, V=5 T=1 K=1 L=2: %.3g\n", error,
              one_case);
}

// ---- greedy: a point mass on the target's argmax path ---------------------------------------

// Greedy speculative decoding's emitted tokens, with the decoder's rule: draft argmax, then
// verify_greedy against the target rows. Deterministic: one sequence.
Sequence greedy_speculative(const Scenario& scenario, const Sequence& prompt, std::size_t length,
                            std::size_t draft_length) {
  Sequence emitted;
  while (emitted.size() < length) {
    const std::size_t round_length = std::min(draft_length, length - emitted.size() - 1);
    Sequence context = concat(prompt, emitted);
    Sequence drafted;
    for (std::size_t j = 0; j < round_length; ++j) {
      const std::vector<double> row = scenario.draft_logits(concat(context, drafted));
      drafted.push_back(specdec::argmax(row));
    }
    const std::vector<double> rows = scenario.target_rows(concat(context, drafted), round_length + 1);
    const specdec::VerifyResult result =
        specdec::verify_greedy(std::span<const token_t>(drafted),
                               LogitsRows<double>(std::span<const double>(rows), scenario.vocab()));
    emitted.insert(emitted.end(), drafted.begin(),
                   drafted.begin() + static_cast<std::ptrdiff_t>(result.accepted));
    emitted.push_back(result.next_token);
  }
  return emitted;
}

// Independent reference: argmax, lowest index on ties, written out here.
Sequence greedy_target(const Scenario& scenario, const Sequence& prompt, std::size_t length) {
  Sequence emitted;
  for (std::size_t n = 0; n < length; ++n) {
    const std::vector<double> row = scenario.target.logits(concat(prompt, emitted));
    std::size_t best = 0;
    for (std::size_t v = 1; v < row.size(); ++v) {
      if (row[v] > row[best]) best = v;
    }
    emitted.push_back(static_cast<token_t>(best));
  }
  return emitted;
}

TEST(ExactnessTest, GreedyIsAPointMassOnTheTargetArgmaxPath) {
  std::size_t ties_seen = 0;
  for (double quantum : {0.0, 1.0}) {  // 1.0: logits on an integer grid, many exact ties
    Scenario scenario;
    scenario.target = ContextModel{31, 5, 2.5, false, quantum};
    scenario.perturbation = ContextModel{47, 5, 2.5, false, quantum};
    scenario.noise = 1.0;
    for (token_t a = 0; a < 5; ++a) {
      for (token_t b = 0; b < 5; ++b) {
        const Sequence prompt{a, b};
        const std::vector<double> row = scenario.target.logits(prompt);
        const double top = *std::max_element(row.begin(), row.end());
        ties_seen += static_cast<std::size_t>(std::count(row.begin(), row.end(), top) > 1);
        for (std::size_t draft_length = 1; draft_length <= 3; ++draft_length) {
          for (std::size_t length = 1; length <= 6; ++length) {
            EXPECT_EQ(greedy_speculative(scenario, prompt, length, draft_length),
                      greedy_target(scenario, prompt, length))
                << "prompt " << a << "," << b << " K=" << draft_length << " L=" << length;
          }
        }
      }
    }
  }
  EXPECT_GT(ties_seen, 3u) << "the tie grid no longer produces ties; the test lost its edge";
}

}  // namespace

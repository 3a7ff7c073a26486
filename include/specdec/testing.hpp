#pragma once
/// \file
/// \brief Certification harness: prove that a proposer, a draft-length policy, a verifier or a
/// logits processor keeps speculative decoding exact — with the tools specdec's own tests use.
///
/// Two independent kinds of evidence:
///
/// 1. **Exact enumeration** (double precision, small vocabularies). Strategies draw all their
///    randomness through a coin source (coins.hpp). EnumeratingCoins replaces the decoder's:
///    every `draw(law)` branches over the tokens of the law with their masses, every
///    `accept(i, a)` over accept / reject with probabilities a, 1 - a. Re-running the round for
///    every branch (depth first) yields the exact law of what the round emits, computed by the
///    strategies' own code instantiated with double. certify_round() compares it with the
///    target's law; speculative_law() composes rounds under the decoder's budget rule.
/// 2. **Statistical tests** of the full decoder (float, any model): chi_square_test() /
///    g_test() with p-values, and samples_to_detect() for the sample size that a given
///    total-variation error needs to be caught.
///
/// Scripted, context-dependent toy models (ScriptedPair) are ready-made building blocks for
/// both. Nothing here is needed to *use* specdec; include it in tests.
///
/// Example — certify a verifier (a complete version is in README.md):
/// \code
///   specdec::testing::ScriptedPair pair;  // V = 5 draft / target pair
///   pair.params.temperature = 0.7f;
///   auto draft = pair.draft();            // the draft model, in double
///   specdec::ModelProposer proposer(draft);
///   const auto cert = specdec::testing::certify_round(proposer, specdec::StaticDraftLength{},
///                                                     MyVerifier{}, pair.target(), pair.params,
///                                                     {0, 1}, /*draft_length=*/3);
///   EXPECT_LT(cert.total_variation, 1e-9);
/// \endcode

#include <algorithm>
#include <cmath>
#include <compare>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <numeric>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "specdec/coins.hpp"
#include "specdec/decoder.hpp"
#include "specdec/detail/exact_float.hpp"
#include "specdec/proposal.hpp"
#include "specdec/sampling.hpp"
#include "specdec/sampling_laws.hpp"
#include "specdec/stats.hpp"
#include "specdec/strategies.hpp"
#include "specdec/target_rows.hpp"
#include "specdec/tree.hpp"
#include "specdec/types.hpp"
#include "specdec/verify.hpp"

namespace specdec::testing {

/// A sequence of emitted tokens.
using Sequence = std::vector<token_t>;
/// A probability law over emitted sequences.
using Law = std::map<Sequence, double>;

// ============================================================================================
// Statistics
// ============================================================================================

/// \brief Regularized upper incomplete gamma function Q(a, x) = Γ(a, x) / Γ(a): the series for
/// P = 1 - Q below x = a + 1, the continued fraction (modified Lentz) above. ~1e-14 relative.
[[nodiscard]] inline double regularized_gamma_q(double a, double x) {
  if (x <= 0) return 1.0;
  const double log_prefactor = a * std::log(x) - x - std::lgamma(a);
  if (x < a + 1.0) {
    double term = 1.0 / a;
    double sum = term;
    for (int n = 1; n < 100000; ++n) {
      term *= x / (a + n);
      sum += term;
      if (std::abs(term) < std::abs(sum) * 1e-17) break;
    }
    return 1.0 - sum * std::exp(log_prefactor);
  }
  constexpr double kTiny = 1e-300;
  double b = x + 1.0 - a;
  double c = 1.0 / kTiny;
  double d = 1.0 / b;
  double h = d;
  for (int n = 1; n < 100000; ++n) {
    const double an = -n * (n - a);
    b += 2.0;
    d = an * d + b;
    if (std::abs(d) < kTiny) d = kTiny;
    c = b + an / c;
    if (std::abs(c) < kTiny) c = kTiny;
    d = 1.0 / d;
    const double delta = d * c;
    h *= delta;
    if (std::abs(delta - 1.0) < 1e-16) break;
  }
  return std::exp(log_prefactor) * h;
}

/// \brief P(X >= statistic) for X ~ χ² with `dof` degrees of freedom.
[[nodiscard]] inline double chi_square_survival(double statistic, double dof) {
  return regularized_gamma_q(0.5 * dof, 0.5 * statistic);
}

/// \brief Result of a goodness-of-fit test.
struct GoodnessOfFit {
  double statistic = 0;
  std::size_t cells = 0;         ///< after pooling
  double p_value = 1;            ///< P(statistic at least this large | the law is right)
  std::uint64_t impossible = 0;  ///< samples in cells of probability 0 (a correct sampler has none)
};

namespace detail {

enum class FitStatistic { pearson, likelihood_ratio };

inline GoodnessOfFit goodness_of_fit(std::span<const std::uint64_t> observed,
                                     std::span<const double> probabilities, FitStatistic kind) {
  if (observed.size() != probabilities.size()) {
    specdec::detail::throw_invalid_argument("goodness of fit: ", observed.size(), " counts for ",
                                            probabilities.size(),
                                            " probabilities; expected one count per cell");
  }
  double total_probability = 0;
  for (const double p : probabilities) {
    if (!(p >= 0) || !std::isfinite(p)) {
      specdec::detail::throw_invalid_argument("goodness of fit: probability ", p,
                                              "; expected finite values >= 0");
    }
    total_probability += p;
  }
  if (std::abs(total_probability - 1.0) > 1e-6) {
    specdec::detail::throw_invalid_argument("goodness of fit: probabilities sum to ",
                                            total_probability,
                                            "; expected 1 (a law with cells missing?)");
  }
  const double n =
      static_cast<double>(std::accumulate(observed.begin(), observed.end(), std::uint64_t{0}));
  GoodnessOfFit fit;
  struct Cell {
    double observed, expected;
  };
  std::vector<Cell> cells;
  Cell pool{0, 0};
  for (std::size_t i = 0; i < observed.size(); ++i) {
    const auto o = static_cast<double>(observed[i]);
    if (probabilities[i] <= 0) {
      fit.impossible += observed[i];
      continue;
    }
    const double e = n * probabilities[i];
    if (e < 5) {
      pool.observed += o;
      pool.expected += e;
    } else {
      cells.push_back({o, e});
    }
  }
  if (pool.expected > 0) {
    if (pool.expected >= 5 || cells.empty()) {
      cells.push_back(pool);
    } else {
      auto smallest = std::min_element(cells.begin(), cells.end(), [](const Cell& a, const Cell& b) {
        return a.expected < b.expected;
      });
      smallest->observed += pool.observed;
      smallest->expected += pool.expected;
    }
  }
  for (const Cell& cell : cells) {
    if (kind == FitStatistic::pearson) {
      fit.statistic +=
          (cell.observed - cell.expected) * (cell.observed - cell.expected) / cell.expected;
    } else if (cell.observed > 0) {
      fit.statistic += 2.0 * cell.observed * std::log(cell.observed / cell.expected);
    }
  }
  fit.cells = cells.size();
  fit.p_value = cells.size() < 2
                    ? 1.0
                    : chi_square_survival(fit.statistic, static_cast<double>(cells.size() - 1));
  return fit;
}

}  // namespace detail

/// \brief Pearson χ² of `observed` counts against `probabilities` (one per cell, summing to 1).
/// Cells expecting fewer than 5 samples are pooled (merged into the smallest regular cell if
/// the pool itself expects fewer than 5); cells of probability exactly 0 are excluded and their
/// samples counted in `impossible`, never silently pooled.
[[nodiscard]] inline GoodnessOfFit chi_square_test(std::span<const std::uint64_t> observed,
                                                   std::span<const double> probabilities) {
  return detail::goodness_of_fit(observed, probabilities, detail::FitStatistic::pearson);
}

/// \brief The G-test (likelihood ratio, 2 Σ o log(o / e)) with the same pooling; asymptotically
/// χ² like Pearson's, and more reliable when a few cells dominate.
[[nodiscard]] inline GoodnessOfFit g_test(std::span<const std::uint64_t> observed,
                                          std::span<const double> probabilities) {
  return detail::goodness_of_fit(observed, probabilities, detail::FitStatistic::likelihood_ratio);
}

/// \brief Samples a χ² test over `cells` cells needs so that a sampler off by total variation
/// `total_variation` fails the threshold `p_threshold` with high probability (~0.99), however
/// the error is spread (before pooling; pooling small cells can hide part of an error).
///
/// A deviation of TV d adds N Σ (p' - p)² / p to the statistic's mean k - 1 (the noncentrality
/// λ), and by Cauchy-Schwarz Σ (p' - p)² / p >= (Σ |p' - p|)² / Σ p = 4 d², with equality when
/// the error is proportional to the cell probabilities: λ >= 4 N d². We ask 4 N d² to exceed
/// the critical value's distance from k - 1 plus four standard deviations √(2(k-1)+4λ) — a
/// conservative normal approximation of the noncentral χ² quantile. SIZE_MAX when more
/// samples than a std::size_t counts would be needed (a TV below ~1e-9).
[[nodiscard]] inline std::size_t samples_to_detect(double total_variation, std::size_t cells,
                                                   double p_threshold = 1e-4) {
  if (!(total_variation > 0) || cells < 2 || !(p_threshold > 0 && p_threshold < 1)) {
    specdec::detail::throw_invalid_argument(
        "samples_to_detect: total_variation = ", total_variation, ", cells = ", cells,
        ", p_threshold = ", p_threshold, "; expected TV > 0, at least 2 cells, p in (0, 1)");
  }
  const double dof = static_cast<double>(cells - 1);
  // The critical value: bisection on the survival function.
  double lo = 0, hi = dof + 100 * std::sqrt(2 * dof) + 100;
  for (int i = 0; i < 200; ++i) {
    const double mid = 0.5 * (lo + hi);
    (chi_square_survival(mid, dof) > p_threshold ? lo : hi) = mid;
  }
  const double excess = hi - dof;
  // Smallest N with 4 N d² >= excess + 4 sqrt(2 dof + 16 N d²).
  const double d2 = total_variation * total_variation;
  // Saturating: a TV too small to detect in fewer than 2^64 samples (below ~1e-9; d² underflows
  // to 0 below ~1e-154) gives SIZE_MAX, not a float-to-integer conversion out of range.
  constexpr double kCountable = 18446744073709551616.0;  // 2^64: the first double above SIZE_MAX
  double n = 1;
  while (n < kCountable && 4 * n * d2 < excess + 4 * std::sqrt(2 * dof + 16 * n * d2)) n *= 1.05;
  const double samples = std::ceil(n);
  if (!(samples < kCountable)) return std::numeric_limits<std::size_t>::max();
  return static_cast<std::size_t>(samples);
}

/// \brief Total-variation distance (1/2 Σ |a - b|) between two laws over sequences.
[[nodiscard]] inline double total_variation(const Law& a, const Law& b) {
  double sum = 0;
  for (const auto& [sequence, probability] : a) {
    const auto it = b.find(sequence);
    sum += std::abs(probability - (it == b.end() ? 0.0 : it->second));
  }
  for (const auto& [sequence, probability] : b) {
    if (a.find(sequence) == a.end()) sum += probability;
  }
  return 0.5 * sum;
}

// ============================================================================================
// Scripted models
// ============================================================================================

namespace detail {

constexpr std::uint64_t mix(std::uint64_t x) noexcept {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

/// Uniform in [0, 1), a pure function of the arguments.
constexpr double hash_unit(std::uint64_t salt, std::uint64_t a, std::uint64_t b, std::uint64_t c,
                           std::uint64_t d) noexcept {
  const std::uint64_t h = mix(mix(mix(mix(mix(salt) ^ a) ^ b) ^ c) ^ d);
  return static_cast<double>(h >> 11) * 0x1.0p-53;
}

}  // namespace detail

/// \brief A deterministic, context-dependent toy model: logits are a hash of the last two
/// tokens and the context length's parity, in [-scale, scale). Options: `bans` sets one token
/// per context to -inf (so draft and target can disagree on the support); `quantum` > 0 rounds
/// logits to a grid (exact ties, for greedy). Logits are float-representable, so float and
/// double instantiations see the same numbers.
struct ScriptedModel {
  std::uint64_t salt = 1;
  std::size_t vocab = 5;
  double scale = 2.0;
  bool bans = false;
  double quantum = 0.0;

  [[nodiscard]] std::vector<double> logits(std::span<const token_t> context) const {
    if (context.empty()) {
      specdec::detail::throw_invalid_argument("ScriptedModel: empty context");
    }
    const auto last = static_cast<std::uint64_t>(context.back());
    const auto before =
        context.size() >= 2 ? static_cast<std::uint64_t>(context[context.size() - 2]) : 99;
    const std::uint64_t parity = context.size() % 2;
    std::vector<double> row(vocab);
    for (std::size_t v = 0; v < vocab; ++v) {
      double logit = scale * (2.0 * detail::hash_unit(salt, last, before, parity, v) - 1.0);
      if (quantum > 0) logit = quantum * std::floor(logit / quantum);
      row[v] = static_cast<double>(static_cast<float>(logit));
    }
    if (bans && detail::hash_unit(salt ^ 0xb4aULL, last, before, parity, 0) < 0.5) {
      const auto banned = static_cast<std::size_t>(
          detail::hash_unit(salt ^ 0xb4bULL, last, before, parity, 0) * static_cast<double>(vocab));
      row[banned] = -std::numeric_limits<double>::infinity();
    }
    return row;
  }
};

/// \brief A draft / target pair of scripted models: the draft's logits are the target's plus
/// `noise` times an independent model's (noise 0: identical; large: unrelated), rounded to
/// float. draft<Scalar>() / target<Scalar>() are the models as callables (DraftModel /
/// TargetModel for float; double for exact enumeration); they point at the pair, which must
/// outlive them (do not call them on a temporary pair).
struct ScriptedPair {
  ScriptedModel target_model{};
  ScriptedModel perturbation{.salt = 77};
  double noise = 0.7;
  SamplingParams params{};

  [[nodiscard]] std::size_t vocab() const noexcept { return target_model.vocab; }

  [[nodiscard]] std::vector<double> draft_logits(std::span<const token_t> context) const {
    std::vector<double> row = target_model.logits(context);
    if (specdec::detail::exactly_equal(noise, 0.0)) return row;  // identical (0 * -inf would be NaN)
    const std::vector<double> extra = perturbation.logits(context);
    for (std::size_t v = 0; v < row.size(); ++v) {
      row[v] = static_cast<double>(static_cast<float>(row[v] + noise * extra[v]));
    }
    return row;
  }
  /// TargetModel contract: n rows, row i follows the first context.size() - n + 1 + i tokens.
  [[nodiscard]] std::vector<double> target_rows(std::span<const token_t> context,
                                                std::size_t n) const {
    std::vector<double> rows;
    for (std::size_t i = 0; i < n; ++i) {
      const std::vector<double> row = target_model.logits(context.first(context.size() - n + 1 + i));
      rows.insert(rows.end(), row.begin(), row.end());
    }
    return rows;
  }

  template <class Scalar = double>
  struct Draft {
    const ScriptedPair* pair;
    std::vector<Scalar> operator()(std::span<const token_t> context) const {
      const std::vector<double> row = pair->draft_logits(context);
      return std::vector<Scalar>(row.begin(), row.end());
    }
  };
  template <class Scalar = double>
  struct Target {
    const ScriptedPair* pair;
    std::vector<Scalar> operator()(std::span<const token_t> context, std::size_t n) const {
      const std::vector<double> rows = pair->target_rows(context, n);
      return std::vector<Scalar>(rows.begin(), rows.end());
    }
  };
  template <class Scalar = double>
  [[nodiscard]] Draft<Scalar> draft() const noexcept {
    return {this};
  }
  template <class Scalar = double>
  [[nodiscard]] Target<Scalar> target() const noexcept {
    return {this};
  }
};

// ============================================================================================
// Exact laws
// ============================================================================================

/// \brief The exact law of the target's first `length` tokens after `context`, each row
/// processed as the decoder processes it (logits processor, temperature, filters; greedy: the
/// argmax path) in double. `target` is a TargetModel-like callable returning n rows of doubles.
template <class TargetFn>
[[nodiscard]] Law target_law(TargetFn&& target, const SamplingParams& params,
                             const Sequence& context, std::size_t length) {
  Law law;
  std::vector<double> filter_scratch;
  std::function<void(Sequence&, std::size_t, double)> extend = [&](Sequence& sequence,
                                                                   std::size_t start, double mass) {
    if (sequence.size() - start == length) {
      law[Sequence(sequence.begin() + static_cast<std::ptrdiff_t>(start), sequence.end())] += mass;
      return;
    }
    const std::vector<double> row = target(std::span<const token_t>(sequence), std::size_t{1});
    std::vector<double> processed(row.size());
    const std::span<const double> logits = specdec::detail::apply_processor_into(
        params, std::span<const token_t>(sequence), std::span<const double>(row),
        std::span<double>(processed));
    if (params.greedy()) {
      sequence.push_back(argmax(logits));
      extend(sequence, start, mass);
      sequence.pop_back();
      return;
    }
    const TokenDistribution<double> p = process_logits(logits, params, filter_scratch);
    for (std::size_t v = 0; v < logits.size(); ++v) {
      const double probability = p.probability(static_cast<token_t>(v));
      if (!(probability > 0)) continue;
      sequence.push_back(static_cast<token_t>(v));
      extend(sequence, start, mass * probability);
      sequence.pop_back();
    }
  };
  Sequence sequence = context;
  extend(sequence, context.size(), 1.0);
  return law;
}

/// \brief A coin source that enumerates instead of sampling (see the file comment).
///
/// Drive it with `do { coins.start(); ...run the strategy...; use coins.probability(); }
/// while (coins.next());` — every run follows one branch of the strategy's execution tree and
/// probability() is that branch's exact probability; the branches of all runs partition the
/// coin space. It also checks the coin contract: in verification (after begin_verification(n)),
/// each acceptance coin i < n is read at most once and the final coin at most once — the
/// decoder's coins are single numbers, so reading one twice would correlate decisions the
/// enumeration treats as independent. Violations throw std::logic_error.
class EnumeratingCoins {
 public:
  /// \brief Starts a run (the first, or the one next() prepared).
  void start() {
    depth_ = 0;
    probability_ = 1.0;
    verifying_ = false;
    final_read_ = false;
    read_.clear();
  }

  /// \brief Prepares the next unexplored branch; false when every branch has been run.
  bool next() {
    while (!script_.empty() && script_.back().choice + 1 == script_.back().options) {
      script_.pop_back();
    }
    if (script_.empty()) return false;
    ++script_.back().choice;
    return true;
  }

  /// \brief The exact probability of the branch the current run followed.
  [[nodiscard]] double probability() const noexcept { return probability_; }

  /// \brief From now on the run is verifying a proposal of n tokens (n acceptance coins).
  void begin_verification(std::size_t n) {
    verifying_ = true;
    read_.assign(n, false);
  }

  template <SamplingLaw Law>
  [[nodiscard]] token_t draw(const Law& law) {
    if (verifying_) {
      if (final_read_) {
        throw std::logic_error(
            "specdec::testing: a verifier drew twice from the final coin; the decoder has one "
            "final coin per round, so the second draw would not be independent");
      }
      final_read_ = true;
    }
    std::vector<token_t> tokens;
    std::vector<double> masses;
    double total = 0;
    for (std::size_t v = 0; v < law.vocab_size(); ++v) {
      const double mass = static_cast<double>(law.mass(static_cast<token_t>(v)));
      if (mass > 0) {
        tokens.push_back(static_cast<token_t>(v));
        masses.push_back(mass);
        total += mass;
      }
    }
    if (!(total > 0)) {
      throw std::logic_error("specdec::testing: a law with no positive mass was drawn from");
    }
    for (double& mass : masses) mass /= total;
    return tokens[choose(masses)];
  }

  [[nodiscard]] bool accept(std::size_t position, double probability) {
    if (!verifying_ || position >= read_.size()) {
      throw std::logic_error("specdec::testing: acceptance coin " + std::to_string(position) +
                             " read outside verification or beyond the drafted tokens");
    }
    if (read_[position]) {
      throw std::logic_error("specdec::testing: acceptance coin " + std::to_string(position) +
                             " read twice; each coin may decide one comparison");
    }
    read_[position] = true;
    if (!(probability > 0)) return false;  // coin < 0 (or NaN) never holds
    if (probability >= 1) return true;     // coin in [0, 1) always below
    const double outcomes[2] = {probability, 1.0 - probability};
    return choose(outcomes) == 0;
  }

 private:
  struct Event {
    std::size_t choice;
    std::size_t options;
  };

  std::size_t choose(std::span<const double> probabilities) {
    if (depth_ == script_.size()) {
      script_.push_back({0, probabilities.size()});
    } else if (script_[depth_].options != probabilities.size()) {
      throw std::logic_error(
          "specdec::testing: a strategy's randomness changed between runs that made the same "
          "choices so far (is it deterministic given its coins and inputs?)");
    }
    const std::size_t choice = script_[depth_++].choice;
    probability_ *= probabilities[choice];
    return choice;
  }

  std::vector<Event> script_;
  std::size_t depth_ = 0;
  double probability_ = 1.0;
  bool verifying_ = false;
  bool final_read_ = false;
  std::vector<bool> read_;
};

/// \brief The rows of a tree call (tree.hpp) computed from a chain-call target, one call per
/// path: row 0 after `context`, row 1 + i after context + the path root -> node i.
template <class Scalar, class TargetFn>
[[nodiscard]] std::vector<Scalar> tree_rows(TargetFn&& target, const Sequence& context,
                                            const Proposal<Scalar>& proposal) {
  std::vector<Scalar> rows;
  std::vector<std::int32_t> path;
  for (std::int32_t node = -1; node < static_cast<std::int32_t>(proposal.size()); ++node) {
    Sequence path_context = context;
    const std::size_t length = specdec::detail::path_to(proposal, node, path);
    for (std::size_t k = 0; k < length; ++k) {
      path_context.push_back(proposal.tokens[static_cast<std::size_t>(path[k])]);
    }
    const auto row = target(std::span<const token_t>(path_context), std::size_t{1});
    rows.insert(rows.end(), row.begin(), row.end());
  }
  return rows;
}

/// \brief What a round's history records for a draft-length policy: the emitted chunk and the
/// drafted tokens' probabilities (their count is the number drafted).
struct RoundOutcome {
  Sequence chunk;
  std::vector<double> token_probabilities;
  auto operator<=>(const RoundOutcome&) const = default;
};

/// \brief The exact law of one speculative round.
struct RoundLaw {
  Law chunks;                    ///< emitted tokens of the round -> probability
  /// RoundOutcome -> probability: the round as a policy's observe() would be told of it
  std::map<RoundOutcome, double> outcomes;
  double expected_accepted = 0;  ///< E[accepted drafted tokens]
  double expected_drafted = 0;   ///< E[drafted tokens]
  std::size_t branches = 0;      ///< runs enumerated
};

/// \brief Enumerates one round — propose (asking `policy`), one target call, verify — from
/// `context` with the round limit `limit`, using copies of the strategies for every run (so
/// stateful strategies start each run from the same state). Greedy params verify by argmax
/// matching, as the decoder does. `target` returns n rows of doubles (ScriptedPair::target()).
template <class ProposerT, class PolicyT, class VerifierT, class TargetFn>
[[nodiscard]] RoundLaw round_law(const ProposerT& proposer, const PolicyT& policy,
                                 const VerifierT& verifier, TargetFn&& target,
                                 const SamplingParams& params, const Sequence& context,
                                 std::size_t limit) {
  RoundLaw law;
  EnumeratingCoins coins;
  do {
    coins.start();
    ProposerT run_proposer = proposer;
    PolicyT run_policy = policy;
    VerifierT run_verifier = verifier;
    std::vector<token_t> tokens = context;
    tokens.reserve(context.size() + limit + 1);
    std::size_t vocab_size = 0;
    DecodeStats stats;
    DraftRequest request(tokens, limit, params, vocab_size, stats);
    request.bind_policy(run_policy);
    const auto proposal = run_proposer.propose(request, coins);
    using Scalar = typename std::remove_cvref_t<decltype(proposal)>::scalar_type;
    const std::size_t n = proposal.size();
    // Before the target call, as the decoder checks it (and again once V is known); a tree
    // is scored as the decoder's tree call would (one row per node plus the root).
    specdec::detail::check_proposal(proposal, limit, vocab_size);
    const bool tree = !proposal.is_chain();
    tokens.resize(context.size());
    tokens.insert(tokens.end(), proposal.tokens.begin(), proposal.tokens.end());
    const std::vector<Scalar> rows = tree ? tree_rows(target, context, proposal)
                                          : target(std::span<const token_t>(tokens), n + 1);
    const LogitsRows<Scalar> view(std::span<const Scalar>(rows), rows.size() / (n + 1));
    if (vocab_size == 0) vocab_size = view.vocab_size();
    specdec::detail::check_proposal(proposal, limit, vocab_size);
    TargetRowBuffers<Scalar> buffers;
    TargetRows<Scalar> target_rows(view, tokens, context.size(), params, false, buffers,
                                   tree ? proposal.parents : std::span<const std::int32_t>());
    coins.begin_verification(n);
    const auto argmax_at = [&](std::size_t j) { return target_rows.argmax(j); };
    const VerifyResult verdict =
        params.greedy() ? (tree ? verify_greedy_tree(proposal, argmax_at)
                                : verify_greedy(proposal.tokens, argmax_at))
                        : run_verifier.verify(proposal, target_rows, coins);
    if (verdict.accepted > n || verdict.next_token < 0 ||
        static_cast<std::size_t>(verdict.next_token) >= vocab_size) {
      // As the decoder's own check: a chunk is never built from tokens that were not drafted.
      throw std::logic_error("specdec::testing: the verifier accepted " +
                             std::to_string(verdict.accepted) + " of " + std::to_string(n) +
                             " tokens and drew token " + std::to_string(verdict.next_token) +
                             "; expected at most the drafted tokens and a token in [0, V)");
    }
    Sequence chunk;
    if (tree) {
      std::vector<std::int32_t> path(n);
      for (const std::int32_t node : specdec::detail::accepted_path(proposal, verdict, path)) {
        chunk.push_back(proposal.tokens[static_cast<std::size_t>(node)]);
      }
    } else {
      chunk.assign(proposal.tokens.begin(),
                   proposal.tokens.begin() + static_cast<std::ptrdiff_t>(verdict.accepted));
    }
    chunk.push_back(verdict.next_token);
    const double probability = coins.probability();
    law.chunks[chunk] += probability;
    std::vector<double> token_probabilities(n, 1.0);
    if (proposal.token_probabilities.size() == n) {
      token_probabilities.assign(proposal.token_probabilities.begin(),
                                 proposal.token_probabilities.end());
    }
    law.outcomes[RoundOutcome{chunk, std::move(token_probabilities)}] += probability;
    law.expected_accepted += probability * static_cast<double>(verdict.accepted);
    law.expected_drafted += probability * static_cast<double>(n);
    ++law.branches;
  } while (coins.next());
  return law;
}

/// \brief How close one round comes to the target.
struct RoundCertificate {
  /// TV between the law of the first draft_length + 1 tokens — the round's chunk, continued by
  /// the target itself — and the target's own law of those tokens. 0 (to ~1e-15) iff the round
  /// is exact for this context: every chunk the round can emit has the target's probability.
  double total_variation = 0;
  double expected_accepted = 0;  ///< E[accepted drafted tokens] in the round
  double expected_drafted = 0;   ///< E[drafted tokens]
  std::size_t branches = 0;      ///< runs enumerated
};

/// \brief Certifies one round from `context` with limit `draft_length` (see RoundCertificate).
/// A round that is exact from every context makes the whole decoder exact (rounds compose).
template <class ProposerT, class PolicyT, class VerifierT, class TargetFn>
[[nodiscard]] RoundCertificate certify_round(const ProposerT& proposer, const PolicyT& policy,
                                             const VerifierT& verifier, TargetFn&& target,
                                             const SamplingParams& params, const Sequence& context,
                                             std::size_t draft_length) {
  const RoundLaw round = round_law(proposer, policy, verifier, target, params, context,
                                   draft_length);
  const std::size_t length = draft_length + 1;
  Law continued;
  for (const auto& [chunk, probability] : round.chunks) {
    if (chunk.size() == length) {
      continued[chunk] += probability;
      continue;
    }
    Sequence after = context;
    after.insert(after.end(), chunk.begin(), chunk.end());
    for (const auto& [rest, rest_probability] :
         target_law(target, params, after, length - chunk.size())) {
      Sequence sequence = chunk;
      sequence.insert(sequence.end(), rest.begin(), rest.end());
      continued[sequence] += probability * rest_probability;
    }
  }
  return {total_variation(continued, target_law(target, params, context, length)),
          round.expected_accepted, round.expected_drafted, round.branches};
}

/// \brief How speculative_law caps each round's draft.
enum class Budget {
  exact,      ///< the decoder's rule with max_new_tokens = length: min(K, remaining - 1)
  unlimited,  ///< K every round; the law of the first `length` tokens (longer chunks are cut)
};

/// \brief The exact law of the first `length` tokens the decoder emits after `prompt`: rounds
/// composed under `budget` (default: the decoder's rule with max_new_tokens = length), the
/// policy told of every round (observe) along each path.
///
/// A stateless policy (an empty type, like StaticDraftLength) makes a round depend only on its
/// context, so the law is built breadth first with identical emitted prefixes pooled (one
/// round_law per distinct prefix: polynomial in `length`); a stateful policy is followed along
/// every path separately (exponential, for small lengths).
template <class ProposerT, class PolicyT, class VerifierT, class TargetFn>
[[nodiscard]] Law speculative_law(const ProposerT& proposer, const PolicyT& policy,
                                  const VerifierT& verifier, TargetFn&& target,
                                  const SamplingParams& params, const Sequence& prompt,
                                  std::size_t length, std::size_t draft_length,
                                  Budget budget = Budget::exact) {
  auto round_limit = [&](std::size_t remaining) {
    return budget == Budget::exact ? std::min(draft_length, remaining - 1) : draft_length;
  };
  auto cut = [&](Sequence sequence) {
    if (sequence.size() > length) sequence.resize(length);
    return sequence;
  };
  auto context_after = [&](const Sequence& emitted) {
    Sequence context = prompt;
    context.insert(context.end(), emitted.begin(), emitted.end());
    return context;
  };
  if constexpr (std::is_empty_v<PolicyT>) {
    // frontier[emitted] = mass; every prefix has fewer than `length` tokens.
    std::map<Sequence, double> frontier{{Sequence{}, 1.0}};
    Law law;
    while (!frontier.empty()) {
      std::map<Sequence, double> next;
      for (const auto& [emitted, mass] : frontier) {
        const std::size_t limit = round_limit(length - emitted.size());
        const RoundLaw round = round_law(proposer, policy, verifier, target, params,
                                         context_after(emitted), limit);
        for (const auto& [chunk, probability] : round.chunks) {
          Sequence longer = emitted;
          longer.insert(longer.end(), chunk.begin(), chunk.end());
          if (longer.size() >= length) {
            law[cut(std::move(longer))] += mass * probability;
          } else {
            next[longer] += mass * probability;
          }
        }
      }
      frontier = std::move(next);
    }
    if (length == 0) law[Sequence{}] = 1.0;
    return law;
  } else {
    Law law;
    std::function<void(const Sequence&, const PolicyT&, double)> extend =
        [&](const Sequence& emitted, const PolicyT& state, double mass) {
          if (emitted.size() >= length) {
            law[cut(emitted)] += mass;
            return;
          }
          const std::size_t limit = round_limit(length - emitted.size());
          const RoundLaw round = round_law(proposer, state, verifier, target, params,
                                           context_after(emitted), limit);
          for (const auto& [outcome, probability] : round.outcomes) {
            const Sequence& chunk = outcome.chunk;
            PolicyT next_state = state;
            next_state.observe(RoundReport{outcome.token_probabilities.size(), chunk.size() - 1,
                                           limit, 0.0, 0.0, outcome.token_probabilities});
            Sequence longer = emitted;
            longer.insert(longer.end(), chunk.begin(), chunk.end());
            extend(longer, next_state, mass * probability);
          }
        };
    extend(Sequence{}, policy, 1.0);
    return law;
  }
}

/// \brief The law of the first `length` tokens of `law`'s sequences (marginalising the rest):
/// e.g. the decoder's law with a larger budget, cut to the tokens every run emits.
[[nodiscard]] inline Law truncate(const Law& law, std::size_t length) {
  Law out;
  for (const auto& [sequence, probability] : law) {
    const std::size_t keep = std::min(length, sequence.size());
    out[Sequence(sequence.begin(), sequence.begin() + static_cast<std::ptrdiff_t>(keep))] +=
        probability;
  }
  return out;
}

/// \brief Largest absolute difference of one sequence's probability between two laws (a
/// pointwise companion to total_variation, which is at least as large).
[[nodiscard]] inline double max_abs_difference(const Law& a, const Law& b) {
  double worst = 0;
  for (const auto& [sequence, probability] : a) {
    const auto it = b.find(sequence);
    worst = std::max(worst, std::abs(probability - (it == b.end() ? 0.0 : it->second)));
  }
  for (const auto& [sequence, probability] : b) {
    if (a.find(sequence) == a.end()) worst = std::max(worst, probability);
  }
  return worst;
}

}  // namespace specdec::testing

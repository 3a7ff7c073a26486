#pragma once
/// \file
/// \brief Laws over token sequences and the statistics that compare them: total variation,
/// Pearson χ² and G tests with p-values, the sample size a χ² test needs (testing.hpp).

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

#include "specdec/types.hpp"

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
      auto smallest =
          std::min_element(cells.begin(), cells.end(),
                           [](const Cell& a, const Cell& b) { return a.expected < b.expected; });
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

/// \brief The cell of a sequence's first `length` tokens in a table of vocab^length cells,
/// the first token varying slowest: the index χ² tests of the first tokens count runs in.
/// Throws std::invalid_argument for fewer than `length` tokens or a token outside
/// [0, vocab).
[[nodiscard]] inline std::size_t cell_of(std::span<const token_t> tokens, std::size_t vocab,
                                         std::size_t length) {
  if (tokens.size() < length) {
    throw std::invalid_argument("testing::cell_of: " + std::to_string(tokens.size()) +
                                " tokens; expected at least " + std::to_string(length));
  }
  std::size_t cell = 0;
  for (std::size_t i = 0; i < length; ++i) {
    if (tokens[i] < 0 || static_cast<std::size_t>(tokens[i]) >= vocab) {
      throw std::invalid_argument("testing::cell_of: token " + std::to_string(tokens[i]) + " at " +
                                  std::to_string(i) + "; expected one in [0, " +
                                  std::to_string(vocab) + ")");
    }
    cell = cell * vocab + static_cast<std::size_t>(tokens[i]);
  }
  return cell;
}

/// \brief `law`'s probabilities of the first `length` tokens as vocab^length cells (cell_of),
/// the expected side of a χ² test of the first tokens (sequences of a law cut to `length`
/// tokens by truncate() add up in their cell).
[[nodiscard]] inline std::vector<double> law_cells(const Law& law, std::size_t vocab,
                                                   std::size_t length) {
  std::size_t cells = 1;
  for (std::size_t i = 0; i < length; ++i) cells *= vocab;
  std::vector<double> out(cells, 0.0);
  for (const auto& [sequence, probability] : law) {
    out[cell_of(sequence, vocab, length)] += probability;
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

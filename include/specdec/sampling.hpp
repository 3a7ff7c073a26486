#pragma once
/// \file
/// \brief Sampling parameters, the processed token distribution, and inverse-CDF sampling.
///
/// Filter order (the same for draft rows and target rows, at every position):
///   1. logits_processor (user, optional; sees the context that precedes the position)
///   2. temperature T    (T = 0 is greedy: argmax, lowest index on ties; steps 3-5 are moot
///                        because none of them can remove the argmax)
///   3. top-k            (keep the k largest logits)
///   4. top-p            (keep the smallest high-probability set of mass >= top_p, computed on
///                        the distribution left by top-k)
///   5. min-p            (keep tokens with p >= min_p * p_max)
///
/// Every filter is a threshold on the processed logit: a token survives iff
/// `logit >= threshold`, so tokens tied with the boundary logit all survive (top-k may keep
/// more than k tokens on ties; top-p never splits a tie). The processed distribution is
///   p(x) = exp((logit_x - max) / T) / Z   if logit_x >= threshold, else 0,
/// with Z the sum over kept tokens. Applying identical processing to the draft's q and the
/// target's p is what keeps speculative sampling exact *for the processed target distribution*.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <functional>
#include <limits>
#include <span>
#include <vector>

#include <Eigen/Core>

#include "specdec/detail/error.hpp"
#include "specdec/detail/row_kernels.hpp"
#include "specdec/softmax.hpp"
#include "specdec/types.hpp"

namespace specdec {

/// \brief How to turn logits into a distribution. Validated by validate() at generate() start.
struct SamplingParams {
  float temperature = 1.0f;  ///< >= 0 and finite; 0 = greedy
  int top_k = 0;             ///< >= 0; 0 = off (also off when >= V)
  float top_p = 1.0f;        ///< in (0, 1]; 1 = off
  float min_p = 0.0f;        ///< in [0, 1); 0 = off
  /// Optional and must be pure: rewrites one row of logits in place given the context it
  /// follows (repetition penalty, banned tokens set to -inf, ...). The decoder copies the
  /// model's row into its own buffer and applies this to every draft and target row, each with
  /// the context preceding that row's position. Without it no logits are copied.
  std::function<void(std::span<const token_t> context, std::span<float> logits)> logits_processor;

  /// \brief True for temperature 0 (argmax decoding).
  [[nodiscard]] bool greedy() const noexcept { return temperature == 0.0f; }

  /// \brief Throws std::invalid_argument naming the first bad field and its allowed range.
  void validate() const {
    if (!(temperature >= 0.0f) || !std::isfinite(temperature)) {
      detail::throw_invalid_argument("temperature = ", temperature,
                                     "; expected a finite value >= 0 (0 = greedy)");
    }
    if (top_k < 0) {
      detail::throw_invalid_argument("top_k = ", top_k, "; expected >= 0 (0 = off)");
    }
    if (!(top_p > 0.0f && top_p <= 1.0f)) {
      detail::throw_invalid_argument("top_p = ", top_p, "; expected a value in (0, 1] (1 = off)");
    }
    if (!(min_p >= 0.0f && min_p < 1.0f)) {
      detail::throw_invalid_argument("min_p = ", min_p, "; expected a value in [0, 1) (0 = off)");
    }
  }
};

/// \brief A processed next-token distribution, viewing (not owning) its logits.
///
/// `logits` points at the model's memory (no processor) or at the processor's scratch row: it
/// is valid exactly as long as that memory is. probability() and log_probability() read it.
template <class Scalar>
struct TokenDistribution {
  std::span<const Scalar> logits;  ///< processed logits, before temperature
  Scalar inv_temperature = 1;      ///< 1 / T, T > 0
  Scalar max_logit = 0;            ///< max over logits (finite)
  Scalar threshold = -std::numeric_limits<Scalar>::infinity();  ///< logit < threshold => p = 0
  Scalar normalizer = 1;  ///< Z = sum over kept tokens of exp((logit - max) * inv_temperature)

  [[nodiscard]] std::size_t vocab_size() const noexcept { return logits.size(); }
  /// \brief Whether the filters keep `token` (requires 0 <= token < V).
  [[nodiscard]] bool kept(token_t token) const noexcept {
    return logits[static_cast<std::size_t>(token)] >= threshold;
  }
  /// \brief Unnormalised weight exp((logit - max) / T), 0 for filtered tokens.
  [[nodiscard]] Scalar weight(token_t token) const noexcept {
    if (!kept(token)) return Scalar(0);
    return std::exp((logits[static_cast<std::size_t>(token)] - max_logit) * inv_temperature);
  }
  /// \brief p(token); 0 for filtered tokens.
  [[nodiscard]] Scalar probability(token_t token) const noexcept {
    return weight(token) / normalizer;
  }
  /// \brief log p(token) without forming p (exact for tiny p); -inf for filtered tokens.
  [[nodiscard]] Scalar log_probability(token_t token) const noexcept {
    if (!kept(token)) return -std::numeric_limits<Scalar>::infinity();
    return (logits[static_cast<std::size_t>(token)] - max_logit) * inv_temperature -
           std::log(normalizer);
  }
};

namespace detail {

template <class Scalar>
void grow_to(std::vector<Scalar>& buffer, std::size_t size) {
  if (buffer.size() < size) buffer.resize(size);
}

/// Smallest logit among the highest-probability tokens whose mass reaches `target_mass`:
/// the top-p boundary. `logits[0, n)` are the candidates (unsorted) and `weights[0, n)` their
/// unnormalised weights; both arrays are permuted together.
///
/// Quickselect on the mass instead of a sort: a three-way partition around a pivot logit
/// (greater | equal | less) also sums the mass of the first two groups; the boundary lies in
/// the greater group, is the pivot itself (a tie group is never split), or lies in the less
/// group, which is searched next. Expected work is linear in n.
/// Returns false if the candidates' total mass stays below target_mass (rounding).
template <class Scalar>
bool nucleus_boundary(Scalar* logits, Scalar* weights, std::size_t n, double target_mass,
                      Scalar& boundary) {
  std::size_t lo = 0;
  std::size_t hi = n;
  double mass_above = 0;  // mass of the candidates known to rank before [lo, hi)
  while (hi > lo) {
    // Median of three as pivot.
    Scalar a = logits[lo], b = logits[lo + (hi - lo) / 2], c = logits[hi - 1];
    if (a < b) std::swap(a, b);
    if (b < c) std::swap(b, c);
    if (a < b) std::swap(a, b);
    const Scalar pivot = b;
    // Dutch-flag partition: [lo, greater_end) > pivot, [greater_end, less_begin) == pivot,
    // [less_begin, hi) < pivot.
    std::size_t greater_end = lo;
    std::size_t i = lo;
    std::size_t less_begin = hi;
    double greater_mass = 0;
    double equal_mass = 0;
    while (i < less_begin) {
      if (logits[i] > pivot) {
        greater_mass += static_cast<double>(weights[i]);
        std::swap(logits[i], logits[greater_end]);
        std::swap(weights[i], weights[greater_end]);
        ++greater_end;
        ++i;
      } else if (logits[i] < pivot) {
        --less_begin;
        std::swap(logits[i], logits[less_begin]);
        std::swap(weights[i], weights[less_begin]);
      } else {
        equal_mass += static_cast<double>(weights[i]);
        ++i;
      }
    }
    if (mass_above + greater_mass >= target_mass) {
      hi = greater_end;  // non-empty: mass_above < target_mass <= mass_above + greater_mass
    } else if (mass_above + greater_mass + equal_mass >= target_mass) {
      boundary = pivot;
      return true;
    } else {
      mass_above += greater_mass + equal_mass;
      lo = less_begin;
    }
  }
  return false;
}

/// Older form of nucleus_boundary over candidate logits only (weights recomputed with std::exp
/// into a temporary). Kept for callers of the first internal API; the library uses the form
/// above.
template <class Scalar>
bool nucleus_boundary(Scalar* first, Scalar* last, Scalar max_logit, Scalar inv_temperature,
                      double target_mass, Scalar& boundary) {
  const auto count = static_cast<std::size_t>(last - first);
  std::vector<Scalar> weights(count);
  for (std::size_t i = 0; i < count; ++i) {
    weights[i] = std::exp((first[i] - max_logit) * inv_temperature);
  }
  return nucleus_boundary(first, weights.data(), count, target_mass, boundary);
}

/// The k-th largest logit (1 <= k < V), by std::nth_element on a scratch copy.
///
/// For small k the copy is shrunk first: the k-th largest of the maxima of 64-value groups is a
/// floor with at least k logits at or above it (those k group maxima), so the k-th largest
/// logit is >= floor and only logits >= floor, which live in the few groups whose max reaches
/// the floor, need to be copied and selected.
template <class Scalar>
[[nodiscard]] Scalar kth_largest(std::span<const Scalar> logits, std::size_t k,
                                 std::vector<Scalar>& scratch) {
  constexpr std::size_t kGroupSize = 64;
  const std::size_t vocab_size = logits.size();
  const std::size_t groups = (vocab_size + kGroupSize - 1) / kGroupSize;
  grow_to(scratch, vocab_size + groups);
  Scalar* candidates = scratch.data();
  std::size_t count = 0;
  if (k * 4 <= groups) {
    Scalar* group_max = scratch.data() + vocab_size;  // (groups)
    const auto all = as_array(logits);
    for (std::size_t g = 0; g < groups; ++g) {
      const std::size_t offset = g * kGroupSize;
      group_max[g] =
          all.segment(static_cast<Eigen::Index>(offset),
                      static_cast<Eigen::Index>(std::min(kGroupSize, vocab_size - offset)))
              .maxCoeff();
    }
    // Selecting from a copy keeps group_max in group order for the gather below.
    Scalar* selection = candidates;  // reused: the gather starts after the selection is done
    std::copy(group_max, group_max + groups, selection);
    std::nth_element(selection, selection + (k - 1), selection + groups, std::greater<Scalar>());
    const Scalar floor = selection[k - 1];
    for (std::size_t g = 0; g < groups; ++g) {
      if (group_max[g] < floor) continue;
      const std::size_t end = std::min((g + 1) * kGroupSize, vocab_size);
      for (std::size_t i = g * kGroupSize; i < end; ++i) {
        candidates[count] = logits[i];  // branchless gather
        count += logits[i] >= floor ? 1 : 0;
      }
    }
  } else {
    std::copy(logits.begin(), logits.end(), candidates);
    count = vocab_size;
  }
  std::nth_element(candidates, candidates + (k - 1), candidates + count, std::greater<Scalar>());
  return candidates[k - 1];
}

}  // namespace detail

/// \brief The logit threshold implementing top-k, then top-p, then min-p (see file comment).
///
/// Returns -inf when no filter is active. `max_logit` must be the row's finite maximum.
/// `scratch` is grown on first use (V + V/64 values for top-k, 2V for top-p), then reused.
///
/// - top-k: threshold = k-th largest logit (std::nth_element on a copy, see
///   detail::kth_largest; ties kept).
/// - top-p: with Z the mass left by top-k, the candidates are the tokens of probability >=
///   (1 - top_p) / V: the others hold less than 1 - top_p in total, so the nucleus lies among
///   the candidates and only they are searched. If rounding defeats that, every kept token is
///   searched; if even that fails, top-p keeps everything.
/// - min-p: p(x) >= min_p * p_max  <=>  logit_x >= max + T * log(min_p).
template <class Scalar>
[[nodiscard]] Scalar filter_threshold(std::span<const Scalar> logits, Scalar max_logit,
                                      Scalar inv_temperature, const SamplingParams& params,
                                      std::vector<Scalar>& scratch) {
  const Scalar neg_inf = -std::numeric_limits<Scalar>::infinity();
  const std::size_t vocab_size = logits.size();
  Scalar threshold = neg_inf;

  if (params.top_k > 0 && static_cast<std::size_t>(params.top_k) < vocab_size) {
    threshold = detail::kth_largest(logits, static_cast<std::size_t>(params.top_k), scratch);
  }

  if (params.top_p < 1.0f) {
    // scratch = [candidate logits (V) | their weights (V)]
    detail::grow_to(scratch, 2 * vocab_size);
    const double kept_mass = detail::exp_sum(logits, max_logit, inv_temperature, threshold);
    const double target_mass = static_cast<double>(params.top_p) * kept_mass;
    const double epsilon =
        (1.0 - static_cast<double>(params.top_p)) / static_cast<double>(vocab_size);
    const auto candidate_floor =
        static_cast<Scalar>(static_cast<double>(max_logit) +
                            std::log(epsilon * kept_mass) / static_cast<double>(inv_temperature));
    Scalar* candidates = scratch.data();
    Scalar* candidate_weights = scratch.data() + vocab_size;
    const Scalar neg_inf_threshold = -std::numeric_limits<Scalar>::infinity();
    for (const Scalar floor : {std::max(threshold, candidate_floor), threshold}) {
      // Branchless gather: always write, advance only past candidates (no mispredictions on
      // the ~50/50 decisions of flat rows).
      std::size_t count = 0;
      for (const Scalar logit : logits) {
        candidates[count] = logit;
        count += logit >= floor ? 1 : 0;
      }
      // Candidates are all kept already, so their weights need no mask.
      (void)detail::store_weights(std::span<const Scalar>(candidates, count), max_logit,
                                  inv_temperature, neg_inf_threshold,
                                  std::span<Scalar>(candidate_weights, count));
      Scalar boundary = threshold;
      if (detail::nucleus_boundary(candidates, candidate_weights, count, target_mass, boundary)) {
        threshold = std::max(threshold, boundary);
        break;
      }
    }
  }

  if (params.min_p > 0.0f) {
    const Scalar temperature = Scalar(1) / inv_temperature;
    const Scalar min_p_floor =
        max_logit + temperature * static_cast<Scalar>(std::log(static_cast<Scalar>(params.min_p)));
    threshold = std::max(threshold, min_p_floor);
  }
  return threshold;
}

/// \brief Processes one row: max pass (with the NaN / +inf check), thresholds, one exp-sum pass.
///
/// This is the target-row path: p(x) for any x then costs one scalar exp. The logits_processor
/// is *not* applied here (it is float-only and needs the context): see apply_logits_processor.
/// \throws std::invalid_argument if params.temperature is 0 (greedy has no distribution: use
/// argmax); std::domain_error for NaN / +inf / all -inf logits.
template <class Scalar>
[[nodiscard]] TokenDistribution<Scalar> process_logits(std::span<const Scalar> logits,
                                                       const SamplingParams& params,
                                                       std::vector<Scalar>& filter_scratch) {
  if (!(params.temperature > 0.0f)) {
    detail::throw_invalid_argument("process_logits: temperature = ", params.temperature,
                                   "; expected > 0 (temperature 0 is greedy: use argmax)");
  }
  TokenDistribution<Scalar> dist;
  dist.logits = logits;
  dist.inv_temperature = Scalar(1) / static_cast<Scalar>(params.temperature);
  dist.max_logit = detail::scan_max(logits).value;  // throws on NaN / +inf / all -inf
  dist.threshold =
      filter_threshold(logits, dist.max_logit, dist.inv_temperature, params, filter_scratch);
  dist.normalizer = static_cast<Scalar>(
      detail::exp_sum(logits, dist.max_logit, dist.inv_temperature, dist.threshold));
  return dist;
}

/// \brief Draft-row path: as process_logits, but the exp pass also stores every token's weight
/// (0 for filtered tokens) into `weights` (size V), for sample_from_weights and, if the drafted
/// token is rejected, the residual max(0, p - q). normalizer = sum of the stored weights.
template <class Scalar>
[[nodiscard]] TokenDistribution<Scalar> process_logits(std::span<const Scalar> logits,
                                                       const SamplingParams& params,
                                                       std::vector<Scalar>& filter_scratch,
                                                       std::span<Scalar> weights) {
  if (!(params.temperature > 0.0f)) {
    detail::throw_invalid_argument("process_logits: temperature = ", params.temperature,
                                   "; expected > 0 (temperature 0 is greedy: use argmax)");
  }
  if (weights.size() != logits.size()) {
    detail::throw_invalid_argument("process_logits: weights has ", weights.size(),
                                   " entries; expected ", logits.size(), " (one per token)");
  }
  TokenDistribution<Scalar> dist;
  dist.logits = logits;
  dist.inv_temperature = Scalar(1) / static_cast<Scalar>(params.temperature);
  dist.max_logit = detail::scan_max(logits).value;  // throws on NaN / +inf / all -inf
  dist.threshold =
      filter_threshold(logits, dist.max_logit, dist.inv_temperature, params, filter_scratch);
  dist.normalizer = static_cast<Scalar>(
      detail::store_weights(logits, dist.max_logit, dist.inv_temperature, dist.threshold, weights));
  return dist;
}

/// \brief Inverse-CDF sample from unnormalised weights with a coin in [0, 1): the first token
/// whose cumulative weight exceeds coin * total. Never returns a token of weight 0; if rounding
/// puts coin * total at or past the end, returns the last token of positive weight.
/// `total` must be the sum of `weights` (as returned by process_logits / store_weights).
template <class Scalar>
[[nodiscard]] token_t sample_from_weights(std::span<const Scalar> weights, Scalar total,
                                          double coin) {
  return detail::inverse_cdf(weights, static_cast<double>(total), coin);
}

/// \brief Samples from `dist` with a coin in [0, 1) by inverse CDF, writing the weights into
/// the caller's `weights_scratch` (size V) first. Never returns a token of probability 0.
template <class Scalar>
[[nodiscard]] token_t sample(const TokenDistribution<Scalar>& dist, double coin,
                             std::span<Scalar> weights_scratch) {
  if (weights_scratch.size() != dist.logits.size()) {
    detail::throw_invalid_argument("sample: weights_scratch has ", weights_scratch.size(),
                                   " entries; expected ", dist.logits.size());
  }
  const double total = detail::store_weights(dist.logits, dist.max_logit, dist.inv_temperature,
                                             dist.threshold, weights_scratch);
  return detail::inverse_cdf(std::span<const Scalar>(weights_scratch), total, coin);
}

/// \brief The row to process: `logits` itself without a processor (zero-copy), otherwise a
/// copy in `scratch` (grown to V once) rewritten by params.logits_processor(context, row).
template <class Allocator>
[[nodiscard]] std::span<const float> apply_logits_processor(
    const SamplingParams& params, std::span<const token_t> context, std::span<const float> logits,
    std::vector<float, Allocator>& scratch) {
  if (!params.logits_processor) return logits;
  if (scratch.size() < logits.size()) scratch.resize(logits.size());
  const std::span<float> row(scratch.data(), logits.size());
  std::copy(logits.begin(), logits.end(), row.begin());
  params.logits_processor(context, row);
  return row;
}

}  // namespace specdec

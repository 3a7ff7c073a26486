#pragma once
/// \file
/// \brief The filters (top-k, top-p, min-p) as one logit threshold: filter_threshold and the
/// kernels behind it (k-th largest, the exact nucleus cut). Filter order: sampling/params.hpp.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <span>
#include <vector>

#include <Eigen/Core>

#include "specdec/detail/error.hpp"
#include "specdec/detail/exact_float.hpp"
#include "specdec/detail/kernels/row_kernels.hpp"
#include "specdec/detail/kernels/simd_warnings.hpp"
#include "specdec/sampling/distribution.hpp"
#include "specdec/sampling/params.hpp"
#include "specdec/sampling/softmax.hpp"
#include "specdec/types.hpp"

namespace specdec {

namespace detail {

template <class Scalar>
void grow_to(std::vector<Scalar>& buffer, std::size_t size) {
  if (buffer.size() < size) buffer.resize(size);
}

/// Whether any of top-k / top-p / min-p can remove a token of a row of `vocab_size` logits.
/// Unfiltered rows take the single-pass kernels; filtered rows need the max first (every
/// threshold is relative to it).
[[nodiscard]] inline bool filters_active(const SamplingParams& params,
                                         std::size_t vocab_size) noexcept {
  return (params.top_k > 0 && static_cast<std::size_t>(params.top_k) < vocab_size) ||
         params.top_p < 1.0f || params.min_p > 0.0f;
}

/// The check at every public entry that samples (process_logits): the params are validated
/// (a few comparisons per row: a caller may not have gone through generate()) and T must be
/// positive.
inline void check_params_for_sampling(const SamplingParams& params) {
  params.validate();
  if (!(params.temperature > 0.0f)) {
    throw_invalid_argument("process_logits: temperature = ", params.temperature,
                           "; expected > 0 (temperature 0 is greedy: use argmax)");
  }
}

/// The processed row's weights must be representable: Z finite and > 0 (the max token alone
/// gives Z >= 1 in exact arithmetic). With FMA hardware each exponent carries the rounding of
/// max / T (detail::scaled_exponent), a common factor exp(delta) with |delta| up to
/// ~|max| / T * 6e-8 that cancels in every probability but under- or overflows when
/// |max logit| / T exceeds ~4e8: a temperature too small for logits that large. Checked once
/// per row (O(1)), so the error names the temperature instead of failing in a later draw.
template <class Scalar>
TokenDistribution<Scalar> check_normalizer(const TokenDistribution<Scalar>& dist,
                                           const SamplingParams& params) {
  if (!(dist.normalizer > Scalar(0)) || !std::isfinite(dist.normalizer)) {
    throw_domain_error("temperature = ", params.temperature,
                       " is too small for this row's logits (max logit = ", dist.max_logit,
                       ", normalizer = ", dist.normalizer,
                       "); expected |max logit| / temperature below ~4e8 (use a larger "
                       "temperature, or 0 for greedy)");
  }
  return dist;
}

/// Smallest logit among the highest-probability tokens whose mass reaches `target_mass`:
/// the top-p boundary. `logits[0, n)` are the candidates (unsorted) and `weights[0, n)` their
/// unnormalised weights; both arrays are permuted together. `mass_above` is the mass of the
/// tokens that rank before every candidate (a higher logit); on success `kept_mass` is
/// mass_above plus the mass of the candidates >= the boundary.
///
/// Quickselect on the mass instead of a sort: a three-way partition around a pivot logit
/// (greater | equal | less) also sums the mass of the first two groups; the boundary lies in
/// the greater group, is the pivot itself (a tie group is never split), or lies in the less
/// group, which is searched next. Expected work is linear in n.
/// Returns false if mass_above plus the candidates' total mass stays below target_mass
/// (rounding).
template <class Scalar>
bool nucleus_boundary(Scalar* logits, Scalar* weights, std::size_t n, double mass_above,
                      double target_mass, Scalar& boundary, double& kept_mass) {
  std::size_t lo = 0;
  std::size_t hi = n;
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
      kept_mass = mass_above + greater_mass + equal_mass;
      return true;
    } else {
      mass_above += greater_mass + equal_mass;
      lo = less_begin;
    }
  }
  return false;
}

// Eigen's AVX-512 maxCoeff is inlined into kth_largest (see detail/simd_warnings.hpp).
SPECDEC_BEGIN_SIMD_KERNELS

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
        count += logits[i] >= floor ? std::size_t{1} : std::size_t{0};
      }
    }
  } else {
    std::copy(logits.begin(), logits.end(), candidates);
    count = vocab_size;
  }
  std::nth_element(candidates, candidates + (k - 1), candidates + count, std::greater<Scalar>());
  return candidates[k - 1];
}

SPECDEC_END_SIMD_KERNELS

/// Result of the top-p search: the boundary logit and the mass of the tokens at or above it.
template <class Scalar>
struct NucleusCut {
  Scalar boundary;
  double kept_mass;
};

/// Candidates the top-p search hands to the quickselect at most, unless narrowing stalls
/// (ties): a quickselect over 2048 tokens costs about a tenth of an exp pass.
inline constexpr std::size_t kNucleusCandidates = 2048;
/// Narrowing passes before the search gives up on sparsity and selects from the whole bracket.
inline constexpr int kNucleusRefinements = 3;

/// \brief The exact top-p boundary (see filter_threshold) and the kept mass, in one exp pass.
///
/// 1. One pass stores weights[x] = exp((x - max) / T) (0 below `floor`, the top-k threshold)
///    and sums Z and the mass above each of kMassLevels logit levels between the max and
///    max - T d_max, d_max = log(V / (1 - top_p)): the boundary cannot lie lower, since tokens
///    of probability < (1 - top_p) / V hold less than 1 - top_p together (and Z >= 1).
/// 2. The boundary lies in the bracket [lo, hi) between the last level whose mass is below
///    top_p Z and the next one. While the bracket holds more than kNucleusCandidates tokens
///    (known without looking when its mass needs more tokens of weight <= w(hi) than that, else
///    found by a gather that gives up at the limit), kRefineLevels levels spread inside it are
///    summed from the stored weights (no exp) and the bracket shrinks to one slice.
/// 3. The bracket's tokens are gathered and detail::nucleus_boundary finds the exact boundary
///    among them, knowing the mass above the bracket; ties are never split. The kept mass is
///    that mass plus the candidates' at or above the boundary: no further pass for Z.
/// The result is the threshold of the sort-based definition (up to rounding of the mass sums,
/// which only matters when top_p Z equals a cumulative mass to ~1e-7).
///
/// `candidates` has room for 2 (V + 1) values.
template <class Scalar>
[[nodiscard]] NucleusCut<Scalar> nucleus_cut(std::span<const Scalar> logits, Scalar max_logit,
                                             Scalar inv_temperature, Scalar floor, float top_p,
                                             std::span<Scalar> weights, Scalar* candidates) {
  constexpr Scalar neg_inf = -std::numeric_limits<Scalar>::infinity();
  constexpr Scalar pos_inf = std::numeric_limits<Scalar>::infinity();
  const std::size_t vocab_size = logits.size();
  const double temperature = 1.0 / static_cast<double>(inv_temperature);
  const double d_max =
      std::log(static_cast<double>(vocab_size) / (1.0 - static_cast<double>(top_p)));

  // 1. Weights, Z and the level masses. The levels' distances below the max are geometric,
  //    from d_max / 16 * 2^(4 / kMassLevels) up to d_max: peaked rows cut close to the max.
  Scalar levels[kMassLevels];
  for (std::size_t j = 0; j < kMassLevels; ++j) {
    const double fraction =
        std::exp2(-4.0 * static_cast<double>(kMassLevels - 1 - j) / kMassLevels);
    levels[j] =
        static_cast<Scalar>(static_cast<double>(max_logit) - fraction * d_max * temperature);
  }
  double masses[kMassLevels] = {};
  double total = 0;
  const bool masked = !detail::is_minus_infinity(floor);
  const bool flush = !packet_exp_of_minus_inf_is_zero<Scalar>();
  for_each_block(vocab_size, [&](std::size_t offset, std::size_t length) {
    const Scalar* x = logits.data() + offset;
    Scalar* w = weights.data() + offset;
    Scalar sum;
    if (masked) {
      sum = flush ? exp_block_with_level_masses<Scalar, true, true>(
                        x, length, max_logit, inv_temperature, floor, levels, w, masses)
                  : exp_block_with_level_masses<Scalar, true, false>(
                        x, length, max_logit, inv_temperature, floor, levels, w, masses);
    } else {
      sum = flush ? exp_block_with_level_masses<Scalar, false, true>(
                        x, length, max_logit, inv_temperature, floor, levels, w, masses)
                  : exp_block_with_level_masses<Scalar, false, false>(
                        x, length, max_logit, inv_temperature, floor, levels, w, masses);
    }
    total += static_cast<double>(sum);
  });
  const double target_mass = static_cast<double>(top_p) * total;

  // 2. The bracket [lo, hi) and the mass above it, narrowed until it is sparse.
  Scalar hi = pos_inf;
  Scalar lo = neg_inf;
  double mass_above = 0;      // mass of the tokens >= hi (< target)
  double mass_at_lo = total;  // mass of the tokens >= lo (>= target)
  auto choose_bracket = [&]<std::size_t kLevels>(const Scalar(&level)[kLevels],
                                                 const double(&mass)[kLevels], Scalar bottom) {
    for (std::size_t j = 0; j < kLevels; ++j) {
      if (mass[j] >= target_mass) {
        lo = level[j];
        mass_at_lo = mass[j];
        return;
      }
      hi = level[j];
      mass_above = mass[j];
    }
    lo = bottom;  // every level holds less than the target: the bracket ends at `bottom`
  };
  // Below max - T (d_max - log Z) the tokens hold less than (1 - top_p) Z.
  Scalar bottom =
      static_cast<Scalar>(static_cast<double>(max_logit) - (d_max - std::log(total)) * temperature);
  choose_bracket(levels, masses, bottom);
  if (!(lo < hi)) lo = neg_inf;  // rounding: search everything below hi
  lo = std::max(lo, floor);

  Scalar* candidate_logits = candidates;
  Scalar* candidate_weights = candidates + vocab_size + 1;
  const std::span<const Scalar> stored(weights.data(), vocab_size);
  std::size_t count = 0;
  for (int round = 0;; ++round) {
    const bool last = round == kNucleusRefinements || detail::is_minus_infinity(lo);
    const bool open_above = detail::is_plus_infinity(hi);
    const std::size_t capacity = last ? vocab_size : kNucleusCandidates;
    // The bracket's mass sits in tokens of weight at most w(hi): when that needs more than
    // `capacity` tokens, skip the doomed gather.
    const double max_weight =
        open_above ? 1.0
                   : std::exp((static_cast<double>(hi) - static_cast<double>(max_logit)) *
                              static_cast<double>(inv_temperature));
    const bool surely_too_many =
        !last && mass_at_lo - mass_above > static_cast<double>(capacity) * max_weight;
    if (!surely_too_many) {
      count = gather_range(logits, stored, lo, hi, candidate_logits, candidate_weights, capacity);
      if (count <= capacity) break;
    }
    // Too many: sum the mass above levels spread evenly inside the bracket (from the max down
    // when the bracket is open above) and keep one slice.
    const double top = open_above ? static_cast<double>(max_logit) : static_cast<double>(hi);
    const double step = (top - static_cast<double>(lo)) /
                        static_cast<double>(open_above ? kRefineLevels : kRefineLevels + 1);
    Scalar inner[kRefineLevels];
    for (std::size_t j = 0; j < kRefineLevels; ++j) {
      const double offset = static_cast<double>(open_above ? j : j + 1) * step;
      inner[j] = static_cast<Scalar>(top - offset);
    }
    double inner_masses[kRefineLevels];
    level_masses(logits, stored, inner, inner_masses);
    const Scalar old_lo = lo;
    choose_bracket(inner, inner_masses, old_lo);
    lo = std::max(lo, old_lo);
  }

  // 3. The exact boundary among the candidates.
  Scalar boundary = floor;
  double kept_mass = total;
  if (nucleus_boundary(candidate_logits, candidate_weights, count, mass_above, target_mass,
                       boundary, kept_mass)) {
    return {std::max(boundary, floor), kept_mass};
  }
  // Rounding kept the bracket's mass below the target: search everything below hi.
  count = gather_range(logits, stored, floor, hi, candidate_logits, candidate_weights, vocab_size);
  if (nucleus_boundary(candidate_logits, candidate_weights, count, mass_above, target_mass,
                       boundary, kept_mass)) {
    return {std::max(boundary, floor), kept_mass};
  }
  return {floor, total};  // even that fell short by rounding: keep everything
}

/// What the filters decided, and what the top-p search already computed.
template <class Scalar>
struct FilterResult {
  Scalar threshold = -std::numeric_limits<Scalar>::infinity();
  /// top-p ran: the weights span holds exp((x - max) / T), 0 below the top-k threshold only.
  bool weights_stored = false;
  /// kept_mass = the sum of those weights over x >= threshold (top-p ran and decided last).
  bool kept_mass_known = false;
  double kept_mass = 0;
};

/// top-k, then top-p, then min-p (see filter_threshold). `weights` (V) receives top-p's
/// weights; empty: they go to `scratch`.
template <class Scalar>
[[nodiscard]] FilterResult<Scalar> apply_filters(std::span<const Scalar> logits, Scalar max_logit,
                                                 Scalar inv_temperature,
                                                 const SamplingParams& params,
                                                 std::span<Scalar> weights,
                                                 std::vector<Scalar>& scratch) {
  const std::size_t vocab_size = logits.size();
  FilterResult<Scalar> result;
  if (params.top_k > 0 && static_cast<std::size_t>(params.top_k) < vocab_size) {
    result.threshold = kth_largest(logits, static_cast<std::size_t>(params.top_k), scratch);
  }
  if (params.top_p < 1.0f) {
    // scratch = [weights unless the caller's (V) | candidate logits (V + 1) | their weights (V +
    // 1)]
    const std::size_t own = weights.empty() ? vocab_size : 0;
    grow_to(scratch, own + 2 * (vocab_size + 1));
    const std::span<Scalar> top_p_weights =
        weights.empty() ? std::span<Scalar>(scratch.data(), vocab_size) : weights;
    const NucleusCut<Scalar> cut = nucleus_cut(logits, max_logit, inv_temperature, result.threshold,
                                               params.top_p, top_p_weights, scratch.data() + own);
    result.threshold = cut.boundary;
    result.weights_stored = true;
    result.kept_mass_known = true;
    result.kept_mass = cut.kept_mass;
  }
  if (params.min_p > 0.0f) {
    const Scalar temperature = Scalar(1) / inv_temperature;
    const Scalar min_p_floor =
        max_logit + temperature * static_cast<Scalar>(std::log(static_cast<Scalar>(params.min_p)));
    if (min_p_floor > result.threshold) {
      result.threshold = min_p_floor;
      result.kept_mass_known = false;
    }
  }
  return result;
}

}  // namespace detail

/// \brief The logit threshold implementing top-k, then top-p, then min-p (see file comment).
///
/// Returns -inf when no filter is active. `max_logit` must be the row's finite maximum.
/// `scratch` is grown on first use (V + V/64 values for top-k, 3V + 2 for top-p), then reused.
///
/// - top-k: threshold = k-th largest logit (std::nth_element on a copy, see
///   detail::kth_largest; ties kept).
/// - top-p: with Z the mass left by top-k, the smallest logit b such that the tokens with
///   logit >= b hold at least top_p Z (a tie at b is kept whole). Found in one exp pass that
///   also sums the mass above a ladder of levels, a bracketing of the boundary narrowed without
///   further exps, and a quickselect over the few tokens in the final bracket (see
///   detail::nucleus_cut). If rounding defeats the bracket, every kept token below it is
///   searched; if even that fails, top-p keeps everything.
/// - min-p: p(x) >= min_p * p_max  <=>  logit_x >= max + T * log(min_p).
template <class Scalar>
[[nodiscard]] Scalar filter_threshold(std::span<const Scalar> logits, Scalar max_logit,
                                      Scalar inv_temperature, const SamplingParams& params,
                                      std::vector<Scalar>& scratch) {
  params.validate();
  return detail::apply_filters(logits, max_logit, inv_temperature, params, std::span<Scalar>(),
                               scratch)
      .threshold;
}

}  // namespace specdec

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
#include <cassert>
#include <cmath>
#include <cstddef>
#include <functional>
#include <limits>
#include <span>
#include <vector>

#include <Eigen/Core>

#include "specdec/detail/error.hpp"
#include "specdec/detail/exact_float.hpp"
#include "specdec/detail/row_kernels.hpp"
#include "specdec/detail/simd_warnings.hpp"
#include "specdec/softmax.hpp"
#include "specdec/types.hpp"

namespace specdec {

/// \brief How to turn logits into a distribution. Validated by validate() at generate() start.
struct SamplingParams {
  float temperature = 1.0f;  ///< 0 (greedy) or finite and >= kMinTemperature (1e-30)
  int top_k = 0;             ///< >= 0; 0 = off (also off when >= V)
  float top_p = 1.0f;        ///< in (0, 1]; 1 = off
  float min_p = 0.0f;        ///< in [0, 1); 0 = off
  /// Optional and must be pure: rewrites one row of logits in place given the context it
  /// follows (repetition penalty, banned tokens set to -inf, ...). The decoder copies the
  /// model's row into its own buffer and applies this to every draft and target row, each with
  /// the context preceding that row's position. Without it no logits are copied.
  std::function<void(std::span<const token_t> context, std::span<float> logits)> logits_processor;

  /// The smallest positive temperature: T must be 0 (greedy) or at least this. Sampling divides
  /// logits by T, and the kernels form (x - max) / T and x / T - max / T (the FMA form of
  /// detail::scaled_exponent); for logits up to 1e8 in magnitude those stay below 2e8 / T, which
  /// is finite in float (< 3.4e38) exactly when T > 5.9e-31. 1e-30 keeps that margin and 1 / T
  /// = 1e30 finite; below ~2.9e-39, 1 / T itself overflows to inf. At this temperature any two
  /// logits further apart than ~1e-28 already give a point mass at the argmax, so nothing is
  /// lost: use T = 0 for argmax decoding.
  static constexpr float kMinTemperature = 1e-30f;

  /// \brief True for temperature 0 (argmax decoding).
  [[nodiscard]] bool greedy() const noexcept { return detail::exactly_equal(temperature, 0.0f); }

  /// \brief Throws std::invalid_argument naming the first bad field and its allowed range.
  void validate() const {
    if (!(temperature >= 0.0f) || !std::isfinite(temperature)) {
      detail::throw_invalid_argument("temperature = ", temperature,
                                     "; expected a finite value >= 0 (0 = greedy)");
    }
    if (temperature > 0.0f && temperature < kMinTemperature) {
      detail::throw_invalid_argument(
          "temperature = ", temperature, "; expected 0 (greedy) or >= ", kMinTemperature,
          " (SamplingParams::kMinTemperature: below it (max - x) / T overflows for logits up to "
          "1e8)");
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
  /// The reference logit every weight is relative to: the row's max (finite) for
  /// distributions without stored weights and for filtered rows; for an unfiltered row processed
  /// with stored weights, the reference those weights share (a logit at most 64 T below the max,
  /// see detail::online_store_weights). Either way weight(x) = exp((logit_x - max_logit) / T).
  Scalar max_logit = 0;
  Scalar threshold = -std::numeric_limits<Scalar>::infinity();  ///< logit < threshold => p = 0
  Scalar normalizer = 1;  ///< Z = sum over kept tokens of exp((logit - max_logit) / T)
  /// Optional, set by process_logits(logits, params, filter_scratch, recorded) for unfiltered
  /// rows: per-1024-token-block weight sums, block b's relative to block_references[b], views of
  /// the caller's buffers. sample() then finds the coin's block from them instead of summing
  /// the row again (one pass per sampled row instead of two). Empty otherwise.
  std::span<const Scalar> block_sums{};
  std::span<const Scalar> block_references{};  ///< see block_sums

  [[nodiscard]] std::size_t vocab_size() const noexcept { return logits.size(); }
  /// \brief Whether the filters keep `token`.
  ///
  /// Precondition of kept(), weight(), probability() and log_probability(): 0 <= token < V.
  /// Unchecked (they run per token in verification's hot loop; an assert in debug builds):
  /// the public functions that take token ids from callers (verify.hpp) check them once.
  [[nodiscard]] bool kept(token_t token) const noexcept {
    assert(token >= 0 && static_cast<std::size_t>(token) < logits.size());
    return logits[static_cast<std::size_t>(token)] >= threshold;
  }
  /// \brief Unnormalised weight exp((logit - max_logit) / T), 0 for filtered tokens.
  [[nodiscard]] Scalar weight(token_t token) const noexcept {
    if (!kept(token)) return Scalar(0);
    return std::exp(exponent(token));
  }
  /// \brief p(token); 0 for filtered tokens. Requires 0 <= token < V (see kept()).
  [[nodiscard]] Scalar probability(token_t token) const noexcept {
    return weight(token) / normalizer;
  }
  /// \brief log p(token) without forming p (exact for tiny p); -inf for filtered tokens.
  /// Requires 0 <= token < V (see kept()).
  [[nodiscard]] Scalar log_probability(token_t token) const noexcept {
    if (!kept(token)) return -std::numeric_limits<Scalar>::infinity();
    return exponent(token) - std::log(normalizer);
  }

 private:
  /// (logit - max_logit) / T in the kernels' exact form (detail::scaled_exponent), so weight()
  /// agrees with the weights the normalizer was summed from.
  [[nodiscard]] Scalar exponent(token_t token) const noexcept {
    return detail::scaled_exponent(logits[static_cast<std::size_t>(token)], max_logit,
                                   inv_temperature);
  }
};

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

/// \brief Number of block sums process_logits records for a row of `vocab_size` weights (one
/// per 1024 tokens): the size of its `block_sums` argument.
[[nodiscard]] constexpr std::size_t weight_block_count(std::size_t vocab_size) noexcept {
  return detail::block_count(vocab_size);
}

/// \brief Caller-owned buffers, weight_block_count(V) entries each, into which process_logits
/// records a target row's block sums (see TokenDistribution::block_sums).
template <class Scalar>
struct BlockSumBuffers {
  std::span<Scalar> sums;
  std::span<Scalar> references;
};

namespace detail {

/// The target-row path behind both process_logits overloads below; empty `recorded` buffers
/// record nothing.
template <class Scalar>
[[nodiscard]] TokenDistribution<Scalar> process_target_row(std::span<const Scalar> logits,
                                                           const SamplingParams& params,
                                                           std::vector<Scalar>& filter_scratch,
                                                           BlockSumBuffers<Scalar> recorded) {
  check_params_for_sampling(params);
  TokenDistribution<Scalar> dist;
  dist.logits = logits;
  dist.inv_temperature = Scalar(1) / static_cast<Scalar>(params.temperature);
  if (!filters_active(params, logits.size())) {
    const OnlineSum<Scalar> row =
        online_exp_sum(logits, dist.inv_temperature, recorded.sums, recorded.references);
    dist.max_logit = row.reference;  // the max
    dist.normalizer = static_cast<Scalar>(row.sum);
    dist.block_sums = recorded.sums;
    dist.block_references = recorded.references;
    return check_normalizer(dist, params);
  }
  dist.max_logit = scan_max(logits).value;  // throws on NaN / +inf / all -inf
  const FilterResult<Scalar> filtered =
      apply_filters(logits, dist.max_logit, dist.inv_temperature, params, std::span<Scalar>(),
                    filter_scratch);
  dist.threshold = filtered.threshold;
  if (filtered.kept_mass_known) {
    dist.normalizer = static_cast<Scalar>(filtered.kept_mass);  // top-p summed it already
  } else if (filtered.weights_stored) {
    // min-p cut deeper than top-p: sum the stored weights above it (no exp).
    dist.normalizer = static_cast<Scalar>(mask_weights(
        logits, dist.threshold, std::span<Scalar>(filter_scratch.data(), logits.size()),
        std::span<Scalar>()));
  } else {
    dist.normalizer =
        static_cast<Scalar>(exp_sum(logits, dist.max_logit, dist.inv_temperature, dist.threshold));
  }
  return check_normalizer(dist, params);
}

}  // namespace detail

/// \brief Processes one row for p(x) and log p(x): the target-row path.
///
/// Unfiltered rows (no top-k / top-p / min-p): one pass, online softmax by blocks (the max and
/// the normalizer together, see detail::online_exp_sum). Filtered rows: a max pass, the
/// thresholds, then one exp-sum pass. Either way max_logit is the row's max and p(x) for any x
/// then costs one scalar exp. The logits_processor is *not* applied here (it is float-only and
/// needs the context): see apply_logits_processor.
/// \throws std::invalid_argument for params that fail SamplingParams::validate() and for
/// temperature 0 (greedy has no distribution: use argmax); std::domain_error for NaN / +inf /
/// all -inf logits.
template <class Scalar>
[[nodiscard]] TokenDistribution<Scalar> process_logits(std::span<const Scalar> logits,
                                                       const SamplingParams& params,
                                                       std::vector<Scalar>& filter_scratch) {
  return detail::process_target_row(logits, params, filter_scratch, BlockSumBuffers<Scalar>{});
}

/// \brief As process_logits(logits, params, filter_scratch), and for unfiltered rows (one pass)
/// also records the per-block sums into `recorded`, which the returned distribution views: a
/// later sample() from it then costs one block instead of a pass. Keep the buffers alive and
/// unchanged while sampling from the distribution. Filtered rows record nothing.
template <class Scalar>
[[nodiscard]] TokenDistribution<Scalar> process_logits(std::span<const Scalar> logits,
                                                       const SamplingParams& params,
                                                       std::vector<Scalar>& filter_scratch,
                                                       BlockSumBuffers<Scalar> recorded) {
  const std::size_t blocks = weight_block_count(logits.size());
  if (recorded.sums.size() != blocks || recorded.references.size() != blocks) {
    detail::throw_invalid_argument("process_logits: recorded block buffers have ",
                                   recorded.sums.size(), " and ", recorded.references.size(),
                                   " entries; expected weight_block_count(", logits.size(),
                                   ") = ", blocks, " each");
  }
  return detail::process_target_row(logits, params, filter_scratch, recorded);
}

namespace detail {

/// The draft-row path behind both process_logits overloads that store weights. The block sums
/// go to `block_sums`, or to filter_scratch when it is empty (then they are not kept).
template <class Scalar>
[[nodiscard]] TokenDistribution<Scalar> process_logits_storing_weights(
    std::span<const Scalar> logits, const SamplingParams& params,
    std::vector<Scalar>& filter_scratch, std::span<Scalar> weights, std::span<Scalar> block_sums) {
  check_params_for_sampling(params);
  const std::size_t vocab_size = logits.size();
  const std::size_t blocks = block_count(vocab_size);
  if (weights.size() != vocab_size) {
    throw_invalid_argument("process_logits: weights has ", weights.size(), " entries; expected ",
                           vocab_size, " (one per token)");
  }
  if (!block_sums.empty() && block_sums.size() != blocks) {
    throw_invalid_argument("process_logits: block_sums has ", block_sums.size(),
                           " entries; expected weight_block_count(", vocab_size, ") = ", blocks);
  }
  TokenDistribution<Scalar> dist;
  dist.logits = logits;
  dist.inv_temperature = Scalar(1) / static_cast<Scalar>(params.temperature);
  if (!filters_active(params, vocab_size)) {
    // filter_scratch = [per-block references (blocks) | block sums if not the caller's (blocks)]
    grow_to(filter_scratch, 2 * blocks);
    const std::span<Scalar> references(filter_scratch.data(), blocks);
    const std::span<Scalar> sums =
        block_sums.empty() ? std::span<Scalar>(filter_scratch.data() + blocks, blocks) : block_sums;
    const OnlineSum<Scalar> row =
        online_store_weights(logits, dist.inv_temperature, weights, sums, references);
    dist.max_logit = row.reference;  // shared by every stored weight, not necessarily the max
    dist.normalizer = static_cast<Scalar>(row.sum);
    return check_normalizer(dist, params);
  }
  dist.max_logit = scan_max(logits).value;  // throws on NaN / +inf / all -inf
  const FilterResult<Scalar> filtered =
      apply_filters(logits, dist.max_logit, dist.inv_temperature, params, weights, filter_scratch);
  dist.threshold = filtered.threshold;
  if (filtered.weights_stored) {
    // top-p stored the weights already; drop the tokens below the final threshold (no exp).
    grow_to(filter_scratch, blocks);
    const std::span<Scalar> sums =
        block_sums.empty() ? std::span<Scalar>(filter_scratch.data(), blocks) : block_sums;
    dist.normalizer = static_cast<Scalar>(mask_weights(logits, dist.threshold, weights, sums));
  } else {
    dist.normalizer = static_cast<Scalar>(store_weights(
        logits, dist.max_logit, dist.inv_temperature, dist.threshold, weights, block_sums));
  }
  return check_normalizer(dist, params);
}

}  // namespace detail

/// \brief Draft-row path: as process_logits, but the exp pass also stores every token's weight
/// (0 for filtered tokens) into `weights` (size V) and their sums per 1024-token block into
/// `block_sums` (size weight_block_count(V)), for sample_from_weights and, if the drafted
/// token is rejected, the residual max(0, p - q). normalizer = the sum of the block sums.
///
/// Unfiltered rows take one pass (see detail::online_store_weights): the weights then share a
/// reference logit (dist.max_logit) that may lie below the max, so weights can exceed 1; q(x)
/// = weights[x] / normalizer either way, and it is exactly the distribution sampled.
template <class Scalar>
[[nodiscard]] TokenDistribution<Scalar> process_logits(std::span<const Scalar> logits,
                                                       const SamplingParams& params,
                                                       std::vector<Scalar>& filter_scratch,
                                                       std::span<Scalar> weights,
                                                       std::span<Scalar> block_sums) {
  if (block_sums.size() != weight_block_count(logits.size())) {
    detail::throw_invalid_argument("process_logits: block_sums has ", block_sums.size(),
                                   " entries; expected weight_block_count(", logits.size(),
                                   ") = ", weight_block_count(logits.size()));
  }
  return detail::process_logits_storing_weights(logits, params, filter_scratch, weights,
                                                block_sums);
}

/// \brief As above without keeping the block sums: sample the weights with
/// sample_from_weights(weights, normalizer, coin), which re-sums them.
template <class Scalar>
[[nodiscard]] TokenDistribution<Scalar> process_logits(std::span<const Scalar> logits,
                                                       const SamplingParams& params,
                                                       std::vector<Scalar>& filter_scratch,
                                                       std::span<Scalar> weights) {
  return detail::process_logits_storing_weights(logits, params, filter_scratch, weights,
                                                std::span<Scalar>());
}

/// \brief Inverse-CDF sample with a coin in [0, 1) from the weights and block sums stored by
/// process_logits: the first token whose cumulative weight exceeds coin * Z, Z = the sum of
/// the block sums (the normalizer). The block sums locate the block, so only one block of
/// weights is read. Never returns a token of weight 0; if rounding puts coin * Z at or past the
/// end, returns the last token of positive weight.
template <class Scalar>
[[nodiscard]] token_t sample_from_weights(std::span<const Scalar> weights,
                                          std::span<const Scalar> block_sums, double coin) {
  if (block_sums.size() != weight_block_count(weights.size())) {
    detail::throw_invalid_argument("sample_from_weights: block_sums has ", block_sums.size(),
                                   " entries; expected weight_block_count(", weights.size(),
                                   ") = ", weight_block_count(weights.size()));
  }
  return detail::inverse_cdf(weights, block_sums, coin);
}

/// \brief Inverse-CDF sample from unnormalised weights with a coin in [0, 1): the first token
/// whose cumulative weight exceeds coin * total. Never returns a token of weight 0; if rounding
/// puts coin * total at or past the end, returns the last token of positive weight.
/// `total` must be the sum of `weights` (as returned by process_logits, residual_distribution).
template <class Scalar>
[[nodiscard]] token_t sample_from_weights(std::span<const Scalar> weights, Scalar total,
                                          double coin) {
  return detail::inverse_cdf(weights, static_cast<double>(total), coin);
}

/// \brief Samples from `dist` with a coin in [0, 1) by inverse CDF (the first token whose
/// cumulative weight exceeds coin * the weights' sum). `weights_scratch` (size V) is scratch
/// space: one exp pass sums the weights per block without storing them, then only the block the
/// coin falls in is recomputed (see detail::sample_blockwise). If `dist` carries recorded block
/// sums (process_logits with BlockSumBuffers), the summing pass is skipped: the recorded sums,
/// moved onto dist.max_logit (one scalar exp per distinct block reference), locate the block.
/// Those rescaled sums can differ from re-summed ones by rounding (~1e-7 relative), so a coin
/// within that distance of a token's CDF boundary may pick the neighbour; the law is p to float
/// precision either way. Never returns a token of probability 0.
template <class Scalar>
[[nodiscard]] token_t sample(const TokenDistribution<Scalar>& dist, double coin,
                             std::span<Scalar> weights_scratch) {
  const std::size_t vocab_size = dist.logits.size();
  if (weights_scratch.size() != vocab_size) {
    detail::throw_invalid_argument("sample: weights_scratch has ", weights_scratch.size(),
                                   " entries; expected ", vocab_size);
  }
  const bool masked = !detail::is_minus_infinity(dist.threshold);
  const bool flush = !detail::packet_exp_of_minus_inf_is_zero<Scalar>();
  auto block = [&](std::size_t offset, std::size_t length, Scalar* out) {
    const Scalar* logits = dist.logits.data() + offset;
    if (out == nullptr) {
      return detail::dispatch_exp_block<Scalar, false>(
          masked, flush, logits, length, dist.max_logit, dist.inv_temperature, dist.threshold, out);
    }
    return detail::dispatch_exp_block<Scalar, true>(masked, flush, logits, length, dist.max_logit,
                                                    dist.inv_temperature, dist.threshold, out);
  };
  const std::size_t blocks = detail::block_count(vocab_size);
  if (!dist.block_sums.empty() && dist.block_sums.size() == blocks &&
      dist.block_references.size() == blocks && !masked) {
    const std::span<Scalar> sums = weights_scratch.first(blocks);
    double total = 0;
    Scalar reference = std::numeric_limits<Scalar>::quiet_NaN();
    double factor = 0;
    for (std::size_t b = 0; b < blocks; ++b) {
      if (!(dist.block_sums[b] > Scalar(0))) {
        sums[b] = 0;
        continue;
      }
      // References only grow: few exps.
      if (!detail::exactly_equal(dist.block_references[b], reference)) {
        reference = dist.block_references[b];
        factor =
            std::exp(detail::reference_shift(reference, dist.max_logit, dist.inv_temperature));
      }
      sums[b] = static_cast<Scalar>(static_cast<double>(dist.block_sums[b]) * factor);
      total += static_cast<double>(sums[b]);
    }
    const token_t token = detail::sample_located<Scalar>(
        vocab_size, block, std::span<const Scalar>(sums), total, coin);
    // A block whose rescaled sum is a positive float but whose weights all underflow relative
    // to the max (probability < 1e-38) would yield a token of weight 0: fall back to re-summing.
    if (token >= 0 && dist.weight(token) > Scalar(0)) return token;
  }
  double total = 0;
  const token_t token = detail::sample_blockwise<Scalar>(
      vocab_size, block, weights_scratch.first(blocks), coin, total);
  if (token < 0) {
    detail::throw_domain_error("cannot sample: every weight is 0 (total = ", total,
                               "); expected at least one positive weight");
  }
  return token;
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

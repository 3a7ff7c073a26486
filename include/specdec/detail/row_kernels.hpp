#pragma once
/// \file
/// \brief Vectorised single-pass building blocks over one row of logits (internal).
///
/// Determinism: every reduction here splits the row into blocks at fixed indices (0, kBlockSize,
/// ...) and lanes at fixed indices, never depending on the address of the data (Eigen's own
/// reductions peel to an aligned address, so their summation order depends on where a buffer
/// happens to live). Hence the same logits give bit-identical sums wherever they are stored,
/// and the same seed gives the same tokens from run to run. Stores are fastest into 64-byte
/// aligned buffers, which is why the decoder allocates its buffers aligned.
///
/// Rows are processed in blocks of kBlockSize values. A block (4 KiB of floats) stays in L1,
/// so "compute exp of a block, store it, sum it" reads the row from memory once. Block sums are
/// accumulated in double: the sum of V ~ 1e5 positive floats then loses nothing visible, and
/// the store pass and the inverse-CDF scan see bit-identical partial sums (same blocks, same
/// Eigen reduction over the same memory, same order).

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <span>
#include <utility>

#include <Eigen/Core>

#include "specdec/detail/error.hpp"
#include "specdec/types.hpp"

namespace specdec::detail {

inline constexpr std::size_t kBlockSize = 1024;

template <class Scalar>
using ConstArrayMap = Eigen::Map<const Eigen::Array<Scalar, Eigen::Dynamic, 1>>;
template <class Scalar>
using ArrayMap = Eigen::Map<Eigen::Array<Scalar, Eigen::Dynamic, 1>>;

template <class Scalar>
[[nodiscard]] ConstArrayMap<Scalar> as_array(std::span<const Scalar> values) noexcept {
  return ConstArrayMap<Scalar>(values.data(), static_cast<Eigen::Index>(values.size()));
}
template <class Scalar>
[[nodiscard]] ArrayMap<Scalar> as_array(std::span<Scalar> values) noexcept {
  return ArrayMap<Scalar>(values.data(), static_cast<Eigen::Index>(values.size()));
}

/// \brief Maximum of a row in one vectorised pass; NaN anywhere makes the result NaN.
/// (Utility for callers that want NaN propagation; the kernels use scan_max, which is faster.)
template <class Scalar>
[[nodiscard]] Scalar max_propagating_nan(std::span<const Scalar> values) noexcept {
  if (values.empty()) return -std::numeric_limits<Scalar>::infinity();
  return as_array(values).template maxCoeff<Eigen::PropagateNaN>();
}

/// \brief Throws std::domain_error unless `max_value` is the finite maximum of a logits row.
///
/// A +inf logit makes the max +inf, and a max of -inf means every logit is -inf (after the
/// processor and filters: no token can be sampled). NaN is reported by scan_max.
template <class Scalar>
void check_max_logit(Scalar max_value) {
  if (std::isfinite(max_value)) [[likely]]
    return;
  if (std::isnan(max_value)) {
    throw_domain_error(
        "logits row contains NaN (max logit = nan); expected finite logits "
        "(-inf allowed for impossible tokens)");
  }
  if (max_value > 0) {
    throw_domain_error(
        "logits row contains +inf (max logit = inf); expected finite logits "
        "(-inf allowed for impossible tokens)");
  }
  throw_domain_error(
      "every logit in the row is -inf after the logits processor and filters; "
      "expected at least one finite logit");
}

/// Result of scan_max: the row's maximum and the first block that attains it.
template <class Scalar>
struct RowMax {
  Scalar value;
  std::size_t first_block_offset;
};

/// \brief The max pass every row needs, with the NaN / +inf / all -inf check folded in.
///
/// One SIMD pass (Eigen packet primitives) keeps two accumulators per lane: a running max and
/// a running sum. The fast max instruction drops NaN, but a NaN makes the sum NaN; the sum can
/// only be NaN otherwise through +inf (already caught by the max) or overflow of huge logits
/// mixed with -inf, so a NaN sum triggers an exact scalar re-check before anything is thrown.
/// Both accumulators work on registers already loaded, so the pass costs about one plain max
/// pass (memory bound). Per block it also remembers the first block whose max beats all
/// earlier blocks, which lets argmax finish with a scan of a single block.
/// \throws std::domain_error for NaN, +inf, or a row that is entirely -inf (or empty).
template <class Scalar>
[[nodiscard]] RowMax<Scalar> scan_max(std::span<const Scalar> values) {
  using Packet = typename Eigen::internal::packet_traits<Scalar>::type;
  constexpr auto kLanes = static_cast<std::size_t>(Eigen::internal::packet_traits<Scalar>::size);
  constexpr Scalar neg_inf = -std::numeric_limits<Scalar>::infinity();
  const Scalar* data = values.data();
  RowMax<Scalar> best{neg_inf, 0};
  Scalar sum = 0;
  for (std::size_t offset = 0; offset < values.size(); offset += kBlockSize) {
    const std::size_t end = std::min(offset + kBlockSize, values.size());
    Scalar block_max = neg_inf;
    std::size_t i = offset;
    if constexpr (kLanes > 1) {
      // Four independent accumulators of each kind hide the add latency.
      Packet max0 = Eigen::internal::pset1<Packet>(neg_inf);
      Packet max1 = max0, max2 = max0, max3 = max0;
      Packet sum0 = Eigen::internal::pset1<Packet>(Scalar(0));
      Packet sum1 = sum0, sum2 = sum0, sum3 = sum0;
      for (; i + 4 * kLanes <= end; i += 4 * kLanes) {
        const Packet a = Eigen::internal::ploadu<Packet>(data + i);
        const Packet b = Eigen::internal::ploadu<Packet>(data + i + kLanes);
        const Packet c = Eigen::internal::ploadu<Packet>(data + i + 2 * kLanes);
        const Packet d = Eigen::internal::ploadu<Packet>(data + i + 3 * kLanes);
        max0 = Eigen::internal::pmax(max0, a);
        max1 = Eigen::internal::pmax(max1, b);
        max2 = Eigen::internal::pmax(max2, c);
        max3 = Eigen::internal::pmax(max3, d);
        sum0 = Eigen::internal::padd(sum0, a);
        sum1 = Eigen::internal::padd(sum1, b);
        sum2 = Eigen::internal::padd(sum2, c);
        sum3 = Eigen::internal::padd(sum3, d);
      }
      block_max = Eigen::internal::predux_max(Eigen::internal::pmax(
          Eigen::internal::pmax(max0, max1), Eigen::internal::pmax(max2, max3)));
      sum += Eigen::internal::predux(Eigen::internal::padd(Eigen::internal::padd(sum0, sum1),
                                                           Eigen::internal::padd(sum2, sum3)));
    }
    for (; i < end; ++i) {
      block_max = std::max(block_max, data[i]);
      sum += data[i];
    }
    if (block_max > best.value) best = {block_max, offset};
  }
  if (std::isnan(sum)) [[unlikely]] {
    for (const Scalar value : values) {
      if (std::isnan(value)) check_max_logit(std::numeric_limits<Scalar>::quiet_NaN());
    }
  }
  check_max_logit(best.value);
  return best;
}

/// \brief Calls `body(offset, length)` for consecutive blocks covering [0, size).
template <class Body>
void for_each_block(std::size_t size, Body&& body) {
  for (std::size_t offset = 0; offset < size; offset += kBlockSize) {
    body(offset, std::min(kBlockSize, size - offset));
  }
}

/// Whether Scalar has SIMD packets with a vectorised exp (float / double on x86 and ARM).
template <class Scalar>
inline constexpr bool kHasPacketExp = Eigen::internal::packet_traits<Scalar>::Vectorizable&&
                                          Eigen::internal::packet_traits<Scalar>::HasExp &&
                                      (Eigen::internal::packet_traits<Scalar>::size > 1);

/// \brief Whether Eigen's packet exp returns exactly 0 for -inf on this target (AVX-512 does;
/// SSE clamps its argument and returns ~1e-39). Evaluated once.
template <class Scalar>
[[nodiscard]] bool packet_exp_of_minus_inf_is_zero() noexcept {
  if constexpr (kHasPacketExp<Scalar>) {
    namespace ei = Eigen::internal;
    using Packet = typename ei::packet_traits<Scalar>::type;
    static const bool is_zero = [] {
      const Packet minus_inf = ei::pset1<Packet>(-std::numeric_limits<Scalar>::infinity());
      return ei::predux_max(ei::pexp(minus_inf)) == Scalar(0);
    }();
    return is_zero;
  } else {
    return true;
  }
}

/// One packet of weights: exp(x * inv_t - max * inv_t), optionally flushed and masked.
template <class Packet, bool kMasked, bool kFlush>
EIGEN_ALWAYS_INLINE Packet packet_weight(const Packet& x, const Packet& inv_t_v,
                                         const Packet& minus_scaled_max_v, const Packet& small_v,
                                         const Packet& zero_v, const Packet& threshold_v) {
  namespace ei = Eigen::internal;
  Packet w = ei::pexp(ei::pmadd(x, inv_t_v, minus_scaled_max_v));
  if constexpr (kFlush) w = ei::pmax(ei::psub(w, small_v), zero_v);
  if constexpr (kMasked) w = ei::pand(w, ei::pcmp_le(threshold_v, x));
  return w;
}

/// \brief The exp pass over one block: weight = exp((x - max) * inv_temperature) for kept tokens
/// (x >= threshold when kMasked), 0 for the others; stores the weights when kStore; returns the
/// block's sum.
///
/// Written with Eigen's packet primitives (pexp, pmadd, pcmp_le, ...) so the exp, the optional
/// store, the mask and the sum happen in one pass over registers: Eigen expressions cannot
/// store and reduce in one traversal, and Eigen 3.4's Select and comparisons are not
/// vectorised. (x - max) * inv_t is evaluated as one fused multiply-add x * inv_t - max * inv_t
/// (it differs by at most the rounding of max * inv_t, far below the exp's own error).
///
/// Flush (kFlush, only where packet exp(-inf) is not exactly 0): `max(0, w - smallest_normal)`
/// maps every subnormal result to 0 -- a token banned with -inf must have weight exactly 0 --
/// and leaves every weight above 2^-100 (float; 2^-970 for double) bit-for-bit unchanged,
/// because smallest_normal is below half an ulp of such weights. The max token's weight is ~1.
template <class Scalar, bool kStore, bool kMasked, bool kFlush>
Scalar exp_block(const Scalar* logits, std::size_t length, Scalar max_logit, Scalar inv_temperature,
                 Scalar threshold, Scalar* out) noexcept {
  constexpr Scalar smallest_normal = std::numeric_limits<Scalar>::min();
  Scalar sum = 0;
  std::size_t i = 0;
  if constexpr (kHasPacketExp<Scalar>) {
    namespace ei = Eigen::internal;
    using Packet = typename ei::packet_traits<Scalar>::type;
    constexpr auto kLanes = static_cast<std::size_t>(ei::packet_traits<Scalar>::size);
    const Packet inv_t_v = ei::pset1<Packet>(inv_temperature);
    const Packet minus_scaled_max_v = ei::pset1<Packet>(-max_logit * inv_temperature);
    const Packet small_v = ei::pset1<Packet>(smallest_normal);
    const Packet zero_v = ei::pset1<Packet>(Scalar(0));
    const Packet threshold_v = ei::pset1<Packet>(threshold);
    Packet sum0 = zero_v;
    Packet sum1 = zero_v;
    for (; i + 2 * kLanes <= length; i += 2 * kLanes) {
      const Packet w0 =
          packet_weight<Packet, kMasked, kFlush>(ei::ploadu<Packet>(logits + i), inv_t_v,
                                                 minus_scaled_max_v, small_v, zero_v, threshold_v);
      const Packet w1 =
          packet_weight<Packet, kMasked, kFlush>(ei::ploadu<Packet>(logits + i + kLanes), inv_t_v,
                                                 minus_scaled_max_v, small_v, zero_v, threshold_v);
      if constexpr (kStore) {
        ei::pstoreu(out + i, w0);
        ei::pstoreu(out + i + kLanes, w1);
      }
      sum0 = ei::padd(sum0, w0);
      sum1 = ei::padd(sum1, w1);
    }
    sum = ei::predux(ei::padd(sum0, sum1));
  }
  for (; i < length; ++i) {
    Scalar w = std::exp((logits[i] - max_logit) * inv_temperature);  // exactly 0 for -inf
    if constexpr (kMasked) w = logits[i] >= threshold ? w : Scalar(0);
    if constexpr (kStore) out[i] = w;
    sum += w;
  }
  return sum;
}

/// Runs exp_block with the mask / flush variant this row and target need.
template <class Scalar, bool kStore>
Scalar dispatch_exp_block(bool masked, bool flush, const Scalar* logits, std::size_t length,
                          Scalar max_logit, Scalar inv_temperature, Scalar threshold,
                          Scalar* out) noexcept {
  if (masked) {
    return flush ? exp_block<Scalar, kStore, true, true>(logits, length, max_logit, inv_temperature,
                                                         threshold, out)
                 : exp_block<Scalar, kStore, true, false>(logits, length, max_logit,
                                                          inv_temperature, threshold, out);
  }
  return flush ? exp_block<Scalar, kStore, false, true>(logits, length, max_logit, inv_temperature,
                                                        threshold, out)
               : exp_block<Scalar, kStore, false, false>(logits, length, max_logit, inv_temperature,
                                                         threshold, out);
}

/// \brief Sum over kept tokens (logit >= threshold) of exp((logit - max) * inv_temperature), in
/// one pass (threshold = -inf: no filter, no mask).
template <class Scalar>
[[nodiscard]] double exp_sum(std::span<const Scalar> logits, Scalar max_logit,
                             Scalar inv_temperature, Scalar threshold) noexcept {
  const bool masked = threshold != -std::numeric_limits<Scalar>::infinity();
  const bool flush = !packet_exp_of_minus_inf_is_zero<Scalar>();
  double total = 0;
  for_each_block(logits.size(), [&](std::size_t offset, std::size_t length) {
    total += static_cast<double>(
        dispatch_exp_block<Scalar, false>(masked, flush, logits.data() + offset, length, max_logit,
                                          inv_temperature, threshold, nullptr));
  });
  return total;
}

/// \brief Stores weights[i] = exp((logit_i - max) * inv_temperature) for kept tokens and 0 for
/// filtered ones, and returns their sum, in one pass over the row.
template <class Scalar>
double store_weights(std::span<const Scalar> logits, Scalar max_logit, Scalar inv_temperature,
                     Scalar threshold, std::span<Scalar> weights) noexcept {
  const bool masked = threshold != -std::numeric_limits<Scalar>::infinity();
  const bool flush = !packet_exp_of_minus_inf_is_zero<Scalar>();
  double total = 0;
  for_each_block(logits.size(), [&](std::size_t offset, std::size_t length) {
    total += static_cast<double>(
        dispatch_exp_block<Scalar, true>(masked, flush, logits.data() + offset, length, max_logit,
                                         inv_temperature, threshold, weights.data() + offset));
  });
  return total;
}

/// \brief residual[i] = max(0, p_weight_i * inv_p_normalizer - q_weights[i] * inv_q_normalizer)
/// over one block, p_weight as in exp_block; returns the block's sum. One fused pass.
template <class Scalar, bool kMasked>
Scalar residual_block(const Scalar* p_logits, const Scalar* q_weights, std::size_t length,
                      Scalar p_max_logit, Scalar p_inv_temperature, Scalar p_threshold,
                      Scalar inv_p_normalizer, Scalar inv_q_normalizer, Scalar* out) noexcept {
  constexpr Scalar smallest_normal = std::numeric_limits<Scalar>::min();
  Scalar sum = 0;
  std::size_t i = 0;
  if constexpr (kHasPacketExp<Scalar>) {
    namespace ei = Eigen::internal;
    using Packet = typename ei::packet_traits<Scalar>::type;
    constexpr auto kLanes = static_cast<std::size_t>(ei::packet_traits<Scalar>::size);
    const Packet inv_t_v = ei::pset1<Packet>(p_inv_temperature);
    const Packet minus_scaled_max_v = ei::pset1<Packet>(-p_max_logit * p_inv_temperature);
    const Packet small_v = ei::pset1<Packet>(smallest_normal);
    const Packet zero_v = ei::pset1<Packet>(Scalar(0));
    const Packet threshold_v = ei::pset1<Packet>(p_threshold);
    const Packet inv_p_v = ei::pset1<Packet>(inv_p_normalizer);
    const Packet inv_q_v = ei::pset1<Packet>(inv_q_normalizer);
    Packet sum_v = zero_v;
    for (; i + kLanes <= length; i += kLanes) {
      // Always flushed: this runs once per rejecting round, not worth a variant.
      const Packet w =
          packet_weight<Packet, kMasked, true>(ei::ploadu<Packet>(p_logits + i), inv_t_v,
                                               minus_scaled_max_v, small_v, zero_v, threshold_v);
      const Packet q = ei::ploadu<Packet>(q_weights + i);
      const Packet r = ei::pmax(ei::psub(ei::pmul(w, inv_p_v), ei::pmul(q, inv_q_v)), zero_v);
      ei::pstoreu(out + i, r);
      sum_v = ei::padd(sum_v, r);
    }
    sum = ei::predux(sum_v);
  }
  for (; i < length; ++i) {
    Scalar w = std::exp((p_logits[i] - p_max_logit) * p_inv_temperature);
    if constexpr (kMasked) w = p_logits[i] >= p_threshold ? w : Scalar(0);
    const Scalar r = std::max(w * inv_p_normalizer - q_weights[i] * inv_q_normalizer, Scalar(0));
    out[i] = r;
    sum += r;
  }
  return sum;
}

/// \brief max + log(sum exp(x - max)) for a row whose finite max is already known (one pass).
/// Greedy log-probs use it as log p(argmax) = max - logsumexp_given_max(row, max).
template <class Scalar>
[[nodiscard]] Scalar logsumexp_given_max(std::span<const Scalar> logits,
                                         Scalar max_logit) noexcept {
  const double total =
      exp_sum(logits, max_logit, Scalar(1), -std::numeric_limits<Scalar>::infinity());
  return max_logit + static_cast<Scalar>(std::log(total));
}

/// \brief Sum of one block with a fixed lane assignment (see the determinism note above).
template <class Scalar>
[[nodiscard]] Scalar block_sum(const Scalar* values, std::size_t length) noexcept {
  Scalar sum = 0;
  std::size_t i = 0;
  if constexpr (Eigen::internal::packet_traits<Scalar>::Vectorizable &&
                (Eigen::internal::packet_traits<Scalar>::size > 1)) {
    namespace ei = Eigen::internal;
    using Packet = typename ei::packet_traits<Scalar>::type;
    constexpr auto kLanes = static_cast<std::size_t>(ei::packet_traits<Scalar>::size);
    Packet sum0 = ei::pset1<Packet>(Scalar(0));
    Packet sum1 = sum0;
    for (; i + 2 * kLanes <= length; i += 2 * kLanes) {
      sum0 = ei::padd(sum0, ei::ploadu<Packet>(values + i));
      sum1 = ei::padd(sum1, ei::ploadu<Packet>(values + i + kLanes));
    }
    sum = ei::predux(ei::padd(sum0, sum1));
  }
  for (; i < length; ++i) sum += values[i];
  return sum;
}

/// \brief Inverse-CDF sample from non-negative weights: the first index whose cumulative weight
/// exceeds coin * total.
///
/// Block sums find the block in one vectorised scan, then a scalar scan finds the index inside
/// it. A token of weight 0 is never returned: the cumulative sum cannot cross the target at it.
/// If rounding leaves the target at or beyond the accumulated mass (coin close to 1), the last
/// token of positive weight is returned, as the exact inverse CDF would.
template <class Scalar>
[[nodiscard]] token_t inverse_cdf(std::span<const Scalar> weights, double total, double coin) {
  const double target = coin * total;
  double cumulative = 0;
  for (std::size_t offset = 0; offset < weights.size(); offset += kBlockSize) {
    const std::size_t length = std::min(kBlockSize, weights.size() - offset);
    const auto mass = static_cast<double>(block_sum(weights.data() + offset, length));
    if (cumulative + mass > target) {
      // The crossing is in this block, which therefore holds positive weight.
      std::size_t last_positive = offset;
      for (std::size_t i = offset; i < offset + length; ++i) {
        if (weights[i] > Scalar(0)) {
          cumulative += static_cast<double>(weights[i]);
          last_positive = i;
          if (cumulative > target) return static_cast<token_t>(i);
        }
      }
      return static_cast<token_t>(last_positive);  // scalar vs block rounding
    }
    cumulative += mass;
  }
  for (std::size_t i = weights.size(); i-- > 0;) {
    if (weights[i] > Scalar(0)) return static_cast<token_t>(i);
  }
  throw_domain_error("cannot sample: every weight is 0 (total = ", total,
                     "); expected at least one positive weight");
}

/// \brief Argmax with the lowest index on ties: one scan_max pass (which remembers the first
/// block attaining the max) plus a scalar scan of that single block.
/// \throws std::domain_error on NaN, +inf, or an all -inf row (see scan_max).
template <class Scalar>
[[nodiscard]] std::pair<token_t, Scalar> argmax_checked(std::span<const Scalar> logits) {
  const RowMax<Scalar> best = scan_max(logits);
  const std::size_t block_end = std::min(best.first_block_offset + kBlockSize, logits.size());
  for (std::size_t i = best.first_block_offset; i < block_end; ++i) {
    if (logits[i] == best.value) return {static_cast<token_t>(i), best.value};
  }
  return {static_cast<token_t>(best.first_block_offset), best.value};  // unreachable
}

}  // namespace specdec::detail

#pragma once
/// \file
/// \brief The exp pass: the weights exp((x - reference) / T) of one block, masked by a filter
/// threshold or not, summed or stored; over a row: exp_sum, store_weights, logsumexp_given_max
/// (internal).
///
/// Filtered rows (top-k / min-p) and softmax take this pass once their max is known; the
/// single-pass, top-p and residual kernels build on its packet_weight / scalar_weight.

#include <cmath>
#include <cstddef>
#include <limits>
#include <span>

#include <Eigen/Core>
#if defined(__AVX512F__)
#include <immintrin.h>  // the AVX-512 overloads (Eigen omits it without vectorization)
#endif

#include "specdec/detail/exact_float.hpp"
#include "specdec/detail/kernels/packet_exp.hpp"
#include "specdec/detail/kernels/row_blocks.hpp"
#include "specdec/detail/kernels/scaled_exponent.hpp"
#include "specdec/detail/kernels/simd_warnings.hpp"

SPECDEC_BEGIN_SIMD_KERNELS
namespace specdec::detail {

/// w where x >= threshold, else 0 (the filters' mask), packet-wise; on AVX-512 one compare
/// into a mask register and a zero-masked move. Same bits either way.
template <class Packet>
EIGEN_ALWAYS_INLINE Packet keep_where_at_least(const Packet& w, const Packet& threshold,
                                               const Packet& x) {
  namespace ei = Eigen::internal;
  return ei::pand(w, ei::pcmp_le(threshold, x));
}
#if defined(__AVX512F__)
EIGEN_ALWAYS_INLINE __m512 keep_where_at_least(__m512 w, __m512 threshold, __m512 x) {
  return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x, threshold, _CMP_GE_OQ), w);
}
#endif

/// \brief One packet of weights: exp(scaled_exponent(x)), optionally flushed and masked.
///
/// Flush (kFlush, only where packet exp(-inf) is not exactly 0): `max(0, w - smallest_normal)`
/// maps every subnormal result to 0 -- a token banned with -inf must have weight exactly 0 --
/// and leaves every weight above 2^-100 (float; 2^-970 for double) bit-for-bit unchanged,
/// because smallest_normal is below half an ulp of such weights.
template <class Packet, bool kMasked, bool kFlush, class Scalar>
EIGEN_ALWAYS_INLINE Packet packet_weight(const Packet& x, const PacketExponent<Scalar>& exponent,
                                         const Packet& small_v, const Packet& zero_v,
                                         const Packet& threshold_v) {
  namespace ei = Eigen::internal;
  Packet w = packet_exp(exponent(x));
  if constexpr (kFlush) w = ei::pmax(ei::psub(w, small_v), zero_v);
  if constexpr (kMasked) w = keep_where_at_least(w, threshold_v, x);
  return w;
}

/// Scalar counterpart of packet_weight (tails, and Scalar types without packet exp).
template <class Scalar, bool kMasked>
[[nodiscard]] Scalar scalar_weight(Scalar x, Scalar reference, Scalar inv_temperature,
                                   Scalar threshold) noexcept {
  const Scalar w = std::exp(scaled_exponent(x, reference, inv_temperature));  // 0 for -inf
  if constexpr (kMasked) return x >= threshold ? w : Scalar(0);
  return w;
}

/// \brief The exp pass over one block: weight = exp((x - reference) * inv_temperature) for kept
/// tokens (x >= threshold when kMasked), 0 for the others; stores the weights when kStore;
/// returns the block's sum.
///
/// Written with Eigen's packet primitives (pexp, pcmp_le, ...) so the exp, the optional store,
/// the mask and the sum happen in one pass over registers: Eigen expressions cannot store and
/// reduce in one traversal, and Eigen 3.4's Select and comparisons are not vectorised.
template <class Scalar, bool kStore, bool kMasked, bool kFlush>
SPECDEC_KERNEL Scalar exp_block(const Scalar* logits, std::size_t length, Scalar reference,
                                Scalar inv_temperature, Scalar threshold, Scalar* out) noexcept {
  Scalar sum = 0;
  std::size_t i = 0;
  if constexpr (kHasPacketExp<Scalar>) {
    namespace ei = Eigen::internal;
    using Packet = typename ei::packet_traits<Scalar>::type;
    constexpr auto kLanes = static_cast<std::size_t>(ei::packet_traits<Scalar>::size);
    const PacketExponent<Scalar> exponent(reference, inv_temperature);
    const Packet small_v = ei::pset1<Packet>(std::numeric_limits<Scalar>::min());
    const Packet zero_v = ei::pset1<Packet>(Scalar(0));
    const Packet threshold_v = ei::pset1<Packet>(threshold);
    Packet sum0 = zero_v;
    Packet sum1 = zero_v;
    for (; i + 2 * kLanes <= length; i += 2 * kLanes) {
      const Packet w0 = packet_weight<Packet, kMasked, kFlush>(
          ei::ploadu<Packet>(logits + i), exponent, small_v, zero_v, threshold_v);
      const Packet w1 = packet_weight<Packet, kMasked, kFlush>(
          ei::ploadu<Packet>(logits + i + kLanes), exponent, small_v, zero_v, threshold_v);
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
    const Scalar w =
        scalar_weight<Scalar, kMasked>(logits[i], reference, inv_temperature, threshold);
    if constexpr (kStore) out[i] = w;
    sum += w;
  }
  return sum;
}

/// Runs exp_block with the mask / flush variant this row and target need.
template <class Scalar, bool kStore>
Scalar dispatch_exp_block(bool masked, bool flush, const Scalar* logits, std::size_t length,
                          Scalar reference, Scalar inv_temperature, Scalar threshold,
                          Scalar* out) noexcept {
  if (masked) {
    return flush ? exp_block<Scalar, kStore, true, true>(logits, length, reference, inv_temperature,
                                                         threshold, out)
                 : exp_block<Scalar, kStore, true, false>(logits, length, reference,
                                                          inv_temperature, threshold, out);
  }
  return flush ? exp_block<Scalar, kStore, false, true>(logits, length, reference, inv_temperature,
                                                        threshold, out)
               : exp_block<Scalar, kStore, false, false>(logits, length, reference, inv_temperature,
                                                         threshold, out);
}

/// \brief Sum over kept tokens (logit >= threshold) of exp((logit - reference) *
/// inv_temperature), in one pass (threshold = -inf: no filter, no mask).
template <class Scalar>
[[nodiscard]] double exp_sum(std::span<const Scalar> logits, Scalar reference,
                             Scalar inv_temperature, Scalar threshold) noexcept {
  const bool masked = !is_minus_infinity(threshold);
  const bool flush = !packet_exp_of_minus_inf_is_zero<Scalar>();
  double total = 0;
  for_each_block(logits.size(), [&](std::size_t offset, std::size_t length) {
    total += static_cast<double>(
        dispatch_exp_block<Scalar, false>(masked, flush, logits.data() + offset, length, reference,
                                          inv_temperature, threshold, nullptr));
  });
  return total;
}

/// \brief Stores weights[i] = exp((logit_i - reference) * inv_temperature) for kept tokens and
/// 0 for filtered ones, and (unless `block_sums` is empty) block_sums[b] = the sum of block b's
/// weights, in one pass over the row. Returns the total: the double sum of the block sums in
/// block order (what inverse_cdf recomputes from them). block_sums has block_count(V) entries.
template <class Scalar>
double store_weights(std::span<const Scalar> logits, Scalar reference, Scalar inv_temperature,
                     Scalar threshold, std::span<Scalar> weights,
                     std::span<Scalar> block_sums = {}) noexcept {
  const bool masked = !is_minus_infinity(threshold);
  const bool flush = !packet_exp_of_minus_inf_is_zero<Scalar>();
  double total = 0;
  for_each_block(logits.size(), [&](std::size_t offset, std::size_t length) {
    const Scalar sum =
        dispatch_exp_block<Scalar, true>(masked, flush, logits.data() + offset, length, reference,
                                         inv_temperature, threshold, weights.data() + offset);
    if (!block_sums.empty()) block_sums[offset / kBlockSize] = sum;
    total += static_cast<double>(sum);
  });
  return total;
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

}  // namespace specdec::detail
SPECDEC_END_SIMD_KERNELS

#pragma once
/// \file
/// \brief The residual max(0, p - q) of one block, fused with p's exp, and its dispatch over the
/// mask / flush variants (internal).
///
/// Sampling a correction token needs the residual over the whole vocabulary; it is recomputed
/// per block rather than stored (see sample_blockwise in inverse_cdf.hpp and verify.hpp).

#include <algorithm>
#include <cstddef>
#include <limits>
#include <type_traits>

#include <Eigen/Core>

#include "specdec/detail/kernels/exp_weights.hpp"
#include "specdec/detail/kernels/packet_exp.hpp"
#include "specdec/detail/kernels/scaled_exponent.hpp"
#include "specdec/detail/kernels/simd_warnings.hpp"

SPECDEC_BEGIN_SIMD_KERNELS
namespace specdec::detail {

/// \brief residual[i] = max(0, p_weight_i * inv_p_normalizer - q_weights[i] * inv_q_normalizer)
/// over one block, p_weight as in exp_block; stores it when kStore; returns the block's sum.
/// One fused pass.
template <class Scalar, bool kMasked, bool kFlush, bool kStore>
SPECDEC_KERNEL Scalar residual_block(const Scalar* p_logits, const Scalar* q_weights,
                                     std::size_t length, Scalar p_reference,
                                     Scalar p_inv_temperature, Scalar p_threshold,
                                     Scalar inv_p_normalizer, Scalar inv_q_normalizer,
                                     Scalar* out) noexcept {
  Scalar sum = 0;
  std::size_t i = 0;
  if constexpr (kHasPacketExp<Scalar>) {
    namespace ei = Eigen::internal;
    using Packet = typename ei::packet_traits<Scalar>::type;
    constexpr auto kLanes = static_cast<std::size_t>(ei::packet_traits<Scalar>::size);
    const PacketExponent<Scalar> exponent(p_reference, p_inv_temperature);
    const Packet small_v = ei::pset1<Packet>(std::numeric_limits<Scalar>::min());
    const Packet zero_v = ei::pset1<Packet>(Scalar(0));
    const Packet threshold_v = ei::pset1<Packet>(p_threshold);
    const Packet inv_p_v = ei::pset1<Packet>(inv_p_normalizer);
    const Packet inv_q_v = ei::pset1<Packet>(inv_q_normalizer);
    auto residual = [&](std::size_t at) {
      const Packet w = packet_weight<Packet, kMasked, kFlush>(
          ei::ploadu<Packet>(p_logits + at), exponent, small_v, zero_v, threshold_v);
      const Packet q = ei::ploadu<Packet>(q_weights + at);
      const Packet r = ei::pmax(ei::psub(ei::pmul(w, inv_p_v), ei::pmul(q, inv_q_v)), zero_v);
      if constexpr (kStore) ei::pstoreu(out + at, r);
      return r;
    };
    Packet sum0 = zero_v;
    Packet sum1 = zero_v;
    for (; i + 2 * kLanes <= length; i += 2 * kLanes) {
      sum0 = ei::padd(sum0, residual(i));
      sum1 = ei::padd(sum1, residual(i + kLanes));
    }
    sum = ei::predux(ei::padd(sum0, sum1));
  }
  for (; i < length; ++i) {
    const Scalar w =
        scalar_weight<Scalar, kMasked>(p_logits[i], p_reference, p_inv_temperature, p_threshold);
    const Scalar r = std::max(w * inv_p_normalizer - q_weights[i] * inv_q_normalizer, Scalar(0));
    if constexpr (kStore) out[i] = r;
    sum += r;
  }
  return sum;
}

/// \brief stored[i] = max(0, a * stored[i] - b * q[i]) over one block, in place; returns the
/// block's sum. One pass (a stored residual updated after a further rejection).
template <class Scalar>
SPECDEC_KERNEL Scalar clamped_difference_block(Scalar* stored, Scalar a, const Scalar* q, Scalar b,
                                               std::size_t length) noexcept {
  Scalar sum = 0;
  std::size_t i = 0;
  if constexpr (kHasPacketExp<Scalar>) {
    namespace ei = Eigen::internal;
    using Packet = typename ei::packet_traits<Scalar>::type;
    constexpr auto kLanes = static_cast<std::size_t>(ei::packet_traits<Scalar>::size);
    const Packet zero_v = ei::pset1<Packet>(Scalar(0));
    const Packet a_v = ei::pset1<Packet>(a);
    const Packet b_v = ei::pset1<Packet>(b);
    auto update = [&](std::size_t at) {
      const Packet r = ei::pmax(ei::psub(ei::pmul(ei::ploadu<Packet>(stored + at), a_v),
                                         ei::pmul(ei::ploadu<Packet>(q + at), b_v)),
                                zero_v);
      ei::pstoreu(stored + at, r);
      return r;
    };
    Packet sum0 = zero_v;
    Packet sum1 = zero_v;
    for (; i + 2 * kLanes <= length; i += 2 * kLanes) {
      sum0 = ei::padd(sum0, update(i));
      sum1 = ei::padd(sum1, update(i + kLanes));
    }
    sum = ei::predux(ei::padd(sum0, sum1));
  }
  for (; i < length; ++i) {
    stored[i] = std::max(a * stored[i] - b * q[i], Scalar(0));
    sum += stored[i];
  }
  return sum;
}

/// Runs residual_block with the mask / flush variant the row and target need.
template <class Scalar, bool kStore>
Scalar dispatch_residual_block(bool masked, bool flush, const Scalar* p_logits,
                               const Scalar* q_weights, std::size_t length, Scalar p_reference,
                               Scalar p_inv_temperature, Scalar p_threshold,
                               Scalar inv_p_normalizer, Scalar inv_q_normalizer,
                               Scalar* out) noexcept {
  auto run = [&](auto masked_tag, auto flush_tag) {
    return residual_block<Scalar, decltype(masked_tag)::value, decltype(flush_tag)::value, kStore>(
        p_logits, q_weights, length, p_reference, p_inv_temperature, p_threshold, inv_p_normalizer,
        inv_q_normalizer, out);
  };
  using yes = std::true_type;
  using no = std::false_type;
  if (masked) return flush ? run(yes{}, yes{}) : run(yes{}, no{});
  return flush ? run(no{}, yes{}) : run(no{}, no{});
}

}  // namespace specdec::detail
SPECDEC_END_SIMD_KERNELS

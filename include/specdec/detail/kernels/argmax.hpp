#pragma once
/// \file
/// \brief Greedy decoding's kernels: argmax (lowest index on ties), alone or with its
/// log-softmax at T = 1 (internal).
///
/// Each is one pass that remembers the first block attaining the max, plus a scan of that
/// block only.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <span>
#include <utility>

#include <Eigen/Core>

#include "specdec/detail/exact_float.hpp"
#include "specdec/detail/kernels/online_softmax.hpp"
#include "specdec/detail/kernels/row_blocks.hpp"
#include "specdec/detail/kernels/row_scan.hpp"
#include "specdec/detail/kernels/simd_warnings.hpp"
#include "specdec/types.hpp"

SPECDEC_BEGIN_SIMD_KERNELS
namespace specdec::detail {

/// The lowest index in block [offset, offset + kBlockSize) whose value is `max` (the block
/// attains it). Compares a packet at a time and scans only the packet that holds it: a scalar
/// loop over the block (on average half of it) was 8 % of a greedy round at V = 32000.
template <class Scalar>
[[nodiscard]] token_t first_index_of(std::span<const Scalar> values, std::size_t offset,
                                     Scalar max) noexcept {
  const std::size_t end = std::min(offset + kBlockSize, values.size());
  std::size_t i = offset;
  if constexpr (Eigen::internal::packet_traits<Scalar>::Vectorizable &&
                (Eigen::internal::packet_traits<Scalar>::size > 1)) {
    namespace ei = Eigen::internal;
    using Packet = typename ei::packet_traits<Scalar>::type;
    constexpr auto kLanes = static_cast<std::size_t>(ei::packet_traits<Scalar>::size);
    const Packet max_v = ei::pset1<Packet>(max);
    // Only rows of at least a block: a tiny row is scanned in scalar anyway, and for rows of
    // known tiny size GCC 12 would warn (-Warray-bounds) about a packet load it cannot rule out.
    while (values.size() >= kBlockSize && i + kLanes <= end &&
           !ei::predux_any(ei::pcmp_eq(ei::ploadu<Packet>(values.data() + i), max_v))) {
      i += kLanes;
    }
  }
  for (; i < end; ++i) {
    if (exactly_equal(values[i], max)) return static_cast<token_t>(i);
  }
  return static_cast<token_t>(offset);  // unreachable
}

/// \brief Argmax (lowest index on ties) and its log-softmax at T = 1, log p = -log sum_i
/// exp(x_i - max): the greedy token and its log-prob in one pass (online_exp_sum, which also
/// remembers the first block attaining the max) plus a scalar scan of that block.
/// \throws std::domain_error on NaN, +inf, or an all -inf row.
template <class Scalar>
[[nodiscard]] std::pair<token_t, Scalar> argmax_and_log_probability(
    std::span<const Scalar> logits) {
  const OnlineSum<Scalar> row = online_exp_sum(logits, Scalar(1));
  return {first_index_of(logits, row.max_block_offset, row.reference),
          -static_cast<Scalar>(std::log(row.sum))};
}

/// \brief Argmax with the lowest index on ties: one scan_max pass (which remembers the first
/// block attaining the max) plus a scalar scan of that single block.
/// \throws std::domain_error on NaN, +inf, or an all -inf row (see scan_max).
template <class Scalar>
[[nodiscard]] std::pair<token_t, Scalar> argmax_checked(std::span<const Scalar> logits) {
  const RowMax<Scalar> best = scan_max(logits);
  return {first_index_of(logits, best.first_block_offset, best.value), best.value};
}

}  // namespace specdec::detail
SPECDEC_END_SIMD_KERNELS

#pragma once
/// \file
/// \brief The max scans of a row of logits, with the NaN / +inf / all -inf check folded in
/// (internal).
///
/// Every kernel that reads a row of logits ends with check_row, so a bad row throws before any
/// result is used. scan_max is the max pass of filtered rows and argmax; scan_block is also the
/// "next block" half of the single-pass kernels (online_softmax.hpp).

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <span>

#include <Eigen/Core>

#include "specdec/detail/error.hpp"
#include "specdec/detail/kernels/row_blocks.hpp"
#include "specdec/detail/kernels/simd_warnings.hpp"

SPECDEC_BEGIN_SIMD_KERNELS
namespace specdec::detail {

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
/// processor and filters: no token can be sampled). NaN is reported by the callers' scans.
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

/// \brief The row check every scan ends with: throws for NaN, +inf or an all -inf row.
///
/// The scans keep a running sum of the logits next to the running max, on registers already
/// loaded (the single-pass kernels use the sum of the weights instead, see
/// exp_block_scanning_next). The fast max instruction drops NaN, but a NaN makes that sum NaN;
/// the sum can only be NaN otherwise through +inf (caught by the max anyway) or overflow of huge
/// logits mixed with -inf, so a NaN sum (`nan_probed`) or a non-finite max triggers an exact
/// scalar re-check of the whole row before anything is thrown. NaN is reported first, as if the
/// max were NaN.
template <class Scalar>
void check_row(std::span<const Scalar> values, Scalar max_value, bool nan_probed) {
  if (nan_probed || !std::isfinite(max_value)) [[unlikely]] {
    for (const Scalar value : values) {
      if (std::isnan(value)) check_max_logit(std::numeric_limits<Scalar>::quiet_NaN());
    }
  }
  check_max_logit(max_value);
}

/// Max and logit sum (the NaN probe of check_row) of one block.
template <class Scalar>
struct BlockScan {
  Scalar max = -std::numeric_limits<Scalar>::infinity();
  Scalar sum = 0;
};

/// \brief Scans one block for its max and NaN probe. Four independent accumulators of each kind
/// hide the latency; both kinds work on the same loaded registers, so this costs about one
/// plain max pass (memory bound).
template <class Scalar>
[[nodiscard]] BlockScan<Scalar> scan_block(const Scalar* data, std::size_t length) noexcept {
  constexpr Scalar neg_inf = -std::numeric_limits<Scalar>::infinity();
  BlockScan<Scalar> scan;
  std::size_t i = 0;
  if constexpr (Eigen::internal::packet_traits<Scalar>::Vectorizable &&
                (Eigen::internal::packet_traits<Scalar>::size > 1)) {
    namespace ei = Eigen::internal;
    using Packet = typename ei::packet_traits<Scalar>::type;
    constexpr auto kLanes = static_cast<std::size_t>(ei::packet_traits<Scalar>::size);
    Packet max0 = ei::pset1<Packet>(neg_inf);
    Packet max1 = max0, max2 = max0, max3 = max0;
    Packet sum0 = ei::pset1<Packet>(Scalar(0));
    Packet sum1 = sum0, sum2 = sum0, sum3 = sum0;
    for (; i + 4 * kLanes <= length; i += 4 * kLanes) {
      const Packet a = ei::ploadu<Packet>(data + i);
      const Packet b = ei::ploadu<Packet>(data + i + kLanes);
      const Packet c = ei::ploadu<Packet>(data + i + 2 * kLanes);
      const Packet d = ei::ploadu<Packet>(data + i + 3 * kLanes);
      max0 = ei::pmax(max0, a);
      max1 = ei::pmax(max1, b);
      max2 = ei::pmax(max2, c);
      max3 = ei::pmax(max3, d);
      sum0 = ei::padd(sum0, a);
      sum1 = ei::padd(sum1, b);
      sum2 = ei::padd(sum2, c);
      sum3 = ei::padd(sum3, d);
    }
    scan.max = ei::predux_max(ei::pmax(ei::pmax(max0, max1), ei::pmax(max2, max3)));
    scan.sum = ei::predux(ei::padd(ei::padd(sum0, sum1), ei::padd(sum2, sum3)));
  }
  for (; i < length; ++i) {
    scan.max = std::max(scan.max, data[i]);
    scan.sum += data[i];
  }
  return scan;
}

/// Result of scan_max: the row's maximum and the first block that attains it.
template <class Scalar>
struct RowMax {
  Scalar value;
  std::size_t first_block_offset;
};

/// \brief The max pass of rows that need the max before anything else (filtered rows, argmax),
/// with the NaN / +inf / all -inf check folded in (see check_row). Per block it also remembers
/// the first block whose max beats all earlier blocks, which lets argmax finish with a scan of
/// a single block.
/// \throws std::domain_error for NaN, +inf, or a row that is entirely -inf (or empty).
template <class Scalar>
[[nodiscard]] RowMax<Scalar> scan_max(std::span<const Scalar> values) {
  RowMax<Scalar> best{-std::numeric_limits<Scalar>::infinity(), 0};
  Scalar logit_sum = 0;
  for (std::size_t offset = 0; offset < values.size(); offset += kBlockSize) {
    const BlockScan<Scalar> scan =
        scan_block(values.data() + offset, std::min(kBlockSize, values.size() - offset));
    logit_sum += scan.sum;
    if (scan.max > best.value) best = {scan.max, offset};
  }
  check_row(values, best.value, std::isnan(logit_sum));
  return best;
}

}  // namespace specdec::detail
SPECDEC_END_SIMD_KERNELS

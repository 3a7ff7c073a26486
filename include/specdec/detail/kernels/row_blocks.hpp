#pragma once
/// \file
/// \brief How the kernels cut a row: fixed blocks of kBlockSize values, block iteration,
/// fixed-order block sums, Eigen array views over spans (internal).
///
/// Determinism: every reduction in the kernels splits the row into blocks at fixed indices (0,
/// kBlockSize, ...) and lanes at fixed indices, never depending on the address of the data
/// (Eigen's own reductions peel to an aligned address, so their summation order depends on where
/// a buffer happens to live). Hence the same logits give bit-identical sums wherever they are
/// stored, and the same seed gives the same tokens from run to run. Stores are fastest into
/// 64-byte aligned buffers, which is why the decoder allocates its buffers aligned.
///
/// Rows are processed in blocks of kBlockSize values. A block (4 KiB of floats) stays in L1,
/// so "compute exp of a block, store it, sum it" reads the row from memory once. Block sums are
/// accumulated in double: the sum of V ~ 1e5 positive floats then loses nothing visible.

#include <algorithm>
#include <cstddef>
#include <span>

#include <Eigen/Core>

#include "specdec/detail/kernels/simd_warnings.hpp"

SPECDEC_BEGIN_SIMD_KERNELS
namespace specdec::detail {

/// Values per block (see the file comment).
inline constexpr std::size_t kBlockSize = 1024;

/// Number of kBlockSize blocks (the last one possibly partial) in a row of `size` values.
[[nodiscard]] constexpr std::size_t block_count(std::size_t size) noexcept {
  return (size + kBlockSize - 1) / kBlockSize;
}

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

/// \brief Calls `body(offset, length)` for consecutive blocks covering [0, size).
template <class Body>
void for_each_block(std::size_t size, Body&& body) {
  for (std::size_t offset = 0; offset < size; offset += kBlockSize) {
    body(offset, std::min(kBlockSize, size - offset));
  }
}

/// \brief Sum of one block with a fixed lane assignment (see the determinism note in the file
/// comment).
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

}  // namespace specdec::detail
SPECDEC_END_SIMD_KERNELS

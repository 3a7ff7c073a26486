#pragma once
/// \file
/// \brief Inverse-CDF sampling by blocks: from stored weights (with or without recorded block
/// sums) and from values recomputed per block, of which only the block the coin falls in is
/// computed twice (internal).
///
/// The block sums locate the block, a scalar scan the token inside it; the rules at the edges
/// (never a zero weight, rounding past the end) are those of the exact inverse CDF.

#include <algorithm>
#include <cstddef>
#include <span>

#include "specdec/detail/error.hpp"
#include "specdec/detail/kernels/row_blocks.hpp"
#include "specdec/types.hpp"

namespace specdec::detail {

/// \brief The index inside block [offset, offset + length) where the cumulative weight, starting
/// from `cumulative`, first exceeds `target`; the block's last positive weight if rounding
/// keeps it from crossing (the block sum and this scan add the same weights in different
/// orders). The block holds positive weight.
template <class Scalar>
[[nodiscard]] token_t scan_block_for_target(std::span<const Scalar> weights, std::size_t offset,
                                            std::size_t length, double cumulative, double target) {
  std::size_t last_positive = offset;
  for (std::size_t i = offset; i < offset + length; ++i) {
    if (weights[i] > Scalar(0)) {
      cumulative += static_cast<double>(weights[i]);
      last_positive = i;
      if (cumulative > target) return static_cast<token_t>(i);
    }
  }
  return static_cast<token_t>(last_positive);
}

/// \brief The last token of positive weight (the exact inverse CDF's answer for a coin whose
/// target rounding put at or past the accumulated mass).
template <class Scalar>
[[nodiscard]] token_t last_positive_weight(std::span<const Scalar> weights, double total) {
  for (std::size_t i = weights.size(); i-- > 0;) {
    if (weights[i] > Scalar(0)) return static_cast<token_t>(i);
  }
  throw_domain_error("cannot sample: every weight is 0 (total = ", total,
                     "); expected at least one positive weight");
}

/// \brief Inverse-CDF sample from non-negative weights whose per-block sums were recorded when
/// they were stored: the first index whose cumulative weight exceeds coin * total, total = the
/// double sum of block_sums in block order (the normalizer the weights were returned with).
///
/// The block sums find the block without touching the weights; a scalar scan finds the index
/// inside it. A token of weight 0 is never returned: the cumulative sum cannot cross the target
/// at it. If rounding leaves the target at or beyond the accumulated mass (coin close to 1), the
/// last token of positive weight is returned, as the exact inverse CDF would.
template <class Scalar>
[[nodiscard]] token_t inverse_cdf(std::span<const Scalar> weights,
                                  std::span<const Scalar> block_sums, double coin) {
  double total = 0;
  for (const Scalar sum : block_sums) total += static_cast<double>(sum);
  const double target = coin * total;
  double cumulative = 0;
  for (std::size_t block = 0; block < block_sums.size(); ++block) {
    const auto mass = static_cast<double>(block_sums[block]);
    if (cumulative + mass > target) {
      const std::size_t offset = block * kBlockSize;
      return scan_block_for_target(weights, offset, std::min(kBlockSize, weights.size() - offset),
                                   cumulative, target);
    }
    cumulative += mass;
  }
  return last_positive_weight(weights, total);
}

/// \brief inverse_cdf for weights without recorded block sums (`total` = their sum, as returned
/// by store_weights): the block sums are recomputed on the way.
template <class Scalar>
[[nodiscard]] token_t inverse_cdf(std::span<const Scalar> weights, double total, double coin) {
  const double target = coin * total;
  double cumulative = 0;
  for (std::size_t offset = 0; offset < weights.size(); offset += kBlockSize) {
    const std::size_t length = std::min(kBlockSize, weights.size() - offset);
    const auto mass = static_cast<double>(block_sum(weights.data() + offset, length));
    if (cumulative + mass > target) {
      return scan_block_for_target(weights, offset, length, cumulative, target);
    }
    cumulative += mass;
  }
  return last_positive_weight(weights, total);
}

/// \brief The second half of sample_blockwise (below), for block sums known in advance
/// (`total` = their double sum in block order): locates the block the coin falls in,
/// recomputes only that block with `block` and scans it. Returns -1 if total is not positive.
template <class Scalar, class Block>
[[nodiscard]] token_t sample_located(std::size_t size, Block&& block,
                                     std::span<const Scalar> block_sums, double total,
                                     double coin) {
  if (!(total > 0)) return -1;
  const double target = coin * total;
  double cumulative = 0;
  std::size_t chosen = block_sums.size();
  std::size_t last_positive_block = 0;
  for (std::size_t b = 0; b < block_count(size); ++b) {
    const auto mass = static_cast<double>(block_sums[b]);
    if (mass > 0) last_positive_block = b;
    if (cumulative + mass > target) {
      chosen = b;
      break;
    }
    cumulative += mass;
  }
  Scalar values[kBlockSize];
  if (chosen == block_sums.size()) {
    // Rounding put the target at or past the end: the last positive value.
    const std::size_t offset = last_positive_block * kBlockSize;
    const std::size_t length = std::min(kBlockSize, size - offset);
    (void)block(offset, length, values);
    return static_cast<token_t>(offset) +
           last_positive_weight(std::span<const Scalar>(values, length), total);
  }
  const std::size_t offset = chosen * kBlockSize;
  const std::size_t length = std::min(kBlockSize, size - offset);
  (void)block(offset, length, values);
  return static_cast<token_t>(offset) +
         scan_block_for_target(std::span<const Scalar>(values, length), 0, length, cumulative,
                               target);
}

/// \brief Inverse-CDF sample from values that are cheaper to recompute than to store: the
/// weights of a row, the residual max(0, p - q). `block(offset, length, out)` computes the
/// values of one block, writes them to `out` unless it is null, and returns their sum (the
/// same values and sum every time: fixed order).
///
/// One pass records only the block sums (into `block_sums`, block_count(size) entries: no row
/// is written, which saves the store traffic and the re-summing pass of store-then-sample);
/// the block the coin falls in is then recomputed into a stack buffer and scanned. Same rules as
/// inverse_cdf: never a value of 0; rounding past the end gives the last positive value.
/// Returns -1 if every value is 0 (`total` is set either way).
template <class Scalar, class Block>
[[nodiscard]] token_t sample_blockwise(std::size_t size, Block&& block,
                                       std::span<Scalar> block_sums, double coin, double& total) {
  total = 0;
  for_each_block(size, [&](std::size_t offset, std::size_t length) {
    const Scalar sum = block(offset, length, static_cast<Scalar*>(nullptr));
    block_sums[offset / kBlockSize] = sum;
    total += static_cast<double>(sum);
  });
  return sample_located<Scalar>(size, block, std::span<const Scalar>(block_sums), total, coin);
}

}  // namespace specdec::detail

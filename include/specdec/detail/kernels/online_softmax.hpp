#pragma once
/// \file
/// \brief Single-pass kernels for unfiltered rows: online softmax by blocks, summing
/// (online_exp_sum, target rows) or storing weights on one shared reference
/// (online_store_weights, draft rows) (internal).
///
/// The max of block b + 1 is scanned while block b is exponentiated, so the row is read from
/// memory once and the max costs a few instructions per packet on registers already loaded,
/// instead of a separate memory-bound pass.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <span>

#include <Eigen/Core>

#include "specdec/detail/exact_float.hpp"
#include "specdec/detail/kernels/exp_weights.hpp"
#include "specdec/detail/kernels/packet_exp.hpp"
#include "specdec/detail/kernels/row_blocks.hpp"
#include "specdec/detail/kernels/row_scan.hpp"
#include "specdec/detail/kernels/scaled_exponent.hpp"
#include "specdec/detail/kernels/simd_warnings.hpp"
#include "specdec/detail/kernels/stream_store.hpp"

SPECDEC_BEGIN_SIMD_KERNELS
namespace specdec::detail {

/// \brief exp_block (unmasked) over one block fused with scan_block over the next one.
///
/// Software pipelining: the exp pass is compute bound and the max scan is memory bound, so
/// done one after the other per block they add up (about 1.35x an exp-sum pass); interleaved,
/// the next block's loads and its max accumulators ride along with the exp's arithmetic (about
/// 1.05x). The next block's max lands in `next_scan` (its sum stays 0: no NaN probe is needed
/// here, because the next block is exponentiated against a finite reference, and a NaN logit
/// makes its weight and so the block sum NaN -- Eigen's pexp propagates NaN as std::exp does).
template <class Scalar, bool kStore, bool kFlush, bool kStream = false>
SPECDEC_KERNEL Scalar exp_block_scanning_next(const Scalar* logits, std::size_t length,
                                              Scalar reference, Scalar inv_temperature, Scalar* out,
                                              const Scalar* next, std::size_t next_length,
                                              BlockScan<Scalar>& next_scan) noexcept {
  constexpr Scalar neg_inf = -std::numeric_limits<Scalar>::infinity();
  Scalar sum = 0;
  std::size_t i = 0;  // progress in this block
  std::size_t j = 0;  // progress in the next block
  BlockScan<Scalar> scan;
  if constexpr (kHasPacketExp<Scalar>) {
    namespace ei = Eigen::internal;
    using Packet = typename ei::packet_traits<Scalar>::type;
    constexpr auto kLanes = static_cast<std::size_t>(ei::packet_traits<Scalar>::size);
    constexpr std::size_t kStep = 2 * kLanes;
    const PacketExponent<Scalar> exponent(reference, inv_temperature);
    const Packet small_v = ei::pset1<Packet>(std::numeric_limits<Scalar>::min());
    const Packet zero_v = ei::pset1<Packet>(Scalar(0));
    Packet sum0 = zero_v, sum1 = zero_v;
    Packet max0 = ei::pset1<Packet>(neg_inf), max1 = max0;
    auto exp_step = [&](std::size_t at) {
      const Packet w0 = packet_weight<Packet, false, kFlush>(ei::ploadu<Packet>(logits + at),
                                                             exponent, small_v, zero_v, zero_v);
      const Packet w1 = packet_weight<Packet, false, kFlush>(
          ei::ploadu<Packet>(logits + at + kLanes), exponent, small_v, zero_v, zero_v);
      if constexpr (kStore && kStream) {
        stream_store(out + at, w0);
        stream_store(out + at + kLanes, w1);
      } else if constexpr (kStore) {
        ei::pstoreu(out + at, w0);
        ei::pstoreu(out + at + kLanes, w1);
      }
      sum0 = ei::padd(sum0, w0);
      sum1 = ei::padd(sum1, w1);
    };
    auto scan_step = [&](std::size_t at) {
      const Packet a = ei::ploadu<Packet>(next + at);
      const Packet b = ei::ploadu<Packet>(next + at + kLanes);
      max0 = ei::pmax(max0, a);
      max1 = ei::pmax(max1, b);
    };
    const std::size_t both = std::min(length, next_length) / kStep * kStep;
    for (; i < both; i += kStep) {
      exp_step(i);
      scan_step(i);
    }
    for (; i + kStep <= length; i += kStep) exp_step(i);
    for (j = both; j + kStep <= next_length; j += kStep) scan_step(j);
    sum = ei::predux(ei::padd(sum0, sum1));
    scan.max = ei::predux_max(ei::pmax(max0, max1));
  }
  for (; i < length; ++i) {
    const Scalar w = scalar_weight<Scalar, false>(logits[i], reference, inv_temperature, neg_inf);
    if constexpr (kStore) out[i] = w;
    sum += w;
  }
  for (; j < next_length; ++j) scan.max = std::max(scan.max, next[j]);
  next_scan = scan;
  return sum;
}

/// Result of the single-pass kernels.
template <class Scalar>
struct OnlineSum {
  Scalar reference;  ///< the logit every weight is relative to: weight = exp((x - ref) / T)
  double sum;        ///< sum of the weights (in double, blocks in order)
  /// online_exp_sum only: offset of the first block that attains the max (argmax finishes with
  /// a scan of that block).
  std::size_t max_block_offset = 0;
};

/// \brief Single pass over an unfiltered row: the row max M and Z = sum exp((x - M) * inv_t),
/// with the NaN / +inf / all -inf check (the result's reference is M).
///
/// Online softmax by blocks: the running max m and the running sum S (double) relative to m;
/// when a block's max exceeds m, S is rescaled by exp((m_old - m_new) * inv_t) (reference_shift)
/// first, so every block's weights are <= 1 and the final S is relative to the true max.
/// Rescales cost one scalar exp each.
///
/// With non-empty `block_sums` / `block_references` (block_count(V) entries each) it also
/// records every block's weight sum and the running max that block was exponentiated against
/// (0 and -inf for blocks before the first finite logit), so that a later inverse-CDF sample
/// needs no summing pass (see sample_located).
/// \throws std::domain_error for NaN, +inf, or a row that is entirely -inf (or empty).
template <class Scalar>
[[nodiscard]] OnlineSum<Scalar> online_exp_sum(std::span<const Scalar> logits,
                                               Scalar inv_temperature,
                                               std::span<Scalar> block_sums = {},
                                               std::span<Scalar> block_references = {}) {
  const bool record = !block_sums.empty();
  constexpr Scalar neg_inf = -std::numeric_limits<Scalar>::infinity();
  const std::size_t size = logits.size();
  const Scalar* data = logits.data();
  const bool flush = !packet_exp_of_minus_inf_is_zero<Scalar>();
  BlockScan<Scalar> scan = scan_block(data, std::min(kBlockSize, size));
  Scalar logit_sum = scan.sum;
  Scalar running_max = neg_inf;
  std::size_t max_block_offset = 0;
  double sum = 0;
  for (std::size_t offset = 0; offset < size; offset += kBlockSize) {
    if (!(scan.max < std::numeric_limits<Scalar>::infinity())) {
      running_max = scan.max;  // +inf: check_row reports it (after looking for NaN)
      break;
    }
    if (scan.max > running_max) {
      if (!is_minus_infinity(running_max)) {
        sum *= std::exp(reference_shift(running_max, scan.max, inv_temperature));
      }
      running_max = scan.max;
      max_block_offset = offset;
    }
    const std::size_t length = std::min(kBlockSize, size - offset);
    const std::size_t next_offset = offset + length;
    const std::size_t next_length =
        next_offset < size ? std::min(kBlockSize, size - next_offset) : 0;
    BlockScan<Scalar> next_scan;
    Scalar block = 0;
    if (is_minus_infinity(running_max)) {
      // Every logit so far is -inf: weight 0, nothing to exponentiate.
      if (next_length > 0) next_scan = scan_block(data + next_offset, next_length);
    } else {
      block = flush ? exp_block_scanning_next<Scalar, false, true>(
                          data + offset, length, running_max, inv_temperature, nullptr,
                          data + next_offset, next_length, next_scan)
                    : exp_block_scanning_next<Scalar, false, false>(
                          data + offset, length, running_max, inv_temperature, nullptr,
                          data + next_offset, next_length, next_scan);
      sum += static_cast<double>(block);
    }
    if (record) {
      block_sums[offset / kBlockSize] = block;
      block_references[offset / kBlockSize] = running_max;
    }
    logit_sum += next_scan.sum;
    scan = next_scan;
  }
  check_row(logits, running_max, std::isnan(logit_sum) || std::isnan(sum));
  return {running_max, sum, max_block_offset};
}

/// Largest scaled exponent (x - reference) * inv_t a stored weight may have. e^64 ~ 6e27: a
/// float weight stays finite and so does a block sum (1024 e^64 ~ 6e30) and the normalizer of
/// any vocabulary below 1e10 tokens (V e^64 < 3.4e38, whose reciprocal is still a normal float).
inline constexpr double kMaxWeightExponent = 64;

/// \brief Single pass over an unfiltered row that stores weights (the draft-row path): every
/// weight relative to ONE reference logit r, per-block sums, NaN / +inf / all -inf check.
///
/// Why one shared reference: verification reads q(x) = weights[x] / Z and the residual uses
/// all of q, and the token is sampled from exactly these weights, so all of them must be on one
/// scale. r starts at the first finite block max and moves up to a block's max m_b only when
/// (m_b - r) * inv_t > kMaxWeightExponent; otherwise the block is stored against r and its
/// weights may exceed 1 (by at most e^64). Blocks stored against an older, smaller reference
/// r_b are rescaled once at the end by exp((r_b - r) * inv_t) (reference_shift) and re-summed
/// (lazily, so a row
/// whose max keeps climbing costs at most one extra multiply pass, never a pass per climb; at
/// T = 1 real logits never climb 64 nats).
///
/// Range: every block max is <= its reference + 64 T <= r + 64 T, so every weight is <= e^64
/// and finite (see kMaxWeightExponent); the max token's weight is >= 1 because r is some
/// block's max, so the normalizer is >= 1. Weights relative to r are larger than relative to
/// the true max, so no token underflows that would not underflow in the two-pass form. A
/// rescaled weight can come out subnormal (or 0): such a token then has probability below
/// e^-87 of the max's, and q is still exactly what is sampled (the stored weights).
///
/// Precision: a weight's exponent (x - r) * inv_t is rounded to float, a relative error of up
/// to |exponent| 2^-24 in the weight. The two-pass form pays that on the light tokens far below
/// the max; here the heaviest tokens may sit up to 64 nats above r (<= 4e-6 relative, 1e-6 at
/// 16 nats). That moves q off the ideal softmax by as much, which does not touch exactness:
/// q is by construction the distribution the token is sampled from, only the acceptance rate
/// moves (by ~1e-6).
///
/// `block_sums` and `block_references` have block_count(V) entries. Returns r (not
/// necessarily the max) and the total = double sum of block_sums in block order.
/// \throws std::domain_error for NaN, +inf, or a row that is entirely -inf (or empty).
template <class Scalar>
[[nodiscard]] OnlineSum<Scalar> online_store_weights(std::span<const Scalar> logits,
                                                     Scalar inv_temperature,
                                                     std::span<Scalar> weights,
                                                     std::span<Scalar> block_sums,
                                                     std::span<Scalar> block_references) {
  constexpr Scalar neg_inf = -std::numeric_limits<Scalar>::infinity();
  const std::size_t size = logits.size();
  const Scalar* data = logits.data();
  const bool flush = !packet_exp_of_minus_inf_is_zero<Scalar>();
  BlockScan<Scalar> scan = scan_block(data, std::min(kBlockSize, size));
  Scalar logit_sum = scan.sum;
  Scalar row_max = neg_inf;
  Scalar reference = neg_inf;
  bool nan_in_weights = false;
  // Every block starts at a multiple of kBlockSize, so an aligned row keeps its blocks aligned.
  const bool streaming = use_streaming_stores(weights.data(), size);
  for (std::size_t offset = 0; offset < size; offset += kBlockSize) {
    if (!(scan.max < std::numeric_limits<Scalar>::infinity())) {
      row_max = scan.max;  // +inf: check_row reports it (after looking for NaN)
      break;
    }
    row_max = std::max(row_max, scan.max);
    if (scan.max > reference && (is_minus_infinity(reference) ||
                                 (static_cast<double>(scan.max) - static_cast<double>(reference)) *
                                         static_cast<double>(inv_temperature) >
                                     kMaxWeightExponent)) {
      reference = scan.max;
    }
    const std::size_t block = offset / kBlockSize;
    const std::size_t length = std::min(kBlockSize, size - offset);
    const std::size_t next_offset = offset + length;
    const std::size_t next_length =
        next_offset < size ? std::min(kBlockSize, size - next_offset) : 0;
    block_references[block] = reference;
    BlockScan<Scalar> next_scan;
    if (is_minus_infinity(reference)) {
      // Every logit so far is -inf: weight 0; a later rescale leaves these zeros alone.
      std::fill_n(weights.data() + offset, length, Scalar(0));
      block_sums[block] = 0;
      if (next_length > 0) next_scan = scan_block(data + next_offset, next_length);
    } else {
      Scalar* out = weights.data() + offset;
      const Scalar* next = data + next_offset;
      if (flush) {
        block_sums[block] = streaming ? exp_block_scanning_next<Scalar, true, true, true>(
                                            data + offset, length, reference, inv_temperature, out,
                                            next, next_length, next_scan)
                                      : exp_block_scanning_next<Scalar, true, true>(
                                            data + offset, length, reference, inv_temperature, out,
                                            next, next_length, next_scan);
      } else if (streaming) {
        block_sums[block] = exp_block_scanning_next<Scalar, true, false, true>(
            data + offset, length, reference, inv_temperature, out, next, next_length, next_scan);
      } else {
        block_sums[block] = exp_block_scanning_next<Scalar, true, false>(
            data + offset, length, reference, inv_temperature, out, next, next_length, next_scan);
      }
      nan_in_weights = nan_in_weights || std::isnan(block_sums[block]);
    }
    logit_sum += next_scan.sum;
    scan = next_scan;
  }
  check_row(logits, row_max, std::isnan(logit_sum) || nan_in_weights);

  double total = 0;
  for (std::size_t block = 0; block < block_count(size); ++block) {
    const Scalar block_reference = block_references[block];
    if (!exactly_equal(block_reference, reference) && !exactly_equal(block_sums[block], Scalar(0)))
        [[unlikely]] {
      const auto factor = static_cast<Scalar>(
          std::exp(reference_shift(block_reference, reference, inv_temperature)));
      const std::size_t offset = block * kBlockSize;
      const std::span<Scalar> block_weights =
          weights.subspan(offset, std::min(kBlockSize, size - offset));
      as_array(block_weights) *= factor;
      block_sums[block] = block_sum(block_weights.data(), block_weights.size());
    }
    total += static_cast<double>(block_sums[block]);
  }
  return {reference, total};
}

}  // namespace specdec::detail
SPECDEC_END_SIMD_KERNELS

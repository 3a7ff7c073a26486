#pragma once
/// \file
/// \brief process_logits (a row -> its TokenDistribution, one pass where one suffices) and
/// inverse-CDF sampling from it.

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
#include "specdec/sampling/filters.hpp"
#include "specdec/sampling/params.hpp"
#include "specdec/sampling/softmax.hpp"
#include "specdec/types.hpp"

namespace specdec {

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
  const FilterResult<Scalar> filtered = apply_filters(logits, dist.max_logit, dist.inv_temperature,
                                                      params, std::span<Scalar>(), filter_scratch);
  dist.threshold = filtered.threshold;
  if (filtered.kept_mass_known) {
    dist.normalizer = static_cast<Scalar>(filtered.kept_mass);  // top-p summed it already
  } else if (filtered.weights_stored) {
    // min-p cut deeper than top-p: sum the stored weights above it (no exp).
    dist.normalizer = static_cast<Scalar>(
        mask_weights(logits, dist.threshold,
                     std::span<Scalar>(filter_scratch.data(), logits.size()), std::span<Scalar>()));
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
        factor = std::exp(detail::reference_shift(reference, dist.max_logit, dist.inv_temperature));
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

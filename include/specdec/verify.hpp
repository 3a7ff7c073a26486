#pragma once
/// \file
/// \brief Verification of drafted tokens: acceptance, residual sampling, greedy matching.
///
/// Speculative sampling (Leviathan et al. 2023; Chen et al. 2023). The draft proposed x ~ q.
/// Accept it with probability min(1, p(x) / q(x)); on rejection sample y from the residual
///   r(y) = max(0, p(y) - q(y)) / sum_z max(0, p(z) - q(z)).
/// Why this is exact: P(emit y) = q(y) min(1, p(y)/q(y)) + P(reject) r(y)
///                              = min(q(y), p(y)) + max(0, p(y) - q(y)) = p(y),
/// because P(reject) = sum_x max(0, q(x) - p(x)) = sum_z max(0, p(z) - q(z)) (both
/// distributions sum to 1). This needs q over the *whole* vocabulary, not just q(x), and needs
/// q to be exactly the distribution x was drawn from; the decoder passes the very weights its
/// inverse-CDF scan used. Chaining positions is exact because position j+1 is only examined
/// after x_j was accepted, i.e. emitted as a genuine sample of p_j. After K acceptances the
/// target row K (which follows the last drafted token) gives one more exact sample: the bonus.
///
/// All functions are pure: distributions, weights and coins in, tokens out; buffers belong to
/// the caller.

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <type_traits>
#include <vector>

#include <Eigen/Core>

#include "specdec/detail/error.hpp"
#include "specdec/detail/exact_float.hpp"
#include "specdec/detail/kernels/row_kernels.hpp"
#include "specdec/sampling.hpp"
#include "specdec/sampling/softmax.hpp"
#include "specdec/types.hpp"

namespace specdec {

/// \brief Outcome of verifying K drafted tokens.
struct VerifyResult {
  std::size_t accepted = 0;  ///< accepted drafted tokens, the prefix drafted[0, accepted)
  token_t next_token = 0;    ///< correction at position `accepted` (residual sample or target
                             ///< argmax), or the bonus from target row K if accepted == K
  bool bonus = false;        ///< accepted == K: next_token came from target row K
  /// Tree proposals: the last node of the accepted path (its ancestors are the rest of the
  /// path; `accepted` is the path's length), -1 if none was accepted; bonus then says that
  /// node is a leaf. Chains may leave it at -1 (the path is nodes 0..accepted-1).
  std::int32_t accepted_node = -1;
};

/// \brief min(1, p_x / q_x): the probability of accepting a drafted token.
///
/// Requires q_x > 0 (x was sampled from q, so it is). Accept iff coin < this, coin in [0, 1):
/// then P(accept) is exactly this value.
template <class Scalar>
[[nodiscard]] Scalar acceptance_probability(Scalar p_x, Scalar q_x) noexcept {
  return p_x >= q_x ? Scalar(1) : p_x / q_x;
}

namespace detail {

/// Throws std::invalid_argument unless `token` is a token id of a vocabulary of `vocab_size`.
inline void check_token(token_t token, std::size_t vocab_size, const char* what,
                        const char* role = "token", std::size_t position = SIZE_MAX) {
  if (token >= 0 && static_cast<std::size_t>(token) < vocab_size) return;
  if (position == SIZE_MAX) {
    throw_invalid_argument(what, ": ", role, " ", token,
                           " is out of range; expected a token id in [0, ", vocab_size,
                           ") (V = ", vocab_size, ")");
  }
  throw_invalid_argument(what, ": ", role, " ", token, " at position ", position,
                         " is out of range; expected a token id in [0, ", vocab_size,
                         ") (V = ", vocab_size, ")");
}

/// Checks every drafted token against V once per call (O(K)): the kernels index rows with them
/// unchecked.
inline void check_drafted_tokens(std::span<const token_t> drafted, std::size_t vocab_size,
                                 const char* what) {
  for (std::size_t j = 0; j < drafted.size(); ++j) {
    check_token(drafted[j], vocab_size, what, "drafted token", j);
  }
}

/// Throws std::invalid_argument unless the target rows' vocabulary is the draft's.
inline void check_same_vocabulary(std::size_t target_vocab_size, std::size_t draft_vocab_size,
                                  const char* what) {
  if (target_vocab_size != draft_vocab_size) {
    throw_invalid_argument(what, ": target rows have V = ", target_vocab_size,
                           " tokens and the draft weights V = ", draft_vocab_size,
                           "; expected one vocabulary");
  }
}

}  // namespace detail

/// \brief min(1, p(x) / q(x)) for two processed distributions.
/// \throws std::invalid_argument unless p and q share V and 0 <= x < V.
template <class Scalar>
[[nodiscard]] Scalar acceptance_probability(const TokenDistribution<Scalar>& p,
                                            const TokenDistribution<Scalar>& q, token_t x) {
  detail::check_same_vocabulary(p.vocab_size(), q.vocab_size(), "acceptance_probability");
  detail::check_token(x, p.vocab_size(), "acceptance_probability");
  return acceptance_probability(p.probability(x), q.probability(x));
}

namespace detail {

/// The residual max(0, p(y) - q(y)) block by block: `(offset, length, out) -> block sum`, with
/// the store into `out` skipped when it is null (see detail::sample_blockwise).
/// With `p_scale` = w it is max(0, w p(y) - q(y)) (block verification's residual).
template <class Scalar>
[[nodiscard]] auto residual_blocks(const TokenDistribution<Scalar>& p,
                                   std::span<const Scalar> q_weights, Scalar q_normalizer,
                                   Scalar p_scale = Scalar(1)) {
  // w p(y) - q(y) as w_p(y) (w / Z_p) - w_q(y) / Z_q, with the divisions done once.
  const Scalar inv_p_normalizer = p_scale / p.normalizer;
  const Scalar inv_q_normalizer = Scalar(1) / q_normalizer;
  const bool masked = !detail::is_minus_infinity(p.threshold);
  const bool flush = !packet_exp_of_minus_inf_is_zero<Scalar>();
  return [=, &p](std::size_t offset, std::size_t length, Scalar* out) {
    const Scalar* p_logits = p.logits.data() + offset;
    const Scalar* q_block = q_weights.data() + offset;
    if (out == nullptr) {
      return dispatch_residual_block<Scalar, false>(masked, flush, p_logits, q_block, length,
                                                    p.max_logit, p.inv_temperature, p.threshold,
                                                    inv_p_normalizer, inv_q_normalizer, out);
    }
    return dispatch_residual_block<Scalar, true>(masked, flush, p_logits, q_block, length,
                                                 p.max_logit, p.inv_temperature, p.threshold,
                                                 inv_p_normalizer, inv_q_normalizer, out);
  };
}

template <class Scalar>
void check_residual_sizes(const TokenDistribution<Scalar>& p, std::span<const Scalar> q_weights,
                          std::size_t scratch_size, const char* what) {
  const std::size_t vocab_size = p.logits.size();
  if (q_weights.size() != vocab_size || scratch_size != vocab_size) {
    throw_invalid_argument(what, ": q_weights has ", q_weights.size(), " and the output ",
                           scratch_size, " entries; expected ", vocab_size,
                           " (the vocabulary size of p)");
  }
}

}  // namespace detail

/// \brief Writes residual[y] = max(0, p(y) - q(y)) for every token y (unnormalised) and returns
/// the sum, in one pass over the vocabulary.
///
/// q(y) = q_weights[y] / q_normalizer: the stored draft weights, so q is exactly the
/// distribution the drafted token was sampled from. p(y) is recomputed from p's logits.
template <class Scalar>
double residual_distribution(const TokenDistribution<Scalar>& p, std::span<const Scalar> q_weights,
                             Scalar q_normalizer, std::span<Scalar> residual) {
  detail::check_residual_sizes(p, q_weights, residual.size(), "residual_distribution");
  const auto block = detail::residual_blocks(p, q_weights, q_normalizer);
  double total = 0;
  detail::for_each_block(p.logits.size(), [&](std::size_t offset, std::size_t length) {
    total += static_cast<double>(block(offset, length, residual.data() + offset));
  });
  return total;
}

/// \brief Samples the correction token after a rejection from r = max(0, p - q) / sum, with one
/// coin (the same law as inverse_cdf over residual_distribution). `scratch` (size V) is
/// scratch space: one pass sums the residual per block without storing it, then only the block
/// the coin falls in is recomputed (see detail::sample_blockwise).
///
/// If the residual is identically 0 (p == q to rounding, where a rejection has probability 0
/// in exact arithmetic and only happens through rounding) it samples from p with the same coin.
/// `p_scale` = w samples max(0, w p - q) instead (block verification; 0 < w <= 1).
template <class Scalar>
[[nodiscard]] token_t sample_residual(const TokenDistribution<Scalar>& p,
                                      std::span<const Scalar> q_weights, Scalar q_normalizer,
                                      double coin, std::span<Scalar> scratch,
                                      Scalar p_scale = Scalar(1)) {
  detail::check_residual_sizes(p, q_weights, scratch.size(), "sample_residual");
  double total = 0;
  const token_t token = detail::sample_blockwise<Scalar>(
      p.logits.size(), detail::residual_blocks(p, q_weights, q_normalizer, p_scale),
      scratch.first(detail::block_count(p.logits.size())), coin, total);
  if (token >= 0) return token;
  return sample(p, coin, scratch);
}

/// \brief sum_y max(0, w p(y) - q(y)): the residual mass block verification weighs stopping
/// against, in one pass without storing anything (q = q_weights / q_normalizer).
template <class Scalar>
[[nodiscard]] double residual_mass(const TokenDistribution<Scalar>& p,
                                   std::span<const Scalar> q_weights, Scalar q_normalizer,
                                   Scalar p_scale) {
  if (q_weights.size() != p.logits.size()) {
    detail::throw_invalid_argument("residual_mass: q_weights has ", q_weights.size(),
                                   " entries; expected ", p.logits.size(),
                                   " (the vocabulary size of p)");
  }
  const auto block = detail::residual_blocks(p, q_weights, q_normalizer, p_scale);
  double total = 0;
  detail::for_each_block(p.logits.size(), [&](std::size_t offset, std::size_t length) {
    total += static_cast<double>(block(offset, length, static_cast<Scalar*>(nullptr)));
  });
  return total;
}

/// \brief Samples p with `excluded` removed (renormalised), with one coin: the residual after
/// rejecting a deterministic proposal x, max(0, p - [y = x]). One exp pass sums the blocks,
/// then the coin's block is recomputed. If every other token has probability 0 (p is a point
/// mass at x: that rejection has probability 0) it samples p itself.
template <class Scalar>
[[nodiscard]] token_t sample_excluding(const TokenDistribution<Scalar>& p, token_t excluded,
                                       double coin, std::span<Scalar> scratch) {
  const std::size_t vocab_size = p.logits.size();
  if (scratch.size() != vocab_size || excluded < 0 ||
      static_cast<std::size_t>(excluded) >= vocab_size) {
    detail::throw_invalid_argument("sample_excluding: token ", excluded, " and scratch of ",
                                   scratch.size(), " entries; expected a token in [0, ", vocab_size,
                                   ") and ", vocab_size, " entries");
  }
  const bool masked = !detail::is_minus_infinity(p.threshold);
  const bool flush = !detail::packet_exp_of_minus_inf_is_zero<Scalar>();
  const auto x = static_cast<std::size_t>(excluded);
  auto block = [&](std::size_t offset, std::size_t length, Scalar* out) -> Scalar {
    const Scalar* logits = p.logits.data() + offset;
    if (x < offset || x >= offset + length) {
      if (out == nullptr) {
        return detail::dispatch_exp_block<Scalar, false>(masked, flush, logits, length, p.max_logit,
                                                         p.inv_temperature, p.threshold, out);
      }
      return detail::dispatch_exp_block<Scalar, true>(masked, flush, logits, length, p.max_logit,
                                                      p.inv_temperature, p.threshold, out);
    }
    // The excluded token's block: store it, zero x, re-sum (so the block sum and the values
    // the scan reads agree exactly).
    Scalar local[detail::kBlockSize];
    Scalar* values = out != nullptr ? out : local;
    (void)detail::dispatch_exp_block<Scalar, true>(masked, flush, logits, length, p.max_logit,
                                                   p.inv_temperature, p.threshold, values);
    values[x - offset] = Scalar(0);
    Scalar sum = 0;
    for (std::size_t i = 0; i < length; ++i) sum += values[i];
    return sum;
  };
  double total = 0;
  const token_t token = detail::sample_blockwise<Scalar>(
      vocab_size, block, scratch.first(detail::block_count(vocab_size)), coin, total);
  if (token >= 0) return token;
  return sample(p, coin, scratch);
}

/// \brief Speculative-sampling verification of `drafted` (K tokens) against lazily processed
/// target rows.
///
/// \param drafted tokens x_0..x_{K-1}, x_j sampled from q_j
/// \param draft_weights K rows: row j = the unnormalised weights x_j was sampled from
/// \param draft_normalizers K sums of those rows (q_j(y) = draft_weights[j][y] / normalizer)
/// \param target_distribution_at callable j -> TokenDistribution<Scalar> of processed target row
///        j (0..K). Called in order j = 0, 1, ... and only as far as needed: a rejection at j
///        means rows j+1..K are never processed. The returned distribution must stay valid
///        until the next call (so one scratch row suffices for processor output).
/// \param acceptance_coins at least K coins in [0, 1); x_j is accepted iff coin_j < min(1, p/q)
/// \param final_coin one coin for the residual (rejection) or bonus (full acceptance) sample
/// \param scratch V values for residual or bonus weights
/// \throws std::invalid_argument for mismatched sizes, a drafted token outside [0, V) (V of
/// the draft weights; checked once per call, O(K)), or a target row of another V.
template <class Scalar, class TargetDistributionAt>
requires std::invocable<TargetDistributionAt&, std::size_t> &&
    std::convertible_to<std::invoke_result_t<TargetDistributionAt&, std::size_t>,
                        TokenDistribution<Scalar>>
[[nodiscard]] VerifyResult verify_stochastic(std::span<const token_t> drafted,
                                             LogitsRows<Scalar> draft_weights,
                                             std::span<const Scalar> draft_normalizers,
                                             TargetDistributionAt&& target_distribution_at,
                                             std::span<const double> acceptance_coins,
                                             double final_coin, std::span<Scalar> scratch) {
  const std::size_t draft_length = drafted.size();
  if (draft_weights.rows() != draft_length || draft_normalizers.size() != draft_length ||
      acceptance_coins.size() < draft_length) {
    detail::throw_invalid_argument(
        "verify_stochastic: ", draft_length, " drafted tokens with ", draft_weights.rows(),
        " weight rows, ", draft_normalizers.size(), " normalizers and ", acceptance_coins.size(),
        " acceptance coins; expected one row, one normalizer and one coin per drafted token");
  }
  detail::check_drafted_tokens(drafted, draft_weights.vocab_size(), "verify_stochastic");
  for (std::size_t j = 0; j < draft_length; ++j) {
    const TokenDistribution<Scalar> p = target_distribution_at(j);
    detail::check_same_vocabulary(p.vocab_size(), draft_weights.vocab_size(), "verify_stochastic");
    const token_t x = drafted[j];
    const std::span<const Scalar> q_weights = draft_weights.row(j);
    const Scalar q_x = q_weights[static_cast<std::size_t>(x)] / draft_normalizers[j];
    const Scalar accept = acceptance_probability(p.probability(x), q_x);
    if (!(acceptance_coins[j] < static_cast<double>(accept))) {
      return {j, sample_residual(p, q_weights, draft_normalizers[j], final_coin, scratch), false};
    }
  }
  const TokenDistribution<Scalar> bonus_row = target_distribution_at(draft_length);
  return {draft_length, sample(bonus_row, final_coin, scratch), true};
}

/// \brief verify_stochastic over K+1 already processor-applied target logits rows, processed
/// with `params` (lazily, as above). `filter_scratch` serves top-k / top-p.
template <class Scalar>
[[nodiscard]] VerifyResult verify_stochastic(
    std::span<const token_t> drafted, LogitsRows<Scalar> draft_weights,
    std::span<const Scalar> draft_normalizers, LogitsRows<Scalar> target_logits,
    const SamplingParams& params, std::span<const double> acceptance_coins, double final_coin,
    std::span<Scalar> scratch, std::vector<Scalar>& filter_scratch) {
  if (target_logits.rows() != drafted.size() + 1) {
    detail::throw_invalid_argument("verify_stochastic: ", target_logits.rows(), " target rows for ",
                                   drafted.size(),
                                   " drafted tokens; expected K + 1 = ", drafted.size() + 1);
  }
  if (!drafted.empty()) {
    detail::check_same_vocabulary(target_logits.vocab_size(), draft_weights.vocab_size(),
                                  "verify_stochastic");
  }
  return verify_stochastic(
      drafted, draft_weights, draft_normalizers,
      [&](std::size_t j) { return process_logits(target_logits.row(j), params, filter_scratch); },
      acceptance_coins, final_coin, scratch);
}

/// \brief Greedy verification: accept while the target argmax equals the drafted token; the
/// next token is the target argmax at the first mismatch, or of row K on full acceptance.
/// Hence the output equals greedy decoding of the target, token for token.
///
/// \param target_argmax_at callable j -> token_t, the argmax of processed target row j (0..K),
///        called in order and only as far as needed.
template <class TargetArgmaxAt>
requires std::invocable<TargetArgmaxAt&, std::size_t> &&
    std::convertible_to<std::invoke_result_t<TargetArgmaxAt&, std::size_t>, token_t>
[[nodiscard]] VerifyResult verify_greedy(std::span<const token_t> drafted,
                                         TargetArgmaxAt&& target_argmax_at) {
  for (std::size_t j = 0; j < drafted.size(); ++j) {
    const token_t best = target_argmax_at(j);
    if (best != drafted[j]) return {j, best, false};
  }
  return {drafted.size(), static_cast<token_t>(target_argmax_at(drafted.size())), true};
}

/// \brief verify_greedy over K+1 already processor-applied target logits rows.
template <class Scalar>
[[nodiscard]] VerifyResult verify_greedy(std::span<const token_t> drafted,
                                         LogitsRows<Scalar> target_logits) {
  if (target_logits.rows() != drafted.size() + 1) {
    detail::throw_invalid_argument("verify_greedy: ", target_logits.rows(), " target rows for ",
                                   drafted.size(),
                                   " drafted tokens; expected K + 1 = ", drafted.size() + 1);
  }
  detail::check_drafted_tokens(drafted, target_logits.vocab_size(), "verify_greedy");
  return verify_greedy(drafted, [&](std::size_t j) { return argmax(target_logits.row(j)); });
}

}  // namespace specdec

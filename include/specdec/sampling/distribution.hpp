#pragma once
/// \file
/// \brief TokenDistribution: a processed next-token distribution viewing its logits.

#include <cassert>
#include <cmath>
#include <cstddef>
#include <limits>
#include <span>

#include "specdec/detail/kernels/scaled_exponent.hpp"
#include "specdec/types.hpp"

namespace specdec {

/// \brief A processed next-token distribution, viewing (not owning) its logits.
///
/// `logits` points at the model's memory (no processor) or at the processor's scratch row: it
/// is valid exactly as long as that memory is. probability() and log_probability() read it.
template <class Scalar>
struct TokenDistribution {
  std::span<const Scalar> logits;  ///< processed logits, before temperature
  Scalar inv_temperature = 1;      ///< 1 / T, T > 0
  /// The reference logit every weight is relative to: the row's max (finite) for
  /// distributions without stored weights and for filtered rows; for an unfiltered row processed
  /// with stored weights, the reference those weights share (a logit at most 64 T below the max,
  /// see detail::online_store_weights). Either way weight(x) = exp((logit_x - max_logit) / T).
  Scalar max_logit = 0;
  Scalar threshold = -std::numeric_limits<Scalar>::infinity();  ///< logit < threshold => p = 0
  Scalar normalizer = 1;  ///< Z = sum over kept tokens of exp((logit - max_logit) / T)
  /// Optional, set by process_logits(logits, params, filter_scratch, recorded) for unfiltered
  /// rows: per-1024-token-block weight sums, block b's relative to block_references[b], views of
  /// the caller's buffers. sample() then finds the coin's block from them instead of summing
  /// the row again (one pass per sampled row instead of two). Empty otherwise.
  std::span<const Scalar> block_sums{};
  std::span<const Scalar> block_references{};  ///< see block_sums

  [[nodiscard]] std::size_t vocab_size() const noexcept { return logits.size(); }
  /// \brief Whether the filters keep `token`.
  ///
  /// Precondition of kept(), weight(), probability() and log_probability(): 0 <= token < V.
  /// Unchecked (they run per token in verification's hot loop; an assert in debug builds):
  /// the public functions that take token ids from callers (verify.hpp) check them once.
  [[nodiscard]] bool kept(token_t token) const noexcept {
    assert(token >= 0 && static_cast<std::size_t>(token) < logits.size());
    return logits[static_cast<std::size_t>(token)] >= threshold;
  }
  /// \brief Unnormalised weight exp((logit - max_logit) / T), 0 for filtered tokens.
  [[nodiscard]] Scalar weight(token_t token) const noexcept {
    if (!kept(token)) return Scalar(0);
    return std::exp(exponent(token));
  }
  /// \brief p(token); 0 for filtered tokens. Requires 0 <= token < V (see kept()).
  [[nodiscard]] Scalar probability(token_t token) const noexcept {
    return weight(token) / normalizer;
  }
  /// \brief log p(token) without forming p (exact for tiny p); -inf for filtered tokens.
  /// Requires 0 <= token < V (see kept()).
  [[nodiscard]] Scalar log_probability(token_t token) const noexcept {
    if (!kept(token)) return -std::numeric_limits<Scalar>::infinity();
    return exponent(token) - std::log(normalizer);
  }

 private:
  /// (logit - max_logit) / T in the kernels' exact form (detail::scaled_exponent), so weight()
  /// agrees with the weights the normalizer was summed from.
  [[nodiscard]] Scalar exponent(token_t token) const noexcept {
    return detail::scaled_exponent(logits[static_cast<std::size_t>(token)], max_logit,
                                   inv_temperature);
  }
};

}  // namespace specdec

#pragma once
/// \file
/// \brief Numerically stable max / logsumexp / softmax / log_softmax / argmax over one row.
///
/// Every function subtracts the row maximum before exponentiating (exp(x - max) <= 1, so
/// nothing overflows and the largest term is exactly 1, so the sum is >= 1 and its log is
/// finite). No epsilon is ever added to a denominator or inside a log: that would distort small
/// probabilities, which speculative decoding's acceptance ratio p(x)/q(x) depends on.
///
/// All functions are templates over the scalar (float in the decoder, double in exact tests),
/// read a `std::span<const Scalar>` and write into caller-owned memory. Overloads taking any
/// contiguous range (std::vector, std::array) forward to the span versions.

#include <cmath>
#include <cstddef>
#include <limits>
#include <ranges>
#include <span>
#include <type_traits>

#include <Eigen/Core>

#include "specdec/detail/error.hpp"
#include "specdec/detail/kernels/row_kernels.hpp"
#include "specdec/types.hpp"

namespace specdec {

/// \brief Largest logit (-inf for an empty row). NaN anywhere gives NaN.
template <class Scalar>
[[nodiscard]] Scalar max_logit(std::span<const Scalar> logits) noexcept {
  return detail::max_propagating_nan(logits);
}

/// \brief Index of the largest logit, the lowest index on ties (greedy decoding's rule).
/// \throws std::domain_error if the row holds NaN or +inf, or every logit is -inf.
template <class Scalar>
[[nodiscard]] token_t argmax(std::span<const Scalar> logits) {
  return detail::argmax_checked(logits).first;
}

/// \brief log(sum_i exp(x_i)) computed as max + log(sum_i exp(x_i - max)).
///
/// -inf for an all -inf (or empty) row, +inf if some logit is +inf, NaN if some logit is NaN
/// (the fast max may skip a NaN, but the exp-sum cannot). Two passes: max, exp-sum.
template <class Scalar>
[[nodiscard]] Scalar logsumexp(std::span<const Scalar> logits) noexcept {
  if (logits.empty()) return -std::numeric_limits<Scalar>::infinity();
  const Scalar max_value = detail::as_array(logits).maxCoeff();
  if (!std::isfinite(max_value)) return max_value;
  return detail::logsumexp_given_max(logits, max_value);
}

/// \brief probabilities[i] = exp(x_i - max) / sum_j exp(x_j - max).
/// \throws std::invalid_argument if the sizes differ; std::domain_error as argmax().
template <class Scalar>
void softmax(std::span<const Scalar> logits, std::span<Scalar> probabilities) {
  if (probabilities.size() != logits.size()) {
    detail::throw_invalid_argument("softmax: output has ", probabilities.size(),
                                   " entries; expected ", logits.size());
  }
  const Scalar max_value = detail::scan_max(logits).value;  // throws on NaN / +inf / all -inf
  const Scalar neg_inf = -std::numeric_limits<Scalar>::infinity();
  const double total = detail::store_weights(logits, max_value, Scalar(1), neg_inf, probabilities);
  detail::as_array(probabilities) /= static_cast<Scalar>(total);
}

/// \brief log_probabilities[i] = x_i - max - log(sum_j exp(x_j - max)).
/// \throws std::invalid_argument if the sizes differ; std::domain_error as argmax().
template <class Scalar>
void log_softmax(std::span<const Scalar> logits, std::span<Scalar> log_probabilities) {
  if (log_probabilities.size() != logits.size()) {
    detail::throw_invalid_argument("log_softmax: output has ", log_probabilities.size(),
                                   " entries; expected ", logits.size());
  }
  const Scalar max_value = detail::scan_max(logits).value;  // throws on NaN / +inf / all -inf
  const Scalar log_normalizer = detail::logsumexp_given_max(logits, max_value);
  detail::as_array(log_probabilities) = detail::as_array(logits) - log_normalizer;
}

// Convenience overloads for contiguous ranges (std::vector<double>, std::array<float, N>, ...).
namespace detail {
template <class R>
concept ScalarRange = std::ranges::contiguous_range<R> && std::ranges::sized_range<R> &&
    std::is_floating_point_v<std::ranges::range_value_t<R>> &&
    !std::is_same_v<std::remove_cvref_t<R>, std::span<const std::ranges::range_value_t<R>>>;
template <class R>
using range_scalar_t = std::remove_cv_t<std::ranges::range_value_t<R>>;
}  // namespace detail

template <detail::ScalarRange R>
[[nodiscard]] auto max_logit(const R& logits) noexcept {
  return max_logit(std::span<const detail::range_scalar_t<R>>(logits));
}
template <detail::ScalarRange R>
[[nodiscard]] token_t argmax(const R& logits) {
  return argmax(std::span<const detail::range_scalar_t<R>>(logits));
}
template <detail::ScalarRange R>
[[nodiscard]] auto logsumexp(const R& logits) noexcept {
  return logsumexp(std::span<const detail::range_scalar_t<R>>(logits));
}
template <detail::ScalarRange R, detail::ScalarRange Out>
void softmax(const R& logits, Out& probabilities) {
  softmax(std::span<const detail::range_scalar_t<R>>(logits),
          std::span<detail::range_scalar_t<R>>(probabilities));
}
template <detail::ScalarRange R, detail::ScalarRange Out>
void log_softmax(const R& logits, Out& log_probabilities) {
  log_softmax(std::span<const detail::range_scalar_t<R>>(logits),
              std::span<detail::range_scalar_t<R>>(log_probabilities));
}

}  // namespace specdec

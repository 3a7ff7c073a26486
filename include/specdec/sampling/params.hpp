#pragma once
/// \file
/// \brief SamplingParams: how logits become a distribution (temperature, top-k, top-p, min-p, a
/// logits processor), validated.
///
/// Filter order (the same for draft rows and target rows, at every position):
///   1. logits_processor (user, optional; sees the context that precedes the position)
///   2. temperature T    (T = 0 is greedy: argmax, lowest index on ties; steps 3-5 are moot
///                        because none of them can remove the argmax)
///   3. top-k            (keep the k largest logits)
///   4. top-p            (keep the smallest high-probability set of mass >= top_p, computed on
///                        the distribution left by top-k)
///   5. min-p            (keep tokens with p >= min_p * p_max)
///
/// Every filter is a threshold on the processed logit: a token survives iff
/// `logit >= threshold`, so tokens tied with the boundary logit all survive (top-k may keep
/// more than k tokens on ties; top-p never splits a tie). The processed distribution is
///   p(x) = exp((logit_x - max) / T) / Z   if logit_x >= threshold, else 0,
/// with Z the sum over kept tokens. Applying identical processing to the draft's q and the
/// target's p is what keeps speculative sampling exact *for the processed target distribution*.

#include <cmath>
#include <functional>
#include <span>

#include "specdec/detail/error.hpp"
#include "specdec/detail/exact_float.hpp"
#include "specdec/types.hpp"

namespace specdec {

/// \brief How to turn logits into a distribution. Validated by validate() at generate() start.
struct SamplingParams {
  float temperature = 1.0f;  ///< 0 (greedy) or finite and >= kMinTemperature (1e-30)
  int top_k = 0;             ///< >= 0; 0 = off (also off when >= V)
  float top_p = 1.0f;        ///< in (0, 1]; 1 = off
  float min_p = 0.0f;        ///< in [0, 1); 0 = off
  /// Optional and must be pure: rewrites one row of logits in place given the context it
  /// follows (repetition penalty, banned tokens set to -inf, ...). The decoder copies the
  /// model's row into its own buffer and applies this to every draft and target row, each with
  /// the context preceding that row's position. Without it no logits are copied.
  std::function<void(std::span<const token_t> context, std::span<float> logits)> logits_processor;

  /// The smallest positive temperature: T must be 0 (greedy) or at least this. Sampling divides
  /// logits by T, and the kernels form (x - max) / T and x / T - max / T (the FMA form of
  /// detail::scaled_exponent); for logits up to 1e8 in magnitude those stay below 2e8 / T, which
  /// is finite in float (< 3.4e38) exactly when T > 5.9e-31. 1e-30 keeps that margin and 1 / T
  /// = 1e30 finite; below ~2.9e-39, 1 / T itself overflows to inf. At this temperature any two
  /// logits further apart than ~1e-28 already give a point mass at the argmax, so nothing is
  /// lost: use T = 0 for argmax decoding.
  static constexpr float kMinTemperature = 1e-30f;

  /// \brief True for temperature 0 (argmax decoding).
  [[nodiscard]] bool greedy() const noexcept { return detail::exactly_equal(temperature, 0.0f); }

  /// \brief Throws std::invalid_argument naming the first bad field and its allowed range.
  void validate() const {
    if (!(temperature >= 0.0f) || !std::isfinite(temperature)) {
      detail::throw_invalid_argument("temperature = ", temperature,
                                     "; expected a finite value >= 0 (0 = greedy)");
    }
    if (temperature > 0.0f && temperature < kMinTemperature) {
      detail::throw_invalid_argument(
          "temperature = ", temperature, "; expected 0 (greedy) or >= ", kMinTemperature,
          " (SamplingParams::kMinTemperature: below it (max - x) / T overflows for logits up to "
          "1e8)");
    }
    if (top_k < 0) {
      detail::throw_invalid_argument("top_k = ", top_k, "; expected >= 0 (0 = off)");
    }
    if (!(top_p > 0.0f && top_p <= 1.0f)) {
      detail::throw_invalid_argument("top_p = ", top_p, "; expected a value in (0, 1] (1 = off)");
    }
    if (!(min_p >= 0.0f && min_p < 1.0f)) {
      detail::throw_invalid_argument("min_p = ", min_p, "; expected a value in [0, 1) (0 = off)");
    }
  }
};

}  // namespace specdec

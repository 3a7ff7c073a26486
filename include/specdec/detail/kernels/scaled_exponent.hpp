#pragma once
/// \file
/// \brief The exponent (x - reference) / T of a weight, formed the same way by every kernel and
/// by TokenDistribution, and the shift between two references (internal).
///
/// Probabilities are ratios of weights to a normalizer, so both must be formed with the same
/// rounding; this header is the one place that rounding is defined (one FMA where available).

#include <cmath>

#include <Eigen/Core>

namespace specdec::detail {

/// Whether exponents are formed with one fused multiply-add (see scaled_exponent).
#if defined(EIGEN_VECTORIZE_FMA)
inline constexpr bool kExponentByFma = true;
#else
inline constexpr bool kExponentByFma = false;
#endif

/// \brief The exponent of a weight, (x - reference) * inv_t, as every kernel and
/// TokenDistribution form it.
///
/// With FMA hardware: fma(x, inv_t, -offset), offset = reference * inv_t rounded once. The
/// product x * inv_t is exact inside the FMA and the result is rounded once, so the only extra
/// error is offset's rounding: a factor exp(delta), |delta| <= ulp(reference / T) / 2, common
/// to every weight against that reference. It cancels in every probability because the
/// normalizer, the scalar formula (TokenDistribution::weight) and the rescales between
/// references (reference_shift) all use the same rounded offset. One instruction instead of a
/// subtract and a multiply on the exp's dependency chain: measured ~15 % faster exp passes.
/// Without FMA: (x - reference) * inv_t (a separate multiply and add would round x * inv_t,
/// an error that differs per token: 1e-2 for x / T ~ 2e5); the subtraction is exact near the
/// reference (Sterbenz), where the mass is.
template <class Scalar>
[[nodiscard]] Scalar scaled_exponent(Scalar x, Scalar reference, Scalar inv_t) noexcept {
  if constexpr (kExponentByFma) {
    return std::fma(x, inv_t, -(reference * inv_t));
  } else {
    return (x - reference) * inv_t;
  }
}

/// \brief log of the factor that moves weights relative to reference `from` onto reference
/// `to` (exp((x - from) / T) * exp(shift) = exp((x - to) / T)), in the form scaled_exponent
/// uses: the difference of the two rounded offsets with FMA, (from - to) / T without. Exact in
/// double for float references.
template <class Scalar>
[[nodiscard]] double reference_shift(Scalar from, Scalar to, Scalar inv_t) noexcept {
  if constexpr (kExponentByFma) {
    return static_cast<double>(from * inv_t) - static_cast<double>(to * inv_t);
  } else {
    return (static_cast<double>(from) - static_cast<double>(to)) * static_cast<double>(inv_t);
  }
}

/// Packet form of scaled_exponent for one reference (its constants, broadcast once).
template <class Scalar>
struct PacketExponent {
  using Packet = typename Eigen::internal::packet_traits<Scalar>::type;
  Packet inv_t;
  Packet reference;
  Packet minus_offset;

  PacketExponent(Scalar reference_logit, Scalar inv_temperature)
      : inv_t(Eigen::internal::pset1<Packet>(inv_temperature)),
        reference(Eigen::internal::pset1<Packet>(reference_logit)),
        minus_offset(Eigen::internal::pset1<Packet>(-(reference_logit * inv_temperature))) {}

  EIGEN_ALWAYS_INLINE Packet operator()(const Packet& x) const {
    namespace ei = Eigen::internal;
    if constexpr (kExponentByFma) {
      return ei::pmadd(x, inv_t, minus_offset);
    } else {
      return ei::pmul(ei::psub(x, reference), inv_t);
    }
  }
};

}  // namespace specdec::detail

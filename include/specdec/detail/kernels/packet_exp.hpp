#pragma once
/// \file
/// \brief The exp of a SIMD packet every kernel is bound by: Eigen's pexp, and our own for 16
/// floats on AVX-512 (internal). Also SPECDEC_KERNEL, which inlines it into the kernels.

#include <limits>

#include <Eigen/Core>
#if defined(__AVX512F__)
#include <immintrin.h>  // the AVX-512 overloads (Eigen omits it without vectorization)
#endif

#include "specdec/detail/exact_float.hpp"
#include "specdec/detail/kernels/simd_warnings.hpp"

/// Inlines every call inside a kernel, Eigen's pexp included: GCC 12 otherwise keeps pexp out
/// of line in kernels instantiated in several variants, a call per packet (measured 10-30 %
/// slower sample / residual passes).
#if defined(__GNUC__) || defined(__clang__)
#define SPECDEC_KERNEL __attribute__((flatten))
#else
#define SPECDEC_KERNEL
#endif

SPECDEC_BEGIN_SIMD_KERNELS
namespace specdec::detail {

/// Whether Scalar has SIMD packets with a vectorised exp (float / double on x86 and ARM).
template <class Scalar>
inline constexpr bool kHasPacketExp = Eigen::internal::packet_traits<Scalar>::Vectorizable&&
                                          Eigen::internal::packet_traits<Scalar>::HasExp &&
                                      (Eigen::internal::packet_traits<Scalar>::size > 1);

/// \brief exp of a packet: Eigen's pexp, except for 16 floats on AVX-512.
///
/// Eigen 3.4's AVX-512 float exp clamps its argument on both sides, rounds via
/// floor(x log2(e) + 1/2) and builds 2^m with a convert, a shift and a multiply. The kernels
/// are bound by this exp (a single-pass row costs ~20 vector instructions per 16 logits, 17 of
/// them the exp), so the AVX-512 overload below keeps Eigen's reduction and its Cephes
/// polynomial (same accuracy: relative error <= 2 ulp + 1.9e-9 |m| against std::exp on normal
/// results, m = round(x log2(e)); tested) and drops
/// four instructions: one clamp from below, a round-to-nearest, and vscalefps for y * 2^m, which
/// also rounds subnormal results correctly. Measured 10-15 % faster single-pass rows (a K = 5
/// round at V = 128256: -11 %). Exponents here
/// are <= 64 (kMaxWeightExponent), so the upper clamp is not needed: above ~88.7 the result is
/// +inf, as std::exp's. NaN propagates (max(lo, NaN) returns its second operand, NaN); -inf and
/// anything below -110 give exactly 0 (2^m with m <= -159 scales y < 2 below half the least
/// subnormal), as std::exp rounds them.
template <class Packet>
EIGEN_ALWAYS_INLINE Packet packet_exp(const Packet& x) {
  return Eigen::internal::pexp(x);
}
#if defined(__AVX512F__)
EIGEN_ALWAYS_INLINE __m512 packet_exp(__m512 x) {
  x = _mm512_max_ps(_mm512_set1_ps(-110.0f), x);
  const __m512 m = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  // r = x - m ln2 with one FMA and ln2 rounded to float, as Eigen's AVX-512 exp: that float is
  // off by 1.9e-9, an extra relative error of 1.9e-9 |m| (|m| <= 1.45 |x| + 1/2). A second
  // (Cody-Waite) constant would remove it for one more FMA, measured 8 % slower passes; the
  // heavy tokens (|x| < 10) see < 3e-8, and q and p stay exactly what is sampled either way.
  const __m512 r = _mm512_fmadd_ps(m, _mm512_set1_ps(-0.6931471805599453f), x);
  const __m512 r2 = _mm512_mul_ps(r, r);
  const __m512 r3 = _mm512_mul_ps(r2, r);
  // Eigen's Cephes polynomial, evaluated in the same order.
  __m512 y = _mm512_fmadd_ps(_mm512_set1_ps(1.9875691500E-4f), r, _mm512_set1_ps(1.3981999507E-3f));
  __m512 y1 =
      _mm512_fmadd_ps(_mm512_set1_ps(4.1665795894E-2f), r, _mm512_set1_ps(1.6666665459E-1f));
  const __m512 y2 = _mm512_add_ps(r, _mm512_set1_ps(1.0f));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(8.3334519073E-3f));
  y1 = _mm512_fmadd_ps(y1, r, _mm512_set1_ps(5.0000001201E-1f));
  y = _mm512_fmadd_ps(y, r3, y1);
  y = _mm512_fmadd_ps(y, r2, y2);
  return _mm512_scalef_ps(y, m);
}
#endif

/// \brief Whether packet_exp returns exactly 0 for -inf on this target (AVX-512 does; Eigen's
/// SSE / AVX exp clamps its argument and returns ~1e-39). Evaluated once.
template <class Scalar>
[[nodiscard]] bool packet_exp_of_minus_inf_is_zero() noexcept {
  if constexpr (kHasPacketExp<Scalar>) {
    namespace ei = Eigen::internal;
    using Packet = typename ei::packet_traits<Scalar>::type;
    static const bool is_zero = [] {
      const Packet minus_inf = ei::pset1<Packet>(-std::numeric_limits<Scalar>::infinity());
      return exactly_equal(ei::predux_max(packet_exp(minus_inf)), Scalar(0));
    }();
    return is_zero;
  } else {
    return true;
  }
}

}  // namespace specdec::detail
SPECDEC_END_SIMD_KERNELS

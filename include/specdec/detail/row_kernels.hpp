#pragma once
/// \file
/// \brief Vectorised building blocks over one row of logits (internal).
///
/// Determinism: every reduction here splits the row into blocks at fixed indices (0, kBlockSize,
/// ...) and lanes at fixed indices, never depending on the address of the data (Eigen's own
/// reductions peel to an aligned address, so their summation order depends on where a buffer
/// happens to live). Hence the same logits give bit-identical sums wherever they are stored,
/// and the same seed gives the same tokens from run to run. Stores are fastest into 64-byte
/// aligned buffers, which is why the decoder allocates its buffers aligned.
///
/// Rows are processed in blocks of kBlockSize values. A block (4 KiB of floats) stays in L1,
/// so "compute exp of a block, store it, sum it" reads the row from memory once. Block sums are
/// accumulated in double: the sum of V ~ 1e5 positive floats then loses nothing visible.
///
/// Unfiltered rows take a single pass (online softmax by blocks, see online_exp_sum and
/// online_store_weights): the max of block b + 1 is scanned while block b is exponentiated,
/// so the row is read from memory once and the max costs a few instructions per packet on
/// registers already loaded, instead of a separate memory-bound pass.

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <type_traits>
#include <utility>

#include <Eigen/Core>

#include "specdec/detail/error.hpp"
#include "specdec/types.hpp"

/// Inlines every call inside a kernel, Eigen's pexp included: GCC 12 otherwise keeps pexp out
/// of line in kernels instantiated in several variants, a call per packet (measured 10-30 %
/// slower sample / residual passes).
#if defined(__GNUC__) || defined(__clang__)
#define SPECDEC_KERNEL __attribute__((flatten))
#else
#define SPECDEC_KERNEL
#endif

namespace specdec::detail {

inline constexpr std::size_t kBlockSize = 1024;

/// Rows of stored weights at least this large are written with non-temporal (streaming)
/// stores when aligned. A regular store to a line that is not in cache first reads it
/// (read-for-ownership): a third more memory traffic. The draft path stores K rows of V weights,
/// which at V = 128256 (512 KiB a row) outgrow a core's L2 (1-2 MiB) from K = 2-4 on, so they
/// are written to memory anyway; streaming skips the read (measured at V = 128256: a draft row
/// 37 -> 31 us, a K = 5 round -13 %). Smaller rows stay in cache, where streaming would only
/// evict them (measured slower at V = 32000), so they use regular stores.
inline constexpr std::size_t kStreamingStoreMinBytes = 256 * 1024;

/// \brief Stores packet `v` at `to` bypassing the caches: overloads for x86 SSE / AVX /
/// AVX-512 packets, a plain aligned store for any other packet. `to` must be aligned to the
/// packet size. This thread's later reads see the stored values (program order, no fence).
template <class Packet, class Scalar>
EIGEN_ALWAYS_INLINE void stream_store(Scalar* to, const Packet& v) noexcept {
  Eigen::internal::pstore(to, v);
}
#if defined(__AVX512F__)
EIGEN_ALWAYS_INLINE void stream_store(float* to, __m512 v) noexcept { _mm512_stream_ps(to, v); }
EIGEN_ALWAYS_INLINE void stream_store(double* to, __m512d v) noexcept {
  _mm512_stream_pd(to, v);
}
#endif
#if defined(__AVX__)
EIGEN_ALWAYS_INLINE void stream_store(float* to, __m256 v) noexcept { _mm256_stream_ps(to, v); }
EIGEN_ALWAYS_INLINE void stream_store(double* to, __m256d v) noexcept {
  _mm256_stream_pd(to, v);
}
#endif
#if defined(__SSE2__)
EIGEN_ALWAYS_INLINE void stream_store(float* to, __m128 v) noexcept { _mm_stream_ps(to, v); }
EIGEN_ALWAYS_INLINE void stream_store(double* to, __m128d v) noexcept { _mm_stream_pd(to, v); }
#endif

/// Whether a row of `size` weights stored at `out` takes streaming stores (see
/// kStreamingStoreMinBytes): large enough, and aligned to the packet size.
template <class Scalar>
[[nodiscard]] bool use_streaming_stores(const Scalar* out, std::size_t size) noexcept {
  using Packet = typename Eigen::internal::packet_traits<Scalar>::type;
  return size * sizeof(Scalar) >= kStreamingStoreMinBytes &&
         reinterpret_cast<std::uintptr_t>(out) % sizeof(Packet) == 0;
}

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

/// \brief Maximum of a row in one vectorised pass; NaN anywhere makes the result NaN.
/// (Utility for callers that want NaN propagation; the kernels use scan_max, which is faster.)
template <class Scalar>
[[nodiscard]] Scalar max_propagating_nan(std::span<const Scalar> values) noexcept {
  if (values.empty()) return -std::numeric_limits<Scalar>::infinity();
  return as_array(values).template maxCoeff<Eigen::PropagateNaN>();
}

/// \brief Throws std::domain_error unless `max_value` is the finite maximum of a logits row.
///
/// A +inf logit makes the max +inf, and a max of -inf means every logit is -inf (after the
/// processor and filters: no token can be sampled). NaN is reported by the callers' scans.
template <class Scalar>
void check_max_logit(Scalar max_value) {
  if (std::isfinite(max_value)) [[likely]]
    return;
  if (std::isnan(max_value)) {
    throw_domain_error(
        "logits row contains NaN (max logit = nan); expected finite logits "
        "(-inf allowed for impossible tokens)");
  }
  if (max_value > 0) {
    throw_domain_error(
        "logits row contains +inf (max logit = inf); expected finite logits "
        "(-inf allowed for impossible tokens)");
  }
  throw_domain_error(
      "every logit in the row is -inf after the logits processor and filters; "
      "expected at least one finite logit");
}

/// \brief The row check every scan ends with: throws for NaN, +inf or an all -inf row.
///
/// The scans keep a running sum of the logits next to the running max, on registers already
/// loaded (the single-pass kernels use the sum of the weights instead, see
/// exp_block_scanning_next). The fast max instruction drops NaN, but a NaN makes that sum NaN;
/// the sum can only be NaN otherwise through +inf (caught by the max anyway) or overflow of huge
/// logits mixed with -inf, so a NaN sum (`nan_probed`) or a non-finite max triggers an exact
/// scalar re-check of the whole row before anything is thrown. NaN is reported first, as if the
/// max were NaN.
template <class Scalar>
void check_row(std::span<const Scalar> values, Scalar max_value, bool nan_probed) {
  if (nan_probed || !std::isfinite(max_value)) [[unlikely]] {
    for (const Scalar value : values) {
      if (std::isnan(value)) check_max_logit(std::numeric_limits<Scalar>::quiet_NaN());
    }
  }
  check_max_logit(max_value);
}

/// Max and logit sum (the NaN probe of check_row) of one block.
template <class Scalar>
struct BlockScan {
  Scalar max = -std::numeric_limits<Scalar>::infinity();
  Scalar sum = 0;
};

/// \brief Scans one block for its max and NaN probe. Four independent accumulators of each kind
/// hide the latency; both kinds work on the same loaded registers, so this costs about one
/// plain max pass (memory bound).
template <class Scalar>
[[nodiscard]] BlockScan<Scalar> scan_block(const Scalar* data, std::size_t length) noexcept {
  constexpr Scalar neg_inf = -std::numeric_limits<Scalar>::infinity();
  BlockScan<Scalar> scan;
  std::size_t i = 0;
  if constexpr (Eigen::internal::packet_traits<Scalar>::Vectorizable &&
                (Eigen::internal::packet_traits<Scalar>::size > 1)) {
    namespace ei = Eigen::internal;
    using Packet = typename ei::packet_traits<Scalar>::type;
    constexpr auto kLanes = static_cast<std::size_t>(ei::packet_traits<Scalar>::size);
    Packet max0 = ei::pset1<Packet>(neg_inf);
    Packet max1 = max0, max2 = max0, max3 = max0;
    Packet sum0 = ei::pset1<Packet>(Scalar(0));
    Packet sum1 = sum0, sum2 = sum0, sum3 = sum0;
    for (; i + 4 * kLanes <= length; i += 4 * kLanes) {
      const Packet a = ei::ploadu<Packet>(data + i);
      const Packet b = ei::ploadu<Packet>(data + i + kLanes);
      const Packet c = ei::ploadu<Packet>(data + i + 2 * kLanes);
      const Packet d = ei::ploadu<Packet>(data + i + 3 * kLanes);
      max0 = ei::pmax(max0, a);
      max1 = ei::pmax(max1, b);
      max2 = ei::pmax(max2, c);
      max3 = ei::pmax(max3, d);
      sum0 = ei::padd(sum0, a);
      sum1 = ei::padd(sum1, b);
      sum2 = ei::padd(sum2, c);
      sum3 = ei::padd(sum3, d);
    }
    scan.max = ei::predux_max(ei::pmax(ei::pmax(max0, max1), ei::pmax(max2, max3)));
    scan.sum = ei::predux(ei::padd(ei::padd(sum0, sum1), ei::padd(sum2, sum3)));
  }
  for (; i < length; ++i) {
    scan.max = std::max(scan.max, data[i]);
    scan.sum += data[i];
  }
  return scan;
}

/// Result of scan_max: the row's maximum and the first block that attains it.
template <class Scalar>
struct RowMax {
  Scalar value;
  std::size_t first_block_offset;
};

/// \brief The max pass of rows that need the max before anything else (filtered rows, argmax),
/// with the NaN / +inf / all -inf check folded in (see check_row). Per block it also remembers
/// the first block whose max beats all earlier blocks, which lets argmax finish with a scan of
/// a single block.
/// \throws std::domain_error for NaN, +inf, or a row that is entirely -inf (or empty).
template <class Scalar>
[[nodiscard]] RowMax<Scalar> scan_max(std::span<const Scalar> values) {
  RowMax<Scalar> best{-std::numeric_limits<Scalar>::infinity(), 0};
  Scalar logit_sum = 0;
  for (std::size_t offset = 0; offset < values.size(); offset += kBlockSize) {
    const BlockScan<Scalar> scan =
        scan_block(values.data() + offset, std::min(kBlockSize, values.size() - offset));
    logit_sum += scan.sum;
    if (scan.max > best.value) best = {scan.max, offset};
  }
  check_row(values, best.value, std::isnan(logit_sum));
  return best;
}

/// \brief Calls `body(offset, length)` for consecutive blocks covering [0, size).
template <class Body>
void for_each_block(std::size_t size, Body&& body) {
  for (std::size_t offset = 0; offset < size; offset += kBlockSize) {
    body(offset, std::min(kBlockSize, size - offset));
  }
}

/// \brief Sum of one block with a fixed lane assignment (see the determinism note above).
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
      return ei::predux_max(packet_exp(minus_inf)) == Scalar(0);
    }();
    return is_zero;
  } else {
    return true;
  }
}

// ---- the exponent (x - reference) / T ------------------------------------------------------

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

/// w where x >= threshold, else 0 (the filters' mask), packet-wise; on AVX-512 one compare
/// into a mask register and a zero-masked move. Same bits either way.
template <class Packet>
EIGEN_ALWAYS_INLINE Packet keep_where_at_least(const Packet& w, const Packet& threshold,
                                               const Packet& x) {
  namespace ei = Eigen::internal;
  return ei::pand(w, ei::pcmp_le(threshold, x));
}
#if defined(__AVX512F__)
EIGEN_ALWAYS_INLINE __m512 keep_where_at_least(__m512 w, __m512 threshold, __m512 x) {
  return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x, threshold, _CMP_GE_OQ), w);
}
#endif

/// \brief One packet of weights: exp(scaled_exponent(x)), optionally flushed and masked.
///
/// Flush (kFlush, only where packet exp(-inf) is not exactly 0): `max(0, w - smallest_normal)`
/// maps every subnormal result to 0 -- a token banned with -inf must have weight exactly 0 --
/// and leaves every weight above 2^-100 (float; 2^-970 for double) bit-for-bit unchanged,
/// because smallest_normal is below half an ulp of such weights.
template <class Packet, bool kMasked, bool kFlush, class Scalar>
EIGEN_ALWAYS_INLINE Packet packet_weight(const Packet& x, const PacketExponent<Scalar>& exponent,
                                         const Packet& small_v, const Packet& zero_v,
                                         const Packet& threshold_v) {
  namespace ei = Eigen::internal;
  Packet w = packet_exp(exponent(x));
  if constexpr (kFlush) w = ei::pmax(ei::psub(w, small_v), zero_v);
  if constexpr (kMasked) w = keep_where_at_least(w, threshold_v, x);
  return w;
}

/// Scalar counterpart of packet_weight (tails, and Scalar types without packet exp).
template <class Scalar, bool kMasked>
[[nodiscard]] Scalar scalar_weight(Scalar x, Scalar reference, Scalar inv_temperature,
                                   Scalar threshold) noexcept {
  const Scalar w = std::exp(scaled_exponent(x, reference, inv_temperature));  // 0 for -inf
  if constexpr (kMasked) return x >= threshold ? w : Scalar(0);
  return w;
}

/// \brief The exp pass over one block: weight = exp((x - reference) * inv_temperature) for kept
/// tokens (x >= threshold when kMasked), 0 for the others; stores the weights when kStore;
/// returns the block's sum.
///
/// Written with Eigen's packet primitives (pexp, pcmp_le, ...) so the exp, the optional store,
/// the mask and the sum happen in one pass over registers: Eigen expressions cannot store and
/// reduce in one traversal, and Eigen 3.4's Select and comparisons are not vectorised.
template <class Scalar, bool kStore, bool kMasked, bool kFlush>
SPECDEC_KERNEL Scalar exp_block(const Scalar* logits, std::size_t length, Scalar reference,
                                Scalar inv_temperature, Scalar threshold, Scalar* out) noexcept {
  Scalar sum = 0;
  std::size_t i = 0;
  if constexpr (kHasPacketExp<Scalar>) {
    namespace ei = Eigen::internal;
    using Packet = typename ei::packet_traits<Scalar>::type;
    constexpr auto kLanes = static_cast<std::size_t>(ei::packet_traits<Scalar>::size);
    const PacketExponent<Scalar> exponent(reference, inv_temperature);
    const Packet small_v = ei::pset1<Packet>(std::numeric_limits<Scalar>::min());
    const Packet zero_v = ei::pset1<Packet>(Scalar(0));
    const Packet threshold_v = ei::pset1<Packet>(threshold);
    Packet sum0 = zero_v;
    Packet sum1 = zero_v;
    for (; i + 2 * kLanes <= length; i += 2 * kLanes) {
      const Packet w0 = packet_weight<Packet, kMasked, kFlush>(
          ei::ploadu<Packet>(logits + i), exponent, small_v, zero_v, threshold_v);
      const Packet w1 = packet_weight<Packet, kMasked, kFlush>(
          ei::ploadu<Packet>(logits + i + kLanes), exponent, small_v, zero_v, threshold_v);
      if constexpr (kStore) {
        ei::pstoreu(out + i, w0);
        ei::pstoreu(out + i + kLanes, w1);
      }
      sum0 = ei::padd(sum0, w0);
      sum1 = ei::padd(sum1, w1);
    }
    sum = ei::predux(ei::padd(sum0, sum1));
  }
  for (; i < length; ++i) {
    const Scalar w =
        scalar_weight<Scalar, kMasked>(logits[i], reference, inv_temperature, threshold);
    if constexpr (kStore) out[i] = w;
    sum += w;
  }
  return sum;
}

/// Runs exp_block with the mask / flush variant this row and target need.
template <class Scalar, bool kStore>
Scalar dispatch_exp_block(bool masked, bool flush, const Scalar* logits, std::size_t length,
                          Scalar reference, Scalar inv_temperature, Scalar threshold,
                          Scalar* out) noexcept {
  if (masked) {
    return flush ? exp_block<Scalar, kStore, true, true>(logits, length, reference, inv_temperature,
                                                         threshold, out)
                 : exp_block<Scalar, kStore, true, false>(logits, length, reference,
                                                          inv_temperature, threshold, out);
  }
  return flush ? exp_block<Scalar, kStore, false, true>(logits, length, reference, inv_temperature,
                                                        threshold, out)
               : exp_block<Scalar, kStore, false, false>(logits, length, reference, inv_temperature,
                                                         threshold, out);
}

/// \brief Sum over kept tokens (logit >= threshold) of exp((logit - reference) *
/// inv_temperature), in one pass (threshold = -inf: no filter, no mask).
template <class Scalar>
[[nodiscard]] double exp_sum(std::span<const Scalar> logits, Scalar reference,
                             Scalar inv_temperature, Scalar threshold) noexcept {
  const bool masked = threshold != -std::numeric_limits<Scalar>::infinity();
  const bool flush = !packet_exp_of_minus_inf_is_zero<Scalar>();
  double total = 0;
  for_each_block(logits.size(), [&](std::size_t offset, std::size_t length) {
    total += static_cast<double>(
        dispatch_exp_block<Scalar, false>(masked, flush, logits.data() + offset, length, reference,
                                          inv_temperature, threshold, nullptr));
  });
  return total;
}

/// \brief Stores weights[i] = exp((logit_i - reference) * inv_temperature) for kept tokens and
/// 0 for filtered ones, and (unless `block_sums` is empty) block_sums[b] = the sum of block b's
/// weights, in one pass over the row. Returns the total: the double sum of the block sums in
/// block order (what inverse_cdf recomputes from them). block_sums has block_count(V) entries.
template <class Scalar>
double store_weights(std::span<const Scalar> logits, Scalar reference, Scalar inv_temperature,
                     Scalar threshold, std::span<Scalar> weights,
                     std::span<Scalar> block_sums = {}) noexcept {
  const bool masked = threshold != -std::numeric_limits<Scalar>::infinity();
  const bool flush = !packet_exp_of_minus_inf_is_zero<Scalar>();
  double total = 0;
  for_each_block(logits.size(), [&](std::size_t offset, std::size_t length) {
    const Scalar sum =
        dispatch_exp_block<Scalar, true>(masked, flush, logits.data() + offset, length, reference,
                                         inv_temperature, threshold, weights.data() + offset);
    if (!block_sums.empty()) block_sums[offset / kBlockSize] = sum;
    total += static_cast<double>(sum);
  });
  return total;
}

// ---- single pass: online softmax by blocks ---------------------------------------------------

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
      if (running_max != neg_inf) {
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
    if (running_max == neg_inf) {
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
    if (scan.max > reference &&
        (reference == neg_inf || (static_cast<double>(scan.max) - static_cast<double>(reference)) *
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
    if (reference == neg_inf) {
      // Every logit so far is -inf: weight 0; a later rescale leaves these zeros alone.
      std::fill_n(weights.data() + offset, length, Scalar(0));
      block_sums[block] = 0;
      if (next_length > 0) next_scan = scan_block(data + next_offset, next_length);
    } else {
      Scalar* out = weights.data() + offset;
      const Scalar* next = data + next_offset;
      if (flush) {
        block_sums[block] =
            streaming ? exp_block_scanning_next<Scalar, true, true, true>(
                            data + offset, length, reference, inv_temperature, out, next,
                            next_length, next_scan)
                      : exp_block_scanning_next<Scalar, true, true>(data + offset, length,
                                                                    reference, inv_temperature,
                                                                    out, next, next_length,
                                                                    next_scan);
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
    if (block_reference != reference && block_sums[block] != Scalar(0)) [[unlikely]] {
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

// ---- top-p: masses above a ladder of logit levels -------------------------------------------

/// Levels of the top-p search's mass passes (see nucleus_cut in sampling.hpp): the exp pass
/// sums the mass above kMassLevels levels, each narrowing pass (stored weights, no exp) above
/// kRefineLevels. A level costs a compare, a mask and an add per packet, about a sixth of the
/// exp's work; 6 and 8 measured best among 3-8 and 4-12 on the benchmark rows (within noise).
inline constexpr std::size_t kMassLevels = 6;
inline constexpr std::size_t kRefineLevels = 8;

/// mass + (x >= level ? w : 0), packet-wise: the top-p level masses' inner step. On AVX-512 one
/// compare into a mask register and one masked add (Eigen's pcmp_le materialises the mask as a
/// vector first: one instruction more per level and packet). Same bits either way.
template <class Packet>
EIGEN_ALWAYS_INLINE Packet add_where_at_least(const Packet& mass, const Packet& w,
                                              const Packet& level, const Packet& x) {
  namespace ei = Eigen::internal;
  return ei::padd(mass, ei::pand(w, ei::pcmp_le(level, x)));
}
#if defined(__AVX512F__)
EIGEN_ALWAYS_INLINE __m512 add_where_at_least(__m512 mass, __m512 w, __m512 level, __m512 x) {
  return _mm512_mask_add_ps(mass, _mm512_cmp_ps_mask(x, level, _CMP_GE_OQ), mass, w);
}
#endif

/// \brief exp_block (storing) that also adds, for each level j, the mass of the block's tokens
/// with logit >= levels[j] to level_masses[j]: one pass yields the weights, Z and the mass
/// above every level.
template <class Scalar, bool kMasked, bool kFlush, std::size_t kLevels>
SPECDEC_KERNEL Scalar exp_block_with_level_masses(const Scalar* logits, std::size_t length,
                                                  Scalar reference, Scalar inv_temperature,
                                                  Scalar threshold, const Scalar (&levels)[kLevels],
                                                  Scalar* out,
                                                  double (&level_masses)[kLevels]) noexcept {
  Scalar sum = 0;
  Scalar masses[kLevels] = {};
  std::size_t i = 0;
  if constexpr (kHasPacketExp<Scalar>) {
    namespace ei = Eigen::internal;
    using Packet = typename ei::packet_traits<Scalar>::type;
    constexpr auto kLanes = static_cast<std::size_t>(ei::packet_traits<Scalar>::size);
    const PacketExponent<Scalar> exponent(reference, inv_temperature);
    const Packet small_v = ei::pset1<Packet>(std::numeric_limits<Scalar>::min());
    const Packet zero_v = ei::pset1<Packet>(Scalar(0));
    const Packet threshold_v = ei::pset1<Packet>(threshold);
    Packet sum_v = zero_v;
    Packet mass_v[kLevels];
    for (auto& m : mass_v) m = zero_v;
    for (; i + kLanes <= length; i += kLanes) {
      const Packet x = ei::ploadu<Packet>(logits + i);
      const Packet w =
          packet_weight<Packet, kMasked, kFlush>(x, exponent, small_v, zero_v, threshold_v);
      ei::pstoreu(out + i, w);
      sum_v = ei::padd(sum_v, w);
      for (std::size_t j = 0; j < kLevels; ++j) {
        mass_v[j] = add_where_at_least(mass_v[j], w, ei::pset1<Packet>(levels[j]), x);
      }
    }
    sum = ei::predux(sum_v);
    for (std::size_t j = 0; j < kLevels; ++j) masses[j] = ei::predux(mass_v[j]);
  }
  for (; i < length; ++i) {
    const Scalar w =
        scalar_weight<Scalar, kMasked>(logits[i], reference, inv_temperature, threshold);
    out[i] = w;
    sum += w;
    for (std::size_t j = 0; j < kLevels; ++j) masses[j] += logits[i] >= levels[j] ? w : Scalar(0);
  }
  for (std::size_t j = 0; j < kLevels; ++j) level_masses[j] += static_cast<double>(masses[j]);
  return sum;
}

/// \brief The mass of the tokens with logit >= levels[j], for each level, from stored weights
/// (no exp), over a whole row; blocks in order, so deterministic.
template <class Scalar, std::size_t kLevels>
void level_masses(std::span<const Scalar> logits, std::span<const Scalar> weights,
                  const Scalar (&levels)[kLevels], double (&level_masses)[kLevels]) noexcept {
  for (auto& m : level_masses) m = 0;
  for_each_block(logits.size(), [&](std::size_t offset, std::size_t length) {
    const Scalar* x_block = logits.data() + offset;
    const Scalar* w_block = weights.data() + offset;
    Scalar masses[kLevels] = {};
    std::size_t i = 0;
    if constexpr (Eigen::internal::packet_traits<Scalar>::Vectorizable &&
                  (Eigen::internal::packet_traits<Scalar>::size > 1)) {
      namespace ei = Eigen::internal;
      using Packet = typename ei::packet_traits<Scalar>::type;
      constexpr auto kLanes = static_cast<std::size_t>(ei::packet_traits<Scalar>::size);
      Packet mass_v[kLevels];
      for (auto& m : mass_v) m = ei::pset1<Packet>(Scalar(0));
      for (; i + kLanes <= length; i += kLanes) {
        const Packet x = ei::ploadu<Packet>(x_block + i);
        const Packet w = ei::ploadu<Packet>(w_block + i);
        for (std::size_t j = 0; j < kLevels; ++j) {
          mass_v[j] = add_where_at_least(mass_v[j], w, ei::pset1<Packet>(levels[j]), x);
        }
      }
      for (std::size_t j = 0; j < kLevels; ++j) masses[j] = ei::predux(mass_v[j]);
    }
    for (; i < length; ++i) {
      for (std::size_t j = 0; j < kLevels; ++j) {
        masses[j] += x_block[i] >= levels[j] ? w_block[i] : Scalar(0);
      }
    }
    for (std::size_t j = 0; j < kLevels; ++j) level_masses[j] += static_cast<double>(masses[j]);
  });
}

/// \brief Copies the tokens with lo <= logit < hi (logit and weight) to the candidate arrays
/// (V + 1 entries each), in index order. Returns their count, or capacity + 1 as soon as there
/// are more than `capacity` (the arrays then hold garbage).
///
/// Packets without a token in range are skipped after one vectorised test, so the cost is a
/// compare pass plus a scalar look at the few packets that hold candidates: it is meant for
/// sparse ranges (the top-p search narrows the range until it is sparse).
template <class Scalar>
[[nodiscard]] std::size_t gather_range(std::span<const Scalar> logits,
                                       std::span<const Scalar> weights, Scalar lo, Scalar hi,
                                       Scalar* candidate_logits, Scalar* candidate_weights,
                                       std::size_t capacity) noexcept {
  const std::size_t size = logits.size();
  std::size_t count = 0;
  // Branchless: always write, advance only past a candidate.
  auto take = [&](std::size_t i) {
    candidate_logits[count] = logits[i];
    candidate_weights[count] = weights[i];
    count += (logits[i] >= lo && logits[i] < hi) ? 1 : 0;
  };
  std::size_t i = 0;
#if defined(__AVX512F__)
  if constexpr (std::is_same_v<Scalar, float>) {
    // AVX-512: the in-range lanes of a packet compressed in a register and written with a
    // masked store (not vcompressps to memory, which is microcoded and slow on AMD), instead of
    // 16 scalar steps per packet that holds a candidate. The generic loop below then only sees
    // the tail. Same candidates, same order.
    const __m512 lo_v = _mm512_set1_ps(lo);
    const __m512 hi_v = _mm512_set1_ps(hi);
    for (; i + 16 <= size; i += 16) {
      const __m512 x = _mm512_loadu_ps(logits.data() + i);
      const __mmask16 in = static_cast<__mmask16>(_mm512_cmp_ps_mask(x, lo_v, _CMP_GE_OQ) &
                                                  _mm512_cmp_ps_mask(x, hi_v, _CMP_LT_OQ));
      if (in == 0) continue;
      const auto taken = static_cast<unsigned>(std::popcount(static_cast<unsigned>(in)));
      const auto first = static_cast<__mmask16>((1u << taken) - 1u);
      // count + taken <= the number of tokens in range <= V: in bounds.
      _mm512_mask_storeu_ps(candidate_logits + count, first, _mm512_maskz_compress_ps(in, x));
      _mm512_mask_storeu_ps(candidate_weights + count, first,
                            _mm512_maskz_compress_ps(in, _mm512_loadu_ps(weights.data() + i)));
      count += taken;
      if (count > capacity) return capacity + 1;
    }
  }
#endif
  if constexpr (Eigen::internal::packet_traits<Scalar>::Vectorizable &&
                (Eigen::internal::packet_traits<Scalar>::size > 1)) {
    namespace ei = Eigen::internal;
    using Packet = typename ei::packet_traits<Scalar>::type;
    constexpr auto kLanes = static_cast<std::size_t>(ei::packet_traits<Scalar>::size);
    const Packet lo_v = ei::pset1<Packet>(lo);
    const Packet hi_v = ei::pset1<Packet>(hi);
    for (; i + kLanes <= size; i += kLanes) {
      const Packet x = ei::ploadu<Packet>(logits.data() + i);
      if (!ei::predux_any(ei::pand(ei::pcmp_le(lo_v, x), ei::pcmp_lt(x, hi_v)))) continue;
      // Every write lands at index <= the number of tokens in range <= V: in bounds.
      for (std::size_t lane = 0; lane < kLanes; ++lane) take(i + lane);
      if (count > capacity) return capacity + 1;
    }
  }
  for (; i < size; ++i) {
    take(i);
    if (count > capacity) return capacity + 1;
  }
  return count;
}

/// \brief Zeroes the stored weights of tokens below `threshold` (no exp), records the block
/// sums, returns their double total: the last pass of a filtered draft row whose weights were
/// stored before its threshold was known.
template <class Scalar>
double mask_weights(std::span<const Scalar> logits, Scalar threshold, std::span<Scalar> weights,
                    std::span<Scalar> block_sums) noexcept {
  double total = 0;
  for_each_block(logits.size(), [&](std::size_t offset, std::size_t length) {
    const Scalar* x = logits.data() + offset;
    Scalar* w = weights.data() + offset;
    Scalar sum = 0;
    std::size_t i = 0;
    if constexpr (Eigen::internal::packet_traits<Scalar>::Vectorizable &&
                  (Eigen::internal::packet_traits<Scalar>::size > 1)) {
      namespace ei = Eigen::internal;
      using Packet = typename ei::packet_traits<Scalar>::type;
      constexpr auto kLanes = static_cast<std::size_t>(ei::packet_traits<Scalar>::size);
      const Packet threshold_v = ei::pset1<Packet>(threshold);
      Packet sum0 = ei::pset1<Packet>(Scalar(0));
      Packet sum1 = sum0;
      for (; i + 2 * kLanes <= length; i += 2 * kLanes) {
        const Packet w0 =
            keep_where_at_least(ei::ploadu<Packet>(w + i), threshold_v, ei::ploadu<Packet>(x + i));
        const Packet w1 = keep_where_at_least(ei::ploadu<Packet>(w + i + kLanes), threshold_v,
                                              ei::ploadu<Packet>(x + i + kLanes));
        ei::pstoreu(w + i, w0);
        ei::pstoreu(w + i + kLanes, w1);
        sum0 = ei::padd(sum0, w0);
        sum1 = ei::padd(sum1, w1);
      }
      sum = ei::predux(ei::padd(sum0, sum1));
    }
    for (; i < length; ++i) {
      w[i] = x[i] >= threshold ? w[i] : Scalar(0);
      sum += w[i];
    }
    if (!block_sums.empty()) block_sums[offset / kBlockSize] = sum;
    total += static_cast<double>(sum);
  });
  return total;
}

// ---- residual, sums, sampling ----------------------------------------------------------------

/// \brief residual[i] = max(0, p_weight_i * inv_p_normalizer - q_weights[i] * inv_q_normalizer)
/// over one block, p_weight as in exp_block; stores it when kStore; returns the block's sum.
/// One fused pass.
template <class Scalar, bool kMasked, bool kFlush, bool kStore>
SPECDEC_KERNEL Scalar residual_block(const Scalar* p_logits, const Scalar* q_weights,
                                     std::size_t length, Scalar p_reference,
                                     Scalar p_inv_temperature, Scalar p_threshold,
                                     Scalar inv_p_normalizer, Scalar inv_q_normalizer,
                                     Scalar* out) noexcept {
  Scalar sum = 0;
  std::size_t i = 0;
  if constexpr (kHasPacketExp<Scalar>) {
    namespace ei = Eigen::internal;
    using Packet = typename ei::packet_traits<Scalar>::type;
    constexpr auto kLanes = static_cast<std::size_t>(ei::packet_traits<Scalar>::size);
    const PacketExponent<Scalar> exponent(p_reference, p_inv_temperature);
    const Packet small_v = ei::pset1<Packet>(std::numeric_limits<Scalar>::min());
    const Packet zero_v = ei::pset1<Packet>(Scalar(0));
    const Packet threshold_v = ei::pset1<Packet>(p_threshold);
    const Packet inv_p_v = ei::pset1<Packet>(inv_p_normalizer);
    const Packet inv_q_v = ei::pset1<Packet>(inv_q_normalizer);
    auto residual = [&](std::size_t at) {
      const Packet w = packet_weight<Packet, kMasked, kFlush>(
          ei::ploadu<Packet>(p_logits + at), exponent, small_v, zero_v, threshold_v);
      const Packet q = ei::ploadu<Packet>(q_weights + at);
      const Packet r = ei::pmax(ei::psub(ei::pmul(w, inv_p_v), ei::pmul(q, inv_q_v)), zero_v);
      if constexpr (kStore) ei::pstoreu(out + at, r);
      return r;
    };
    Packet sum0 = zero_v;
    Packet sum1 = zero_v;
    for (; i + 2 * kLanes <= length; i += 2 * kLanes) {
      sum0 = ei::padd(sum0, residual(i));
      sum1 = ei::padd(sum1, residual(i + kLanes));
    }
    sum = ei::predux(ei::padd(sum0, sum1));
  }
  for (; i < length; ++i) {
    const Scalar w =
        scalar_weight<Scalar, kMasked>(p_logits[i], p_reference, p_inv_temperature, p_threshold);
    const Scalar r = std::max(w * inv_p_normalizer - q_weights[i] * inv_q_normalizer, Scalar(0));
    if constexpr (kStore) out[i] = r;
    sum += r;
  }
  return sum;
}

/// Runs residual_block with the mask / flush variant the row and target need.
template <class Scalar, bool kStore>
Scalar dispatch_residual_block(bool masked, bool flush, const Scalar* p_logits,
                               const Scalar* q_weights, std::size_t length, Scalar p_reference,
                               Scalar p_inv_temperature, Scalar p_threshold,
                               Scalar inv_p_normalizer, Scalar inv_q_normalizer,
                               Scalar* out) noexcept {
  auto run = [&](auto masked_tag, auto flush_tag) {
    return residual_block<Scalar, decltype(masked_tag)::value, decltype(flush_tag)::value, kStore>(
        p_logits, q_weights, length, p_reference, p_inv_temperature, p_threshold, inv_p_normalizer,
        inv_q_normalizer, out);
  };
  using yes = std::true_type;
  using no = std::false_type;
  if (masked) return flush ? run(yes{}, yes{}) : run(yes{}, no{});
  return flush ? run(no{}, yes{}) : run(no{}, no{});
}

/// \brief max + log(sum exp(x - max)) for a row whose finite max is already known (one pass).
/// Greedy log-probs use it as log p(argmax) = max - logsumexp_given_max(row, max).
template <class Scalar>
[[nodiscard]] Scalar logsumexp_given_max(std::span<const Scalar> logits,
                                         Scalar max_logit) noexcept {
  const double total =
      exp_sum(logits, max_logit, Scalar(1), -std::numeric_limits<Scalar>::infinity());
  return max_logit + static_cast<Scalar>(std::log(total));
}

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


/// The lowest index in block [offset, offset + kBlockSize) whose value is `max` (the block
/// attains it). Compares a packet at a time and scans only the packet that holds it: a scalar
/// loop over the block (on average half of it) was 8 % of a greedy round at V = 32000.
template <class Scalar>
[[nodiscard]] token_t first_index_of(std::span<const Scalar> values, std::size_t offset,
                                     Scalar max) noexcept {
  const std::size_t end = std::min(offset + kBlockSize, values.size());
  std::size_t i = offset;
  if constexpr (Eigen::internal::packet_traits<Scalar>::Vectorizable &&
                (Eigen::internal::packet_traits<Scalar>::size > 1)) {
    namespace ei = Eigen::internal;
    using Packet = typename ei::packet_traits<Scalar>::type;
    constexpr auto kLanes = static_cast<std::size_t>(ei::packet_traits<Scalar>::size);
    const Packet max_v = ei::pset1<Packet>(max);
    // Only rows of at least a block: a tiny row is scanned in scalar anyway, and for rows of
    // known tiny size GCC 12 would warn (-Warray-bounds) about a packet load it cannot rule out.
    while (values.size() >= kBlockSize && i + kLanes <= end &&
           !ei::predux_any(ei::pcmp_eq(ei::ploadu<Packet>(values.data() + i), max_v))) {
      i += kLanes;
    }
  }
  for (; i < end; ++i) {
    if (values[i] == max) return static_cast<token_t>(i);
  }
  return static_cast<token_t>(offset);  // unreachable
}

/// \brief Argmax (lowest index on ties) and its log-softmax at T = 1, log p = -log sum_i
/// exp(x_i - max): the greedy token and its log-prob in one pass (online_exp_sum, which also
/// remembers the first block attaining the max) plus a scalar scan of that block.
/// \throws std::domain_error on NaN, +inf, or an all -inf row.
template <class Scalar>
[[nodiscard]] std::pair<token_t, Scalar> argmax_and_log_probability(
    std::span<const Scalar> logits) {
  const OnlineSum<Scalar> row = online_exp_sum(logits, Scalar(1));
  return {first_index_of(logits, row.max_block_offset, row.reference),
          -static_cast<Scalar>(std::log(row.sum))};
}

/// \brief Argmax with the lowest index on ties: one scan_max pass (which remembers the first
/// block attaining the max) plus a scalar scan of that single block.
/// \throws std::domain_error on NaN, +inf, or an all -inf row (see scan_max).
template <class Scalar>
[[nodiscard]] std::pair<token_t, Scalar> argmax_checked(std::span<const Scalar> logits) {
  const RowMax<Scalar> best = scan_max(logits);
  return {first_index_of(logits, best.first_block_offset, best.value), best.value};
}

}  // namespace specdec::detail

#pragma once
/// \file
/// \brief The passes of the top-p (nucleus) search: the exp pass that also sums the mass above
/// a ladder of logit levels, the same masses from stored weights, the gather of a sparse logit
/// range, and the final masking of stored weights below the threshold (internal).
///
/// nucleus_cut (sampling.hpp) drives them: one exp pass, then narrowing passes without exp until
/// the boundary's bracket is small enough to gather and select exactly.

#include <bit>
#include <cstddef>
#include <limits>
#include <span>
#include <type_traits>

#include <Eigen/Core>
#if defined(__AVX512F__)
#include <immintrin.h>  // the AVX-512 overloads (Eigen omits it without vectorization)
#endif

#include "specdec/detail/kernels/exp_weights.hpp"
#include "specdec/detail/kernels/packet_exp.hpp"
#include "specdec/detail/kernels/row_blocks.hpp"
#include "specdec/detail/kernels/scaled_exponent.hpp"
#include "specdec/detail/kernels/simd_warnings.hpp"

SPECDEC_BEGIN_SIMD_KERNELS
namespace specdec::detail {

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
    count += (logits[i] >= lo && logits[i] < hi) ? std::size_t{1} : std::size_t{0};
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

}  // namespace specdec::detail
SPECDEC_END_SIMD_KERNELS

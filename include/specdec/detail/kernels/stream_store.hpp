#pragma once
/// \file
/// \brief Non-temporal (streaming) stores of packets, and the rule for when a row of weights
/// takes them (internal).
///
/// Large stored draft rows outgrow L2 anyway; a streaming store skips the read-for-ownership a
/// regular store would do first. Used by online_store_weights (online_softmax.hpp).

#include <cstddef>
#include <cstdint>

#include <Eigen/Core>
// The x86 overloads' intrinsics (Eigen omits them without vectorization). SSE2 alone needs only
// <emmintrin.h>: the whole <immintrin.h> costs a portable build ~1.4 s of parsing.
#if defined(__AVX__) || defined(__AVX512F__)
#include <immintrin.h>
#elif defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace specdec::detail {

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
EIGEN_ALWAYS_INLINE void stream_store(double* to, __m512d v) noexcept { _mm512_stream_pd(to, v); }
#endif
#if defined(__AVX__)
EIGEN_ALWAYS_INLINE void stream_store(float* to, __m256 v) noexcept { _mm256_stream_ps(to, v); }
EIGEN_ALWAYS_INLINE void stream_store(double* to, __m256d v) noexcept { _mm256_stream_pd(to, v); }
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

}  // namespace specdec::detail

#pragma once
/// \file
/// \brief Process-wide allocation counter for benchmarks (include from exactly one TU).
///
/// Replaces the global operator new family (all forms) and interposes the C allocator entry
/// points (malloc, calloc, realloc, posix_memalign, aligned_alloc, memalign) so that Eigen's
/// aligned allocations, which bypass operator new, are counted too. Everything forwards to the
/// glibc implementation (__libc_*), so no allocation is counted twice: operator new calls
/// __libc_malloc directly. Define SPECDEC_BENCH_NO_MALLOC_INTERPOSE to count operator new only
/// (e.g. on a non-glibc platform or under a sanitizer).
///
/// Read with specdec_bench::allocation_count(). Relaxed atomics: the count is exact for the
/// calling thread's own allocations when no other thread allocates concurrently (the benchmark
/// runs single-threaded).

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <new>

#include <malloc.h>
#include <stdlib.h>

namespace specdec_bench {
inline std::atomic<std::uint64_t> g_allocations{0};
inline std::uint64_t allocation_count() noexcept {
  return g_allocations.load(std::memory_order_relaxed);
}
inline void count_one() noexcept { g_allocations.fetch_add(1, std::memory_order_relaxed); }
}  // namespace specdec_bench

#if defined(__GLIBC__) && !defined(SPECDEC_BENCH_NO_MALLOC_INTERPOSE)
extern "C" {
void* __libc_malloc(std::size_t);
void* __libc_calloc(std::size_t, std::size_t);
void* __libc_realloc(void*, std::size_t);
void* __libc_memalign(std::size_t, std::size_t);
void __libc_free(void*);

void* malloc(std::size_t n) noexcept {
  specdec_bench::count_one();
  return __libc_malloc(n);
}
void* calloc(std::size_t a, std::size_t b) noexcept {
  specdec_bench::count_one();
  return __libc_calloc(a, b);
}
void* realloc(void* p, std::size_t n) noexcept {
  specdec_bench::count_one();
  return __libc_realloc(p, n);
}
void free(void* p) noexcept { __libc_free(p); }
void* memalign(std::size_t a, std::size_t n) noexcept {
  specdec_bench::count_one();
  return __libc_memalign(a, n);
}
void* aligned_alloc(std::size_t a, std::size_t n) noexcept {
  specdec_bench::count_one();
  return __libc_memalign(a, n);
}
int posix_memalign(void** out, std::size_t a, std::size_t n) noexcept {
  specdec_bench::count_one();
  void* p = __libc_memalign(a, n);
  if (p == nullptr) return 12;  // ENOMEM
  *out = p;
  return 0;
}
}
#define SPECDEC_BENCH_RAW_MALLOC(n) __libc_malloc(n)
#define SPECDEC_BENCH_RAW_ALIGNED(a, n) __libc_memalign((a), (n))
#define SPECDEC_BENCH_RAW_FREE(p) __libc_free(p)
#else
#define SPECDEC_BENCH_RAW_MALLOC(n) std::malloc(n)
#define SPECDEC_BENCH_RAW_ALIGNED(a, n) std::aligned_alloc((a), ((n) + (a)-1) / (a) * (a))
#define SPECDEC_BENCH_RAW_FREE(p) std::free(p)
#endif

namespace specdec_bench::detail {
inline void* counted_new(std::size_t n) {
  count_one();
  void* p = SPECDEC_BENCH_RAW_MALLOC(n == 0 ? 1 : n);
  if (p == nullptr) throw std::bad_alloc();
  return p;
}
inline void* counted_new_aligned(std::size_t n, std::align_val_t al) {
  count_one();
  void* p = SPECDEC_BENCH_RAW_ALIGNED(static_cast<std::size_t>(al), n == 0 ? 1 : n);
  if (p == nullptr) throw std::bad_alloc();
  return p;
}
}  // namespace specdec_bench::detail

void* operator new(std::size_t n) { return specdec_bench::detail::counted_new(n); }
void* operator new[](std::size_t n) { return specdec_bench::detail::counted_new(n); }
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  try {
    return specdec_bench::detail::counted_new(n);
  } catch (...) {
    return nullptr;
  }
}
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept {
  try {
    return specdec_bench::detail::counted_new(n);
  } catch (...) {
    return nullptr;
  }
}
void* operator new(std::size_t n, std::align_val_t al) {
  return specdec_bench::detail::counted_new_aligned(n, al);
}
void* operator new[](std::size_t n, std::align_val_t al) {
  return specdec_bench::detail::counted_new_aligned(n, al);
}
void* operator new(std::size_t n, std::align_val_t al, const std::nothrow_t&) noexcept {
  try {
    return specdec_bench::detail::counted_new_aligned(n, al);
  } catch (...) {
    return nullptr;
  }
}
void* operator new[](std::size_t n, std::align_val_t al, const std::nothrow_t&) noexcept {
  try {
    return specdec_bench::detail::counted_new_aligned(n, al);
  } catch (...) {
    return nullptr;
  }
}
void operator delete(void* p) noexcept { SPECDEC_BENCH_RAW_FREE(p); }
void operator delete[](void* p) noexcept { SPECDEC_BENCH_RAW_FREE(p); }
void operator delete(void* p, std::size_t) noexcept { SPECDEC_BENCH_RAW_FREE(p); }
void operator delete[](void* p, std::size_t) noexcept { SPECDEC_BENCH_RAW_FREE(p); }
void operator delete(void* p, std::align_val_t) noexcept { SPECDEC_BENCH_RAW_FREE(p); }
void operator delete[](void* p, std::align_val_t) noexcept { SPECDEC_BENCH_RAW_FREE(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { SPECDEC_BENCH_RAW_FREE(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept {
  SPECDEC_BENCH_RAW_FREE(p);
}
void operator delete(void* p, const std::nothrow_t&) noexcept { SPECDEC_BENCH_RAW_FREE(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { SPECDEC_BENCH_RAW_FREE(p); }

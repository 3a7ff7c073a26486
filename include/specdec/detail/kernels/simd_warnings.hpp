#pragma once
/// \file
/// \brief SPECDEC_BEGIN_SIMD_KERNELS / SPECDEC_END_SIMD_KERNELS: keep GCC's false
/// "'__Y' may be used uninitialized" warnings from its AVX-512 intrinsics out of users' builds
/// (internal).
///
/// GCC 12's intrinsics headers build the unused pass-through operand of many AVX-512 intrinsics
/// (_mm512_max_ps, _mm512_roundscale_ps, _mm512_scalef_ps, _mm512_extractf32x4_ps, ...) from
/// _mm512_undefined_ps(), a self-initialised variable. Inlined into our kernels with
/// optimisation on and AVX-512 enabled (-march=native on an AVX-512 machine), they are reported
/// as -Wmaybe-uninitialized / -Wuninitialized (GCC bug 105593): about 300 warnings in a user's
/// file that instantiates the decoders, with -isystem too. GCC looks up the diagnostic state at
/// every location of the inlining chain, so ignoring the two warnings over the kernels' own
/// source (push ... pop: nothing outside it is affected) silences exactly these.
///
/// Every kernel header with SIMD loops brackets its namespace body (never its #includes) with
/// these macros. GCC only: Clang has neither the false positives nor -Wmaybe-uninitialized, so
/// there they expand to nothing and Clang's own uninitialized checks still see the kernels.

#if defined(__GNUC__) && !defined(__clang__)
#define SPECDEC_BEGIN_SIMD_KERNELS                                                           \
  _Pragma("GCC diagnostic push") _Pragma("GCC diagnostic ignored \"-Wmaybe-uninitialized\"") \
      _Pragma("GCC diagnostic ignored \"-Wuninitialized\"")
#define SPECDEC_END_SIMD_KERNELS _Pragma("GCC diagnostic pop")
#else
#define SPECDEC_BEGIN_SIMD_KERNELS
#define SPECDEC_END_SIMD_KERNELS
#endif

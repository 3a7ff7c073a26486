// The example GPT: a KV-cached forward of tools/train/gpt.py in plain C++20 + Eigen, serving both
// roles of specdec's model contract (docs/design.md, "Model contract"):
//
//   GptModel model = GptModel::from_file("models/kjv-target.spdc");
//   std::span<const float> row  = model.draft(context);      // V logits after the whole context
//   std::span<const float> rows = model.target(context, n);  // n x V, row-major; row i follows
//                                                             // the first size - n + 1 + i tokens
//   // (operator() forwards to both, so one GptModel is a specdec::DraftModel and a TargetModel.)
//   std::span<const float> tree = model.score_tree(committed, tokens, parents);
//   // (nodes + 1) x V: row 0 follows `committed`, row 1 + i follows committed + the path from the
//   // root to node i (parents[i] < i, -1 = child of the root); every node in one forward.
//   std::span<const float> all = model.score_batch(requests);  // specdec::ScoreRequest each
//   // the rows of many sequences, request by request, in ONE forward; each sequence attends to
//   // its own KV cache, kept by request id until release(id) (draft_batch: one row
//   // each). specdec::BatchedDecoder drives it (specdec/batch/).
//
// Architecture (must match gpt.py exactly): x = wte[token] + wpe[position]; per layer
// x += proj(attention(LN1(x))); x += fc2(gelu_tanh(fc1(LN2(x)))); logits = LN_f(x) @ wte^T.
//
// Numerics contract: the logits of a position are a pure function of the tokens up to it,
// computed bitwise identically however the calls are split. A position is computed the same way
// whether it is the only new row, one of n target rows, or part of a prompt chunk, because
//   * every dot product (weights and attention scores) goes through one kernel, `linear_rows`,
//     whose summation order is fixed: 16 lane accumulators over the input dimension, reduced by
//     the same packet instructions every time. It batches the inputs only to read each weight
//     row once for all of them (GEMV memory traffic for n rows), never to change the order of a
//     sum. (Eigen's GEMM blocks differently for different n, so it is not used.)
//   * attention, layer norm and GELU run row by row with the same code for every row; packet
//     functions pad their tail instead of switching to scalar code.
// So cached == full forward, row i of target(context, n) == draft(first size-n+1+i tokens), and
// a sequence's rows in a batched call (its positions stacked with other sequences' in each
// product) == its rows alone: no row's arithmetic depends on the other rows of a call.
// A tree node is one more such position: its keys and queries come from the same kernel, and its
// attention gathers the scores of the committed positions and of its ancestors into position
// order before the same softmax and the same weighted sum over the value rows, in that order.
// So row 1 + i of score_tree(committed, tokens, parents) == draft(committed + path to node i).
// (Bitwise equality holds within one binary; another compiler or -march may round differently.)
//
// Speed: an n-row call reads every weight from memory once: into one register tile shaped for n
// (n <= 9); for n <= 18 two such groups take turns on each block of 24 rows while it is in L2;
// beyond, small tiles of rows that every group of <= 6 inputs passes over while the tile is in
// L1. Weights are prefetched ahead into L2, inputs too wide to stay in L1 are taken a 384-wide
// slice at a time, and every operand the tile reuses is pinned to a register, so DRAM streams
// while the FMAs of extra rows run: T(n) / T(1) stays low until the arithmetic of n rows
// outlasts one pass over the weights.
//
// Memory: weights are float32 in [out][in] row-major layout (converted from fp16 at load). All run
// buffers are allocated in the constructor, for trees of up to max_tree_nodes nodes (a
// constructor argument): the K/V buffers hold max_context + max_tree_nodes rows, because a tree's
// nodes take one row each after the committed context. A call allocates nothing.
//
// Threads (set_threads, default 1): a call's matrix products are split across a persistent pool
// of threads (phase_pool.hpp) by OUTPUT: ranges of weight rows (features, vocabulary rows of the
// LM head) and groups of attention heads (a head's q, k, v rows and its whole attention). Every
// output value is computed by one thread with the same kernel call shape as above (a range of
// weight rows through linear_rows: the tiles never mix outputs), and no sum is ever split, so the
// logits are bitwise the same for any thread count. The serial pieces between the products
// (layer norms, embeddings) run on one thread, once per phase boundary.
#pragma once

// GCC 12 with AVX-512 enabled reports "'__Y' may be used uninitialized" inside its own
// avx512fintrin.h wherever Eigen's packet math (pexp, ptanh, pmax) is inlined into other code
// (GCC bug 105593, a false positive). Silenced for this header and, when it is the first to
// include Eigen, for Eigen's functions too (at -O2 GCC keeps ptanh out of line, and the state
// at its definition decides), so -Werror builds of the demo and benchmarks compile with
// -march=native at any optimisation level.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include "phase_pool.hpp"
#include "specdec/batch/draft.hpp"
#include "specdec/batch/target.hpp"
#include "specdec/context_cache.hpp"
#include "specdec/detail/error.hpp"
#include "specdec/types.hpp"
#include "weights.hpp"

namespace specdec::examples {

namespace detail {

// ----------------------------------------------------------------------------
// The dot-product kernel (Eigen packet ops: AVX-512, AVX, SSE, NEON, ... or scalar)

using Packet = Eigen::internal::packet_traits<float>::type;
inline constexpr std::size_t kPacketSize = Eigen::internal::packet_traits<float>::size;
// Every dot product accumulates into kLanes partial sums (element i goes to lane i % kLanes) that
// are then reduced by one fixed sequence of packet adds. The order depends on the length only,
// never on the number of inputs or on the tile a product is computed in.
inline constexpr std::size_t kLanes = 16;
static_assert(kLanes % kPacketSize == 0, "specdec: packet size must divide the 16 dot lanes");
inline constexpr std::size_t kPacketsPerLanes = kLanes / kPacketSize;
// Register tiles: a tile accumulates R weight rows x I inputs at once (one load of a weight packet
// feeds I FMAs, one input packet feeds R). The shape never affects results (every output has
// its own accumulators and the same reduction), only speed:
//  * 32 registers, one packet per 16 lanes (AVX-512): all n <= 9 inputs go in ONE tile, shaped to
//    the register file (R x I accumulators + the resident side's packets + 1 streamed <= 32;
//    3 x 9 for n = 9), so every weight is loaded exactly once per call, from wherever it is.
//    n = 10..18: two balanced groups, each in one such tile, take turns on each block of 24
//    weight rows (linear_blocked): the block comes from memory for the first group and from L2
//    for the second. Larger n (prompt chunks): balanced groups of <= 6 inputs, every group on a
//    tile of 4 weight rows before the next tile (linear_grouped). Measured in
//    docs/benchmarks.md, "Batched target calls".
//  * otherwise (SSE / AVX2 / NEON, 16 registers): 8 / packets-per-16-lanes rows x 1 input.
inline constexpr bool kWideRegisterFile =
    EIGEN_ARCH_DEFAULT_NUMBER_OF_REGISTERS >= 32 && kPacketsPerLanes == 1;
inline constexpr std::size_t kSmallFileTileRows = kPacketsPerLanes >= 8 ? 1 : 8 / kPacketsPerLanes;
// Software prefetch distance: while a tile computes, one cache line per step of a tile this many
// bytes of weights further on is requested into L2, so DRAM streams during the FMAs instead of
// after them (measured against 32 KB into L1: a one-row call 30 % faster).
inline constexpr std::size_t kPrefetchBytes = 64 * 1024;
inline constexpr std::size_t kOneTileInputs = 9;  // n <= 9: one tile, one pass over the weights
inline constexpr std::size_t kGroupInputs = 6;    // n > 18: groups of <= 6 inputs, balanced,
inline constexpr std::size_t kGroupTileRows = 4;  // all of them on each 4-row tile in turn
// n <= 18 (linear_blocked): one or two groups of <= 9 inputs take turns on blocks of
// kSliceBlockRows weight rows; inputs larger than kInputBytesInL1 are taken kSliceFloats
// elements at a time (sliced()).
inline constexpr std::size_t kInputBytesInL1 = 24 * 1024;
inline constexpr std::size_t kSliceFloats = 384;
inline constexpr std::size_t kSliceBlockRows = 24;
inline constexpr std::size_t kBlockedGroups = 2;  // n <= 18: linear_blocked, more: linear_grouped

using ConstRowsRef = Eigen::Ref<const RowMajorMatrixXf, 0, Eigen::OuterStride<>>;
using RowsRef = Eigen::Ref<RowMajorMatrixXf, 0, Eigen::OuterStride<>>;

/// Lanes i % kLanes of the partial sums -> one float, always by the same instructions.
inline float reduce_lanes(const Packet (&lanes)[kPacketsPerLanes]) noexcept {
  Packet sum = lanes[0];
  for (std::size_t p = 1; p < kPacketsPerLanes; ++p) sum = Eigen::internal::padd(sum, lanes[p]);
  return Eigen::internal::predux(sum);
}

#if defined(__AVX512F__)
inline constexpr bool kHasTransposedReduce = kPacketSize == 16;
/// \brief Reduces 16 accumulators at once: lane k of the result = predux(acc[k]), bit for bit.
///
/// predux of one AVX-512 packet is a fixed tree, y_i = x_i + x_{i+8}, z_i = y_i + y_{i+4},
/// (z_0 + z_2) + (z_1 + z_3); reducing outputs one by one costs ~10 dependent shuffles and adds
/// each, which at n >= 2 rows was a quarter of the forward. This network performs the same tree
/// on 16 accumulators together (4 + 2 + 1 + 1 shuffle/add levels over whole registers), so every
/// output is rounded exactly as predux would round it, whatever tile it is computed in (pad
/// unused accumulators with zeros: lanes never mix).
inline __m512 reduce_16(const __m512 (&acc)[16]) noexcept {
  // Level 1: halves. pair p holds [acc 2p: x_i + x_{i+8} (8 lanes) | acc 2p+1: same].
  __m512 half[8];
  for (int p = 0; p < 8; ++p) {
    // low = a.q0 a.q1 b.q0 b.q1, high = a.q2 a.q3 b.q2 b.q3 (q = 128-bit quarter)
    const __m512 low = _mm512_shuffle_f32x4(acc[2 * p], acc[2 * p + 1], 0x44);
    const __m512 high = _mm512_shuffle_f32x4(acc[2 * p], acc[2 * p + 1], 0xEE);
    half[p] = _mm512_add_ps(low, high);
  }
  // Level 2: quarters. quad q holds 4 accumulators' z_0..z_3, one 128-bit quarter each.
  __m512 quad[4];
  for (int q = 0; q < 4; ++q) {
    const __m512 even = _mm512_shuffle_f32x4(half[2 * q], half[2 * q + 1], 0x88);  // q0 q2 | q0 q2
    const __m512 odd = _mm512_shuffle_f32x4(half[2 * q], half[2 * q + 1], 0xDD);   // q1 q3 | q1 q3
    quad[q] = _mm512_add_ps(even, odd);
  }
  // Levels 3 and 4 inside each 128-bit quarter: (z0 + z2) then + (z1 + z3), as predux does.
  // In quarter c of quad[q] sits accumulator 4q + c.
  const __m512 s01 = _mm512_add_ps(_mm512_unpacklo_ps(quad[0], quad[1]),
                                   _mm512_unpackhi_ps(quad[0], quad[1]));  // a02 b02 a13 b13
  const __m512 s23 = _mm512_add_ps(_mm512_unpacklo_ps(quad[2], quad[3]),
                                   _mm512_unpackhi_ps(quad[2], quad[3]));  // c02 d02 c13 d13
  const __m512 lo = _mm512_castpd_ps(
      _mm512_unpacklo_pd(_mm512_castps_pd(s01), _mm512_castps_pd(s23)));  // a02 b02 c02 d02
  const __m512 hi = _mm512_castpd_ps(
      _mm512_unpackhi_pd(_mm512_castps_pd(s01), _mm512_castps_pd(s23)));  // a13 b13 c13 d13
  // Quarter c now holds accumulators (c, 4 + c, 8 + c, 12 + c); put them in order 0..15.
  const __m512 sums = _mm512_add_ps(lo, hi);
  const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  return _mm512_permutexvar_ps(order, sums);
}
#else
inline constexpr bool kHasTransposedReduce = false;
#endif

/// One tile of linear_rows: kRows consecutive weight rows against kInputs consecutive inputs.
struct LinearTile {
  const float* weight;  // (kRows, length), row stride weight_stride
  std::size_t weight_stride;
  const float* input;  // (kInputs, length), row stride input_stride
  std::size_t input_stride;
  std::size_t length;  // in_features
  const float* bias;   // (kRows) or nullptr
  float* out;          // (kInputs, kRows), row stride out_stride
  std::size_t out_stride;
  const float* prefetch;  // weights further on, to pull into L2 meanwhile (or nullptr): kRows
  std::size_t prefetch_stride = 0;  // rows prefetch_stride apart (aim_prefetch sets both)
  // A tile may cover a slice [begin, end) of the input dimension (a multiple of kLanes apart):
  // it then resumes its lane sums from `partial` (begin > 0) and leaves them there (end <
  // length) instead of starting from zero and reducing them. The lanes hold exactly what one
  // pass over the whole row would hold at that point, so slicing changes no result.
  std::size_t begin = 0;
  std::size_t end = std::numeric_limits<std::size_t>::max();  // past length: the whole row
  float* partial = nullptr;  // kRows x kInputs x kLanes lane sums between slices
};

// Lambdas of the tile code are force-inlined: in a large translation unit GCC's inlining budget
// ran out and left them as calls, which put the accumulators in memory (see static_for).
#if defined(__GNUC__) || defined(__clang__)
#define SPECDEC_GPT_FORCE_INLINE __attribute__((always_inline))
#else
#define SPECDEC_GPT_FORCE_INLINE
#endif

/// Calls f(std::integral_constant<std::size_t, i>{}) for i = 0 .. N-1, unrolled. The tile code
/// indexes its accumulators only through such compile-time indices: one runtime index anywhere
/// (e.g. a loop the compiler declines to unroll) forces the whole accumulator array into memory,
/// which measured 1.5-2x slower for tiles of more than 16 accumulators.
template <std::size_t N, class F>
EIGEN_ALWAYS_INLINE void static_for(F&& f) {
  [&]<std::size_t... i>(std::index_sequence<i...>) SPECDEC_GPT_FORCE_INLINE {
    (f(std::integral_constant<std::size_t, i>{}), ...);
  }
  (std::make_index_sequence<N>{});
}

/// Makes the compiler treat `packet` as computed here, in a register: every FMA that uses it then
/// reads that register instead of reloading it from memory. Without it GCC folds the load into
/// each FMA (a memory operand), so a packet that feeds R FMAs is loaded R times: 3 x 9 tiles ran
/// 28 vector loads per 27 FMAs instead of 12, and with every load slot busy the tile could no
/// longer overlap its arithmetic with the weights arriving from DRAM (docs/history.md,
/// "Registers pinned, wide inputs in slices"). Emits no instruction and changes no result.
EIGEN_ALWAYS_INLINE void pin_to_register(Packet& packet) noexcept {
#if (defined(__GNUC__) || defined(__clang__)) && (defined(__x86_64__) || defined(__i386__))
  asm("" : "+v"(packet));
#elif (defined(__GNUC__) || defined(__clang__)) && defined(__aarch64__)
  asm("" : "+w"(packet));
#else
  (void)packet;
#endif
}

/// out(j, r) = bias[r] + dot(weight row r, input row j) for a kRows x kInputs tile.
template <std::size_t kRows, std::size_t kInputs>
inline void linear_tile(const LinearTile& t) noexcept {
  using Eigen::internal::ploadu;
  using Eigen::internal::pmadd;
  Packet acc[kRows][kInputs][kPacketsPerLanes];
  const auto partial_at = [&](std::size_t r, std::size_t j, std::size_t p) {
    return t.partial + ((r * kInputs + j) * kPacketsPerLanes + p) * kPacketSize;
  };
  const bool resume = t.begin > 0;
  static_for<kRows>([&](auto r) SPECDEC_GPT_FORCE_INLINE {
    static_for<kInputs>([&](auto j) SPECDEC_GPT_FORCE_INLINE {
      static_for<kPacketsPerLanes>([&](auto p) SPECDEC_GPT_FORCE_INLINE {
        acc[r][j][p] =
            resume ? ploadu<Packet>(partial_at(r, j, p)) : Eigen::internal::pset1<Packet>(0.0f);
      });
    });
  });

  // HOT SPOT: the forward spends most of its time in this loop. At n = 1 it streams the weights
  // (memory bound: ~43 MB per token for the target); at larger n the FMAs take over.
  const std::size_t body = t.length - t.length % kLanes;
  const std::size_t stop = std::min(t.end, body);
  for (std::size_t i = t.begin; i < stop; i += kLanes) {
    if (t.prefetch != nullptr) {
      // One cache line of each of the next tile's rows per step: the loads of the next weights
      // are in flight while these FMAs run (the hardware prefetcher alone waits for misses).
      // Unrolled and unconditional: with a runtime loop over the rows here (or a test per
      // row), a one-row call, whose step is only 8 FMAs, ran 15 % slower.
      static_for<kRows>([&](auto r) SPECDEC_GPT_FORCE_INLINE {
#if defined(__GNUC__) || defined(__clang__)
        // Locality 2 (prefetcht1): into L2, not L1. L2 tracks more misses in flight than L1,
        // so the stream runs faster (measured: a one-row call 30 % faster than with
        // prefetcht0), and L2 is close enough for the tile's loads.
        __builtin_prefetch(t.prefetch + r * t.prefetch_stride + i, 0, 2);
#endif
      });
    }
    static_for<kPacketsPerLanes>([&](auto p) SPECDEC_GPT_FORCE_INLINE {
      const std::size_t at = i + p * kPacketSize;
      // The I input packets stay in registers for the step and the weights stream through one,
      // unless R x I accumulators + I + 1 would not fit 32 registers (3 x 8, 3 x 9): then the R
      // weight packets stay and the inputs stream (R x I + R + 1). Every accumulator still
      // takes the same single FMA per step: the order does not change any result. (Weights
      // resident for 5 x 5 and 4 x 6 too measured 5 % slower.)
      if constexpr (kRows * kInputs + kInputs + 1 > 32) {
        Packet w[kRows];
        static_for<kRows>([&](auto r) SPECDEC_GPT_FORCE_INLINE {
          w[r] = ploadu<Packet>(t.weight + r * t.weight_stride + at);
          pin_to_register(w[r]);
        });
        static_for<kInputs>([&](auto j) SPECDEC_GPT_FORCE_INLINE {
          Packet x = ploadu<Packet>(t.input + j * t.input_stride + at);
          pin_to_register(x);
          static_for<kRows>([&](auto r) SPECDEC_GPT_FORCE_INLINE {
            acc[r][j][p] = pmadd(w[r], x, acc[r][j][p]);
          });
        });
      } else {
        Packet x[kInputs];
        static_for<kInputs>([&](auto j) SPECDEC_GPT_FORCE_INLINE {
          x[j] = ploadu<Packet>(t.input + j * t.input_stride + at);
          pin_to_register(x[j]);
        });
        static_for<kRows>([&](auto r) SPECDEC_GPT_FORCE_INLINE {
          Packet w = ploadu<Packet>(t.weight + r * t.weight_stride + at);
          pin_to_register(w);
          static_for<kInputs>([&](auto j) SPECDEC_GPT_FORCE_INLINE {
            acc[r][j][p] = pmadd(w, x[j], acc[r][j][p]);
          });
        });
      }
    });
  }

  if (t.end < t.length) {  // a slice: keep the lane sums for the next one
    static_for<kRows>([&](auto r) SPECDEC_GPT_FORCE_INLINE {
      static_for<kInputs>([&](auto j) SPECDEC_GPT_FORCE_INLINE {
        static_for<kPacketsPerLanes>([&](auto p) SPECDEC_GPT_FORCE_INLINE {
          Eigen::internal::pstoreu(partial_at(r, j, p), acc[r][j][p]);
        });
      });
    });
    return;
  }

  if (body < t.length) {  // length not a multiple of 16: one more zero-padded step, same lanes
    static_for<kRows>([&](auto r) SPECDEC_GPT_FORCE_INLINE {
      static_for<kInputs>([&](auto j) SPECDEC_GPT_FORCE_INLINE {
        // Element by element, not std::copy: a memcpy call here clobbers every vector register,
        // and GCC then kept the accumulators of the main loop above in memory (2x slower).
        float w_tail[kLanes];
        float x_tail[kLanes];
        const float* w_row = t.weight + r * t.weight_stride + body;
        const float* x_row = t.input + j * t.input_stride + body;
        const std::size_t tail = t.length - body;
        for (std::size_t k = 0; k < kLanes; ++k) {
          w_tail[k] = k < tail ? w_row[k] : 0.0f;
          x_tail[k] = k < tail ? x_row[k] : 0.0f;
        }
        static_for<kPacketsPerLanes>([&](auto p) SPECDEC_GPT_FORCE_INLINE {
          acc[r][j][p] = pmadd(ploadu<Packet>(w_tail + p * kPacketSize),
                               ploadu<Packet>(x_tail + p * kPacketSize), acc[r][j][p]);
        });
      });
    });
  }

  const auto store = [&](std::size_t r, std::size_t j, float dot) {
    t.out[j * t.out_stride + r] = t.bias != nullptr ? dot + t.bias[r] : dot;
  };
#if defined(__AVX512F__)
  if constexpr (kHasTransposedReduce) {  // every tile, even 1 x 1: one rounding tree everywhere
    constexpr std::size_t kOutputs = kRows * kInputs;
    static_for<(kOutputs + 15) / 16>([&](auto group) SPECDEC_GPT_FORCE_INLINE {
      constexpr std::size_t kFirst = decltype(group)::value * 16;
      __m512 lanes[16];
      static_for<16>([&](auto k) SPECDEC_GPT_FORCE_INLINE {
        constexpr std::size_t kIndex = kFirst + decltype(k)::value;
        if constexpr (kIndex < kOutputs) {
          lanes[k] = acc[kIndex / kInputs][kIndex % kInputs][0];
        } else {
          lanes[k] = _mm512_setzero_ps();
        }
      });
      alignas(64) float sums[16];
      _mm512_store_ps(sums, reduce_16(lanes));
      static_for<16>([&](auto k) SPECDEC_GPT_FORCE_INLINE {
        constexpr std::size_t kIndex = kFirst + decltype(k)::value;
        if constexpr (kIndex < kOutputs) store(kIndex / kInputs, kIndex % kInputs, sums[k]);
      });
    });
    return;
  }
#endif
  static_for<kRows>([&](auto r) SPECDEC_GPT_FORCE_INLINE {
    static_for<kInputs>([&](auto j)
                            SPECDEC_GPT_FORCE_INLINE { store(r, j, reduce_lanes(acc[r][j])); });
  });
}

/// Runs linear_tile<rows, inputs> for runtime rows <= kRows, inputs <= kInputs (edge tiles).
template <std::size_t kRows, std::size_t kInputs>
inline void linear_tile_dispatch(std::size_t rows, std::size_t inputs,
                                 const LinearTile& t) noexcept {
  if constexpr (kRows > 1) {
    if (rows < kRows) return linear_tile_dispatch<kRows - 1, kInputs>(rows, inputs, t);
  }
  if constexpr (kInputs > 1) {
    if (inputs < kInputs) return linear_tile_dispatch<kRows, kInputs - 1>(rows, inputs, t);
  }
  linear_tile<kRows, kInputs>(t);
}

/// Whether a pass over rows `length` floats long, for `inputs` inputs, goes slice by slice
/// (linear_blocked): when the inputs would not stay in L1 between tiles. fc2's 1536-wide rows for
/// 9 inputs are 54 KB of inputs, more than L1 holds beside the weights streaming through it, so
/// every tile would read them again from L2.
constexpr bool sliced(std::size_t inputs, std::size_t length) noexcept {
  return length > kSliceFloats && inputs * length * sizeof(float) > kInputBytesInL1;
}

/// Weight rows whole tiles ahead of row o that a tile at row o prefetches: >= kPrefetchBytes.
template <std::size_t kRows>
constexpr std::size_t prefetch_rows(std::size_t row_floats) noexcept {
  const std::size_t row_bytes = row_floats * sizeof(float);
  return ((kPrefetchBytes / row_bytes + kRows - 1) / kRows) * kRows + kRows;
}

/// Points tile.prefetch at the kRows rows a tile at row o requests: rows o + ahead + g,
/// + groups, + 2 groups, ... (g = 0, groups = 1: the kRows rows `ahead` rows on), or at nothing
/// when prefetching is off or they would pass the end of the matrix.
template <std::size_t kRows>
inline void aim_prefetch(LinearTile& tile, const float* weight, std::size_t o, std::size_t ahead,
                         std::size_t g, std::size_t groups, std::size_t out_features,
                         bool prefetch) noexcept {
  const std::size_t first_row = o + ahead + g;
  const std::size_t last_row = first_row + (kRows - 1) * groups;
  tile.prefetch =
      prefetch && last_row < out_features ? weight + first_row * tile.weight_stride : nullptr;
  tile.prefetch_stride = groups * tile.weight_stride;
}

/// Tiles of kRows rows over weight rows [first, last) against `inputs` (<= kInputs) inputs from
/// tile.input, on the slice [tile.begin, tile.end) of the input dimension; tile.weight / bias /
/// out point at row 0 of the matrix. With `partial`, tile k of the range keeps its lane sums at
/// partial + k * kRows * kInputs * kLanes between slices. Each tile requests the rows `ahead`
/// rows on (aim_prefetch, group g of `groups`).
template <std::size_t kRows, std::size_t kInputs>
inline void linear_range(std::size_t first, std::size_t last, std::size_t out_features,
                         std::size_t inputs, LinearTile tile, float* partial, std::size_t ahead,
                         std::size_t g, std::size_t groups, bool prefetch) noexcept {
  const float* weight = tile.weight;
  const float* bias = tile.bias;
  float* out = tile.out;
  std::size_t k = 0;
  for (std::size_t o = first; o < last; o += kRows, ++k) {
    tile.weight = weight + o * tile.weight_stride;
    tile.bias = bias != nullptr ? bias + o : nullptr;
    tile.out = out + o;
    tile.partial = partial != nullptr ? partial + k * kRows * kInputs * kLanes : nullptr;
    aim_prefetch<kRows>(tile, weight, o, ahead, g, groups, out_features, prefetch);
    linear_tile_dispatch<kRows, kInputs>(std::min(kRows, last - o), inputs, tile);
  }
}

/// linear_range for 1..kOneTileInputs inputs in one tile, in the shape measured best for that
/// many (bench/gpt_forward_bench, and A/B runs of candidate shapes in one process). `ahead` 0:
/// the whole tiles >= kPrefetchBytes ahead (prefetch_rows).
inline void linear_range_shaped(std::size_t first, std::size_t last, std::size_t out_features,
                                std::size_t inputs, const LinearTile& tile, float* partial,
                                std::size_t ahead, std::size_t g, std::size_t groups,
                                bool prefetch) noexcept {
  const auto run = [&]<std::size_t kRows, std::size_t kInputs>() {
    const std::size_t rows_ahead = ahead != 0 ? ahead : prefetch_rows<kRows>(tile.weight_stride);
    linear_range<kRows, kInputs>(first, last, out_features, inputs, tile, partial, rows_ahead, g,
                                 groups, prefetch);
  };
  switch (inputs) {
    case 1:
      run.template operator()<8, 1>();
      break;
    case 2:
      run.template operator()<8, 2>();
      break;
    case 3:
      run.template operator()<8, 3>();
      break;
    case 4:
      run.template operator()<6, 4>();
      break;
    case 5:
      run.template operator()<5, 5>();
      break;
    case 6:
      run.template operator()<4, 6>();
      break;
    case 7:
      run.template operator()<3, 7>();
      break;
    case 8:
      run.template operator()<3, 8>();
      break;
    default:
      run.template operator()<3, 9>();
      break;
  }
}

/// n <= kBlockedGroups * kOneTileInputs inputs: balanced groups of <= kOneTileInputs, each in
/// one register tile. One group over inputs that fit L1 is a single pass over the matrix. Else
/// the rows go in blocks of kSliceBlockRows, and in each block every group runs its tiles in
/// turn, on one slice of the inputs at a time when they would not stay in L1 (sliced()): the
/// block comes from DRAM (prefetched into L2 while the block before it computes) once, and from
/// L2 for the other groups and slices, while each group's inputs stay in L1 across the block.
inline void linear_blocked(std::size_t out_features, std::size_t n, const LinearTile& tile,
                           bool prefetch) noexcept {
  const std::size_t groups = (n + kOneTileInputs - 1) / kOneTileInputs;
  const std::size_t largest = (n + groups - 1) / groups;  // groups balanced: 10 = 5 + 5, not 9 + 1
  const bool slice = sliced(largest, tile.length);
  if (groups == 1 && !slice) {
    linear_range_shaped(0, out_features, out_features, n, tile, nullptr, 0, 0, 1, prefetch);
    return;
  }
  // Lane sums of every tile of a block, per group, between slices. The most any shape of
  // linear_range_shaped needs: 8 tiles of 3 x 9 (5 x 5: 5 tiles of 25; 4 x 6: 6 of 24).
  constexpr std::size_t kBlockLaneSums = kSliceBlockRows / 3 * 3 * kOneTileInputs * kLanes;
  alignas(64) float partial[kBlockedGroups][kBlockLaneSums];
  const std::size_t slice_floats = slice ? kSliceFloats : tile.length;
  // The next block, or as many whole blocks ahead as reach kPrefetchBytes.
  const std::size_t row_bytes = tile.weight_stride * sizeof(float);
  const std::size_t ahead =
      slice ? kSliceBlockRows
            : std::max<std::size_t>(
                  1, (kPrefetchBytes / row_bytes + kSliceBlockRows - 1) / kSliceBlockRows) *
                  kSliceBlockRows;
  for (std::size_t block = 0; block < out_features; block += kSliceBlockRows) {
    const std::size_t last = std::min(block + kSliceBlockRows, out_features);
    for (std::size_t begin = 0; begin < tile.length; begin += slice_floats) {
      LinearTile part = tile;
      part.begin = begin;
      part.end = std::min(begin + slice_floats, tile.length);
      std::size_t j = 0;
      for (std::size_t g = 0; g < groups; ++g) {
        const std::size_t size = n / groups + (g < n % groups ? 1 : 0);
        part.input = tile.input + j * tile.input_stride;
        part.out = tile.out + j * tile.out_stride;
        linear_range_shaped(block, last, out_features, size, part, slice ? partial[g] : nullptr,
                            ahead, g, groups, prefetch);
        j += size;
      }
    }
  }
}

/// n > kBlockedGroups * kOneTileInputs inputs (prompt chunks): balanced groups of <= kGroupInputs
/// inputs run one after another on each kGroupTileRows-row tile of weights, so the tile comes
/// from memory (L2, prefetched) once and from L1 for the other groups. Every group requests rows
/// ahead, interleaved (group g of G: rows g, g + G, ...), so the stream from DRAM is spread over
/// all the groups' arithmetic instead of issued in bursts by the first (each line is requested
/// up to G times; repeats hit L2).
inline void linear_grouped(std::size_t out_features, std::size_t n, const LinearTile& tile,
                           bool prefetch) noexcept {
  const std::size_t groups = (n + kGroupInputs - 1) / kGroupInputs;
  const std::size_t ahead = prefetch_rows<kGroupTileRows>(tile.weight_stride);
  for (std::size_t o = 0; o < out_features; o += kGroupTileRows) {
    const std::size_t rows = std::min(kGroupTileRows, out_features - o);
    LinearTile part = tile;
    part.weight = tile.weight + o * tile.weight_stride;
    part.bias = tile.bias != nullptr ? tile.bias + o : nullptr;
    std::size_t j = 0;
    for (std::size_t g = 0; g < groups; ++g) {
      const std::size_t size = n / groups + (g < n % groups ? 1 : 0);
      part.input = tile.input + j * tile.input_stride;
      part.out = tile.out + j * tile.out_stride + o;
      aim_prefetch<kGroupTileRows>(part, tile.weight, o, ahead, g, groups, out_features, prefetch);
      linear_tile_dispatch<kGroupTileRows, kGroupInputs>(rows, size, part);
      j += size;
    }
  }
}

/// \brief output(j, o) = bias[o] + dot(weight.row(o), input.row(j)) for all j < input.rows().
///
/// weight: (out_features, in_features), input: (n, in_features), output: (n, out_features); bias
/// has out_features entries or is nullptr. Each weight row is loaded from memory once for all n
/// inputs (see the tile notes above), and every output is summed in the same order whatever n
/// is (see kLanes).
inline void linear_rows(ConstRowsRef weight, const float* bias, ConstRowsRef input,
                        RowsRef output) {
  eigen_assert(weight.cols() == input.cols() && output.rows() == input.rows() &&
               output.cols() == weight.rows());
  const auto out_features = static_cast<std::size_t>(weight.rows());
  const auto n = static_cast<std::size_t>(input.rows());
  LinearTile tile{.weight = weight.data(),
                  .weight_stride = static_cast<std::size_t>(weight.outerStride()),
                  .input = nullptr,
                  .input_stride = static_cast<std::size_t>(input.outerStride()),
                  .length = static_cast<std::size_t>(weight.cols()),
                  .bias = bias,
                  .out = nullptr,
                  .out_stride = static_cast<std::size_t>(output.outerStride()),
                  .prefetch = nullptr};
  // Prefetch only real weight matrices (attention calls this with a few keys as "weights").
  const bool prefetch = out_features * tile.length * sizeof(float) > 4 * kPrefetchBytes;
  if constexpr (kWideRegisterFile) {
    // Up to kOneTileInputs inputs: one tile holds them all, so each weight is loaded once. More:
    // groups of inputs take turns on each block (linear_blocked) or small tile (linear_grouped)
    // of weight rows, which comes from memory for the first group and from L2 or L1 for the
    // others, so the weights still cross the memory bus once per call. The summation order of
    // every output is unchanged.
    tile.input = input.data();
    tile.out = output.data();
    if (n <= kBlockedGroups * kOneTileInputs) {
      linear_blocked(out_features, n, tile, prefetch);
    } else {
      linear_grouped(out_features, n, tile, prefetch);
    }
  } else {
    std::size_t group = 0;
    for (std::size_t j = 0; j < n; j += group) {
      group = n - j <= 9 ? n - j : 8;
      tile.input = input.data() + j * tile.input_stride;
      tile.out = output.data() + j * tile.out_stride;
      // 16 registers: one input per tile; each weight tile stays in L1 across the inputs.
      const std::size_t rows_per_tile = kSmallFileTileRows;
      for (std::size_t o = 0; o < out_features; o += rows_per_tile) {
        LinearTile one = tile;
        one.weight = weight.data() + o * tile.weight_stride;
        one.bias = bias != nullptr ? bias + o : nullptr;
        const std::size_t rows = std::min(rows_per_tile, out_features - o);
        for (std::size_t k = 0; k < group; ++k) {
          one.input = tile.input + k * tile.input_stride;
          one.out = tile.out + k * tile.out_stride + o;
          linear_tile_dispatch<kSmallFileTileRows, 1>(rows, 1, one);
        }
      }
    }
  }
}

// ----------------------------------------------------------------------------
// Row-wise pieces (one position at a time, the same code for every row)

/// Folds x[0..n) into kLanes lane accumulators (element i into lane i % kLanes, the tail
/// zero-padded) with lane = add(lane, packet), then reduce_lanes: a fixed order for every row, and
/// no serial chain of n dependent adds (a scalar loop over a 384-wide row was 2 x 1.5k cycles per
/// layer norm). `add` must leave a lane unchanged for a packet of zeros.
template <class Add>
inline float reduce_row(const float* x, std::size_t n, Add add) noexcept {
  using namespace Eigen::internal;
  Packet lanes[kPacketsPerLanes];
  for (auto& lane : lanes) lane = pset1<Packet>(0.0f);
  std::size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (std::size_t p = 0; p < kPacketsPerLanes; ++p) {
      lanes[p] = add(lanes[p], ploadu<Packet>(x + i + p * kPacketSize));
    }
  }
  if (i < n) {
    float tail[kLanes] = {};
    std::copy(x + i, x + n, tail);
    for (std::size_t p = 0; p < kPacketsPerLanes; ++p) {
      lanes[p] = add(lanes[p], ploadu<Packet>(tail + p * kPacketSize));
    }
  }
  return reduce_lanes(lanes);
}

/// Sum of x[0..n), in lanes (reduce_row).
inline float sum_lanes(const float* x, std::size_t n) noexcept {
  return reduce_row(
      x, n, [](const Packet& lane, const Packet& v) { return Eigen::internal::padd(lane, v); });
}

/// Sum of x[i]^2 over [0, n), in lanes (reduce_row).
inline float sum_squares_lanes(const float* x, std::size_t n) noexcept {
  return reduce_row(
      x, n, [](const Packet& lane, const Packet& v) { return Eigen::internal::pmadd(v, v, lane); });
}

inline void layer_norm_row(const float* x, const float* weight, const float* bias, std::size_t d,
                           float* out) noexcept {
  constexpr float kEps = 1e-5f;  // nn.LayerNorm(eps=1e-5)
  const float mean = sum_lanes(x, d) / static_cast<float>(d);
  for (std::size_t i = 0; i < d; ++i) out[i] = x[i] - mean;  // centred first: a stable variance
  const float inv_std = 1.0f / std::sqrt(sum_squares_lanes(out, d) / static_cast<float>(d) + kEps);
  for (std::size_t i = 0; i < d; ++i) out[i] = out[i] * inv_std * weight[i] + bias[i];
}

/// Applies a packet function to x[0..n) in place. The tail is zero-padded to a full packet, so
/// every element goes through the same instructions whatever n is (a scalar epilogue could round
/// differently from the packet code).
template <class PacketOp>
inline void transform_packets(float* x, std::size_t n, PacketOp op) noexcept {
  using Eigen::internal::ploadu;
  using Eigen::internal::pstoreu;
  std::size_t i = 0;
  for (; i + kPacketSize <= n; i += kPacketSize) pstoreu(x + i, op(ploadu<Packet>(x + i)));
  if (i < n) {
    float tail[kPacketSize] = {};
    std::copy(x + i, x + n, tail);
    pstoreu(tail, op(ploadu<Packet>(tail)));
    std::copy(tail, tail + (n - i), x + i);
  }
}

inline void gelu_tanh_inplace(float* x, std::size_t n) noexcept {
  // F.gelu(approximate="tanh"): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
  using namespace Eigen::internal;
  transform_packets(x, n, [](const Packet& v) {
    const Packet v3 = pmul(pmul(v, v), v);
    const Packet u =
        pmul(pset1<Packet>(0.7978845608028654f), pmadd(pset1<Packet>(0.044715f), v3, v));
    return pmul(pmul(pset1<Packet>(0.5f), v), padd(pset1<Packet>(1.0f), ptanh(u)));
  });
}

inline void softmax_inplace(float* x, std::size_t n) noexcept {
  using namespace Eigen::internal;
  Packet max_packet = pset1<Packet>(-std::numeric_limits<float>::infinity());
  std::size_t i = 0;
  for (; i + kPacketSize <= n; i += kPacketSize)
    max_packet = pmax(max_packet, ploadu<Packet>(x + i));
  float max = predux_max(max_packet);  // a maximum is exact in any order
  for (; i < n; ++i) max = std::max(max, x[i]);
  max_packet = pset1<Packet>(max);
  transform_packets(x, n, [&](const Packet& v) { return pexp(psub(v, max_packet)); });
  const float inv_sum = 1.0f / sum_lanes(x, n);
  for (std::size_t i = 0; i < n; ++i) x[i] *= inv_sum;
}

/// out[0..dim) = sum over t < count of weights[t] * row_at(t)[0..dim): one fused multiply-add per
/// element and t, in t order, the sums held in registers across all t. (Adding one row at a time
/// into memory put a store-to-load round trip on every step's critical path.) Where the rows live
/// does not change a result: a tree node's ancestors are read from their own K/V rows in the same
/// order as a chain reads consecutive ones.
template <class RowAt>
inline void weighted_row_sum(const float* weights, std::size_t count, RowAt row_at, std::size_t dim,
                             float* out) noexcept {
  using namespace Eigen::internal;
  constexpr std::size_t kBlock = 4;  // packets per pass: 4 independent FMA chains
  std::size_t c = 0;
  for (; c + kBlock * kPacketSize <= dim; c += kBlock * kPacketSize) {
    Packet acc[kBlock];
    for (auto& a : acc) a = pset1<Packet>(0.0f);
    for (std::size_t t = 0; t < count; ++t) {
      const Packet w = pset1<Packet>(weights[t]);
      const float* row = row_at(t) + c;
      for (std::size_t p = 0; p < kBlock; ++p) {
        acc[p] = pmadd(w, ploadu<Packet>(row + p * kPacketSize), acc[p]);
      }
    }
    for (std::size_t p = 0; p < kBlock; ++p) pstoreu(out + c + p * kPacketSize, acc[p]);
  }
  for (; c + kPacketSize <= dim; c += kPacketSize) {
    Packet acc = pset1<Packet>(0.0f);
    for (std::size_t t = 0; t < count; ++t) {
      acc = pmadd(pset1<Packet>(weights[t]), ploadu<Packet>(row_at(t) + c), acc);
    }
    pstoreu(out + c, acc);
  }
  for (; c < dim; ++c) {
    float acc = 0.0f;
    for (std::size_t t = 0; t < count; ++t) acc = std::fma(weights[t], row_at(t)[c], acc);
    out[c] = acc;
  }
}

/// weighted_row_sum over rows[t * stride + 0..dim): consecutive rows (a chain's positions).
inline void weighted_row_sum(const float* weights, std::size_t count, const float* rows,
                             std::size_t stride, std::size_t dim, float* out) noexcept {
  weighted_row_sum(
      weights, count, [rows, stride](std::size_t t) { return rows + t * stride; }, dim, out);
}

}  // namespace detail

// ----------------------------------------------------------------------------
// The model

/// \brief A KV-cached GPT forward that is both a specdec DraftModel and a TargetModel, and scores
/// trees of drafts in one call (score_tree).
///
/// Calls take the whole context; the model keeps the K/V rows of the last context it saw and reuses
/// the longest common prefix (specdec::TreeContextCache), so a call costs the new positions only,
/// and a rejected draft costs nothing extra (its rows are simply overwritten). After a tree call
/// the next call's context tells which path of the tree was accepted; that path's K/V rows are
/// moved into place and reused, the rest of the tree is dropped.
/// Returned spans point into the model's own logits buffer and stay valid until the next call on
/// this model. Not thread-safe (one call at a time; with threads() > 1 the model runs its own
/// worker threads inside a call). Move-only: an accidental copy would duplicate all the weights
/// (~44 MB for the target).
class GptModel {
 public:
  /// New positions are run through the layers chunk_rows at a time: a target call with
  /// n <= chunk_rows reads every weight once. Any n works; larger n just takes more chunks.
  static constexpr std::size_t kDefaultChunkRows = 16;
  /// The most nodes score_tree accepts unless the constructor is told otherwise. A tree call
  /// runs its nodes and the last committed position as one chunk (one pass over the weights),
  /// so scratch rows are max(chunk_rows, max_tree_nodes + 1); the K/V buffers get
  /// max_tree_nodes rows beyond max_context.
  static constexpr std::size_t kDefaultMaxTreeNodes = 64;

  /// The most threads set_threads accepts.
  static constexpr std::size_t kMaxThreads = 256;
  /// Rows of a batched call (score_batch, draft_batch) run through the layers together: the new
  /// positions of every sequence of the call, stacked, up to batch_rows at a time (a constructor
  /// argument). 8 sequences verifying 8 drafts each (72 rows) or 16 sequences of up to 8 rows
  /// read every weight once.
  static constexpr std::size_t kDefaultBatchRows = 128;

  /// \throws std::invalid_argument (chunk_rows == 0, inconsistent weights, threads outside
  ///         [1, kMaxThreads]), std::system_error (a worker thread cannot start).
  explicit GptModel(GptWeights weights, std::size_t chunk_rows = kDefaultChunkRows,
                    std::size_t max_tree_nodes = kDefaultMaxTreeNodes, std::size_t threads = 1,
                    std::size_t batch_rows = kDefaultBatchRows)
      : weights_(std::move(weights)),
        chunk_rows_(chunk_rows),
        max_tree_nodes_(max_tree_nodes),
        batch_rows_(batch_rows) {
    const GptConfig& c = weights_.config;
    if (chunk_rows_ == 0) throw std::invalid_argument("specdec: GptModel chunk_rows must be >= 1");
    if (batch_rows_ == 0) throw std::invalid_argument("specdec: GptModel batch_rows must be >= 1");
    if (c.n_layer != weights_.layers.size() || c.n_head == 0 || c.d_model % c.n_head != 0) {
      throw std::invalid_argument("specdec: GptModel given inconsistent GptWeights");
    }
    scratch_rows_ = std::max({chunk_rows_, max_tree_nodes_ + 1, batch_rows_});
    const auto rows = static_cast<Eigen::Index>(scratch_rows_);
    const auto d = static_cast<Eigen::Index>(c.d_model);
    residual_.setZero(rows, d);
    normed_.setZero(rows, d);
    query_.setZero(rows, d);
    attention_.setZero(rows, d);
    hidden_.setZero(rows, static_cast<Eigen::Index>(c.d_ff));
    branch_.setZero(rows, d);
    new_keys_.setZero(rows, d);
    new_values_.setZero(rows, d);
    own_ = make_sequence_cache(c.max_context + max_tree_nodes_, max_tree_nodes_);
    logits_.setZero(static_cast<Eigen::Index>(std::max(c.max_context, max_tree_nodes_ + 1)),
                    static_cast<Eigen::Index>(c.vocab_size));
    checked_depths_.resize(max_tree_nodes_);
    chunk_tokens_.resize(scratch_rows_);
    // target(): ceil(max_context / chunk_rows) chunks at most, one segment each; score_tree():
    // one more. (Batched calls grow both lists as they need.)
    chunks_.reserve(c.max_context / chunk_rows_ + 2);
    segments_.reserve(c.max_context / chunk_rows_ + 2);
    set_threads(threads);
  }

  /// \brief Loads a .spdc file (see weights.hpp). Throws std::runtime_error naming the file.
  static GptModel from_file(const std::filesystem::path& path,
                            std::size_t chunk_rows = kDefaultChunkRows,
                            std::size_t max_tree_nodes = kDefaultMaxTreeNodes,
                            std::size_t threads = 1, std::size_t batch_rows = kDefaultBatchRows) {
    return GptModel(load_gpt_weights(path), chunk_rows, max_tree_nodes, threads, batch_rows);
  }

  /// \brief Runs every later call on `threads` threads: the caller's and threads - 1 workers
  /// owned by the model (started here, joined by the next set_threads or the destructor). The
  /// logits are bitwise the same for any count. 1 (the default) runs calls on the caller alone.
  /// \throws std::invalid_argument (threads outside [1, kMaxThreads]), std::system_error (a
  ///         thread cannot start; the model then keeps one thread).
  void set_threads(std::size_t threads) {
    if (threads == 0 || threads > kMaxThreads) {
      throw std::invalid_argument("specdec: GptModel asked for " + std::to_string(threads) +
                                  " threads, expected 1.." + std::to_string(kMaxThreads));
    }
    const GptConfig& c = weights_.config;
    pool_.reset();
    thread_scores_.resize(threads);
    thread_path_slots_.resize(threads);
    for (std::size_t t = 0; t < threads; ++t) {  // (chunk, slots) and (max_tree_nodes) each
      thread_scores_[t].setZero(static_cast<Eigen::Index>(scratch_rows_),
                                static_cast<Eigen::Index>(c.max_context + max_tree_nodes_));
      thread_path_slots_[t].resize(max_tree_nodes_);
    }
    if (threads > 1) pool_ = std::make_unique<detail::PhasePool>(threads);
  }

  /// Threads a call runs on (set_threads).
  [[nodiscard]] std::size_t threads() const noexcept { return pool_ ? pool_->threads() : 1; }

  GptModel(GptModel&&) noexcept = default;
  GptModel& operator=(GptModel&&) noexcept = default;
  GptModel(const GptModel&) = delete;
  GptModel& operator=(const GptModel&) = delete;

  /// \brief Draft role: the vocab_size() next-token logits after the whole context.
  /// \throws std::invalid_argument (empty context, token outside [0, vocab_size)),
  ///         std::length_error (context longer than max_context).
  std::span<const float> draft(std::span<const token_t> context) { return target(context, 1); }

  /// \brief Target role: n rows of vocab_size() logits, row-major; row i is the next-token logits
  /// after the first context.size() - n + 1 + i tokens. Requires 1 <= n <= context.size().
  /// \throws as draft(), and std::invalid_argument for n outside [1, context.size()].
  std::span<const float> target(std::span<const token_t> context, std::size_t n) {
    const GptConfig& c = weights_.config;
    check_call(context, n);
    // Keep the K/V rows of the longest common prefix with the cached context (but at most
    // size - n: rows whose logits are wanted are recomputed), after moving the accepted path of
    // a tree scored by the last call into place; rows >= keep get overwritten, which is all a
    // rollback after a rejected draft takes. The forward below cannot throw, so the cache's
    // token list is updated up front.
    const specdec::TreeCacheUpdate plan = own_.tokens.update(context, n);
    move_kept_nodes(own_, plan);
    tree_nodes_ = 0;
    clear_chunks();
    add_segments(own_, context, plan.keep, context.size() - n, chunk_rows_);
    run_chunks();
    positions_computed_ += plan.new_tokens.size();
    return {logits_.data(), n * c.vocab_size};
  }

  /// \brief Tree call: tokens.size() + 1 rows of vocab_size() logits, row-major. Row 0 is the
  /// next-token logits after `committed`, row 1 + i after committed followed by the path from the
  /// root to node i. Nodes are in topological order: parents[i] < i, -1 for a child of the root.
  ///
  /// Every row is bitwise equal to draft(committed + path) (see the numerics contract). The
  /// nodes and the last committed position go through the layers as one chunk: one pass over
  /// the weights, each node attending to the committed context and its ancestors. Node i's K/V
  /// rows sit at slot committed.size() + i; the next call keeps the path its context follows
  /// (specdec::TreeContextCache), so accepted drafts are not computed again.
  /// \throws std::invalid_argument (empty committed context, a token outside [0, vocab_size),
  ///         tokens and parents of different sizes, a parent outside [-1, i), more than
  ///         max_tree_nodes() nodes), std::length_error (committed context plus the longest
  ///         root-to-leaf path longer than max_context). Nothing changes when it throws.
  std::span<const float> score_tree(std::span<const token_t> committed,
                                    std::span<const token_t> tokens,
                                    std::span<const std::int32_t> parents) {
    const GptConfig& c = weights_.config;
    check_tree_call(committed, tokens, parents);
    const specdec::TreeCacheUpdate plan = own_.tokens.update_tree(committed, tokens, parents);
    move_kept_nodes(own_, plan);
    tree_start_ = committed.size();
    tree_nodes_ = tokens.size();
    // Slots keep .. committed.size() + nodes - 1: committed positions, then node i at slot
    // committed.size() + i. The last chunk holds the last committed position (row 0) and every
    // node; committed positions before it go in chunks of chunk_rows.
    const std::size_t end = tree_start_ + tree_nodes_;
    const std::size_t last_chunk = std::max(plan.keep, end - std::min(end, scratch_rows_));
    const std::size_t first_logits_slot = tree_start_ - 1;
    clear_chunks();
    add_segments(own_, committed.first(last_chunk), plan.keep, first_logits_slot, chunk_rows_);
    // The chunk's tokens by slot: committed ones, then the nodes' (copied: they are two spans).
    for (std::size_t slot = last_chunk; slot < end; ++slot) {
      chunk_tokens_[slot - last_chunk] =
          slot < tree_start_ ? committed[slot] : tokens[slot - tree_start_];
    }
    start_chunk();
    add_segment(own_, std::span<const token_t>(chunk_tokens_.data(), end - last_chunk), last_chunk,
                first_logits_slot);
    run_chunks();
    positions_computed_ += plan.new_tokens.size() + tree_nodes_;
    return {logits_.data(), (tree_nodes_ + 1) * c.vocab_size};
  }

  std::span<const float> operator()(std::span<const token_t> context) { return draft(context); }
  std::span<const float> operator()(std::span<const token_t> context, std::size_t n) {
    return target(context, n);
  }

  /// \brief Batched target role (specdec::BatchedTargetModel, specdec/batch/target.hpp): the
  /// rows of every request, request by request, row-major; request i's requests[i].rows rows are
  /// bitwise those target(requests[i].context, requests[i].rows) returns.
  ///
  /// ONE forward for all of them: the new positions of every sequence are stacked (up to
  /// batch_rows() at a time) and go through each weight matrix together, so the weights are read
  /// once per call, not once per sequence. Attention runs per sequence against that sequence's
  /// own KV cache, kept per request id: created on an id's first call, planned like target()'s
  /// own cache (the longest common prefix is kept, so a rejected draft is rolled back by
  /// overwriting), and dropped by release(id). Every row is computed as it would be
  /// alone (the numerics contract): no row's arithmetic depends on another row of the call.
  /// The single-sequence calls (target, draft, score_tree) keep their own cache, apart.
  /// \throws as target(), naming the sequence, and std::invalid_argument for an id given twice;
  ///         before anything changes.
  std::span<const float> score_batch(std::span<const specdec::ScoreRequest> requests) {
    batch_.clear();
    for (const specdec::ScoreRequest& request : requests) {
      batch_.push_back({request.id, request.context, request.rows, nullptr});
    }
    return run_batch();
  }

  /// \brief Batched draft role (specdec::BatchedDraftModel, specdec/batch/draft.hpp): one row of
  /// vocab_size() logits per request, bitwise draft(requests[i].context); one forward for all of
  /// them, per-sequence KV caches, as score_batch.
  std::span<const float> draft_batch(std::span<const specdec::DraftStepRequest> requests) {
    batch_.clear();
    for (const specdec::DraftStepRequest& request : requests) {
      batch_.push_back({request.id, request.context, 1, nullptr});
    }
    return run_batch();
  }

  /// \brief Drops the KV cache of sequence `id` (its memory is freed); nothing if there is none.
  /// BatchedDecoder calls it when the sequence leaves the batch (specdec/batch/target.hpp). An
  /// id seen again later starts from an empty cache.
  void release(specdec::sequence_id id) noexcept { sequence_caches_.erase(id); }
  /// \brief Drops every batched sequence's KV cache.
  void release_sequences() noexcept { sequence_caches_.clear(); }
  /// Sequences whose KV caches the batched calls hold.
  [[nodiscard]] std::size_t cached_sequences() const noexcept { return sequence_caches_.size(); }
  /// Tokens whose K/V rows are cached for batched sequence `id` (empty for an unknown id).
  [[nodiscard]] std::span<const token_t> cached_tokens(specdec::sequence_id id) const noexcept {
    const auto found = sequence_caches_.find(id);
    return found == sequence_caches_.end() ? std::span<const token_t>{}
                                           : found->second.tokens.tokens();
  }

  [[nodiscard]] const GptConfig& config() const noexcept { return weights_.config; }
  [[nodiscard]] std::size_t vocab_size() const noexcept { return weights_.config.vocab_size; }
  [[nodiscard]] std::size_t max_context() const noexcept { return weights_.config.max_context; }
  [[nodiscard]] std::size_t chunk_rows() const noexcept { return chunk_rows_; }
  /// The most nodes a tree call takes (the constructor's max_tree_nodes).
  [[nodiscard]] std::size_t max_tree_nodes() const noexcept { return max_tree_nodes_; }
  /// The most rows a batched call runs through the layers together (the constructor's
  /// batch_rows); a call with more new positions takes more passes over the weights.
  [[nodiscard]] std::size_t batch_rows() const noexcept { return batch_rows_; }
  /// Tokens whose K/V rows are cached at their positions (a prefix of the last context; after a
  /// tree call, the committed context, with the tree's nodes held beside it).
  [[nodiscard]] std::span<const token_t> cached_tokens() const noexcept {
    return own_.tokens.tokens();
  }
  /// Positions run through the model since construction (cache misses, tree nodes included).
  [[nodiscard]] std::uint64_t positions_computed() const noexcept { return positions_computed_; }
  /// Forgets the cache of the single-sequence calls (target, draft, score_tree); the next such
  /// call recomputes its whole context. The batched calls' caches are release's.
  void reset() noexcept { own_.tokens.clear(); }

 private:
  void check_call(std::span<const token_t> context, std::size_t n) const {
    const GptConfig& c = weights_.config;
    if (context.empty()) {
      throw std::invalid_argument("specdec: GptModel needs at least one context token");
    }
    if (context.size() > c.max_context) {
      throw std::length_error("specdec: context of " + std::to_string(context.size()) +
                              " tokens exceeds the model's max_context of " +
                              std::to_string(c.max_context) + " positions");
    }
    if (n == 0 || n > context.size()) {
      throw std::invalid_argument("specdec: GptModel asked for " + std::to_string(n) +
                                  " target rows, expected 1.." + std::to_string(context.size()) +
                                  " (one row per context position at most)");
    }
    check_tokens(context);
  }

  void check_tokens(std::span<const token_t> context) const {
    const GptConfig& c = weights_.config;
    for (std::size_t i = 0; i < context.size(); ++i) {
      if (context[i] < 0 || static_cast<std::size_t>(context[i]) >= c.vocab_size) {
        throw std::invalid_argument("specdec: token " + std::to_string(context[i]) +
                                    " at context position " + std::to_string(i) +
                                    " is outside the vocabulary [0, " +
                                    std::to_string(c.vocab_size) + ")");
      }
    }
  }

  void check_tree_call(std::span<const token_t> committed, std::span<const token_t> tokens,
                       std::span<const std::int32_t> parents) {
    const GptConfig& c = weights_.config;
    if (committed.empty()) {
      throw std::invalid_argument(
          "specdec: GptModel::score_tree needs at least one committed token (row 0 follows it)");
    }
    if (tokens.size() != parents.size()) {
      throw std::invalid_argument(
          "specdec: GptModel::score_tree given " + std::to_string(tokens.size()) + " tokens and " +
          std::to_string(parents.size()) + " parents; expected one parent per token");
    }
    if (tokens.size() > max_tree_nodes_) {
      throw std::invalid_argument("specdec: GptModel::score_tree given a tree of " +
                                  std::to_string(tokens.size()) + " nodes; expected at most " +
                                  std::to_string(max_tree_nodes_) +
                                  " (max_tree_nodes, a GptModel constructor argument)");
    }
    check_tokens(committed);
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      if (tokens[i] < 0 || static_cast<std::size_t>(tokens[i]) >= c.vocab_size) {
        throw std::invalid_argument(
            "specdec: tree token " + std::to_string(tokens[i]) + " at node " + std::to_string(i) +
            " is outside the vocabulary [0, " + std::to_string(c.vocab_size) + ")");
      }
    }
    const std::size_t height = specdec::tree_depths(parents, checked_depths_);  // checks parents
    if (committed.size() + height > c.max_context) {
      throw std::length_error("specdec: committed context of " + std::to_string(committed.size()) +
                              " tokens plus a tree path of " + std::to_string(height) +
                              " nodes needs " + std::to_string(committed.size() + height) +
                              " positions; expected at most the model's max_context of " +
                              std::to_string(c.max_context));
    }
  }

  /// One sequence's KV cache: the tokens its rows hold and, per layer, the K and V rows by slot.
  struct SequenceCache {
    specdec::TreeContextCache tokens;
    std::vector<RowMajorMatrixXf> keys;    // (n_layer) x (slots, d_model)
    std::vector<RowMajorMatrixXf> values;  // (n_layer) x (slots, d_model)
  };

  /// A cache of `slots` K/V rows per layer, for trees of up to `tree_nodes` nodes. The rows are
  /// not initialised: a forward reads only rows it has written (slots below the kept prefix,
  /// and the new ones it writes first).
  [[nodiscard]] SequenceCache make_sequence_cache(std::size_t slots, std::size_t tree_nodes) const {
    const GptConfig& c = weights_.config;
    SequenceCache cache;
    cache.tokens.reserve(c.max_context, tree_nodes);
    cache.keys.resize(c.n_layer);
    cache.values.resize(c.n_layer);
    for (std::size_t l = 0; l < c.n_layer; ++l) {
      cache.keys[l].resize(static_cast<Eigen::Index>(slots), static_cast<Eigen::Index>(c.d_model));
      cache.values[l].resize(static_cast<Eigen::Index>(slots),
                             static_cast<Eigen::Index>(c.d_model));
    }
    return cache;
  }

  /// One sequence of a batched call: score_batch's and draft_batch's requests, as run_batch
  /// takes them.
  struct BatchRequest {
    specdec::sequence_id id;
    std::span<const token_t> context;
    std::size_t rows;
    SequenceCache* cache;  // found or created by run_batch
  };

  /// The batched calls: batch_'s rows in one forward (see score_batch).
  std::span<const float> run_batch() {
    const GptConfig& c = weights_.config;
    // Every check before anything changes: a call that throws leaves every cache as it was.
    for (std::size_t i = 0; i < batch_.size(); ++i) {
      const BatchRequest& request = batch_[i];
      for (std::size_t j = 0; j < i; ++j) {
        if (batch_[j].id == request.id) {
          throw std::invalid_argument("specdec: sequence " + std::to_string(request.id) +
                                      " appears twice in one batched call (requests " +
                                      std::to_string(j) + " and " + std::to_string(i) +
                                      "); expected distinct ids");
        }
      }
      const auto named = [&](const std::exception& error) {
        return "specdec: sequence " + std::to_string(request.id) + ": " +
               std::string(specdec::message_without_prefix(error.what()));
      };
      try {
        check_call(request.context, request.rows);
      } catch (const std::length_error& error) {
        throw std::length_error(named(error));
      } catch (const std::invalid_argument& error) {
        throw std::invalid_argument(named(error));
      }
    }
    // Caches found or created (this may allocate, and throw std::bad_alloc: nothing is planned
    // yet), and the logits buffer grown to the call's rows (allocates only for a larger call).
    std::size_t total_rows = 0;
    for (BatchRequest& request : batch_) {
      auto found = sequence_caches_.find(request.id);
      if (found == sequence_caches_.end()) {
        found = sequence_caches_.emplace(request.id, make_sequence_cache(c.max_context, 0)).first;
      }
      request.cache = &found->second;
      total_rows += request.rows;
    }
    if (static_cast<std::size_t>(logits_.rows()) < total_rows) {
      logits_.resize(static_cast<Eigen::Index>(total_rows),
                     static_cast<Eigen::Index>(c.vocab_size));
    }
    // Each sequence's new positions, planned as target() plans its own, stacked in request order
    // into chunks of up to batch_rows_ rows. A row's logits land at its place in the request
    // order, which is the order the rows run in.
    tree_nodes_ = 0;
    clear_chunks();
    for (const BatchRequest& request : batch_) {
      SequenceCache& cache = *request.cache;
      const specdec::TreeCacheUpdate plan = cache.tokens.update(request.context, request.rows);
      move_kept_nodes(cache, plan);
      add_segments(cache, request.context, plan.keep, request.context.size() - request.rows,
                   batch_rows_);
      positions_computed_ += plan.new_tokens.size();
    }
    if (chunks_.empty()) return {};  // no requests
    run_chunks();
    return {logits_.data(), total_rows * c.vocab_size};
  }

  /// The accepted path of the last call's tree becomes ordinary positions: its K/V rows move, in
  /// every layer, from the nodes' slots to the slots of their positions.
  void move_kept_nodes(SequenceCache& cache, const specdec::TreeCacheUpdate& plan) {
    plan.move_kept_nodes([&](std::size_t from, std::size_t to) {
      const auto source = static_cast<Eigen::Index>(from);
      const auto destination = static_cast<Eigen::Index>(to);
      for (std::size_t l = 0; l < weights_.config.n_layer; ++l) {
        cache.keys[l].row(destination) = cache.keys[l].row(source);
        cache.values[l].row(destination) = cache.values[l].row(source);
      }
    });
  }

  /// Slots at and past tree_start_ hold the nodes of the tree being scored (tree_nodes_ > 0).
  [[nodiscard]] bool is_tree_slot(std::size_t slot) const noexcept {
    return tree_nodes_ > 0 && slot >= tree_start_;
  }

  /// Writes node's ancestors' slots and its own, root first, to `slots`; returns how many.
  std::size_t fill_path_slots(std::size_t node, std::size_t* slots) const noexcept {
    const std::span<const std::int32_t> parents = own_.tokens.tree_parents();
    const std::size_t length = own_.tokens.tree_depths()[node] + 1;
    std::size_t at = length;
    for (auto i = static_cast<std::int32_t>(node); i >= 0;) {
      slots[--at] = tree_start_ + static_cast<std::size_t>(i);
      i = parents[static_cast<std::size_t>(i)];
    }
    return length;
  }

  // ----------------------------------------------------------------------------
  // The forward as phases
  //
  // A call runs chunks_ in order. A chunk is up to scratch_rows_ rows, stacked from segments: a
  // segment runs slots start .. start + tokens.size() - 1 of one sequence's cache through the
  // model, writing their K/V rows into that cache and, for slots >= its first_logits_slot, their
  // logits into the next rows of logits_ (the call's rows whose logits are wanted, in the order
  // they run). A single-sequence call (target, draft, score_tree) has one segment per chunk; a
  // batched call stacks the new slots of every sequence, in request order. A slot below
  // tree_start_ (or any slot when no tree is being scored) is the position of the same index and
  // attends to every position up to it; tree node i (slot tree_start_ + i) sits at position
  // tree_start_ + depth(i) and attends to the committed positions [0, tree_start_) and to its
  // root-to-node path.
  //
  // Per layer a chunk takes four phases, each one matrix product over all its rows, split into
  // items by output:
  //   attention   groups of heads: the heads' q, k, v rows (k, v straight into the cache, or via
  //               new_keys_ / new_values_ into each segment's cache), then per segment their
  //               scores, softmax and weighted sums            -> attention_ (head columns)
  //   projection  ranges of proj rows, then residual += branch     -> residual_ (those columns)
  //   mlp_up      ranges of fc1 rows, then GELU                    -> hidden_ (those columns)
  //   mlp_down    ranges of fc2 rows, then residual += branch      -> residual_ (those columns)
  // then, if the chunk has rows whose logits are wanted, head: ranges of vocabulary rows, for
  // those rows only (their final layer norms gathered into the top rows of normed_). The layer
  // norms (which read whole rows) run between phases, on the thread that completed the phase
  // (finish_phase). With one thread every phase is one item, i.e. the whole product.
  //
  // Every row is computed by the same code whatever else is in its chunk: the products give
  // each output its own accumulators and summation order (linear_rows), and attention, layer
  // norms and GELU run row by row. So a row's bits depend only on its sequence's tokens.

  /// New slots start .. start + tokens.size() - 1 of `cache`, at chunk rows row .. row +
  /// tokens.size() - 1.
  struct Segment {
    SequenceCache* cache;
    std::span<const token_t> tokens;
    std::size_t start;
    std::size_t row;
    std::size_t first_logits_slot;  // slots from here on get logits rows
  };
  /// segments_[first_segment, first_segment + segments): `rows` rows; `logit_rows` of them want
  /// logits, which go to logits_ rows first_logit .. first_logit + logit_rows - 1.
  struct Chunk {
    std::size_t first_segment;
    std::size_t segments;
    std::size_t rows;
    std::size_t first_logit;
    std::size_t logit_rows;
  };

  /// Starts a call's list of chunks.
  void clear_chunks() noexcept {
    chunks_.clear();
    segments_.clear();
    logit_rows_ = 0;
  }

  /// Opens a new (empty) chunk.
  void start_chunk() { chunks_.push_back({segments_.size(), 0, 0, logit_rows_, 0}); }

  /// Appends slots start .. start + tokens.size() - 1 of `cache` to the last chunk.
  void add_segment(SequenceCache& cache, std::span<const token_t> tokens, std::size_t start,
                   std::size_t first_logits_slot) {
    Chunk& chunk = chunks_.back();
    segments_.push_back({&cache, tokens, start, chunk.rows, first_logits_slot});
    ++chunk.segments;
    chunk.rows += tokens.size();
    const std::size_t end = start + tokens.size();
    const std::size_t wanted = end - std::clamp(first_logits_slot, start, end);
    chunk.logit_rows += wanted;
    logit_rows_ += wanted;
  }

  /// Appends slots from .. context.size() - 1 of `cache` (tokens from `context`), filling the
  /// last chunk up to `capacity` rows and opening new ones as needed.
  void add_segments(SequenceCache& cache, std::span<const token_t> context, std::size_t from,
                    std::size_t first_logits_slot, std::size_t capacity) {
    while (from < context.size()) {
      if (chunks_.empty() || chunks_.back().rows >= capacity) start_chunk();
      const std::size_t take = std::min(capacity - chunks_.back().rows, context.size() - from);
      add_segment(cache, context.subspan(from, take), from, first_logits_slot);
      from += take;
    }
  }

  /// The segments of chunk `chunk`.
  [[nodiscard]] std::span<const Segment> segments_of(const Chunk& chunk) const noexcept {
    return std::span<const Segment>(segments_).subspan(chunk.first_segment, chunk.segments);
  }
  enum class Step : std::uint8_t { attention, projection, mlp_up, mlp_down, head };

  /// Items per thread in a phase: 1 keeps each thread's weight rows one contiguous range (one
  /// prefetch stream, no range ends in the middle); a thread that is late loses its item to the
  /// others all the same.
  static constexpr std::size_t kItemsPerThread = 1;
  /// Item boundaries fall on multiples of this many weight rows: whole blocks of linear_blocked
  /// (and whole tiles of every shape that divides 24).
  static constexpr std::size_t kItemRowAlign = detail::kSliceBlockRows;

  /// Item `item` of `items` over [0, total): ranges in multiples of `align` (items <= the number
  /// of such multiples, so none is empty), the last one ending at total.
  static std::pair<Eigen::Index, Eigen::Index> item_range(std::size_t total, std::size_t items,
                                                          std::size_t item,
                                                          std::size_t align) noexcept {
    const std::size_t units = (total + align - 1) / align;
    const std::size_t begin = std::min(total, units * item / items * align);
    const std::size_t end = std::min(total, units * (item + 1) / items * align);
    return {static_cast<Eigen::Index>(begin), static_cast<Eigen::Index>(end - begin)};
  }

  /// Items of a phase of `step`: 1 on one thread; else kItemsPerThread per thread, at most one
  /// per head or per kItemRowAlign output rows.
  [[nodiscard]] std::uint32_t items_of(Step step) const noexcept {
    const std::size_t threads = this->threads();
    if (threads == 1) return 1;
    const GptConfig& c = weights_.config;
    const auto units = [](std::size_t rows) { return (rows + kItemRowAlign - 1) / kItemRowAlign; };
    std::size_t most = 0;
    switch (step) {
      case Step::attention:
        most = c.n_head;
        break;
      case Step::projection:
      case Step::mlp_down:
        most = units(c.d_model);
        break;
      case Step::mlp_up:
        most = units(c.d_ff);
        break;
      case Step::head:
        most = units(c.vocab_size);
        break;
    }
    return static_cast<std::uint32_t>(std::min<std::size_t>(
        {most, threads * kItemsPerThread, std::size_t{detail::PhasePool::kMaxItems}}));
  }

  /// Runs chunks_ (at least one) on this model's threads.
  void run_chunks() {
    const std::uint32_t first_items = begin_chunk(0);
    if (!pool_) {
      for (std::uint32_t items = first_items; items != 0; items = finish_phase()) {
        for (std::uint32_t item = 0; item < items; ++item) run_item(item, 0);
      }
      return;
    }
    pool_->run({this, &run_item_of, &finish_phase_of}, first_items);
  }

  static void run_item_of(void* model, std::uint32_t item, std::size_t thread) noexcept {
    static_cast<GptModel*>(model)->run_item(item, thread);
  }
  static std::uint32_t finish_phase_of(void* model) noexcept {
    return static_cast<GptModel*>(model)->finish_phase();
  }

  /// Opens phase `step` (layer layer_ of chunk chunk_index_); returns its item count.
  std::uint32_t open(Step step) noexcept {
    step_ = step;
    items_ = items_of(step);
    return items_;
  }

  /// Serial start of chunk `index`: embeddings x = wte[token] + wpe[position], then layer 0's
  /// ln1. Returns the item count of its first phase.
  std::uint32_t begin_chunk(std::size_t index) noexcept {
    chunk_index_ = index;
    layer_ = 0;
    const std::span<const std::size_t> depths = own_.tokens.tree_depths();
    for (const Segment& segment : segments_of(chunks_[index])) {
      for (std::size_t r = 0; r < segment.tokens.size(); ++r) {
        const std::size_t slot = segment.start + r;
        const std::size_t position =
            is_tree_slot(slot) ? tree_start_ + depths[slot - tree_start_] : slot;
        residual_.row(static_cast<Eigen::Index>(segment.row + r)) =
            weights_.token_embedding.row(segment.tokens[r]) +
            weights_.position_embedding.row(static_cast<Eigen::Index>(position));
      }
    }
    const GptLayerWeights& w = weights_.layers[0];
    normalize_rows(w.ln1_weight.data(), w.ln1_bias.data());
    return open(Step::attention);
  }

  /// normed_ rows = layer norm of the chunk's residual rows.
  void normalize_rows(const float* weight, const float* bias) noexcept {
    const auto rows = static_cast<Eigen::Index>(chunks_[chunk_index_].rows);
    for (Eigen::Index r = 0; r < rows; ++r) {
      detail::layer_norm_row(residual_.row(r).data(), weight, bias, weights_.config.d_model,
                             normed_.row(r).data());
    }
  }

  /// normed_ rows 0, 1, ... = the final layer norm of the chunk's rows whose logits are wanted,
  /// in order (row k <= the residual row it reads, so nothing is overwritten before it is read).
  void normalize_logit_rows() noexcept {
    const GptConfig& c = weights_.config;
    Eigen::Index k = 0;
    for (const Segment& segment : segments_of(chunks_[chunk_index_])) {
      const std::size_t end = segment.start + segment.tokens.size();
      for (std::size_t slot = std::max(segment.start, segment.first_logits_slot); slot < end;
           ++slot) {
        const auto r = static_cast<Eigen::Index>(segment.row + slot - segment.start);
        detail::layer_norm_row(residual_.row(r).data(), weights_.lnf_weight.data(),
                               weights_.lnf_bias.data(), c.d_model, normed_.row(k++).data());
      }
    }
  }

  /// The serial step after the current phase: the layer norm the next phase reads, and which
  /// phase that is. Returns its item count; 0 when the call is done.
  std::uint32_t finish_phase() noexcept {
    const GptConfig& c = weights_.config;
    switch (step_) {
      case Step::attention:
        return open(Step::projection);
      case Step::projection: {
        const GptLayerWeights& w = weights_.layers[layer_];
        normalize_rows(w.ln2_weight.data(), w.ln2_bias.data());
        return open(Step::mlp_up);
      }
      case Step::mlp_up:
        return open(Step::mlp_down);
      case Step::mlp_down: {
        if (layer_ + 1 < c.n_layer) {
          ++layer_;
          const GptLayerWeights& w = weights_.layers[layer_];
          normalize_rows(w.ln1_weight.data(), w.ln1_bias.data());
          return open(Step::attention);
        }
        if (chunks_[chunk_index_].logit_rows > 0) {
          normalize_logit_rows();
          return open(Step::head);
        }
        break;
      }
      case Step::head:
        break;
    }
    return chunk_index_ + 1 < chunks_.size() ? begin_chunk(chunk_index_ + 1) : 0;
  }

  /// Item `item` of the current phase, on thread `thread` (its scratch buffers).
  void run_item(std::uint32_t item, std::size_t thread) noexcept {
    using detail::linear_rows;
    const GptConfig& c = weights_.config;
    const Chunk& chunk = chunks_[chunk_index_];
    const auto rows = static_cast<Eigen::Index>(chunk.rows);  // new slots in this chunk
    const GptLayerWeights& w = weights_.layers[layer_];
    const auto output_rows = [&](std::size_t total) {
      return item_range(total, items_, item, kItemRowAlign);
    };
    switch (step_) {
      case Step::attention: {
        const auto [first_head, heads] = item_range(c.n_head, items_, item, 1);
        attend(first_head, heads, thread);
        return;
      }
      case Step::projection:
      case Step::mlp_down: {
        const RowMajorMatrixXf& weight = step_ == Step::projection ? w.proj_weight : w.fc2_weight;
        const float* bias = step_ == Step::projection ? w.proj_bias.data() : w.fc2_bias.data();
        const RowMajorMatrixXf& input = step_ == Step::projection ? attention_ : hidden_;
        const auto [begin, count] = output_rows(c.d_model);
        linear_rows(weight.middleRows(begin, count), bias + begin, input.topRows(rows),
                    branch_.topRows(rows).middleCols(begin, count));
        residual_.topRows(rows).middleCols(begin, count) +=
            branch_.topRows(rows).middleCols(begin, count);
        return;
      }
      case Step::mlp_up: {
        const auto [begin, count] = output_rows(c.d_ff);
        linear_rows(w.fc1_weight.middleRows(begin, count), w.fc1_bias.data() + begin,
                    normed_.topRows(rows), hidden_.topRows(rows).middleCols(begin, count));
        // Element-wise packet math: an element's value does not depend on its neighbours.
        for (Eigen::Index r = 0; r < rows; ++r) {
          detail::gelu_tanh_inplace(hidden_.row(r).data() + begin, static_cast<std::size_t>(count));
        }
        return;
      }
      case Step::head: {
        const auto logit_rows = static_cast<Eigen::Index>(chunk.logit_rows);
        const auto [begin, count] = output_rows(c.vocab_size);
        linear_rows(weights_.token_embedding.middleRows(begin, count), nullptr,
                    normed_.topRows(logit_rows),
                    logits_.middleRows(static_cast<Eigen::Index>(chunk.first_logit), logit_rows)
                        .middleCols(begin, count));
        return;
      }
    }
  }

  /// Attention of heads [first_head, first_head + heads) for the current chunk, layer layer_:
  /// their q rows into query_, k and v rows into each segment's cache (for all the chunk's rows
  /// in one product each), then per segment and head the scores of the segment's rows against
  /// all keys of its cache they can see from one kernel call (the keys play the weight rows, so
  /// each key is read once for the segment; row r uses the scores of the slots it attends to,
  /// and every score is the same dot product a one-row call computes). Then, row by row, softmax
  /// and the weighted sum of the value rows, over the visible slots in position order.
  void attend(Eigen::Index first_head, Eigen::Index heads, std::size_t thread) noexcept {
    using detail::linear_rows;
    const GptConfig& c = weights_.config;
    const Chunk& chunk = chunks_[chunk_index_];
    const std::span<const Segment> segments = segments_of(chunk);
    const auto rows = static_cast<Eigen::Index>(chunk.rows);
    const auto d_model = static_cast<Eigen::Index>(c.d_model);
    const auto head_dim = static_cast<Eigen::Index>(c.head_dim());
    const float score_scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
    const GptLayerWeights& w = weights_.layers[layer_];
    RowMajorMatrixXf& scores_buffer = thread_scores_[thread];  // (chunk, slots)
    std::size_t* path_slots = thread_path_slots_[thread].data();

    // qkv rows are [q; k; v]: q goes to the scratch buffer, k and v into the cache: straight
    // there for a chunk of one segment, else via new_keys_ / new_values_, whose rows are then
    // copied to each segment's cache (the same values: the product is over all the rows).
    const Eigen::Index columns = first_head * head_dim;  // the heads' dims in q, k and v
    const Eigen::Index width = heads * head_dim;
    const detail::ConstRowsRef x = normed_.topRows(rows);
    const float* bias = w.qkv_bias.data() + columns;
    linear_rows(w.qkv_weight.middleRows(columns, width), bias, x,
                query_.topRows(rows).middleCols(columns, width));
    if (segments.size() == 1) {
      const auto first = static_cast<Eigen::Index>(segments[0].start);
      SequenceCache& cache = *segments[0].cache;
      linear_rows(w.qkv_weight.middleRows(d_model + columns, width), bias + d_model, x,
                  cache.keys[layer_].middleRows(first, rows).middleCols(columns, width));
      linear_rows(w.qkv_weight.middleRows(2 * d_model + columns, width), bias + 2 * d_model, x,
                  cache.values[layer_].middleRows(first, rows).middleCols(columns, width));
    } else {
      linear_rows(w.qkv_weight.middleRows(d_model + columns, width), bias + d_model, x,
                  new_keys_.topRows(rows).middleCols(columns, width));
      linear_rows(w.qkv_weight.middleRows(2 * d_model + columns, width), bias + 2 * d_model, x,
                  new_values_.topRows(rows).middleCols(columns, width));
      for (const Segment& segment : segments) {
        const auto first = static_cast<Eigen::Index>(segment.start);
        const auto row = static_cast<Eigen::Index>(segment.row);
        const auto count = static_cast<Eigen::Index>(segment.tokens.size());
        segment.cache->keys[layer_].block(first, columns, count, width) =
            new_keys_.block(row, columns, count, width);
        segment.cache->values[layer_].block(first, columns, count, width) =
            new_values_.block(row, columns, count, width);
      }
    }

    for (const Segment& segment : segments) {
      const RowMajorMatrixXf& keys = segment.cache->keys[layer_];      // (slots, d_model)
      const RowMajorMatrixXf& values = segment.cache->values[layer_];  // (slots, d_model)
      const auto first = static_cast<Eigen::Index>(segment.start);  // slot of the segment's row 0
      const auto first_row = static_cast<Eigen::Index>(segment.row);
      const auto segment_rows = static_cast<Eigen::Index>(segment.tokens.size());
      const Eigen::Index keys_seen = first + segment_rows;  // its last row sees at most all
      for (Eigen::Index h = first_head; h < first_head + heads; ++h) {
        const Eigen::Index offset = h * head_dim;  // head h owns dims [offset, offset + head_dim)
        linear_rows(keys.block(0, offset, keys_seen, head_dim), nullptr,
                    query_.block(first_row, offset, segment_rows, head_dim),
                    scores_buffer.topLeftCorner(segment_rows, keys_seen));
        const float* value_rows = values.data() + offset;
        const auto stride = static_cast<std::size_t>(d_model);
        for (Eigen::Index r = 0; r < segment_rows; ++r) {
          const auto slot = static_cast<std::size_t>(first + r);
          float* scores = scores_buffer.row(r).data();
          float* out = attention_.row(first_row + r).data() + offset;
          if (!is_tree_slot(slot)) {  // causal: positions 0 .. slot
            const std::size_t visible = slot + 1;
            for (std::size_t t = 0; t < visible; ++t) scores[t] *= score_scale;
            detail::softmax_inplace(scores, visible);
            detail::weighted_row_sum(scores, visible, value_rows, stride,
                                     static_cast<std::size_t>(head_dim), out);
            continue;
          }
          // Tree node (single-sequence calls only): the committed positions, then its path,
          // gathered into position order (path slot j >= tree_start_ + j, so the gather can run
          // in place, front to back).
          const std::size_t path_length = fill_path_slots(slot - tree_start_, path_slots);
          for (std::size_t j = 0; j < path_length; ++j) {
            scores[tree_start_ + j] = scores[path_slots[j]];
          }
          const std::size_t visible = tree_start_ + path_length;
          for (std::size_t t = 0; t < visible; ++t) scores[t] *= score_scale;
          detail::softmax_inplace(scores, visible);
          const std::size_t shared = tree_start_;
          const std::size_t* path = path_slots;
          detail::weighted_row_sum(
              scores, visible,
              [=](std::size_t t) {
                return value_rows + (t < shared ? t : path[t - shared]) * stride;
              },
              static_cast<std::size_t>(head_dim), out);
        }
      }
    }
  }

  GptWeights weights_;
  std::size_t chunk_rows_;
  std::size_t max_tree_nodes_;
  std::size_t batch_rows_;
  // max(chunk_rows_, max_tree_nodes_ + 1, batch_rows_): rows of one chunk
  std::size_t scratch_rows_ = 0;

  // Run state, allocated once in the constructor (chunk = up to scratch_rows_ new slots at a
  // time; slots = max_context + max_tree_nodes K/V rows).
  RowMajorMatrixXf residual_;    // (chunk, d_model)  residual stream x
  RowMajorMatrixXf normed_;      // (chunk, d_model)  layer-norm output, input of qkv / fc1 / head
  RowMajorMatrixXf query_;       // (chunk, d_model)  q of the new positions, heads concatenated
  RowMajorMatrixXf attention_;   // (chunk, d_model)  attention output, heads concatenated
  RowMajorMatrixXf hidden_;      // (chunk, d_ff)     MLP hidden activations
  RowMajorMatrixXf branch_;      // (chunk, d_model)  proj / fc2 output, added to the residual
  RowMajorMatrixXf new_keys_;    // (chunk, d_model)  k of a chunk of several segments
  RowMajorMatrixXf new_values_;  // (chunk, d_model)  v of a chunk of several segments
  // (max(max_context, max_tree_nodes + 1, the largest batched call's rows), vocab_size): a call's
  // rows; a batched call with more rows than any before grows it.
  RowMajorMatrixXf logits_;
  // The single-sequence calls' cache: positions [0, size) at slots [0, size), then the last
  // tree's nodes (slots = max_context + max_tree_nodes).
  SequenceCache own_;
  // The batched calls' caches by sequence id (slots = max_context each), created on an id's first
  // call, dropped by release(id).
  std::unordered_map<specdec::sequence_id, SequenceCache> sequence_caches_;
  std::vector<BatchRequest> batch_;          // the batched call being run, request by request
  std::vector<std::size_t> checked_depths_;  // (max_tree_nodes) depths while a tree is checked
  std::vector<token_t> chunk_tokens_;        // (chunk) a tree call's last chunk, slot by slot
  std::size_t tree_start_ = 0;  // the tree being scored: committed length (slot of node 0) ...
  std::size_t tree_nodes_ = 0;  // ... and node count; 0 in chain calls
  std::uint64_t positions_computed_ = 0;

  // Per thread of a call (index 0: the caller), sized by set_threads.
  std::vector<RowMajorMatrixXf> thread_scores_;  // (threads) x (chunk, slots) a head's weights
  std::vector<std::vector<std::size_t>> thread_path_slots_;  // (threads) x (max_tree_nodes)
  // The call being run: its chunks and their segments (capacity reserved in the constructor for
  // single-sequence calls) and the phase that is open, written only by the thread that opens a
  // phase (begin_chunk, finish_phase).
  std::vector<Chunk> chunks_;
  std::vector<Segment> segments_;
  std::size_t logit_rows_ = 0;  // rows of logits the chunks so far produce
  std::size_t chunk_index_ = 0;
  std::size_t layer_ = 0;
  Step step_ = Step::attention;
  std::uint32_t items_ = 1;  // of the open phase
  // Last: destroyed first, so no worker outlives the buffers (workers touch them only inside a
  // call, but joining first keeps that obvious).
  std::unique_ptr<detail::PhasePool> pool_;  // null with one thread
};

}  // namespace specdec::examples

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

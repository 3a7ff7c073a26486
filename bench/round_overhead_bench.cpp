/// \file
/// \brief Library overhead per speculative round, with free models.
///
/// The models cost nothing: they return views into precomputed logits (a pool of P rows per
/// vocabulary size; see bench_logits.hpp), so everything timed is specdec itself: the decoder
/// loop, draft processing + sampling (keeping q), target processing, verification, residual /
/// bonus sampling, log-probs, statistics. We run the real SpeculativeDecoder: one benchmark
/// iteration is one generate() of kBudget tokens, and the per-round figures come from the
/// chunk callback, which the decoder calls once at the end of every round: the time and the
/// allocations between the first and the last callback, divided by the rounds in between, are
/// the steady-state cost of a round (generate()'s own setup — result vectors, stats vectors,
/// the context copy — is excluded there and reported separately as round_us_all / allocs_gen).
/// The callback's own cost (a steady_clock read, a counter read: ~30 ns) is measured and
/// subtracted (probe_us). It reads no thread-CPU clock: that is a system call on this VM, and
/// one per round slowed the round itself by 10-15 us (measured: a greedy round at V = 32000
/// went from 26 to 11-15 us without it), far more than the call costs in a tight loop (the
/// kernel entry disturbs the caches and predictors the next round uses), so subtracting it
/// could not undo it. CPU time is therefore taken per generate() (round_cpu_us: thread CPU of
/// the whole call / its rounds, setup included).
///
/// Acceptance is made realistic (~0.8 at T = 1) by drawing draft rows as target rows plus
/// calibrated Gaussian noise. Draft row for a context of length L is pool row L mod P; target
/// row i of a call (context of length L, n rows) follows L - n + 1 + i tokens, so it is pool row
/// (L - n + 1 + i) mod P: draft and target agree on which position they score, and the target's
/// n rows are contiguous in a table extended by K_max + 1 wrapped rows (zero-copy span).
///
/// Baselines, over the same pool rows (same memory traffic): a plain max pass
/// (Eigen maxCoeff over a row) and an exp-sum pass ((row.array() - m).exp().sum()). They are
/// registered as benchmarks of their own (BM_MaxPass, BM_ExpSumPass) and are also re-measured
/// inside every round benchmark, right before and after its timed loop, so the ratios below
/// compare numbers taken under the same machine conditions:
///   rows_per_round    = drafted/rounds + emitted/rounds (K_eff draft rows + target rows
///                       actually processed: lazily, a rejection at j processes rows 0..j, so
///                       target rows = accepted + 1 = emitted tokens of the round)
///   per_row_vs_expsum = round time / (rows_per_round * exp-sum time per row)
///   vs_max_passes     = round time / (rows_per_round * max-pass time per row)   (greedy runs)
///   allocs_round      = operator new / malloc calls per steady-state round (alloc_counter.hpp)
///
/// Cache caveat: a round after a partial acceptance re-reads positions the previous round read
/// (its draft rows overlap), so at V = 32000 (128 KiB rows) part of a round may hit L2, while
/// the baselines stream 32 distinct rows from L3; at V >= 128256 (5 rows = 2.5 MiB) no row
/// survives in L2 between rounds. Real models' logits are usually cache-hot too (just written).
///
/// Targets (compared in the report, never asserted): per_row_vs_expsum <= 1.25; V = 128256,
/// K = 5, T = 1: round <= 0.6 ms; greedy: vs_max_passes <= 2; allocs_round = 0.
///
/// Kernel breakdown (BM_Kernel_*): the public pure functions the decoder calls, one row at a
/// time, to attribute a round's cost: process_logits (target row), draft row (process_logits
/// with weights and block sums + sample_from_weights), residual sampling, argmax.

#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <numeric>
#include <random>
#include <span>
#include <string>
#include <vector>

#include <time.h>

#include <Eigen/Core>

#include "alloc_counter.hpp"
#include "bench_logits.hpp"
#include "specdec/specdec.hpp"

namespace {

using specdec::token_t;
using Clock = std::chrono::steady_clock;

/// CPU time of this thread in seconds. The machine may be shared (the lead reruns on a quiet
/// one); CPU time is what this process actually got, so the *_cpu figures are less disturbed
/// by other load than the wall-clock ones (they still include cache pollution).
double thread_cpu_seconds() noexcept {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

constexpr std::size_t kPoolRows = 16;  // P distinct positions
constexpr std::size_t kMaxDraft = 8;   // largest K benchmarked
constexpr std::size_t kBudget = 128;   // tokens per generate()
constexpr std::size_t kPromptLength = 8;
constexpr double kTargetAcceptance = 0.8;  // mean sum_x min(p, q) at T = 1
constexpr double kGreedyAgreement = 0.8;   // fraction of rows whose argmaxes agree

/// Precomputed logits for one vocabulary size.
struct Pool {
  std::size_t V = 0;
  std::vector<float> target;    // (P + kMaxDraft + 1) x V, row r = base row r mod P
  std::vector<float> draft;     // P x V
  double overlap = 0;           // achieved mean overlap (T = 1, no filters)
  double greedy_agreement = 0;  // fraction of rows where argmax(draft) == argmax(target)
  float noise = 0;

  [[nodiscard]] std::span<const float> target_row(std::size_t r) const {
    return {target.data() + r * V, V};
  }
  [[nodiscard]] std::span<const float> draft_row(std::size_t r) const {
    return {draft.data() + r * V, V};
  }
};

const Pool& pool_for(std::size_t V) {
  static std::map<std::size_t, std::unique_ptr<Pool>> pools;
  auto& slot = pools[V];
  if (slot) return *slot;
  auto pool = std::make_unique<Pool>();
  pool->V = V;
  std::mt19937_64 gen(0x5eedu + V);
  std::vector<float> base(kPoolRows * V);
  for (std::size_t r = 0; r < kPoolRows; ++r) {
    specdec_bench::fill_target_row(std::span<float>(base).subspan(r * V, V), gen);
  }
  std::vector<float> unit(kPoolRows * V);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (float& x : unit) x = normal(gen);
  pool->draft.resize(kPoolRows * V);
  pool->overlap = specdec_bench::calibrate_noise(base, unit, kPoolRows, V, kTargetAcceptance,
                                                 kGreedyAgreement, pool->draft, &pool->noise);
  const std::size_t extended = kPoolRows + kMaxDraft + 1;
  pool->target.resize(extended * V);
  for (std::size_t r = 0; r < extended; ++r) {
    std::copy_n(base.begin() + static_cast<std::ptrdiff_t>((r % kPoolRows) * V), V,
                pool->target.begin() + static_cast<std::ptrdiff_t>(r * V));
  }
  std::size_t agree = 0;
  for (std::size_t r = 0; r < kPoolRows; ++r) {
    agree += specdec::argmax(pool->draft_row(r)) == specdec::argmax(pool->target_row(r));
  }
  pool->greedy_agreement = static_cast<double>(agree) / kPoolRows;
  slot = std::move(pool);
  return *slot;
}

/// Free draft model: a view of pool row (context length mod P).
struct PoolDraft {
  const Pool* pool;
  std::span<const float> operator()(std::span<const token_t> context) const {
    return pool->draft_row(context.size() % kPoolRows);
  }
};

/// Free target model: n contiguous rows starting at pool row (L - n + 1) mod P.
struct PoolTarget {
  const Pool* pool;
  std::span<const float> operator()(std::span<const token_t> context, std::size_t n) const {
    const std::size_t first = (context.size() + 1 - n) % kPoolRows;
    return {pool->target.data() + first * pool->V, n * pool->V};
  }
};

// ---- baselines ----------------------------------------------------------------------------

using RowMap = Eigen::Map<const Eigen::VectorXf>;

float max_pass(std::span<const float> row) {
  return RowMap(row.data(), static_cast<Eigen::Index>(row.size())).maxCoeff();
}
float expsum_pass(std::span<const float> row, float m) {
  return (RowMap(row.data(), static_cast<Eigen::Index>(row.size())).array() - m).exp().sum();
}

/// Visits the pool rows a round touches (draft rows and target rows alternately).
template <class F>
void for_pool_rows(const Pool& pool, F&& f) {
  for (std::size_t r = 0; r < kPoolRows; ++r) {
    f(pool.draft_row(r));
    f(pool.target_row(r));
  }
}

struct BaselineTimes {
  double max_seconds = 0;         // per row, wall
  double expsum_seconds = 0;      // per row, wall
  double max_cpu_seconds = 0;     // per row, thread CPU
  double expsum_cpu_seconds = 0;  // per row, thread CPU
};

/// Mean time per row of the two baseline passes over every pool row, repeated for at least
/// ~`min_seconds` of each pass (long enough that a preemption does not dominate).
BaselineTimes measure_baselines(const Pool& pool, double min_seconds = 0.02) {
  const double per_sweep_guess = 2.0 * kPoolRows * static_cast<double>(pool.V) * 0.5e-9;
  const int sweeps = std::max(2, static_cast<int>(min_seconds / per_sweep_guess));
  std::vector<float> maxima(2 * kPoolRows);
  for (std::size_t r = 0; r < kPoolRows; ++r) {
    maxima[2 * r] = max_pass(pool.draft_row(r));
    maxima[2 * r + 1] = max_pass(pool.target_row(r));
  }
  BaselineTimes t;
  const double rows = static_cast<double>(sweeps) * 2 * kPoolRows;
  auto start = Clock::now();
  double cpu_start = thread_cpu_seconds();
  for (int s = 0; s < sweeps; ++s) {
    for_pool_rows(pool,
                  [](std::span<const float> row) { benchmark::DoNotOptimize(max_pass(row)); });
  }
  t.max_seconds = std::chrono::duration<double>(Clock::now() - start).count() / rows;
  t.max_cpu_seconds = (thread_cpu_seconds() - cpu_start) / rows;
  start = Clock::now();
  cpu_start = thread_cpu_seconds();
  for (int s = 0; s < sweeps; ++s) {
    std::size_t i = 0;
    for_pool_rows(pool, [&](std::span<const float> row) {
      benchmark::DoNotOptimize(expsum_pass(row, maxima[i++]));
    });
  }
  t.expsum_seconds = std::chrono::duration<double>(Clock::now() - start).count() / rows;
  t.expsum_cpu_seconds = (thread_cpu_seconds() - cpu_start) / rows;
  return t;
}

void BM_MaxPass(benchmark::State& state) {
  const Pool& pool = pool_for(static_cast<std::size_t>(state.range(0)));
  std::size_t r = 0;
  for (auto _ : state) {
    const auto row =
        (r & 1) ? pool.target_row((r >> 1) % kPoolRows) : pool.draft_row((r >> 1) % kPoolRows);
    benchmark::DoNotOptimize(max_pass(row));
    ++r;
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()) * state.range(0));
}

void BM_ExpSumPass(benchmark::State& state) {
  const Pool& pool = pool_for(static_cast<std::size_t>(state.range(0)));
  std::vector<float> maxima(2 * kPoolRows);
  for (std::size_t r = 0; r < kPoolRows; ++r) {
    maxima[2 * r] = max_pass(pool.draft_row(r));
    maxima[2 * r + 1] = max_pass(pool.target_row(r));
  }
  std::size_t r = 0;
  for (auto _ : state) {
    const std::size_t i = r % (2 * kPoolRows);
    const auto row = (i & 1) ? pool.target_row(i >> 1) : pool.draft_row(i >> 1);
    benchmark::DoNotOptimize(expsum_pass(row, maxima[i]));
    ++r;
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()) * state.range(0));
}

// ---- one speculative round, through the real decoder ---------------------------------------

/// Args: V, K, temperature (0 or 1), top_p on (0.9) / off, logprobs on / off, verifier (0 =
/// token-level, 1 = block, 2 = token-level chosen at compile time: StrategyDecoder with
/// TokenVerifier instead of SpeculativeDecoder's run-time ConfiguredVerifier).
template <bool kCompileTimeVerifier>
void run_round_benchmark(benchmark::State& state) {
  const auto V = static_cast<std::size_t>(state.range(0));
  const auto K = static_cast<std::size_t>(state.range(1));
  const bool greedy = state.range(2) == 0;
  const bool top_p = state.range(3) != 0;
  const bool logprobs = state.range(4) != 0;
  const bool block = state.range(5) == 1;
  const Pool& pool = pool_for(V);

  PoolDraft draft{&pool};
  PoolTarget target{&pool};
  auto decoder = [&] {
    if constexpr (kCompileTimeVerifier) {
      return specdec::StrategyDecoder(target, specdec::ModelProposer(draft),
                                      specdec::StaticDraftLength{}, specdec::TokenVerifier{});
    } else {
      return specdec::SpeculativeDecoder(draft, target);
    }
  }();
  specdec::GenerationConfig config;
  config.draft_length = K;
  config.max_new_tokens = kBudget;
  config.sampling.temperature = greedy ? 0.0f : 1.0f;
  config.sampling.top_p = top_p ? 0.9f : 1.0f;
  config.logprobs = logprobs;
  config.verifier = block ? specdec::VerifierKind::block : specdec::VerifierKind::token;
  std::vector<token_t> prompt(kPromptLength);
  std::iota(prompt.begin(), prompt.end(), token_t{1});

  // Steady-state window, filled by the chunk callback.
  std::size_t callbacks = 0;
  Clock::time_point first_time, last_time;
  std::uint64_t first_allocs = 0, last_allocs = 0;
  auto on_chunk = [&](std::span<const token_t>) {
    const auto allocs = specdec_bench::allocation_count();
    const auto now = Clock::now();
    if (callbacks == 0) {
      first_time = now;
      first_allocs = allocs;
    }
    last_time = now;
    last_allocs = allocs;
    ++callbacks;
    return true;
  };

  // The probe itself (a clock read and a counter read) runs once per round inside the window;
  // measure it and subtract it from the per-round figures.
  double probe_wall = 0;
  {
    constexpr int kProbes = 2000;
    const auto w0 = Clock::now();
    for (int i = 0; i < kProbes; ++i) {
      benchmark::DoNotOptimize(specdec_bench::allocation_count());
      benchmark::DoNotOptimize(Clock::now());
    }
    probe_wall = std::chrono::duration<double>(Clock::now() - w0).count() / kProbes;
  }

  // Warm-up: sizes the decoder's buffers (the first generate() allocates them).
  config.seed = 12345;
  (void)decoder.generate(prompt, config);

  const BaselineTimes before = measure_baselines(pool);

  double window_seconds = 0, total_seconds = 0, total_cpu_seconds = 0;
  std::uint64_t window_allocs = 0, total_allocs = 0;
  std::size_t window_rounds = 0, rounds = 0, drafted = 0, emitted = 0, accepted = 0;
  std::size_t rejecting_rounds = 0;
  std::size_t generates = 0;
  std::uint64_t seed = 1;
  for (auto _ : state) {
    config.seed = seed++;
    callbacks = 0;
    const auto allocs0 = specdec_bench::allocation_count();
    const double cpu0 = thread_cpu_seconds();
    const auto t0 = Clock::now();
    specdec::GenerationResult result = decoder.generate(prompt, config, on_chunk);
    const auto t1 = Clock::now();
    total_cpu_seconds += thread_cpu_seconds() - cpu0;
    const auto allocs1 = specdec_bench::allocation_count();
    benchmark::DoNotOptimize(result.tokens.data());
    total_seconds += std::chrono::duration<double>(t1 - t0).count();
    total_allocs += allocs1 - allocs0;
    if (callbacks >= 2) {
      window_seconds += std::chrono::duration<double>(last_time - first_time).count();
      window_allocs += last_allocs - first_allocs;
      window_rounds += callbacks - 1;
    }
    const specdec::DecodeStats& s = result.stats;
    rounds += s.rounds;
    drafted += s.drafted;
    emitted += s.emitted;
    accepted += s.accepted;
    rejecting_rounds += s.rejecting_rounds;
    ++generates;
  }

  const BaselineTimes after = measure_baselines(pool);
  const double expsum = 0.5 * (before.expsum_seconds + after.expsum_seconds);
  const double maxp = 0.5 * (before.max_seconds + after.max_seconds);
  const double expsum_cpu = 0.5 * (before.expsum_cpu_seconds + after.expsum_cpu_seconds);
  const double maxp_cpu = 0.5 * (before.max_cpu_seconds + after.max_cpu_seconds);

  const double windows = static_cast<double>(std::max<std::size_t>(window_rounds, 1));
  const double round_s = std::max(0.0, window_seconds / windows - probe_wall);
  // Whole generate() calls (setup included), with the probe's share removed.
  const double round_cpu_s = std::max(
      0.0, total_cpu_seconds / static_cast<double>(rounds) -
               probe_wall * static_cast<double>(window_rounds) / static_cast<double>(rounds));
  // Target rows processed: accepted + 1 = emitted per round for token-level (lazy); for block
  // verification rows 0..n-1 always and row n when the whole block is kept (rounds without a
  // rejection). Block's residual-mass passes are extra work, not rows.
  const double target_rows = block ? static_cast<double>(drafted + rounds - rejecting_rounds)
                                   : static_cast<double>(emitted);
  const double rows = (static_cast<double>(drafted) + target_rows) / static_cast<double>(rounds);
  state.counters["round_us"] = round_s * 1e6;
  state.counters["probe_us"] = probe_wall * 1e6;
  state.counters["round_cpu_us"] = round_cpu_s * 1e6;
  state.counters["round_us_all"] = (total_seconds / static_cast<double>(rounds) - probe_wall) * 1e6;
  state.counters["rows_per_round"] = rows;
  state.counters["tok_per_round"] = static_cast<double>(emitted) / static_cast<double>(rounds);
  state.counters["accept_rate"] =
      drafted ? static_cast<double>(accepted) / static_cast<double>(drafted) : 0.0;
  state.counters["alpha_hat"] =
      static_cast<double>(accepted) / static_cast<double>(accepted + rejecting_rounds);
  state.counters["expsum_us"] = expsum * 1e6;
  state.counters["max_us"] = maxp * 1e6;
  state.counters["expsum_cpu_us"] = expsum_cpu * 1e6;
  state.counters["max_cpu_us"] = maxp_cpu * 1e6;
  state.counters["per_row_vs_expsum"] = round_s / (rows * expsum);
  state.counters["per_row_vs_expsum_cpu"] = round_cpu_s / (rows * expsum_cpu);
  if (greedy) {
    state.counters["vs_max_passes"] = round_s / (rows * maxp);
    state.counters["vs_max_passes_cpu"] = round_cpu_s / (rows * maxp_cpu);
  }
  state.counters["allocs_round"] =
      window_rounds ? static_cast<double>(window_allocs) / static_cast<double>(window_rounds) : 0;
  state.counters["allocs_gen"] = static_cast<double>(total_allocs) / static_cast<double>(generates);
  state.SetLabel(std::string(greedy ? "greedy" : (top_p ? "T=1 top_p=0.9" : "T=1")) +
                 (block ? " block" : "") + (kCompileTimeVerifier ? " compile-time" : ""));
}

void BM_Round(benchmark::State& state) {
  if (state.range(5) == 2) {
    run_round_benchmark<true>(state);
  } else {
    run_round_benchmark<false>(state);
  }
}

void round_args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"V", "K", "T", "top_p", "logprobs", "verifier"});
  for (const std::int64_t V : {32000, 128256, 151936}) {
    for (const std::int64_t K : {1, 4, 5, 8}) {
      for (const std::int64_t T : {0, 1}) {
        for (const std::int64_t top_p : {0, 1}) {
          b->Args({V, K, T, top_p, 1, 0});
          // Greedy log-probs cost a log-softmax per emitted token; also show greedy without.
          if (T == 0 && top_p == 0) b->Args({V, K, T, top_p, 0, 0});
          // Block verification (sampled rounds): every target row plus a residual-mass pass.
          if (T == 1 && V != 151936) b->Args({V, K, T, top_p, 1, 1});
          // The built-in verifier chosen at compile time, against the run-time choice.
          if (T == 1 && top_p == 0 && V != 151936) b->Args({V, K, T, top_p, 1, 2});
        }
      }
    }
  }
}

// ---- kernel breakdown: the pure functions a round is made of -------------------------------

specdec::SamplingParams params_for(bool top_p) {
  specdec::SamplingParams p;
  p.temperature = 1.0f;
  p.top_p = top_p ? 0.9f : 1.0f;
  return p;
}

/// Target-row path: process_logits (one pass unfiltered; max + top-p with top-p).
void BM_Kernel_TargetRow(benchmark::State& state) {
  const Pool& pool = pool_for(static_cast<std::size_t>(state.range(0)));
  const auto params = params_for(state.range(1) != 0);
  std::vector<float> filter_scratch(pool.V);
  std::size_t r = 0;
  for (auto _ : state) {
    auto dist = specdec::process_logits(pool.target_row(r++ % kPoolRows), params, filter_scratch);
    benchmark::DoNotOptimize(dist.normalizer);
  }
}

/// Draft-row path, as the decoder runs it: process_logits storing weights and block sums into
/// an aligned buffer (one pass unfiltered; max + top-p + mask with top-p) + inverse CDF.
void BM_Kernel_DraftRow(benchmark::State& state) {
  const Pool& pool = pool_for(static_cast<std::size_t>(state.range(0)));
  const auto params = params_for(state.range(1) != 0);
  std::vector<float> filter_scratch(pool.V);
  std::vector<float, Eigen::aligned_allocator<float>> weights(pool.V);
  std::vector<float> block_sums(specdec::weight_block_count(pool.V));
  specdec::Rng rng(7);
  std::size_t r = 0;
  for (auto _ : state) {
    const std::span<float> w(weights.data(), pool.V);
    auto q = specdec::process_logits(pool.draft_row(r++ % kPoolRows), params, filter_scratch, w,
                                     std::span<float>(block_sums));
    benchmark::DoNotOptimize(q.normalizer);
    benchmark::DoNotOptimize(specdec::sample_from_weights(
        std::span<const float>(w), std::span<const float>(block_sums), rng.uniform01()));
  }
}

/// Rejection: residual max(0, p - q) over V + inverse CDF (p already processed).
void BM_Kernel_Residual(benchmark::State& state) {
  const Pool& pool = pool_for(static_cast<std::size_t>(state.range(0)));
  const auto params = params_for(state.range(1) != 0);
  std::vector<float> filter_scratch(pool.V), weights(pool.V), scratch(pool.V);
  auto q =
      specdec::process_logits(pool.draft_row(0), params, filter_scratch, std::span<float>(weights));
  auto p = specdec::process_logits(pool.target_row(0), params, filter_scratch);
  specdec::Rng rng(7);
  for (auto _ : state) {
    benchmark::DoNotOptimize(specdec::sample_residual(p, std::span<const float>(weights),
                                                      q.normalizer, rng.uniform01(),
                                                      std::span<float>(scratch)));
  }
}

/// sample() from a row processed without recorded block sums: a summing exp pass + one block.
/// (The decoder's target rows record their block sums, so its bonus sample skips the pass.)
void BM_Kernel_Sample(benchmark::State& state) {
  const Pool& pool = pool_for(static_cast<std::size_t>(state.range(0)));
  const auto params = params_for(state.range(1) != 0);
  std::vector<float> filter_scratch(pool.V), scratch(pool.V);
  auto p = specdec::process_logits(pool.target_row(0), params, filter_scratch);
  specdec::Rng rng(7);
  for (auto _ : state) {
    benchmark::DoNotOptimize(specdec::sample(p, rng.uniform01(), std::span<float>(scratch)));
  }
}

/// Greedy rows: argmax (one max pass + one block) and the greedy log-prob (logsumexp).
void BM_Kernel_Argmax(benchmark::State& state) {
  const Pool& pool = pool_for(static_cast<std::size_t>(state.range(0)));
  std::size_t r = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(specdec::argmax(pool.target_row(r++ % kPoolRows)));
  }
}
void BM_Kernel_Logsumexp(benchmark::State& state) {
  const Pool& pool = pool_for(static_cast<std::size_t>(state.range(0)));
  std::size_t r = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(specdec::logsumexp(pool.target_row(r++ % kPoolRows)));
  }
}

/// Pool statistics (calibration), as counters of a trivial benchmark.
void BM_PoolInfo(benchmark::State& state) {
  const Pool& pool = pool_for(static_cast<std::size_t>(state.range(0)));
  for (auto _ : state) benchmark::DoNotOptimize(pool.V);
  state.counters["overlap_T1"] = pool.overlap;
  state.counters["greedy_agree"] = pool.greedy_agreement;
  state.counters["noise"] = pool.noise;
}

void vocab_args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"V"});
  for (const std::int64_t V : {32000, 128256, 151936}) b->Args({V});
}
void vocab_top_p_args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"V", "top_p"});
  for (const std::int64_t V : {32000, 128256, 151936}) {
    b->Args({V, 0});
    b->Args({V, 1});
  }
}

}  // namespace

BENCHMARK(BM_PoolInfo)->Apply(vocab_args)->Iterations(1);
BENCHMARK(BM_MaxPass)->Apply(vocab_args);
BENCHMARK(BM_ExpSumPass)->Apply(vocab_args);
BENCHMARK(BM_Kernel_TargetRow)->Apply(vocab_top_p_args);
BENCHMARK(BM_Kernel_DraftRow)->Apply(vocab_top_p_args);
BENCHMARK(BM_Kernel_Residual)->Apply(vocab_top_p_args);
BENCHMARK(BM_Kernel_Sample)->Apply(vocab_top_p_args);
BENCHMARK(BM_Kernel_Argmax)->Apply(vocab_args);
BENCHMARK(BM_Kernel_Logsumexp)->Apply(vocab_args);
BENCHMARK(BM_Round)->Apply(round_args)->Unit(benchmark::kMillisecond);

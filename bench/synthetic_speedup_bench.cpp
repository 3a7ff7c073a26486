/// \file
/// \brief End-to-end speedup with cost-controlled synthetic models, against the prediction.
///
/// The models burn a fixed time per call (busy-wait, so the cost is exact and does not
/// depend on the scheduler's sleep granularity; CPU time by default, see busy_wait):
///   target: kTargetCost per call, flat in n (scoring 1 or K+1 rows costs the same, as for a
///           memory-bound LLM forward pass on a small batch);
///   draft:  c * kTargetCost per call.
/// Logits come from small context-dependent tables (V = 256): the target row after a context
/// is table row [last token]; the draft row is the same row plus Gaussian noise whose scale is
/// calibrated row by row so that every row's acceptance probability sum_x min(p, q) is alpha
/// (T = 1, no filters). The rows visited form a dependent chain (the next row is picked by the
/// sampled token), but since every row accepts with the same probability, acceptances at
/// consecutive positions are i.i.d.: exactly the geometric model's assumption.
///
/// Each benchmark iteration runs, for the same prompt and seed, AutoregressiveDecoder (one
/// target call per token: the baseline) and then SpeculativeDecoder, each for the same budget
/// of tokens (256: the last round of a generate() is cut short by the budget, which the
/// per-round formula does not model; simulated, that costs measured/predicted ~1 % at 256
/// tokens for alpha = 0.9, K = 8, ~2 % at 128, 0.4 % at 512).
/// Counters (over all iterations of one run):
///   ar_tok_s, spec_tok_s  measured tokens per second
///   speedup               spec_tok_s / ar_tok_s (same run, same prompts and seeds)
///   alpha_hat, c_hat      the decoder's DecodeStats::alpha_hat() / cost_ratio() (summed stats)
///   tau                   tokens per round
///   predicted             (1 - a^(K+1)) / ((1 - a)(K c + 1)) with a = alpha_hat, c = c_hat
///   meas_vs_pred          speedup / predicted (target >= 0.97)
///   lib_frac              library_seconds / total_seconds of the speculative runs
///   speedup_cpu           the same ratio from thread CPU seconds (see busy_wait)
///   pred_nominal_c        predicted with the configured c instead of c_hat
///   cpu_vs_pred           speedup_cpu / pred_nominal_c: the comparison that survives a loaded
///                         machine (with cpu spinning, CPU time = quiet-machine wall time)
/// The benchmark's own time column is the speculative generate() time (manual time).
///
/// Environment overrides (for quick runs): SPECDEC_BENCH_TARGET_MS (default 2),
/// SPECDEC_BENCH_TOKENS (default 256), SPECDEC_BENCH_ITERS (default 2),
/// SPECDEC_BENCH_SPIN (cpu | wall, default cpu), SPECDEC_BENCH_FORGETTING (the goodput
/// policy's GoodputOptions::forgetting).

#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>

#include <time.h>

#include "bench_logits.hpp"
#include "specdec/specdec.hpp"

namespace {

using specdec::token_t;
using Clock = std::chrono::steady_clock;

constexpr std::size_t kVocab = 256;
constexpr std::size_t kMaxDraft = 8;
constexpr std::size_t kPromptLength = 4;

double env_double(const char* name, double fallback) {
  const char* v = std::getenv(name);
  return v ? std::strtod(v, nullptr) : fallback;
}
double target_cost_seconds() { return env_double("SPECDEC_BENCH_TARGET_MS", 2.0) * 1e-3; }
std::size_t budget() { return static_cast<std::size_t>(env_double("SPECDEC_BENCH_TOKENS", 256)); }
std::int64_t iterations() {
  return static_cast<std::int64_t>(env_double("SPECDEC_BENCH_ITERS", 2));
}

double thread_cpu_seconds() noexcept {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

/// SPECDEC_BENCH_SPIN=wall spins on the steady clock; the default (cpu) spins until this
/// thread has consumed the cost in CPU time. On a quiet machine the two are the same; on a
/// loaded one a wall-clock spin that gets preempted overruns its deadline by a scheduler slice
/// (a 2 ms target call then "costs" 5 ms while a 0.1 ms draft call rarely overruns, which
/// skews c), whereas a CPU-time spin makes every call cost exactly its share of compute and
/// stretches all of them by the same factor.
bool spin_on_wall_clock() {
  const char* v = std::getenv("SPECDEC_BENCH_SPIN");
  return v != nullptr && std::string(v) == "wall";
}

void raw_spin(double seconds, bool wall) {
  if (wall) {
    const auto end = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                        std::chrono::duration<double>(seconds));
    while (Clock::now() < end) {
    }
  } else {
    const double end = thread_cpu_seconds() + seconds;
    while (thread_cpu_seconds() < end) {
    }
  }
}

/// What one raw_spin call costs beyond its argument (clock reads, the final overshoot), in the
/// same time base: a few microseconds for the CPU clock, whose reads are system calls. Without
/// this correction a 0.1 ms draft call would cost ~5 % more than asked, i.e. c 5 % too large.
double spin_overhead_seconds() {
  static const double overhead = [] {
    const bool wall = spin_on_wall_clock();
    constexpr double kProbe = 50e-6;
    constexpr int kCalls = 400;
    double best = 1.0;
    for (int trial = 0; trial < 3; ++trial) {  // min over trials: ignore a preempted trial
      const double c0 = wall ? 0.0 : thread_cpu_seconds();
      const auto w0 = Clock::now();
      for (int i = 0; i < kCalls; ++i) raw_spin(kProbe, wall);
      const double elapsed = wall ? std::chrono::duration<double>(Clock::now() - w0).count()
                                  : thread_cpu_seconds() - c0;
      best = std::min(best, elapsed / kCalls - kProbe);
    }
    return std::max(0.0, best);
  }();
  return overhead;
}

/// Burns `seconds` of (CPU or wall, see above) time, corrected for the spin's own overhead.
void busy_wait(double seconds) {
  static const bool wall = spin_on_wall_clock();
  raw_spin(std::max(0.0, seconds - spin_overhead_seconds()), wall);
}

/// The benchmarks' prompt for `seed`: kPromptLength tokens drawn from it.
std::vector<token_t> random_prompt(std::uint64_t seed) {
  std::vector<token_t> prompt(kPromptLength);
  std::mt19937_64 prompt_gen(seed);
  for (auto& t : prompt) t = static_cast<token_t>(prompt_gen() % kVocab);
  return prompt;
}

/// Wall and thread-CPU seconds of one run, added to `wall` and `cpu`.
struct RunTimes {
  double wall = 0, cpu = 0;
};

template <class Decoder>
specdec::GenerationResult timed_generate(Decoder& decoder, std::span<const token_t> prompt,
                                         const specdec::GenerationConfig& config, RunTimes& times) {
  const double c0 = thread_cpu_seconds();
  const auto t0 = Clock::now();
  specdec::GenerationResult result = decoder.generate(prompt, config);
  times.wall += std::chrono::duration<double>(Clock::now() - t0).count();
  times.cpu += thread_cpu_seconds() - c0;
  return result;
}

/// Target table (row = last token) and, per alpha, the calibrated draft table.
struct Tables {
  std::vector<float> target;  // kVocab x kVocab
  std::vector<float> draft;   // kVocab x kVocab
  double overlap = 0;         // achieved mean sum_x min(p, q)
};

const Tables& tables_for(int alpha_percent) {
  static std::map<int, std::unique_ptr<Tables>> cache;
  auto& slot = cache[alpha_percent];
  if (slot) return *slot;
  auto t = std::make_unique<Tables>();
  std::mt19937_64 gen(0xabcdefu);  // same target table for every alpha
  t->target.resize(kVocab * kVocab);
  for (std::size_t r = 0; r < kVocab; ++r) {
    specdec_bench::fill_target_row(std::span<float>(t->target).subspan(r * kVocab, kVocab), gen);
  }
  std::vector<float> unit(kVocab * kVocab);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (float& x : unit) x = normal(gen);
  t->draft.resize(kVocab * kVocab);
  t->overlap = specdec_bench::calibrate_noise_per_row(t->target, unit, kVocab, kVocab,
                                                      alpha_percent / 100.0, t->draft);
  slot = std::move(t);
  return *slot;
}

struct BusyDraft {
  const Tables* tables;
  double cost;
  std::span<const float> operator()(std::span<const token_t> context) const {
    busy_wait(cost);
    const auto r = static_cast<std::size_t>(context.back());
    return {tables->draft.data() + r * kVocab, kVocab};
  }
};

struct BusyTarget {
  const Tables* tables;
  double cost;
  std::vector<float> rows = std::vector<float>((kMaxDraft + 1) * kVocab);
  std::span<const float> operator()(std::span<const token_t> context, std::size_t n) {
    busy_wait(cost);
    // Row i follows the first L - n + 1 + i tokens: its last token is context[L - n + i].
    const std::size_t L = context.size();
    for (std::size_t i = 0; i < n; ++i) {
      const auto r = static_cast<std::size_t>(context[L - n + i]);
      std::copy_n(tables->target.data() + r * kVocab, kVocab, rows.data() + i * kVocab);
    }
    return {rows.data(), n * kVocab};
  }
};

/// The models and decoders of one benchmark, from its args: alpha (percent), c (percent), K.
/// Not movable: the decoders hold references to the models next to them.
struct SyntheticRun {
  explicit SyntheticRun(const benchmark::State& state)
      : tables(tables_for(static_cast<int>(state.range(0)))),
        c(static_cast<double>(state.range(1)) / 100.0),
        K(static_cast<std::size_t>(state.range(2))),
        draft{&tables, c * target_cost_seconds()},
        target{&tables, target_cost_seconds()} {
    config.draft_length = K;
    config.max_new_tokens = budget();
    config.sampling.temperature = 1.0f;
  }
  SyntheticRun(const SyntheticRun&) = delete;
  SyntheticRun& operator=(const SyntheticRun&) = delete;

  const Tables& tables;
  double c;
  std::size_t K;
  BusyDraft draft;
  BusyTarget target;
  specdec::SpeculativeDecoder<BusyDraft, BusyTarget> speculative{draft, target};
  specdec::AutoregressiveDecoder<BusyTarget> autoregressive{target};
  specdec::GenerationConfig config;
};

/// Args: alpha (percent), c (percent), K.
void BM_Speedup(benchmark::State& state) {
  SyntheticRun run(state);
  const Tables& tables = run.tables;
  const double c = run.c;
  const std::size_t K = run.K;
  auto& speculative = run.speculative;
  auto& autoregressive = run.autoregressive;
  specdec::GenerationConfig& config = run.config;

  static std::uint64_t next_seed = 1;  // fresh prompts/seeds per run, shared by both decoders
  double ar_seconds = 0, spec_seconds = 0, ar_cpu = 0, spec_cpu = 0;
  std::size_t ar_tokens = 0, spec_tokens = 0;
  specdec::DecodeStats sum;  // summed counters and seconds of the speculative runs
  for (auto _ : state) {
    const std::uint64_t seed = next_seed++;
    const std::vector<token_t> prompt = random_prompt(seed);
    config.seed = seed;

    const double c0 = thread_cpu_seconds();
    const auto t0 = Clock::now();
    const specdec::GenerationResult ar = autoregressive.generate(prompt, config);
    const auto t1 = Clock::now();
    const double c1 = thread_cpu_seconds();
    const specdec::GenerationResult sp = speculative.generate(prompt, config);
    const auto t2 = Clock::now();
    const double c2 = thread_cpu_seconds();
    ar_cpu += c1 - c0;
    spec_cpu += c2 - c1;

    const double spec_s = std::chrono::duration<double>(t2 - t1).count();
    ar_seconds += std::chrono::duration<double>(t1 - t0).count();
    spec_seconds += spec_s;
    ar_tokens += ar.tokens.size();
    spec_tokens += sp.tokens.size();
    const specdec::DecodeStats& s = sp.stats;
    sum.rounds += s.rounds;
    sum.drafted += s.drafted;
    sum.accepted += s.accepted;
    sum.emitted += s.emitted;
    sum.rejecting_rounds += s.rejecting_rounds;
    sum.draft_calls += s.draft_calls;
    sum.target_calls += s.target_calls;
    sum.draft_seconds += s.draft_seconds;
    sum.target_seconds += s.target_seconds;
    sum.total_seconds += s.total_seconds;
    sum.library_seconds += s.library_seconds;
    state.SetIterationTime(spec_s);
  }

  const double ar_rate = static_cast<double>(ar_tokens) / ar_seconds;
  const double spec_rate = static_cast<double>(spec_tokens) / spec_seconds;
  const double speedup = spec_rate / ar_rate;
  const double predicted = sum.predicted_speedup(K);
  state.counters["ar_tok_s"] = ar_rate;
  state.counters["spec_tok_s"] = spec_rate;
  state.counters["speedup"] = speedup;
  state.counters["alpha_hat"] = sum.alpha_hat();
  state.counters["c_hat"] = sum.cost_ratio();
  state.counters["tau"] = sum.tokens_per_round();
  state.counters["predicted"] = predicted;
  state.counters["meas_vs_pred"] = speedup / predicted;
  state.counters["lib_frac"] = sum.library_seconds / sum.total_seconds;
  // CPU-time view (robust on a loaded machine, equal to the wall view on a quiet one when the
  // models spin on CPU time): speedup from thread CPU seconds, predicted with the configured c.
  const double speedup_cpu =
      (static_cast<double>(spec_tokens) / spec_cpu) / (static_cast<double>(ar_tokens) / ar_cpu);
  const double predicted_nominal = specdec::predicted_speedup(sum.alpha_hat(), K, c);
  state.counters["speedup_cpu"] = speedup_cpu;
  state.counters["pred_nominal_c"] = predicted_nominal;
  state.counters["cpu_vs_pred"] = speedup_cpu / predicted_nominal;
  state.counters["table_alpha"] = tables.overlap;
  state.counters["spin_overhead_us"] = spin_overhead_seconds() * 1e6;
  state.SetLabel(spin_on_wall_clock() ? "wall-clock spin" : "cpu-time spin");
}

/// Token-level vs block verification, paired: each iteration runs plain decoding, then
/// speculative decoding with each verifier, for the same prompt and seed. Args: alpha (percent),
/// c (percent), K. Counters: tau_token / tau_block (tokens per round), tau_gain (block / token),
/// speedup_token / speedup_block (vs the plain run), block_vs_token (tokens/s ratio, same run),
/// and the CPU-time versions (*_cpu).
void BM_TokenVsBlock(benchmark::State& state) {
  SyntheticRun run(state);
  auto& speculative = run.speculative;
  auto& autoregressive = run.autoregressive;
  specdec::GenerationConfig& config = run.config;

  static std::uint64_t next_seed = 1'000'000;
  RunTimes times[3];
  std::size_t tokens[3] = {0, 0, 0}, rounds[3] = {0, 0, 0};
  for (auto _ : state) {
    const std::uint64_t seed = next_seed++;
    const std::vector<token_t> prompt = random_prompt(seed);
    config.seed = seed;
    const double before = times[0].wall + times[1].wall + times[2].wall;
    for (int which = 0; which < 3; ++which) {
      config.verifier = which == 2 ? specdec::VerifierKind::block : specdec::VerifierKind::token;
      const specdec::GenerationResult r =
          which == 0 ? timed_generate(autoregressive, prompt, config, times[which])
                     : timed_generate(speculative, prompt, config, times[which]);
      tokens[which] += r.tokens.size();
      rounds[which] += r.stats.rounds;
    }
    state.SetIterationTime(times[0].wall + times[1].wall + times[2].wall - before);
  }
  const double seconds[3] = {times[0].wall, times[1].wall, times[2].wall};
  const double cpu[3] = {times[0].cpu, times[1].cpu, times[2].cpu};
  auto rate = [&](int which, const double* time) {
    return static_cast<double>(tokens[which]) / time[which];
  };
  auto tau = [&](int which) {
    return static_cast<double>(tokens[which]) / static_cast<double>(rounds[which]);
  };
  state.counters["tau_token"] = tau(1);
  state.counters["tau_block"] = tau(2);
  state.counters["tau_gain"] = tau(2) / tau(1);
  state.counters["speedup_token"] = rate(1, seconds) / rate(0, seconds);
  state.counters["speedup_block"] = rate(2, seconds) / rate(0, seconds);
  state.counters["block_vs_token"] = rate(2, seconds) / rate(1, seconds);
  state.counters["block_vs_token_cpu"] = rate(2, cpu) / rate(1, cpu);
  state.SetLabel(spin_on_wall_clock() ? "wall-clock spin" : "cpu-time spin");
}

void token_vs_block_args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"alpha", "c", "K"});
  for (const std::int64_t alpha : {60, 80, 90}) {
    for (std::int64_t K = 1; K <= static_cast<std::int64_t>(kMaxDraft); ++K) {
      b->Args({alpha, 5, K});
    }
  }
}

void speedup_args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"alpha", "c", "K"});
  for (const std::int64_t alpha : {60, 80, 90}) {
    for (const std::int64_t c : {5, 10}) {
      for (std::int64_t K = 1; K <= static_cast<std::int64_t>(kMaxDraft); ++K) {
        b->Args({alpha, c, K});
      }
    }
  }
}

// ---- draft-length policies -------------------------------------------------------------------

/// The draft model of the policy benchmark: the calibrated table of `easy`, or of `hard` in
/// every other segment of `segment` positions (0: always easy: stationary acceptance).
struct SegmentedDraft {
  const Tables* easy;
  const Tables* hard;
  std::size_t segment;
  double cost;
  std::span<const float> operator()(std::span<const token_t> context) const {
    busy_wait(cost);
    const bool is_hard = segment != 0 && (context.size() / segment) % 2 == 1;
    const auto r = static_cast<std::size_t>(context.back());
    return {(is_hard ? hard : easy)->draft.data() + r * kVocab, kVocab};
  }
};

/// A target call's cost in one-row calls: 1 + row_cost (n - 1) for n rows, times step_factor
/// past step_rows rows (step_rows 0: no step). A CPU target's cost curve has such steps where
/// the rows outgrow a register tile or a cache (docs/benchmarks.md).
struct VerifyCostCurve {
  double row_cost = 0;
  std::size_t step_rows = 0;
  double step_factor = 1;
  [[nodiscard]] double operator()(std::size_t n) const noexcept {
    const double linear = 1.0 + row_cost * static_cast<double>(n - 1);
    return step_rows != 0 && n > step_rows ? linear * step_factor : linear;
  }
};

/// A target whose call costs cost * curve(n) for n rows (row_cost 0: flat, as a memory-bound GPU
/// forward; 0.1: CPU-like, each row adds 10 % of a one-row call).
struct RowCostTarget {
  const Tables* tables;
  double cost;
  VerifyCostCurve curve;
  std::vector<float> rows = std::vector<float>((kMaxDraft + 1) * kVocab);
  std::span<const float> operator()(std::span<const token_t> context, std::size_t n) {
    busy_wait(cost * curve(n));
    const std::size_t L = context.size();
    for (std::size_t i = 0; i < n; ++i) {
      const auto r = static_cast<std::size_t>(context[L - n + i]);
      std::copy_n(tables->target.data() + r * kVocab, kVocab, rows.data() + i * kVocab);
    }
    return {rows.data(), n * kVocab};
  }
};

/// The draft of the hard segments in the "draft knows" workload: uniform (all logits 0) over the
/// target table of tables_for, so its probability of its own token is 1/V there, as a real draft
/// is unsure where it will be rejected (unlike the noisy tables, which are confidently wrong).
const Tables& uniform_draft_tables() {
  static const Tables tables = [] {
    Tables t = tables_for(90);
    std::fill(t.draft.begin(), t.draft.end(), 0.0f);
    double total = 0;
    for (std::size_t r = 0; r < kVocab; ++r) {
      total += specdec_bench::overlap(std::span<const float>(t.target).subspan(r * kVocab, kVocab),
                                      std::span<const float>(t.draft).subspan(r * kVocab, kVocab));
    }
    t.overlap = total / static_cast<double>(kVocab);
    return t;
  }();
  return tables;
}

enum Workload : std::int64_t { kStationary = 0, kChanging = 1, kUseless = 2, kChangingKnown = 3 };
constexpr std::int64_t kSchedulePolicy = 9, kConfidencePolicy = 10, kGoodputPolicy = 11,
                       kLowConfidencePolicy = 12;

/// Args: workload (0 stationary alpha = 0.8; 1 changing: alpha 0.9 and 0.1 in alternating
/// segments of 32 positions, the hard draft confidently wrong (noisy logits); 2 useless draft,
/// alpha = 0.05; 3 changing, the draft knows: alpha 0.9 and a uniform draft in alternating
/// segments of 32 positions; SPECDEC_BENCH_SEGMENT sets another length), row cost (percent of
/// a one-row call per extra row: 0 flat, 10 CPU-like), policy (1..8 static K; 9 schedule;
/// 10 confidence p_min = 0.75; 11 goodput with measured costs; 12 confidence p_min = 0.01, i.e.
/// draft on while the draft is not unsure; adaptive policies capped at K = 8). c = 0.05.
/// Each iteration runs plain and speculative decoding on the same prompt and seed, the order
/// alternating. Counters: speedup (tokens/s ratio, wall), speedup_cpu (thread CPU time),
/// tau, mean_k (drafted per round), plain_frac (rounds run as plain steps), speedup_model (the
/// cost model applied to the counted rounds: the ratio without timing noise; with
/// SPECDEC_BENCH_FIXED_COSTS=1 goodput is given that cost model instead of measuring), and for
/// goodput pred_vs_meas (the policy's predicted model-time rate / the measured one).
void BM_DraftLengthPolicy(benchmark::State& state) {
  const auto workload = state.range(0);
  const double row_cost = static_cast<double>(state.range(1)) / 100.0;
  const auto policy = state.range(2);
  const bool changing = workload == kChanging || workload == kChangingKnown;
  const Tables& easy = tables_for(workload == kUseless ? 5 : changing ? 90 : 80);
  const Tables& hard = workload == kChangingKnown ? uniform_draft_tables() : tables_for(10);
  const double cost = target_cost_seconds();
  constexpr double kDraftCost = 0.05;  // c: a draft call per target call
  const auto segment = static_cast<std::size_t>(env_double("SPECDEC_BENCH_SEGMENT", 32));
  SegmentedDraft draft{&easy, &hard, changing ? segment : 0, kDraftCost * cost};
  RowCostTarget target{&easy, cost, VerifyCostCurve{row_cost}};
  specdec::SpeculativeDecoder<SegmentedDraft, RowCostTarget> speculative(draft, target);
  specdec::AutoregressiveDecoder<RowCostTarget> autoregressive(target);
  specdec::GenerationConfig config;
  config.max_new_tokens = budget();
  config.sampling.temperature = 1.0f;
  config.draft_length =
      policy <= static_cast<std::int64_t>(kMaxDraft) ? static_cast<std::size_t>(policy) : kMaxDraft;
  config.draft_length_policy.kind = policy == kSchedulePolicy ? specdec::DraftLengthKind::schedule
                                    : policy == kConfidencePolicy || policy == kLowConfidencePolicy
                                        ? specdec::DraftLengthKind::confidence
                                    : policy == kGoodputPolicy ? specdec::DraftLengthKind::goodput
                                                               : specdec::DraftLengthKind::fixed;
  config.draft_length_policy.goodput.forgetting =
      env_double("SPECDEC_BENCH_FORGETTING", config.draft_length_policy.goodput.forgetting);
  if (policy == kLowConfidencePolicy) config.draft_length_policy.confidence.min_probability = 0.01;
  if (env_double("SPECDEC_BENCH_FIXED_COSTS", 0) != 0) {  // goodput told the cost model
    config.draft_length_policy.goodput.draft_token_cost = kDraftCost;
    config.draft_length_policy.goodput.verify_row_cost = row_cost;
  }

  static std::uint64_t next_seed = 2'000'000;
  RunTimes times[2];
  std::size_t tokens[2] = {0, 0};
  specdec::DecodeStats sum;
  std::int64_t iteration = 0;
  for (auto _ : state) {
    const std::uint64_t seed = next_seed++;
    const std::vector<token_t> prompt = random_prompt(seed);
    config.seed = seed;
    const double before = times[0].wall + times[1].wall;
    for (int step = 0; step < 2; ++step) {
      const int which = (step + static_cast<int>(iteration % 2)) % 2;  // 0 plain, 1 speculative
      const specdec::GenerationResult r =
          which == 0 ? timed_generate(autoregressive, prompt, config, times[which])
                     : timed_generate(speculative, prompt, config, times[which]);
      tokens[which] += r.tokens.size();
      if (which == 1) sum += r.stats;
    }
    ++iteration;
    state.SetIterationTime(times[0].wall + times[1].wall - before);
  }
  const double seconds[2] = {times[0].wall, times[1].wall};
  const double cpu[2] = {times[0].cpu, times[1].cpu};
  auto rate = [&](int which, const double* time) {
    return static_cast<double>(tokens[which]) / time[which];
  };
  state.counters["speedup"] = rate(1, seconds) / rate(0, seconds);
  state.counters["speedup_cpu"] = rate(1, cpu) / rate(0, cpu);
  state.counters["tau"] = sum.tokens_per_round();
  state.counters["mean_k"] =
      static_cast<double>(sum.drafted) / static_cast<double>(std::max<std::size_t>(sum.rounds, 1));
  state.counters["plain_frac"] = static_cast<double>(sum.plain_rounds()) /
                                 static_cast<double>(std::max<std::size_t>(sum.rounds, 1));
  state.counters["alpha_hat"] = sum.alpha_hat();
  // The speedup the cost model gives the counted rounds (plain decoding: one unit per token;
  // a round: one unit, c per drafted token, row_cost per extra row): free of timing noise.
  state.counters["speedup_model"] = static_cast<double>(sum.emitted) /
                                    (static_cast<double>(sum.rounds) +
                                     (kDraftCost + row_cost) * static_cast<double>(sum.drafted));
  if (sum.predicted_seconds > 0) {
    const double measured =
        static_cast<double>(sum.emitted) / (sum.draft_seconds + sum.target_seconds);
    state.counters["pred_vs_meas"] = sum.predicted_tokens_per_second() / measured;
  }
  state.SetLabel(spin_on_wall_clock() ? "wall-clock spin" : "cpu-time spin");
}

/// The model-time speedup the counted rounds give under a cost model (plain decoding: one unit
/// per token; a round drafting n tokens: n c + curve(n + 1)): free of timing noise.
double model_speedup(const specdec::DecodeStats& sum, double draft_cost,
                     const VerifyCostCurve& curve) {
  const std::vector<std::size_t> histogram = sum.draft_length_histogram();
  double units = 0;
  for (std::size_t n = 0; n < histogram.size(); ++n) {
    units +=
        static_cast<double>(histogram[n]) * (static_cast<double>(n) * draft_cost + curve(n + 1));
  }
  return units > 0 ? static_cast<double>(sum.emitted) / units : 0.0;
}

/// Draft-length policies on a target whose call cost steps up: stationary acceptance (alpha =
/// 0.8, T = 1), c = 0.05, T(n) = 1 + 0.04 (n - 1) one-row calls, times 1.5 past 6 rows (T(5) =
/// 1.16, T(6) = 1.20, T(7) = 1.80: the shape measured on a CPU target whose call cost jumps
/// between 6 and 7 rows). The best static K sits right below the step (K = 5). Args: policy
/// (1..8 static K; 9 schedule; 11 goodput with measured costs, cap 8), verifier (0 token,
/// 1 block). Counters as BM_DraftLengthPolicy's; speedup_model applies the stepped curve to the
/// counted rounds.
void BM_SteppedCostPolicy(benchmark::State& state) {
  const auto policy = state.range(0);
  const Tables& easy = tables_for(80);
  const double cost = target_cost_seconds();
  constexpr double kDraftCost = 0.05;
  const VerifyCostCurve curve{0.04, 6, 1.5};
  SegmentedDraft draft{&easy, &easy, 0, kDraftCost * cost};
  RowCostTarget target{&easy, cost, curve};
  specdec::SpeculativeDecoder<SegmentedDraft, RowCostTarget> speculative(draft, target);
  specdec::AutoregressiveDecoder<RowCostTarget> autoregressive(target);
  specdec::GenerationConfig config;
  config.max_new_tokens = budget();
  config.sampling.temperature = 1.0f;
  config.verifier =
      state.range(1) == 1 ? specdec::VerifierKind::block : specdec::VerifierKind::token;
  config.draft_length =
      policy <= static_cast<std::int64_t>(kMaxDraft) ? static_cast<std::size_t>(policy) : kMaxDraft;
  config.draft_length_policy.kind = policy == kSchedulePolicy  ? specdec::DraftLengthKind::schedule
                                    : policy == kGoodputPolicy ? specdec::DraftLengthKind::goodput
                                                               : specdec::DraftLengthKind::fixed;

  static std::uint64_t next_seed = 3'000'000;
  RunTimes times[2];
  std::size_t tokens[2] = {0, 0};
  specdec::DecodeStats sum;
  std::int64_t iteration = 0;
  for (auto _ : state) {
    const std::uint64_t seed = next_seed++;
    const std::vector<token_t> prompt = random_prompt(seed);
    config.seed = seed;
    const double before = times[0].wall + times[1].wall;
    for (int step = 0; step < 2; ++step) {
      const int which = (step + static_cast<int>(iteration % 2)) % 2;  // 0 plain, 1 speculative
      const specdec::GenerationResult r =
          which == 0 ? timed_generate(autoregressive, prompt, config, times[which])
                     : timed_generate(speculative, prompt, config, times[which]);
      tokens[which] += r.tokens.size();
      if (which == 1) sum += r.stats;
    }
    ++iteration;
    state.SetIterationTime(times[0].wall + times[1].wall - before);
  }
  auto rate = [&](int which, double seconds) {
    return static_cast<double>(tokens[which]) / seconds;
  };
  state.counters["speedup"] = rate(1, times[1].wall) / rate(0, times[0].wall);
  state.counters["speedup_cpu"] = rate(1, times[1].cpu) / rate(0, times[0].cpu);
  state.counters["tau"] = sum.tokens_per_round();
  state.counters["mean_k"] =
      static_cast<double>(sum.drafted) / static_cast<double>(std::max<std::size_t>(sum.rounds, 1));
  state.counters["alpha_hat"] = sum.alpha_hat();
  state.counters["speedup_model"] = model_speedup(sum, kDraftCost, curve);
  const std::vector<std::size_t> histogram = sum.draft_length_histogram();
  std::size_t past_step = 0;
  for (std::size_t n = 0; n < histogram.size(); ++n) {
    if (curve.step_rows != 0 && n + 1 > curve.step_rows) past_step += histogram[n];
  }
  state.counters["past_step"] =
      static_cast<double>(past_step) / static_cast<double>(std::max<std::size_t>(sum.rounds, 1));
  state.SetLabel(spin_on_wall_clock() ? "wall-clock spin" : "cpu-time spin");
}

void stepped_cost_args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"policy", "block"});
  for (const std::int64_t verifier : {0, 1}) {
    for (std::int64_t policy = 1; policy <= static_cast<std::int64_t>(kMaxDraft); ++policy) {
      b->Args({policy, verifier});
    }
    b->Args({kSchedulePolicy, verifier});
    b->Args({kGoodputPolicy, verifier});
  }
}

void draft_length_policy_args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"workload", "row_cost", "policy"});
  for (const std::int64_t workload : {kStationary, kChanging, kUseless, kChangingKnown}) {
    for (const std::int64_t row_cost : {0, 10}) {
      for (std::int64_t policy = 1; policy <= kLowConfidencePolicy; ++policy) {
        b->Args({workload, row_cost, policy});
      }
    }
  }
}

}  // namespace

BENCHMARK(BM_Speedup)
    ->Apply(speedup_args)
    ->UseManualTime()
    ->Iterations(iterations())
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_TokenVsBlock)
    ->Apply(token_vs_block_args)
    ->UseManualTime()
    ->Iterations(iterations())
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_DraftLengthPolicy)
    ->Apply(draft_length_policy_args)
    ->UseManualTime()
    ->Iterations(iterations())
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_SteppedCostPolicy)
    ->Apply(stepped_cost_args)
    ->UseManualTime()
    ->Iterations(iterations())
    ->Unit(benchmark::kMillisecond);

/// \file
/// \brief A/B evidence for the kernel changes proposed in the benchmark report: the library's
/// current code path next to a bench-local prototype of the proposed replacement, on the same
/// rows as round_overhead_bench (bench_logits.hpp), with an exactness check where it applies
/// (the prototype must give the library's threshold on every pool row: threshold_mismatches
/// must be 0; normalizers agree to float rounding).
///
/// Not part of scripts/bench.sh's default run (`scripts/bench.sh proposals` runs it). Delete
/// once include/specdec/ has adopted (or rejected) the proposals.
///
///  (Earlier findings already fixed in include/ while this was written: Eigen 3.4's select()
///   has no packet path, so every masked exp ran scalar std::exp -> masked_exp_block; argmax
///   used maxCoeff<PropagateNaN>, latency-bound -> scan_max; the greedy log-prob redid the max
///   pass -> logsumexp_given_max. A one-pass online max + exp-sum for unfiltered target rows
///   was also tried and measured no faster than scan_max + exp_sum, so it is not proposed.)
///  P4  top-p: filter_threshold copies every logit >= max + T log((1 - top_p) Z / V) -- a loose
///      bound: 20-45 % of V for a heavy tail -- with a branchy scalar copy_if, then quickselects
///      that set (std::nth_element + scalar exp per level); process_logits then does another
///      exp pass for the normalizer. Two exact alternatives, checked against the library's
///      threshold on every pool row: (a) histogram of (max - logit)/T in 1/64-nat buckets,
///      quickselect only inside the boundary bucket; (b) bisection on the stored weights with
///      vectorised masked sums (no exp), quickselect on the <= 2048 tokens of the last bracket.
///      Both still have one scalar pass over V (bucket scatter / candidate copy): the next
///      step would be an AVX-512 compress (or a per-block skip) for the candidate copy.
///  P6  Bonus row: verify_stochastic processes row K (max + exp-sum), then sample() stores the
///      weights (a second exp pass). Fix: process row K with weights (the draft-row path) and
///      sample_from_weights: one exp pass.

#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <span>
#include <vector>

#include <Eigen/Core>

#include "bench_logits.hpp"
#include "specdec/specdec.hpp"

// ---- packet-path mask functors for P4 (Eigen 3.4's select() has no packet path) -----------
namespace proto {
/// x if x >= threshold else 0, with a packet path (Eigen 3.4's select has none).
template <class Scalar>
struct keep_at_least_op {
  Scalar threshold;
  Scalar operator()(Scalar x) const { return x >= threshold ? x : Scalar(0); }
  template <class Packet>
  Packet packetOp(const Packet& x) const {
    using namespace Eigen::internal;
    return pand(pcmp_le(pset1<Packet>(threshold), x), x);
  }
};
/// 1 if x >= threshold else 0, with a packet path.
template <class Scalar>
struct at_least_op {
  Scalar threshold;
  Scalar operator()(Scalar x) const { return x >= threshold ? Scalar(1) : Scalar(0); }
  template <class Packet>
  Packet packetOp(const Packet& x) const {
    using namespace Eigen::internal;
    return pand(pcmp_le(pset1<Packet>(threshold), x), pset1<Packet>(Scalar(1)));
  }
};
}  // namespace proto
namespace Eigen::internal {
template <class Scalar>
struct functor_traits<proto::keep_at_least_op<Scalar>> {
  enum { Cost = 2, PacketAccess = 1 };
};
template <class Scalar>
struct functor_traits<proto::at_least_op<Scalar>> {
  enum { Cost = 2, PacketAccess = 1 };
};
}  // namespace Eigen::internal

namespace {

using specdec::token_t;
using specdec::detail::as_array;
using specdec::detail::for_each_block;
constexpr std::size_t kRows = 16;

struct Pool {
  std::size_t V;
  std::vector<float> target, draft;
  std::span<const float> t(std::size_t r) const { return {target.data() + (r % kRows) * V, V}; }
  std::span<const float> d(std::size_t r) const { return {draft.data() + (r % kRows) * V, V}; }
};

const Pool& pool_for(std::size_t V) {
  static std::map<std::size_t, std::unique_ptr<Pool>> pools;
  auto& slot = pools[V];
  if (slot) return *slot;
  auto p = std::make_unique<Pool>();
  p->V = V;
  std::mt19937_64 gen(0x5eedu + V);
  p->target.resize(kRows * V);
  for (std::size_t r = 0; r < kRows; ++r) {
    specdec_bench::fill_target_row(std::span<float>(p->target).subspan(r * V, V), gen);
  }
  std::vector<float> unit(kRows * V);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (float& x : unit) x = normal(gen);
  p->draft.resize(kRows * V);
  specdec_bench::make_draft(p->target, unit, 0.6f, kRows, V, -1.0, p->draft);
  slot = std::move(p);
  return *slot;
}

// ---- P4: top-p threshold by histogram ----------------------------------------------------------
struct TopPResult {
  float threshold;
  double normalizer;
};

/// Exact top-p threshold (same definition as specdec::filter_threshold: the smallest logit of
/// the highest-probability tokens whose mass reaches top_p * Z, ties kept), plus the kept
/// normalizer. `weights` (V) receives exp((x - m) / T) for all tokens, then 0 for dropped ones.
TopPResult proto_top_p(std::span<const float> logits, float m, float inv_t, float top_p,
                       std::span<float> weights, std::vector<float>& cand,
                       std::vector<double>& hist_mass) {
  constexpr int kPerNat = 64;
  constexpr int kBuckets = 64 * 40;  // 40 nats below the max; the last bucket is a catch-all
  const std::size_t V = logits.size();
  const auto all = as_array(logits);
  auto w = as_array(weights);
  // Pass 1 (vectorised): weights and their total.
  double z = 0;
  for_each_block(V, [&](std::size_t off, std::size_t len) {
    const auto s = static_cast<Eigen::Index>(off);
    const auto n = static_cast<Eigen::Index>(len);
    auto wb = w.segment(s, n);
    wb = ((all.segment(s, n) - m) * inv_t).exp();
    z += static_cast<double>(wb.sum());
  });
  const double target = static_cast<double>(top_p) * z;
  // Pass 2 (scalar scatter): mass per bucket of (m - x) / T.
  hist_mass.assign(kBuckets, 0.0);
  const float scale = inv_t * kPerNat;
  for (std::size_t i = 0; i < V; ++i) {
    const float d = (m - logits[i]) * scale;
    const int b = d < static_cast<float>(kBuckets - 1) ? static_cast<int>(d) : kBuckets - 1;
    hist_mass[static_cast<std::size_t>(b)] += static_cast<double>(weights[i]);
  }
  int k = 0;
  double above = 0;
  while (k < kBuckets - 1 && above + hist_mass[static_cast<std::size_t>(k)] < target) {
    above += hist_mass[static_cast<std::size_t>(k++)];
  }
  // Candidates: the tokens of bucket k (recomputed with the same float expression).
  cand.clear();
  for (std::size_t i = 0; i < V; ++i) {
    const float d = (m - logits[i]) * scale;
    const int b = d < static_cast<float>(kBuckets - 1) ? static_cast<int>(d) : kBuckets - 1;
    if (b == k) cand.push_back(logits[i]);
  }
  float boundary = -std::numeric_limits<float>::infinity();
  // Exact quickselect on the bucket (the library's own routine), mass target minus what lies
  // above the bucket.
  if (!specdec::detail::nucleus_boundary(cand.data(), cand.data() + cand.size(), m, inv_t,
                                         target - above, boundary)) {
    boundary = -std::numeric_limits<float>::infinity();  // rounding: keep everything
  }
  // Pass 3 (vectorised, no exp): drop tokens below the boundary, sum the kept weights.
  double kept = 0;
  for_each_block(V, [&](std::size_t off, std::size_t len) {
    const auto s = static_cast<Eigen::Index>(off);
    const auto n = static_cast<Eigen::Index>(len);
    auto wb = w.segment(s, n);
    // (x >= boundary) as a 0/1 factor without select: clamp((x - boundary) * inf ...) is
    // fragile, so use the masked functor on weights via logits: recompute is what we avoid,
    // hence a plain loop the compiler vectorises (compare + blend, no exp).
    for (Eigen::Index i = 0; i < n; ++i) {
      wb[i] = all[s + i] >= boundary ? wb[i] : 0.0f;
    }
    kept += static_cast<double>(wb.sum());
  });
  return {boundary, kept};
}

/// P4 variant without a scalar pass over V: bisection on the stored weights. Weights are
/// monotone in the logit, so "logit >= t" is "weight >= exp((t - m) / T)" and every bisection
/// step is one vectorised masked sum (+ count) over the weights row, which was just written
/// and is cache-resident (no exp). Once the bracket holds <= kCandidates tokens, their logits
/// are copied and the library's exact quickselect (nucleus_boundary) finishes on logits, with
/// the mass strictly above the bracket subtracted. Tokens whose weight is above the bracket
/// have strictly larger logits than every candidate, so the threshold is the same as the
/// library's (checked on every pool row).
TopPResult proto_top_p_bisect(std::span<const float> logits, float m, float inv_t, float top_p,
                              std::span<float> weights, std::vector<float>& cand) {
  constexpr std::size_t kCandidates = 2048;
  const std::size_t V = logits.size();
  const auto all = as_array(logits);
  auto w = as_array(weights);
  double z = 0;
  for_each_block(V, [&](std::size_t off, std::size_t len) {
    const auto s = static_cast<Eigen::Index>(off);
    const auto n = static_cast<Eigen::Index>(len);
    auto wb = w.segment(s, n);
    wb = ((all.segment(s, n) - m) * inv_t).exp();
    z += static_cast<double>(wb.sum());
  });
  const double target = static_cast<double>(top_p) * z;
  auto mass_count = [&](float tau) {
    double mass = 0, count = 0;
    for_each_block(V, [&](std::size_t off, std::size_t len) {
      const auto wb = w.segment(static_cast<Eigen::Index>(off), static_cast<Eigen::Index>(len));
      mass += static_cast<double>(wb.unaryExpr(proto::keep_at_least_op<float>{tau}).sum());
      count += static_cast<double>(wb.unaryExpr(proto::at_least_op<float>{tau}).sum());
    });
    return std::pair{mass, count};
  };
  // Bracket in d = -log(weight): tokens with d <= lo_d hold mass < target (strictly above the
  // boundary), tokens with d <= hi_d hold mass >= target.
  float lo_d = 0, hi_d = 104;  // exp(-104) < the smallest float denormal: everything
  auto [lo_mass, lo_count] = mass_count(1.0f);  // the max's ties
  if (lo_mass >= target) return {m, lo_mass};  // only the max (and its ties) survive
  double hi_count = static_cast<double>(V);
  for (int it = 0; it < 40 && hi_count - lo_count > kCandidates; ++it) {
    const float mid = 0.5f * (lo_d + hi_d);
    const auto [mass, count] = mass_count(std::exp(-mid));
    if (mass >= target) {
      hi_d = mid;
      hi_count = count;
    } else {
      lo_d = mid;
      lo_mass = mass;
      lo_count = count;
    }
  }
  const float tau_lo = std::exp(-lo_d);  // weights >= tau_lo: strictly above the boundary
  const float tau_hi = std::exp(-hi_d);
  cand.clear();
  for (std::size_t i = 0; i < V; ++i) {
    if (weights[i] >= tau_hi && weights[i] < tau_lo) cand.push_back(logits[i]);
  }
  float boundary = -std::numeric_limits<float>::infinity();
  if (!specdec::detail::nucleus_boundary(cand.data(), cand.data() + cand.size(), m, inv_t,
                                         target - lo_mass, boundary)) {
    boundary = -std::numeric_limits<float>::infinity();
  }
  // Normalizer over kept tokens, zeroing the dropped weights (no exp).
  double kept = 0;
  for_each_block(V, [&](std::size_t off, std::size_t len) {
    const auto s = static_cast<Eigen::Index>(off);
    const auto n = static_cast<Eigen::Index>(len);
    for (Eigen::Index i = 0; i < n; ++i) w[s + i] = all[s + i] >= boundary ? w[s + i] : 0.0f;
    kept += static_cast<double>(w.segment(s, n).sum());
  });
  return {boundary, kept};
}

// ---- benchmarks ---------------------------------------------------------------------------------

specdec::SamplingParams params(float top_p) {
  specdec::SamplingParams p;
  p.temperature = 1.0f;
  p.top_p = top_p;
  return p;
}

/// Top-p = 0.9, target row (threshold + normalizer) and draft row (+ weights).
void BM_TopP_Current(benchmark::State& state) {
  const Pool& pool = pool_for(static_cast<std::size_t>(state.range(0)));
  std::vector<float> fs(pool.V), w(pool.V);
  const auto prm = params(0.9f);
  const bool draft = state.range(1) != 0;
  std::size_t r = 0;
  for (auto _ : state) {
    if (draft) {
      benchmark::DoNotOptimize(specdec::process_logits(pool.d(r++), prm, fs, std::span<float>(w)));
    } else {
      benchmark::DoNotOptimize(specdec::process_logits(pool.t(r++), prm, fs));
    }
  }
}
void BM_TopP_Proposed(benchmark::State& state) {
  const Pool& pool = pool_for(static_cast<std::size_t>(state.range(0)));
  std::vector<float> fs(pool.V), w(pool.V), cand;
  std::vector<double> hist;
  cand.reserve(pool.V);
  const auto prm = params(0.9f);
  std::size_t mismatches = 0;
  double worst = 0;
  for (std::size_t r = 0; r < kRows; ++r) {
    for (const auto row : {pool.t(r), pool.d(r)}) {
      const auto ref = specdec::process_logits(row, prm, fs);
      const auto got = proto_top_p(row, ref.max_logit, 1.0f, 0.9f, w, cand, hist);
      mismatches += got.threshold != ref.threshold;
      worst = std::max(worst, std::abs(got.normalizer - ref.normalizer) / ref.normalizer);
    }
  }
  std::size_t r = 0;
  for (auto _ : state) {
    const auto row = state.range(1) ? pool.d(r++) : pool.t(r++);
    const float m = specdec::max_logit(row);
    benchmark::DoNotOptimize(proto_top_p(row, m, 1.0f, 0.9f, w, cand, hist));
  }
  state.counters["threshold_mismatches"] = static_cast<double>(mismatches);
  state.counters["normalizer_max_rel_diff"] = worst;
}

void BM_TopP_ProposedBisect(benchmark::State& state) {
  const Pool& pool = pool_for(static_cast<std::size_t>(state.range(0)));
  std::vector<float> fs(pool.V), w(pool.V), cand;
  cand.reserve(pool.V);
  const auto prm = params(0.9f);
  std::size_t mismatches = 0;
  double worst = 0;
  for (std::size_t r = 0; r < kRows; ++r) {
    for (const auto row : {pool.t(r), pool.d(r)}) {
      const auto ref = specdec::process_logits(row, prm, fs);
      const auto got = proto_top_p_bisect(row, ref.max_logit, 1.0f, 0.9f, w, cand);
      mismatches += got.threshold != ref.threshold;
      worst = std::max(worst, std::abs(got.normalizer - ref.normalizer) / ref.normalizer);
    }
  }
  std::size_t r = 0;
  for (auto _ : state) {
    const auto row = state.range(1) ? pool.d(r++) : pool.t(r++);
    const float m = specdec::max_logit(row);
    benchmark::DoNotOptimize(proto_top_p_bisect(row, m, 1.0f, 0.9f, w, cand));
  }
  state.counters["threshold_mismatches"] = static_cast<double>(mismatches);
  state.counters["normalizer_max_rel_diff"] = worst;
}

/// Baselines the targets are stated against, on the same rows.
void BM_MaxPass(benchmark::State& state) {
  const Pool& pool = pool_for(static_cast<std::size_t>(state.range(0)));
  std::size_t r = 0;
  for (auto _ : state) {
    const auto row = pool.t(r++);
    benchmark::DoNotOptimize(
        Eigen::Map<const Eigen::VectorXf>(row.data(), static_cast<Eigen::Index>(row.size())).maxCoeff());
  }
}
void BM_ExpSumPass(benchmark::State& state) {
  const Pool& pool = pool_for(static_cast<std::size_t>(state.range(0)));
  std::vector<float> maxima(kRows);
  for (std::size_t r = 0; r < kRows; ++r) maxima[r] = specdec::max_logit(pool.t(r));
  std::size_t r = 0;
  for (auto _ : state) {
    const auto row = pool.t(r);
    benchmark::DoNotOptimize(
        (Eigen::Map<const Eigen::VectorXf>(row.data(), static_cast<Eigen::Index>(row.size())).array() -
         maxima[r % kRows]).exp().sum());
    ++r;
  }
}

/// P6: bonus row, as verify_stochastic does it today / as proposed.
void BM_Bonus_Current(benchmark::State& state) {
  const Pool& pool = pool_for(static_cast<std::size_t>(state.range(0)));
  std::vector<float> fs, scratch(pool.V);
  const auto prm = params(1.0f);
  specdec::Rng rng(3);
  std::size_t r = 0;
  for (auto _ : state) {
    const auto p = specdec::process_logits(pool.t(r++), prm, fs);
    benchmark::DoNotOptimize(specdec::sample(p, rng.uniform01(), std::span<float>(scratch)));
  }
}
void BM_Bonus_Proposed(benchmark::State& state) {
  const Pool& pool = pool_for(static_cast<std::size_t>(state.range(0)));
  std::vector<float> fs, weights(pool.V);
  const auto prm = params(1.0f);
  specdec::Rng rng(3);
  std::size_t r = 0;
  for (auto _ : state) {
    const auto p = specdec::process_logits(pool.t(r++), prm, fs, std::span<float>(weights));
    benchmark::DoNotOptimize(specdec::sample_from_weights(std::span<const float>(weights),
                                                          p.normalizer, rng.uniform01()));
  }
}

void vocab(benchmark::internal::Benchmark* b) {
  b->ArgNames({"V"});
  for (const std::int64_t V : {32000, 128256, 151936}) b->Args({V});
}
void vocab_draft(benchmark::internal::Benchmark* b) {
  b->ArgNames({"V", "draft_row"});
  for (const std::int64_t V : {32000, 128256, 151936}) {
    b->Args({V, 0});
    b->Args({V, 1});
  }
}

}  // namespace

BENCHMARK(BM_MaxPass)->Apply(vocab);
BENCHMARK(BM_ExpSumPass)->Apply(vocab);
BENCHMARK(BM_TopP_Current)->Apply(vocab_draft);
BENCHMARK(BM_TopP_Proposed)->Apply(vocab_draft);
BENCHMARK(BM_TopP_ProposedBisect)->Apply(vocab_draft);
BENCHMARK(BM_Bonus_Current)->Apply(vocab);
BENCHMARK(BM_Bonus_Proposed)->Apply(vocab);

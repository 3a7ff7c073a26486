/// \file
/// \brief Tree drafts against the best chain at equal node budgets, on flat-cost synthetic
/// models, and the verification library time per tree node.
///
/// Models (V = 256, as synthetic_speedup_bench): the target row after a context is a table row
/// picked by the last token (1-8 peaks over a Gaussian background); the draft row is that row
/// plus noise calibrated row by row so that every row's overlap sum_x min(p, q) is alpha at
/// T = 1. The target's call costs the same for any number of rows, chain or tree (a GPU-like
/// target: score_tree is one call); a draft call costs c target calls. A tree of N nodes
/// makes one draft call per node with children (plus the root), a chain of K tokens K calls.
///
/// BM_Decode/<config>: one generate() of SPECDEC_BENCH_TOKENS (default 256) tokens per
/// iteration, fresh prompt and seed each time. Counters:
///   tok_per_call   emitted tokens per target call
///   model_speedup  emitted / (target_calls + c * draft_calls): tokens per target-call time,
///                  i.e. the speedup over plain decoding (1 token per call) with the model
///                  costs alone (noise-free; library time excluded)
///   tok_s_cpu      emitted per thread-CPU second (the models spin SPECDEC_BENCH_TARGET_MS of
///                  CPU per target call, default 0 = free models: then this is library speed)
///   lib_frac       library_seconds / total_seconds
/// The name says alpha, c, T, the node budget N, and the drafter: chain K (token | block
/// verification) or tree shape / dynamic budget, siblings (replace | distinct | top-k) and
/// verifier (rrs | traversal).
///
/// BM_TreeVerifyPerNode/<V>/<shape>/<siblings>/<verifier>: verification of one drafted tree
/// (TargetRows construction + verify(), every visited row processed), per node of the tree;
/// BM_ExpSumPass/<V>: one exp-sum pass over a row (the yardstick), as round_overhead_bench.

#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
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

constexpr std::size_t kVocab = 256;
constexpr std::size_t kMaxNodes = 64;
constexpr std::size_t kPromptLength = 4;

double env_double(const char* name, double fallback) {
  const char* v = std::getenv(name);
  return v ? std::strtod(v, nullptr) : fallback;
}
double target_cost_seconds() { return env_double("SPECDEC_BENCH_TARGET_MS", 0.0) * 1e-3; }
std::size_t token_budget() {
  return static_cast<std::size_t>(env_double("SPECDEC_BENCH_TOKENS", 256));
}

double thread_cpu_seconds() noexcept {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

/// Spins `seconds` of this thread's CPU time (exact cost on a loaded machine too).
void busy_wait(double seconds) {
  if (seconds <= 0) return;
  const double end = thread_cpu_seconds() + seconds;
  while (thread_cpu_seconds() < end) {
  }
}

struct Tables {
  std::vector<float> target;  // (V, V) row = last token
  std::vector<float> draft;   // (V, V)
};

const Tables& tables_for(int alpha_percent) {
  static std::map<int, std::unique_ptr<Tables>> cache;
  auto& slot = cache[alpha_percent];
  if (slot) return *slot;
  auto t = std::make_unique<Tables>();
  std::mt19937_64 gen(0xabcdefu);
  t->target.resize(kVocab * kVocab);
  for (std::size_t r = 0; r < kVocab; ++r) {
    specdec_bench::fill_target_row(std::span<float>(t->target).subspan(r * kVocab, kVocab), gen);
  }
  std::vector<float> unit(kVocab * kVocab);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (float& x : unit) x = normal(gen);
  t->draft.resize(kVocab * kVocab);
  (void)specdec_bench::calibrate_noise_per_row(t->target, unit, kVocab, kVocab,
                                               alpha_percent / 100.0, t->draft);
  slot = std::move(t);
  return *slot;
}

/// A draft whose call costs `cost` whatever it scores: one row, or (score_tree) the rows of a
/// whole tree, as a batched GPU draft (TreeProposer then drafts one depth per call).
struct FlatDraft {
  const Tables* tables;
  double cost;
  std::vector<float> rows = std::vector<float>((kMaxNodes + 1) * kVocab);

  std::span<const float> operator()(std::span<const token_t> context) const {
    busy_wait(cost);
    const auto r = static_cast<std::size_t>(context.back());
    return {tables->draft.data() + r * kVocab, kVocab};
  }
  std::span<const float> score_tree(std::span<const token_t> committed,
                                    std::span<const token_t> tokens,
                                    std::span<const std::int32_t> /*parents*/) {
    busy_wait(cost);
    for (std::size_t i = 0; i <= tokens.size(); ++i) {
      const auto r = static_cast<std::size_t>(i == 0 ? committed.back() : tokens[i - 1]);
      std::copy_n(tables->draft.data() + r * kVocab, kVocab, rows.data() + i * kVocab);
    }
    return {rows.data(), (tokens.size() + 1) * kVocab};
  }
};

/// A target whose call costs `cost` whatever it scores: n chain rows or a whole tree.
struct FlatTarget {
  const Tables* tables;
  double cost;
  std::vector<float> rows = std::vector<float>((kMaxNodes + 1) * kVocab);

  std::span<const float> operator()(std::span<const token_t> context, std::size_t n) {
    busy_wait(cost);
    const std::size_t length = context.size();
    for (std::size_t i = 0; i < n; ++i) copy_row(context[length - n + i], i);
    return {rows.data(), n * kVocab};
  }
  std::span<const float> score_tree(std::span<const token_t> committed,
                                    std::span<const token_t> tokens,
                                    std::span<const std::int32_t> /*parents*/) {
    busy_wait(cost);
    copy_row(committed.back(), 0);  // the rows depend on the last token only
    for (std::size_t i = 0; i < tokens.size(); ++i) copy_row(tokens[i], i + 1);
    return {rows.data(), (tokens.size() + 1) * kVocab};
  }

 private:
  void copy_row(token_t last, std::size_t i) {
    const auto r = static_cast<std::size_t>(last);
    std::copy_n(tables->target.data() + r * kVocab, kVocab, rows.data() + i * kVocab);
  }
};

enum class Verifier { token, block, rrs, traversal };

struct DecodeCase {
  int alpha_percent;
  double c;
  float temperature;
  std::size_t budget;    // node budget N (= draft_length)
  std::string shape;     // "" = chain of K = budget
  bool dynamic = false;  // shape ignored: dynamic tree of `budget` nodes
  specdec::SiblingMode siblings = specdec::SiblingMode::without_replacement;
  Verifier verifier = Verifier::token;
};

const char* name_of(specdec::SiblingMode mode) {
  switch (mode) {
    case specdec::SiblingMode::with_replacement:
      return "replace";
    case specdec::SiblingMode::without_replacement:
      return "distinct";
    case specdec::SiblingMode::top_k:
      return "top-k";
  }
  return "?";
}
const char* name_of(Verifier verifier) {
  switch (verifier) {
    case Verifier::token:
      return "token";
    case Verifier::block:
      return "block";
    case Verifier::rrs:
      return "rrs";
    case Verifier::traversal:
      return "traversal";
  }
  return "?";
}

std::string name_of(const DecodeCase& c) {
  char head[96];
  std::snprintf(head, sizeof head, "alpha=%d/c=%g/T=%g/N=%zu/", c.alpha_percent, c.c,
                static_cast<double>(c.temperature), c.budget);
  std::string name = head;
  if (c.shape.empty() && !c.dynamic) return name + "chain/" + name_of(c.verifier);
  name += c.dynamic ? "dynamic" : "tree" + c.shape;
  return name + "/" + name_of(c.siblings) + "/" + name_of(c.verifier);
}

template <class Decoder>
void run_decode(benchmark::State& state, Decoder& decoder, const DecodeCase& c) {
  specdec::GenerationConfig config;
  config.draft_length = c.budget;
  config.max_new_tokens = token_budget();
  config.sampling.temperature = c.temperature;
  std::uint64_t seed = 1;
  std::size_t emitted = 0, target_calls = 0, draft_calls = 0;
  double library = 0, total = 0, cpu = 0;
  for (auto _ : state) {
    std::mt19937_64 gen(seed);
    std::vector<token_t> prompt(kPromptLength);
    for (token_t& t : prompt) t = static_cast<token_t>(gen() % kVocab);
    config.seed = seed++;
    const double cpu0 = thread_cpu_seconds();
    const auto result = decoder.generate(prompt, config);
    cpu += thread_cpu_seconds() - cpu0;
    emitted += result.stats.emitted;
    target_calls += result.stats.target_calls;
    draft_calls += result.stats.draft_calls;
    library += result.stats.library_seconds;
    total += result.stats.total_seconds;
  }
  const auto e = static_cast<double>(emitted);
  state.counters["tok_per_call"] = e / static_cast<double>(target_calls);
  state.counters["model_speedup"] =
      e / (static_cast<double>(target_calls) + c.c * static_cast<double>(draft_calls));
  state.counters["tok_s_cpu"] = e / cpu;
  state.counters["lib_frac"] = total > 0 ? library / total : 0;
}

void BM_Decode(benchmark::State& state, DecodeCase c) {
  const Tables& tables = tables_for(c.alpha_percent);
  FlatDraft draft{&tables, c.c * target_cost_seconds()};
  FlatTarget target{&tables, target_cost_seconds()};
  if (c.shape.empty() && !c.dynamic) {
    if (c.verifier == Verifier::block) {
      specdec::StrategyDecoder block(target, specdec::ModelProposer(draft),
                                     specdec::StaticDraftLength{}, specdec::BlockVerifier{});
      run_decode(state, block, c);
    } else {
      specdec::StrategyDecoder token(target, specdec::ModelProposer(draft),
                                     specdec::StaticDraftLength{}, specdec::TokenVerifier{});
      run_decode(state, token, c);
    }
    return;
  }
  specdec::TreeOptions options;
  options.shape =
      c.dynamic ? specdec::TreeShape::dynamic(c.budget, 4) : specdec::TreeShape::parse(c.shape);
  options.siblings = c.siblings;
  if (c.verifier == Verifier::traversal) {
    specdec::StrategyDecoder decoder(target, specdec::TreeProposer(draft, options),
                                     specdec::StaticDraftLength{}, specdec::TraversalVerifier{});
    run_decode(state, decoder, c);
  } else {
    specdec::StrategyDecoder decoder(target, specdec::TreeProposer(draft, options),
                                     specdec::StaticDraftLength{}, specdec::TreeVerifier{});
    run_decode(state, decoder, c);
  }
}

void register_decode_cases() {
  const std::map<std::size_t, std::vector<std::string>> shapes = {
      {8, {"2x1x1x1", "2x2x1", "4x1", "2x2"}},
      {16, {"2x2x1x1", "2x2x2", "4x1x1x1", "4x2x1", "3x1x1x1x1", "2x1x1x1x1x1x1x1"}},
      {32,
       {"4x2x2x1", "2x2x2x2", "4x2x1x1", "3x2x2x1", "2x1x1x1x1x1x1x1x1x1x1x1x1x1x1x1",
        "2x2x1x1x1x1x1x1"}}};
  for (const int alpha : {50, 70, 90}) {
    for (const double c : {0.05}) {
      for (const float temperature : {1.0f, 0.0f}) {
        const bool greedy = temperature == 0.0f;
        // Chains of every K up to the largest budget (N = K): the best K <= N is the
        // baseline of a budget N.
        for (std::size_t k = 1; k <= shapes.rbegin()->first; ++k) {
          for (const Verifier verifier : {Verifier::token, Verifier::block}) {
            if (greedy && verifier == Verifier::block) continue;
            const DecodeCase chain{alpha, c, temperature, k, "", false, {}, verifier};
            benchmark::RegisterBenchmark(("BM_Decode/" + name_of(chain)).c_str(), BM_Decode, chain);
          }
        }
        for (const auto& [budget, budget_shapes] : shapes) {
          const std::vector<specdec::SiblingMode> modes =
              greedy ? std::vector{specdec::SiblingMode::top_k}
                     : std::vector{specdec::SiblingMode::with_replacement,
                                   specdec::SiblingMode::without_replacement,
                                   specdec::SiblingMode::top_k};
          for (const specdec::SiblingMode mode : modes) {
            for (const Verifier verifier : {Verifier::rrs, Verifier::traversal}) {
              if (greedy && verifier == Verifier::traversal) continue;
              for (const std::string& shape : budget_shapes) {
                const DecodeCase tree{alpha, c, temperature, budget, shape, false, mode, verifier};
                benchmark::RegisterBenchmark(("BM_Decode/" + name_of(tree)).c_str(), BM_Decode,
                                             tree);
              }
              const DecodeCase dynamic{alpha, c, temperature, budget, "", true, mode, verifier};
              benchmark::RegisterBenchmark(("BM_Decode/" + name_of(dynamic)).c_str(), BM_Decode,
                                           dynamic);
            }
          }
        }
      }
    }
  }
}

// ---- verification library time per tree node ------------------------------------------------

/// Rows of a large vocabulary: a pool of target rows and of draft rows (target + noise), picked
/// by a hash of the context's last token, so a tree's nodes see different rows.
struct RowPool {
  static constexpr std::size_t kRows = 16;
  std::size_t vocab = 0;
  std::vector<float> target, draft;
};

const RowPool& pool_for(std::size_t vocab) {
  static std::map<std::size_t, std::unique_ptr<RowPool>> cache;
  auto& slot = cache[vocab];
  if (slot) return *slot;
  auto pool = std::make_unique<RowPool>();
  pool->vocab = vocab;
  pool->target.resize(RowPool::kRows * vocab);
  pool->draft.resize(RowPool::kRows * vocab);
  std::mt19937_64 gen(42);
  std::normal_distribution<float> noise(0.0f, 1.0f);
  for (std::size_t r = 0; r < RowPool::kRows; ++r) {
    const std::span<float> row = std::span<float>(pool->target).subspan(r * vocab, vocab);
    specdec_bench::fill_target_row(row, gen);
    for (std::size_t v = 0; v < vocab; ++v) pool->draft[r * vocab + v] = row[v] + noise(gen);
  }
  slot = std::move(pool);
  return *slot;
}

struct PoolDraft {
  const RowPool* pool;
  std::span<const float> operator()(std::span<const token_t> context) const {
    const std::size_t r = static_cast<std::size_t>(context.back()) % RowPool::kRows;
    return {pool->draft.data() + r * pool->vocab, pool->vocab};
  }
};

void BM_TreeVerifyPerNode(benchmark::State& state, std::size_t vocab, std::string shape,
                          specdec::SiblingMode mode, Verifier verifier) {
  const RowPool& pool = pool_for(vocab);
  PoolDraft draft{&pool};
  specdec::TreeOptions options;
  options.shape =
      shape == "dynamic16" ? specdec::TreeShape::dynamic(16, 4) : specdec::TreeShape::parse(shape);
  options.siblings = mode;
  specdec::TreeProposer proposer(draft, options);
  specdec::SamplingParams params;
  params.temperature = 1.0f;
  specdec::DecodeStats stats;
  std::size_t vocab_size = 0;
  std::vector<token_t> context{1, 2, 3};
  context.reserve(context.size() + 128);
  specdec::Rng rng(7);
  specdec::DraftCoins draft_coins(rng);
  specdec::DraftRequest request(context, options.shape.nodes(), params, vocab_size, stats);
  const specdec::Proposal<float> proposal = proposer.propose(request, draft_coins);
  const std::size_t n = proposal.size();
  // The tree's rows: row 0 after the context, row 1 + i after node i.
  std::vector<float> rows((n + 1) * vocab);
  for (std::size_t i = 0; i <= n; ++i) {
    const token_t last = i == 0 ? context.back() : proposal.tokens[i - 1];
    const std::size_t r = static_cast<std::size_t>(last) % RowPool::kRows;
    std::copy_n(pool.target.data() + r * vocab, vocab, rows.data() + i * vocab);
  }
  const specdec::LogitsRows<float> view(std::span<const float>(rows), vocab);
  specdec::TargetRowBuffers<float> buffers;
  specdec::TreeVerifier rrs;
  specdec::TraversalVerifier traversal;
  std::vector<double> coins(n);
  std::size_t accepted = 0;
  for (auto _ : state) {
    for (double& coin : coins) coin = rng.uniform01();
    const specdec::VerificationCoins round_coins(coins, rng.uniform01());
    specdec::TargetRows<float> target(view, context, context.size(), params, false, buffers,
                                      proposal.parents);
    const specdec::VerifyResult verdict = verifier == Verifier::traversal
                                              ? traversal.verify(proposal, target, round_coins)
                                              : rrs.verify(proposal, target, round_coins);
    accepted += verdict.accepted;
    benchmark::DoNotOptimize(verdict);
  }
  state.counters["nodes"] = static_cast<double>(n);
  state.counters["accepted"] =
      static_cast<double>(accepted) / static_cast<double>(state.iterations());
  state.counters["per_node_ns"] =
      benchmark::Counter(static_cast<double>(state.iterations()) * static_cast<double>(n),
                         benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

void BM_ExpSumPass(benchmark::State& state) {
  const std::size_t vocab = static_cast<std::size_t>(state.range(0));
  const RowPool& pool = pool_for(vocab);
  std::size_t r = 0;
  for (auto _ : state) {
    const Eigen::Map<const Eigen::ArrayXf> row(pool.target.data() + (r % RowPool::kRows) * vocab,
                                               static_cast<Eigen::Index>(vocab));
    const float max = row.maxCoeff();
    benchmark::DoNotOptimize(max);
    benchmark::DoNotOptimize((row - max).exp().sum());
    ++r;
  }
}

void register_library_cases() {
  for (const std::size_t vocab : {std::size_t{32000}, std::size_t{128256}}) {
    benchmark::RegisterBenchmark("BM_ExpSumPass", BM_ExpSumPass)->Arg(static_cast<int>(vocab));
    for (const std::string shape : {"4x2x2x1", "dynamic16"}) {
      for (const specdec::SiblingMode mode :
           {specdec::SiblingMode::with_replacement, specdec::SiblingMode::without_replacement,
            specdec::SiblingMode::top_k}) {
        for (const Verifier verifier : {Verifier::rrs, Verifier::traversal}) {
          const std::string name = "BM_TreeVerifyPerNode/V=" + std::to_string(vocab) + "/" + shape +
                                   "/" + name_of(mode) + "/" + name_of(verifier);
          benchmark::RegisterBenchmark(name.c_str(), BM_TreeVerifyPerNode, vocab, shape, mode,
                                       verifier);
        }
      }
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  register_decode_cases();
  register_library_cases();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}

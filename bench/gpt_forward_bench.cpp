// T(n): what verifying n - 1 drafted tokens costs the example GPT, i.e. one target call that
// computes n new rows of logits on top of a cached 100-token context, for n = 1..16.
//
// Speculative decoding pays off when T(n) / T(1) stays close to 1: at n = 1 the target streams
// its ~43 MB of float32 weights once per token (memory bound), and the n-row forward reads each
// weight once for all n rows, so extra rows only add arithmetic.
//
// Each iteration rolls the KV cache back to the 100-token context and computes n new rows
// (timed), then does the same for one row (timed separately). The interleaved one-row call makes
// the T(n)/T(1) counters robust to background load drifting during the run:
//   T(n)/T(1)      mean n-row time / mean one-row time over the same iterations (wall clock)
//   T(n)/T(1)_min  fastest n-row call / fastest one-row call (least disturbed by other processes)
//   T(n)/T(1)_cpu  the same ratio in process CPU time (std::clock): immune to being descheduled
//                  on a busy machine, though not to sharing a core with another process
//   T1_ms          mean one-row time (wall clock)
// With threads > 1 (the second argument; GptModel::set_threads), every iteration also runs the
// same two calls on a one-thread copy of the model, interleaved, so the threads' gain is a
// paired ratio too:
//   x_threads(n)   mean n-row time on one thread / mean n-row time on `threads` threads
//   x_threads(1)   the same for the one-row call
// Before timing, the benchmark checks in this (-march=native) binary that every row of an n-row
// call equals the one-row forward of the same prefix bit for bit.
//
// T_tree(nodes) vs T_chain (BM_GptTree): what scoring a tree of drafts costs against a chain with
// as many drafts. Both compute nodes + 1 rows on the cached 100-token context (a tree call: the
// last committed token and every node; a chain call: the last committed token and the drafts).
// Each iteration times the tree call, the chain call with the same row count and a one-row call:
//   T_tree/T(1), T_chain/T(1)   mean tree / chain call time over the mean one-row time
//   T_tree/T_chain             mean tree time / mean chain time (the price of the tree layout)
//   ..._min                    the same from the fastest call of each kind
// Tree shape: two children of the root, then two per node, breadth first (depth ~ log2 nodes).
// Before timing, every tree row is checked bitwise against the chain call of its path.

#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "gpt/gpt_model.hpp"

namespace {

using specdec::token_t;
using specdec::examples::GptModel;
using Clock = std::chrono::steady_clock;

constexpr std::string_view kText =
    "1:1 In the beginning God created the heaven and the earth. 1:2 And the earth was without "
    "form, and void; and darkness was upon the face of the deep.";
constexpr std::size_t kContextTokens = 100;
constexpr std::size_t kMaxRows = 16;

/// Models are loaded once per process and shared by all n: one per file and thread count.
GptModel& model(const std::string& file, std::size_t threads = 1) {
  static std::map<std::pair<std::string, std::size_t>, std::unique_ptr<GptModel>> models;
  auto& slot = models[{file, threads}];
  if (!slot) {
    slot = std::make_unique<GptModel>(
        GptModel::from_file(std::filesystem::path(SPECDEC_MODELS_DIR) / file));
    slot->set_threads(threads);
  }
  return *slot;
}

/// Row i of target(context, n) must equal draft(first size - n + 1 + i tokens), bit for bit.
bool batched_rows_match_single_rows(GptModel& m, std::span<const token_t> context) {
  const std::size_t vocab = m.vocab_size();
  std::vector<float> single(kMaxRows * vocab);
  m.reset();
  for (std::size_t k = 0; k < kMaxRows; ++k) {
    const auto row = m.draft(context.first(context.size() - kMaxRows + 1 + k));
    std::copy(row.begin(), row.end(), single.begin() + static_cast<std::ptrdiff_t>(k * vocab));
  }
  for (std::size_t n = 1; n <= kMaxRows; ++n) {
    const auto rows = m.target(context, n);
    const float* expected = single.data() + (kMaxRows - n) * vocab;
    if (std::memcmp(rows.data(), expected, n * vocab * sizeof(float)) != 0) return false;
  }
  return true;
}

void BM_GptForward(benchmark::State& state, const std::string& file) {
  const auto n = static_cast<std::size_t>(state.range(0));
  const auto threads = static_cast<std::size_t>(state.range(1));
  GptModel& m = model(file, threads);
  GptModel* one_thread = threads > 1 ? &model(file, 1) : nullptr;  // the paired reference
  const std::vector<token_t> text(kText.begin(), kText.begin() + kContextTokens + kMaxRows);
  const std::span<const token_t> verify_context(text.data(), kContextTokens + n);  // + n tokens
  const std::span<const token_t> one_row_context(text.data(), kContextTokens + 1);

  if (!batched_rows_match_single_rows(m, text)) {
    state.SkipWithError("n-row forward is not bitwise equal to one-row forwards");
    return;
  }
  m.reset();
  m.draft(std::span(text).first(kContextTokens));  // cache the context
  if (one_thread != nullptr) {
    one_thread->reset();
    one_thread->draft(std::span(text).first(kContextTokens));
  }

  double reference_n_row_seconds = 0.0, reference_one_row_seconds = 0.0;
  double n_row_seconds = 0.0, one_row_seconds = 0.0;
  double fastest_n_row = 1e30, fastest_one_row = 1e30;
  std::clock_t n_row_cpu = 0, one_row_cpu = 0;
  for (auto _ : state) {
    const std::clock_t c0 = std::clock();
    const auto t0 = Clock::now();
    benchmark::DoNotOptimize(m.target(verify_context, n).data());  // keeps 100, computes n
    const auto t1 = Clock::now();
    const std::clock_t c1 = std::clock();
    benchmark::DoNotOptimize(m.target(one_row_context, 1).data());  // keeps 100, computes 1
    const auto t2 = Clock::now();
    const std::clock_t c2 = std::clock();
    n_row_cpu += c1 - c0;
    one_row_cpu += c2 - c1;
    const double n_row = std::chrono::duration<double>(t1 - t0).count();
    const double one_row = std::chrono::duration<double>(t2 - t1).count();
    state.SetIterationTime(n_row);
    n_row_seconds += n_row;
    one_row_seconds += one_row;
    fastest_n_row = std::min(fastest_n_row, n_row);
    fastest_one_row = std::min(fastest_one_row, one_row);
    if (one_thread != nullptr) {
      const auto t3 = Clock::now();
      benchmark::DoNotOptimize(one_thread->target(verify_context, n).data());
      const auto t4 = Clock::now();
      benchmark::DoNotOptimize(one_thread->target(one_row_context, 1).data());
      const auto t5 = Clock::now();
      reference_n_row_seconds += std::chrono::duration<double>(t4 - t3).count();
      reference_one_row_seconds += std::chrono::duration<double>(t5 - t4).count();
    }
  }
  const auto iterations = static_cast<double>(state.iterations());
  if (one_thread != nullptr) {
    state.counters["x_threads(n)"] = reference_n_row_seconds / n_row_seconds;
    state.counters["x_threads(1)"] = reference_one_row_seconds / one_row_seconds;
  }
  state.counters["T(n)/T(1)"] = n_row_seconds / one_row_seconds;
  state.counters["T(n)/T(1)_min"] = fastest_n_row / fastest_one_row;
  state.counters["T(n)/T(1)_cpu"] =
      static_cast<double>(n_row_cpu) / static_cast<double>(std::max<std::clock_t>(one_row_cpu, 1));
  state.counters["T1_ms"] = 1e3 * one_row_seconds / iterations;
  state.counters["rows/s"] =
      benchmark::Counter(static_cast<double>(n) * iterations, benchmark::Counter::kIsRate);
}

/// The benchmark's tree of `nodes` nodes: node i's parent is i / 2 - 1 (two root children, then
/// two children per node), tokens taken from the text after the context.
void binary_tree(std::size_t nodes, std::span<const token_t> text, std::vector<token_t>& tokens,
                 std::vector<std::int32_t>& parents) {
  tokens.resize(nodes);
  parents.resize(nodes);
  for (std::size_t i = 0; i < nodes; ++i) {
    tokens[i] = text[kContextTokens + 1 + i % kMaxRows];
    parents[i] = static_cast<std::int32_t>(i / 2) - 1;
  }
}

/// Every tree row equals the row of the same prefix in a chain call over the node's path.
bool tree_rows_match_path_calls(GptModel& m, std::span<const token_t> committed,
                                std::span<const token_t> tokens,
                                std::span<const std::int32_t> parents) {
  const std::size_t vocab = m.vocab_size();
  const auto tree = m.score_tree(committed, tokens, parents);
  const std::vector<float> rows(tree.begin(), tree.end());
  for (std::size_t node = 0; node < tokens.size(); ++node) {
    std::vector<token_t> context(committed.begin(), committed.end());
    std::size_t depth = 0;
    for (auto i = static_cast<std::int32_t>(node); i >= 0; i = parents[std::size_t(i)]) ++depth;
    context.resize(committed.size() + depth);
    std::size_t at = context.size();
    for (auto i = static_cast<std::int32_t>(node); i >= 0; i = parents[std::size_t(i)]) {
      context[--at] = tokens[std::size_t(i)];
    }
    const auto row = m.draft(context);
    if (std::memcmp(row.data(), rows.data() + (node + 1) * vocab, vocab * sizeof(float)) != 0) {
      return false;
    }
  }
  return true;
}

void BM_GptTree(benchmark::State& state, const std::string& file) {
  GptModel& m = model(file);
  const auto nodes = static_cast<std::size_t>(state.range(0));
  const std::vector<token_t> text(kText.begin(), kText.begin() + kContextTokens + kMaxRows + 1);
  std::vector<token_t> chain_context(text.begin(), text.begin() + kContextTokens + 1);
  for (std::size_t i = 0; i < nodes; ++i) {
    chain_context.push_back(text[kContextTokens + 1 + i % kMaxRows]);
  }
  const std::span<const token_t> committed(text.data(), kContextTokens + 1);  // 100 cached + 1
  std::vector<token_t> tokens;
  std::vector<std::int32_t> parents;
  binary_tree(nodes, text, tokens, parents);
  if (nodes > m.max_tree_nodes()) {
    state.SkipWithError("tree larger than the model's max_tree_nodes");
    return;
  }

  m.reset();
  if (!tree_rows_match_path_calls(m, committed, tokens, parents)) {
    state.SkipWithError("tree rows are not bitwise equal to the chain calls of their paths");
    return;
  }
  m.reset();
  m.draft(std::span(text).first(kContextTokens));  // cache the context

  double tree_seconds = 0.0, chain_seconds = 0.0, one_row_seconds = 0.0;
  double fastest_tree = 1e30, fastest_chain = 1e30, fastest_one_row = 1e30;
  for (auto _ : state) {
    const auto t0 = Clock::now();
    benchmark::DoNotOptimize(m.score_tree(committed, tokens, parents).data());  // 1 + nodes rows
    const auto t1 = Clock::now();
    benchmark::DoNotOptimize(m.target(chain_context, nodes + 1).data());  // 1 + nodes rows
    const auto t2 = Clock::now();
    benchmark::DoNotOptimize(m.target(committed, 1).data());  // keeps 100, computes 1
    const auto t3 = Clock::now();
    const double tree = std::chrono::duration<double>(t1 - t0).count();
    const double chain = std::chrono::duration<double>(t2 - t1).count();
    const double one_row = std::chrono::duration<double>(t3 - t2).count();
    state.SetIterationTime(tree);
    tree_seconds += tree;
    chain_seconds += chain;
    one_row_seconds += one_row;
    fastest_tree = std::min(fastest_tree, tree);
    fastest_chain = std::min(fastest_chain, chain);
    fastest_one_row = std::min(fastest_one_row, one_row);
  }
  const auto iterations = static_cast<double>(state.iterations());
  state.counters["T_tree/T(1)"] = tree_seconds / one_row_seconds;
  state.counters["T_chain/T(1)"] = chain_seconds / one_row_seconds;
  state.counters["T_tree/T_chain"] = tree_seconds / chain_seconds;
  state.counters["T_tree/T(1)_min"] = fastest_tree / fastest_one_row;
  state.counters["T_chain/T(1)_min"] = fastest_chain / fastest_one_row;
  state.counters["T1_ms"] = 1e3 * one_row_seconds / iterations;
}

// Arguments: n, threads (1 and 2: this project's 2-core hosts; add more with ArgsProduct).
BENCHMARK_CAPTURE(BM_GptForward, target, std::string("kjv-target.spdc"))
    ->ArgNames({"n", "threads"})
    ->ArgsProduct({benchmark::CreateDenseRange(1, kMaxRows, 1), {1, 2}})
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_GptForward, draft, std::string("kjv-draft.spdc"))
    ->ArgNames({"n", "threads"})
    ->ArgsProduct({benchmark::CreateDenseRange(1, kMaxRows, 1), {1, 2}})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

BENCHMARK_CAPTURE(BM_GptTree, target, std::string("kjv-target.spdc"))
    ->ArgName("nodes")
    ->DenseRange(1, 16)
    ->Arg(20)
    ->Arg(24)
    ->Arg(32)
    ->Arg(48)
    ->Arg(64)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace

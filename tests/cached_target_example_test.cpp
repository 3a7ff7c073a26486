// The README's KV-cached target (section "Model contract, lifetimes and KV caches") and its
// "Measuring speedup on your own models" example, compiled and run. The cached target is checked
// against an uncached reference on every call of decodes with rejections (so rolled-back
// positions are recomputed), and a variant that returns the right number of the wrong rows (the
// first n computed instead of the last n) is shown to fail that check. The README holds verbatim
// copies of the two marked regions; the last test fails when they drift apart.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <fstream>
#include <iostream>
#include <iterator>
#include <span>
#include <string>
#include <vector>

#include "specdec/specdec.hpp"

namespace {

// --- README example begins: cached target ---
// A toy KV-cached target, V = 8. Position i holds one state (its "keys and values"), computed from
// the token at i and the state at i - 1: the logits after position i depend on the whole prefix,
// and a position can only be computed after its predecessors.
struct CachedTarget {
  static constexpr std::size_t V = 8;
  specdec::ContextCache cache;  // the tokens whose state is held below
  std::vector<float> state;     // (cached positions) one state per position: the "KV cache"
  std::vector<float> computed;  // (fresh positions, V) the rows this call computed

  std::span<const float> operator()(std::span<const specdec::token_t> context, std::size_t n) {
    const auto [keep, fresh] = cache.update(context, n);  // keep <= context.size() - n
    state.resize(keep);  // roll back what the last call speculated past
    computed.clear();
    for (const specdec::token_t token : fresh) {  // positions keep .. context.size() - 1 only
      const float previous = state.empty() ? 0.0f : state.back();
      state.push_back(0.5f * previous + static_cast<float>(token + 1));
      for (std::size_t v = 0; v < V; ++v) {
        computed.push_back(std::sin(state.back() * static_cast<float>(v + 1)));
      }
    }
    // Row i must follow the first context.size() - n + 1 + i tokens: the LAST n rows computed.
    // fresh.size() is often more than n (the first call, after a rejection), and returning the
    // first n rows would be the right number of wrong rows, which no check of the decoder catches.
    return std::span<const float>(computed).last(n * V);
  }
  void reset() {  // start fresh: forget the cached tokens and their states together
    cache.clear();
    state.clear();
  }
};
// --- README example ends: cached target ---

// A cheap draft: the target's recurrence over the last three tokens only, so it agrees with the
// target often but not always.
struct ToyDraft {
  std::vector<float> operator()(std::span<const specdec::token_t> context) const {
    float state = 0.0f;
    for (const specdec::token_t token : context.last(std::min<std::size_t>(3, context.size()))) {
      state = 0.5f * state + static_cast<float>(token + 1);
    }
    std::vector<float> row(CachedTarget::V);
    for (std::size_t v = 0; v < row.size(); ++v) {
      row[v] = std::sin(state * static_cast<float>(v + 1));
    }
    return row;
  }
};

// The same model without a cache: every call recomputes every position from scratch, with the
// same float operations in the same order, so its rows equal a correct cached model's bitwise.
std::vector<float> reference_rows(std::span<const specdec::token_t> context, std::size_t n) {
  std::vector<float> rows;
  float state = 0.0f;
  for (std::size_t position = 0; position < context.size(); ++position) {
    state = 0.5f * state + static_cast<float>(context[position] + 1);
    if (position + n < context.size()) continue;  // only the last n positions' rows
    for (std::size_t v = 0; v < CachedTarget::V; ++v) {
      rows.push_back(std::sin(state * static_cast<float>(v + 1)));
    }
  }
  return rows;
}

// The bug the README warns about: the right number of rows, from the wrong end.
struct FirstRowsTarget : CachedTarget {
  std::span<const float> operator()(std::span<const specdec::token_t> context, std::size_t n) {
    (void)CachedTarget::operator()(context, n);
    return std::span<const float>(computed).first(n * CachedTarget::V);
  }
};

// Forwards every call to the model under test and compares its rows with the reference's.
template <class Model>
struct CheckedTarget {
  Model model;
  std::size_t calls = 0;
  std::size_t wrong_calls = 0;       // calls whose rows differ from the reference
  std::size_t calls_with_extra = 0;  // calls that computed more positions than rows returned
  std::span<const float> operator()(std::span<const specdec::token_t> context, std::size_t n) {
    const std::span<const float> rows = model(context, n);
    ++calls;
    if (model.computed.size() > rows.size()) ++calls_with_extra;
    const std::vector<float> expected = reference_rows(context, n);
    if (!std::equal(rows.begin(), rows.end(), expected.begin(), expected.end())) ++wrong_calls;
    return rows;
  }
};

struct ReferenceTarget {
  std::vector<float> rows;
  std::span<const float> operator()(std::span<const specdec::token_t> context, std::size_t n) {
    rows = reference_rows(context, n);
    return rows;
  }
};

// Decodes a few prompts at T = 0 and T = 1 through `target` (one model shared by both decoders,
// never reset: prefix reuse across generate() calls is exercised too) and with the reference.
template <class Model>
void decode_with_rejections(CheckedTarget<Model>& target, std::size_t& rejecting_rounds,
                            std::size_t& token_mismatches) {
  ToyDraft draft;
  ReferenceTarget reference;
  specdec::SpeculativeDecoder speculative(draft, target);
  specdec::AutoregressiveDecoder plain(target);
  specdec::SpeculativeDecoder uncached(draft, reference);
  specdec::GenerationConfig config;
  config.max_new_tokens = 40;
  config.draft_length = 4;
  for (const float temperature : {0.0f, 1.0f}) {
    config.sampling.temperature = temperature;
    for (const std::vector<specdec::token_t>& prompt :
         {std::vector<specdec::token_t>{1, 2, 3}, {5}, {7, 0, 7, 0, 2}}) {
      const specdec::GenerationResult cached = speculative.generate(prompt, config);
      const specdec::GenerationResult expected = uncached.generate(prompt, config);
      (void)plain.generate(prompt, config);
      rejecting_rounds += cached.stats.rejecting_rounds;
      if (cached.tokens != expected.tokens) ++token_mismatches;
    }
  }
}

TEST(CachedTargetExample, ReturnsTheRowsOfAnUncachedReference) {
  CheckedTarget<CachedTarget> target;
  std::size_t rejecting_rounds = 0;
  std::size_t token_mismatches = 0;
  decode_with_rejections(target, rejecting_rounds, token_mismatches);
  EXPECT_GT(rejecting_rounds, 0u);         // rollbacks happened
  EXPECT_GT(target.calls_with_extra, 0u);  // so did calls where the row offset matters
  EXPECT_EQ(target.wrong_calls, 0u);
  EXPECT_EQ(token_mismatches, 0u);
}

TEST(CachedTargetExample, TheCheckCatchesRowsFromTheWrongEnd) {
  CheckedTarget<FirstRowsTarget> target;
  std::size_t rejecting_rounds = 0;
  std::size_t token_mismatches = 0;
  decode_with_rejections(target, rejecting_rounds, token_mismatches);
  EXPECT_GT(target.wrong_calls, 0u);
}

// --- README example begins: measuring speedup ---
TEST(MeasuringSpeedup, ReadmeSnippet) {
  CachedTarget target;  // one cached model shared by both decoders
  ToyDraft draft;
  specdec::SpeculativeDecoder speculative(draft, target);
  specdec::AutoregressiveDecoder plain(target);
  const std::vector<std::vector<specdec::token_t>> prompts{{1, 2, 3}, {4, 5}, {6, 0, 1, 2}};
  specdec::GenerationConfig config;
  config.max_new_tokens = 64;
  config.sampling.temperature = 0.0f;  // greedy: every pair must match token for token
  const std::vector<std::size_t> draft_lengths{1, 2, 4, 6};

  const specdec::SpeedupTable table = specdec::measure_speedup(
      speculative, plain, prompts, config, draft_lengths,
      [&] { target.reset(); });  // before every run: no run reuses another's cached prompt
  specdec::print_speedup_table(std::cout, table);
  EXPECT_EQ(table.greedy_mismatches(), 0u);
}
// --- README example ends: measuring speedup ---

// The README's copies of the marked regions above, byte for byte.
std::string file_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

TEST(CachedTargetExample, ReadmeHoldsTheseSnippetsVerbatim) {
  const std::string source = file_text(SPECDEC_SOURCE_DIR "/tests/cached_target_example_test.cpp");
  const std::string readme = file_text(SPECDEC_SOURCE_DIR "/README.md");
  ASSERT_FALSE(source.empty());
  ASSERT_FALSE(readme.empty());
  for (const std::string name : {"cached target", "measuring speedup"}) {
    const std::string begin = "// --- README example begins: " + name + " ---\n";
    const std::string end = "// --- README example ends: " + name + " ---";
    const std::size_t from = source.find(begin);
    const std::size_t to = source.find(end);
    ASSERT_NE(from, std::string::npos) << name;
    ASSERT_NE(to, std::string::npos) << name;
    const std::string snippet = source.substr(from + begin.size(), to - from - begin.size());
    EXPECT_NE(readme.find("```cpp\n" + snippet + "```"), std::string::npos)
        << "README.md no longer holds the '" << name << "' example of this file verbatim";
  }
}

}  // namespace

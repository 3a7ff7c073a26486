// The KV-cached tree target of docs/design.md ("KV-cached tree targets"), compiled and run. Over
// decodes that mix tree rounds (fixed shapes, distinct and duplicate siblings) and chain rounds,
// verified greedily so that most rounds reject somewhere, every call's rows are compared with an
// uncached reference; a variant that truncates its cache without moving the kept path into place
// is shown to fail that comparison. design.md holds a verbatim copy of the marked region; the
// last test fails when they drift apart.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "specdec/specdec.hpp"

namespace {

using specdec::token_t;

// --- design.md example begins: cached tree target ---
// A toy KV-cached target that also scores trees, V = 8. As in README's CachedTarget, the state of
// a position (its "keys and values") is computed from its token and the state before it; for a
// tree node, "before" is its parent, or the last committed position for a child of the root.
struct CachedTreeTarget {
  static constexpr std::size_t V = 8;
  specdec::TreeContextCache cache;  // the tokens whose states are held below, and the last tree
  std::vector<float> state;         // (slots) committed positions, then the last tree's nodes
  std::vector<float> computed;      // (rows, V) the rows this call computed

  // Chain call: n rows, row i after the first context.size() - n + 1 + i tokens.
  std::span<const float> operator()(std::span<const token_t> context, std::size_t n) {
    const specdec::TreeCacheUpdate plan = cache.update(context, n);
    start(plan);
    for (const token_t token : plan.new_tokens) compute(previous_state(), token);
    return std::span<const float>(computed).last(n * V);  // the LAST n rows computed
  }

  // Tree call: row 0 after `committed`, row 1 + i after committed + the path to node i.
  std::span<const float> score_tree(std::span<const token_t> committed,
                                    std::span<const token_t> tokens,
                                    std::span<const std::int32_t> parents) {
    const specdec::TreeCacheUpdate plan = cache.update_tree(committed, tokens, parents);
    start(plan);
    // keep < committed.size(): the last committed position is computed, and its row is row 0.
    for (const token_t token : plan.new_tokens) compute(previous_state(), token);
    for (std::size_t i = 0; i < tokens.size(); ++i) {  // node i goes to slot committed.size() + i
      const std::size_t parent_slot = parents[i] < 0
                                          ? committed.size() - 1
                                          : committed.size() + static_cast<std::size_t>(parents[i]);
      compute(state[parent_slot], tokens[i]);
    }
    return std::span<const float>(computed).last((tokens.size() + 1) * V);
  }

  void reset() {  // start fresh: forget the cached tokens, the tree and their states together
    cache.clear();
    state.clear();
  }

 private:
  void start(const specdec::TreeCacheUpdate& plan) {
    // The path of the last tree that the new context follows becomes ordinary positions (its
    // states move to the slots of their positions); the rest of the tree and of any rejected
    // chain is dropped by the truncation.
    plan.move_kept_nodes([&](std::size_t from, std::size_t to) { state[to] = state[from]; });
    state.resize(plan.keep);
    computed.clear();
  }
  float previous_state() const { return state.empty() ? 0.0f : state.back(); }
  void compute(float previous, token_t token) {  // one new slot and its row
    state.push_back(0.5f * previous + static_cast<float>(token + 1));
    for (std::size_t v = 0; v < V; ++v) {
      computed.push_back(std::sin(state.back() * static_cast<float>(v + 1)));
    }
  }
};
// --- design.md example ends: cached tree target ---

// The mistake the move prevents: a model that truncates to `keep` as if the tree's nodes were a
// chain. Slot committed + d then holds node d's state, not the state of the kept node at depth d.
struct TruncatingTreeTarget {
  static constexpr std::size_t V = CachedTreeTarget::V;
  specdec::TreeContextCache cache;
  std::vector<float> state;
  std::vector<float> computed;

  std::span<const float> operator()(std::span<const token_t> context, std::size_t n) {
    const specdec::TreeCacheUpdate plan = cache.update(context, n);
    start(plan);
    for (const token_t token : plan.new_tokens) compute(previous_state(), token);
    return std::span<const float>(computed).last(n * V);
  }
  std::span<const float> score_tree(std::span<const token_t> committed,
                                    std::span<const token_t> tokens,
                                    std::span<const std::int32_t> parents) {
    const specdec::TreeCacheUpdate plan = cache.update_tree(committed, tokens, parents);
    start(plan);
    for (const token_t token : plan.new_tokens) compute(previous_state(), token);
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      const std::size_t parent_slot = parents[i] < 0
                                          ? committed.size() - 1
                                          : committed.size() + static_cast<std::size_t>(parents[i]);
      compute(state[parent_slot], tokens[i]);
    }
    return std::span<const float>(computed).last((tokens.size() + 1) * V);
  }

 private:
  void start(const specdec::TreeCacheUpdate& plan) {
    state.resize(plan.keep);  // no move_kept_nodes
    computed.clear();
  }
  float previous_state() const { return state.empty() ? 0.0f : state.back(); }
  void compute(float previous, token_t token) {
    state.push_back(0.5f * previous + static_cast<float>(token + 1));
    for (std::size_t v = 0; v < V; ++v) {
      computed.push_back(std::sin(state.back() * static_cast<float>(v + 1)));
    }
  }
};

constexpr std::size_t V = CachedTreeTarget::V;

// The same model without a cache, computed from scratch with the same float operations in the
// same order: a correct cached model's rows equal these bitwise.
float state_after(std::span<const token_t> tokens) {
  float state = 0.0f;
  for (const token_t token : tokens) state = 0.5f * state + static_cast<float>(token + 1);
  return state;
}

void append_row(std::vector<float>& rows, float state) {
  for (std::size_t v = 0; v < V; ++v) rows.push_back(std::sin(state * static_cast<float>(v + 1)));
}

std::vector<float> reference_rows(std::span<const token_t> context, std::size_t n) {
  std::vector<float> rows;
  for (std::size_t length = context.size() - n + 1; length <= context.size(); ++length) {
    append_row(rows, state_after(context.first(length)));
  }
  return rows;
}

/// committed + the path root -> node, tokens in order.
std::vector<token_t> path_context(std::span<const token_t> committed,
                                  std::span<const token_t> tokens,
                                  std::span<const std::int32_t> parents, std::size_t node) {
  std::vector<token_t> path;
  for (auto i = static_cast<std::int32_t>(node); i >= 0; i = parents[static_cast<std::size_t>(i)]) {
    path.insert(path.begin(), tokens[static_cast<std::size_t>(i)]);
  }
  path.insert(path.begin(), committed.begin(), committed.end());
  return path;
}

std::vector<float> reference_tree_rows(std::span<const token_t> committed,
                                       std::span<const token_t> tokens,
                                       std::span<const std::int32_t> parents) {
  std::vector<float> rows;
  append_row(rows, state_after(committed));
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    append_row(rows, state_after(path_context(committed, tokens, parents, i)));
  }
  return rows;
}

// Forwards every call to the model under test and compares its rows with the reference's.
template <class Model>
struct CheckedTreeTarget {
  Model model;
  std::size_t calls = 0;
  std::size_t tree_calls = 0;
  std::size_t wrong_calls = 0;  // calls whose rows differ from the reference
  std::span<const float> operator()(std::span<const token_t> context, std::size_t n) {
    const std::span<const float> rows = model(context, n);
    count(rows, reference_rows(context, n));
    return rows;
  }
  std::span<const float> score_tree(std::span<const token_t> committed,
                                    std::span<const token_t> tokens,
                                    std::span<const std::int32_t> parents) {
    const std::span<const float> rows = model.score_tree(committed, tokens, parents);
    ++tree_calls;
    count(rows, reference_tree_rows(committed, tokens, parents));
    return rows;
  }
  void count(std::span<const float> rows, const std::vector<float>& expected) {
    ++calls;
    if (!std::equal(rows.begin(), rows.end(), expected.begin(), expected.end())) ++wrong_calls;
  }
};

// A cheap draft: the target's recurrence over the last three tokens only.
std::vector<float> draft_row(std::span<const token_t> context) {
  std::vector<float> row;
  append_row(row, state_after(context.last(std::min<std::size_t>(3, context.size()))));
  return row;
}

token_t argmax(std::span<const float> row) {
  return static_cast<token_t>(std::max_element(row.begin(), row.end()) - row.begin());
}

struct DecodeCounts {
  std::size_t tree_rounds = 0;
  std::size_t rejecting_tree_rounds = 0;  // the accepted path ended above a leaf
  std::size_t moved_paths = 0;            // accepted paths through a node not at slot depth
  std::size_t accepted = 0;
};

// Decodes with rounds the way a tree decoder does (greedy verification, so the committed text is
// exactly the target's greedy text): a tree round drafts a tree of the given widths per depth
// from the draft's top tokens (distinct siblings) or from draws of its softmax with replacement
// (siblings may repeat), scores it in one call, and commits the accepted path plus the target's
// next token; every third round is a chain round of 3 drafts instead.
template <class Target>
std::vector<token_t> tree_decode(Target& target, std::vector<token_t> committed,
                                 std::size_t new_tokens, std::uint64_t seed, DecodeCounts& counts) {
  std::mt19937_64 gen(seed);
  const std::size_t goal = committed.size() + new_tokens;
  std::vector<token_t> tokens;
  std::vector<std::int32_t> parents;
  for (std::size_t round = 0; committed.size() < goal; ++round) {
    if (round % 3 == 2) {  // chain round
      std::vector<token_t> context = committed;
      for (int k = 0; k < 3; ++k) context.push_back(argmax(draft_row(context)));
      const std::span<const float> rows = target(context, 4);
      std::size_t i = 0;
      while (i < 3 && argmax(rows.subspan(i * V, V)) == context[committed.size() + i]) ++i;
      const token_t next = argmax(rows.subspan(i * V, V));
      committed.assign(context.begin(),
                       context.begin() + static_cast<std::ptrdiff_t>(committed.size() + i));
      committed.push_back(next);
      continue;
    }
    // Tree round: widths per depth, e.g. 3x2x1.
    const std::size_t depth = 1 + gen() % 3;
    const bool with_replacement = gen() % 2 == 0;
    tokens.clear();
    parents.clear();
    std::vector<std::int32_t> level{-1};
    for (std::size_t d = 0; d < depth; ++d) {
      const std::size_t width = 1 + gen() % 3;
      std::vector<std::int32_t> next_level;
      for (const std::int32_t parent : level) {
        const std::vector<token_t> context =
            parent < 0 ? committed
                       : path_context(committed, tokens, parents, static_cast<std::size_t>(parent));
        std::vector<float> row = draft_row(context);
        std::vector<token_t> order(V);
        for (std::size_t v = 0; v < V; ++v) order[v] = static_cast<token_t>(v);
        std::stable_sort(order.begin(), order.end(),
                         [&](token_t a, token_t b) { return row[a] > row[b]; });
        for (std::size_t w = 0; w < width; ++w) {
          // With replacement: each sibling is one of the draft's top 3, so repeats are common.
          tokens.push_back(with_replacement ? order[gen() % 3] : order[w]);
          parents.push_back(parent);
          next_level.push_back(static_cast<std::int32_t>(tokens.size() - 1));
        }
      }
      level = next_level;
    }
    const std::span<const float> rows = target.score_tree(committed, tokens, parents);
    ++counts.tree_rounds;
    // Greedy verification: follow the child that is the target's argmax while there is one.
    std::int32_t at = -1;
    std::size_t accepted = 0;
    bool moved = false;
    for (;;) {
      const token_t best = argmax(rows.subspan(static_cast<std::size_t>(at + 1) * V, V));
      std::int32_t child = -1;
      for (std::size_t i = 0; i < tokens.size() && child < 0; ++i) {
        if (parents[i] == at && tokens[i] == best) child = static_cast<std::int32_t>(i);
      }
      if (child < 0) {
        if (accepted < depth) ++counts.rejecting_tree_rounds;
        committed.push_back(best);
        break;
      }
      moved = moved || static_cast<std::size_t>(child) != accepted;
      committed.push_back(tokens[static_cast<std::size_t>(child)]);
      at = child;
      ++accepted;
    }
    counts.accepted += accepted;
    if (moved) ++counts.moved_paths;
  }
  committed.resize(goal);
  return committed;
}

// Plain greedy decoding with the uncached reference: what every tree decode must reproduce.
std::vector<token_t> greedy_reference(std::vector<token_t> committed, std::size_t new_tokens) {
  const std::size_t goal = committed.size() + new_tokens;
  while (committed.size() < goal) committed.push_back(argmax(reference_rows(committed, 1)));
  return committed;
}

template <class Model>
void decode_prompts(CheckedTreeTarget<Model>& target, DecodeCounts& counts,
                    std::size_t& text_mismatches) {
  std::uint64_t seed = 1;
  for (const std::vector<token_t>& prompt :
       {std::vector<token_t>{1, 2, 3}, {5}, {7, 0, 7, 0, 2}, {4, 4}}) {
    // One model, never reset: prefixes carry over from one decode to the next.
    const std::vector<token_t> text = tree_decode(target, prompt, 60, seed++, counts);
    if (text != greedy_reference(prompt, 60)) ++text_mismatches;
  }
}

TEST(CachedTreeTargetExample, ReturnsTheRowsOfAnUncachedReference) {
  CheckedTreeTarget<CachedTreeTarget> target;
  DecodeCounts counts;
  std::size_t text_mismatches = 0;
  decode_prompts(target, counts, text_mismatches);
  EXPECT_GT(counts.tree_rounds, 20u);
  EXPECT_GT(counts.rejecting_tree_rounds, 5u);  // rounds that dropped part of the tree
  EXPECT_GT(counts.moved_paths, 5u);            // kept paths whose rows had to move
  EXPECT_GT(counts.accepted, 30u);
  std::printf(
      "[ decodes  ] %zu tree rounds (%zu rejecting, %zu kept paths moved), %zu tree "
      "tokens accepted, %zu calls\n",
      counts.tree_rounds, counts.rejecting_tree_rounds, counts.moved_paths, counts.accepted,
      target.calls);
  EXPECT_GT(target.calls, target.tree_calls);  // chain calls between the tree calls
  EXPECT_EQ(target.wrong_calls, 0u);
  EXPECT_EQ(text_mismatches, 0u);
}

TEST(CachedTreeTargetExample, TheCheckCatchesAPathLeftOutOfPlace) {
  CheckedTreeTarget<TruncatingTreeTarget> target;
  DecodeCounts counts;
  std::size_t text_mismatches = 0;
  decode_prompts(target, counts, text_mismatches);
  EXPECT_GT(target.wrong_calls, 0u);
}

TEST(CachedTreeTargetExample, ErrorsLeaveTheCacheUsable) {
  CachedTreeTarget target;
  const std::vector<token_t> committed{1, 2, 3};
  const std::vector<token_t> tokens{4, 5};
  const std::vector<std::int32_t> parents{-1, 0};
  (void)target.score_tree(committed, tokens, parents);
  const std::vector<std::int32_t> cyclic{-1, 1};
  EXPECT_THROW((void)target.score_tree(committed, tokens, cyclic), std::invalid_argument);
  const std::vector<token_t> next{1, 2, 3, 4, 5, 6};
  const std::span<const float> rows = target(next, 2);
  EXPECT_TRUE(std::ranges::equal(rows, reference_rows(next, 2)));
}

// design.md's copy of the marked region above, byte for byte.
std::string file_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

TEST(CachedTreeTargetExample, DesignDocHoldsThisSnippetVerbatim) {
  const std::string source =
      file_text(SPECDEC_SOURCE_DIR "/tests/cached_tree_target_example_test.cpp");
  const std::string design = file_text(SPECDEC_SOURCE_DIR "/docs/design.md");
  ASSERT_FALSE(source.empty());
  ASSERT_FALSE(design.empty());
  const std::string begin = "// --- design.md example begins: cached tree target ---\n";
  const std::string end = "// --- design.md example ends: cached tree target ---";
  const std::size_t from = source.find(begin);
  const std::size_t to = source.find(end);
  ASSERT_NE(from, std::string::npos);
  ASSERT_NE(to, std::string::npos);
  const std::string snippet = source.substr(from + begin.size(), to - from - begin.size());
  EXPECT_NE(design.find("```cpp\n" + snippet + "```"), std::string::npos)
      << "docs/design.md no longer holds the 'cached tree target' example of this file verbatim";
}

}  // namespace

// Tests for context_cache.hpp: the keep / new_tokens split and ContextCache's rollback; for tree
// calls, TreeContextCache's kept path (duplicate siblings, no path, a path cut by the rows a call
// needs) and its errors, and a model of the slots checked against every plan of random sequences
// of chain calls, tree calls, clears and bad calls.
#include "specdec/context_cache.hpp"

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

using specdec::token_t;
using Tokens = std::vector<token_t>;
using Parents = std::vector<std::int32_t>;
using Nodes = std::vector<std::size_t>;

TEST(ContextCacheTest, PlanKeepsLongestCommonPrefix) {
  const Tokens cached{1, 2, 3, 4, 5};
  const Tokens context{1, 2, 3, 9, 9, 9};
  const auto plan = specdec::plan_cache_update(cached, context, 1);
  EXPECT_EQ(plan.keep, 3u);
  EXPECT_EQ(Tokens(plan.new_tokens.begin(), plan.new_tokens.end()), (Tokens{9, 9, 9}));
}

TEST(ContextCacheTest, RowsNeededForceRecomputation) {
  // Everything is cached, but logits of the last 3 positions are requested.
  const Tokens cached{1, 2, 3, 4, 5};
  const Tokens context{1, 2, 3, 4, 5};
  const auto plan = specdec::plan_cache_update(cached, context, 3);
  EXPECT_EQ(plan.keep, 2u);
  EXPECT_EQ(plan.new_tokens.size(), 3u);
  EXPECT_EQ(plan.new_tokens.data(), context.data() + 2);
}

TEST(ContextCacheTest, EmptyCacheComputesEverything) {
  const Tokens context{7, 8};
  const auto plan = specdec::plan_cache_update({}, context, 1);
  EXPECT_EQ(plan.keep, 0u);
  EXPECT_EQ(plan.new_tokens.size(), 2u);
}

TEST(ContextCacheTest, ContextShorterThanCacheRollsBack) {
  const Tokens cached{1, 2, 3, 4, 5, 6};
  const Tokens context{1, 2, 3};
  const auto plan = specdec::plan_cache_update(cached, context, 1);
  EXPECT_EQ(plan.keep, 2u);
  EXPECT_EQ(Tokens(plan.new_tokens.begin(), plan.new_tokens.end()), (Tokens{3}));
}

TEST(ContextCacheTest, InvalidRowsNeededThrows) {
  const Tokens context{1, 2};
  EXPECT_THROW((void)specdec::plan_cache_update({}, context, 0), std::invalid_argument);
  EXPECT_THROW((void)specdec::plan_cache_update({}, context, 3), std::invalid_argument);
  try {
    (void)specdec::plan_cache_update({}, context, 3);
  } catch (const std::invalid_argument& error) {
    EXPECT_EQ(std::string(error.what()).rfind("specdec: ", 0), 0u);
  }
}

TEST(ContextCacheTest, SpeculativeRoundTrip) {
  specdec::ContextCache cache(64);
  // Prompt.
  auto plan = cache.update(Tokens{1, 2, 3}, 1);
  EXPECT_EQ(plan.keep, 0u);
  // Draft adds speculative tokens one by one: only the new one is computed.
  plan = cache.update(Tokens{1, 2, 3, 10}, 1);
  EXPECT_EQ(plan.keep, 3u);
  plan = cache.update(Tokens{1, 2, 3, 10, 11}, 1);
  EXPECT_EQ(plan.keep, 4u);
  // Rejection at 11: the next context replaces it; the cache rolls back to 4.
  plan = cache.update(Tokens{1, 2, 3, 10, 20}, 1);
  EXPECT_EQ(plan.keep, 4u);
  EXPECT_EQ(Tokens(cache.tokens().begin(), cache.tokens().end()), (Tokens{1, 2, 3, 10, 20}));
  cache.clear();
  EXPECT_EQ(cache.size(), 0u);
}

// ---------------------------------------------------------------------------------------------
// Trees

Tokens concat(const Tokens& a, const Tokens& b) {
  Tokens out = a;
  out.insert(out.end(), b.begin(), b.end());
  return out;
}

Nodes nodes_of(std::span<const std::size_t> nodes) { return {nodes.begin(), nodes.end()}; }
Tokens tokens_of(std::span<const token_t> tokens) { return {tokens.begin(), tokens.end()}; }

// committed {1, 2, 3}; tree (node: token, parent)
//   0: 5, -1     1: 6, -1     2: 7, 0     3: 8, 0     4: 9, 1     5: 4, 3
// paths: 5 | 6 | 5 7 | 5 8 | 6 9 | 5 8 4
const Tokens kCommitted{1, 2, 3};
const Tokens kTreeTokens{5, 6, 7, 8, 9, 4};
const Parents kTreeParents{-1, -1, 0, 0, 1, 3};

TEST(TreeDepthsTest, DepthsAndHeight) {
  std::vector<std::size_t> depths(6);
  EXPECT_EQ(specdec::tree_depths(kTreeParents, depths), 3u);
  EXPECT_EQ(depths, (std::vector<std::size_t>{0, 0, 1, 1, 1, 2}));
  EXPECT_EQ(specdec::tree_depths({}, {}), 0u);
}

TEST(TreeDepthsTest, BadParentsNameTheNodeAndTheRange) {
  std::vector<std::size_t> depths(4);
  const auto message = [&](const Parents& parents) -> std::string {
    try {
      (void)specdec::tree_depths(parents, depths);
    } catch (const std::invalid_argument& error) {
      return error.what();
    }
    return "no exception";
  };
  EXPECT_EQ(message({-1, 0, 2}),  // not topological: a node is its own parent
            "specdec: tree node 2 has parent 2; expected a parent in [-1, 2): nodes in "
            "topological order (parents[i] < i), -1 for a child of the root");
  EXPECT_NE(message({-1, 3, 0}).find("tree node 1 has parent 3"), std::string::npos);
  EXPECT_NE(message({-2}).find("tree node 0 has parent -2; expected a parent in [-1, 0)"),
            std::string::npos);
  EXPECT_NE(message({0}).find("tree node 0 has parent 0"), std::string::npos);
  EXPECT_NE(message({-1, 0, 1, 2, 3}).find("room for 4 depths for 5 nodes"), std::string::npos);
}

TEST(TreeContextCacheTest, TreeCallPlansTheCommittedContextWithOneRow) {
  specdec::TreeContextCache cache(16, 8);
  auto plan = cache.update_tree(kCommitted, kTreeTokens, kTreeParents);
  EXPECT_EQ(plan.keep, 0u);
  EXPECT_EQ(tokens_of(plan.new_tokens), kCommitted);
  EXPECT_TRUE(plan.kept_nodes.empty());
  EXPECT_TRUE(cache.has_tree());
  EXPECT_EQ(tokens_of(cache.tokens()), kCommitted);
  // Same committed context again: its last position is recomputed for row 0.
  plan = cache.update_tree(kCommitted, kTreeTokens, kTreeParents);
  EXPECT_EQ(plan.keep, 2u);
  EXPECT_EQ(tokens_of(plan.new_tokens), (Tokens{3}));
  EXPECT_TRUE(plan.kept_nodes.empty());  // the context stops where the tree starts
}

TEST(TreeContextCacheTest, NextContextKeepsTheDeepestMatchingPath) {
  specdec::TreeContextCache cache(16, 8);
  (void)cache.update_tree(kCommitted, kTreeTokens, kTreeParents);
  // Accepted 5 8 4, then the bonus 0: the decoder's next target call.
  const Tokens context = concat(kCommitted, {5, 8, 4, 0, 2, 2});
  const auto plan = cache.update(context, 3);
  EXPECT_EQ(plan.tree_start, 3u);
  EXPECT_EQ(nodes_of(plan.kept_nodes), (Nodes{0, 3, 5}));
  EXPECT_EQ(plan.keep, 6u);
  EXPECT_EQ(tokens_of(plan.new_tokens), (Tokens{0, 2, 2}));
  EXPECT_FALSE(cache.has_tree());
  EXPECT_EQ(tokens_of(cache.tokens()), context);
  std::vector<std::pair<std::size_t, std::size_t>> moves;
  plan.move_kept_nodes([&](std::size_t from, std::size_t to) { moves.emplace_back(from, to); });
  // Node 0 is in place already; node 3 (slot 6) goes to position 4, node 5 (slot 8) to 5.
  EXPECT_EQ(moves, (std::vector<std::pair<std::size_t, std::size_t>>{{6, 4}, {8, 5}}));
}

TEST(TreeContextCacheTest, DuplicateSiblingsAnyBranchThatGoesDeepest) {
  // Two siblings drew token 5; only the second one's child continues.
  const Tokens tokens{5, 5, 7, 8};
  const Parents parents{-1, -1, 0, 1};
  specdec::TreeContextCache cache;
  (void)cache.update_tree(kCommitted, tokens, parents);
  auto plan = cache.update(concat(kCommitted, {5, 8, 1}), 1);
  EXPECT_EQ(nodes_of(plan.kept_nodes), (Nodes{1, 3}));
  EXPECT_EQ(plan.keep, 5u);
  // Only the shared first token: the first sibling (either has the same K/V rows).
  (void)cache.update_tree(kCommitted, tokens, parents);
  plan = cache.update(concat(kCommitted, {5, 2}), 1);
  EXPECT_EQ(nodes_of(plan.kept_nodes), (Nodes{0}));
  EXPECT_EQ(plan.keep, 4u);
}

TEST(TreeContextCacheTest, NoPathOrAnotherCommittedContextKeepsNoNode) {
  specdec::TreeContextCache cache;
  (void)cache.update_tree(kCommitted, kTreeTokens, kTreeParents);
  const Tokens rejected_at_root = concat(kCommitted, {2, 5});
  auto plan = cache.update(rejected_at_root, 1);
  EXPECT_TRUE(plan.kept_nodes.empty());
  EXPECT_EQ(plan.keep, 3u);
  EXPECT_EQ(tokens_of(plan.new_tokens), (Tokens{2, 5}));

  (void)cache.update_tree(kCommitted, kTreeTokens, kTreeParents);
  plan = cache.update(Tokens{1, 9, 5, 8}, 1);  // diverges inside the committed context
  EXPECT_TRUE(plan.kept_nodes.empty());
  EXPECT_EQ(plan.keep, 1u);

  (void)cache.update_tree(kCommitted, kTreeTokens, kTreeParents);
  plan = cache.update(Tokens{1, 2}, 1);  // shorter than the committed context
  EXPECT_TRUE(plan.kept_nodes.empty());
  EXPECT_EQ(plan.keep, 1u);
}

TEST(TreeContextCacheTest, RowsNeededCutTheKeptPath) {
  specdec::TreeContextCache cache;
  (void)cache.update_tree(kCommitted, kTreeTokens, kTreeParents);
  // The path 5 8 4 is followed, but the call wants rows for the last 3 positions: 8, 4, 6.
  const Tokens context = concat(kCommitted, {5, 8, 4, 6});
  const auto plan = cache.update(context, 3);
  EXPECT_EQ(plan.keep, 4u);
  EXPECT_EQ(nodes_of(plan.kept_nodes), (Nodes{0}));  // nodes 3 and 5 are recomputed: not moved
  EXPECT_EQ(tokens_of(plan.new_tokens), (Tokens{8, 4, 6}));
}

TEST(TreeContextCacheTest, TreeAfterTreeKeepsThePathInTheNewCommittedContext) {
  specdec::TreeContextCache cache;
  (void)cache.update_tree(kCommitted, kTreeTokens, kTreeParents);
  const Tokens committed = concat(kCommitted, {6, 9, 1});  // accepted 6 9, then 1
  const auto plan = cache.update_tree(committed, Tokens{2, 3}, Parents{-1, 0});
  EXPECT_EQ(nodes_of(plan.kept_nodes), (Nodes{1, 4}));
  EXPECT_EQ(plan.keep, 5u);
  EXPECT_EQ(tokens_of(plan.new_tokens), (Tokens{1}));
  EXPECT_EQ(tokens_of(cache.tokens()), committed);
  EXPECT_EQ(tokens_of(cache.tree_tokens()), (Tokens{2, 3}));
  EXPECT_EQ(nodes_of(cache.tree_depths()), (Nodes{0, 1}));
}

TEST(TreeContextCacheTest, BadCallsThrowAndChangeNothing) {
  specdec::TreeContextCache cache;
  (void)cache.update_tree(kCommitted, kTreeTokens, kTreeParents);
  const Tokens next = concat(kCommitted, {5, 8, 4, 0});
  EXPECT_THROW((void)cache.update_tree(next, Tokens{1, 2}, Parents{-1, 1}), std::invalid_argument);
  EXPECT_THROW((void)cache.update_tree(next, Tokens{1, 2}, Parents{-1}), std::invalid_argument);
  EXPECT_THROW((void)cache.update_tree({}, Tokens{1}, Parents{-1}), std::invalid_argument);
  EXPECT_THROW((void)cache.update(next, 0), std::invalid_argument);
  EXPECT_THROW((void)cache.update(next, next.size() + 1), std::invalid_argument);
  try {
    (void)cache.update_tree(next, Tokens{1, 2, 3}, Parents{-1, 0});
  } catch (const std::invalid_argument& error) {
    EXPECT_EQ(std::string(error.what()),
              "specdec: tree of 3 tokens and 2 parents; expected one parent per token");
  }
  // The tree scored before the errors is still the one the next context is matched against.
  const auto plan = cache.update(next, 1);
  EXPECT_EQ(nodes_of(plan.kept_nodes), (Nodes{0, 3, 5}));
  EXPECT_EQ(plan.keep, 6u);
}

// Slot by slot, what a model's KV buffer holds: the token sequence whose last position a slot's
// row was computed for. A plan is right iff, after the model follows it, slots [0, keep) hold
// the context's prefixes in order and every new row is computed; and keep is as large as the
// rows held allow (every prefix up to keep is held somewhere), limited by the rows needed.
class SlotModel {
 public:
  std::size_t kept_nodes = 0;  // tree nodes kept, summed over the calls
  std::size_t moves = 0;       // of which not in place already

  void chain_call(specdec::TreeContextCache& cache, const Tokens& context, std::size_t rows) {
    const auto plan = cache.update(context, rows);
    check_keep(plan, context, rows);
    apply(plan, context);
  }

  void tree_call(specdec::TreeContextCache& cache, const Tokens& committed, const Tokens& tokens,
                 const Parents& parents) {
    const auto plan = cache.update_tree(committed, tokens, parents);
    check_keep(plan, committed, 1);
    apply(plan, committed);
    std::vector<Tokens> paths(tokens.size());
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      paths[i] = parents[i] < 0 ? committed : paths[static_cast<std::size_t>(parents[i])];
      paths[i].push_back(tokens[i]);
      slots_.push_back(paths[i]);  // node i at slot committed.size() + i
    }
  }

  void clear(specdec::TreeContextCache& cache) {
    cache.clear();
    slots_.clear();
  }

 private:
  void check_keep(const specdec::TreeCacheUpdate& plan, const Tokens& context,
                  std::size_t rows) const {
    std::size_t reusable = 0;  // the longest prefix all of whose positions some slot holds
    while (reusable < context.size() &&
           holds(Tokens(context.begin(),
                        context.begin() + static_cast<std::ptrdiff_t>(reusable) + 1))) {
      ++reusable;
    }
    EXPECT_EQ(plan.keep, std::min(reusable, context.size() - rows));
  }

  bool holds(const Tokens& prefix) const {
    for (const Tokens& slot : slots_) {
      if (slot == prefix) return true;
    }
    return false;
  }

  void apply(const specdec::TreeCacheUpdate& plan, const Tokens& context) {
    kept_nodes += plan.kept_nodes.size();
    plan.move_kept_nodes([&](std::size_t from, std::size_t to) {
      ++moves;
      ASSERT_LT(from, slots_.size());
      ASSERT_LT(to, from);
      slots_[to] = slots_[from];
    });
    ASSERT_LE(plan.keep, slots_.size());
    slots_.resize(plan.keep);
    for (std::size_t s = 0; s < plan.keep; ++s) {
      ASSERT_EQ(slots_[s],
                Tokens(context.begin(), context.begin() + static_cast<std::ptrdiff_t>(s) + 1))
          << "slot " << s << " holds the wrong row";
    }
    ASSERT_EQ(plan.new_tokens.data(), context.data() + plan.keep);
    ASSERT_EQ(plan.keep + plan.new_tokens.size(), context.size());
    for (std::size_t s = plan.keep; s < context.size(); ++s) {
      slots_.emplace_back(context.begin(), context.begin() + static_cast<std::ptrdiff_t>(s) + 1);
    }
  }

  std::vector<Tokens> slots_;
};

// Random decoding-like sequences over a 3-token vocabulary (siblings share tokens often): the
// next context usually follows a path of the last tree and goes on, sometimes follows none,
// rolls back into the committed context or starts over; bad calls are mixed in.
TEST(TreeContextCacheTest, RandomCallSequencesKeepEverySlotRight) {
  std::mt19937_64 gen(20261203);
  const auto below = [&](std::size_t n) { return static_cast<std::size_t>(gen() % n); };
  SlotModel model;
  for (int run = 0; run < 200; ++run) {
    specdec::TreeContextCache cache(64, 16);
    model.clear(cache);
    Tokens committed{static_cast<token_t>(below(3))};
    Tokens tree_tokens;
    Parents tree_parents;
    for (int call = 0; call < 30; ++call) {
      SCOPED_TRACE(::testing::Message() << "run " << run << ", call " << call);
      // The next context: the committed one, a random path of the last tree (if any), more.
      Tokens context = committed;
      if (!tree_tokens.empty() && below(4) != 0) {
        std::vector<std::size_t> path;
        for (std::size_t node = below(tree_tokens.size());;) {
          path.insert(path.begin(), node);
          if (tree_parents[node] < 0) break;
          node = static_cast<std::size_t>(tree_parents[node]);
        }
        for (const std::size_t node : path) context.push_back(tree_tokens[node]);
      }
      for (std::size_t extra = below(3) + 1; extra > 0; --extra) {
        context.push_back(static_cast<token_t>(below(3)));
      }
      if (below(10) == 0) context.resize(1 + below(context.size()));  // roll back
      if (below(25) == 0) model.clear(cache);
      if (context.size() > 40) context.erase(context.begin() + 1, context.begin() + 30);

      switch (below(5)) {
        case 0: {  // bad call: nothing changes
          EXPECT_THROW((void)cache.update_tree(context, Tokens{1, 1}, Parents{0, -1}),
                       std::invalid_argument);
          break;
        }
        case 1:
        case 2: {  // chain call (a target call verifying some of it, or a draft call)
          model.chain_call(cache, context, 1 + below(context.size()));
          tree_tokens.clear();
          tree_parents.clear();
          committed = context;
          break;
        }
        default: {  // tree call
          const std::size_t nodes = below(9);
          tree_tokens.resize(nodes);
          tree_parents.resize(nodes);
          for (std::size_t i = 0; i < nodes; ++i) {
            tree_tokens[i] = static_cast<token_t>(below(3));
            tree_parents[i] = static_cast<std::int32_t>(below(i + 1)) - 1;
          }
          model.tree_call(cache, context, tree_tokens, tree_parents);
          committed = context;
          break;
        }
      }
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
  EXPECT_GT(model.kept_nodes, 500u);  // the sequences exercise kept paths ...
  EXPECT_GT(model.moves, 200u);       // ... and rows moved into place
  std::printf("[ slots    ] %zu tree nodes kept, %zu rows moved\n", model.kept_nodes, model.moves);
}
}  // namespace

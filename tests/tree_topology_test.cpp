// The one tree topology of specdec/tree.hpp (validation, depths, paths, child links, the deepest
// path a context follows) and its users agreeing on it: the decoder's proposal helpers
// (detail::check_tree, path_to, sibling_ranks, ChildLinks), TreeContextCache (depths, kept path)
// and PathwiseTreeTarget (each node's row is scored on its root-to-node path). Random valid
// trees are checked against a brute-force restatement; every invalid tree gets one message.
// (The llama.cpp adapter's agreement is in llama_cpp_test.)

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "specdec/context_cache.hpp"
#include "specdec/tree.hpp"

namespace {

using specdec::token_t;
using Parents = std::vector<std::int32_t>;
using Tokens = std::vector<token_t>;

/// A random valid tree of `n` nodes: each node under the root or a random earlier node, with a
/// token from a small vocabulary (so siblings often share one).
struct RandomTree {
  Parents parents;
  Tokens tokens;
};

RandomTree random_tree(std::mt19937& gen, std::size_t n) {
  RandomTree tree;
  for (std::size_t i = 0; i < n; ++i) {
    std::uniform_int_distribution<std::int32_t> parent(-1, static_cast<std::int32_t>(i) - 1);
    tree.parents.push_back(parent(gen));
    tree.tokens.push_back(static_cast<token_t>(gen() % 3));
  }
  return tree;
}

/// The restatement: depth by walking to the root; the path as the walk reversed.
std::size_t walk_depth(const Parents& parents, std::size_t node) {
  std::size_t depth = 0;
  for (std::int32_t v = parents[node]; v >= 0; v = parents[static_cast<std::size_t>(v)]) ++depth;
  return depth;
}

std::vector<std::int32_t> walk_path(const Parents& parents, std::int32_t node) {
  std::vector<std::int32_t> path;
  for (std::int32_t v = node; v >= 0; v = parents[static_cast<std::size_t>(v)]) {
    path.insert(path.begin(), v);
  }
  return path;
}

specdec::Proposal<float> proposal_of(const RandomTree& tree) {
  specdec::Proposal<float> proposal;
  proposal.tokens = tree.tokens;
  proposal.parents = tree.parents;
  return proposal;
}

TEST(TreeTopologyTest, UsersAgreeOnDepthsPathsAndChildrenOfRandomTrees) {
  std::mt19937 gen(20261204);
  std::vector<std::size_t> depths, ranks, scratch;
  std::vector<std::int32_t> path;
  specdec::ChildLinks links;
  specdec::TreeContextCache cache;
  const Tokens committed{7, 8, 9};
  for (int trial = 0; trial < 300; ++trial) {
    const RandomTree tree = random_tree(gen, static_cast<std::size_t>(gen() % 24));
    const std::size_t n = tree.parents.size();
    depths.assign(n, 0);
    const std::size_t height = specdec::tree_depths(tree.parents, depths);

    // Depths and height, against the walk.
    std::size_t expected_height = 0;
    for (std::size_t i = 0; i < n; ++i) {
      ASSERT_EQ(depths[i], walk_depth(tree.parents, i)) << "node " << i;
      expected_height = std::max(expected_height, depths[i] + 1);
    }
    EXPECT_EQ(height, expected_height);

    // TreeContextCache records the same depths.
    (void)cache.update_tree(committed, tree.tokens, tree.parents);
    ASSERT_EQ(cache.tree_depths().size(), n);
    for (std::size_t i = 0; i < n; ++i) EXPECT_EQ(cache.tree_depths()[i], depths[i]);

    // The decoder's helpers: paths (tree_path and path_to), sibling ranks' height.
    const specdec::Proposal<float> proposal = proposal_of(tree);
    EXPECT_EQ(specdec::detail::sibling_ranks(proposal, ranks, scratch), height);
    for (std::size_t i = 0; i < n; ++i) {
      const auto node = static_cast<std::int32_t>(i);
      const std::vector<std::int32_t> expected = walk_path(tree.parents, node);
      const std::size_t length = specdec::tree_path(tree.parents, node, path);
      ASSERT_EQ(length, depths[i] + 1);
      EXPECT_EQ(std::vector<std::int32_t>(path.begin(), path.begin() + length), expected);
      EXPECT_EQ(specdec::detail::path_to(proposal, node, path), length);
    }
    EXPECT_EQ(specdec::tree_path(tree.parents, -1, path), 0u);

    // Child links: every node once, under its parent, in node order; ranks count earlier
    // siblings.
    links.build(proposal);
    std::vector<int> seen(n, 0);
    for (std::int32_t parent = -1; parent < static_cast<std::int32_t>(n); ++parent) {
      std::size_t rank = 0;
      std::int32_t previous = -1;
      for (std::int32_t child = links.first(parent); child >= 0; child = links.next(child)) {
        const auto c = static_cast<std::size_t>(child);
        EXPECT_EQ(tree.parents[c], parent);
        EXPECT_GT(child, previous);
        EXPECT_EQ(ranks[c], rank++);
        previous = child;
        ++seen[c];
      }
    }
    for (std::size_t i = 0; i < n; ++i) EXPECT_EQ(seen[i], 1) << "node " << i;
  }
}

TEST(TreeTopologyTest, DeepestFollowedNodeIsTheDeepestPathTheContextContinuesWith) {
  std::mt19937 gen(7);
  std::vector<std::size_t> depths;
  std::vector<std::uint8_t> reaches;
  std::vector<std::int32_t> path;
  const Tokens committed{5, 6};
  for (int trial = 0; trial < 300; ++trial) {
    const RandomTree tree = random_tree(gen, 1 + static_cast<std::size_t>(gen() % 20));
    const std::size_t n = tree.parents.size();
    depths.assign(n, 0);
    (void)specdec::tree_depths(tree.parents, depths);
    // A continuation: a random node's path, sometimes with a wrong token somewhere, then noise.
    const auto target = static_cast<std::int32_t>(gen() % n);
    Tokens continuation;
    for (const std::int32_t v : walk_path(tree.parents, target)) {
      continuation.push_back(tree.tokens[static_cast<std::size_t>(v)]);
    }
    if (gen() % 3 == 0) continuation[gen() % continuation.size()] = 9;
    continuation.push_back(static_cast<token_t>(gen() % 4));

    // Brute force: the deepest (first of equals) node whose whole path matches.
    std::int32_t expected = -1;
    for (std::size_t i = 0; i < n; ++i) {
      const std::vector<std::int32_t> node_path =
          walk_path(tree.parents, static_cast<std::int32_t>(i));
      bool follows = node_path.size() <= continuation.size();
      for (std::size_t d = 0; follows && d < node_path.size(); ++d) {
        follows = continuation[d] == tree.tokens[static_cast<std::size_t>(node_path[d])];
      }
      if (follows && (expected < 0 || depths[i] > depths[static_cast<std::size_t>(expected)])) {
        expected = static_cast<std::int32_t>(i);
      }
    }
    const std::int32_t found =
        specdec::deepest_followed_node(tree.tokens, tree.parents, depths, continuation, reaches);
    ASSERT_EQ(found, expected);

    // TreeContextCache keeps that node's path (a chain call asking for one row after it).
    specdec::TreeContextCache cache;
    (void)cache.update_tree(committed, tree.tokens, tree.parents);
    Tokens context = committed;
    context.insert(context.end(), continuation.begin(), continuation.end());
    const specdec::TreeCacheUpdate plan = cache.update(context, 1);
    const std::size_t length = specdec::tree_path(tree.parents, found, path);
    const std::size_t kept = std::min(length, context.size() - 1 - committed.size());
    ASSERT_EQ(plan.kept_nodes.size(), kept);
    for (std::size_t d = 0; d < kept; ++d) {
      EXPECT_EQ(plan.kept_nodes[d], static_cast<std::size_t>(path[d]));
    }
  }
}

/// A target that returns, for each call, one row holding a hash of its whole context: the
/// PathwiseTreeTarget's row for node i must be the row of committed + node i's path.
struct ContextHashTarget {
  std::vector<float> row;
  std::span<const float> operator()(std::span<const token_t> context, std::size_t) {
    float hash = 0;
    for (const token_t token : context) hash = hash * 7.0f + static_cast<float>(token + 1);
    row.assign(2, 0.0f);
    row[0] = hash;
    row[1] = static_cast<float>(context.size());
    return row;
  }
};

TEST(TreeTopologyTest, PathwiseTreeTargetScoresEachNodeOnItsPath) {
  std::mt19937 gen(11);
  ContextHashTarget target;
  specdec::PathwiseTreeTarget<ContextHashTarget> tree_target(target);
  ContextHashTarget reference;
  const Tokens committed{1, 2};
  for (int trial = 0; trial < 50; ++trial) {
    const RandomTree tree = random_tree(gen, static_cast<std::size_t>(gen() % 12));
    const std::span<const float> rows =
        tree_target.score_tree(committed, tree.tokens, tree.parents);
    ASSERT_EQ(rows.size(), 2 * (tree.tokens.size() + 1));
    for (std::size_t i = 0; i < tree.tokens.size(); ++i) {
      Tokens context = committed;
      for (const std::int32_t v : walk_path(tree.parents, static_cast<std::int32_t>(i))) {
        context.push_back(tree.tokens[static_cast<std::size_t>(v)]);
      }
      const std::span<const float> expected = reference(context, 1);
      EXPECT_EQ(rows[2 * (i + 1)], expected[0]) << "node " << i;
      EXPECT_EQ(rows[2 * (i + 1) + 1], expected[1]) << "node " << i;
    }
  }
}

/// The message a call throws (std::invalid_argument), without "specdec: " and without the
/// caller's name in front (everything up to "tree ").
template <class Call>
std::string invariant_message(Call&& call) {
  try {
    call();
  } catch (const std::invalid_argument& error) {
    const std::string message = error.what();
    const std::size_t at = message.find("tree ");
    return at == std::string::npos ? message : message.substr(at);
  }
  return "(no exception)";
}

TEST(TreeTopologyTest, EveryCheckerGivesTheSameMessageForEachBadTree) {
  const Tokens committed{1, 2};
  const std::vector<Parents> bad_trees{{0}, {-2}, {-1, 1}, {-1, 0, 2}, {-1, 5, 0}, {-1, -1, -7}};
  for (const Parents& parents : bad_trees) {
    const Tokens tokens(parents.size(), 1);
    std::vector<std::size_t> depths(parents.size());
    const std::string expected = invariant_message([&] { specdec::check_tree_parents(parents); });
    ASSERT_EQ(expected.rfind("tree node ", 0), 0u) << expected;
    EXPECT_NE(expected.find("expected a parent in [-1, "), std::string::npos);
    EXPECT_EQ(invariant_message([&] { (void)specdec::tree_depths(parents, depths); }), expected);
    specdec::TreeContextCache cache;
    EXPECT_EQ(invariant_message([&] { (void)cache.update_tree(committed, tokens, parents); }),
              expected);
    specdec::Proposal<float> proposal;
    proposal.tokens = tokens;
    proposal.parents = parents;
    const std::string decoder = invariant_message([&] { specdec::detail::check_tree(proposal); });
    EXPECT_EQ(decoder, expected);
  }
  // Sizes: one message.
  const Tokens tokens{1, 2, 3};
  const Parents parents{-1, 0};
  const std::string expected =
      invariant_message([&] { specdec::check_tree_sizes(tokens.size(), parents.size()); });
  EXPECT_EQ(expected, "tree of 3 tokens and 2 parents; expected one parent per token");
  specdec::TreeContextCache cache;
  EXPECT_EQ(invariant_message([&] { (void)cache.update_tree(committed, tokens, parents); }),
            expected);
}

TEST(TreeTopologyTest, DecoderNamesTheProposer) {
  specdec::Proposal<float> proposal;
  const Tokens tokens{1, 2};
  const Parents parents{-1, 1};
  proposal.tokens = tokens;
  proposal.parents = parents;
  try {
    specdec::detail::check_tree(proposal);
    FAIL() << "accepted a bad tree";
  } catch (const std::invalid_argument& error) {
    EXPECT_EQ(std::string(error.what()),
              "specdec: proposer returned a tree: tree node 1 has parent 1; expected a parent in "
              "[-1, 1): nodes in topological order (parents[i] < i), -1 for a child of the root");
  }
}

}  // namespace

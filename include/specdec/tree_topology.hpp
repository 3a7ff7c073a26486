#pragma once
/// \file
/// \brief Tree topology, written once: validation of a tree's parents, node depths, the
/// root-to-node path, the deepest path a context follows, child links, and a proposal's
/// accepted path. One depth convention and one message per invariant, for the decoder, the
/// tree strategies, TreeContextCache and the model adapters (tree.hpp includes this header).

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <vector>

#include "specdec/detail/error.hpp"
#include "specdec/proposal.hpp"
#include "specdec/types.hpp"
#include "specdec/verify.hpp"

namespace specdec {

// ============================================================================================
// Tree topology: the one convention of the decoder, TreeContextCache and the model adapters
// ============================================================================================
//
// A tree of n nodes is its `parents` (n entries) in topological order: parents[i] in [-1, i),
// -1 for a child of the root (the committed context). A chain proposal has no parents: node i's
// parent is i - 1.
//
//   depth(i)  = 0 for a child of the root, depth(parents[i]) + 1 otherwise: node i sits at
//               position committed.size() + depth(i), and its root-to-node path has
//               depth(i) + 1 nodes;
//   height    = the nodes on the longest root-to-node path: max depth + 1 (0 for no nodes).
//
// Each invariant has one message, whoever checks it (a caller may name itself in front):
//   "tree of T tokens and P parents; expected one parent per token"
//   "tree node i has parent p; expected a parent in [-1, i): nodes in topological order
//    (parents[i] < i), -1 for a child of the root"

/// \brief Throws std::invalid_argument unless a tree has one parent per token.
inline void check_tree_sizes(std::size_t tokens, std::size_t parents) {
  if (tokens != parents) {
    detail::throw_invalid_argument("tree of ", tokens, " tokens and ", parents,
                                   " parents; expected one parent per token");
  }
}

/// \brief Throws std::invalid_argument naming the first node whose parent is not in [-1, i).
inline void check_tree_parents(std::span<const std::int32_t> parents) {
  for (std::size_t i = 0; i < parents.size(); ++i) {
    const std::int32_t parent = parents[i];
    if (parent < -1 || (parent >= 0 && static_cast<std::size_t>(parent) >= i)) {
      detail::throw_invalid_argument(
          "tree node ", i, " has parent ", parent, "; expected a parent in [-1, ", i,
          "): nodes in topological order (parents[i] < i), -1 for a child of the root");
    }
  }
}

/// \brief Checks a tree (check_tree_parents) and writes each node's depth (0 = a child of the
/// root). \returns the height (0 for no nodes).
/// \throws std::invalid_argument for a bad parent, or if depths holds fewer entries than
/// parents.
inline std::size_t tree_depths(std::span<const std::int32_t> parents,
                               std::span<std::size_t> depths) {
  if (depths.size() < parents.size()) {
    detail::throw_invalid_argument("tree_depths: room for ", depths.size(), " depths for ",
                                   parents.size(), " nodes; expected one per node");
  }
  check_tree_parents(parents);
  std::size_t height = 0;
  for (std::size_t i = 0; i < parents.size(); ++i) {
    const std::int32_t parent = parents[i];
    depths[i] = parent < 0 ? 0 : depths[static_cast<std::size_t>(parent)] + 1;
    height = std::max(height, depths[i] + 1);
  }
  return height;
}

namespace detail {

// ============================================================================================
// Tree helpers
// ============================================================================================

/// Node i's parent (-1 = the root); chains (empty parents) have i - 1.
[[nodiscard]] inline std::int32_t parent_in(std::span<const std::int32_t> parents,
                                            std::size_t node) noexcept {
  return parents.empty() ? static_cast<std::int32_t>(node) - 1 : parents[node];
}

}  // namespace detail

/// \brief Node `node`'s parent: -1 for a child of the root (the committed context); node - 1
/// for a chain (empty parents). Requires node < proposal.size().
template <class Scalar>
[[nodiscard]] std::int32_t parent_of(const Proposal<Scalar>& proposal, std::size_t node) noexcept {
  return detail::parent_in(proposal.parents, node);
}

/// \brief The path root -> `node` (node indices, the node last) written to the front of `path`
/// (its size only grows); \returns its length, depth(node) + 1 (0 for node = -1, the root).
/// Empty `parents` is a chain. The tree must be valid (check_tree_parents).
inline std::size_t tree_path(std::span<const std::int32_t> parents, std::int32_t node,
                             std::vector<std::int32_t>& path) {
  std::size_t length = 0;
  for (std::int32_t v = node; v >= 0; v = detail::parent_in(parents, static_cast<std::size_t>(v))) {
    ++length;
  }
  if (path.size() < length) path.resize(length);
  std::size_t i = length;
  for (std::int32_t v = node; v >= 0; v = detail::parent_in(parents, static_cast<std::size_t>(v))) {
    path[--i] = v;
  }
  return length;
}

/// \brief The deepest node whose whole root-to-node path `continuation` begins with
/// (continuation[depth(v)] == tokens[v] for every node v on the path), or -1 if none: which
/// path of the last tree a new context kept. Siblings may hold the same token (drawn with
/// replacement), so every branch is searched; of equally deep nodes the first wins.
/// `depths` as tree_depths wrote them; `reaches` is scratch (its size only grows). O(n).
inline std::int32_t deepest_followed_node(std::span<const token_t> tokens,
                                          std::span<const std::int32_t> parents,
                                          std::span<const std::size_t> depths,
                                          std::span<const token_t> continuation,
                                          std::vector<std::uint8_t>& reaches) {
  if (reaches.size() < tokens.size()) reaches.resize(tokens.size());
  std::int32_t deepest = -1;
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    const std::int32_t parent = parents[i];
    const bool parent_reached = parent < 0 || reaches[static_cast<std::size_t>(parent)] != 0;
    reaches[i] =
        parent_reached && depths[i] < continuation.size() && continuation[depths[i]] == tokens[i];
    if (reaches[i] != 0 && (deepest < 0 || depths[i] > depths[static_cast<std::size_t>(deepest)])) {
      deepest = static_cast<std::int32_t>(i);
    }
  }
  return deepest;
}

/// \brief The children of every node (and of the root) in node order: first(u) is node u's
/// first child (u = -1: the root's), next(i) the next child of i's parent, -1 for none. Built in
/// O(n) into buffers whose sizes only grow.
class ChildLinks {
 public:
  /// \brief Room for trees of up to `n` nodes: build() allocates nothing for them.
  void reserve(std::size_t n) {
    if (first_child_.size() < n + 1) first_child_.resize(n + 1);
    if (last_child_.size() < n + 1) last_child_.resize(n + 1);
    if (next_sibling_.size() < n) next_sibling_.resize(n);
  }
  /// \brief The links of a valid tree (empty parents: a chain of n nodes).
  void build(std::span<const std::int32_t> parents, std::size_t n) {
    reserve(n);
    std::fill_n(first_child_.begin(), n + 1, -1);
    std::fill_n(last_child_.begin(), n + 1, -1);
    for (std::size_t i = 0; i < n; ++i) {
      const auto slot = static_cast<std::size_t>(detail::parent_in(parents, i) + 1);
      next_sibling_[i] = -1;
      if (first_child_[slot] < 0) {
        first_child_[slot] = static_cast<std::int32_t>(i);
      } else {
        next_sibling_[static_cast<std::size_t>(last_child_[slot])] = static_cast<std::int32_t>(i);
      }
      last_child_[slot] = static_cast<std::int32_t>(i);
    }
  }
  template <class Scalar>
  void build(const Proposal<Scalar>& proposal) {
    build(proposal.parents, proposal.size());
  }
  [[nodiscard]] std::int32_t first(std::int32_t node) const noexcept {
    return first_child_[static_cast<std::size_t>(node + 1)];
  }
  [[nodiscard]] std::int32_t next(std::int32_t node) const noexcept {
    return next_sibling_[static_cast<std::size_t>(node)];
  }

 private:
  std::vector<std::int32_t> first_child_;   // (n + 1) first child of node u at [u + 1], -1 none
  std::vector<std::int32_t> next_sibling_;  // (n) next child of the same parent, -1 none
  std::vector<std::int32_t> last_child_;    // (n + 1) scratch
};

namespace detail {
// The names verifiers used before they were public.
using specdec::ChildLinks;
using specdec::parent_of;
}  // namespace detail

namespace detail {

/// A proposal's tree is well formed: parents[i] in [-1, i) (check_tree_parents, the message
/// behind "proposer returned a tree: ").
template <class Scalar>
void check_tree(const Proposal<Scalar>& proposal) {
  try {
    check_tree_parents(proposal.parents);
  } catch (const std::invalid_argument& error) {
    throw_invalid_argument("proposer returned a tree: ", message_without_prefix(error.what()));
  }
}

/// tree_path of a proposal.
template <class Scalar>
std::size_t path_to(const Proposal<Scalar>& proposal, std::int32_t node,
                    std::vector<std::int32_t>& path) {
  return tree_path(proposal.parents, node, path);
}

/// The accepted path of a verdict on a tree (node indices root -> verdict.accepted_node) in
/// `path` (size >= the proposal's); throws std::invalid_argument for a verdict that names no
/// node of the tree or a path of another length than verdict.accepted.
template <class Scalar>
std::span<const std::int32_t> accepted_path(const Proposal<Scalar>& proposal,
                                            const VerifyResult& verdict,
                                            std::vector<std::int32_t>& path) {
  const std::int32_t node = verdict.accepted_node;
  if (node < -1 || node >= static_cast<std::int32_t>(proposal.size())) {
    throw_invalid_argument("verifier accepted node ", node, " of a tree of ", proposal.size(),
                           " nodes; expected -1 (none) or a node in [0, ", proposal.size(), ")");
  }
  const std::size_t length = path_to(proposal, node, path);
  if (length != verdict.accepted) {
    throw_invalid_argument("verifier accepted ", verdict.accepted, " tokens ending at node ", node,
                           ", whose path has ", length, "; expected the path's length");
  }
  return std::span<const std::int32_t>(path.data(), length);
}

/// ranks[i] = how many earlier siblings node i has (0 = its parent's first child); returns the
/// tree's height. `scratch` holds n + 1 counters and n depths.
template <class Scalar>
std::size_t sibling_ranks(const Proposal<Scalar>& proposal, std::vector<std::size_t>& ranks,
                          std::vector<std::size_t>& scratch) {
  const std::size_t n = proposal.size();
  if (ranks.size() < n) ranks.resize(n);
  if (scratch.size() < 2 * n + 1) scratch.resize(2 * n + 1);
  std::fill_n(scratch.begin(), n + 1, std::size_t{0});
  std::size_t* const depth = scratch.data() + n + 1;  // (n) depth(i), as tree_depths
  std::size_t height = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const std::int32_t parent = parent_of(proposal, i);
    ranks[i] = scratch[static_cast<std::size_t>(parent + 1)]++;
    depth[i] = parent < 0 ? 0 : depth[static_cast<std::size_t>(parent)] + 1;
    height = std::max(height, depth[i] + 1);
  }
  return height;
}

}  // namespace detail

}  // namespace specdec

#pragma once
/// \file
/// \brief What a proposer hands to verification: drafted tokens, their tree shape, and for
/// each the exact distribution it was drawn from.
///
/// Exactness needs q, not just the tokens: a verifier compares p(x) with q(x) and, after a
/// rejection, samples from a residual that involves all of q. So a proposer reports, per node,
/// either the stored weights the token was sampled from (q = weights / normalizer, the very
/// numbers its inverse-CDF draw read) or that the token is deterministic (q = a point mass at
/// it: greedy drafts, n-gram lookups). The shape is a chain (parent of node i is i - 1) or a tree
/// (parent indices, tree.hpp): the decoder sends a tree to a target's score_tree, and
/// TreeVerifier / TraversalVerifier verify it; the chain verifiers (TokenVerifier,
/// BlockVerifier) say so if given a tree (detail::require_chain).

#include <cstddef>
#include <cstdint>
#include <span>

#include "specdec/detail/error.hpp"
#include "specdec/types.hpp"

namespace specdec {

/// \brief A view of one round's proposal. The memory belongs to the proposer and stays valid
/// until its next propose() call.
template <class Scalar>
struct Proposal {
  using scalar_type = Scalar;

  std::span<const token_t> tokens{};        ///< node i's token
  std::span<const std::int32_t> parents{};  ///< node i's parent node; -1 = the committed context.
                                            ///< Empty means a chain (parent of i is i - 1).
  /// Row i: the unnormalised weights node i's token was drawn from (unused for point masses).
  LogitsRows<Scalar> q_weights{};
  std::span<const Scalar> q_normalizers{};  ///< sums of those rows
  /// Nonzero where node i is deterministic (q_i = point mass at tokens[i]). Empty: none is.
  std::span<const std::uint8_t> point_mass{};
  /// The draft's confidence in node i's token, as DraftState::token_probabilities defines it;
  /// what draft-length policies calibrate acceptance against (RoundReport). Empty: 1 for every
  /// node (a proposer with no probabilities, such as an n-gram lookup). Not used to verify.
  std::span<const double> token_probabilities{};
  /// \brief Optional, for trees: `max_children[u + 1]` bounds the number of children node u gets
  /// (`[0]`: the root's), fixed before u's first child is drafted from what was drafted before
  /// it (TreeProposer: the shape's width at the children's depth; a dynamic shape's max_width).
  /// n + 1 entries, or empty: unknown (any node of a tree may branch; a chain, without parents,
  /// has at most one child per node by its format). TraversalVerifier reads it to
  /// verify a node that cannot branch sequence-level (tree_verifier.hpp); a node with more
  /// children than declared is an error there. Not used by the other verifiers.
  std::span<const std::uint32_t> max_children{};

  [[nodiscard]] std::size_t size() const noexcept { return tokens.size(); }
  [[nodiscard]] bool empty() const noexcept { return tokens.empty(); }
  [[nodiscard]] bool is_chain() const noexcept {
    for (std::size_t i = 0; i < parents.size(); ++i) {
      if (parents[i] != static_cast<std::int32_t>(i) - 1) return false;
    }
    return true;
  }
  /// \brief The declared bound on node `node`'s children (node = -1: the root): max_children,
  /// else 1 for a chain (no parents: every node has at most one child by format), else SIZE_MAX.
  [[nodiscard]] std::size_t max_children_of(std::int32_t node) const noexcept {
    if (max_children.empty()) return parents.empty() ? 1 : static_cast<std::size_t>(-1);
    return max_children[static_cast<std::size_t>(node + 1)];
  }
  [[nodiscard]] bool is_point_mass(std::size_t node) const noexcept {
    return !point_mass.empty() && point_mass[node] != 0;
  }
  /// \brief q_i(token): the probability node i's distribution gave `token`.
  [[nodiscard]] Scalar q(std::size_t node, token_t token) const noexcept {
    if (is_point_mass(node)) return token == tokens[node] ? Scalar(1) : Scalar(0);
    return q_weights.row(node)[static_cast<std::size_t>(token)] / q_normalizers[node];
  }
};

namespace detail {

/// The chain verifiers' rule on a proposal's shape (TokenVerifier, BlockVerifier: a tree goes to
/// TreeVerifier or TraversalVerifier, tree_verifier.hpp). `who` opens the message.
template <class Scalar>
void require_chain(const Proposal<Scalar>& proposal, const char* who) {
  for (std::size_t i = 0; i < proposal.parents.size(); ++i) {
    if (proposal.parents[i] != static_cast<std::int32_t>(i) - 1) {
      throw_invalid_argument(who, ": the proposal is a tree (the parent of node ", i, " is ",
                             proposal.parents[i],
                             "); expected a chain (the parent of node i is i - 1): this verifier "
                             "verifies chains (trees: TreeVerifier, TraversalVerifier)");
    }
  }
}

}  // namespace detail

/// \brief What a draft-length policy may see before the next draft token: draft-side facts
/// only. It never sees this round's target rows (they do not exist yet); that is what keeps
/// any policy exact (docs/design.md).
struct DraftState {
  /// Tokens drafted so far this round; nodes, for a tree proposer (TreeProposer asks before
  /// each node, in drafting order: a policy that stops it stops the tree there).
  std::size_t drafted = 0;
  /// The round's hard cap (draft_length, budget; a tree proposer's round_limit()); drafted <
  /// limit.
  std::size_t limit = 0;
  /// The draft's probability of each token drafted so far this round: q_i(x_i) for a sampled
  /// token; for a greedy model draft (q a point mass) the probability the draft's processed
  /// row, softmaxed at T = 1, gives its argmax (computed only for a policy that reads it, see
  /// DraftRequest::reads_token_probabilities); 1 for tokens no model scored (n-gram lookups).
  std::span<const double> token_probabilities;
};

}  // namespace specdec

#pragma once
/// \file
/// \brief TreeVerifier: recursive rejection sampling over a drafted tree (SpecInfer, Miao et
/// al. 2024; Sequoia, Chen et al. 2024), lossless for every sibling mode at every temperature.
///
/// From the root: p is the target row of the current node. Its children x_1, x_2, ... are
/// tried in node order; child k was drawn from the law q_k the proposal reports for it (the
/// parent's draft distribution for i.i.d. siblings; that distribution without the earlier
/// siblings' tokens, renormalised, for siblings drawn without replacement; a point mass for
/// deterministic ones). Accept x_k with probability min(1, p(x_k) / q_k(x_k)) and descend into
/// it (p becomes its row); after a rejection p <- normalize(max(p - q_k, 0)) and the next child
/// is tried. When every child is rejected the next token is drawn from the current p; at an
/// accepted leaf it is the bonus from the leaf's own row.
///
/// Why it is exact, at one node: given everything drafted before child k (which fixes q_k and,
/// by induction, the current p), x_k ~ q_k, so the child step emits y with probability
/// min(q_k(y), p(y)) + P(reject) r(y) = p(y), r the normalised residual — the token-level
/// identity (verify.hpp) — and what follows an accepted x_k is, again by induction, the
/// target's continuation. Sibling k + 1 may depend on x_k (without replacement), and a node's
/// existence on anything drafted before it (dynamic shapes), never on what is drafted after it
/// or on the target. For point masses the step is accept with p(x), else p without x. Reporting
/// "without replacement" siblings' q_k as the law they were drawn from is what makes the q
/// update (q <- q without the rejected token) part of the proposal: the verifier is one rule
/// for all modes. testing.hpp certifies it by enumeration for every mode.
///
/// Cost: one pass over the vocabulary per visited row (its distribution), plus one per rejected
/// sampled sibling (the residual update); a rejected point mass after the first costs O(1).
/// The running residual lives in TargetRows::scratch(); nothing is allocated after warm-up.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <type_traits>
#include <vector>

#include <Eigen/Core>

#include "specdec/coins.hpp"
#include "specdec/detail/kernels/exp_weights.hpp"
#include "specdec/detail/kernels/residual_kernels.hpp"
#include "specdec/proposal.hpp"
#include "specdec/sampling/laws.hpp"
#include "specdec/target_rows.hpp"
#include "specdec/tree.hpp"
#include "specdec/verify.hpp"

namespace specdec {

/// \brief The residual law of siblings, for a tree verifier (TreeVerifier's, or a user's): the
/// current target law at one node during recursive rejection sampling, the node's processed
/// target row p until a child is rejected, then p <- normalize(max(p - q_child, 0)) after each
/// rejected child (p without the token, for a point mass).
///
/// Contract: `p` and `storage` (V values, e.g. TargetRows::scratch()) outlive it and nothing
/// else writes `storage` meanwhile; reject(proposal, c) for children of this node only, in the
/// order they are judged, each of a proposal the decoder checked; draw(coins, scratch) when
/// every child was rejected. O(V) per rejected sampled child, O(1) before the first.
template <class Scalar>
class RunningResidual {
 public:
  RunningResidual(const TokenDistribution<Scalar>& p, std::span<Scalar> storage) noexcept
      : p_(&p), r_(storage) {}

  /// The current law's probability of `token`.
  [[nodiscard]] double probability(token_t token) const noexcept {
    if (!stored_) return static_cast<double>(p_->probability(token));
    return static_cast<double>(r_[static_cast<std::size_t>(token)]) / total_;
  }

  /// After rejecting a token drawn from `q` (node `node` of `proposal`): p <- norm(max(p - q, 0)).
  void reject(const Proposal<Scalar>& proposal, std::size_t node) {
    const token_t x = proposal.tokens[node];
    const auto xi = static_cast<std::size_t>(x);
    if (proposal.is_point_mass(node)) {
      // max(p - delta_x, 0) = p without x (p(x) <= 1).
      if (!stored_) store_p();
      // The rest's sum, summed (total_ - r[x] could round to a positive value with nothing
      // left). Nothing left: p is a point mass at x, a rejection of probability 0.
      double rest = 0;
      for (std::size_t y = 0; y < r_.size(); ++y) {
        if (y != xi) rest += static_cast<double>(r_[y]);
      }
      if (rest > 0) {
        r_[xi] = Scalar(0);
        total_ = rest;
      }
      return;
    }
    const std::span<const Scalar> q_weights = proposal.q_weights.row(node);
    const Scalar q_normalizer = proposal.q_normalizers[node];
    double total = 0;
    if (!stored_) {
      total = residual_distribution(*p_, q_weights, q_normalizer, r_);
    } else {
      const auto inv_total = static_cast<Scalar>(1.0 / total_);
      const Scalar inv_q = Scalar(1) / q_normalizer;
      for (std::size_t y = 0; y < r_.size(); ++y) {
        const Scalar value = std::max(Scalar(0), r_[y] * inv_total - q_weights[y] * inv_q);
        r_[y] = value;
        total += static_cast<double>(value);
      }
    }
    stored_ = true;
    total_ = total;
    if (!(total > 0)) {
      // p <= q everywhere, so p = q: the rejection had probability 0 (it happened through
      // rounding); q itself is then the law to continue with.
      std::copy(q_weights.begin(), q_weights.end(), r_.begin());
      total_ = static_cast<double>(q_normalizer);
    }
  }

  /// The law to draw the next token from when every child was rejected.
  template <class Coins>
  [[nodiscard]] token_t draw(Coins& coins, std::span<Scalar> scratch) const {
    if (!stored_) return coins.draw(DistributionLaw<Scalar>{*p_, scratch});
    return coins.draw(StoredWeightsLaw<Scalar>{r_, static_cast<Scalar>(total_)});
  }

  [[nodiscard]] bool stored() const noexcept { return stored_; }

 private:
  void store_p() {
    total_ =
        detail::store_weights(p_->logits, p_->max_logit, p_->inv_temperature, p_->threshold, r_);
    stored_ = true;
  }

  const TokenDistribution<Scalar>* p_;
  std::span<Scalar> r_;
  double total_ = 1;
  bool stored_ = false;
};

namespace detail {

/// q_c(x_c), the probability node c's law gave its own token, checked where a tree verifier
/// reads it: the token was drawn from that law, so it is in (0, 1]. Catches a q row that is
/// NaN, negative or all zero at the token (O(1); the rest of a row is the proposer's duty).
template <class Scalar>
[[nodiscard]] double drafted_probability(const Proposal<Scalar>& proposal, std::size_t node) {
  const double q_x = static_cast<double>(proposal.q(node, proposal.tokens[node]));
  if (!(q_x > 0.0 && q_x <= 1.0 + 1e-3)) {
    throw_invalid_argument("proposer's q row of node ", node, " gives its own token ",
                           proposal.tokens[node], " the probability ", q_x,
                           "; expected a probability in (0, 1] (the token was drawn from that "
                           "law): a q row with NaN, negative or zero weight there breaks the "
                           "Proposal contract");
  }
  return q_x;
}

}  // namespace detail

/// \brief Recursive rejection sampling over a tree (see the file comment); on a chain it is
/// token-level verification. Acceptance coin i decides node i (each node is judged at most
/// once); the final coin draws the next token.
class TreeVerifier {
 public:
  /// \brief Called by the decoder at the start of a generation with the most nodes a round can
  /// draft (optional hook, strategies.hpp): rounds then allocate nothing, whatever their size.
  void reserve_nodes(std::size_t nodes) { links_.reserve(nodes); }

  template <class Scalar, class Coins>
  VerifyResult verify(const Proposal<Scalar>& proposal, TargetRows<Scalar>& target, Coins& coins) {
    links_.build(proposal);
    std::int32_t node = -1;
    std::size_t depth = 0;
    for (;;) {
      const std::size_t row = static_cast<std::size_t>(node + 1);
      std::int32_t child = links_.first(node);
      if (child < 0) {
        // An accepted leaf (or an empty proposal): the bonus from its own row.
        return {depth,
                coins.draw(DistributionLaw<Scalar>{target.distribution(row), target.scratch()}),
                true, node};
      }
      const TokenDistribution<Scalar>& p = target.distribution(row);
      RunningResidual<Scalar> residual(p, target.scratch());
      std::int32_t accepted = -1;
      for (; child >= 0; child = links_.next(child)) {
        const auto c = static_cast<std::size_t>(child);
        const token_t x = proposal.tokens[c];
        const double q_x = detail::drafted_probability(proposal, c);
        const double p_x = residual.probability(x);
        const double accept = p_x >= q_x ? 1.0 : p_x / q_x;
        if (coins.accept(c, accept)) {
          accepted = child;
          break;
        }
        residual.reject(proposal, c);
      }
      if (accepted < 0) return {depth, residual.draw(coins, target.scratch()), false, node};
      node = accepted;
      ++depth;
    }
  }

 private:
  ChildLinks links_;
};

/// \brief Sequence-level tree verification: traversal verification (Weng et al., "Traversal
/// Verification for Speculative Tree Decoding", arXiv 2505.12398, NeurIPS 2025) — block
/// verification (block_verifier.hpp) carried to trees, judging whole root-to-node sequences leaf
/// first — with one change that makes it provably never accept fewer tokens in expectation than
/// TreeVerifier (recursive rejection sampling, RRS), for every sibling mode and every shape.
///
/// The traversal rule. A post-order traversal: a node's subtrees (children in node order) before
/// the node itself. A node u reached with weight w (1 at the root) owes the vector A = w P_u
/// (P_u its target row, total w). Child c gets the weight w_c = min(1, A(x_c) / q_c(x_c)); if
/// c's whole subtree is rejected — probability R = sum_y [q_c(y) - A(y)]_+ — the debt left is
/// A <- [A - q_c]_+ / R. When every child is rejected, u itself is accepted with probability
/// sum_y A(y) (w for a leaf) and the next token is drawn from A normalised (a leaf: its row); the
/// root is always accepted. (The paper's p_alpha of a node is its weight; its residual update of
/// the parent's distribution after a rejected child, M_b <- norm([p_alpha M_b - M_s]_+) with
/// p_alpha <- sum [p_alpha M_b - M_s]_+ / sum [M_s - p_alpha M_b]_+, is this debt update; its
/// bonus token is drawn from the accepted node's updated distribution, as here.)
///
/// The change: a node below weight 1 (w < 1) that may branch (Proposal::max_children >= 2, or no
/// bound declared for a tree) into sampled children is first kept with probability w by its own
/// coin and then verified at weight 1, which at its sibling level is RRS; otherwise (point-mass
/// children, a node declared to have at most one child, a chain) the traversal rule applies.
/// The choice reads only what was fixed before the node's children were drafted (the declared
/// bound, the law kind of its first child), never the children themselves.
///
/// Exact: by induction from the leaves, the subtree of a node u reached with weight w emits
/// "u, then y, then the target's continuation" with probability exactly w P_u(y) and rejects
/// with probability 1 - w. A leaf does so directly. Traversal rule: child c emits its token y
/// with probability q_c(y) w_c(y) = min(q_c(y), A(y)) and is rejected with probability R; given
/// the rejection the debt is [A - q_c]_+ / R and the mass to reject (1 - sum A) / R, so the
/// remaining children and u pay exactly the rest (u's accept step pays the leftover debt and
/// rejects with the rest). Keeping u by a coin of probability w and then owing P_u is the same
/// invariant. Each step conditions only on what was drafted before the child it judges, so the
/// argument holds for any shape a proposer grows (dynamic shapes too). At the root, w = 1: the
/// output is the target's.
///
/// Never below RRS: write T_u(w) for the expected accepted nodes below u when u is reached with
/// weight w, R_u for RRS's below u once u is accepted. Claim: T_u(w) >= w R_u. Induction from
/// the leaves (T = R = 0). Both sums run over u's children: each child c, accepted with token y,
/// is worth 1 + (its subtree) — entered with weight m under this rule, worth >= m R_c by
/// induction; RRS accepts it and gets R_c. So it suffices that this rule's unconditional
/// probability U_j(y) of accepting the j-th child with token y (after any history of earlier
/// siblings) is at least w times RRS's. (1) A node kept by its coin is at weight 1, where the
/// traversal rule's sibling step is RRS's step (A = P_u, the same residuals): U_j = w U_j^RRS.
/// (2) Point masses: the j-th child (token x_j) is accepted with unconditional probability
/// w p(x_j), the same as w times RRS's (the debt after rejecting x is A without x over
/// 1 - A(x), and w sum p(x_i) <= 1, so no min binds). (3) A single child: U(y) = min(q(y), w
/// p(y)) >= w min(q(y), p(y)): block verification's advantage over token-level. At a sampled
/// node below weight 1 with several children the traversal rule alone does not satisfy this:
/// the first child takes min(q, w p) >= w min(q, p) but leaves nothing at tokens y with
/// w p(y) <= q(y) < p(y), where RRS leaves later siblings a residual; when a later sibling has
/// the deeper subtree, the rule accepts fewer tokens (tests: down to 0.894x RRS on random laws,
/// 0.9998x on the enumerated TreeProposer trees), for i.i.d. and distinct siblings alike. Its
/// sibling-level gain is real when earlier siblings' subtrees are at least as valuable (for
/// i.i.d. siblings the per-token prefix sums of accepted mass dominate RRS's), but a verifier
/// cannot know that before the children are drafted, hence the coin.
///
/// On a chain this is block verification (tested: identical round laws); with deterministic
/// siblings it accepts as many tokens in expectation as RRS.
///
/// Cost: a node kept or rejected by its coin before its children costs nothing more; every
/// other visited node has its row processed (one pass, cached); an inner node's debt is stored
/// at its first rejected sampled child by the residual kernel (one pass, from the row), then
/// updated in one vectorised pass per rejected sampled child and in O(1) per rejected point mass
/// (after one exp pass). Debts live in a buffer of (depth + 1) V values that only grows.
class TraversalVerifier {
 public:
  /// \brief As TreeVerifier::reserve_nodes; the debts, which need V, are sized by the first
  /// round for this many nodes.
  void reserve_nodes(std::size_t nodes) {
    links_.reserve(nodes);
    reserved_nodes_ = nodes;
  }

  template <class Scalar, class Coins>
  VerifyResult verify(const Proposal<Scalar>& proposal, TargetRows<Scalar>& target, Coins& coins) {
    links_.build(proposal);
    check_declared_children(proposal);
    const std::size_t vocab_size = target.vocab_size();
    auto& debts = debts_for<Scalar>();
    const std::size_t nodes = std::max(proposal.size(), reserved_nodes_);
    if (debts.size() < (nodes + 1) * vocab_size) debts.resize((nodes + 1) * vocab_size);
    VerifyResult result;
    (void)visit(proposal, target, coins, -1, 1.0, 0, debts, result);
    return result;
  }

 private:
  template <class Scalar>
  std::vector<Scalar>& debts_for() {
    if constexpr (std::is_same_v<Scalar, float>) {
      return float_debts_;
    } else {
      return double_debts_;
    }
  }

  /// A node with more children than Proposal::max_children declared: the declaration is what
  /// keeps the choice of rule below exact, so a wrong one is an error, not a guess.
  template <class Scalar>
  void check_declared_children(const Proposal<Scalar>& proposal) const {
    if (proposal.max_children.empty()) return;
    for (std::int32_t u = -1; u < static_cast<std::int32_t>(proposal.size()); ++u) {
      std::size_t children = 0;
      for (std::int32_t c = links_.first(u); c >= 0; c = links_.next(c)) ++children;
      if (children > proposal.max_children_of(u)) {
        detail::throw_invalid_argument("TraversalVerifier: node ", u, " has ", children,
                                       " children; the proposal declared at most ",
                                       proposal.max_children_of(u),
                                       " (Proposal::max_children; -1 = the root)");
      }
    }
  }

  template <class Scalar, class Coins>
  bool visit(const Proposal<Scalar>& proposal, TargetRows<Scalar>& target, Coins& coins,
             std::int32_t node, double w, std::size_t depth, std::vector<Scalar>& debts,
             VerifyResult& result) {
    const std::size_t row = static_cast<std::size_t>(node + 1);
    std::int32_t child = links_.first(node);
    if (child < 0) {
      // A leaf owes w P_u: accept with probability w, then the bonus from its row.
      if (node >= 0 && !coins.accept(static_cast<std::size_t>(node), w)) return false;
      result = {depth,
                coins.draw(DistributionLaw<Scalar>{target.distribution(row), target.scratch()}),
                true, node};
      return true;
    }
    // A node below weight 1 that may branch into sampled children is first kept with
    // probability w (its coin), then verified at weight 1: recursive rejection sampling's step,
    // decided from what was drafted before its children (their law's kind and the declared
    // bound), never from the children themselves (see the class comment).
    const bool committed = node >= 0 && w < 1.0 && proposal.max_children_of(node) >= 2 &&
                           !proposal.is_point_mass(static_cast<std::size_t>(child));
    if (committed) {
      if (!coins.accept(static_cast<std::size_t>(node), w)) return false;
      w = 1.0;
    }
    const bool unit = w >= 1.0;  // the debt is a whole distribution (the root, a kept node)
    // The debt: A = w p until a child subtree is rejected (nothing stored: a child's weight
    // needs A at its own token only), then A = scale * stored.
    const std::size_t vocab_size = target.vocab_size();
    const std::span<Scalar> stored(debts.data() + depth * vocab_size, vocab_size);
    const TokenDistribution<Scalar>& p = target.distribution(row);
    bool materialized = false;
    double stored_total = 1.0, scale = w;
    const auto owed_at = [&](token_t y) {
      return materialized ? scale * static_cast<double>(stored[static_cast<std::size_t>(y)])
                          : w * static_cast<double>(p.probability(y));
    };
    const auto materialize = [&] {
      if (materialized) return;
      stored_total =
          detail::store_weights(p.logits, p.max_logit, p.inv_temperature, p.threshold, stored);
      scale = w / stored_total;
      materialized = true;
    };
    for (; child >= 0; child = links_.next(child)) {
      const auto c = static_cast<std::size_t>(child);
      const token_t x = proposal.tokens[c];
      const auto xi = static_cast<std::size_t>(x);
      const double q_x = detail::drafted_probability(proposal, c);
      const double owed_x = owed_at(x);
      const double w_c = std::min(1.0, owed_x / q_x);
      if (visit(proposal, target, coins, child, w_c, depth + 1, debts, result)) return true;
      // c's subtree was rejected: A <- [A - q_c]_+ / R, R = sum [q_c - A]_+.
      if (proposal.is_point_mass(c)) {
        // q_c = delta_x: R = 1 - A(x), and A loses x.
        const double rejection = 1.0 - std::min(1.0, owed_x);
        if (!(rejection > 0)) continue;  // a rejection of probability 0 (rounding)
        materialize();
        double left = stored_total - static_cast<double>(stored[xi]);
        if (!(left > 1e-6 * stored_total)) {  // re-summed near nothing, where rounding rules
          left = 0;
          for (std::size_t y = 0; y < vocab_size; ++y) {
            if (y != xi) left += static_cast<double>(stored[y]);
          }
        }
        if (!(left > 0) && unit) continue;  // at weight 1: probability 0, as above
        stored[xi] = Scalar(0);
        stored_total = left;
        scale /= rejection;
        continue;
      }
      // One pass, in place: stored <- [A - q_c]_+ with the debt left; R = sum [q_c - A]_+ =
      // 1 - sum A + left, since sum (A - q_c) = sum A - 1. The first update reads A = w p from
      // the row itself (the residual kernel: exp, subtract, clamp, sum; nothing stored before).
      const std::span<const Scalar> q_weights = proposal.q_weights.row(c);
      const double mass = materialized ? scale * stored_total : w;
      const double left = materialized
                              ? subtract_clamped(stored, static_cast<Scalar>(scale), q_weights,
                                                 Scalar(1) / proposal.q_normalizers[c])
                              : store_residual(p, q_weights, proposal.q_normalizers[c],
                                               static_cast<Scalar>(w), stored);
      materialized = true;
      const double rejection = left + (1.0 - mass);
      if (!(rejection > 0) || (!(left > 0) && unit)) {
        // q_c >= A everywhere, so A was q_c: a rejection of probability 0 (rounding). The
        // debt stays q_c's (with A's mass).
        std::copy(q_weights.begin(), q_weights.end(), stored.begin());
        stored_total = static_cast<double>(proposal.q_normalizers[c]);
        scale = mass / stored_total;
        continue;
      }
      stored_total = left;
      scale = 1.0 / rejection;
    }
    const double owed = materialized ? scale * stored_total : w;
    if (node >= 0 && !committed &&
        !coins.accept(static_cast<std::size_t>(node), std::min(1.0, owed))) {
      return false;
    }
    if (!materialized || !(stored_total > 0)) {
      result = {depth, coins.draw(DistributionLaw<Scalar>{p, target.scratch()}), false, node};
    } else {
      result = {depth,
                coins.draw(StoredWeightsLaw<Scalar>{stored, static_cast<Scalar>(stored_total)}),
                false, node};
    }
    return true;
  }

  /// stored <- [a stored - b q]_+ (q = q_weights), returns the sum kept: one vectorised pass,
  /// float sums per block added in double.
  template <class Scalar>
  static double subtract_clamped(std::span<Scalar> stored, Scalar a, std::span<const Scalar> q,
                                 Scalar b) {
    double left = 0;
    detail::for_each_block(stored.size(), [&](std::size_t offset, std::size_t length) {
      left += static_cast<double>(detail::clamped_difference_block(stored.data() + offset, a,
                                                                   q.data() + offset, b, length));
    });
    return left;
  }

  /// stored <- [w p - q]_+ from p's row (q = q_weights / q_normalizer), returns its sum.
  template <class Scalar>
  static double store_residual(const TokenDistribution<Scalar>& p,
                               std::span<const Scalar> q_weights, Scalar q_normalizer, Scalar w,
                               std::span<Scalar> stored) {
    const auto block = detail::residual_blocks(p, q_weights, q_normalizer, w);
    double left = 0;
    detail::for_each_block(stored.size(), [&](std::size_t offset, std::size_t length) {
      left += static_cast<double>(block(offset, length, stored.data() + offset));
    });
    return left;
  }

  ChildLinks links_;
  std::size_t reserved_nodes_ = 0;    // reserve_nodes(): the largest round the debts are sized for
  std::vector<float> float_debts_;    // (depth + 1, V) the debts along the current path
  std::vector<double> double_debts_;  // the same for exact (double) rounds
};

}  // namespace specdec

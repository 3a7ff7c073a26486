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
#include <vector>

#include "specdec/coins.hpp"
#include "specdec/detail/exp_weights.hpp"
#include "specdec/proposal.hpp"
#include "specdec/sampling_laws.hpp"
#include "specdec/target_rows.hpp"
#include "specdec/tree.hpp"
#include "specdec/verify.hpp"

namespace specdec {

namespace detail {

/// The current target law at one node during recursive rejection sampling: the processed row
/// itself until the first rejection, then stored unnormalised weights r with their sum.
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
    total_ = store_weights(p_->logits, p_->max_logit, p_->inv_temperature, p_->threshold, r_);
    stored_ = true;
  }

  const TokenDistribution<Scalar>* p_;
  std::span<Scalar> r_;
  double total_ = 1;
  bool stored_ = false;
};

}  // namespace detail

/// \brief Recursive rejection sampling over a tree (see the file comment); on a chain it is
/// token-level verification. Acceptance coin i decides node i (each node is judged at most
/// once); the final coin draws the next token.
class TreeVerifier {
 public:
  template <class Scalar, class Coins>
  VerifyResult verify(const Proposal<Scalar>& proposal, TargetRows<Scalar>& target,
                      Coins& coins) {
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
      detail::RunningResidual<Scalar> residual(p, target.scratch());
      std::int32_t accepted = -1;
      for (; child >= 0; child = links_.next(child)) {
        const auto c = static_cast<std::size_t>(child);
        const token_t x = proposal.tokens[c];
        const double q_x = static_cast<double>(proposal.q(c, x));
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
  detail::ChildLinks links_;
};

}  // namespace specdec

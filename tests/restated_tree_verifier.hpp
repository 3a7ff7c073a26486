#pragma once
// Recursive rejection sampling over a tree written out from the math with explicit vectors,
// independently of TreeVerifier, with one injectable bug per TreeMutation (the control and the
// mutants of tree_verifier_test), and a proposer wrapper that misreports the laws of siblings.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "specdec/specdec.hpp"
#include "specdec/testing.hpp"

#include "restated_token_verifier.hpp"

namespace specdec_test {

enum class TreeMutation {
  none,                // the rule (control)
  no_residual_update,  // MUTANT: p is not replaced by the residual after a rejected sibling
  bonus_from_parent,   // MUTANT: at an accepted leaf, the bonus from its parent's row
};

inline const char* name_of(TreeMutation mutation) {
  switch (mutation) {
    case TreeMutation::none:
      return "restated";
    case TreeMutation::no_residual_update:
      return "no_residual_update";
    case TreeMutation::bonus_from_parent:
      return "bonus_from_parent";
  }
  return "?";
}

struct RestatedTreeVerifier {
  TreeMutation mutation = TreeMutation::none;

  template <class Scalar, class Coins>
  specdec::VerifyResult verify(const specdec::Proposal<Scalar>& proposal,
                               specdec::TargetRows<Scalar>& target, Coins& coins) const {
    const std::size_t n = proposal.size();
    const std::size_t vocab = target.vocab_size();
    auto parent_of = [&](std::size_t i) {
      return proposal.parents.empty() ? static_cast<std::int32_t>(i) - 1 : proposal.parents[i];
    };
    auto law_of_row = [&](std::size_t row) {
      std::vector<Scalar> p(vocab);
      const auto& dist = target.distribution(row);
      for (std::size_t y = 0; y < vocab; ++y)
        p[y] = dist.probability(static_cast<specdec::token_t>(y));
      return p;
    };
    std::int32_t node = -1;
    std::size_t depth = 0;
    for (;;) {
      std::vector<std::size_t> children;
      for (std::size_t i = 0; i < n; ++i) {
        if (parent_of(i) == node) children.push_back(i);
      }
      if (children.empty()) {
        std::size_t row = static_cast<std::size_t>(node + 1);
        if (mutation == TreeMutation::bonus_from_parent && node >= 0) {
          row = static_cast<std::size_t>(parent_of(static_cast<std::size_t>(node)) + 1);
        }
        std::vector<Scalar> p = law_of_row(row);
        Scalar total = 0;
        for (const Scalar v : p) total += v;
        return {depth, coins.draw(WeightVectorLaw<Scalar>{p, total}), true, node};
      }
      std::vector<Scalar> p = law_of_row(static_cast<std::size_t>(node + 1));
      std::int32_t accepted = -1;
      for (const std::size_t c : children) {
        const specdec::token_t x = proposal.tokens[c];
        const Scalar q_x = proposal.q(c, x);
        const Scalar a = p[static_cast<std::size_t>(x)] >= q_x
                             ? Scalar(1)
                             : p[static_cast<std::size_t>(x)] / q_x;
        if (coins.accept(c, static_cast<double>(a))) {
          accepted = static_cast<std::int32_t>(c);
          break;
        }
        if (mutation == TreeMutation::no_residual_update) continue;
        std::vector<Scalar> r(vocab);
        Scalar total = 0;
        for (std::size_t y = 0; y < vocab; ++y) {
          r[y] = std::max(Scalar(0), p[y] - proposal.q(c, static_cast<specdec::token_t>(y)));
          total += r[y];
        }
        if (total > 0) {
          for (std::size_t y = 0; y < vocab; ++y) p[y] = r[y] / total;
        }
      }
      if (accepted < 0) {
        Scalar total = 0;
        for (const Scalar v : p) total += v;
        return {depth, coins.draw(WeightVectorLaw<Scalar>{p, total}), false, node};
      }
      node = accepted;
      ++depth;
    }
  }
};

// Sequence-level tree verification written out with explicit vectors: a post-order traversal
// (every child's subtree before the node itself, children in node order). Node u reached with
// weight w (1 at the root) owes the vector A = w P_u (P_u its target row); child c is given the
// weight w_c = min(1, A(x_c) / q_c(x_c)); after c's subtree is rejected (probability
// R = sum [q_c - A]_+) A <- [A - q_c]_+ / R; when every child is rejected, u is accepted with
// probability sum A (w for a leaf) and the next token drawn from A normalised (a leaf: P_u).
// Invariant: the subtree of u emits "u, then y" with probability w P_u(y) and is rejected with
// probability 1 - w. On a chain this is block verification; at weight 1 it is recursive
// rejection sampling. With commit_at_branches (the library's rule), a node below weight 1 that
// is declared able to branch (Proposal::max_children >= 2, or no declaration) into sampled
// children is first kept with probability w by its own coin and then verified at weight 1;
// without it, the traversal rule alone (the paper's), which can accept fewer tokens than
// recursive rejection sampling.
struct RestatedTraversalVerifier {
  RestatedTraversalVerifier() = default;
  explicit RestatedTraversalVerifier(bool commit) : commit_at_branches(commit) {}

  bool commit_at_branches = true;

  template <class Scalar, class Coins>
  specdec::VerifyResult verify(const specdec::Proposal<Scalar>& proposal,
                               specdec::TargetRows<Scalar>& target, Coins& coins) const {
    result_ = {};
    (void)visit(proposal, target, coins, -1, 1.0, 0);
    return result_;
  }

 private:
  template <class Scalar, class Coins>
  bool visit(const specdec::Proposal<Scalar>& proposal, specdec::TargetRows<Scalar>& target,
             Coins& coins, std::int32_t node, double w, std::size_t depth) const {
    const std::size_t n = proposal.size();
    const std::size_t vocab = target.vocab_size();
    auto parent_of = [&](std::size_t i) {
      return proposal.parents.empty() ? static_cast<std::int32_t>(i) - 1 : proposal.parents[i];
    };
    bool has_children = false;
    bool first_sampled = false;
    for (std::size_t c = 0; c < n; ++c) {
      if (parent_of(c) != node) continue;
      has_children = true;
      first_sampled = !proposal.is_point_mass(c);
      break;
    }
    const std::size_t bound = proposal.max_children_of(node);
    const bool committed =
        commit_at_branches && node >= 0 && w < 1.0 && has_children && first_sampled && bound >= 2;
    if (committed) {
      if (!coins.accept(static_cast<std::size_t>(node), w)) return false;
      w = 1.0;
    }
    std::vector<double> owed(vocab);
    const auto& dist = target.distribution(static_cast<std::size_t>(node + 1));
    for (std::size_t y = 0; y < vocab; ++y) {
      owed[y] = w * static_cast<double>(dist.probability(static_cast<specdec::token_t>(y)));
    }
    bool leaf = true;
    for (std::size_t c = 0; c < n; ++c) {
      if (parent_of(c) != node) continue;
      leaf = false;
      std::vector<double> q(vocab);
      for (std::size_t y = 0; y < vocab; ++y) {
        q[y] = static_cast<double>(proposal.q(c, static_cast<specdec::token_t>(y)));
      }
      const auto x = static_cast<std::size_t>(proposal.tokens[c]);
      const double w_c = std::min(1.0, owed[x] / q[x]);
      if (visit(proposal, target, coins, static_cast<std::int32_t>(c), w_c, depth + 1)) return true;
      double rejection = 0;
      for (std::size_t y = 0; y < vocab; ++y) rejection += std::max(0.0, q[y] - owed[y]);
      std::vector<double> next(vocab);
      double left = 0;
      for (std::size_t y = 0; y < vocab; ++y) left += next[y] = std::max(0.0, owed[y] - q[y]);
      // At weight 1 nothing left owed means the rejection had probability 0 (rounding): keep A.
      if (rejection > 0 && (left > 0 || w < 1.0)) {
        for (std::size_t y = 0; y < vocab; ++y) owed[y] = next[y] / rejection;
      }
    }
    double mass = 0;
    for (const double v : owed) mass += v;
    const bool accept =
        node < 0 || committed || coins.accept(static_cast<std::size_t>(node), std::min(1.0, mass));
    if (!accept) return false;
    result_ = {depth, coins.draw(WeightVectorLaw<double>{owed, mass}), leaf, node};
    return true;
  }

  mutable specdec::VerifyResult result_{};
};

// A proposer that reports, for every node, the full draft row of its parent as its q (sampled,
// never a point mass): the truth for i.i.d. siblings; for siblings drawn without replacement it
// is "verified against the original q" (MUTANT), and for deterministic top-k siblings it is
// "accepted with p/q instead of p" (MUTANT).
template <class Inner, class DraftFn>
struct ParentRowProposer {
  Inner inner;
  DraftFn draft;
  std::vector<double> weights;
  std::vector<double> normalizers;
  std::vector<double> filter_scratch;

  template <class Coins>
  specdec::Proposal<double> propose(specdec::DraftRequest& request, Coins& coins) {
    specdec::Proposal<double> proposal = inner.propose(request, coins);
    const std::size_t n = proposal.size();
    const std::size_t vocab = request.vocab_size;
    weights.assign(n * vocab, 0.0);
    normalizers.assign(n, 0.0);
    std::vector<std::int32_t> path;
    for (std::size_t i = 0; i < n; ++i) {
      std::vector<specdec::token_t> context(
          request.context.begin(),
          request.context.begin() + static_cast<std::ptrdiff_t>(request.committed));
      const std::size_t length = specdec::detail::path_to(proposal, proposal.parents[i], path);
      for (std::size_t k = 0; k < length; ++k) {
        context.push_back(proposal.tokens[static_cast<std::size_t>(path[k])]);
      }
      const std::vector<double> logits = draft(std::span<const specdec::token_t>(context));
      std::vector<double> processed(logits.size());
      const auto row = specdec::detail::apply_processor_into(
          request.params, std::span<const specdec::token_t>(context),
          std::span<const double>(logits), std::span<double>(processed));
      specdec::SamplingParams params = request.params;
      if (params.greedy()) params.temperature = 1.0f;
      const auto q = specdec::process_logits(row, params, filter_scratch,
                                             std::span<double>(weights.data() + i * vocab, vocab));
      normalizers[i] = q.normalizer;
    }
    proposal.point_mass = {};
    proposal.q_weights = specdec::LogitsRows<double>(std::span<const double>(weights), vocab);
    proposal.q_normalizers = normalizers;
    return proposal;
  }
};

}  // namespace specdec_test

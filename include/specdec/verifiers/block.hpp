#pragma once
/// \file
/// \brief BlockVerifier: block verification (Sun, Mendlovic, Leviathan et al., "Block
/// Verification Accelerates Speculative Decoding", ICLR 2025, Algorithm 2), the verifier behind
/// `GenerationConfig::verifier = VerifierKind::block`.
///
/// Token-level verification judges each drafted token on its own and stops at the first
/// failure. Block verification judges the block: among all lossless verifiers of one drafted
/// chain it accepts the most tokens in expectation (never fewer than token-level), at no extra
/// target call. With n drafted tokens x_0..x_{n-1}, q_i / p_i the draft / target distributions
/// at position i (p_n the row after the last drafted token):
///
///   w_0 = 1,  w_i = min(1, w_{i-1} p_{i-1}(x_{i-1}) / q_{i-1}(x_{i-1}))     i = 1..n
///   Z_i = sum_v max(0, w_i p_i(v) - q_i(v))                                  i = 1..n-1
///   h_i = Z_i / (Z_i + 1 - w_i)   (1 if that denominator is 0),   h_n = w_n
///   tau = the LAST i in 1..n whose coin falls under h_i (0 if none; no early exit)
///   emit x_0..x_{tau-1}, then a token from p_n if tau = n, else from the normalised residual
///   max(0, w_tau p_tau - q_tau).
///
/// w_i is the probability mass the target "still owes" the drafted prefix; h_i is the chance
/// of stopping after i tokens given the block reached i, chosen so that the residual at i
/// supplies exactly the missing mass. The paper proves the output is distributed as the target
/// for every p, q; testing.hpp's enumeration checks this code against the target exactly.
///
/// Cost: target rows 0..n-1 are always processed (token-level stops at the first rejection),
/// row n when the whole block is kept, and each position i in (τ, n) takes one more pass over
/// the vocabulary for Z_i (see BlockVerifier for why positions up to τ take none). With n = 1 it is
/// token-level verification; with point-mass drafts (greedy, n-gram) w_i p_i(x_i) <= 1, so
/// Z_i = w_i (1 - p_i(x_i)) needs no pass, the residual is p without the drafted token, and the
/// expected accepted length equals token-level's.

#include <algorithm>
#include <array>
#include <cstddef>

#include "specdec/coins.hpp"
#include "specdec/proposal.hpp"
#include "specdec/sampling/laws.hpp"
#include "specdec/target_rows.hpp"
#include "specdec/verifiers/token.hpp"
#include "specdec/verify.hpp"

namespace specdec {

namespace detail {

/// \brief w_i = step(i - 1, w_{i-1}), w_0 = 1, for the indices a backward scan asks for, in at
/// most `stride` steps each instead of i.
///
/// BlockVerifier scans i = n, n-1, ..., 1; recomputing each w_i from w_0 costs n^2 / 2 steps
/// (a p and a q evaluation each): 8 M for n = 4096, seconds per rejecting round. The forward
/// pass keeps w at every stride-th index, stride = ceil(n / 64) (64 checkpoints, no
/// allocation); at(i) resumes from the checkpoint below i, so a full scan costs at most
/// n + n * stride steps (n^2 / 64 + n: 262 k for n = 4096; 2 n for n <= 64). Each value comes
/// from the same recurrence in the same order as the direct computation: bit-identical.
class RunningWeights {
 public:
  static constexpr std::size_t kCheckpoints = 64;

  /// `step(j, w_j)` = w_{j+1} for j in [0, n).
  template <class Step>
  RunningWeights(std::size_t n, Step&& step)
      : stride_(std::max<std::size_t>(1, (n + kCheckpoints - 1) / kCheckpoints)) {
    double w = 1.0;
    checkpoints_[0] = w;
    for (std::size_t j = 0; j + 1 <= n && (j + 1) / stride_ < kCheckpoints; ++j) {
      w = step(j, w);
      if ((j + 1) % stride_ == 0) checkpoints_[(j + 1) / stride_] = w;
    }
  }

  /// w_i, 0 <= i <= n.
  template <class Step>
  [[nodiscard]] double at(std::size_t i, Step&& step) const {
    const std::size_t checkpoint = std::min(i / stride_, kCheckpoints - 1);
    double w = checkpoints_[checkpoint];
    for (std::size_t j = checkpoint * stride_; j < i; ++j) w = step(j, w);
    return w;
  }

 private:
  std::size_t stride_;
  std::array<double, kCheckpoints> checkpoints_{};
};

}  // namespace detail

/// \brief Block verification (see the file comment).
///
/// τ is found from the end: the coins are drawn before verification, and "the last i whose
/// coin falls under h_i" is the first success scanning i = n, n-1, ..., 1. Scanning backwards
/// evaluates exactly the same rule but stops at that success, so the residual masses Z_i of
/// positions before τ, a pass over the vocabulary each, are never computed: when the whole
/// block is accepted (coin n under h_n = w_n) verification costs no Z pass at all.
struct BlockVerifier {
  template <class Scalar, class Coins>
  VerifyResult verify(const Proposal<Scalar>& proposal, TargetRows<Scalar>& target,
                      Coins& coins) const {
    detail::require_chain(proposal, "BlockVerifier");
    const std::size_t n = proposal.size();
    // w_{j+1} = min(1, w_j p_j(x_j) / q_j(x_j)), w_0 = 1.
    const auto step = [&](std::size_t j, double w) {
      const token_t x = proposal.tokens[j];
      const double p_x = static_cast<double>(target.distribution(j).probability(x));
      return std::min(1.0, w * p_x / static_cast<double>(proposal.q(j, x)));
    };
    const detail::RunningWeights weights(n, step);
    for (std::size_t i = n; i >= 1; --i) {
      const double w = weights.at(i, step);
      double h = w;  // h_n = w_n
      if (i < n) {
        const double residual = residual_mass_at(proposal, target.distribution(i), i, w);
        const double denominator = residual + 1.0 - w;
        h = denominator > 0.0 ? residual / denominator : 1.0;
      }
      if (coins.accept(i - 1, h)) return next_token(proposal, target, coins, i, w);
    }
    return next_token(proposal, target, coins, 0, 1.0);
  }

 private:
  /// Z_i = sum_v max(0, w p_i(v) - q_i(v)).
  template <class Scalar>
  static double residual_mass_at(const Proposal<Scalar>& proposal,
                                 const TokenDistribution<Scalar>& p, std::size_t i, double w) {
    if (proposal.is_point_mass(i)) {
      // q_i = [v = x_i] and w p_i(x_i) <= 1: only the tokens other than x_i contribute.
      return w * (1.0 - static_cast<double>(p.probability(proposal.tokens[i])));
    }
    return residual_mass(p, proposal.q_weights.row(i), proposal.q_normalizers[i],
                         static_cast<Scalar>(w));
  }

  /// The token after τ accepted ones: the bonus from p_n, or the residual max(0, w_τ p_τ - q_τ).
  template <class Scalar, class Coins>
  static VerifyResult next_token(const Proposal<Scalar>& proposal, TargetRows<Scalar>& target,
                                 Coins& coins, std::size_t tau, double w_tau) {
    const std::size_t n = proposal.size();
    if (tau == n) {
      return {n, coins.draw(DistributionLaw<Scalar>{target.distribution(n), target.scratch()}),
              true};
    }
    const TokenDistribution<Scalar>& p = target.distribution(tau);
    if (proposal.is_point_mass(tau)) {
      return {tau, coins.draw(ExcludingLaw<Scalar>{p, proposal.tokens[tau], target.scratch()}),
              false};
    }
    return {
        tau,
        coins.draw(ResidualLaw<Scalar>{p, proposal.q_weights.row(tau), proposal.q_normalizers[tau],
                                       static_cast<Scalar>(w_tau), target.scratch()}),
        false};
  }
};

}  // namespace specdec

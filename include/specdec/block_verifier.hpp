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
/// Cost: every target row is processed (token-level stops at the first rejection) and each
/// position 1..n-1 takes one more pass over the vocabulary for Z_i. With n = 1 it is
/// token-level verification; with point-mass drafts (greedy, n-gram) w_i p_i(x_i) <= 1, so
/// Z_i = w_i (1 - p_i(x_i)) needs no pass, the residual is p without the drafted token, and the
/// expected accepted length equals token-level's.

#include <algorithm>
#include <cstddef>

#include "specdec/coins.hpp"
#include "specdec/proposal.hpp"
#include "specdec/sampling_laws.hpp"
#include "specdec/target_rows.hpp"
#include "specdec/token_verifier.hpp"
#include "specdec/verify.hpp"

namespace specdec {

/// \brief Block verification (see the file comment).
struct BlockVerifier {
  template <class Scalar, class Coins>
  VerifyResult verify(const Proposal<Scalar>& proposal, TargetRows<Scalar>& target,
                      Coins& coins) const {
    detail::require_chain(proposal, "BlockVerifier");
    const std::size_t n = proposal.size();
    double w = 1.0;  // w_i, updated as i advances
    std::size_t tau = 0;
    double w_tau = 1.0;
    for (std::size_t i = 1; i <= n; ++i) {
      const token_t x = proposal.tokens[i - 1];
      const double p_x = static_cast<double>(target.distribution(i - 1).probability(x));
      const double q_x = static_cast<double>(proposal.q(i - 1, x));
      w = std::min(1.0, w * p_x / q_x);
      double h = w;  // h_n
      if (i < n) {
        const TokenDistribution<Scalar>& p = target.distribution(i);
        const double residual = residual_mass_at(proposal, p, i, w);
        const double denominator = residual + 1.0 - w;
        h = denominator > 0.0 ? residual / denominator : 1.0;
      }
      if (coins.accept(i - 1, h)) {
        tau = i;
        w_tau = w;
      }
    }
    if (tau == n) {
      return {n, coins.draw(DistributionLaw<Scalar>{target.distribution(n), target.scratch()}),
              true};
    }
    const TokenDistribution<Scalar>& p = target.distribution(tau);
    if (proposal.is_point_mass(tau)) {
      return {tau, coins.draw(ExcludingLaw<Scalar>{p, proposal.tokens[tau], target.scratch()}),
              false};
    }
    return {tau,
            coins.draw(ResidualLaw<Scalar>{p, proposal.q_weights.row(tau),
                                           proposal.q_normalizers[tau], static_cast<Scalar>(w_tau),
                                           target.scratch()}),
            false};
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
};

}  // namespace specdec

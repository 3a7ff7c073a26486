#pragma once
/// \file
/// \brief TokenVerifier: token-level speculative sampling (Leviathan et al. 2023; Chen et al.
/// 2023), the verifier behind `GenerationConfig::verifier = VerifierKind::token`.
///
/// Position by position: accept x_j with probability min(1, p_j(x_j) / q_j(x_j)); at the first
/// rejection draw the correction from the residual max(0, p_j - q_j) (normalised) and stop; if
/// every drafted token is accepted, draw a bonus token from p_n. Why this is exact: see
/// verify.hpp. Rows after a rejection are never processed. For a deterministic draft token (q a
/// point mass) the acceptance probability is p_j(x_j) and the residual is p_j without x_j.

#include <cstddef>

#include "specdec/coins.hpp"
#include "specdec/detail/error.hpp"
#include "specdec/proposal.hpp"
#include "specdec/sampling/laws.hpp"
#include "specdec/target_rows.hpp"
#include "specdec/verify.hpp"

namespace specdec {

/// \brief Token-level verification (the classic rule; see the file comment).
struct TokenVerifier {
  template <class Scalar, class Coins>
  VerifyResult verify(const Proposal<Scalar>& proposal, TargetRows<Scalar>& target,
                      Coins& coins) const {
    detail::require_chain(proposal, "TokenVerifier");
    const std::size_t n = proposal.size();
    for (std::size_t j = 0; j < n; ++j) {
      const TokenDistribution<Scalar>& p = target.distribution(j);
      const token_t x = proposal.tokens[j];
      const Scalar accept = acceptance_probability(p.probability(x), proposal.q(j, x));
      if (coins.accept(j, static_cast<double>(accept))) continue;
      if (proposal.is_point_mass(j)) {
        return {j, coins.draw(ExcludingLaw<Scalar>{p, x, target.scratch()}), false};
      }
      return {
          j,
          coins.draw(ResidualLaw<Scalar>{p, proposal.q_weights.row(j), proposal.q_normalizers[j],
                                         Scalar(1), target.scratch()}),
          false};
    }
    return {n, coins.draw(DistributionLaw<Scalar>{target.distribution(n), target.scratch()}), true};
  }
};

}  // namespace specdec

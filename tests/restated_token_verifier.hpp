#pragma once
// Token-level verification written out from the math, independently of TokenVerifier, with one
// injectable bug per Mutation: the control and the mutants of exactness_test (certified by the
// harness in double) and distribution_test (run by StrategyDecoder in float).
#include <algorithm>
#include <cstddef>
#include <span>
#include <vector>

#include "specdec/specdec.hpp"

namespace specdec_test {

enum class Mutation {
  none,             // the rule, from acceptance_probability / residual_distribution (control)
  scalar_residual,  // MUTANT (seed bug 1): residual max(0, p(y) - q(x)) with the scalar q(x)
  wrong_bonus_row,  // MUTANT (seed bug 2): bonus sampled from target row K-1 instead of row K
};

inline const char* name_of(Mutation mutation) {
  switch (mutation) {
    case Mutation::none:
      return "restated";
    case Mutation::scalar_residual:
      return "scalar_residual";
    case Mutation::wrong_bonus_row:
      return "wrong_bonus_row";
  }
  return "?";
}

// A law given by explicit weights (sum `total` > 0), sampled by inverse CDF.
template <class Scalar>
struct WeightVectorLaw {
  std::vector<Scalar> weights;
  Scalar total;

  [[nodiscard]] std::size_t vocab_size() const noexcept { return weights.size(); }
  [[nodiscard]] specdec::token_t sample(double coin) const {
    return specdec::sample_from_weights(std::span<const Scalar>(weights), total, coin);
  }
  [[nodiscard]] double mass(specdec::token_t token) const noexcept {
    return static_cast<double>(weights[static_cast<std::size_t>(token)]);
  }
};

template <class Scalar>
WeightVectorLaw<Scalar> law_of(const specdec::TokenDistribution<Scalar>& p) {
  WeightVectorLaw<Scalar> law{std::vector<Scalar>(p.vocab_size()), Scalar(0)};
  for (std::size_t y = 0; y < law.weights.size(); ++y) {
    law.total += law.weights[y] = p.probability(static_cast<specdec::token_t>(y));
  }
  return law;
}

// Accept x_j with min(1, p/q); at the first rejection draw from max(0, p - q) (p itself if that
// is all 0); else the bonus from p_K. Sampled proposals only.
struct RestatedTokenVerifier {
  Mutation mutation = Mutation::none;

  template <class Scalar, class Coins>
  specdec::VerifyResult verify(const specdec::Proposal<Scalar>& proposal,
                               specdec::TargetRows<Scalar>& target, Coins& coins) const {
    const std::size_t n = proposal.size();
    const std::size_t vocab = target.vocab_size();
    for (std::size_t j = 0; j < n; ++j) {
      const specdec::TokenDistribution<Scalar>& p = target.distribution(j);
      const specdec::token_t x = proposal.tokens[j];
      const Scalar q_x = proposal.q(j, x);
      if (coins.accept(
              j, static_cast<double>(specdec::acceptance_probability(p.probability(x), q_x)))) {
        continue;
      }
      WeightVectorLaw<Scalar> residual{std::vector<Scalar>(vocab), Scalar(0)};
      if (mutation == Mutation::scalar_residual) {
        for (std::size_t y = 0; y < vocab; ++y) {
          residual.total += residual.weights[y] =
              std::max(Scalar(0), p.probability(static_cast<specdec::token_t>(y)) - q_x);
        }
      } else {
        residual.total = static_cast<Scalar>(
            specdec::residual_distribution(p, proposal.q_weights.row(j), proposal.q_normalizers[j],
                                           std::span<Scalar>(residual.weights)));
      }
      if (!(residual.total > 0)) residual = law_of(p);  // documented fallback: p itself
      return {j, coins.draw(residual), false};
    }
    const std::size_t bonus_row = mutation == Mutation::wrong_bonus_row && n > 0 ? n - 1 : n;
    return {n, coins.draw(law_of(target.distribution(bonus_row))), true};
  }
};

}  // namespace specdec_test

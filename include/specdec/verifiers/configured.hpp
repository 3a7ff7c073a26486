#pragma once
/// \file
/// \brief ConfiguredVerifier: the verifier GenerationConfig::verifier selects (VerifierKind).

#include "specdec/coins.hpp"
#include "specdec/generation.hpp"
#include "specdec/proposal.hpp"
#include "specdec/target_rows.hpp"
#include "specdec/verifiers/block.hpp"
#include "specdec/verifiers/token.hpp"
#include "specdec/verify.hpp"

namespace specdec {

/// \brief The verifier GenerationConfig::verifier selects, dispatched at run time (one branch
/// per round; docs/benchmarks.md measures it against a compile-time choice).
class ConfiguredVerifier {
 public:
  void begin(const GenerationConfig& config) noexcept { kind_ = config.verifier; }

  template <class Scalar, class Coins>
  VerifyResult verify(const Proposal<Scalar>& proposal, TargetRows<Scalar>& target,
                      Coins& coins) const {
    if (kind_ == VerifierKind::block) return BlockVerifier{}.verify(proposal, target, coins);
    return TokenVerifier{}.verify(proposal, target, coins);
  }

 private:
  VerifierKind kind_ = VerifierKind::token;
};

}  // namespace specdec

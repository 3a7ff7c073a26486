// Must not compile: a verifier that returns the number of accepted tokens instead of a
// VerifyResult. Expected diagnostic: "specdec: a Verifier must provide `template <class Scalar,
// class Coins> VerifyResult verify(...)`".
#include <cstddef>
#include <span>
#include <vector>

#include "specdec/specdec.hpp"

struct VerifierReturningCount {
  template <class Scalar, class Coins>
  std::size_t verify(const specdec::Proposal<Scalar>&, specdec::TargetRows<Scalar>&, Coins&) {
    return 0;
  }
};

struct Draft {
  std::vector<float> operator()(std::span<const specdec::token_t>) const {
    return std::vector<float>(8, 0.0f);
  }
};

struct Target {
  std::vector<float> operator()(std::span<const specdec::token_t>, std::size_t n) const {
    return std::vector<float>(8 * n, 0.0f);
  }
};

int main() {
  Draft draft;
  Target target;
  specdec::StrategyDecoder decoder(target, specdec::ModelProposer(draft),
                                   specdec::StaticDraftLength{}, VerifierReturningCount{});
  const std::vector<specdec::token_t> prompt = {1};
  return static_cast<int>(decoder.generate(prompt, specdec::GenerationConfig{}).tokens.size());
}

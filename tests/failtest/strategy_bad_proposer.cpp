// Must not compile: a proposer whose propose() takes no coin source. Expected diagnostic:
// "specdec: a Proposer must provide `template <class Coins> Proposal<float> propose(...)`".
#include <cstddef>
#include <span>
#include <vector>

#include "specdec/specdec.hpp"

struct ProposerWithoutCoins {
  specdec::Proposal<float> propose(specdec::DraftRequest&) { return {}; }
};

struct Target {
  std::vector<float> operator()(std::span<const specdec::token_t>, std::size_t n) const {
    return std::vector<float>(8 * n, 0.0f);
  }
};

int main() {
  Target target;
  specdec::StrategyDecoder decoder(target, ProposerWithoutCoins{}, specdec::StaticDraftLength{},
                                   specdec::TokenVerifier{});
  const std::vector<specdec::token_t> prompt = {1};
  return static_cast<int>(decoder.generate(prompt, specdec::GenerationConfig{}).tokens.size());
}

// Must not compile: a draft-length policy without observe(). Expected diagnostic:
// "specdec: a DraftLengthPolicy must provide `bool draft_more(const DraftState&)` and ...".
#include <cstddef>
#include <span>
#include <vector>

#include "specdec/specdec.hpp"

struct PolicyWithoutObserve {
  bool draft_more(const specdec::DraftState& state) const { return state.drafted < 2; }
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
  specdec::StrategyDecoder decoder(target, specdec::ModelProposer(draft), PolicyWithoutObserve{},
                                   specdec::TokenVerifier{});
  const std::vector<specdec::token_t> prompt = {1};
  return static_cast<int>(decoder.generate(prompt, specdec::GenerationConfig{}).tokens.size());
}

// Must not compile: the draft model takes an int instead of the token context.
// Expected diagnostic: "specdec: DraftModel must be callable as model(std::span<const
// specdec::token_t> ...".
#include <cstddef>
#include <span>
#include <vector>

#include "specdec/specdec.hpp"

struct DraftTakingInt {
  std::vector<float> operator()(int last_token) const {
    return std::vector<float>(8, float(last_token));
  }
};

struct Target {
  std::vector<float> operator()(std::span<const specdec::token_t>, std::size_t n) const {
    return std::vector<float>(8 * n, 0.0f);
  }
};

int main() {
  DraftTakingInt draft;
  Target target;
  specdec::SpeculativeDecoder<DraftTakingInt, Target> decoder(draft, target);
  const std::vector<specdec::token_t> prompt = {1};
  return static_cast<int>(decoder.generate(prompt, specdec::GenerationConfig{}).tokens.size());
}

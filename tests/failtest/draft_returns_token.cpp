// Must not compile: the draft model returns a token id (a sampled token) instead of logits.
// Expected diagnostic: "specdec: DraftModel must be callable as model(std::span<const
// specdec::token_t>) and return one row of V contiguous float logits ...".
#include <cstddef>
#include <span>
#include <vector>

#include "specdec/specdec.hpp"

struct DraftReturningToken {
  specdec::token_t operator()(std::span<const specdec::token_t> context) const {
    return context.back();
  }
};

struct Target {
  std::vector<float> operator()(std::span<const specdec::token_t>, std::size_t n) const {
    return std::vector<float>(8 * n, 0.0f);
  }
};

int main() {
  DraftReturningToken draft;
  Target target;
  specdec::SpeculativeDecoder<DraftReturningToken, Target> decoder(draft, target);
  const std::vector<specdec::token_t> prompt = {1};
  return static_cast<int>(decoder.generate(prompt, specdec::GenerationConfig{}).tokens.size());
}

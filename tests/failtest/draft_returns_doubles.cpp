// Must not compile: the draft model returns double logits; specdec reads float rows in place
// (zero-copy), so a silent conversion is not offered.
// Expected diagnostic: "specdec: DraftModel must be callable as model(std::span<const
// specdec::token_t>) and return one row of V contiguous float logits ...".
#include <cstddef>
#include <span>
#include <vector>

#include "specdec/specdec.hpp"

struct DraftReturningDoubles {
  std::vector<double> operator()(std::span<const specdec::token_t>) const {
    return std::vector<double>(8, 0.0);
  }
};

struct Target {
  std::vector<float> operator()(std::span<const specdec::token_t>, std::size_t n) const {
    return std::vector<float>(8 * n, 0.0f);
  }
};

int main() {
  DraftReturningDoubles draft;
  Target target;
  specdec::SpeculativeDecoder<DraftReturningDoubles, Target> decoder(draft, target);
  const std::vector<specdec::token_t> prompt = {1};
  return static_cast<int>(decoder.generate(prompt, specdec::GenerationConfig{}).tokens.size());
}

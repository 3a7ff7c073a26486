// Must not compile: AutoregressiveDecoder applies the same TargetModel contract (row count n).
// Expected diagnostic: "specdec: TargetModel must be callable as model(std::span<const
// specdec::token_t> context, std::size_t n) ...".
#include <span>
#include <vector>

#include "specdec/specdec.hpp"

struct TargetWithoutRowCount {
  std::vector<float> operator()(std::span<const specdec::token_t>) const {
    return std::vector<float>(8, 0.0f);
  }
};

int main() {
  TargetWithoutRowCount target;
  specdec::AutoregressiveDecoder<TargetWithoutRowCount> decoder(target);
  const std::vector<specdec::token_t> prompt = {1};
  return static_cast<int>(decoder.generate(prompt, specdec::GenerationConfig{}).tokens.size());
}

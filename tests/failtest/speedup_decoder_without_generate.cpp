// Must not compile: measure_speedup given a "decoder" without generate(prompt, config). Expected
// diagnostic: "specdec: measure_speedup's speculative decoder must provide GenerationResult ...".
#include <cstddef>
#include <span>
#include <vector>

#include "specdec/specdec.hpp"

struct NotADecoder {
  specdec::GenerationResult run(std::span<const specdec::token_t>) { return {}; }
};

struct Target {
  std::vector<float> operator()(std::span<const specdec::token_t>, std::size_t n) const {
    return std::vector<float>(8 * n, 0.0f);
  }
};

int main() {
  Target target;
  NotADecoder speculative;
  specdec::AutoregressiveDecoder plain(target);
  const std::vector<std::vector<specdec::token_t>> prompts = {{1}};
  const std::vector<std::size_t> draft_lengths = {1, 2};
  const auto table = specdec::measure_speedup(speculative, plain, prompts,
                                              specdec::GenerationConfig{}, draft_lengths, [] {});
  return static_cast<int>(table.rows.size());
}

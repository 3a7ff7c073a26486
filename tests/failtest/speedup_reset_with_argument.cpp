// Must not compile: a cache reset that takes an argument. Expected diagnostic:
// "specdec: measure_speedup's reset_caches must be callable with no arguments ...".
#include <cstddef>
#include <span>
#include <vector>

#include "specdec/specdec.hpp"

struct Target {
  std::vector<float> operator()(std::span<const specdec::token_t>, std::size_t n) const {
    return std::vector<float>(8 * n, 0.0f);
  }
};

int main() {
  Target target;
  specdec::AutoregressiveDecoder plain(target);
  const std::vector<std::vector<specdec::token_t>> prompts = {{1}};
  const std::vector<std::size_t> draft_lengths = {1, 2};
  const auto table = specdec::measure_speedup(plain, plain, prompts, specdec::GenerationConfig{},
                                              draft_lengths, [](int) {});
  return static_cast<int>(table.rows.size());
}

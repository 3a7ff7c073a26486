// Must not compile: a target whose score_tree returns one token instead of rows of logits.
// Expected diagnostic: "specdec: TreeTargetModel::score_tree(committed, tokens, parents) must
// return tokens.size() + 1 rows of V contiguous floats ...".
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "specdec/specdec.hpp"

struct Draft {
  std::vector<float> operator()(std::span<const specdec::token_t>) const {
    return std::vector<float>(8, 0.0f);
  }
};

struct TargetWithBadTreeCall {
  std::vector<float> operator()(std::span<const specdec::token_t>, std::size_t n) const {
    return std::vector<float>(8 * n, 0.0f);
  }
  specdec::token_t score_tree(std::span<const specdec::token_t>, std::span<const specdec::token_t>,
                              std::span<const std::int32_t>) const {
    return 0;
  }
};

int main() {
  Draft draft;
  TargetWithBadTreeCall target;
  specdec::StrategyDecoder decoder(target, specdec::TreeProposer(draft, specdec::TreeOptions{}),
                                   specdec::StaticDraftLength{}, specdec::TreeVerifier{});
  const std::vector<specdec::token_t> prompt = {1};
  return static_cast<int>(decoder.generate(prompt, specdec::GenerationConfig{}).tokens.size());
}

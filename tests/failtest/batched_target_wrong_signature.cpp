// Must not compile: a target whose score_batch takes one request instead of a span of them.
// Expected diagnostic: "specdec: BatchedTargetModel::score_batch must be callable as
// score_batch(std::span<const specdec::ScoreRequest> requests)".
#include <cstddef>
#include <span>
#include <vector>

#include "specdec/specdec.hpp"

struct Draft {
  std::vector<float> operator()(std::span<const specdec::token_t>) const {
    return std::vector<float>(8, 0.0f);
  }
};

struct TargetWithBadBatchCall {
  std::vector<float> operator()(std::span<const specdec::token_t>, std::size_t n) const {
    return std::vector<float>(8 * n, 0.0f);
  }
  std::vector<float> score_batch(const specdec::ScoreRequest& request) const {
    return std::vector<float>(8 * request.rows, 0.0f);
  }
};

int main() {
  Draft draft;
  TargetWithBadBatchCall target;
  specdec::BatchedDecoder decoder(target, specdec::ModelProposer(draft));
  decoder.add(1, std::vector<specdec::token_t>{1}, specdec::GenerationConfig{});
  return static_cast<int>(decoder.run().size());
}

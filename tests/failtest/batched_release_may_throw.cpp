// Must not compile: a batched target whose release_sequence may throw (the decoder calls it
// while a sequence leaves the batch, where an exception would lose the finished results).
// Expected diagnostic: "specdec: a batched model's release_sequence must be callable as
// release_sequence(specdec::sequence_id id) and be noexcept".
#include <cstddef>
#include <span>
#include <vector>

#include "specdec/specdec.hpp"

struct Draft {
  std::vector<float> operator()(std::span<const specdec::token_t>) const {
    return std::vector<float>(8, 0.0f);
  }
};

struct TargetWithThrowingRelease {
  std::vector<float> operator()(std::span<const specdec::token_t>, std::size_t n) const {
    return std::vector<float>(8 * n, 0.0f);
  }
  std::vector<float> score_batch(std::span<const specdec::ScoreRequest> requests) const {
    std::size_t rows = 0;
    for (const specdec::ScoreRequest& request : requests) rows += request.rows;
    return std::vector<float>(8 * rows, 0.0f);
  }
  void release_sequence(specdec::sequence_id) {}  // not noexcept
};

int main() {
  Draft draft;
  TargetWithThrowingRelease target;
  specdec::BatchedDecoder decoder(target, specdec::ModelProposer(draft));
  decoder.add(1, std::vector<specdec::token_t>{1}, specdec::GenerationConfig{});
  return static_cast<int>(decoder.run().size());
}

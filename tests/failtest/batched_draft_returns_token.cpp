// Must not compile: a draft whose draft_batch returns one token instead of rows of logits.
// Expected diagnostic: "specdec: BatchedDraftModel::draft_batch(requests) must return
// requests.size() rows of V contiguous floats ...".
#include <cstddef>
#include <span>
#include <vector>

#include "specdec/specdec.hpp"

struct DraftWithBadBatchCall {
  std::vector<float> operator()(std::span<const specdec::token_t>) const {
    return std::vector<float>(8, 0.0f);
  }
  specdec::token_t draft_batch(std::span<const specdec::DraftStepRequest>) const { return 0; }
};

struct Target {
  std::vector<float> operator()(std::span<const specdec::token_t>, std::size_t n) const {
    return std::vector<float>(8 * n, 0.0f);
  }
};

int main() {
  DraftWithBadBatchCall draft;
  Target target;
  specdec::BatchedDecoder decoder(target, specdec::ModelProposer(draft));
  decoder.add(1, std::vector<specdec::token_t>{1}, specdec::GenerationConfig{});
  return static_cast<int>(decoder.run().size());
}

#pragma once
// Toy models for the batched decoder's tests: ScriptedPair's draft and target (float), with and
// without the batched calls. Each batched call returns exactly the rows the per-sequence calls
// would, back to back, so a sequence's rows never depend on the batch; each counts its calls,
// records the sequences it is told have left (release(id)) and can be told to throw.

#include <cstddef>
#include <span>
#include <stdexcept>
#include <vector>

#include "specdec/batch.hpp"
#include "specdec/testing.hpp"

namespace specdec_test {

/// ScriptedPair's target with score_batch.
struct BatchedScriptedTarget {
  explicit BatchedScriptedTarget(specdec::testing::ScriptedPair::Target<float> base_)
      : base(base_) {}

  specdec::testing::ScriptedPair::Target<float> base;
  std::vector<float> rows;  // the last score_batch's rows (a view the decoder reads in place)
  std::size_t batch_calls = 0;
  std::size_t batch_rows = 0;
  std::size_t broken_promises = 0;  // requests that break ScoreRequest's contract
  bool throw_on_batch = false;
  std::vector<specdec::sequence_id> released;  // release's ids, in order

  void release(specdec::sequence_id id) noexcept { released.push_back(id); }

  std::vector<float> operator()(std::span<const specdec::token_t> context, std::size_t n) const {
    return base(context, n);
  }
  const std::vector<float>& score_batch(std::span<const specdec::ScoreRequest> requests) {
    if (throw_on_batch) throw std::runtime_error("target engine out of memory");
    ++batch_calls;
    rows.clear();
    for (std::size_t i = 0; i < requests.size(); ++i) {
      const specdec::ScoreRequest& request = requests[i];
      // The contract's promises: distinct ids, a chain's drafted + 1 rows after the committed.
      for (std::size_t j = 0; j < i; ++j) broken_promises += requests[j].id == request.id;
      broken_promises += request.committed == 0 || request.committed > request.context.size() ||
                         request.rows != request.context.size() - request.committed + 1;
      const std::vector<float> own = base(request.context, request.rows);
      rows.insert(rows.end(), own.begin(), own.end());
      batch_rows += request.rows;
    }
    return rows;
  }
};

/// The same target returning an owning result (held by the decoder until its next call).
struct OwningBatchedScriptedTarget : BatchedScriptedTarget {
  using BatchedScriptedTarget::BatchedScriptedTarget;
  std::vector<float> score_batch(std::span<const specdec::ScoreRequest> requests) {
    std::vector<float> owned = BatchedScriptedTarget::score_batch(requests);
    rows.assign(rows.size(), -1e30f);  // the decoder must read the returned copy, not this
    return owned;
  }
};

/// ScriptedPair's draft with draft_batch.
struct BatchedScriptedDraft {
  explicit BatchedScriptedDraft(specdec::testing::ScriptedPair::Draft<float> base_) : base(base_) {}

  specdec::testing::ScriptedPair::Draft<float> base;
  std::vector<float> rows;
  std::size_t batch_calls = 0;
  std::size_t batch_rows = 0;
  std::size_t broken_promises = 0;  // requests with the id of another in the same call
  bool throw_on_batch = false;
  bool drop_a_logit = false;                   // return one logit too few (malformed rows)
  std::vector<specdec::sequence_id> released;  // release's ids, in order

  void release(specdec::sequence_id id) noexcept { released.push_back(id); }

  std::vector<float> operator()(std::span<const specdec::token_t> context) const {
    return base(context);
  }
  std::span<const float> draft_batch(std::span<const specdec::DraftStepRequest> requests) {
    if (throw_on_batch) throw std::runtime_error("draft engine out of memory");
    ++batch_calls;
    rows.clear();
    for (std::size_t i = 0; i < requests.size(); ++i) {
      const specdec::DraftStepRequest& request = requests[i];
      for (std::size_t j = 0; j < i; ++j) broken_promises += requests[j].id == request.id;
      const std::vector<float> own = base(request.context);
      rows.insert(rows.end(), own.begin(), own.end());
      ++batch_rows;
    }
    if (drop_a_logit) rows.pop_back();
    return rows;
  }
};

}  // namespace specdec_test

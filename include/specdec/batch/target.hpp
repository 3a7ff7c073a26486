#pragma once
/// \file
/// \brief The batched target contract (optional): one engine call scores the rows of several
/// sequences. BatchedDecoder (batch/decoder.hpp) uses it when a target has it and otherwise
/// calls the TargetModel once per sequence (correct, not amortised).
///
///   auto&& rows = target.score_batch(std::span<const specdec::ScoreRequest> requests);
///
/// requires: every request's context is that sequence's committed tokens followed by its
///           drafted ones (`committed` of them committed, as a TargetModel call's context);
///           ids are distinct within one call and stay the sequence's own while it is decoded.
/// returns:  Σ requests[i].rows rows of V float logits, request by request in order; request
///           i's rows are exactly what `target(requests[i].context, requests[i].rows)` would
///           return. Same return types and lifetime as a TargetModel's rows (model.hpp): a view
///           stays valid until the model's next call, an owning result is held by the decoder.
/// must not: let a sequence's rows depend on the other requests of the call. That is what makes
///           a sequence's tokens independent of the batch it is decoded in (docs/design.md,
///           "Batched decoding").
///
/// Optional, for a model that keeps state per sequence (a KV cache per id):
///
///   void release(specdec::sequence_id id) noexcept;
///
/// Optional, for an engine whose call cost is not one pass over all the call's rows:
///
///   specdec::BatchCallShape batch_call_shape() const noexcept;
///
/// equal_micro_batches: the engine cuts a call into micro-batches that take the same number of
/// rows from every sequence still in them (llama.cpp's split KV cache, split_equal), so a call
/// costs one pass per distinct row count. BatchedDecoder's goodput plan (batch/goodput.hpp)
/// prices a step that way.
///
/// BatchedDecoder calls it once for every sequence that leaves the batch (finished, failed,
/// cancelled, dropped with a failed batched call, or still in the batch when the decoder is
/// destroyed), after the sequence's last call; the model frees what it kept for `id`, and the
/// id may come back later as a new sequence. It must be noexcept (the decoder calls it while
/// removing sequences) and accept an id the model never saw (a sequence that failed before its
/// first call).

#include <concepts>
#include <cstddef>
#include <span>
#include <type_traits>
#include <utility>

#include "specdec/detail/model_traits.hpp"
#include "specdec/model.hpp"
#include "specdec/types.hpp"

namespace specdec {

/// \brief One sequence's part of a batched target call.
struct ScoreRequest {
  sequence_id id = 0;                  ///< the sequence (stable while it is decoded)
  std::span<const token_t> context{};  ///< committed + drafted tokens
  std::size_t committed = 0;  ///< how many of them are committed (a KV cache may keep them)
  std::size_t rows = 0;       ///< n: the rows wanted, as TargetModel's n (drafted + 1)
};

/// \brief How a batched target's call cost grows with its sequences' rows (file comment).
enum class BatchCallShape {
  one_pass,             ///< all rows in one pass: the cost is T(total rows)
  equal_micro_batches,  ///< one pass per distinct row count, each over the sequences it spans
};

namespace detail {

template <class M>
concept HasBatchCallShape = requires(const M& model) {
  { model.batch_call_shape() } -> std::convertible_to<BatchCallShape>;
};

/// Whether `model` cuts its calls into equal micro-batches (batch_call_shape(); one pass
/// without it): BatchedDecoder's plan and measure_batch_call_costs' timed shapes follow it.
template <class M>
[[nodiscard]] bool cuts_equal_micro_batches(const M& model) noexcept {
  if constexpr (HasBatchCallShape<M>) {
    return model.batch_call_shape() == BatchCallShape::equal_micro_batches;
  } else {
    return false;
  }
}

template <class M>
concept HasScoreBatch = requires(M& model, std::span<const ScoreRequest> requests) {
  model.score_batch(requests);
};

/// The optional release(id) hook (file comment), on a batched target or draft alike.
template <class M>
concept HasRelease = requires(M& model, sequence_id id) {
  model.release(id);
};

template <class M>
using score_batch_result_t =
    decltype(std::declval<M&>().score_batch(std::declval<std::span<const ScoreRequest>>()));

}  // namespace detail

/// \brief A TargetModel that can also score several sequences' rows in one call:
/// `target.score_batch(requests)` -> the rows of every request, back to back (file comment).
template <class M>
concept BatchedTargetModel = TargetModel<M> && detail::HasScoreBatch<M> &&
    detail::LogitsRowsLike<std::remove_cvref_t<detail::score_batch_result_t<M>>>;

}  // namespace specdec

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
/// Optional, for a model that keeps state per sequence id (a KV cache each):
///
///   model.release_sequence(id);   // noexcept
///
/// BatchedDecoder calls it, on the target and on a batched draft (batch/draft.hpp), once
/// sequence `id` has left the batch: finished, failed, cancelled, or dropped with the batch
/// after a failed batched call. The model may then free that sequence's state; the id may come
/// back later as a new sequence. Sequences still in the batch when the decoder is destroyed are
/// not released (the model's own API drops them). A model without it never hears of leaving.

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

namespace detail {

template <class M>
concept HasScoreBatch = requires(M& model, std::span<const ScoreRequest> requests) {
  model.score_batch(requests);
};

/// The optional release_sequence(id) (file comment).
template <class M>
concept HasReleaseSequence = requires(M& model, sequence_id id) {
  { model.release_sequence(id) }
  noexcept;
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

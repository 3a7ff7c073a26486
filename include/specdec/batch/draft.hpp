#pragma once
/// \file
/// \brief The batched draft contract (optional): one engine call advances every still-drafting
/// sequence by one token. BatchedDecoder (batch/decoder.hpp) uses it when its proposer is a
/// ModelProposer over a draft that has it; otherwise each sequence's proposer calls its
/// DraftModel once per token (correct, not amortised).
///
///   auto&& rows = draft.draft_batch(std::span<const specdec::DraftStepRequest> requests);
///
/// requires: every request's context is that sequence's committed tokens followed by the
///           tokens it has drafted this round (as a DraftModel call's context); ids are
///           distinct within one call and stay the sequence's own while it is decoded.
/// returns:  requests.size() rows of V float logits, one per request in order; row i is
///           exactly what `draft(requests[i].context)` would return. Same return types and
///           lifetime as a TargetModel's rows (model.hpp).
/// must not: let a sequence's row depend on the other requests of the call.
///
/// Optional: release_sequence(id) noexcept, called when sequence `id` leaves the batch (as for
/// the target, batch/target.hpp).

#include <concepts>
#include <cstddef>
#include <span>
#include <type_traits>
#include <utility>

#include "specdec/detail/model_traits.hpp"
#include "specdec/model.hpp"
#include "specdec/types.hpp"

namespace specdec {

/// \brief One sequence's part of a batched draft call: the row after its whole context.
struct DraftStepRequest {
  sequence_id id = 0;                  ///< the sequence (stable while it is decoded)
  std::span<const token_t> context{};  ///< committed + drafted so far this round
};

namespace detail {

template <class M>
concept HasDraftBatch = requires(M& model, std::span<const DraftStepRequest> requests) {
  model.draft_batch(requests);
};

template <class M>
using draft_batch_result_t =
    decltype(std::declval<M&>().draft_batch(std::declval<std::span<const DraftStepRequest>>()));

}  // namespace detail

/// \brief A DraftModel that can also draft one row for each of several sequences in one call:
/// `draft.draft_batch(requests)` -> one row per request, back to back (file comment).
template <class M>
concept BatchedDraftModel = DraftModel<M> && detail::HasDraftBatch<M> &&
    detail::LogitsRowsLike<std::remove_cvref_t<detail::draft_batch_result_t<M>>>;

}  // namespace specdec

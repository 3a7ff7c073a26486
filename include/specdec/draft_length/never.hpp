#pragma once
/// \file
/// \brief NeverDraft: every round a plain target step, through the same decoder.

#include "specdec/proposal.hpp"
#include "specdec/strategies.hpp"

namespace specdec {

/// \brief Drafts nothing: every round is one target row (one per sequence in BatchedDecoder)
/// and no draft call. The baseline that shares everything else with speculative decoding:
/// BatchedDecoder with it is plain batched decoding, StrategyDecoder with it plain decoding with
/// the round's sampling (AutoregressiveDecoder is the single-sequence baseline without a draft).
struct NeverDraft {
  [[nodiscard]] bool draft_more(const DraftState& /*state*/) const noexcept { return false; }
  void observe(const RoundReport& /*report*/) const noexcept {}
};

}  // namespace specdec

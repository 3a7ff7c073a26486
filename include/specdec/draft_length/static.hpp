#pragma once
/// \file
/// \brief StaticDraftLength: draft the round's whole limit, min(draft_length, budget - 1) tokens,
/// every round (the classic fixed K).

#include "specdec/proposal.hpp"
#include "specdec/strategies.hpp"

namespace specdec {

/// \brief Always drafts one more token until the round's limit (GenerationConfig::draft_length,
/// or fewer near the end of the budget) is reached. Trivially exact: it looks at nothing.
struct StaticDraftLength {
  [[nodiscard]] bool draft_more(const DraftState& /*state*/) const noexcept { return true; }
  void observe(const RoundReport& /*report*/) const noexcept {}
};

}  // namespace specdec

#pragma once
/// \file
/// \brief ConfidenceDraftLength: stop drafting after a token the draft was unsure of, as
/// llama.cpp's speculative decoding does with `p_min` (and `n_max` = draft_length).

#include <cmath>
#include <cstddef>

#include "specdec/detail/error.hpp"
#include "specdec/detail/exact_float.hpp"
#include "specdec/draft_length/options.hpp"
#include "specdec/proposal.hpp"
#include "specdec/strategies.hpp"

namespace specdec {

/// \brief Drafts until a drafted token's probability falls below min_probability (or the
/// round's limit). The decision comes before each token, from the tokens drafted so far, so
/// the unsure token itself is still verified (llama.cpp drops it instead; keeping it costs
/// one verification row and is accepted sometimes). Exact: it reads draft-side facts only.
class ConfidenceDraftLength {
 public:
  ConfidenceDraftLength() = default;
  explicit ConfidenceDraftLength(const ConfidenceOptions& options) : options_(options) {
    options_.validate();
  }

  [[nodiscard]] bool draft_more(const DraftState& state) const noexcept {
    // A proposer that reports no probabilities (n-gram lookups) is treated as sure.
    if (state.drafted == 0 || state.drafted > state.token_probabilities.size()) return true;
    return state.token_probabilities[state.drafted - 1] >= options_.min_probability;
  }
  [[nodiscard]] static constexpr bool reads_token_probabilities() noexcept { return true; }
  void observe(const RoundReport& /*report*/) const noexcept {}

  [[nodiscard]] const ConfidenceOptions& options() const noexcept { return options_; }

 private:
  ConfidenceOptions options_{};
};

}  // namespace specdec

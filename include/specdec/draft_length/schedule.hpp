#pragma once
/// \file
/// \brief ScheduleDraftLength: the draft-length schedule of Hugging Face transformers' assisted
/// generation ("heuristic"): K grows by 2 after a round that accepted every drafted token and
/// shrinks by 1 after a rejection. A baseline users know, not a cost model.

#include <algorithm>
#include <cstddef>

#include "specdec/detail/error.hpp"
#include "specdec/draft_length/options.hpp"
#include "specdec/proposal.hpp"
#include "specdec/strategies.hpp"

namespace specdec {

/// \brief Drafts K tokens per round, K adapted after every round: +grow when the round
/// accepted all it drafted, -shrink when it ended in a rejection, within [1, draft_length].
/// Exact: K depends on earlier rounds' outcomes only. Starts over (initial_draft_length) at
/// every generate(), so the same seed gives the same tokens.
class ScheduleDraftLength {
 public:
  ScheduleDraftLength() = default;
  explicit ScheduleDraftLength(const ScheduleOptions& options) : options_(options) {
    options_.validate();
  }

  /// \brief Called by the decoder at the start of each generate(): the cap is
  /// config.draft_length.
  template <class Config>
  void begin(const Config& config) noexcept {
    cap_ = std::max<std::size_t>(config.draft_length, 1);
    current_ = std::clamp(options_.initial_draft_length, std::size_t{1}, cap_);
  }

  [[nodiscard]] bool draft_more(const DraftState& state) const noexcept {
    return state.drafted < current_;
  }
  [[nodiscard]] static constexpr bool reads_token_probabilities() noexcept { return false; }

  void observe(const RoundReport& report) noexcept {
    if (report.drafted == 0) return;
    if (report.accepted == report.drafted) {
      // Saturating: grow = SIZE_MAX means "to the cap" (current_ + grow would wrap).
      if (report.drafted == current_) {
        current_ = options_.grow >= cap_ - current_ ? cap_ : current_ + options_.grow;
      }
    } else {
      current_ = current_ > options_.shrink ? current_ - options_.shrink : 1;
    }
  }

  /// \brief The K the next round will draft (before its round limit).
  [[nodiscard]] std::size_t current_draft_length() const noexcept { return current_; }
  [[nodiscard]] const ScheduleOptions& options() const noexcept { return options_; }

 private:
  ScheduleOptions options_{};
  std::size_t cap_ = 1;
  std::size_t current_ = 1;
};

}  // namespace specdec

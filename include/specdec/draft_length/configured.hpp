#pragma once
/// \file
/// \brief The draft-length policy GenerationConfig selects (DraftLengthKind), with its
/// parameters, and ConfiguredDraftLength, which runs it: the policy behind SpeculativeDecoder.

#include <cstddef>
#include <optional>
#include <type_traits>

#include "specdec/detail/error.hpp"
#include "specdec/draft_length/confidence.hpp"
#include "specdec/draft_length/goodput.hpp"
#include "specdec/draft_length/options.hpp"
#include "specdec/draft_length/schedule.hpp"
#include "specdec/draft_length/static.hpp"
#include "specdec/proposal.hpp"
#include "specdec/strategies.hpp"

namespace specdec {

/// \brief Runs the policy config.draft_length_policy selects (one switch per draft token).
/// A policy keeps its state while its options stay the same (the goodput policy's measured
/// costs carry over from one generate() to the next); new options start it afresh.
class ConfiguredDraftLength {
 public:
  template <class Config>
  void begin(const Config& config) {
    const DraftLengthPolicyOptions& options = config.draft_length_policy;
    kind_ = options.kind;
    switch (kind_) {
      case DraftLengthKind::fixed:
        break;
      case DraftLengthKind::schedule:
        if (!(schedule_.options() == options.schedule)) {
          schedule_ = ScheduleDraftLength(options.schedule);
        }
        schedule_.begin(config);
        break;
      case DraftLengthKind::confidence:
        if (!(confidence_.options() == options.confidence)) {
          confidence_ = ConfidenceDraftLength(options.confidence);
        }
        break;
      case DraftLengthKind::goodput:
        if (!(goodput_.options() == options.goodput)) {
          goodput_ = GoodputDraftLength(options.goodput);
        }
        goodput_.begin(config);
        break;
    }
  }

  [[nodiscard]] bool draft_more(const DraftState& state) {
    switch (kind_) {
      case DraftLengthKind::schedule:
        return schedule_.draft_more(state);
      case DraftLengthKind::confidence:
        return confidence_.draft_more(state);
      case DraftLengthKind::goodput:
        return goodput_.draft_more(state);
      case DraftLengthKind::fixed:
        break;
    }
    return true;
  }

  [[nodiscard]] bool reads_token_probabilities() const noexcept {
    return kind_ == DraftLengthKind::confidence || kind_ == DraftLengthKind::goodput;
  }

  void observe(const RoundReport& report) {
    if (kind_ == DraftLengthKind::schedule) schedule_.observe(report);
    if (kind_ == DraftLengthKind::goodput) goodput_.observe(report);
  }

  [[nodiscard]] std::optional<RoundPrediction> prediction() const noexcept {
    if (kind_ == DraftLengthKind::goodput) return goodput_.prediction();
    return std::nullopt;
  }

  [[nodiscard]] DraftLengthKind kind() const noexcept { return kind_; }
  [[nodiscard]] ScheduleDraftLength& schedule() noexcept { return schedule_; }
  [[nodiscard]] GoodputDraftLength& goodput() noexcept { return goodput_; }

 private:
  DraftLengthKind kind_ = DraftLengthKind::fixed;
  ScheduleDraftLength schedule_{};
  ConfidenceDraftLength confidence_{};
  GoodputDraftLength goodput_{};
};

}  // namespace specdec

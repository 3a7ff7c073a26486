#pragma once
/// \file
/// \brief The draft-length policies' parameters, and DraftLengthKind /
/// DraftLengthPolicyOptions: which policy GenerationConfig selects. Settings only (no policy
/// code), so that the settings header (generation.hpp) stays light.

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <limits>
#include <span>
#include <string_view>
#include <type_traits>
#include <vector>

#include "specdec/detail/error.hpp"
#include "specdec/detail/exact_float.hpp"
#include "specdec/enum_names.hpp"

namespace specdec {

/// \brief ScheduleDraftLength's parameters.
struct ScheduleOptions {
  std::size_t initial_draft_length = 5;  ///< K of the first round of every generate() (>= 1)
  /// K += grow after a round that accepted everything (K stays <= draft_length: any grow,
  /// SIZE_MAX included, saturates there)
  std::size_t grow = 2;
  std::size_t shrink = 1;  ///< K -= shrink after a rejection (K stays >= 1, whatever shrink is)

  bool operator==(const ScheduleOptions&) const = default;

  /// \brief Throws std::invalid_argument naming the bad field.
  void validate() const {
    if (initial_draft_length == 0) {
      detail::throw_invalid_argument(
          "schedule initial_draft_length = 0; expected >= 1 (the first round's K)");
    }
  }
};

/// \brief ConfidenceDraftLength's parameters.
struct ConfidenceOptions {
  /// Stop after a drafted token whose probability (DraftState::token_probabilities) is below
  /// this; in [0, 1]. llama.cpp's default p_min.
  double min_probability = 0.75;

  /// Exactly (not `= default`: see GoodputOptions::operator==).
  [[nodiscard]] bool operator==(const ConfidenceOptions& other) const noexcept {
    return detail::exactly_equal(min_probability, other.min_probability);
  }

  /// \brief Throws std::invalid_argument naming the bad field.
  void validate() const {
    if (!(min_probability >= 0.0 && min_probability <= 1.0)) {
      detail::throw_invalid_argument("confidence min_probability = ", min_probability,
                                     "; expected a probability in [0, 1]");
    }
  }
};

/// \brief GoodputDraftLength's parameters.
struct GoodputOptions {
  /// Weight kept by old evidence about the text's easy and hard stretches (their acceptance
  /// rates and shares) at each drafting round, in (0, 1]: 0.9 remembers about ten rounds; 1
  /// never forgets. (Which stretch the text is in is tracked verdict by verdict whatever this
  /// is; the calibration by the draft's probability keeps all of a generation's evidence.)
  double forgetting = 0.9;
  /// Consecutive plain rounds before one token is drafted to probe whether drafting pays
  /// again (>= 1). After four probes in a row that do not restart drafting it doubles with
  /// every further one, up to 16 times (so a useless draft costs one draft token and one
  /// verify row per 16 rounds in the long run, while text that turns easy again after a hard
  /// stretch is noticed within probe_interval rounds). 1 measured as good as or better than 4
  /// on the synthetic workloads of changing difficulty, and within 1 % of plain decoding with a
  /// useless draft (docs/history.md).
  std::size_t probe_interval = 1;
  /// A fixed cost model, in units of a one-row target call: t_d = draft_token_cost and
  /// T_v(n) = 1 + verify_row_cost (n - 1). Both >= 0 to use it (decisions then never depend on
  /// timings, so the same seed gives the same tokens); both < 0 (the default) to measure them
  /// online from the round timings.
  double draft_token_cost = -1;
  double verify_row_cost = -1;
  /// A measured verification cost curve instead of the line: T_v(n) = verify_costs[n - 1] for
  /// n = 1 .. size, in the unit of draft_token_cost (seconds, or one-row target calls), and
  /// beyond the table its last step repeated per row. For a target whose cost is not a line in
  /// the row count: a CPU engine's curve has steps and dips (on llama.cpp's CPU backend a
  /// 9-row call measured cheaper than an 8-row one), which online measurement learns only
  /// slowly and noisily, from the row counts the rounds happen to use. measure_call_costs()
  /// (call_costs.hpp) times both models and fills this and draft_token_cost. Non-empty
  /// requires draft_token_cost >= 0 and verify_row_cost < 0; decisions never depend on
  /// timings then.
  std::vector<double> verify_costs{};
  /// With fixed costs: the extra cost of a round whose target call computes a different number
  /// of rows than the previous round's, in the unit of draft_token_cost (>= 0, finite). A CPU
  /// engine may prepare each call shape anew: llama.cpp reuses its compute graph only while the
  /// batch shape stays the same, and on the shipped pair a rebuilt graph cost 0.1 ms of a 0.5 ms
  /// one-row call. Plain decoding and a static K never pay it; a policy that alternates between
  /// plain steps and drafting, or between draft lengths, pays it every time, so the policy
  /// charges it to a plan whose row count differs from the last round's (hysteresis, measured
  /// rather than tuned). measure_call_costs() measures it.
  double switch_cost = 0;
  /// With fixed costs: correct them by what decoding shows. The policy compares the seconds
  /// its drafting rounds take per unit of predicted cost with those of its plain rounds, and
  /// when drafting runs dearer than the fixed model says (by up to 2x) scales the draft and
  /// multi-row costs up by that factor (never down: the correction only protects plain
  /// decoding). It acts only once both kinds of rounds were seen (four each), which happens
  /// where the decision is close, and holds while rounds are plain; a policy sure of either
  /// never pays for it. Decisions then depend on timings again (sampled output is not
  /// reproducible seed for seed). Why: costs measured before decoding read drafting cheaper
  /// than decoding then paid for it (on the shipped pair's Q8_0 weights, a 4-row call at 2.4
  /// one-row calls against 3.0 inside decoding), and near break-even that is the difference
  /// between 0.8x and 1.0x of plain decoding. Off unless set: CallCosts::goodput_options()
  /// marks its costs measured_costs instead, and the plain guard judges the rounds.
  bool correct_costs = false;
  /// Keep the calibration by the draft's probability from one generate() to the next while
  /// the sampling parameters stay the same (it describes the model pair, not the text). With
  /// fixed costs the same seed then gives the same tokens for the same sequence of generate()
  /// calls on a decoder; false makes every call a function of its own arguments.
  bool keep_calibration = true;
  /// The fixed costs were measured on this machine (CallCosts::goodput_options sets it), not
  /// given: timings may then steer the policy (plain_guard), as they do with costs learnt
  /// online, so sampled output is not reproducible seed for seed.
  bool measured_costs = false;
  /// Whenever timings may steer the policy (costs learnt online, measured_costs, correct_costs):
  /// judge the drafting rounds by what they delivered, not by what the cost model predicted.
  /// The policy keeps, over its recent drafting rounds, the tokens they emitted per plain step
  /// of time (a plain round's measured seconds); when that falls below 1 (two rounds or
  /// more), it runs plain steps (no probes) and tries its plan again only after 8 plain
  /// rounds, then 16, ... up to 256 while the trials keep losing, and only while what the
  /// trials lost stays within 2 plain steps plus 0.5 % of the time decoded; a trial that wins
  /// reopens drafting. Before its first verdict a round may lose at most 3 plain steps plus
  /// that allowance, were it to emit one token. The model still chooses the draft lengths;
  /// this only stops drafting that does not pay as run (the cost model's errors near
  /// break-even: call costs measured before decoding against those inside it, the draft's
  /// catch-up, a graph rebuilt per call shape, acceptance that block verification changes).
  bool plain_guard = true;
  /// With plain_guard: how a plain step's time grows with the context, per token, relative to
  /// its time at context 0 (>= 0, finite; 0: taken as constant). The guard times its plain
  /// steps early in a generation and judges drafting rounds all along it: on the shipped pair's
  /// f16 GGUF a one-row call took 1.2 times as long after ~210 tokens as after ~50, so without
  /// it a late drafting round is judged against a plain step up to 20 % cheaper than its own,
  /// and drafting that pays can look as if it lost. measure_call_costs() measures it.
  double plain_growth = 0;

  /// Field by field, exactly (not `= default`, which would compare the doubles with == and make
  /// users' -Wfloat-equal builds warn).
  [[nodiscard]] bool operator==(const GoodputOptions& other) const noexcept {
    return detail::exactly_equal(forgetting, other.forgetting) &&
           probe_interval == other.probe_interval &&
           detail::exactly_equal(draft_token_cost, other.draft_token_cost) &&
           detail::exactly_equal(verify_row_cost, other.verify_row_cost) &&
           std::ranges::equal(verify_costs, other.verify_costs, detail::exactly_equal<double>) &&
           detail::exactly_equal(switch_cost, other.switch_cost) &&
           correct_costs == other.correct_costs && keep_calibration == other.keep_calibration &&
           measured_costs == other.measured_costs && plain_guard == other.plain_guard &&
           detail::exactly_equal(plain_growth, other.plain_growth);
  }

  [[nodiscard]] bool fixed_costs() const noexcept {
    return draft_token_cost >= 0 && (verify_row_cost >= 0 || !verify_costs.empty());
  }

  /// T_v(n) of the fixed cost model, n >= 1 (valid only when fixed_costs()).
  [[nodiscard]] double fixed_verify_cost(std::size_t n) const noexcept {
    const auto rows = static_cast<double>(n - 1);
    if (verify_costs.empty()) return 1.0 + verify_row_cost * rows;
    const std::size_t size = verify_costs.size();
    if (n <= size) return verify_costs[n - 1];
    const double step =
        size >= 2 ? std::max(0.0, verify_costs[size - 1] - verify_costs[size - 2]) : 0.0;
    return verify_costs[size - 1] + step * static_cast<double>(n - size);
  }

  /// \brief Throws std::invalid_argument naming the bad field.
  void validate() const {
    if (!(forgetting > 0.0 && forgetting <= 1.0)) {
      detail::throw_invalid_argument("goodput forgetting = ", forgetting,
                                     "; expected a weight in (0, 1]");
    }
    if (probe_interval == 0) {
      detail::throw_invalid_argument("goodput probe_interval = 0; expected >= 1 plain rounds");
    }
    if (!(switch_cost >= 0) || std::isinf(switch_cost)) {
      detail::throw_invalid_argument("goodput switch_cost = ", switch_cost,
                                     "; expected a finite cost >= 0 (0: none)");
    }
    if (!(plain_growth >= 0) || std::isinf(plain_growth)) {
      detail::throw_invalid_argument("goodput plain_growth = ", plain_growth,
                                     "; expected a finite growth >= 0 per token (0: none)");
    }
    if (!verify_costs.empty()) {
      if (!(draft_token_cost >= 0) || std::isinf(draft_token_cost) || verify_row_cost >= 0) {
        detail::throw_invalid_argument(
            "goodput verify_costs given (", verify_costs.size(),
            " row counts) with "
            "draft_token_cost = ",
            draft_token_cost, ", verify_row_cost = ", verify_row_cost,
            "; expected a finite draft_token_cost >= 0 in the same unit and verify_row_cost < 0 "
            "(the table replaces the line)");
      }
      for (std::size_t i = 0; i < verify_costs.size(); ++i) {
        if (!(verify_costs[i] > 0) || std::isinf(verify_costs[i])) {
          detail::throw_invalid_argument("goodput verify_costs[", i, "] = ", verify_costs[i],
                                         " (T_v(", i + 1, ")); expected a finite cost > 0");
        }
      }
      return;
    }
    const bool draft_fixed = draft_token_cost >= 0, row_fixed = verify_row_cost >= 0;
    if (draft_fixed != row_fixed || std::isnan(draft_token_cost) || std::isnan(verify_row_cost) ||
        std::isinf(draft_token_cost) || std::isinf(verify_row_cost)) {
      detail::throw_invalid_argument(
          "goodput draft_token_cost = ", draft_token_cost, ", verify_row_cost = ", verify_row_cost,
          "; expected both finite and >= 0 (a fixed cost model) or both < 0 (measure online)");
    }
  }
};

/// \brief The built-in draft-length policies; GenerationConfig::draft_length is every one's
/// cap (the most tokens a round may draft).
enum class DraftLengthKind {
  fixed,       ///< draft_length tokens every round (StaticDraftLength)
  schedule,    ///< +2 after a fully accepted round, -1 after a rejection (ScheduleDraftLength)
  confidence,  ///< stop after a token the draft was unsure of (ConfidenceDraftLength)
  goodput,     ///< maximise expected tokens per second (GoodputDraftLength)
};

/// \brief DraftLengthKind's names (enum_names.hpp): the enumerators' own.
template <>
struct EnumNames<DraftLengthKind> {
  static constexpr std::string_view what = "draft-length policy";
  static constexpr std::array<EnumName<DraftLengthKind>, 4> names{
      {{DraftLengthKind::fixed, "fixed"},
       {DraftLengthKind::schedule, "schedule"},
       {DraftLengthKind::confidence, "confidence"},
       {DraftLengthKind::goodput, "goodput"}}};
};

/// \brief Which draft-length policy a SpeculativeDecoder uses, and the parameters of each.
struct DraftLengthPolicyOptions {
  DraftLengthKind kind = DraftLengthKind::fixed;
  ScheduleOptions schedule{};
  ConfidenceOptions confidence{};
  GoodputOptions goodput{};

  /// \brief Throws std::invalid_argument naming the bad field.
  void validate() const {
    if (kind != DraftLengthKind::fixed && kind != DraftLengthKind::schedule &&
        kind != DraftLengthKind::confidence && kind != DraftLengthKind::goodput) {
      detail::throw_invalid_argument(
          "draft_length_policy.kind = ", static_cast<std::underlying_type_t<DraftLengthKind>>(kind),
          "; expected a DraftLengthKind: fixed (0), schedule (1), confidence (2) or goodput (3)");
    }
    schedule.validate();
    confidence.validate();
    goodput.validate();
  }
};

}  // namespace specdec

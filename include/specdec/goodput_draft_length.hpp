#pragma once
/// \file
/// \brief GoodputDraftLength: drafts the number of tokens that maximises the expected tokens
/// per second of the round, from acceptance calibrated online against the draft's own
/// probabilities and from the measured (or given) cost of drafting and verifying.
///
/// The round's figure of merit (docs/design.md, "Choosing the draft length"): a round that
/// drafts m tokens emits 1 + sum_{i<=m} P_i tokens in expectation, where P_i is the probability
/// that drafted tokens 1..i are all accepted, and costs m t_d + T_v(m + 1): t_d per draft token
/// and T_v(n) for a target call over n rows. Before each draft token the policy knows the
/// probabilities of the j tokens drafted so far (so P_1..P_j, through the calibration) and
/// projects the rest with the mean acceptance a: P_{j+k} = P_j a^k. It drafts token j + 1 iff
/// the m in [j, limit] maximising
///
///     G(m) = (1 + sum_{i<=m} P_i) / (m t_d + T_v(m + 1))
///
/// is larger than j (ties: the smaller m). At j = 0 that compares speculation with a plain
/// target step (G(0) = 1 / T_v(1)); when a plain step wins the round drafts nothing, and after
/// probe_interval such rounds one token is drafted anyway to learn whether drafting pays again.
///
/// Exact for any estimates: the decision uses draft-side facts of this round and the outcomes
/// of earlier rounds, never this round's target rows. With measured costs the draft lengths
/// depend on timings, so sampled output is not reproducible seed for seed (its distribution is
/// still the target's); fixed costs (GoodputOptions) make it so. Greedy output is the target's
/// argmax path whatever the draft lengths.

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <optional>
#include <span>
#include <vector>

#include "specdec/detail/error.hpp"
#include "specdec/proposal.hpp"
#include "specdec/strategies.hpp"

namespace specdec {

/// \brief GoodputDraftLength's parameters.
struct GoodputOptions {
  /// Weight kept by old acceptance evidence at each drafting round, in (0, 1]: 0.9 remembers
  /// about ten rounds (follows text whose difficulty changes); 1 never forgets.
  double forgetting = 0.9;
  /// Consecutive plain rounds before one token is drafted to probe whether drafting pays
  /// again (>= 1); doubles after every probe that does not restart drafting, up to 16 times.
  std::size_t probe_interval = 16;
  /// A fixed cost model, in units of a one-row target call: t_d = draft_token_cost and
  /// T_v(n) = 1 + verify_row_cost (n - 1). Both >= 0 to use it (decisions then never depend on
  /// timings, so the same seed gives the same tokens); both < 0 (the default) to measure them
  /// online from the round timings.
  double draft_token_cost = -1;
  double verify_row_cost = -1;

  bool operator==(const GoodputOptions&) const = default;

  [[nodiscard]] bool fixed_costs() const noexcept {
    return draft_token_cost >= 0 && verify_row_cost >= 0;
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
    const bool draft_fixed = draft_token_cost >= 0, row_fixed = verify_row_cost >= 0;
    if (draft_fixed != row_fixed || std::isnan(draft_token_cost) ||
        std::isnan(verify_row_cost) || std::isinf(draft_token_cost) ||
        std::isinf(verify_row_cost)) {
      detail::throw_invalid_argument(
          "goodput draft_token_cost = ", draft_token_cost, ", verify_row_cost = ", verify_row_cost,
          "; expected both finite and >= 0 (a fixed cost model) or both < 0 (measure online)");
    }
  }
};

/// \brief What the goodput formula needs to rank draft lengths (any time unit).
struct GoodputEstimates {
  /// P_1..P_j: survival probability of the tokens drafted so far (non-increasing, in [0, 1]).
  std::span<const double> survival;
  double next_acceptance = 0;  ///< a: acceptance probability of each token not drafted yet
  double draft_token_cost = 0;  ///< t_d
  std::span<const double> verify_cost;  ///< [n - 1] = T_v(n), n = 1 .. at least max_length + 1
};

/// \brief Expected tokens a round drafting m >= estimates.survival.size() tokens emits.
[[nodiscard]] inline double expected_round_tokens(const GoodputEstimates& estimates,
                                                  std::size_t m) noexcept {
  double tokens = 1.0, last = 1.0;
  for (const double p : estimates.survival) tokens += (last = p);
  for (std::size_t i = estimates.survival.size(); i < m; ++i) {
    last *= estimates.next_acceptance;
    tokens += last;
  }
  return tokens;
}

/// \brief Expected cost of a round drafting m tokens: m t_d + T_v(m + 1).
[[nodiscard]] inline double expected_round_cost(const GoodputEstimates& estimates,
                                                std::size_t m) noexcept {
  return static_cast<double>(m) * estimates.draft_token_cost + estimates.verify_cost[m];
}

/// \brief argmax over m in [j, max_length] of expected_round_tokens / expected_round_cost,
/// j = estimates.survival.size() (ties: the smallest m), in one pass.
[[nodiscard]] inline std::size_t best_draft_length(const GoodputEstimates& estimates,
                                                   std::size_t max_length) noexcept {
  const std::size_t j = estimates.survival.size();
  double tokens = 1.0, last = 1.0;
  for (const double p : estimates.survival) tokens += (last = p);
  std::size_t best = j;
  double best_rate = tokens / expected_round_cost(estimates, j);
  for (std::size_t m = j + 1; m <= max_length; ++m) {
    last *= estimates.next_acceptance;
    tokens += last;
    const double rate = tokens / expected_round_cost(estimates, m);
    if (rate > best_rate) {
      best_rate = rate;
      best = m;
    }
  }
  return best;
}

namespace detail {

/// Acceptance as a function of the draft's probability of its token, learned from rounds:
/// ten probability bins of decayed (accepted, judged) counts, each shrunk towards the decayed
/// overall rate (which is shrunk towards 1/2), so a bin with little evidence borrows the mean.
class AcceptanceCalibration {
 public:
  static constexpr std::size_t kBins = 10;

  void reset() noexcept {
    accepted_.fill(0.0);
    judged_.fill(0.0);
    all_accepted_ = all_judged_ = 0.0;
  }

  /// One round: tokens [0, accepted) accepted, token `accepted` (if drafted) rejected.
  void observe(std::span<const double> probabilities, std::size_t drafted, std::size_t accepted,
               double forgetting) noexcept {
    for (std::size_t b = 0; b < kBins; ++b) {
      accepted_[b] *= forgetting;
      judged_[b] *= forgetting;
    }
    all_accepted_ *= forgetting;
    all_judged_ *= forgetting;
    const std::size_t judged = std::min(drafted, accepted + 1);
    for (std::size_t i = 0; i < judged; ++i) {
      const std::size_t b = bin(i < probabilities.size() ? probabilities[i] : 1.0);
      const double success = i < accepted ? 1.0 : 0.0;
      accepted_[b] += success;
      judged_[b] += 1.0;
      all_accepted_ += success;
      all_judged_ += 1.0;
    }
  }

  /// The overall acceptance rate (the estimate for a token not drafted yet).
  [[nodiscard]] double mean() const noexcept {
    return (all_accepted_ + kPriorMean * kPriorWeight) / (all_judged_ + kPriorWeight);
  }

  /// Acceptance of a drafted token the draft gave `probability`.
  [[nodiscard]] double at(double probability) const noexcept {
    const std::size_t b = bin(probability);
    return (accepted_[b] + mean() * kBinShrinkage) / (judged_[b] + kBinShrinkage);
  }

 private:
  static constexpr double kPriorMean = 0.5, kPriorWeight = 1.0, kBinShrinkage = 2.0;

  static std::size_t bin(double probability) noexcept {
    if (!(probability > 0.0)) return 0;
    return std::min(kBins - 1, static_cast<std::size_t>(probability * kBins));
  }

  std::array<double, kBins> accepted_{};
  std::array<double, kBins> judged_{};
  double all_accepted_ = 0, all_judged_ = 0;
};

/// Draft and verification costs, measured from round timings: t_d as a moving average of
/// draft seconds per token; T_v(n) per row count n as a moving average of target-call seconds,
/// read where it has been seen a few times and from a weighted least-squares line through the
/// averages elsewhere (one point: a slope of kPriorRowCost per row, none: unit costs).
class MeasuredCosts {
 public:
  void resize(std::size_t max_rows) {
    if (mean_.size() < max_rows + 1) {
      mean_.resize(max_rows + 1, 0.0);
      weight_.resize(max_rows + 1, 0.0);
    }
  }

  void observe(std::size_t drafted, double draft_seconds, double target_seconds) noexcept {
    if (drafted > 0 && draft_seconds >= 0) {
      const double per_token = draft_seconds / static_cast<double>(drafted);
      draft_token_ = draft_seen_ ? kSmoothing * draft_token_ + (1 - kSmoothing) * per_token
                                 : per_token;
      draft_seen_ = true;
    }
    const std::size_t rows = drafted + 1;
    if (rows >= mean_.size() || !(target_seconds > 0)) return;
    mean_[rows] = weight_[rows] > 0
                      ? kSmoothing * mean_[rows] + (1 - kSmoothing) * target_seconds
                      : target_seconds;
    weight_[rows] = std::min(weight_[rows] + 1.0, kMaxWeight);
  }

  [[nodiscard]] bool known() const noexcept { return draft_seen_; }
  [[nodiscard]] double draft_token() const noexcept { return draft_token_; }

  /// Fills table[n - 1] = T_v(n), n = 1 .. table.size().
  void fill_verify(std::span<double> table) const noexcept {
    double sw = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
    std::size_t points = 0;
    for (std::size_t n = 1; n < mean_.size(); ++n) {
      if (weight_[n] <= 0) continue;
      const double w = weight_[n], x = static_cast<double>(n - 1), y = mean_[n];
      sw += w, sx += w * x, sy += w * y, sxx += w * x * x, sxy += w * x * y;
      ++points;
    }
    double intercept = 1.0, slope = kPriorRowCost;
    if (points >= 2 && sw * sxx - sx * sx > 0) {
      slope = std::max(0.0, (sw * sxy - sx * sy) / (sw * sxx - sx * sx));
      intercept = (sy - slope * sx) / sw;
      if (!(intercept > 0)) {  // a line through the origin or below: fall back to the mean
        slope = 0;
        intercept = sy / sw;
      }
    } else if (points == 1) {
      const double x = sx / sw;
      intercept = (sy / sw) / (1 + kPriorRowCost * x);
      slope = kPriorRowCost * intercept;
    }
    for (std::size_t n = 1; n <= table.size(); ++n) {
      const bool seen = n < mean_.size() && weight_[n] >= kTrustedWeight;
      table[n - 1] = seen ? mean_[n] : intercept + slope * static_cast<double>(n - 1);
    }
  }

 private:
  static constexpr double kSmoothing = 0.9, kMaxWeight = 16, kTrustedWeight = 3;
  static constexpr double kPriorRowCost = 0.05;
  std::vector<double> mean_, weight_;  // [n]: target-call seconds for n rows
  double draft_token_ = 0;
  bool draft_seen_ = false;
};

}  // namespace detail

/// \brief The goodput-optimal draft-length policy (see the file comment).
///
/// Acceptance estimates start over at every generate() (the text changes); measured costs
/// carry over (they describe the hardware). Use it through GenerationConfig
/// (DraftLengthKind::goodput) or directly as a StrategyDecoder policy.
class GoodputDraftLength {
 public:
  GoodputDraftLength() = default;
  explicit GoodputDraftLength(const GoodputOptions& options) : options_(options) {
    options_.validate();
  }

  /// \brief Called by the decoder at the start of each generate(): the cap is
  /// config.draft_length; acceptance evidence and probing start over.
  template <class Config>
  void begin(const Config& config) {
    cap_ = std::max<std::size_t>(config.draft_length, 1);
    reserve(cap_);
    calibration_.reset();
    plain_streak_ = 0;
    probe_wait_ = options_.probe_interval;
    probing_ = false;
    predicted_ = false;
    refresh_costs();
  }

  [[nodiscard]] bool draft_more(const DraftState& state) {
    const std::size_t j = state.drafted;
    const std::size_t max_length = std::min(state.limit, cap_);
    if (j >= max_length) return false;
    if (verify_cost_.size() < max_length + 1) reserve(max_length);  // used without begin()
    const GoodputEstimates estimates = estimates_for(state);
    std::size_t planned = best_draft_length(estimates, max_length);
    if (j == 0 && planned == 0 && plain_streak_ >= probe_wait_) {
      planned = 1;  // probe: is drafting worth it again?
      probing_ = true;
    }
    last_prediction_ = RoundPrediction{expected_round_tokens(estimates, planned),
                                       expected_round_cost(estimates, planned)};
    predicted_ = true;
    return planned > j;
  }

  [[nodiscard]] static constexpr bool reads_token_probabilities() noexcept { return true; }

  void observe(const RoundReport& report) {
    if (report.drafted == 0) {
      ++plain_streak_;
    } else {
      calibration_.observe(report.token_probabilities, report.drafted, report.accepted,
                           options_.forgetting);
      if (probing_) {
        probe_wait_ = std::min(2 * probe_wait_, 16 * options_.probe_interval);
      } else {
        probe_wait_ = options_.probe_interval;
      }
      plain_streak_ = 0;
    }
    probing_ = false;
    predicted_ = false;
    if (!options_.fixed_costs()) {
      measured_.resize(cap_ + 1);
      measured_.observe(report.drafted, report.draft_seconds, report.target_seconds);
      refresh_costs();
    }
  }

  /// \brief The expectation behind this round's last decision, in seconds (none before the
  /// first decision of a round, before costs are measured, or with fixed costs, whose unit is
  /// a target call).
  [[nodiscard]] std::optional<RoundPrediction> prediction() const noexcept {
    if (!predicted_ || options_.fixed_costs() || !measured_.known()) return std::nullopt;
    return last_prediction_;
  }

  /// \brief The estimates the decision for `state` ranks draft lengths with (what
  /// draft_more(state) maximises; valid until the next call).
  [[nodiscard]] GoodputEstimates estimates_for(const DraftState& state) {
    const std::size_t j = state.drafted;
    double survival = 1.0;
    for (std::size_t i = 0; i < j; ++i) {
      const double probability =
          i < state.token_probabilities.size() ? state.token_probabilities[i] : 1.0;
      survival *= calibration_.at(probability);
      survival_[i] = survival;
    }
    return GoodputEstimates{std::span<const double>(survival_.data(), j), calibration_.mean(),
                            draft_token_cost_, verify_cost_};
  }

  [[nodiscard]] const GoodputOptions& options() const noexcept { return options_; }
  /// \brief Consecutive rounds run as plain target steps so far.
  [[nodiscard]] std::size_t plain_streak() const noexcept { return plain_streak_; }

 private:
  void reserve(std::size_t max_length) {
    if (survival_.size() < max_length) survival_.resize(max_length);
    if (verify_cost_.size() < max_length + 1) {
      verify_cost_.resize(max_length + 1);
      refresh_costs();
    }
  }

  void refresh_costs() noexcept {
    if (options_.fixed_costs() || !measured_.known()) {
      // Fixed costs, or (until the first drafting round is timed) unit costs with a cheap
      // draft: t_d = 0.05, 5 % more per verified row.
      const bool fixed = options_.fixed_costs();
      draft_token_cost_ = fixed ? options_.draft_token_cost : 0.05;
      const double row = fixed ? options_.verify_row_cost : 0.05;
      for (std::size_t n = 1; n <= verify_cost_.size(); ++n) {
        verify_cost_[n - 1] = 1.0 + row * static_cast<double>(n - 1);
      }
      return;
    }
    draft_token_cost_ = measured_.draft_token();
    measured_.fill_verify(verify_cost_);
  }

  GoodputOptions options_{};
  std::size_t cap_ = 1;
  detail::AcceptanceCalibration calibration_{};
  detail::MeasuredCosts measured_{};
  std::vector<double> survival_;     // (K) P_1..P_j of the current decision
  std::vector<double> verify_cost_;  // (K + 1) T_v(n) at n - 1
  double draft_token_cost_ = 0.05;
  std::size_t plain_streak_ = 0;
  std::size_t probe_wait_ = 16;
  bool probing_ = false;
  bool predicted_ = false;  // draft_more ran since the last observe
  RoundPrediction last_prediction_{};
};

}  // namespace specdec

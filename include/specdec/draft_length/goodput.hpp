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
/// projects the rest with the acceptance it expects of each further token (from its belief
/// about whether the text is in an easy or a hard stretch): P_{j+k} = P_j a_1 ... a_k. It
/// drafts token j + 1 iff the m in [j, limit] maximising
///
///     G(m) = (1 + sum_{i<=m} P_i) / (m t_d + T_v(m + 1))
///
/// is larger than j (ties: the smaller m). At j = 0 that compares speculation with a plain
/// target step (G(0) = 1 / T_v(1)); when a plain step wins the round drafts nothing, and after
/// probe_interval such rounds one token is drafted anyway to learn whether drafting pays again,
/// unless not even an optimistic acceptance would make it pay (then the rounds are exactly
/// plain decoding). With fixed costs a plan that changes the target's row count is charged the
/// measured switch cost, and one that resumes drafting after plain steps one more draft call
/// (the draft catches up), both spread over a few rounds. With sampled block verification the
/// round's length is planned at its first decision (see whole_rounds_). Whenever timings
/// decide anyway, drafting rounds are also judged by what they delivered: while they emit fewer
/// tokens per second than plain steps, the rounds are plain (GoodputOptions::plain_guard);
/// probes are paid from the guard's ledger and judge nothing.
/// With measured costs, now and then (after 8 drafting rounds, then 16, ... up to every 128th) a
/// round stops at half its planned length, so that T_v is measured below the lengths the policy
/// settles on, not only extrapolated there.
///
/// Exact for any estimates: the decision uses draft-side facts of this round and the outcomes
/// of earlier rounds, never this round's verification. With measured costs the draft lengths
/// depend on timings, so sampled output is not reproducible seed for seed (its distribution is
/// still the target's); fixed costs (GoodputOptions) make it so. Greedy output is the target's
/// argmax path whatever the draft lengths.

#include <algorithm>
#include <array>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <limits>
#include <optional>
#include <span>
#include <vector>

#include "specdec/detail/error.hpp"
#include "specdec/detail/exact_float.hpp"
#include "specdec/detail/goodput_estimators.hpp"
#include "specdec/draft_length/options.hpp"
#include "specdec/generation.hpp"
#include "specdec/proposal.hpp"
#include "specdec/strategies.hpp"

namespace specdec {

/// \brief What the goodput formula needs to rank draft lengths (any time unit).
struct GoodputEstimates {
  /// P_1..P_j: survival probability of the tokens drafted so far (non-increasing, in [0, 1]).
  std::span<const double> survival;
  /// Acceptance probability of each token not drafted yet, in drafting order: [k] is that of
  /// token j + 1 + k given the ones before it (at least max_length - j entries).
  std::span<const double> acceptance;
  double draft_token_cost = 0;          ///< t_d
  std::span<const double> verify_cost;  ///< [n - 1] = T_v(n), n = 1 .. at least max_length + 1
  /// Costs of a round that are neither a draft token nor a target row (0: none):
  double switch_cost = 0;     ///< added when the round's m + 1 rows differ from last_rows
  std::size_t last_rows = 0;  ///< the previous round's target rows (0: none, no switch cost)
  /// added to every drafting round (m > 0) after plain steps: the draft catches up on the
  /// tokens they emitted (its first call computes all of their rows) before drafting
  double resume_cost = 0;
};

/// \brief Expected tokens a round drafting m >= estimates.survival.size() tokens emits.
[[nodiscard]] inline double expected_round_tokens(const GoodputEstimates& estimates,
                                                  std::size_t m) noexcept {
  double tokens = 1.0, last = 1.0;
  for (const double p : estimates.survival) tokens += (last = p);
  const std::size_t j = estimates.survival.size();
  for (std::size_t i = j; i < m; ++i) {
    last *= estimates.acceptance[i - j];
    tokens += last;
  }
  return tokens;
}

/// \brief Expected cost of a round drafting m tokens: m t_d + T_v(m + 1), plus the switch cost
/// when m + 1 differs from the last round's rows and the resume cost when m > 0.
[[nodiscard]] inline double expected_round_cost(const GoodputEstimates& estimates,
                                                std::size_t m) noexcept {
  double cost = static_cast<double>(m) * estimates.draft_token_cost + estimates.verify_cost[m];
  if (estimates.last_rows != 0 && m + 1 != estimates.last_rows) cost += estimates.switch_cost;
  if (m > 0) cost += estimates.resume_cost;
  return cost;
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
    last *= estimates.acceptance[m - 1 - j];
    tokens += last;
    const double rate = tokens / expected_round_cost(estimates, m);
    if (rate > best_rate) {
      best_rate = rate;
      best = m;
    }
  }
  return best;
}

/// \brief The cost model of a round whose sequence is alone in its batch
/// (GoodputDraftLength::price_alone): the batch's curves at one sequence, in their unit.
struct AloneRoundCosts {
  std::span<const double> verify_cost;  ///< [n - 1] = T_v(n), n = 1 .. at least 1
  double draft_token_cost = 0;          ///< t_d: one draft call advancing the sequence
  double switch_cost = 0;   ///< a call of other rows than the last one's (GoodputOptions)
  double plain_growth = 0;  ///< GoodputOptions::plain_growth
  bool guarding = false;    ///< timings judge drafting (GoodputOptions::plain_guard applies)
  /// What a token costs the draft when it catches up on the plain rounds' tokens: a trial of
  /// drafting after plain rounds needs the guard's ledger to afford that (0: not charged)
  double catch_up_cost = 0;
  /// A plain step as plain decoding runs it, a run of one-row calls (the batch plan's settled
  /// plain price, BatchGoodputOptions::plain_step_costs): T_v(1) where lower (0: T_v(1)). The
  /// curve's one-row call is timed among other shapes and runs dearer than a run of them.
  double plain_step_cost = 0;
};

/// \brief The goodput-optimal draft-length policy (see the file comment).
///
/// At every generate() the evidence about the text starts over (the text changes); how the
/// draft's probability maps to acceptance carries over while the sampling parameters stay the
/// same (it describes the model pair), and so do the measured costs (they describe the
/// hardware). Use it through GenerationConfig (DraftLengthKind::goodput) or directly as a
/// StrategyDecoder policy.
class GoodputDraftLength {
 public:
  GoodputDraftLength() = default;
  explicit GoodputDraftLength(const GoodputOptions& options) : options_(options) {
    options_.validate();
  }

  /// \brief Called by the decoder at the start of each generate(): the cap is the usable
  /// draft length (config.draft_length within the budget; a huge K with a small budget sizes
  /// nothing huge); probing and the evidence about the text start over, the calibration by
  /// the draft's probability too if the sampling parameters changed.
  template <class Config>
  void begin(const Config& config) {
    std::size_t cap = config.draft_length;
    if constexpr (requires { config.usable_draft_length(); }) cap = config.usable_draft_length();
    cap_ = std::max<std::size_t>(cap, 1);
    reserve(cap_);
    measured_.resize(cap_ + 1);  // here, not in a round: rounds allocate nothing
    SamplingKey sampling;  // unknown for a config without SamplingParams: nothing carries over
    if constexpr (requires {
                    { config.sampling } -> std::convertible_to<const SamplingParams&>;
                  }) {
      sampling = SamplingKey::of(config.sampling);
    }
    if (options_.keep_calibration && sampling.same_as(last_sampling_)) {
      calibration_.start_generation();
    } else {
      calibration_.reset();
    }
    last_sampling_ = sampling;
    whole_rounds_ = false;
    if constexpr (requires {
                    config.verifier == VerifierKind::block;
                    config.sampling.greedy();
                  }) {
      whole_rounds_ = config.verifier == VerifierKind::block && !config.sampling.greedy();
    }
    plain_streak_ = 0;
    probe_wait_ = options_.probe_interval;
    probe_due_ = probe_wait_;
    failed_probes_ = 0;
    probing_ = false;
    predicted_ = false;
    round_cap_ = cap_;
    first_round_ = true;
    guard_.start_generation();
    guard_.set_plain_growth(options_.plain_growth);
    last_rows_ = 0;  // the first round reads the prompt: a shape of its own
    batch_plan_.reset();
    alone_.reset();
    refresh_costs();
  }

  [[nodiscard]] bool draft_more(const DraftState& state) {
    if (batch_plan_) return follows_batch_plan(state);
    const std::size_t j = state.drafted;
    const std::size_t max_length = std::min({state.limit, cap_, round_cap_});
    if (j >= max_length) return false;
    if (verify_cost_.size() < max_length + 1) reserve(max_length);  // used without begin()
    if (whole_rounds_ && j > 0) return j < round_plan_;             // see whole_rounds_
    const GoodputEstimates estimates = estimates_for(state);
    std::size_t planned = best_draft_length(estimates, max_length);
    if (j == 0 && planned == 0 && plain_streak_ >= probe_due_) {
      if (could_pay(estimates, max_length)) {
        planned = 1;  // probe: is drafting worth it again?
        probing_ = true;
      } else {
        probe_due_ = plain_streak_ + probe_wait_;  // not even an easy stretch pays: look later
      }
    } else if (j == 0 && planned >= 2 && ++rounds_since_exploring_ >= explore_interval_ &&
               !costs_fixed()) {
      // Explore: a round of half the planned length measures T_v where the policy would not
      // otherwise look. Without it, the costs of short rounds are extrapolated from long ones
      // alone, and an optimistic extrapolation is never corrected. Every exploring round gives
      // up part of a round's tokens, so the interval doubles after each (8, 16, ... 128 rounds):
      // the costs describe the hardware and carry over between generate() calls, so they need
      // many samples early and few later.
      rounds_since_exploring_ = 0;
      explore_interval_ = std::min(2 * explore_interval_, kMaxExploreInterval);
      planned = (planned + 1) / 2;
      round_cap_ = planned;
    }
    if (j == 0 && planned > 0 && guarding() &&
        !guard_allows(probing_ ? std::optional(expected_probe_loss(estimates)) : std::nullopt)) {
      planned = 0;
      probing_ = false;
    }
    if (j == 0 && planned > 0 && guarding() && !guard_.has_verdict()) {
      // A cap for the round's later decisions too: draft_more re-plans at every token (and a
      // one-token probe grows into the round the estimates plan then).
      round_cap_ = within_ledger(estimates, max_length);
      planned = std::min(planned, round_cap_);
    }
    if (j == 0) round_plan_ = planned;
    last_prediction_ = RoundPrediction{expected_round_tokens(estimates, planned),
                                       expected_round_cost(estimates, planned)};
    predicted_ = true;
    return planned > j;
  }

  [[nodiscard]] static constexpr bool reads_token_probabilities() noexcept { return true; }

  void observe(const RoundReport& report) {
    calibration_.observe(report.token_probabilities, report.drafted, report.accepted,
                         options_.forgetting);
    last_rows_ = report.drafted + 1;
    if (batch_plan_) {
      // A batch's round: its timings are the batch's calls, which the batch's plan measures
      // (batch/goodput.hpp); here only the acceptance is learnt.
      batch_plan_.reset();
      plain_streak_ = report.drafted == 0 ? plain_streak_ + 1 : 0;
      predicted_ = false;
      first_round_ = false;
      return;
    }
    if (report.drafted == 0) {
      ++plain_streak_;
    } else {
      // Back off only after kProbesBeforeBackoff probes in a row failed to restart drafting:
      // text that turns easy again is noticed within probe_interval rounds (where every plain
      // round it misses costs most of a round's gain), while a draft that stays useless costs
      // a few probes per generate() before the waits double.
      failed_probes_ = probing_ ? failed_probes_ + 1 : 0;
      const std::size_t doublings = std::min<std::size_t>(
          kMaxProbeDoublings,
          failed_probes_ > kProbesBeforeBackoff ? failed_probes_ - kProbesBeforeBackoff : 0);
      probe_wait_ = options_.probe_interval << doublings;
      probe_due_ = probe_wait_;
      plain_streak_ = 0;
    }
    const bool probed = probing_ && report.drafted > 0;
    const double expected_tokens = predicted_ ? last_prediction_.tokens : -1.0;
    probing_ = false;
    predicted_ = false;
    round_cap_ = cap_;
    // The first round's calls also read the prompt (a KV-cached model's prefill): their times
    // say nothing about a round's cost.
    if (guarding() && !first_round_) {
      const double emitted = static_cast<double>(report.accepted + 1);
      const double seconds = std::max(report.draft_seconds, 0.0) + report.target_seconds;
      if (probed) {
        guard_.observe_probe(report.drafted, emitted, seconds, report.context);
      } else {
        guard_.observe(report.drafted, emitted, seconds, report.context, expected_tokens);
      }
    }
    if (alone_) {
      end_alone();  // the batch times its own calls
    } else if (!options_.fixed_costs() && !first_round_) {
      measured_.observe(report.drafted, report.draft_seconds, report.target_seconds);
      refresh_costs();
    } else if (options_.correct_costs && !first_round_ && report.target_seconds > 0) {
      correct_fixed_costs(report);
    }
    first_round_ = false;
  }

  /// \brief The expectation behind this round's last decision, in seconds (none before the
  /// first decision of a round, before costs are measured, or with fixed costs, whose unit is
  /// a target call).
  [[nodiscard]] std::optional<RoundPrediction> prediction() const noexcept {
    if (!predicted_ || costs_fixed() || !measured_.known()) return std::nullopt;
    return last_prediction_;
  }

  /// \brief The estimates the decision for `state` ranks draft lengths with (what
  /// draft_more(state) maximises; valid until the next call).
  [[nodiscard]] GoodputEstimates estimates_for(const DraftState& state) {
    const std::size_t j = state.drafted;
    reserve(std::max(j, std::min(state.limit, cap_)));  // no-op once begin() has sized them
    double survival = 1.0;
    double belief = calibration_.belief();
    for (std::size_t i = 0; i < j; ++i) {
      const double probability =
          i < state.token_probabilities.size() ? state.token_probabilities[i] : 1.0;
      survival *= calibration_.at(probability, belief);
      survival_[i] = survival;
      belief = calibration_.after_verdict(belief, true);  // token i + 1 is judged only then
    }
    const std::size_t rest = std::min(state.limit, cap_) > j ? std::min(state.limit, cap_) - j : 0;
    for (std::size_t k = 0; k < rest; ++k) {
      acceptance_[k] = calibration_.at_belief(belief);
      belief = calibration_.after_verdict(belief, true);
    }
    GoodputEstimates estimates;
    estimates.survival = std::span<const double>(survival_.data(), j);
    estimates.acceptance = std::span<const double>(acceptance_.data(), rest);
    estimates.draft_token_cost = draft_token_cost_;
    estimates.verify_cost = verify_cost_;
    // One-off costs of changing plans, spread over the kAmortizedRounds rounds a plan usually
    // lasts (the acceptance estimates move slowly): charged in full, a plan that pays in the
    // steady state by less than the switch was never taken from plain decoding (0.998 of plain
    // where K = 3 ran at 1.025, in the replay of the shipped pair's Q4_0 curve); not charged,
    // the policy flips between plans near break-even and pays them every time.
    const double amortized = 1.0 / static_cast<double>(kAmortizedRounds);
    estimates.switch_cost = alone_                   ? alone_->switch_cost * amortized
                            : options_.fixed_costs() ? options_.switch_cost * amortized
                                                     : 0.0;
    estimates.last_rows = last_rows_;
    // After plain steps the draft's first call computes the rows of every token they emitted
    // (and, on llama.cpp, a new graph for that shape): at least one more draft call, charged to
    // the decision that starts drafting again. (Online, it lands in the measured draft seconds.)
    estimates.resume_cost = j == 0 && plain_streak_ > 0 ? draft_token_cost_ * amortized : 0.0;
    return estimates;
  }

  /// \name Draft lengths planned for a batch
  /// BatchedDecoder plans every sequence's draft length at once, against the cost of the
  /// batch's shared calls (batch/goodput.hpp): the policy supplies what it expects of the
  /// sequence's next tokens, then follows the plan for one round. Its own costs, guard and
  /// probes are not used in such rounds (the batch's plan measures and probes); its acceptance
  /// calibration learns from them as from any round.
  /// \{

  /// \brief The acceptance expected of each of the next round's first `limit` tokens, given
  /// the ones before it (as estimates_for at no token drafted; valid until the next call).
  [[nodiscard]] std::span<const double> expected_acceptance(std::size_t limit) {
    return estimates_for(DraftState{0, limit, {}}).acceptance;
  }
  /// \brief What a probe wagers on: an optimistic acceptance from the recent verdicts.
  [[nodiscard]] double optimistic_acceptance() const noexcept { return calibration_.optimistic(); }
  /// \brief The next round drafts up to `planned` tokens, and stops before token j + 1 (j >= 1)
  /// when the survival the drafted tokens' probabilities give it falls below `threshold` (the
  /// plan's marginal survival: the row is no longer worth its cost). With sampled block
  /// verification the plan is drafted whole (see whole_rounds_).
  void follow_batch_plan(std::size_t planned, double threshold) noexcept {
    batch_plan_ = BatchPlan{planned, threshold};
    if (alone_) end_alone();  // a round priced alone that was never observed (it failed)
  }
  /// \brief The next round's sequence is alone in its batch: nothing is shared, so the batch's
  /// optimisation is this policy's own, which it solves better than a plan fixed before
  /// drafting (draft_more re-plans at every drafted token). The round is drafted as under a
  /// decoder of its own (probes, plain guard, no exploring rounds), priced with `costs` in
  /// place of the policy's own: one cost model for the batch's sequences whether they share
  /// calls or not. For one round (observe() ends it).
  void price_alone(const AloneRoundCosts& costs) {
    batch_plan_.reset();
    reserve(cap_);
    alone_ = AloneSettings{costs.switch_cost, costs.guarding, costs.catch_up_cost};
    const std::size_t known = costs.verify_cost.size();
    for (std::size_t n = 1; n <= verify_cost_.size(); ++n) {
      verify_cost_[n - 1] = known == 0 ? 1.0 : costs.verify_cost[std::min(n, known) - 1];
    }
    if (costs.plain_step_cost > 0 && !verify_cost_.empty()) {
      verify_cost_[0] = std::min(verify_cost_[0], costs.plain_step_cost);
    }
    draft_token_cost_ = costs.draft_token_cost;
    guard_.set_plain_growth(costs.plain_growth);
  }
  /// \}

  [[nodiscard]] const GoodputOptions& options() const noexcept { return options_; }
  /// \brief Consecutive rounds run as plain target steps so far.
  [[nodiscard]] std::size_t plain_streak() const noexcept { return plain_streak_; }

 private:
  /// The sampling parameters the calibration by probability was learnt under. A logits
  /// processor (a repetition penalty, a grammar) may change the distributions from call to
  /// call, so with one nothing carries over.
  struct SamplingKey {
    bool known = false, processed = false;
    float temperature = 0, top_p = 0, min_p = 0;
    int top_k = 0;
    static SamplingKey of(const SamplingParams& sampling) {
      return {true,
              static_cast<bool>(sampling.logits_processor),
              sampling.temperature,
              sampling.top_p,
              sampling.min_p,
              sampling.top_k};
    }
    [[nodiscard]] bool same_as(const SamplingKey& other) const noexcept {
      return known && other.known && !processed && !other.processed &&
             detail::exactly_equal(temperature, other.temperature) &&
             detail::exactly_equal(top_p, other.top_p) &&
             detail::exactly_equal(min_p, other.min_p) && top_k == other.top_k;
    }
  };

  /// Whether drafting could pay at an optimistic acceptance (AcceptanceCalibration::optimistic:
  /// one standard error above the recent verdicts' rate): the best plan with every token
  /// accepted at that rate beats a plain step. A probe is a wager that it does; when even that
  /// loses (a draft whose acceptance collapsed, as with Q4_0 weights, or a
  /// target whose extra rows cost as much as whole calls, as on llama.cpp's quantized CPU path)
  /// every probe is a loss, and plain decoding is what the caller should get: no draft call,
  /// no extra row. (Measured on the shipped pair with Q8_0 weights: one probe per 11 plain
  /// rounds, each paying a draft catch-up and two graph rebuilds, cost 8-16 % of plain speed.)
  [[nodiscard]] bool could_pay(const GoodputEstimates& estimates, std::size_t max_length) {
    std::fill_n(optimistic_.begin(), max_length, calibration_.optimistic());
    GoodputEstimates optimistic = estimates;
    optimistic.acceptance = std::span<const double>(optimistic_.data(), max_length);
    return best_draft_length(optimistic, max_length) > 0;
  }

  /// draft_more in a round a batch planned (follow_batch_plan).
  [[nodiscard]] bool follows_batch_plan(const DraftState& state) {
    const std::size_t j = state.drafted;
    if (j >= std::min(state.limit, batch_plan_->length)) return false;
    if (j == 0 || whole_rounds_) return true;
    const GoodputEstimates estimates = estimates_for(state);
    const double next = estimates.acceptance.empty() ? 0.0 : estimates.acceptance[0];
    return estimates.survival[j - 1] * next >= batch_plan_->threshold;
  }

  /// After a round priced alone: the policy's own costs again.
  void end_alone() noexcept {
    alone_.reset();
    guard_.set_plain_growth(options_.plain_growth);
    refresh_costs();
  }

  /// Whether this round's costs are fixed curves (the options', or a batch's: price_alone).
  [[nodiscard]] bool costs_fixed() const noexcept { return alone_ || options_.fixed_costs(); }

  /// GoodputOptions::plain_guard, when timings decide anyway (price_alone: the batch's say).
  [[nodiscard]] bool guarding() const noexcept {
    if (alone_) return alone_->guarding;
    return options_.plain_guard &&
           (!options_.fixed_costs() || options_.measured_costs || options_.correct_costs);
  }

  /// Whether a round planned to draft may: not while no plain step has been timed (after the
  /// first round), nor while drafting loses to plain steps, except for a trial of the model's
  /// plan (not a probe) after the guard's trial_wait() plain rounds that its ledger affords.
  /// `probe_loss`: the round is a probe expected to lose that many plain steps.
  [[nodiscard]] bool guard_allows(std::optional<double> probe_loss) noexcept {
    const bool probe = probe_loss.has_value();
    // The first round reads the prompt and is not judged: it drafts as the model says (its
    // extra rows ride on the prompt's call); the plain step is timed right after it.
    if (guard_.needs_plain_steps()) return first_round_;
    // A probe gives no verdict (DraftingGuard::observe_probe): the ledger pays for it, so what
    // probes lose in a generation stays within the ledger's allowance.
    if (probe && !guard_.affords_trial(*probe_loss)) return false;
    if (!guard_.drafting_loses()) return true;
    if (probe) return false;  // a probe is no trial: the model expects it to lose
    if (plain_streak_ < guard_.trial_wait() || !guard_.affords_trial(trial_catch_up_units())) {
      return false;
    }
    return true;
  }

  /// Before the guard's first verdict, the longest round up to `longest` whose worst case
  /// (one token emitted for the whole round's cost) loses no more plain steps than
  /// DraftingGuard::cold_allowance (the 3 that stop drafting at once, plus what the ledger has
  /// left), as the batch plan bounds its cold probes by its ledger; one token at least, so that
  /// a verdict comes. (The ledger alone cut plans that pay: in the replayed cold starts of
  /// goodput_costs_test.cpp, a Q8_0 curve's dip at 8 rows ran at 1.17 tokens per unit against
  /// 1.20.) The first rounds are the policy's bets on an acceptance it has barely seen: on the
  /// shipped pair's Q8_0 weights through llama.cpp, a sequence alone in its batch drafted 3
  /// tokens twice, all accepted, then 9, of which none was: 4.1 ms for one token against a
  /// 0.49 ms plain step, most of the 3.6 % by which that generation fell behind plain decoding.
  [[nodiscard]] std::size_t within_ledger(const GoodputEstimates& estimates,
                                          std::size_t longest) const noexcept {
    const double plain = estimates.verify_cost[0];
    if (!(plain > 0)) return longest;
    const double allowance = guard_.cold_allowance();
    while (longest > 1 && expected_round_cost(estimates, longest) / plain - 1 > allowance) {
      --longest;
    }
    return longest;
  }

  /// What a one-token probe is expected to lose, in plain steps: its cost over a plain step's
  /// less the tokens the model expects it to emit.
  [[nodiscard]] static double expected_probe_loss(const GoodputEstimates& estimates) noexcept {
    const double plain = estimates.verify_cost[0];
    if (!(plain > 0)) return 0.0;
    return expected_round_cost(estimates, 1) / plain - expected_round_tokens(estimates, 1);
  }

  /// What the draft's catch-up on the plain rounds' tokens costs a trial, in plain steps
  /// (priced alone: AloneRoundCosts::catch_up_cost per token; otherwise not charged). The
  /// ledger must afford it before the trial, as the batch plan's must (batch/goodput.hpp:
  /// on the shipped pair's Q8_0 weights through llama.cpp, a sequence alone in its batch ran
  /// trials after 8, 16 and 32 plain rounds, the last with 1.8 ms of catch-up against a
  /// 0.55 ms plain step, and ended each 200-token batch with the ledger spent).
  [[nodiscard]] double trial_catch_up_units() const noexcept {
    if (!alone_ || !(alone_->catch_up_cost > 0) || verify_cost_.empty() || !(verify_cost_[0] > 0)) {
      return 0.0;
    }
    return static_cast<double>(plain_streak_) * alone_->catch_up_cost / verify_cost_[0];
  }

  void reserve(std::size_t max_length) {
    if (survival_.size() < max_length) survival_.resize(max_length);
    if (acceptance_.size() < max_length) acceptance_.resize(max_length);
    if (optimistic_.size() < max_length) optimistic_.resize(max_length);
    if (verify_cost_.size() < max_length + 1) {
      verify_cost_.resize(max_length + 1);
      refresh_costs();
    }
  }

  /// GoodputOptions::correct_costs: seconds per unit of predicted cost, of plain rounds and of
  /// drafting rounds (moving averages that one preempted call moves by at most 10 %).
  void correct_fixed_costs(const RoundReport& report) noexcept {
    using Costs = detail::MeasuredCosts;
    if (report.drafted == 0) {
      const double per_unit = report.target_seconds / options_.fixed_verify_cost(1);
      plain_per_unit_ = Costs::smoothed(plain_per_unit_, per_unit, plain_samples_);
      plain_samples_ = std::min(plain_samples_ + 1.0, kMaxCorrectionSamples);
      // The correction holds while the policy runs plain (taken again below from both
      // averages). A fading once meant to retry drafting never acted, being taken again
      // right after; made to act in the batch plan, it cost the floor (docs/llama_cpp.md).
    } else {
      const double predicted = options_.fixed_verify_cost(report.drafted + 1) +
                               options_.draft_token_cost * static_cast<double>(report.drafted);
      const double per_unit =
          (report.target_seconds + std::max(report.draft_seconds, 0.0)) / predicted;
      drafting_per_unit_ = Costs::smoothed(drafting_per_unit_, per_unit, drafting_samples_);
      drafting_samples_ = std::min(drafting_samples_ + 1.0, kMaxCorrectionSamples);
    }
    if (plain_samples_ >= kCorrectionSamples && drafting_samples_ >= kCorrectionSamples &&
        plain_per_unit_ > 0) {
      correction_ = std::clamp(drafting_per_unit_ / plain_per_unit_, 1.0, 2.0);
      refresh_costs();
    }
  }

  void refresh_costs() noexcept {
    if (options_.fixed_costs() || !measured_.known()) {
      // Fixed costs (times the correction, 1 unless correct_costs found drafting dearer), or
      // (until the first drafting round is timed) unit costs with a cheap draft: t_d = 0.05,
      // 5 % more per verified row.
      const bool fixed = options_.fixed_costs();
      draft_token_cost_ = fixed ? options_.draft_token_cost * correction_ : 0.05;
      for (std::size_t n = 1; n <= verify_cost_.size(); ++n) {
        verify_cost_[n - 1] = fixed ? options_.fixed_verify_cost(n) * (n == 1 ? 1.0 : correction_)
                                    : 1.0 + 0.05 * static_cast<double>(n - 1);
      }
      return;
    }
    draft_token_cost_ = measured_.draft_token();
    measured_.fill_verify(verify_cost_);
  }

  GoodputOptions options_{};
  std::size_t cap_ = 1;
  detail::AcceptanceCalibration calibration_{};
  SamplingKey last_sampling_{};
  detail::MeasuredCosts measured_{};
  std::vector<double> survival_;     // (K) P_1..P_j of the current decision
  std::vector<double> acceptance_;   // (K) acceptance of the tokens not drafted yet
  std::vector<double> optimistic_;   // (K) could_pay()'s acceptance
  std::vector<double> verify_cost_;  // (K + 1) T_v(n) at n - 1
  double draft_token_cost_ = 0.05;
  std::size_t plain_streak_ = 0;
  std::size_t probe_wait_ = options_.probe_interval;  // reset by begin() too
  std::size_t probe_due_ = options_.probe_interval;   // plain_streak_ at which to probe
  bool probing_ = false;
  bool predicted_ = false;     // draft_more ran since the last observe
  bool first_round_ = true;    // the next observe() is of a generate()'s first round
  std::size_t last_rows_ = 0;  // the previous round's target rows (0: none this generation)
  // correct_costs: carried over between generate() calls (they describe the hardware)
  static constexpr double kCorrectionSamples = 4, kMaxCorrectionSamples = 16;
  double plain_per_unit_ = 0, plain_samples_ = 0;
  double drafting_per_unit_ = 0, drafting_samples_ = 0;
  double correction_ = 1;
  /// Sampled block verification: the round's length is planned before its first token and
  /// not cut short by the probabilities of the tokens drafted. Block verification accepts a
  /// prefix by the likelihood ratios of all its tokens together (a token the draft was unsure
  /// of is kept when the tokens after it are ones the target likes more than the draft did),
  /// so the survival product token by token that stops a round after an unsure token rates the
  /// rest of the block too low. (Example GPT, T = 1, 6 prompts: goodput stopping per token ran
  /// at 0.79 of the fixed K = 8 block chain, with a fifth of its rounds under 5 tokens.)
  bool whole_rounds_ = false;
  std::size_t round_plan_ = 0;  // the length planned at this round's first decision
  static constexpr std::size_t kFirstExploreInterval = 8, kMaxExploreInterval = 128;
  static constexpr std::size_t kAmortizedRounds = 4;
  std::size_t explore_interval_ = kFirstExploreInterval;
  static constexpr std::size_t kProbesBeforeBackoff = 4, kMaxProbeDoublings = 4;
  std::size_t failed_probes_ = 0;  // probes since drafting last resumed
  std::size_t rounds_since_exploring_ = 0;
  std::size_t round_cap_ = std::numeric_limits<std::size_t>::max();  // this round's cap: cap_, or
                                                                     // less in an exploring round
  RoundPrediction last_prediction_{};
  struct BatchPlan {
    std::size_t length = 0;
    double threshold = 0;
  };
  std::optional<BatchPlan> batch_plan_;  // this round's, set by follow_batch_plan
  struct AloneSettings {
    double switch_cost = 0;
    bool guarding = false;
    double catch_up_cost = 0;
  };
  std::optional<AloneSettings> alone_;  // this round's, set by price_alone
  // plain_guard: carried over between generate() calls (it describes the pair on this host)
  detail::DraftingGuard guard_{};
};

}  // namespace specdec

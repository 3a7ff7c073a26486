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
/// probe_interval such rounds one token is drafted anyway to learn whether drafting pays again.
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
#include "specdec/proposal.hpp"
#include "specdec/strategies.hpp"

namespace specdec {

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
  /// useless draft (docs/benchmarks.md).
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
  /// Keep the calibration by the draft's probability from one generate() to the next while
  /// the sampling parameters stay the same (it describes the model pair, not the text). With
  /// fixed costs the same seed then gives the same tokens for the same sequence of generate()
  /// calls on a decoder; false makes every call a function of its own arguments.
  bool keep_calibration = true;

  /// Field by field, exactly (not `= default`, which would compare the doubles with == and make
  /// users' -Wfloat-equal builds warn).
  [[nodiscard]] bool operator==(const GoodputOptions& other) const noexcept {
    return detail::exactly_equal(forgetting, other.forgetting) &&
           probe_interval == other.probe_interval &&
           detail::exactly_equal(draft_token_cost, other.draft_token_cost) &&
           detail::exactly_equal(verify_row_cost, other.verify_row_cost) &&
           std::ranges::equal(verify_costs, other.verify_costs, detail::exactly_equal<double>) &&
           keep_calibration == other.keep_calibration;
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
    const double step = size >= 2 ? std::max(0.0, verify_costs[size - 1] - verify_costs[size - 2])
                                  : 0.0;
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
    if (!verify_costs.empty()) {
      if (!(draft_token_cost >= 0) || std::isinf(draft_token_cost) || verify_row_cost >= 0) {
        detail::throw_invalid_argument(
            "goodput verify_costs given (", verify_costs.size(), " row counts) with "
            "draft_token_cost = ", draft_token_cost, ", verify_row_cost = ", verify_row_cost,
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
  /// Acceptance probability of each token not drafted yet, in drafting order: [k] is that of
  /// token j + 1 + k given the ones before it (at least max_length - j entries).
  std::span<const double> acceptance;
  double draft_token_cost = 0;  ///< t_d
  std::span<const double> verify_cost;  ///< [n - 1] = T_v(n), n = 1 .. at least max_length + 1
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

namespace detail {

/// Acceptance learned from rounds:
///  - by the state of the text, through a two-regime filter: the text is taken to be easy or
///    hard for the draft at each position (boilerplate and quotations against novel content),
///    to stay so from one position to the next except with probability kHazard, and each regime
///    to have its own acceptance rate. The filter keeps the belief b that the next judged token
///    is in the easy regime (Bayes' rule on every verdict, then the chance of a change; a plain
///    step, with no verdict, only moves b towards the share of easy positions seen so far, so a
///    hard stretch is believed over after a while without drafting). The two rates and that
///    share are learnt from the verdicts each regime is held responsible for (the posterior),
///    decayed with `forgetting`. Within a round every token after the first follows an
///    acceptance, so b rises along it. With stationary acceptance both regimes learn about the
///    same rate and b matters little;
///  - by the draft's probability of the token (twelve bins, log-scaled: see bin()). These
///    counts do not decay, and they carry over from one generation to the next (capped, see
///    start_generation()): how the draft's probability maps to acceptance belongs to the model
///    pair and the sampling parameters, not to the stretch of text.
/// A drafted token's acceptance combines the two through two estimators, weighted by how well
/// each has predicted the verdicts so far (see at()). Every rate is shrunk towards a prior (a
/// bin with little evidence borrows the pair's mean, the mean 1/2, the regimes 0.8 and 0.2),
/// so nothing is extreme on little evidence.
class AcceptanceCalibration {
 public:
  static constexpr std::size_t kBins = 12, kEstimators = 2;

  /// Forgets everything (a new model pair or new sampling parameters).
  void reset() noexcept { *this = AcceptanceCalibration{}; }

  /// A new generation with the same pair and sampling parameters: the evidence about the text
  /// (the regimes, the belief) starts over; the pair's (the bins, their mean, the estimators'
  /// weights) is kept, each bin scaled down to at most kCarriedJudged tokens so that it keeps
  /// adapting. (On the synthetic workloads, 256 tokens per generate(), relearning the bins
  /// every time cost up to 2 % of the speed; docs/benchmarks.md.)
  void start_generation() noexcept {
    const auto bins = bins_;
    const Counts pair = pair_;
    const auto weights = weights_;
    reset();
    bins_ = bins;
    pair_ = pair;
    weights_ = weights;
    for (Counts& counts : bins_) counts.cap(kCarriedJudged);
    pair_.cap(kCarriedJudged * static_cast<double>(kBins));
  }

  /// One round: tokens [0, accepted) accepted, token `accepted` (if drafted) rejected.
  void observe(std::span<const double> probabilities, std::size_t drafted, std::size_t accepted,
               double forgetting) noexcept {
    if (drafted == 0) {  // a plain step: a position passes without a verdict
      belief_ = drift(belief_);
      return;
    }
    // Only the evidence about the text forgets; how the draft's probability maps to acceptance
    // is a property of the model pair, learned over the whole generation. (Decayed like the
    // rest, the bin of unsure tokens forgot everything during each easy stretch, and the first
    // unsure tokens of the next hard one borrowed the easy mean and were drafted on.)
    easy_.decay(forgetting);
    hard_.decay(forgetting);
    easy_share_.decay(forgetting);
    const std::size_t judged = std::min(drafted, accepted + 1);
    for (std::size_t i = 0; i < judged; ++i) {
      const bool success = i < accepted;
      const double probability = i < probabilities.size() ? probabilities[i] : 1.0;
      weigh_estimators(estimators(probability, belief_), success);  // before the counts learn it
      bins_[bin(probability)].add(success);
      pair_.add(success);
      const double easy = posterior(belief_, success);  // responsibility of the easy regime
      easy_.add(success, easy);
      hard_.add(success, 1.0 - easy);
      easy_share_.add(true, easy);  // one position: easy with probability `easy`
      easy_share_.add(false, 1.0 - easy);
      belief_ = drift(easy);
    }
    belief_ = drift(belief_);  // the position of the round's correction or bonus token
  }

  /// The belief b the next round starts from: the probability that its first token is judged
  /// in the easy regime.
  [[nodiscard]] double belief() const noexcept { return belief_; }
  /// b for the next token after a verdict on this one.
  [[nodiscard]] double after_verdict(double belief, bool accepted) const noexcept {
    return drift(posterior(belief, accepted));
  }

  /// Acceptance of a token not drafted yet, at belief b: the regimes' rates mixed by b.
  [[nodiscard]] double at_belief(double belief) const noexcept {
    return belief * easy_rate() + (1.0 - belief) * hard_rate();
  }
  /// Acceptance of a drafted token the draft gave `probability`, at belief b: the estimators'
  /// predictions weighted by their record. The product (the rate at b times the bin's factor
  /// over the mean) is right when the two say different things, and is the rate at b where
  /// the probability says nothing (a draft confidently wrong), but it counts twice what they
  /// both say: when the draft's probability itself tracks the text's difficulty (a draft unsure
  /// exactly where it will be rejected), b is low at the start of each easy stretch, and the
  /// product then rated tokens the draft was sure of at a fraction of their acceptance. The
  /// bin's rate alone is right there; the weights find out which, from the verdicts. (A third
  /// estimator, the rate at b alone, measured no better on the synthetic workloads and, where
  /// the position in the round predicts the verdicts as well as the probability does, rated
  /// tokens the draft was unsure of as likely as any.)
  [[nodiscard]] double at(double probability, double belief) const noexcept {
    const std::array<double, kEstimators> predictions = estimators(probability, belief);
    double acceptance = 0;
    for (std::size_t e = 0; e < kEstimators; ++e) acceptance += weights_[e] * predictions[e];
    return acceptance;
  }

 private:
  static constexpr double kPriorMean = 0.5, kPriorWeight = 1.0, kShrinkage = 2.0;
  /// The regimes' prior rates, and the chance that the text changes regime from one position
  /// to the next: stretches of a few dozen tokens. (On the synthetic workloads of changing
  /// difficulty every hazard from 1/64 to 1/16 measured within 1-2 % of 1/32, and the prior
  /// rates 0.9 / 0.1 and 0.7 / 0.3 within 1 % of these; docs/benchmarks.md.)
  static constexpr double kEasyPrior = 0.8, kHardPrior = 0.2, kHazard = 1.0 / 32;
  static constexpr double kCarriedJudged = 64;
  /// Estimator weights: a prediction counts as at least kLikelihoodFloor likely (one surprise
  /// does not zero a weight), and after each verdict kShare of the weight is spread evenly
  /// (fixed share), so a weight that fell can recover when the text changes character.
  static constexpr double kLikelihoodFloor = 0.02, kShare = 0.01;
  static constexpr std::array<double, kEstimators> kPriorWeights{0.75, 0.25};

  struct Counts {
    double accepted = 0, judged = 0;
    void decay(double forgetting) noexcept {
      accepted *= forgetting;
      judged *= forgetting;
    }
    void add(bool success, double weight = 1.0) noexcept {
      accepted += success ? weight : 0.0;
      judged += weight;
    }
    [[nodiscard]] double rate(double prior, double weight) const noexcept {
      return (accepted + prior * weight) / (judged + weight);
    }
    void cap(double max_judged) noexcept {
      if (judged > max_judged) decay(max_judged / judged);
    }
  };

  [[nodiscard]] double easy_rate() const noexcept { return easy_.rate(kEasyPrior, kShrinkage); }
  [[nodiscard]] double hard_rate() const noexcept { return hard_.rate(kHardPrior, kShrinkage); }

  /// b after a verdict (before the chance of a change).
  [[nodiscard]] double posterior(double belief, bool accepted) const noexcept {
    const double easy = accepted ? easy_rate() : 1.0 - easy_rate();
    const double hard = accepted ? hard_rate() : 1.0 - hard_rate();
    const double evidence = belief * easy + (1.0 - belief) * hard;
    return evidence > 0 ? belief * easy / evidence : belief;
  }
  /// b one position later: with probability 2 kHazard the regime is drawn afresh, easy with
  /// the share of easy positions seen (so with a useless draft, whose "easy" positions are
  /// rare, plain steps do not talk the policy into drafting again; the probes do that).
  [[nodiscard]] double drift(double belief) const noexcept {
    const double easy_share = easy_share_.rate(kPriorMean, kShrinkage);
    return (1.0 - 2.0 * kHazard) * belief + 2.0 * kHazard * easy_share;
  }

  /// Predictions for a drafted token: the product of the rate at b and the bin's factor; the
  /// bin's rate.
  [[nodiscard]] std::array<double, kEstimators> estimators(double probability,
                                                           double belief) const noexcept {
    const double pair_mean = pair_.rate(kPriorMean, kPriorWeight);
    const double by_probability = bins_[bin(probability)].rate(pair_mean, kShrinkage);
    return {std::clamp(at_belief(belief) * by_probability / pair_mean, 0.0, 1.0), by_probability};
  }

  /// Bayes' rule on the estimators (each weight times the likelihood it gave the verdict),
  /// then the fixed share.
  void weigh_estimators(const std::array<double, kEstimators>& predictions, bool success) noexcept {
    double total = 0;
    for (std::size_t e = 0; e < kEstimators; ++e) {
      const double p = std::clamp(predictions[e], kLikelihoodFloor, 1.0 - kLikelihoodFloor);
      weights_[e] *= success ? p : 1.0 - p;
      total += weights_[e];
    }
    for (double& weight : weights_) {
      weight = (1.0 - kShare) * weight / total + kShare / static_cast<double>(kEstimators);
    }
  }

  /// Bins on a log scale at both ends: below 1/2 by powers of two of the probability ([1/4, 1/2)
  /// is bin 7, [1/256, 1/128) bin 1, everything under 1/256 bin 0), from 1/2 up by powers of
  /// two of 1 - probability ([1/2, 3/4) bin 8, ..., [15/16, 1] bin 11). A draft unsure of its
  /// token gives it about 1/V or a few times that, and one sure of it 0.9-0.99: equal-width bins
  /// put every probability under 0.1 in one bin, where the unsure tokens mixed with ordinary
  /// ones (measured on the synthetic "draft knows" workload: 1.50x / 1.29x over plain decoding
  /// with ten equal bins, 1.53x / 1.32x with these, in runs of the goodput cells alone;
  /// docs/benchmarks.md).
  static std::size_t bin(double probability) noexcept {
    if (!(probability > 0.0)) return 0;
    if (probability < 0.5) {
      return static_cast<std::size_t>(std::clamp(std::floor(std::log2(probability)) + 9, 0.0, 7.0));
    }
    const double tail = std::floor(-std::log2(std::max(1.0 - probability, 0.0))) - 1;  // >= 0
    return 8 + static_cast<std::size_t>(std::clamp(tail, 0.0, 3.0));
  }

  std::array<Counts, kBins> bins_{};
  Counts pair_{};  // not decayed, like bins_: the pair's overall rate
  Counts easy_{}, hard_{};  // verdicts by the regime held responsible (decayed)
  Counts easy_share_{};     // "accepted" = positions held easy (decayed)
  double belief_ = kPriorMean;
  std::array<double, kEstimators> weights_ = kPriorWeights;
};

/// Draft and verification costs, measured from round timings: t_d as a moving average of
/// draft seconds per token; T_v(n) per row count n as a moving average of target-call seconds,
/// read where it has been seen a few times (trusted), and elsewhere extrapolated from the row
/// counts below it: the weighted least-squares line through their averages, capped by the
/// nearest trusted count above (a call never costs less for fewer rows). With fewer than two
/// counts below, the line through all averages (one point: a slope of kPriorRowCost per row,
/// none: unit costs).
///
/// Why from below: a CPU target's cost curve has steps (a 7-row call costing 1.5 times a 6-row
/// one, where the rows outgrow a register tile). A line through every count then rated the
/// counts just below the step by the ones above it (T_v(6) read 1.44 one-row calls for a true
/// 1.20 in a simulation with exact timings), the policy never drafted there, so never measured
/// them, and settled a row short of the best static K (0.92 of its speedup). Extrapolated from
/// below, an untried count is assumed to continue the trend until measured: a few rounds there
/// either confirm it or make it trusted at its real cost.
class MeasuredCosts {
 public:
  void resize(std::size_t max_rows) {
    if (mean_.size() < max_rows + 1) {
      mean_.resize(max_rows + 1, 0.0);
      weight_.resize(max_rows + 1, 0.0);
      first_.resize((max_rows + 1) * kFirstSamples, 0.0);
    }
  }

  void observe(std::size_t drafted, double draft_seconds, double target_seconds) noexcept {
    if (drafted > 0 && draft_seconds >= 0) {
      const double per_token = draft_seconds / static_cast<double>(drafted);
      draft_token_ = smoothed(draft_token_, per_token, draft_samples_);
      draft_samples_ = std::min(draft_samples_ + 1.0, kMaxWeight);
    }
    const std::size_t rows = drafted + 1;
    if (rows >= mean_.size() || !(target_seconds > 0)) return;
    const double seen = weight_[rows];
    if (seen < static_cast<double>(kFirstSamples)) {
      double* first = first_.data() + rows * kFirstSamples;
      const auto count = static_cast<std::size_t>(seen);
      first[count] = target_seconds;
      mean_[rows] = robust_start(first, count + 1);
    } else {
      mean_[rows] = smoothed(mean_[rows], target_seconds, kWarmupSamples);
    }
    weight_[rows] = std::min(seen + 1.0, kMaxWeight);
  }

  [[nodiscard]] bool known() const noexcept { return draft_samples_ > 0; }

  /// A row count's cost from its first samples: the first, the lower of two, the median of
  /// three. On a shared machine a call now and then takes a scheduler slice longer (the delay
  /// only ever adds); averaged in, one such call among the first three made a row count look
  /// expensive once it was trusted, and the policy then never drafted there again to correct
  /// it (in a simulation with 5 % of calls delayed, the count just below a cost step was
  /// trusted at 1.5 times its cost, and the policy settled a row short of the best static K).
  static double robust_start(const double* samples, std::size_t count) noexcept {
    if (count == 1) return samples[0];
    if (count == 2) return std::min(samples[0], samples[1]);
    return std::max(std::min(samples[0], samples[1]),
                    std::min(std::max(samples[0], samples[1]), samples[2]));
  }

  /// The running mean of the first few samples, then a moving average that a single outlier
  /// moves by at most 10 %: on a shared machine a call preempted for a scheduler slice takes
  /// several times its cost, which says nothing about the next call. (Clipping from the first
  /// sample on would let one slow first call, e.g. a cold cache, hold the estimate for dozens
  /// of rounds.)
  static double smoothed(double average, double sample, double samples) noexcept {
    if (samples < kWarmupSamples) return (average * samples + sample) / (samples + 1);
    const double clipped = std::clamp(sample, 0.5 * average, 2.0 * average);
    return kSmoothing * average + (1 - kSmoothing) * clipped;
  }
  [[nodiscard]] double draft_token() const noexcept { return draft_token_; }

  /// Fills table[n - 1] = T_v(n), n = 1 .. table.size(). O(table.size()): one forward pass
  /// (the line through the counts below each n, from running sums), one backward (the caps).
  void fill_verify(std::span<double> table) const noexcept {
    LineFit all;
    for (std::size_t n = 1; n < mean_.size(); ++n) {
      if (weight_[n] > 0) all.add(weight_[n], static_cast<double>(n - 1), mean_[n]);
    }
    const Line global = all.line();
    LineFit below;
    for (std::size_t n = 1; n <= table.size(); ++n) {
      const bool measured = n < mean_.size() && weight_[n] > 0;
      const auto x = static_cast<double>(n - 1);
      if (trusted(n)) {
        table[n - 1] = mean_[n];
      } else {
        const Line line = below.points >= 2 ? below.line() : global;
        table[n - 1] = line.intercept + line.slope * x;
      }
      if (measured) below.add(weight_[n], x, mean_[n]);
    }
    double cap = std::numeric_limits<double>::infinity();
    for (std::size_t n = table.size(); n >= 1; --n) {
      if (trusted(n)) {
        cap = std::min(cap, mean_[n]);
      } else {
        table[n - 1] = std::min(table[n - 1], cap);
      }
    }
  }

 private:
  struct Line {
    double intercept = 1.0, slope = kPriorRowCost;
  };
  /// Running weighted least-squares sums of (x, y) points; line() as the comment above says.
  struct LineFit {
    double sw = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
    std::size_t points = 0;
    void add(double w, double x, double y) noexcept {
      sw += w;
      sx += w * x;
      sy += w * y;
      sxx += w * x * x;
      sxy += w * x * y;
      ++points;
    }
    [[nodiscard]] Line line() const noexcept {
      Line line;
      if (points >= 2 && sw * sxx - sx * sx > 0) {
        line.slope = std::max(0.0, (sw * sxy - sx * sy) / (sw * sxx - sx * sx));
        line.intercept = (sy - line.slope * sx) / sw;
        if (!(line.intercept > 0)) {  // a line through the origin or below: fall back to the mean
          line.slope = 0;
          line.intercept = sy / sw;
        }
      } else if (points >= 1) {
        const double x = sx / sw;
        line.intercept = (sy / sw) / (1 + kPriorRowCost * x);
        line.slope = kPriorRowCost * line.intercept;
      }
      return line;
    }
  };

  [[nodiscard]] bool trusted(std::size_t n) const noexcept {
    return n < mean_.size() && weight_[n] >= kTrustedWeight;
  }

  static constexpr double kSmoothing = 0.9, kMaxWeight = 16, kTrustedWeight = 3;
  static constexpr double kWarmupSamples = 4;
  static constexpr double kPriorRowCost = 0.05;
  static constexpr std::size_t kFirstSamples = 3;  // = kTrustedWeight: trusted from the median
  std::vector<double> mean_, weight_;  // [n]: target-call seconds for n rows
  std::vector<double> first_;          // (n, kFirstSamples): a row count's first samples
  double draft_token_ = 0;
  double draft_samples_ = 0;
};

}  // namespace detail

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
    if constexpr (requires { { config.sampling } -> std::convertible_to<const SamplingParams&>; }) {
      sampling = SamplingKey::of(config.sampling);
    }
    if (options_.keep_calibration && sampling.same_as(last_sampling_)) {
      calibration_.start_generation();
    } else {
      calibration_.reset();
    }
    last_sampling_ = sampling;
    plain_streak_ = 0;
    probe_wait_ = options_.probe_interval;
    failed_probes_ = 0;
    probing_ = false;
    predicted_ = false;
    round_cap_ = cap_;
    first_round_ = true;
    refresh_costs();
  }

  [[nodiscard]] bool draft_more(const DraftState& state) {
    const std::size_t j = state.drafted;
    const std::size_t max_length = std::min({state.limit, cap_, round_cap_});
    if (j >= max_length) return false;
    if (verify_cost_.size() < max_length + 1) reserve(max_length);  // used without begin()
    const GoodputEstimates estimates = estimates_for(state);
    std::size_t planned = best_draft_length(estimates, max_length);
    if (j == 0 && planned == 0 && plain_streak_ >= probe_wait_) {
      planned = 1;  // probe: is drafting worth it again?
      probing_ = true;
    } else if (j == 0 && planned >= 2 && ++rounds_since_exploring_ >= explore_interval_ &&
               !options_.fixed_costs()) {
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
    last_prediction_ = RoundPrediction{expected_round_tokens(estimates, planned),
                                       expected_round_cost(estimates, planned)};
    predicted_ = true;
    return planned > j;
  }

  [[nodiscard]] static constexpr bool reads_token_probabilities() noexcept { return true; }

  void observe(const RoundReport& report) {
    calibration_.observe(report.token_probabilities, report.drafted, report.accepted,
                         options_.forgetting);
    if (report.drafted == 0) {
      ++plain_streak_;
    } else {
      // Back off only after kProbesBeforeBackoff probes in a row failed to restart drafting:
      // text that turns easy again is noticed within probe_interval rounds (where every plain
      // round it misses costs most of a round's gain), while a draft that stays useless costs
      // a few probes per generate() before the waits double.
      failed_probes_ = probing_ ? failed_probes_ + 1 : 0;
      const std::size_t doublings =
          std::min<std::size_t>(kMaxProbeDoublings, failed_probes_ > kProbesBeforeBackoff
                                                        ? failed_probes_ - kProbesBeforeBackoff
                                                        : 0);
      probe_wait_ = options_.probe_interval << doublings;
      plain_streak_ = 0;
    }
    probing_ = false;
    predicted_ = false;
    round_cap_ = cap_;
    // The first round's calls also read the prompt (a KV-cached model's prefill): their times
    // say nothing about a round's cost.
    if (!options_.fixed_costs() && !first_round_) {
      measured_.observe(report.drafted, report.draft_seconds, report.target_seconds);
      refresh_costs();
    }
    first_round_ = false;
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
    return estimates;
  }

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
      return {true, static_cast<bool>(sampling.logits_processor), sampling.temperature,
              sampling.top_p, sampling.min_p, sampling.top_k};
    }
    [[nodiscard]] bool same_as(const SamplingKey& other) const noexcept {
      return known && other.known && !processed && !other.processed &&
             detail::exactly_equal(temperature, other.temperature) &&
             detail::exactly_equal(top_p, other.top_p) &&
             detail::exactly_equal(min_p, other.min_p) && top_k == other.top_k;
    }
  };

  void reserve(std::size_t max_length) {
    if (survival_.size() < max_length) survival_.resize(max_length);
    if (acceptance_.size() < max_length) acceptance_.resize(max_length);
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
      for (std::size_t n = 1; n <= verify_cost_.size(); ++n) {
        verify_cost_[n - 1] =
            fixed ? options_.fixed_verify_cost(n) : 1.0 + 0.05 * static_cast<double>(n - 1);
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
  std::vector<double> verify_cost_;  // (K + 1) T_v(n) at n - 1
  double draft_token_cost_ = 0.05;
  std::size_t plain_streak_ = 0;
  std::size_t probe_wait_ = options_.probe_interval;  // reset by begin() too
  bool probing_ = false;
  bool predicted_ = false;  // draft_more ran since the last observe
  bool first_round_ = true;  // the next observe() is of a generate()'s first round
  static constexpr std::size_t kFirstExploreInterval = 8, kMaxExploreInterval = 128;
  std::size_t explore_interval_ = kFirstExploreInterval;
  static constexpr std::size_t kProbesBeforeBackoff = 4, kMaxProbeDoublings = 4;
  std::size_t failed_probes_ = 0;  // probes since drafting last resumed
  std::size_t rounds_since_exploring_ = 0;
  std::size_t round_cap_ = std::numeric_limits<std::size_t>::max();  // this round's cap: cap_, or less in an exploring round
  RoundPrediction last_prediction_{};
};

}  // namespace specdec

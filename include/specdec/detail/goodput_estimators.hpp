#pragma once
/// \file
/// \brief GoodputDraftLength's estimators (draft_length/goodput.hpp): acceptance calibrated
/// against the draft's own probabilities, and the measured cost curve T_v(n).

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <limits>
#include <span>
#include <vector>

#include "specdec/detail/error.hpp"
#include "specdec/detail/exact_float.hpp"
#include "specdec/draft_length/options.hpp"

namespace specdec {

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
  /// every time cost up to 2 % of the speed; docs/history.md.)
  void start_generation() noexcept {
    const auto bins = bins_;
    const Counts pair = pair_;
    const Counts recent = recent_;
    const auto weights = weights_;
    reset();
    bins_ = bins;
    pair_ = pair;
    recent_ = recent;
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
      recent_.decay(kRecentForgetting);
      recent_.add(success);
      const double easy = posterior(belief_, success);  // responsibility of the easy regime
      easy_.add(success, easy);
      hard_.add(success, 1.0 - easy);
      easy_share_.add(true, easy);  // one position: easy with probability `easy`
      easy_share_.add(false, 1.0 - easy);
      belief_ = drift(easy);
    }
    belief_ = drift(belief_);  // the position of the round's correction or bonus token
  }

  /// An optimistic acceptance: two standard errors above the rate of the last ~50 verdicts
  /// (decayed by kRecentForgetting per verdict, carried from one generation to the next, and
  /// counted from one accepted pseudo-verdict, so 1 with no evidence). What a probe wagers on:
  /// if drafting cannot pay even at this rate, the verdicts say it will not, and a probe is a
  /// loss. With a draft that collapsed (acceptance 0.3) it falls below 0.5 within ~30 verdicts.
  /// (One standard error closed the door on a draft accepted at 0.84 after seven unlucky
  /// verdicts, for good: with no probes no evidence comes to reopen it.)
  [[nodiscard]] double optimistic() const noexcept {
    const double judged = recent_.judged + 1.0;
    const double rate = (recent_.accepted + 1.0) / judged;
    return std::min(1.0, rate + 2.0 * std::sqrt(rate * (1.0 - rate) / judged));
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
  /// rates 0.9 / 0.1 and 0.7 / 0.3 within 1 % of these; docs/history.md.)
  static constexpr double kEasyPrior = 0.8, kHardPrior = 0.2, kHazard = 1.0 / 32;
  static constexpr double kCarriedJudged = 64;
  static constexpr double kRecentForgetting = 0.98;
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
  /// docs/history.md).
  static std::size_t bin(double probability) noexcept {
    if (!(probability > 0.0)) return 0;
    if (probability < 0.5) {
      return static_cast<std::size_t>(std::clamp(std::floor(std::log2(probability)) + 9, 0.0, 7.0));
    }
    const double tail = std::floor(-std::log2(std::max(1.0 - probability, 0.0))) - 1;  // >= 0
    return 8 + static_cast<std::size_t>(std::clamp(tail, 0.0, 3.0));
  }

  std::array<Counts, kBins> bins_{};
  Counts pair_{};           // not decayed, like bins_: the pair's overall rate
  Counts recent_{};         // every verdict, decayed per verdict; carried over: optimistic()
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
  std::vector<double> mean_, weight_;              // [n]: target-call seconds for n rows
  std::vector<double> first_;  // (n, kFirstSamples): a row count's first samples
  double draft_token_ = 0;
  double draft_samples_ = 0;
};

/// GoodputOptions::plain_guard: what drafting rounds, as timed, deliver against plain steps.
///
/// The cost model predicts; this measures. Per drafting round it keeps the tokens the round
/// emitted and its seconds in units of a plain step (the moving average of the plain rounds
/// that followed a plain round: the steady state plain decoding runs in). A plain round right
/// after a drafting round pays what the drafting left behind (llama.cpp rebuilds the one-row
/// graph), so its time above a plain step is charged to drafting. Drafting is worth its
/// rounds while, over the recent ones (two at least), they emit at least one token per plain
/// step of time, whatever the model said. (On the shipped pair's Q8_0 weights a one-token
/// probe after plain steps took ~2 plain steps more than it emitted, where the measured costs
/// said 0.6: the draft's catch-up call and a graph rebuilt per call shape in both models.)
///
/// Once drafting loses, the rounds are plain (probes too: the model expects them to lose)
/// except for trials of the model's plan, each judged on its own (the stretch of bad rounds
/// before it says little about the text now; judged together with it, one won trial rarely
/// outweighed it), a won trial reopening drafting. A trial is a bet with a known price, so
/// the trials' losses are kept on a ledger (net plain steps lost since drafting was stopped),
/// and a trial is allowed only while it stays within kAllowance plain steps plus kShare of the
/// time decoded so far: a draft that never pays then costs about that share of plain
/// decoding's speed. The plain steps between trials double while trials lose (trial_wait).
///
/// A won trial is one round, and one round wins by luck: greedy, a round whose every drafted
/// token is accepted emits as many tokens as rows. So the drafting a trial reopens is the
/// trial's until it has held kHeldRounds judged rounds: found losing before that, the trial
/// counts as lost (the wait doubles, and what the reopened rounds lost stays on the ledger).
/// (Taken as won, on the shipped pair's Q8_0 weights at B = 2, greedy: trials after 8 plain
/// steps won on one such round, drafting lost again 1-7 steps later, and the next trial came
/// after 8 more; six trials cost 15 ms of a 275 ms run, 0.92x of plain batched decoding.)
///
/// A plain step's time grows with the context (its row attends to every cached position): on
/// the shipped pair's f16 GGUF a one-row call took 1.2 times as long after ~210 tokens as after
/// ~50 (llama-bench, one thread). The plain steps are timed early in a generation and the
/// drafting rounds judged all along it, so with a growth known (GoodputOptions::plain_growth)
/// each plain sample is taken back to context 0 and the plain step a round is judged against is
/// taken forward to the round's context.
class DraftingGuard {
 public:
  /// How a plain step's time grows per token of context, relative to its time at context 0
  /// (GoodputOptions::plain_growth; 0: not known, every context alike).
  void set_plain_growth(double growth) noexcept { plain_growth_ = growth; }

  /// A new generate(): its first round reads the prompt and is not observed; what the previous
  /// one's last round left behind is not this one's.
  void start_generation() noexcept {
    // The prompt's round changed the call shape as a drafting round does (llama.cpp rebuilds
    // its graph for one row after the prompt's): the next plain step is no steady sample.
    unobserved_round();
    draft_warm_ = false;
  }

  /// The caller leaves unobserved every round in which the draft reads a prompt
  /// (BatchedDecoder's step in which a sequence first drafts), so no observed drafting round
  /// pays a prefill, and the first one is judged like the rest. (Left unjudged as a
  /// generation's first drafting round is, one of a batch's steady drafting steps went
  /// unjudged before every cold verdict.)
  void prefills_unobserved() noexcept { prefills_unobserved_ = true; }

  /// A round the caller leaves unobserved because it read a prompt (BatchedDecoder's step in
  /// which a sequence joins): it changed the call shape as a drafting round does, so the next
  /// plain step is no steady sample. (On the shipped pair's Q8_0 weights the step after a
  /// batch's prompts took 1.9-2.2 ms at B = 2 and 4, the next ones 1.4-1.7: taken as the plain
  /// time, it priced drafting cheap.)
  void unobserved_round() noexcept {
    after_drafting_ = true;
    last_round_drafted_ = false;
  }

  /// A round after the generation's first (whose calls also read the prompt), made after
  /// `context` tokens (0 where the caller does not say: then every round counts alike).
  /// `expected`: the tokens the caller's model expected the round to emit (negative: not
  /// known). Where known, the verdict weighs the round by the mean of the tokens it emitted and
  /// those expected; the ledger keeps what it emitted. (A round of four drafted tokens accepted
  /// at 0.89 emits 1 to 5: judged on what they emit, two or three rounds of a draft that pays
  /// 1.3 times plain decoding read as losing in about a third of the replayed cold starts of
  /// goodput_costs_test.cpp. The expectation alone would take the model's word where the guard
  /// is there to check it: an optimistic calibration, a block verifier's acceptance.)
  void observe(std::size_t drafted, double emitted, double seconds, std::size_t context = 0,
               double expected = -1) noexcept {
    if (!(seconds > 0)) return;
    // A round's time in plain steps is seconds / (plain_seconds_ * scale); a plain step's
    // seconds / scale is its time at context 0.
    const double scale = 1.0 + plain_growth_ * static_cast<double>(context);
    if (drafted == 0) {
      seconds /= scale;
      if (after_drafting_) {
        if (plain_samples_ > 0 && last_round_drafted_) {
          charge(0.0, std::max(1.0, seconds / plain_seconds_) - 1.0);
        }
      } else if (plain_samples_ < kFirstPlainSamples) {
        // The lowest of the first samples: a slow one (a cold cache, a scheduler slice) would
        // price every drafting round cheap until enough plain steps outweighed it.
        plain_seconds_ = plain_samples_ > 0 ? std::min(plain_seconds_, seconds) : seconds;
        plain_samples_ += 1.0;
      } else {
        plain_seconds_ = MeasuredCosts::smoothed(plain_seconds_, seconds, plain_samples_);
        plain_samples_ = std::min(plain_samples_ + 1.0, kMaxPlainSamples);
      }
      elapsed_units_ += 1.0;
      after_drafting_ = false;
      return;
    }
    if (prefill_round()) return;
    if (!(plain_samples_ > 0)) return;  // no plain step timed yet (the caller drafted anyway)
    const double units = drafting_units(drafted, seconds, scale);
    const double tokens = emitted;
    elapsed_units_ += units;
    if (losing_) {  // a trial, judged on its own
      lost_units_ = std::max(0.0, lost_units_ + units - tokens);
      if (tokens >= units) {
        losing_ = false;
        reopened_ = true;  // the trial's until it holds (class comment)
        draft_tokens_ = tokens;
        draft_units_ = units;
        judged_rounds_ = 1;
      } else {
        lose_trial();
      }
      return;
    }
    draft_tokens_ *= kForgetting;
    draft_units_ *= kForgetting;
    ++judged_rounds_;
    charge(tokens, units);
    if (expected >= 0) draft_tokens_ += 0.5 * (expected - tokens);  // the verdict's weight
    // Before two rounds are judged, one that lost kBigLoss plain steps is verdict enough: a
    // long plan on a curve where every row doubles the call loses that much at once. Later
    // only the recent rounds together decide (one call preempted for a scheduler slice must
    // not stop a draft that pays).
    const double slack = judged_rounds_ >= kRoundsToJudge ? 0.0 : kBigLoss;
    losing_ = draft_tokens_ + slack < draft_units_;
    if (losing_ && reopened_) {
      lose_trial();  // reopened by a trial that had not held: the trial lost
    } else if (losing_) {
      // The ledger is the trials': what drafting lost before it was stopped is spent, and
      // counted against the next trial it stopped a draft that pays (f16 weights: 71-93 %
      // plain rounds where K = 8 ran at 1.26x).
      lost_units_ = 0;
    } else if (reopened_ && judged_rounds_ >= kHeldRounds) {
      reopened_ = false;  // the trial held: drafting pays again
      trial_wait_ = kFirstTrialWait;
    }
  }

  /// A probe (a round the caller's model expected to lose, drafted to learn the draft's
  /// acceptance now): its loss goes on the ledger and its time counts, but it gives no
  /// verdict, as a generation's first drafting round gives none. The caller affords a probe
  /// from the ledger (affords_trial), so what probes lose stays within it. (Judged, probes
  /// decided verdicts that lose by construction on curves where a second row costs 1.8 one-row
  /// calls: a one-token round emits at most 2 tokens for ~2.2 plain steps. In the replayed cold
  /// starts of goodput_costs_test.cpp a draft that pays 1.3 times plain decoding was stopped
  /// by its probes, and the model, which had seen only rejections, planned no drafting again.)
  void observe_probe(std::size_t drafted, double emitted, double seconds,
                     std::size_t context = 0) noexcept {
    if (!(seconds > 0) || prefill_round()) return;
    observe_catch_up(drafted, emitted, seconds, context);
  }

  /// While drafting loses: a trial's first round, whose draft read the tokens of every plain
  /// step since drafting stopped (BatchGoodputPlanner). Its loss goes on the ledger and its
  /// time counts, but it gives no verdict: the catch-up is the price of resuming, paid once,
  /// not what drafting delivers, and the trial is judged on the round after it. (Judged on the
  /// catch-up, a decoder kept in service stopped drafting for good: on the shipped pair's f16
  /// weights at B = 8 its trials after 16, 32 and 64 plain steps took 7.7, 11.4 and 17.1 ms
  /// for 16 tokens against a 4.0 ms plain step, each lost, and the wait doubled.)
  void observe_catch_up(std::size_t drafted, double emitted, double seconds,
                        std::size_t context = 0) noexcept {
    if (!(seconds > 0) || !(plain_samples_ > 0)) return;
    const double units =
        drafting_units(drafted, seconds, 1.0 + plain_growth_ * static_cast<double>(context));
    elapsed_units_ += units;
    lost_units_ = std::max(0.0, lost_units_ + units - emitted);
    after_drafting_ = true;
    last_round_drafted_ = true;
  }

  /// A plain step of `units` plain steps' time that the caller takes as no sample
  /// (BatchGoodputPlanner's plain steps at another width than its drafting steps'): time
  /// elapsed all the same, of which the ledger affords trials a share (allowance_left).
  void elapse(double units) noexcept {
    if (units > 0) elapsed_units_ += units;
  }

  /// The recent drafting rounds (two judged at least) emitted fewer tokens per plain step of
  /// time than plain steps do, and no trial since has won.
  [[nodiscard]] bool drafting_loses() const noexcept { return losing_; }
  /// Whether drafting has a verdict: the first rounds judged (kRoundsToJudge), or found losing.
  [[nodiscard]] bool has_verdict() const noexcept {
    return losing_ || judged_rounds_ >= kRoundsToJudge;
  }
  /// Whether the ledger affords another drafting round while drafting loses, one that pays
  /// `up_front` plain steps before it drafts (the draft's catch-up on the plain steps' tokens).
  [[nodiscard]] bool affords_trial(double up_front = 0) const noexcept {
    return allowance_left() >= up_front;
  }
  /// The plain steps to wait, while drafting loses, before a trial: kFirstTrialWait, doubled
  /// by every trial lost (up to kMaxTrialWait), back to kFirstTrialWait once one has held.
  [[nodiscard]] std::size_t trial_wait() const noexcept { return trial_wait_; }
  /// What the ledger has left, in plain steps: what a round may still lose.
  [[nodiscard]] double allowance_left() const noexcept {
    return kAllowance + kShare * elapsed_units_ - lost_units_;
  }
  /// What a round may lose before the first verdict, in plain steps: the loss that is verdict
  /// enough on its own (a round that lost more stops drafting at once), plus the ledger's
  /// allowance_left.
  [[nodiscard]] double cold_allowance() const noexcept { return kBigLoss + allowance_left(); }
  /// No plain step has been timed yet, so no drafting round could be judged: the rounds
  /// should be plain until one is (the first two rounds of the policy's life, the first being
  /// the prompt's; a few plain steps against judging every drafting round from the start).
  [[nodiscard]] bool needs_plain_steps() const noexcept { return !(plain_samples_ > 0); }

 private:
  /// A drafting round's time in plain steps at its context (`scale`: the plain step's growth
  /// there). A round preempted for a scheduler slice says nothing about drafting: no
  /// legitimate round of m drafted tokens costs more than 2 (m + 1) plain steps.
  [[nodiscard]] double drafting_units(std::size_t drafted, double seconds,
                                      double scale) const noexcept {
    return std::min(seconds / (plain_seconds_ * scale), 2.0 * static_cast<double>(drafted + 1));
  }

  /// A drafting round was observed; whether it is the generation's first, which also reads the
  /// prompt into the draft (its prefill, several plain steps' worth on the shipped pair): the
  /// price of drafting at all in this generation, not of the plan, so it is neither judged nor
  /// charged. (Judged, it stopped drafting that paid: f16 weights, 61 % plain rounds at T = 0
  /// where block K = 4 ran at 1.17x.) Not with prefills_unobserved().
  bool prefill_round() noexcept {
    after_drafting_ = true;
    last_round_drafted_ = true;
    if (draft_warm_ || prefills_unobserved_) return false;
    draft_warm_ = true;
    return true;
  }

  void lose_trial() noexcept {
    reopened_ = false;
    trial_wait_ = std::min(2 * trial_wait_, kMaxTrialWait);
  }

  void charge(double tokens, double units) noexcept {
    draft_tokens_ += tokens;
    draft_units_ += units;
    lost_units_ = std::max(0.0, lost_units_ + units - tokens);
  }

  static constexpr std::size_t kRoundsToJudge = 2;
  static constexpr double kMaxPlainSamples = 16, kFirstPlainSamples = 3, kForgetting = 0.9;
  static constexpr double kAllowance = 2, kShare = 0.005, kBigLoss = 3;
  static constexpr std::size_t kHeldRounds = 16;
  static constexpr std::size_t kFirstTrialWait = 8, kMaxTrialWait = 256;
  std::size_t trial_wait_ = kFirstTrialWait;
  double plain_growth_ = 0;
  double plain_seconds_ = 0, plain_samples_ = 0;  // a plain step's time at context 0
  double draft_tokens_ = 0, draft_units_ = 0;     // recent drafting rounds, decayed
  double lost_units_ = 0, elapsed_units_ = 0;
  std::size_t judged_rounds_ = 0;
  bool after_drafting_ = false;
  bool draft_warm_ = false;           // this generation's first drafting round was seen
  bool prefills_unobserved_ = false;  // prefills_unobserved()
  bool last_round_drafted_ = false;   // (after_drafting_ also follows the prompt's round)
  bool losing_ = false;
  bool reopened_ = false;  // drafting reopened by a trial that has not yet held
};

}  // namespace detail

}  // namespace specdec

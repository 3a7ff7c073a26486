#pragma once
/// \file
/// \brief Draft lengths for a whole batch from one goodput optimisation: BatchGoodputOptions
/// (the cost model: fixed curves or measured) and BatchGoodputPlanner, which BatchedDecoder
/// runs before every step for the sequences whose policy is the goodput one (but for a
/// sequence alone in the batch, whose own policy plans its round in these curves:
/// alone_costs()).
///
/// The figure of merit is the step's, not a sequence's: a step in which sequence s drafts m_s
/// tokens emits sum_s (1 + sum_{i <= m_s} P_{s,i}) tokens in expectation (P_{s,i}: the
/// probability that its drafted tokens 1..i are all accepted, from the sequence's own
/// acceptance calibration, GoodputDraftLength::expected_acceptance), and costs one target call
/// of R = sum_s (m_s + 1) rows, T(R), plus the draft calls: with batched drafting, call k
/// advances every sequence with m_s >= k, so the step pays D(r_1) + ... + D(r_max), r_k
/// sequences each. The plan maximises tokens / cost over all (m_s):
///
///  - For a given number of drafted rows E, the most tokens come from the E largest P_{s,i}
///    across the batch (each sequence's P is non-increasing in i, so taking them in that order
///    keeps every sequence's rows a prefix). The planner sorts the candidates once and walks
///    E = 0, 1, ... evaluating the rate of each prefix exactly (T at R rows, the draft calls
///    the prefix implies), and keeps the best. A curve with steps and dips (a CPU engine's row
///    tiles) is read where it is: a prefix that lands in a dip wins on its own cost.
///  - E = 0 is plain batched decoding, one row per sequence, priced as plain decoding runs it
///    where the curves say (BatchGoodputOptions::plain_step_costs): when no prefix beats it,
///    every sequence's limit is 0, so the step makes no draft call and scores no extra row.
///  - A sequence left plain for probe_interval steps is given one row anyway when drafting
///    some length at its optimistic acceptance would beat the plan's rate, as the
///    single-sequence policy probes: without verdicts its acceptance could not recover (before
///    the guard's first verdict, that best length: the guard must judge rounds that can win).
///    Not when even that does not pay: then those sequences stay exactly plain.
///  - Drafting is judged by what it delivers (`plain_guard`, as the single-sequence policy's
///    GoodputOptions::plain_guard): each step's wall time, in plain steps of its own width
///    (as the curves price one, scaled by the timings of plain steps at the drafting steps'
///    width) at its sequences' mean context (`plain_growth`), against the tokens it emitted
///    per sequence. While the recent drafting steps emit fewer tokens per plain step of time
///    than plain steps do (one per sequence), every step is plain (probes too) but for a
///    trial of the plan after a wait that doubles while trials lose (two steps: the drafts'
///    catch-up on the plain steps' tokens, then the step it is judged on). The curves price
///    calls as measured alone, and acceptance is an estimate: a plan that both call a gain
///    can still lose (the example GPT at B = 16, T = 1: 0.89x of plain batched decoding
///    without it, draft catch-ups and probes every step).
///  - What the curves leave out of a drafting step is corrected for (observe_step): the
///    correction holds while the steps are plain, but for a retry of the plan without it
///    after a wait, when the guard has judged drafting and does not find it losing.
///  - The marginal survival of the plan (the smallest P taken) is each sequence's threshold:
///    while drafting, a sequence stops early when the survival its drafted tokens' actual
///    probabilities give the next token falls below it.
///
/// Costs. Fixed curves (BatchGoodputOptions::target_call_costs / draft_call_costs, e.g. from
/// measure_batch_call_costs) make the draft lengths independent of timings, so a sequence's
/// sampled tokens are the same for the same seed. Otherwise the curves are learnt from the
/// step's own calls (detail::MeasuredCosts, the single-sequence policy's estimator: per row
/// count, extrapolated from the counts below where unseen), not counting calls that read a
/// prompt. As with the single-sequence policy, the output law of every sequence is its
/// target's whatever the draft lengths: the plan reads only the draft's side of the round and
/// earlier verdicts.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <span>
#include <utility>
#include <vector>

#include "specdec/detail/error.hpp"
#include "specdec/detail/exact_float.hpp"
#include "specdec/detail/goodput_estimators.hpp"
#include "specdec/draft_length/goodput.hpp"

namespace specdec {

/// \brief How BatchedDecoder plans draft lengths for the goodput sequences of a batch.
struct BatchGoodputOptions {
  /// [n - 1] = the cost of one target call scoring n rows in total, over all its sequences
  /// (any unit, the same as draft_call_costs). Empty: measured from the decoder's calls.
  /// Beyond the last entry the curve continues along its last step.
  std::vector<double> target_call_costs{};
  /// [n - 1] = the cost of one batched draft call advancing n sequences (with a draft that is
  /// not batched: [0] is one sequence's draft call). Given together with target_call_costs.
  std::vector<double> draft_call_costs{};
  /// With fixed curves, optional: [b - 1] = the cost of a plain step of b sequences (one row
  /// each) as plain batched decoding runs it, one such call after another; the plain step of
  /// a plan is priced at the lower of it and T(b) (empty: T(b)). Why apart from the target
  /// curve: a drafting step's target call follows draft calls and calls of other shapes, and
  /// the curve is timed so; a run of identical plain calls is cheaper. On llama.cpp's CPU
  /// backend with the shipped pair's Q8_0 weights, the second of two 2-row calls among other
  /// shapes took 1.19 ms and the same call 10 calls into a run of them 0.75-0.85 ms: priced at
  /// the former, plain decoding looked 35 % dearer than it runs, and the plan drafted one token
  /// per sequence at 0.92-0.97x of plain batched decoding. With measured curves (seconds),
  /// the plain guard also judges a plain step with its target call at most the price the plan
  /// gives it (this, or T(b) where lower).
  std::vector<double> plain_step_costs{};
  /// With fixed curves: the extra cost of a target call whose total rows differ from the
  /// previous call's (an engine that prepares each call shape anew: llama.cpp builds a new
  /// compute graph), in the curves' unit; 0: none.
  double target_switch_cost = 0;
  /// With fixed curves: what one token costs the draft when it catches up on tokens it has
  /// not read (the plain steps' tokens, when drafting resumes), in the curves' unit; 0: not
  /// known, priced as one one-sequence draft call per token. A trial of drafting after plain
  /// steps needs the guard's ledger to afford that catch-up (file comment).
  double draft_catch_up_cost = 0;
  /// How a plain step's time grows per token of context (its sequences' mean), relative to
  /// its time at context 0: the guard judges each step against a plain step at the step's
  /// context, as GoodputOptions::plain_growth (BatchCallCosts::goodput_options sets it; 0: every
  /// context alike).
  double plain_growth = 0;
  /// With plain_step_costs: the mean context (tokens per sequence) of the calls they were timed
  /// at. The guard caps a plain step's call at their price grown to the step's own context
  /// (plain_growth); 0: timed at context 0 (BatchCallCosts::goodput_options sets it).
  double plain_step_context = 0;
  /// Steps a sequence is left plain before a probe (one drafted row) is considered.
  std::size_t probe_interval = 16;
  /// Judge drafting by what it delivers (file comment), when timings decide anyway: with costs
  /// measured while decoding, or fixed curves that a measurement gave (measured_costs). With
  /// fixed curves of the user's own the plan stays independent of the guard's timings.
  bool plain_guard = true;
  /// The fixed curves came from a measurement (BatchCallCosts::goodput_options sets it): they
  /// differ from run to run anyway, so plain_guard applies.
  bool measured_costs = false;

  /// \brief Whether plain_guard applies (see it).
  [[nodiscard]] bool guarding() const noexcept {
    return plain_guard && (!fixed_costs() || measured_costs);
  }

  [[nodiscard]] bool fixed_costs() const noexcept { return !target_call_costs.empty(); }

  /// \throws std::invalid_argument naming the field: one curve without the other, a cost that
  /// is not finite or not positive, probe_interval = 0.
  void validate() const {
    if (target_call_costs.empty() != draft_call_costs.empty()) {
      detail::throw_invalid_argument("BatchGoodputOptions: target_call_costs has ",
                                     target_call_costs.size(), " entries and draft_call_costs ",
                                     draft_call_costs.size(),
                                     "; expected both curves (fixed costs) or neither (measured)");
    }
    const auto check = [](const std::vector<double>& costs, const char* name) {
      for (std::size_t i = 0; i < costs.size(); ++i) {
        if (!std::isfinite(costs[i]) || !(costs[i] > 0)) {
          detail::throw_invalid_argument("BatchGoodputOptions::", name, "[", i, "] = ", costs[i],
                                         "; expected a finite cost > 0");
        }
      }
    };
    check(target_call_costs, "target_call_costs");
    check(draft_call_costs, "draft_call_costs");
    check(plain_step_costs, "plain_step_costs");
    if (!plain_step_costs.empty() && target_call_costs.empty()) {
      detail::throw_invalid_argument(
          "BatchGoodputOptions: plain_step_costs has ", plain_step_costs.size(),
          " entries without target_call_costs; expected it with the fixed curves or empty");
    }
    if (!std::isfinite(target_switch_cost) || target_switch_cost < 0) {
      detail::throw_invalid_argument("BatchGoodputOptions::target_switch_cost = ",
                                     target_switch_cost, "; expected a finite cost >= 0");
    }
    if (!std::isfinite(draft_catch_up_cost) || draft_catch_up_cost < 0) {
      detail::throw_invalid_argument("BatchGoodputOptions::draft_catch_up_cost = ",
                                     draft_catch_up_cost, "; expected a finite cost >= 0");
    }
    if (!std::isfinite(plain_step_context) || plain_step_context < 0) {
      detail::throw_invalid_argument("BatchGoodputOptions::plain_step_context = ",
                                     plain_step_context, "; expected a finite context >= 0");
    }
    if (!std::isfinite(plain_growth) || plain_growth < 0) {
      detail::throw_invalid_argument("BatchGoodputOptions::plain_growth = ", plain_growth,
                                     "; expected a finite growth >= 0 per token");
    }
    if (probe_interval == 0) {
      detail::throw_invalid_argument("BatchGoodputOptions::probe_interval = 0; expected >= 1");
    }
  }
};

/// \brief The batch-wide goodput plan (file comment). Allocation-free per step once reserve()
/// has sized it for the batch.
class BatchGoodputPlanner {
 public:
  BatchGoodputPlanner() : BatchGoodputPlanner(BatchGoodputOptions{}) {}
  explicit BatchGoodputPlanner(BatchGoodputOptions options) : options_(std::move(options)) {
    options_.validate();
    guard_.set_plain_growth(options_.plain_growth);
    guard_.prefills_unobserved();  // skip_step(): BatchedDecoder skips the drafts' prefills
  }

  /// \brief How the models are called: one target call for all sequences (score_batch) or
  /// one per sequence; one draft call per drafted position for all sequences, or per sequence.
  /// `equal_micro_batches`: the shared target call costs one pass per distinct row count
  /// (BatchCallShape::equal_micro_batches, batch/target.hpp), T of the rows each pass takes.
  void set_call_shape(bool shared_target_call, bool shared_draft_call,
                      bool equal_micro_batches = false) noexcept {
    shared_target_ = shared_target_call;
    shared_draft_ = shared_draft_call;
    micro_batches_ = shared_target_call && equal_micro_batches;
  }

  /// \brief Sizes every buffer for `sequences` sequences of up to `max_length` drafted tokens.
  void reserve(std::size_t sequences, std::size_t max_length) {
    const std::size_t rows = sequences * (max_length + 1);
    if (sequences_.capacity() < sequences) sequences_.reserve(sequences);
    if (candidates_.capacity() < sequences * max_length) {
      candidates_.reserve(sequences * max_length);
    }
    if (draft_rows_.size() < max_length + 1) draft_rows_.resize(max_length + 1);
    if (sequences_at_rows_.size() < max_length + 2) sequences_at_rows_.resize(max_length + 2);
    if (target_table_.size() < rows) target_table_.resize(rows);
    if (draft_table_.size() < sequences) draft_table_.resize(sequences);
    if (!options_.fixed_costs()) {
      target_measured_.resize(rows);
      draft_measured_.resize(sequences);
    }
    refresh_costs();
  }

  /// \name One step's plan
  /// clear(); add() per sequence; solve(); then length(i) / probing(i) / threshold().
  /// \{
  void clear() noexcept {
    sequences_.clear();
    candidates_.clear();
  }

  /// \brief Adds a sequence. A planned one (its policy is goodput) gives the acceptance of
  /// each token it may draft (its round limit), what a probe wagers on, and whether its probe
  /// is due, and how many steps it has been plain since it last drafted (`plain_steps`, 0:
  /// it drafted in the last step; after plain steps its draft's first call also catches up on
  /// the tokens they emitted: one more pass on an engine that cuts unequal rows into
  /// micro-batches, charged as one more one-sequence draft call, and the catch-up itself,
  /// which a trial's ledger must afford: trial_catch_up_units); one that is not planned drafts
  /// `fixed_length` (its own policy decides; it counts in the step's rows and calls). Returns
  /// its index.
  std::size_t add_planned(std::span<const double> acceptance, double optimistic, bool probe_due,
                          std::size_t plain_steps = 0) {
    Entry entry;
    entry.planned = true;
    entry.plain_steps = plain_steps;
    entry.optimistic = optimistic;
    entry.probe_due = probe_due;
    double survival = 1.0;
    for (std::size_t i = 0; i < acceptance.size(); ++i) {
      survival *= std::clamp(acceptance[i], 0.0, 1.0);
      candidates_.push_back({survival, sequences_.size(), i});
    }
    entry.limit = acceptance.size();
    sequences_.push_back(entry);
    return sequences_.size() - 1;
  }
  std::size_t add_fixed(std::size_t fixed_length) {
    Entry entry;
    entry.length = fixed_length;
    entry.limit = fixed_length;
    sequences_.push_back(entry);
    return sequences_.size() - 1;
  }

  /// \brief Chooses every planned sequence's length (file comment).
  void solve() {
    std::sort(candidates_.begin(), candidates_.end(), [](const Candidate& a, const Candidate& b) {
      if (!detail::exactly_equal(a.survival, b.survival)) return a.survival > b.survival;
      if (a.sequence != b.sequence) return a.sequence < b.sequence;
      return a.index < b.index;
    });
    std::size_t longest = 0;
    for (const Entry& entry : sequences_) {
      if (entry.planned) longest = std::max(longest, entry.limit);
    }
    // Caps on the planned lengths (each draft call costs something of its own, so a plan
    // whose longest sequence drafts fewer tokens needs fewer calls): the best prefix under
    // each of 1, 2, 4, ... and the longest limit, not every cap: a step of 32 sequences
    // drafting up to 16 tokens walks 512 candidates per cap, every step.
    walk_best(longest);
    const std::size_t plain = plain_rows();  // probes below leave it as it is
    if (rows_ == plain) retry_without_correction(longest);
    const bool plan_drafts = rows_ != plain;
    // Probes: one row for a sequence left plain long enough, if drafting some length at its
    // optimistic acceptance would beat the plan's rate. (Judging the single row alone kept a
    // batch of 8 plain for good where one more row cost more than the rows after it: the
    // acceptance never had a verdict to recover from.)
    // Before the guard has a verdict, a probe drafts the length its optimistic acceptance
    // plans: the guard's first verdicts are on these rounds, and on a curve where two rows
    // cost nearly two plain steps a one-token round cannot win (the shipped pair's f16 weights
    // through llama.cpp at B = 1: a fresh sequence's one-row probes were judged losing, and
    // 24-28 of 50 generations then ran 90 % plain or more, against 17-20 with the
    // single-sequence policy, whose probe, re-planned at every drafted token, grows into a
    // round that can win).
    const bool cold = options_.guarding() && !guard_.has_verdict();
    for (Entry& entry : sequences_) {
      if (!entry.planned || entry.length > 0 || !entry.probe_due || entry.limit == 0) continue;
      const std::size_t length = optimistic_length(entry);
      if (length == 0) continue;
      std::size_t drafted = cold ? length : 1;
      // ... at most as long as the ledger affords its worst case (one token per sequence, as
      // a plain step gives, for the step's whole cost): the probes of quantized weights, where
      // a second row nearly doubles the call, stay short.
      while (drafted > 1 &&
             probe_step_cost(entry, drafted) / plain_cost_ - 1 > guard_.allowance_left()) {
        --drafted;
      }
      draft_cost_ += resume_cost(entry);  // once, as walk() charges it with the first row
      entry.length = drafted;
      entry.probing = true;
      double survival = 1;
      for (std::size_t m = 1; m <= drafted; ++m) tokens_ += (survival *= entry.optimistic);
      count_rows(1, -1);
      count_rows(drafted + 1, +1);
      target_cost_ = shared_target_ ? shared_call_cost(rows_ + drafted)
                                    : target_cost_ + target_cost(drafted + 1) - target_cost(1);
      for (std::size_t m = 1; m <= drafted; ++m) draft_cost_ += add_draft_row(m);
      rows_ += drafted;
    }
    if (options_.guarding() && rows_ != plain && !guard_allows(!plan_drafts)) {
      walk(longest, 0, nullptr);  // every planned sequence plain
      for (Entry& entry : sequences_) entry.probing = false;
    }
  }

  [[nodiscard]] std::size_t length(std::size_t index) const noexcept {
    return sequences_[index].length;
  }
  [[nodiscard]] bool probing(std::size_t index) const noexcept { return sequences_[index].probing; }
  /// \brief The plan's marginal survival (1 when nothing is drafted).
  [[nodiscard]] double threshold() const noexcept { return threshold_; }
  /// \brief The plan's expected tokens, rows and cost (in the curves' unit).
  [[nodiscard]] double expected_tokens() const noexcept { return tokens_; }
  [[nodiscard]] std::size_t rows() const noexcept { return rows_; }
  [[nodiscard]] double expected_cost() const noexcept { return cost(); }
  /// \}

  /// \brief The costs of a round whose sequence is alone in the batch: the curves at one
  /// sequence (GoodputDraftLength::price_alone; BatchedDecoder lets such a sequence's policy
  /// plan its rounds, in the same cost model). Views the planner's curves until the next call
  /// that measures or reserves.
  [[nodiscard]] AloneRoundCosts alone_costs() const noexcept {
    const double plain = options_.plain_step_costs.empty() ? 0.0 : options_.plain_step_costs[0];
    return {target_table_,
            at(draft_table_, 1),
            options_.target_switch_cost,
            options_.plain_growth,
            options_.guarding(),
            catch_up_cost(),
            plain};
  }

  /// \brief The rows of the target call just made: a plan of other rows pays the switch
  /// cost (BatchGoodputOptions::target_switch_cost).
  void last_call(std::size_t rows) noexcept { last_rows_ = rows; }

  /// \brief The wall time of the step just planned (its model calls and the library's work),
  /// for the correction of drafting's costs: the curves price calls as measured alone, and a
  /// step that drafts pays more than its calls' sum where the engine rebuilds its graphs for
  /// changing shapes, a draft catches up, rows split into micro-batches. Seconds per unit of
  /// predicted cost are kept for steps that drafted and for plain ones (moving averages, one
  /// preempted step moving them by at most 10 %); their ratio (1 to 3) scales the cost a plan
  /// adds above the plain step. (On llama.cpp's CPU backend with the shipped pair's Q8_0
  /// weights, plans from the measured curves alone ran at 0.85-0.93x of plain batched
  /// decoding.) The correction holds while steps are plain: made to fade there, so that
  /// drafting is tried and measured again, it cost the floor (goodput under 0.98x of plain
  /// batched decoding in 13 of 30 processes, against 5 without). Only when the guard has judged
  /// drafting and does not find it losing is the plan retried without it, after a wait
  /// (retry_without_correction).
  /// Steps that read a prompt are not observed.
  /// `emitted`: the tokens the step emitted, over `sequences` sequences (the guard's ledger),
  /// whose mean context was `context` tokens at the step's start (0: not said).
  /// Not with fixed curves of the user's own (BatchGoodputOptions::measured_costs false): those
  /// keep the plan independent of timings.
  void observe_step(double seconds, std::size_t emitted = 0, std::size_t sequences = 0,
                    std::size_t context = 0) noexcept {
    const double call_seconds = std::exchange(last_call_seconds_, 0.0);
    const bool retry = std::exchange(correction_retry_, false);
    if (!(seconds > 0) || !(plain_cost_ > 0)) return;
    if (options_.fixed_costs() && !options_.measured_costs) return;
    if (settled_plain_step() && call_seconds < seconds) {
      // A plain step is judged as plain decoding runs it: its target call at most the settled
      // plain call (settled_plain_cost, in seconds: measured), the rest as it was. The first
      // plain steps after the prompts' and drafting's calls run unsettled (on the shipped
      // pair's Q8_0 weights at B = 2: 1.7, 1.4, 1.2 ms, then 0.9 ms from the 10th on), and a
      // guard that took its plain time from them judged drafting steps that lost 6-12 % to
      // plain batched decoding a gain.
      // The settled call at the step's context: timed at plain_step_context, it is grown (or
      // shrunk) to the step's as the guard's plain step is (plain_growth). Capped at the timed
      // context's price, a plain step late in a generation counted as dear as an early one and
      // then, divided by its context's growth, cheaper than it runs.
      const double growth = options_.plain_growth;
      const double settled = context == 0 ? settled_plain_cost()
                                          : settled_plain_cost() *
                                                (1.0 + growth * static_cast<double>(context)) /
                                                (1.0 + growth * options_.plain_step_context);
      seconds -= call_seconds - std::min(call_seconds, settled);
    }
    const std::size_t drafted = rows_ - std::min(rows_, plain_rows());
    const bool plain_step = drafted == 0;
    if (!plain_step && sequences > 0) drafting_width_ = sequences;
    // A plain step counts for the guard and the correction only at the drafting steps' width
    // (or before any drafted). The curves price a call by its rows, but llama.cpp's attention
    // reads every sequence's cache: a batch's tail, plain as its sequences finish and their
    // caches are freed, ran at 0.6-0.84 of its price (the shipped pair's f16 weights at B = 8;
    // the full width's steps at 0.92-0.97). A decoder in service took one tail after another
    // as its plain steps: its guard judged the next batch's drafting steps (14 tokens where a
    // plain step of the same time gives 11) losing, and its correction crept from 1.0 to 1.66.
    const bool usual_width =
        !plain_step || sequences == 0 || drafting_width_ == 0 || sequences == drafting_width_;
    if (options_.guarding() && sequences > 0) {
      // The guard's unit is this step's plain step as the curves price it (plain_cost_, at
      // its own width), and its tokens are per sequence: a plain step emits one. Not the
      // step's share per sequence: a step's time is not proportional to its sequences.
      const double tokens = static_cast<double>(emitted) / static_cast<double>(sequences);
      const double units = seconds / plain_cost_;
      if (((guard_trial_ && !trial_caught_up_) || retry) && drafted > 0) {
        // A trial's first step, whose drafts read every token of the plain steps before it:
        // its cost goes on the ledger and the trial is judged on the next step (below). So
        // is a retry without the correction's.
        guard_.observe_catch_up(drafted, tokens, units, context);
        trial_caught_up_ = guard_trial_;
        plain_streak_ = 0;
      } else {
        if (usual_width) {
          guard_.observe(drafted, tokens, units, context);
        } else {
          // No sample, but time: the ledger's share grows with every plain step. (Counted
          // only at the drafting steps' width, a decoder in service stopped for good: a trial
          // in a batch's tail, 3 sequences drafting, left the ledger at -0.04 plain steps, and
          // the next batches' 400 plain steps of 8 sequences never let it afford another, on
          // the example GPT at B = 8, greedy, where K = 8 ran at 1.3-1.5x of plain batched
          // decoding.)
          guard_.elapse(units);
        }
        plain_streak_ = plain_step ? plain_streak_ + 1 : 0;
        trial_caught_up_ = false;
      }
      guard_trial_ = false;
    }
    // Both sides at context 0 (plain_growth): the plain samples are mostly early ones and the
    // drafting samples come from all along a generation, so a step's growth with its context
    // would read as drafting's cost (a decoder in service: the correction read 1.9 at the
    // start of its second batch of f16 B = 8, all of it context, and the plan ran plain).
    seconds /= 1.0 + options_.plain_growth * static_cast<double>(context);
    using Costs = detail::MeasuredCosts;
    drafting_streak_ = plain_step ? 0 : drafting_streak_ + 1;
    if (drafting_streak_ >= static_cast<std::size_t>(kMaxCorrectionSamples)) {
      correction_wait_ = kFirstCorrectionWait;
    }
    if (retry) return;
    if (plain_step) {
      if (usual_width) {
        plain_per_unit_ = Costs::smoothed(plain_per_unit_, seconds / plain_cost_, plain_samples_);
        plain_samples_ = std::min(plain_samples_ + 1.0, kMaxCorrectionSamples);
      }
    } else {
      const double predicted = target_cost_ + draft_cost_ + switch_cost(rows_);
      drafting_per_unit_ =
          Costs::smoothed(drafting_per_unit_, seconds / predicted, drafting_samples_);
      drafting_samples_ = std::min(drafting_samples_ + 1.0, kMaxCorrectionSamples);
    }
    if (plain_samples_ >= kCorrectionSamples && drafting_samples_ >= kCorrectionSamples &&
        plain_per_unit_ > 0) {
      correction_ = std::clamp(drafting_per_unit_ / plain_per_unit_, 1.0, kMaxCorrection);
    }
  }
  /// \brief A step not observed (one that read a prompt, the target's or a draft's: its calls
  /// say nothing about a step's cost) was made: the plain step after it is no steady sample
  /// for the guard either.
  void skip_step() noexcept {
    guard_.unobserved_round();
    correction_retry_ = false;
  }
  /// \brief Whether the guard finds the recent drafting steps losing to plain ones.
  [[nodiscard]] bool drafting_loses() const noexcept { return guard_.drafting_loses(); }
  /// \brief The correction observe_step applies to drafting's costs (1: none).
  [[nodiscard]] double correction() const noexcept { return correction_; }

  /// \name Measured costs (ignored with fixed curves, but for the target call's time, which
  /// observe_step reads with BatchGoodputOptions::plain_step_costs)
  /// \{
  void observe_target_call(std::size_t rows, double seconds) noexcept {
    last_call_seconds_ = seconds;  // observe_step's
    if (options_.fixed_costs() || rows == 0) return;
    target_measured_.observe(rows - 1, -1.0, seconds);
    refresh_costs();
  }
  void observe_draft_call(std::size_t rows, double seconds) noexcept {
    if (options_.fixed_costs() || rows == 0) return;
    draft_measured_.observe(rows - 1, -1.0, seconds);
    draft_seen_ = true;
    refresh_costs();
  }
  /// \}

  [[nodiscard]] const BatchGoodputOptions& options() const noexcept { return options_; }
  /// \brief The target curve in use: [n - 1] = T(n).
  [[nodiscard]] std::span<const double> target_costs() const noexcept { return target_table_; }
  /// \brief The draft curve in use: [n - 1] = D(n).
  [[nodiscard]] std::span<const double> draft_costs() const noexcept { return draft_table_; }

 private:
  struct Entry {
    bool planned = false;
    bool probe_due = false;
    bool probing = false;
    std::size_t plain_steps = 0;  // since it last drafted (> 0: its draft catches up)
    double optimistic = 0;
    std::size_t limit = 0;
    std::size_t length = 0;  // the plan's (a fixed sequence's: its own)
  };
  struct Candidate {
    double survival = 0;  // P_{s,i}: what one more row of sequence s is worth, in tokens
    std::size_t sequence = 0;
    std::size_t index = 0;  // i - 1
  };

  static constexpr std::size_t kAll = std::numeric_limits<std::size_t>::max();
  struct Best {
    double rate = 0;
    std::size_t cap = 0;    // planned lengths at most this
    std::size_t taken = 0;  // the first `taken` candidates under the cap
  };

  /// Starts the step over with every planned sequence plain (fixed ones at their lengths),
  /// then takes the candidates under `cap` in order, up to `count` of them, and leaves the step
  /// at the prefix taken. With `best`, every prefix (the plain step included) is evaluated and
  /// the best so far kept in *best.
  void walk(std::size_t cap, std::size_t count, Best* best) {
    std::fill(draft_rows_.begin(), draft_rows_.end(), std::size_t{0});
    std::fill(sequences_at_rows_.begin(), sequences_at_rows_.end(), std::size_t{0});
    tokens_ = 0;
    rows_ = 0;
    target_cost_ = 0;
    draft_cost_ = 0;
    threshold_ = 1.0;
    for (Entry& entry : sequences_) {
      if (entry.planned) entry.length = 0;
      entry.probing = false;
      tokens_ += 1.0;  // a fixed sequence's drafted tokens are its policy's business
      rows_ += entry.length + 1;
      count_rows(entry.length + 1, +1);
      if (!shared_target_) target_cost_ += target_cost(entry.length + 1);
      for (std::size_t k = 1; k <= entry.length; ++k) draft_cost_ += add_draft_row(k);
    }
    if (shared_target_) target_cost_ = shared_call_cost(rows_);
    if (settled_plain_step()) target_cost_ = std::min(target_cost_, settled_plain_cost());
    // The step without planned drafting: what the correction scales from.
    plain_cost_ = target_cost_ + draft_cost_ + switch_cost(rows_);
    if (best != nullptr && rate() > best->rate * (1 + kTieTolerance)) *best = {rate(), 0, 0};
    std::size_t taken = 0;
    for (const Candidate& candidate : candidates_) {
      if (taken == count) break;
      if (candidate.index >= cap) continue;
      Entry& entry = sequences_[candidate.sequence];
      tokens_ += candidate.survival;
      count_rows(entry.length + 1, -1);
      count_rows(entry.length + 2, +1);
      if (shared_target_) {
        target_cost_ = shared_call_cost(rows_ + 1);
      } else {
        target_cost_ += target_cost(entry.length + 2) - target_cost(entry.length + 1);
      }
      ++rows_;
      ++entry.length;
      draft_cost_ += add_draft_row(entry.length) + resume_cost(entry);
      threshold_ = candidate.survival;
      ++taken;
      if (best != nullptr && rate() > best->rate * (1 + kTieTolerance)) {
        *best = {rate(), cap, taken};
      }
    }
  }

  /// Leaves the step at the best prefix of the candidates (over the caps, see solve()).
  void walk_best(std::size_t longest) {
    Best best;
    for (std::size_t cap = 1; cap < longest; cap *= 2) walk(cap, kAll, &best);
    if (longest > 0) walk(longest, kAll, &best);
    walk(best.cap, best.taken, nullptr);
  }

  /// A way back from the correction, which holds while the steps are plain (observe_step):
  /// when it alone keeps the plan plain, after correction_wait_ plain steps, with the guard
  /// having judged drafting and not finding it losing, the plan is taken without it, and the
  /// correction is formed again from the drafting steps after it (against the plain steps'
  /// as they were). The wait doubles with each retry, and starts over once the plan has
  /// drafted kMaxCorrectionSamples steps in a row. (Without it, a decoder kept in service whose
  /// correction had read the growth of its steps with their context as drafting's cost ran
  /// plain for all 593 observed steps of its next three batches, on the shipped pair's f16
  /// weights at B = 8, where a fresh decoder per batch drafted at 1.24-1.31x of plain batched
  /// decoding.)
  ///
  /// While drafting loses, the guard's trial (guard_allows) is such a retry: a trial of the
  /// plan that the correction holds plain could never come, and the guard's verdict would
  /// stand for good. (A decoder kept in service, f16 B = 8 at T = 1: drafting lost late in its
  /// sixth batch, rightly, and the correction, 1.77, held every later batch plain.)
  void retry_without_correction(std::size_t longest) {
    if (!options_.guarding() || !(correction_ > 1) || !guard_.has_verdict()) return;
    const bool due = guard_.drafting_loses()
                         ? plain_streak_ >= guard_.trial_wait() && guard_.affords_trial()
                         : plain_streak_ >= correction_wait_;
    if (!due) return;
    const double held = std::exchange(correction_, 1.0);
    walk_best(longest);
    // Plain without it too: not the correction's doing. A trial whose catch-up the ledger
    // cannot pay waits (guard_allows).
    if (rows_ == plain_rows()) {
      correction_ = held;
      return;
    }
    if (guard_.drafting_loses() && !guard_.affords_trial(trial_catch_up_units())) {
      correction_ = held;
      walk_best(longest);  // the plan with it: plain
      return;
    }
    drafting_per_unit_ = 0;
    drafting_samples_ = 0;
    correction_retry_ = true;  // its step pays the drafts' catch-up: no sample (observe_step)
    if (!guard_.drafting_loses()) {
      correction_wait_ = std::min(2 * correction_wait_, kMaxCorrectionWait);
    }
  }

  /// The m up to its limit for which `entry` (plain in the plan) drafting m tokens, each
  /// accepted at its optimistic rate, gives the step its best rate, if that beats the plan's
  /// rate by kProbeMargin (its cost above the plan's scaled by the correction as every plan's
  /// is, cost()); 0 if no m does.
  ///
  /// Why a margin: a probe is the step's dearest kind of row. Its sequence's draft catches up
  /// on every token the plain steps emitted, and both models meet a call shape they have not
  /// run for a while; the optimistic acceptance is an upper estimate already. On the shipped
  /// pair's Q8_0 weights through llama.cpp at B = 2 .. 8, a step of every sequence probing one
  /// token took 2-2.6 plain steps for 1.9-2 tokens per sequence, where the curves called the
  /// best case at the optimistic acceptance a 2.5 % gain (B = 8): six such steps in a 200-token
  /// run cost 3-6 % of plain batched decoding's speed (0.94-0.97x). A sequence whose drafting
  /// pays as the batch plans it needs no probe; a probe only reopens drafting the estimates
  /// have written off, and that is worth it where the best case is a clear gain.
  [[nodiscard]] std::size_t optimistic_length(const Entry& entry) const noexcept {
    double tokens = tokens_, survival = 1;
    double best_rate = rate() * (1 + kProbeMargin);
    std::size_t best = 0;
    for (std::size_t m = 1; m <= entry.limit; ++m) {
      tokens += (survival *= entry.optimistic);
      const double step_rate = tokens / probe_step_cost(entry, m);
      if (step_rate > best_rate) {
        best_rate = step_rate;
        best = m;
      }
    }
    return best;
  }
  /// The step's cost (cost()) with `entry`, plain in the plan, drafting m tokens.
  [[nodiscard]] double probe_step_cost(const Entry& entry, std::size_t m) const noexcept {
    double draft = draft_cost_ + resume_cost(entry);
    for (std::size_t k = 1; k <= m; ++k) draft += draft_row_cost(k);
    // (With equal micro-batches: its m rows above the others' as one more pass, at most.)
    const double target = !shared_target_  ? target_cost_ + target_cost(m + 1) - target_cost(1)
                          : micro_batches_ ? shared_call_cost(rows_) + target_cost(m)
                                           : target_cost(rows_ + m);
    return corrected(target + draft + switch_cost(rows_ + m));
  }

  /// Whether the step (as walked) is plain for every sequence and priced as plain decoding
  /// runs it: one shared call, BatchGoodputOptions::plain_step_costs given.
  [[nodiscard]] bool settled_plain_step() const noexcept {
    return shared_target_ && rows_ == sequences_.size() && !options_.plain_step_costs.empty();
  }
  /// That step's settled call: BatchGoodputOptions::plain_step_costs at its rows, or T at them
  /// where that is lower (a run of plain calls timed above the same call among other shapes
  /// was timed in a slow moment; the guard caps a plain step's call at the price the plan
  /// gives it, observe_step). (On the shipped pair's Q8_0 weights at B = 2, a process that
  /// timed its run of plain calls at 1.28 ms and the call among other shapes at 1.12 ms drafted
  /// one token per sequence nearly every step, at 0.88 of plain batched decoding.)
  [[nodiscard]] double settled_plain_cost() const noexcept {
    return std::min(at(options_.plain_step_costs, rows_), target_cost(rows_));
  }

  /// The step's rows with nothing planned drafted.
  [[nodiscard]] std::size_t plain_rows() const noexcept {
    std::size_t rows = 0;
    for (const Entry& entry : sequences_) rows += entry.planned ? 1 : entry.length + 1;
    return rows;
  }

  /// Whether a step that drafts may (plain_guard): not before a plain step was timed, nor
  /// while drafting loses, except for a trial of the plan (not of probes alone: the estimates
  /// expect those to lose, as GoodputDraftLength's guard does) after the guard's trial_wait()
  /// plain steps that the ledger affords. (With probes as trials, on the shipped pair's Q8_0
  /// weights at B = 1 a plan that ran 187 of 193 steps plain lost 8 % to plain batched
  /// decoding: each probe paid the draft's catch-up on the tokens of the plain steps before
  /// it, 0.6-2 ms against a 0.55 ms plain step.) A trial is two steps: the first pays the
  /// drafts' catch-up, charged to the ledger (DraftingGuard::observe_catch_up), the second is
  /// judged; the drafting it reopens is still the trial's until it holds (DraftingGuard).
  [[nodiscard]] bool guard_allows(bool probes_only) noexcept {
    if (guard_.needs_plain_steps()) return false;
    if (!guard_.drafting_loses()) return true;
    if (probes_only) return false;
    // A trial's second step, the one it is judged on, needs no wait: the catch-up is paid.
    // The first needs the ledger to afford that catch-up.
    if (!trial_caught_up_ &&
        (plain_streak_ < guard_.trial_wait() || !guard_.affords_trial(trial_catch_up_units()))) {
      return false;
    }
    guard_trial_ = true;
    return true;
  }

  /// What a token costs the draft when it catches up (BatchGoodputOptions::draft_catch_up_cost,
  /// or one one-sequence draft call where not known).
  [[nodiscard]] double catch_up_cost() const noexcept {
    return options_.draft_catch_up_cost > 0 ? options_.draft_catch_up_cost : at(draft_table_, 1);
  }
  /// What the drafts' catch-up costs a trial of the plan after plain steps, in plain steps of
  /// the plan's price: every sequence that drafts again reads the tokens of its plain steps
  /// since it last drafted (a sequence that joined since, those since it joined: its prompt is
  /// read in a step that is not observed). The ledger must afford it before the trial: it
  /// grows with the wait, and a trial late in a batch can never earn it back. (On
  /// the shipped pair's f16 weights through llama.cpp at B = 4, fresh decoders: a trial in a
  /// batch's tail, 3 sequences after 170 plain steps, took 11.5 ms for the drafts' catch-up and
  /// 16.2 ms in all, for 8 tokens where a plain step of 2.0 ms gives 3, with 2.7 plain steps
  /// left in the ledger; such trials cost about half of the 5 % by which the goodput arm fell
  /// below plain batched decoding there.)
  [[nodiscard]] double trial_catch_up_units() const noexcept {
    if (!(plain_cost_ > 0)) return 0.0;
    std::size_t tokens = 0;
    for (const Entry& entry : sequences_) tokens += entry.length > 0 ? entry.plain_steps : 0;
    return static_cast<double>(tokens) * catch_up_cost() / plain_cost_;
  }

  /// What a resuming sequence's first drafted row adds (see add_planned).
  [[nodiscard]] double resume_cost(const Entry& entry) const noexcept {
    return entry.plain_steps > 0 && entry.length <= 1 ? at(draft_table_, 1) : 0.0;
  }

  void count_rows(std::size_t rows, int change) noexcept {
    if (rows < sequences_at_rows_.size()) {
      sequences_at_rows_[rows] =
          change > 0 ? sequences_at_rows_[rows] + 1 : sequences_at_rows_[rows] - 1;
    }
  }
  /// The shared target call at `rows` rows in total, distributed as sequences_at_rows_ says:
  /// T(rows), or with equal micro-batches one pass per run of row levels that the same
  /// sequences reach (level l is reached by the sequences with at least l rows).
  [[nodiscard]] double shared_call_cost(std::size_t rows) const noexcept {
    if (!micro_batches_ || sequences_at_rows_.empty()) return target_cost(rows);
    double cost = 0;
    std::size_t reaching = 0, run = 0, run_reaching = 0;
    for (std::size_t level = sequences_at_rows_.size() - 1; level >= 1; --level) {
      reaching += sequences_at_rows_[level];
      if (reaching != run_reaching && run > 0) {
        cost += target_cost(run * run_reaching);
        run = 0;
      }
      run_reaching = reaching;
      if (reaching > 0) ++run;
    }
    if (run > 0) cost += target_cost(run * run_reaching);
    return cost;
  }

  /// The switch cost spread over the kAmortizedSteps steps a plan usually lasts, as the
  /// single-sequence policy does: charged in full it made a plan stick to the last step's
  /// rows (on the example GPT, B = 1, greedy: 10 rows a step at 0.61 acceptance, 0.83 of the
  /// fixed K = 8 chain, where the plan drafted 6 at 0.84 without it).
  [[nodiscard]] double switch_cost(std::size_t rows) const noexcept {
    return last_rows_ != 0 && rows != last_rows_
               ? options_.target_switch_cost / static_cast<double>(kAmortizedSteps)
               : 0.0;
  }
  /// The step's cost: the curves' prediction, its part above the plain step's scaled by the
  /// correction (observe_step).
  [[nodiscard]] double cost() const noexcept {
    return corrected(target_cost_ + draft_cost_ + switch_cost(rows_));
  }
  /// A predicted step cost with its part above the plain step scaled by the correction. A
  /// step the curves price below the plain step (a dip) keeps its price: the correction is
  /// what drafting adds beyond its calls, and scaled, a saving would grow with it. (On the
  /// example GPT at B = 8 its curves timed 9 rows 3-13 % below the 8 of a plain step; with
  /// the correction at 1.14-1.18, a one-token step was priced the lower the more drafting
  /// steps ran over their prediction, and a decoder kept in service ran that plan, and its
  /// losing trials, where K = 8 gained 5-17 %.)
  [[nodiscard]] double corrected(double predicted) const noexcept {
    return predicted < plain_cost_ ? predicted
                                   : plain_cost_ + correction_ * (predicted - plain_cost_);
  }
  [[nodiscard]] double rate() const noexcept { return tokens_ / cost(); }

  /// A curve at n >= 1 entries, continued past its end along its last step.
  [[nodiscard]] static double at(std::span<const double> curve, std::size_t n) noexcept {
    if (n == 0) return 0.0;
    if (n <= curve.size()) return curve[n - 1];
    const double last = curve.back();
    const double step = curve.size() >= 2 ? std::max(0.0, last - curve[curve.size() - 2]) : last;
    return last + step * static_cast<double>(n - curve.size());
  }
  [[nodiscard]] double target_cost(std::size_t rows) const noexcept {
    return at(target_table_, rows);
  }
  /// What the k-th draft row of a sequence adds: with shared draft calls, one more row in the
  /// k-th call (a new call if it is its first row); else one call of its own.
  [[nodiscard]] double draft_row_cost(std::size_t k) const noexcept {
    if (!shared_draft_) return at(draft_table_, 1);
    const std::size_t before = k < draft_rows_.size() ? draft_rows_[k] : 0;
    return at(draft_table_, before + 1) - at(draft_table_, before);
  }
  /// draft_row_cost(k), then counts the row.
  double add_draft_row(std::size_t k) noexcept {
    const double cost = draft_row_cost(k);
    if (k < draft_rows_.size()) ++draft_rows_[k];
    return cost;
  }

  void refresh_costs() noexcept {
    if (options_.fixed_costs()) {
      for (std::size_t n = 1; n <= target_table_.size(); ++n) {
        target_table_[n - 1] = at(options_.target_call_costs, n);
      }
      for (std::size_t n = 1; n <= draft_table_.size(); ++n) {
        draft_table_[n - 1] = at(options_.draft_call_costs, n);
      }
      return;
    }
    // Until measured: unit target calls, 5 % more per row, and a draft call at 5 % of a
    // target call of as many rows (the measured curves replace them as calls are timed).
    target_measured_.fill_verify(target_table_);
    if (draft_seen_) {
      draft_measured_.fill_verify(draft_table_);
    } else {
      for (std::size_t n = 1; n <= draft_table_.size(); ++n) {
        draft_table_[n - 1] = kPriorDraftShare * at(target_table_, n);
      }
    }
  }

  static constexpr double kTieTolerance = 1e-9;
  static constexpr double kProbeMargin = 0.1;  // optimistic_length
  static constexpr std::size_t kAmortizedSteps = 4;
  static constexpr double kPriorDraftShare = 0.05;
  BatchGoodputOptions options_{};
  bool shared_target_ = true;
  bool shared_draft_ = true;
  bool micro_batches_ = false;
  std::vector<std::size_t> sequences_at_rows_;  // [r]: sequences with r rows in the walk's step
  std::vector<Entry> sequences_;
  std::vector<Candidate> candidates_;
  std::vector<std::size_t> draft_rows_;  // [k]: sequences drafting a k-th token this step
  std::vector<double> target_table_;     // [n - 1] = T(n)
  std::vector<double> draft_table_;      // [n - 1] = D(n)
  detail::MeasuredCosts target_measured_, draft_measured_;
  bool draft_seen_ = false;
  double tokens_ = 0, target_cost_ = 0, draft_cost_ = 0, threshold_ = 1;
  std::size_t rows_ = 0;
  std::size_t last_rows_ = 0;     // the last target call's (0: none yet)
  double plain_cost_ = 0;         // the walk's step with nothing planned drafted
  double last_call_seconds_ = 0;  // the step's target call (observe_target_call; 0: none)
  static constexpr double kCorrectionSamples = 4, kMaxCorrectionSamples = 16;
  static constexpr double kMaxCorrection = 3;
  double plain_per_unit_ = 0, plain_samples_ = 0;
  double drafting_per_unit_ = 0, drafting_samples_ = 0;
  double correction_ = 1;
  // plain_guard (file comment), as GoodputDraftLength's
  detail::DraftingGuard guard_{};
  std::size_t plain_streak_ = 0;  // consecutive observed plain steps
  bool guard_trial_ = false;      // the step planned is a trial (guard_allows)
  // retry_without_correction
  static constexpr std::size_t kFirstCorrectionWait = 16, kMaxCorrectionWait = 256;
  std::size_t correction_wait_ = kFirstCorrectionWait;
  std::size_t drafting_streak_ = 0;  // consecutive observed steps that drafted
  bool correction_retry_ = false;    // the step planned is a retry
  std::size_t drafting_width_ = 0;   // the sequences of the last drafting step sampled
  bool trial_caught_up_ = false;     // a trial's first step (its drafts' catch-up) was observed
};

}  // namespace specdec

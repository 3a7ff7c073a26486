#pragma once
/// \file
/// \brief measure_batch_call_costs: measure_call_costs for a batch. Times a batched target's
/// call of n rows in total, over up to `sequences` sequences (n = 1 .. sequences x
/// (max_draft + 1)), and a batched draft's call advancing r sequences (r = 1 .. sequences),
/// and hands both curves to the batch's goodput plan as fixed costs
/// (BatchCallCosts::goodput_options, batch/goodput.hpp).
///
/// Why before decoding: online, the plan learns T(n) only at the row counts the steps happen
/// to use, and a batch's curve spans hundreds of row counts (B = 32 sequences drafting 8
/// tokens each is a 288-row call), with the steps and dips of the engine's kernels where the
/// rows outgrow a tile. Measured once at load time, the whole curve is known, and the draft
/// lengths no longer depend on the timings of the calls the plan learns from (the plain guard
/// still judges the steps by their wall times, BatchGoodputOptions::plain_guard).
///
/// Row counts up to 32 are all timed; above, every eighth or so (n, then n + n / 8), and the
/// curve between two timed counts is the line through them: a call of a few hundred rows
/// costs tens of small ones, and timing every count of a 32-sequence batch would take minutes.
/// A call of n rows is timed in the shape the plan prices it at (BatchCallShape, from the
/// target's batch_call_shape(); one_pass without it):
///  - one pass: over c = min(n, `sequences`) sequences, n / c rows each and one more to the
///    first n mod c. A full batch's step has every sequence in its call, and on an engine
///    whose call has a cost per sequence it spans, fewer sequences cost less for the same
///    rows. (Timed over the largest divisor of n instead, the example GPT's curve at B = 8 had
///    9 rows, as 3 x 3, at 2.39 ms below 8 x 1 at 2.74 ms; the plan drafted one token a step
///    for a 26 % gain, the steps took 3.1-3.6 ms against 3.1 ms plain, and the guard, rightly,
///    stopped drafting where K = 8 ran at 1.05-1.17x of plain batched decoding.)
///  - equal micro-batches: the same rows to each of c sequences, c the largest divisor of n up
///    to `sequences` (one micro-batch, what the plan prices each pass at), or where no divisor
///    fits the context, as for one pass.
/// Each point is the lower quartile of `repeats` calls (a call preempted for a scheduler slice
/// only ever adds time), the row counts interleaved, every shape called twice in a row and the
/// second call timed (an engine may prepare each call shape anew, and drafting steps change
/// shapes as these calls do), as measure_call_costs does; the first, minus the
/// second, gives the cost of a change of shape (BatchCallCosts::target_switch_seconds). Every
/// sequence's rows follow its own positions after the last call's, walked through the second
/// half of `context` again and again.
///
/// Then plain steps of b = 1 .. `sequences` sequences (every b up to 8, above every fourth or so),
/// each b in `repeats` runs of calls as plain batched decoding makes them (the quietest run's
/// median), give BatchCallCosts::plain_seconds: a drafting step's calls never settle so, and a
/// plain step priced among them looked up to 35 % dearer than it runs
/// (BatchGoodputOptions::plain_step_costs). A draft with release() is timed reading 16 tokens it
/// has not read in one call, against a step of one: BatchCallCosts::draft_catch_up_seconds, the
/// price of resuming drafting after plain steps (BatchGoodputOptions::draft_catch_up_cost; through
/// llama.cpp the shipped draft reads such tokens at 0.02 ms each here, a third to a half of a
/// one-row call, and at 0.04-0.06 ms after 100-200 tokens of context: a lower bound late in a long
/// generation). Last, one sequence's plain steps through the whole of `context` give
/// BatchCallCosts::plain_growth, as measure_call_costs does: the guard judges each step against a
/// plain step at the step's context (BatchGoodputOptions::plain_growth). The sequences use ids
/// first_id .. first_id + sequences - 1 and are released from both models (release(id), if they
/// have it) at the end, so a decoder may use those ids afterwards. A measurement tool: it
/// allocates, and it calls the models many times.

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <span>
#include <vector>

#include "specdec/batch/draft.hpp"
#include "specdec/batch/goodput.hpp"
#include "specdec/batch/target.hpp"
#include "specdec/detail/error.hpp"
#include "specdec/measure/call_costs.hpp"
#include "specdec/types.hpp"

namespace specdec {

namespace detail {

/// [x - 1] for x = 1 .. timed.back(): at x = timed[i] (ascending, timed[0] = 1) the lower
/// quartile of times[i] (the median with `median`; reordered), between two timed counts the
/// line through them.
[[nodiscard]] inline std::vector<double> curve_through(const std::vector<std::size_t>& timed,
                                                       std::vector<std::vector<double>>& times,
                                                       bool median = false) {
  std::vector<double> curve(timed.back());
  for (std::size_t i = 0; i < timed.size(); ++i) {
    curve[timed[i] - 1] =
        std::max(median ? median_of(times[i]) : lower_quartile_of(times[i]), 1e-9);
    if (i == 0) continue;
    const double low = curve[timed[i - 1] - 1], high = curve[timed[i] - 1];
    for (std::size_t x = timed[i - 1] + 1; x < timed[i]; ++x) {
      const double t =
          static_cast<double>(x - timed[i - 1]) / static_cast<double>(timed[i] - timed[i - 1]);
      curve[x - 1] = low + t * (high - low);
    }
  }
  return curve;
}

}  // namespace detail

/// \brief A batched pair's measured call costs, in seconds.
struct BatchCallCosts {
  std::vector<double> target_seconds;  ///< [n - 1]: one target call of n rows in total
  std::vector<double> draft_seconds;   ///< [r - 1]: one draft call advancing r sequences
  /// [b - 1]: a plain step of b sequences (one row each) in a run of plain steps, the
  /// quietest run's median (BatchGoodputOptions::plain_step_costs)
  std::vector<double> plain_seconds;
  /// The extra time of a target call whose total rows differ from the previous call's (the
  /// median over the timed row counts of the quartiles' difference; >= 0)
  double target_switch_seconds = 0;
  /// What one token costs the draft when it catches up on tokens it has not read (a draft
  /// call reading 16 more than a step does, less that step, per token; 0 when not timed: a
  /// draft without release(), or a context too short)
  /// (BatchGoodputOptions::draft_catch_up_cost)
  double draft_catch_up_seconds = 0;
  /// How one sequence's plain step grows per token of context, relative to its time at context
  /// 0 (BatchGoodputOptions::plain_growth; 0 when the context was too short to tell)
  double plain_growth = 0;
  /// The mean context (tokens per sequence) of the plain steps timed for plain_seconds
  /// (BatchGoodputOptions::plain_step_context)
  double plain_context = 0;

  /// \brief T(n) / T(1), n = 1 .. target_seconds.size().
  [[nodiscard]] std::vector<double> target_ratios() const {
    std::vector<double> ratios(target_seconds);
    for (double& ratio : ratios) ratio /= target_seconds.front();
    return ratios;
  }

  /// \brief `base` with these curves as its fixed costs (BatchGoodputOptions::fixed_costs);
  /// its probe interval is kept.
  /// \throws std::invalid_argument when a curve is empty or not positive.
  [[nodiscard]] BatchGoodputOptions goodput_options(BatchGoodputOptions base = {}) const {
    base.target_call_costs = target_seconds;
    base.draft_call_costs = draft_seconds;
    base.plain_step_costs = plain_seconds;
    base.target_switch_cost = target_switch_seconds;
    base.plain_growth = plain_growth;
    base.plain_step_context = plain_context;
    base.draft_catch_up_cost = draft_catch_up_seconds;
    base.measured_costs = true;  // plain_guard applies: these curves are timings anyway
    if (target_seconds.empty() || draft_seconds.empty()) {
      detail::throw_invalid_argument(
          "BatchCallCosts::goodput_options: no measured calls; expected the result of "
          "measure_batch_call_costs()");
    }
    base.validate();
    return base;
  }
};

/// \brief Times `target.score_batch` and `draft.draft_batch` (see the file comment), after one
/// untimed warm-up call of each shape's largest. Throws std::invalid_argument for sequences =
/// 0, repeats = 0, or a context too short for max_draft + 1 rows per sequence in its second
/// half (at least 2 (max_draft + 1) tokens); a model's own exception passes through (the
/// sequences are released first).
template <BatchedDraftModel Draft, BatchedTargetModel Target>
[[nodiscard]] BatchCallCosts measure_batch_call_costs(Draft& draft, Target& target,
                                                      std::span<const token_t> context,
                                                      std::size_t sequences, std::size_t max_draft,
                                                      std::size_t repeats = 5,
                                                      sequence_id first_id = 0) {
  const std::size_t per_sequence = max_draft + 1;
  if (sequences == 0 || repeats == 0 || context.size() < 2 * per_sequence) {
    detail::throw_invalid_argument(
        "measure_batch_call_costs: ", sequences, " sequences, context of ", context.size(),
        " tokens, max_draft = ", max_draft, ", repeats = ", repeats,
        "; expected sequences >= 1, repeats >= 1 and a context of at least 2 (max_draft + 1) "
        "tokens");
  }
  const auto release_all = [&] {
    for (std::size_t s = 0; s < sequences; ++s) {
      if constexpr (detail::HasRelease<Target>) target.release(first_id + s);
      if constexpr (detail::HasRelease<Draft>) draft.release(first_id + s);
    }
  };
  using clock = std::chrono::steady_clock;
  constexpr std::size_t kAllRowsUpTo = 32;
  const std::size_t max_rows = sequences * per_sequence;
  const std::size_t lowest = std::min(context.size() / 2, context.size() - per_sequence);
  std::vector<std::size_t> target_position(sequences, lowest);
  std::vector<std::size_t> draft_position(sequences, lowest);
  std::vector<ScoreRequest> score(sequences);
  std::vector<DraftStepRequest> step(sequences);

  const bool equal_micro_batches = detail::cuts_equal_micro_batches(target);
  // One target call of n rows in total, shaped as the file comment says; returns its seconds.
  const auto target_call = [&](std::size_t n) {
    std::size_t in_call = std::min(n, sequences);
    for (std::size_t c = in_call; equal_micro_batches && c >= 1; --c) {
      if (n % c == 0 && n / c <= context.size() - lowest) {
        in_call = c;
        break;
      }
    }
    for (std::size_t s = 0; s < in_call; ++s) {
      const std::size_t rows = n / in_call + (s < n % in_call ? 1 : 0);
      std::size_t& position = target_position[s];
      if (position + rows > context.size()) position = lowest;
      score[s] = ScoreRequest{first_id + s, context.first(position + rows), position + 1, rows};
      position += rows;
    }
    const auto start = clock::now();
    (void)target.score_batch(std::span<const ScoreRequest>(score.data(), in_call));
    return std::chrono::duration<double>(clock::now() - start).count();
  };
  // One draft call advancing r sequences by a token each; returns its seconds.
  const auto draft_call = [&](std::size_t r) {
    for (std::size_t s = 0; s < r; ++s) {
      std::size_t& position = draft_position[s];
      if (position + 1 > context.size()) position = lowest;
      step[s] = DraftStepRequest{first_id + s, context.first(position + 1)};
      ++position;
    }
    const auto start = clock::now();
    (void)draft.draft_batch(std::span<const DraftStepRequest>(step.data(), r));
    return std::chrono::duration<double>(clock::now() - start).count();
  };

  BatchCallCosts costs;
  try {
    // Warm-up: every sequence's prompt read (positions up to `lowest`), every shape allocated.
    for (std::size_t s = 0; s < sequences; ++s) {
      score[s] = ScoreRequest{first_id + s, context.first(lowest), lowest, 1};
      step[s] = DraftStepRequest{first_id + s, context.first(lowest)};
    }
    (void)target.score_batch(std::span<const ScoreRequest>(score));
    (void)draft.draft_batch(std::span<const DraftStepRequest>(step));
    (void)target_call(max_rows);
    std::vector<std::size_t> timed;  // the row counts timed
    for (std::size_t n = 1; n <= max_rows; n += n < kAllRowsUpTo ? 1 : n / 8) timed.push_back(n);
    if (timed.back() != max_rows) timed.push_back(max_rows);
    std::vector<std::vector<double>> target_times(timed.size(), std::vector<double>(repeats));
    std::vector<std::vector<double>> changed_times(timed.size(), std::vector<double>(repeats));
    std::vector<std::vector<double>> draft_times(sequences, std::vector<double>(repeats));
    for (std::size_t repeat = 0; repeat < repeats; ++repeat) {
      for (std::size_t i = 0; i < timed.size(); ++i) {
        changed_times[i][repeat] = target_call(timed[i]);  // after another shape
        target_times[i][repeat] = target_call(timed[i]);
      }
      for (std::size_t r = 1; r <= sequences; ++r) {
        (void)draft_call(r);
        draft_times[r - 1][repeat] = draft_call(r);
      }
    }
    std::vector<double> switches;
    for (std::size_t i = 0; i < timed.size(); ++i) {
      switches.push_back(detail::lower_quartile_of(changed_times[i]) -
                         detail::lower_quartile_of(target_times[i]));
    }
    costs.target_switch_seconds = std::max(0.0, detail::median_of(switches));
    costs.target_seconds = detail::curve_through(timed, target_times);
    for (auto& times : draft_times) {
      costs.draft_seconds.push_back(std::max(detail::lower_quartile_of(times), 1e-9));
    }
    // The draft's catch-up: sequence 0 read again up to `lowest` (untimed), then a step of one
    // token and a call reading kCatchUpTokens more, as a draft resuming after plain steps does.
    constexpr std::size_t kCatchUpTokens = 16;
    if constexpr (detail::HasRelease<Draft>) {
      if (lowest + 1 + kCatchUpTokens <= context.size()) {
        std::vector<double> step_times(repeats), catch_up_times(repeats);
        const auto draft_to = [&](std::size_t length) {
          step[0] = DraftStepRequest{first_id, context.first(length)};
          const auto start = clock::now();
          (void)draft.draft_batch(std::span<const DraftStepRequest>(step.data(), 1));
          return std::chrono::duration<double>(clock::now() - start).count();
        };
        for (std::size_t repeat = 0; repeat < repeats; ++repeat) {
          draft.release(first_id);
          (void)draft_to(lowest);
          step_times[repeat] = draft_to(lowest + 1);
          catch_up_times[repeat] = draft_to(lowest + 1 + kCatchUpTokens);
        }
        costs.draft_catch_up_seconds = std::max(0.0, (detail::lower_quartile_of(catch_up_times) -
                                                      detail::lower_quartile_of(step_times)) /
                                                         static_cast<double>(kCatchUpTokens));
      }
    }
    // Plain steps as plain batched decoding runs them: kPlainRun calls of b sequences, one row
    // each, in a row, the last kPlainTimed timed (on llama.cpp's CPU backend a run of 2-row
    // calls after other shapes took ~10 calls to settle, at 0.65 of the first). A run's
    // median, not its lower quartile: the guard compares drafting steps' wall times, not
    // their lower quartiles, with it (docs/llama_cpp.md). The quietest run's: a shared host
    // has slow moments that outlast a run, and a run timed in one priced every plain step of
    // the process above what it ran at. (On the shipped pair's Q8_0 weights at B = 2, three
    // measurements in one process priced the plain step at 1.79, 1.24 and 0.84 ms, where the
    // same process's plain batched decoding ran its steps at 0.70-0.79 ms.)
    constexpr std::size_t kPlainRun = 12, kPlainTimed = 6, kAllWidthsUpTo = 8;
    std::vector<std::size_t> widths;  // the sequence counts timed
    for (std::size_t b = 1; b <= sequences; b += b < kAllWidthsUpTo ? 1 : b / 4) {
      widths.push_back(b);
    }
    if (widths.back() != sequences) widths.push_back(sequences);
    std::vector<std::vector<double>> plain_times(widths.size());  // per width, each run's median
    std::vector<double> run_times(kPlainTimed);
    double contexts = 0;
    std::size_t timed_calls = 0;
    for (std::size_t repeat = 0; repeat < repeats; ++repeat) {
      for (std::size_t i = 0; i < widths.size(); ++i) {
        for (std::size_t call = 0; call < kPlainRun; ++call) {
          const std::size_t before = target_position[0];
          const double seconds = target_call(widths[i]);
          if (call + kPlainTimed >= kPlainRun) {
            run_times[call + kPlainTimed - kPlainRun] = seconds;
            // The call's context: its first sequence's tokens (every sequence walks alike).
            contexts += static_cast<double>(before + 1 > context.size() ? lowest + 1 : before + 1);
            ++timed_calls;
          }
        }
        const double run = detail::median_of(run_times);
        plain_times[i].assign(1, plain_times[i].empty() ? run : std::min(plain_times[i][0], run));
      }
    }
    costs.plain_seconds = detail::curve_through(widths, plain_times, /*median=*/true);
    costs.plain_context = contexts / static_cast<double>(timed_calls);
    costs.plain_growth =
        detail::measure_plain_growth(context.size(), repeats, [&](std::size_t length) {
          score[0] = ScoreRequest{first_id, context.first(length), length, 1};
          (void)target.score_batch(std::span<const ScoreRequest>(score.data(), 1));
        });
  } catch (...) {
    release_all();
    throw;
  }
  release_all();
  return costs;
}

}  // namespace specdec

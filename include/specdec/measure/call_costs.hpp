#pragma once
/// \file
/// \brief measure_call_costs: times a draft / target pair's calls (one draft row; a target
/// call of n rows, n = 1 .. max_rows) and hands the curve to the goodput policy as a fixed cost
/// model (CallCosts::goodput_options).
///
/// Why measure before decoding, when GoodputDraftLength can measure online: online, T_v(n) is
/// learnt only at the row counts the rounds happen to use, a few samples each, on the host's
/// noise; a cost curve that is not a line (a CPU engine's matmul kernels change with the row
/// count: on llama.cpp's CPU backend a 9-row call measured cheaper than an 8-row one, and a
/// 2-row call cost 1.8 one-row calls) then keeps the policy at a draft length whose cost it
/// knows, away from a cheaper one it never tries. A few hundred calls at load time (a fraction
/// of a second for a small model) give the whole curve, and with fixed costs the draft lengths
/// no longer depend on timings: the same seed gives the same tokens.
///
/// Each point is the lower quartile of `repeats` calls, the row counts interleaved (1, 2, ..
/// max_rows, then again) so that a slow drift of the host's load moves every point alike; a
/// call preempted for a scheduler slice only ever adds time. (The median ignored that only
/// while fewer than half the calls were preempted: with the 2-core host's load average at 6,
/// most calls longer than ~1.5 ms were: on the shipped pair the medians of n >= 5 read 15-40
/// one-row calls where the fastest calls read 2-6.) Every row
/// count is called twice in a row and the second call is the one timed as T_v(n): an engine
/// may prepare each call shape anew (llama.cpp reuses its compute graph only while the batch
/// shape stays the same), and plain decoding and a fixed draft length run in that steady
/// state. Timing only calls that followed another shape (as this function did before
/// 2026-12-04) charged the shape change to every point: T_v(1) read 1.20-1.26 times its
/// steady cost on the shipped pair (f16, Q8_0, Q4_0), so every ratio T_v(n)/T_v(1) came out
/// low and plain decoding looked dearer than it is. The first call of each pair, minus the
/// second, measures that shape change: CallCosts::switch_seconds. A measurement tool: it
/// allocates, and it calls the models many times.
///
/// The calls run as decoding rounds do: n - 1 draft calls, then the n-row target call, each
/// on fresh positions after the last round's (the second half of `context`, walked through
/// again and again). Before 2026-12-04 every call recomputed the same last positions of the
/// context and the draft was timed alone: on the shipped pair with Q8_0 weights, under load,
/// that read a draft call at 0.13 of a one-row target call and a 4-row call at 2.25-2.5,
/// where inside decoding a drafted token cost 0.2-0.3 and a 4-row call 2.5-3.5 (the draft's
/// first call of a round catches up on the last round's tokens, on a graph of its own), and
/// the policy drafted 3 tokens a round at 0.74-0.9x of plain decoding.
///
/// Last, plain steps (one-row calls, each after one more token) through the whole of
/// `context`, as plain decoding makes them: how a plain step's time grows with the context
/// (CallCosts::plain_growth), which the plain guard needs because it times plain steps early in
/// a generation and judges drafting rounds all along it. The line is taken beyond `context`
/// where a generation is longer (stepped through 64 tokens of the shipped Q8_0 pair, it read
/// within ~10 % of the line through 230).

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <limits>
#include <span>
#include <vector>

#include "specdec/detail/error.hpp"
#include "specdec/draft_length/goodput.hpp"
#include "specdec/model.hpp"
#include "specdec/types.hpp"

namespace specdec {

/// \brief A pair's measured call costs, in seconds.
struct CallCosts {
  double draft_token_seconds = 0;      ///< one draft call (one row after the context)
  std::vector<double> verify_seconds;  ///< [n - 1]: one target call computing n rows
  /// The extra time of a target call whose row count differs from the previous call's (the
  /// median over n of the quartiles' difference; >= 0)
  double switch_seconds = 0;
  /// How a plain step's time grows per token of context, relative to its time at context 0
  /// (GoodputOptions::plain_growth; 0 when the context was too short to tell)
  double plain_growth = 0;

  /// \brief T_v(n) / T_v(1), n = 1 .. verify_seconds.size().
  [[nodiscard]] std::vector<double> verify_ratios() const {
    std::vector<double> ratios(verify_seconds);
    for (double& ratio : ratios) ratio /= verify_seconds.front();
    return ratios;
  }

  /// \brief `base` with this fixed cost model (in units of a one-row target call), marked as
  /// measured (GoodputOptions::measured_costs: drafting rounds are judged by what they deliver,
  /// plain_guard); base's other fields (forgetting, probe interval, calibration,
  /// correct_costs) are kept.
  [[nodiscard]] GoodputOptions goodput_options(GoodputOptions base = {}) const {
    if (verify_seconds.empty() || !(verify_seconds.front() > 0)) {
      detail::throw_invalid_argument(
          "CallCosts::goodput_options: no measured target call "
          "(verify_seconds is empty or zero); expected the result of "
          "measure_call_costs()");
    }
    base.draft_token_cost = draft_token_seconds / verify_seconds.front();
    base.verify_row_cost = -1;
    base.verify_costs = verify_ratios();
    base.switch_cost = switch_seconds / verify_seconds.front();
    base.plain_growth = plain_growth;
    base.measured_costs = true;  // judged by what decoding delivers: plain_guard
    base.validate();
    return base;
  }
};

namespace detail {

[[nodiscard]] inline double median_of(std::vector<double>& values) {
  const auto middle = values.begin() + static_cast<std::ptrdiff_t>(values.size() / 2);
  std::nth_element(values.begin(), middle, values.end());
  return *middle;
}

/// The lower quartile (the value at index size / 4 of the sorted values).
[[nodiscard]] inline double lower_quartile_of(std::vector<double>& values) {
  const auto quarter = values.begin() + static_cast<std::ptrdiff_t>(values.size() / 4);
  std::nth_element(values.begin(), quarter, values.end());
  return *quarter;
}

/// The growth per token of context, relative to the time at context 0, of the least-squares
/// line through the points (contexts[i], seconds[i]); 0 where the line does not describe a cost
/// that grows (a flat or falling line, one through 0 seconds or below before context 0, or
/// fewer than two distinct contexts).
[[nodiscard]] inline double plain_growth_of(std::span<const double> contexts,
                                            std::span<const double> seconds) noexcept {
  const std::size_t points = std::min(contexts.size(), seconds.size());
  if (points < 2) return 0;
  double mean_x = 0, mean_y = 0;
  for (std::size_t i = 0; i < points; ++i) {
    mean_x += contexts[i];
    mean_y += seconds[i];
  }
  mean_x /= static_cast<double>(points);
  mean_y /= static_cast<double>(points);
  double sxx = 0, sxy = 0;
  for (std::size_t i = 0; i < points; ++i) {
    sxx += (contexts[i] - mean_x) * (contexts[i] - mean_x);
    sxy += (contexts[i] - mean_x) * (seconds[i] - mean_y);
  }
  if (!(sxx > 0) || !(sxy > 0)) return 0;
  const double per_token = sxy / sxx;
  const double at_zero = mean_y - per_token * mean_x;
  return at_zero > 0 ? per_token / at_zero : 0;
}

/// CallCosts::plain_growth: plain steps (`step(length)`: one row after the first `length`
/// tokens of a context of `size`) as plain decoding makes them, one token after another from
/// kStart tokens to the end of the context, at most kGrowthRepeats times; each position's
/// fastest step, the first kSettle of each pass left out, the lower quartile of every
/// kWindow positions, and the growth of plain_growth_of's line through those; 0 for a context
/// too short to tell (fewer than kMinWindows windows). measure_call_costs and
/// measure_batch_call_costs (one sequence) share it.
///
/// Why every step, and not two windows of steps (early and late in the context, as before
/// 2026-12-07): the late window followed the call that read the tokens between the two, and
/// through llama.cpp the one-row steps after a call of another shape run slow for about ten
/// calls. On the shipped pair's Q8_0 weights the late window (context 222-229) read 0.67 ms a
/// step where plain decoding ran 0.59-0.61 ms there, and with a 64-token context the line read
/// a growth of 0.0031 per token against 0.0014-0.0015 in plain decoding: a plain step at context
/// 200 was priced a third above its cost, and drafting rounds that lost 9 % to plain decoding
/// over a generation were judged gains.
template <class PlainStep>
[[nodiscard]] double measure_plain_growth(std::size_t size, std::size_t repeats, PlainStep step) {
  constexpr std::size_t kStart = 8, kSettle = 8, kWindow = 8, kMinWindows = 4;
  constexpr std::size_t kGrowthRepeats = 2;
  constexpr std::size_t kFirstTimed = kStart + kSettle + 1;
  if (size < kFirstTimed - 1 + kMinWindows * kWindow) return 0;
  std::vector<double> fastest(size + 1, std::numeric_limits<double>::infinity());
  for (std::size_t repeat = 0; repeat < std::min(repeats, kGrowthRepeats); ++repeat) {
    step(kStart);  // rolls back or reads up to the start
    for (std::size_t length = kStart + 1; length <= size; ++length) {
      const auto start = std::chrono::steady_clock::now();
      step(length);
      const double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      fastest[length] = std::min(fastest[length], seconds);
    }
  }
  std::vector<double> contexts, quartiles, window;
  for (std::size_t first = kFirstTimed; first + kWindow <= size + 1; first += kWindow) {
    window.assign(fastest.begin() + static_cast<std::ptrdiff_t>(first),
                  fastest.begin() + static_cast<std::ptrdiff_t>(first + kWindow));
    // A step of `length` tokens reads the first length - 1 and computes the last one's row.
    contexts.push_back(static_cast<double>(first) + (kWindow - 1) / 2.0 - 1.0);
    quartiles.push_back(lower_quartile_of(window));
  }
  return plain_growth_of(contexts, quartiles);
}

}  // namespace detail

/// \brief Times `draft(context)` and `target(context, n)` for n = 1 .. max_rows, `repeats`
/// times each (see the file comment), after one untimed warm-up call of each.
///
/// `context` stands for the text the pair will decode (a prompt, repeated; the plain steps'
/// growth is timed through all of it); every target call
/// computes the rows of its last n tokens, so it needs max_rows <= context.size(). A model
/// with a KV cache recomputes exactly those rows (the positions before them are kept), which
/// is what a verification call of n rows costs. Throws std::invalid_argument for an empty
/// context, max_rows = 0 or > context.size(), or repeats = 0; a model's own exception passes
/// through.
template <DraftModel Draft, TargetModel Target>
[[nodiscard]] CallCosts measure_call_costs(Draft& draft, Target& target,
                                           std::span<const token_t> context, std::size_t max_rows,
                                           std::size_t repeats = 9) {
  if (context.empty() || max_rows == 0 || max_rows > context.size() || repeats == 0) {
    detail::throw_invalid_argument(
        "measure_call_costs: context of ", context.size(), " tokens, max_rows = ", max_rows,
        ", repeats = ", repeats,
        "; expected a non-empty context, 1 <= max_rows <= context size and repeats >= 1");
  }
  using clock = std::chrono::steady_clock;
  const auto seconds = [](clock::time_point start) {
    return std::chrono::duration<double>(clock::now() - start).count();
  };
  (void)draft(context);
  (void)target(context, max_rows);  // every shape the engine allocates for, before timing
  std::vector<std::vector<double>> verify(max_rows, std::vector<double>(repeats));
  std::vector<std::vector<double>> changed(max_rows, std::vector<double>(repeats));
  std::vector<double> drafts;  // per round of n >= 2 rows: its draft seconds / (n - 1)
  drafts.reserve(repeats * max_rows);
  // Rounds walk through the second half of the context, each drafting and verifying fresh
  // positions as decoding does (a KV cache that grows, and a draft that first catches up on
  // the last round's tokens); at the end they start again from the middle (a long rejection).
  const std::size_t lowest = std::min(context.size() / 2, context.size() - max_rows);
  std::size_t position = lowest;
  for (std::size_t repeat = 0; repeat < repeats; ++repeat) {
    for (std::size_t n = 1; n <= max_rows; ++n) {
      // Two rounds of n - 1 drafted tokens: pass 0 after another call shape, pass 1 the
      // steady state (the same shape again).
      for (int pass = 0; pass < 2; ++pass) {
        if (position + n > context.size()) position = lowest;
        double drafting = 0;
        for (std::size_t d = 1; d < n; ++d) {
          const auto start = clock::now();
          (void)draft(context.first(position + d));
          drafting += seconds(start);
        }
        if (pass == 1 && n >= 2) drafts.push_back(drafting / static_cast<double>(n - 1));
        const auto start = clock::now();
        (void)target(context.first(position + n), n);
        (pass == 0 ? changed : verify)[n - 1][repeat] = seconds(start);
        position += n;
      }
    }
  }
  if (drafts.empty()) {  // max_rows = 1: no round drafts; time the draft alone
    for (std::size_t repeat = 0; repeat < repeats; ++repeat) {
      const auto start = clock::now();
      (void)draft(context);
      drafts.push_back(seconds(start));
    }
  }
  CallCosts costs;
  costs.draft_token_seconds = detail::lower_quartile_of(drafts);
  costs.verify_seconds.reserve(max_rows);
  std::vector<double> switches;
  switches.reserve(max_rows);
  for (std::size_t n = 0; n < max_rows; ++n) {
    costs.verify_seconds.push_back(detail::lower_quartile_of(verify[n]));
    switches.push_back(detail::lower_quartile_of(changed[n]) - costs.verify_seconds.back());
  }
  costs.switch_seconds = std::max(0.0, detail::median_of(switches));

  costs.plain_growth = detail::measure_plain_growth(
      context.size(), repeats, [&](std::size_t length) { (void)target(context.first(length), 1); });
  return costs;
}

}  // namespace specdec

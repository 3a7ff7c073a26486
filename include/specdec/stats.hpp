#pragma once
/// \file
/// \brief DecodeStats: what happened during one generate() call, and the statistics derived
/// from it.
///
/// Counters only count; derived quantities are functions of the counters so they can never
/// disagree with them. Ratios with a zero denominator return 0 (nothing measured), except
/// where noted.

#include <cmath>
#include <cstddef>
#include <vector>

namespace specdec {

/// \brief The speedup the geometric acceptance model predicts for draft length K.
///
/// With per-token acceptance probability a (i.i.d.), a round emits on average
/// (1 - a^(K+1)) / (1 - a) tokens (Leviathan et al. 2023, eq. 1) and costs K draft calls plus
/// one target call, i.e. (K c + 1) target-call units with c = draft cost / target cost. Plain
/// decoding emits 1 token per unit. At a = 1 the limit (K + 1) / (K c + 1) is used.
[[nodiscard]] inline double predicted_speedup(double alpha, std::size_t draft_length,
                                              double cost_ratio) noexcept {
  const auto k = static_cast<double>(draft_length);
  const double tokens_per_round =
      alpha >= 1.0 ? k + 1.0 : (1.0 - std::pow(alpha, k + 1.0)) / (1.0 - alpha);
  return tokens_per_round / (k * cost_ratio + 1.0);
}

/// \brief predicted_speedup for a target whose verification call is not flat in its row count.
///
/// The formula above counts target calls, which is right for GPU-served targets (a K+1-row
/// call costs about a one-row call). A CPU target's K+1-row call costs
/// verify_cost_ratio = T(K+1) / T(1) one-row calls (1.2-2.5 measured for the example GPT), and
/// c is then measured against that longer call, so the speedup over plain decoding is the
/// geometric prediction divided by verify_cost_ratio (must be > 0; returns 0 otherwise).
[[nodiscard]] inline double predicted_speedup(double alpha, std::size_t draft_length,
                                              double cost_ratio,
                                              double verify_cost_ratio) noexcept {
  if (!(verify_cost_ratio > 0.0)) return 0.0;
  return predicted_speedup(alpha, draft_length, cost_ratio) / verify_cost_ratio;
}

/// \brief Counters and timings of one generate() call.
struct DecodeStats {
  std::size_t rounds = 0;            ///< draft+verify rounds (target calls of the decoder)
  std::size_t drafted = 0;           ///< draft tokens proposed (sum of K_eff over rounds)
  std::size_t accepted = 0;          ///< drafted tokens accepted by verification (including
                                     ///< accepted tokens later dropped after a stop token)
  std::size_t emitted = 0;           ///< tokens returned (accepted + corrections + bonuses,
                                     ///< after stop-token truncation)
  std::size_t rejecting_rounds = 0;  ///< rounds that ended in a rejection (accepted < K_eff)
  std::size_t draft_calls = 0;       ///< calls of the draft model
  std::size_t target_calls = 0;      ///< calls of the target model
  /// [k]: rounds that drafted a token at position k; one entry per position a round could use,
  /// min(draft_length, max_new_tokens - 1)
  std::vector<std::size_t> drafted_at;
  std::vector<std::size_t> accepted_at;  ///< [k]: rounds whose position-k draft was accepted
  /// Tree drafts (chains count every node as rank 0): [r] = drafted nodes that were the r-th
  /// child of their parent (r = 0: the first); drafted_at / accepted_at count by depth.
  std::vector<std::size_t> drafted_at_rank;
  std::vector<std::size_t> accepted_at_rank;  ///< [r]: accepted nodes that were an r-th child

  /// Rounds whose draft-length policy stated what it expected (RoundPrediction), and the sums
  /// of those expectations: compare predicted_tokens_per_second() with the measured rate.
  std::size_t predicted_rounds = 0;
  double predicted_tokens = 0;
  double predicted_seconds = 0;

  double draft_seconds = 0;    ///< wall time inside draft model calls
  double target_seconds = 0;   ///< wall time inside target model calls
  double total_seconds = 0;    ///< wall time of the whole generate() call
  double library_seconds = 0;  ///< total - draft - target: specdec's own overhead

  /// \brief accepted / drafted: the fraction of drafted tokens the target accepted (never
  /// counts corrections or bonus tokens, so it is at most 1). 0 if nothing was drafted.
  [[nodiscard]] double acceptance_rate() const noexcept {
    return drafted == 0 ? 0.0 : static_cast<double>(accepted) / static_cast<double>(drafted);
  }

  /// \brief accepted / (accepted + rejecting_rounds): maximum-likelihood estimate of the
  /// per-token acceptance probability alpha under the geometric model. Each accepted token is a
  /// success and each rejection a failure; rounds cut short by K or the budget contribute their
  /// successes without a failure, so (unlike acceptance_rate) truncation does not bias it.
  /// 0 if there was no drafted token.
  [[nodiscard]] double alpha_hat() const noexcept {
    const std::size_t trials = accepted + rejecting_rounds;
    return trials == 0 ? 0.0 : static_cast<double>(accepted) / static_cast<double>(trials);
  }

  /// \brief tau = emitted / rounds: tokens per target call. 0 if there was no round.
  [[nodiscard]] double tokens_per_round() const noexcept {
    return rounds == 0 ? 0.0 : static_cast<double>(emitted) / static_cast<double>(rounds);
  }

  /// \brief [n]: rounds that drafted exactly n tokens, n = 0 .. drafted_at.size() ([0]: rounds
  /// run as plain target steps). Derived from drafted_at ([k] counts rounds with more than k).
  [[nodiscard]] std::vector<std::size_t> draft_length_histogram() const {
    std::vector<std::size_t> histogram(drafted_at.size() + 1, 0);
    for (std::size_t n = 0; n <= drafted_at.size(); ++n) {
      const std::size_t at_least = n == 0 ? rounds : drafted_at[n - 1];
      const std::size_t more = n < drafted_at.size() ? drafted_at[n] : 0;
      histogram[n] = at_least - more;
    }
    return histogram;
  }

  /// \brief Rounds that drafted nothing: plain target steps (a policy's fallback).
  [[nodiscard]] std::size_t plain_rounds() const noexcept {
    return drafted_at.empty() ? rounds : rounds - drafted_at[0];
  }

  /// \brief emitted / total_seconds: measured tokens per second. 0 if no time was measured.
  [[nodiscard]] double tokens_per_second() const noexcept {
    return total_seconds > 0 ? static_cast<double>(emitted) / total_seconds : 0.0;
  }

  /// \brief predicted_tokens / predicted_seconds: the rate the policy expected (model time
  /// only: compare with emitted / (draft_seconds + target_seconds)). 0 without predictions.
  [[nodiscard]] double predicted_tokens_per_second() const noexcept {
    return predicted_seconds > 0 ? predicted_tokens / predicted_seconds : 0.0;
  }

  /// \brief c = (draft_seconds / draft_calls) / (target_seconds / target_calls): the cost of a
  /// draft call in units of a target call. 0 if either side was never called or took no time.
  [[nodiscard]] double cost_ratio() const noexcept {
    if (draft_calls == 0 || target_calls == 0 || target_seconds <= 0.0) return 0.0;
    return (draft_seconds / static_cast<double>(draft_calls)) /
           (target_seconds / static_cast<double>(target_calls));
  }

  /// \brief predicted_speedup(alpha_hat(), K, cost_ratio()): the speedup over plain target
  /// decoding the measured acceptance and costs predict for draft length K.
  [[nodiscard]] double predicted_speedup(std::size_t draft_length) const noexcept {
    return specdec::predicted_speedup(alpha_hat(), draft_length, cost_ratio());
  }

  /// \brief The same, with the measured verification cost T(K+1) / T(1) of the target (time of
  /// a (K+1)-row target call / time of a one-row call; see the free function above).
  [[nodiscard]] double predicted_speedup(std::size_t draft_length,
                                         double verify_cost_ratio) const noexcept {
    return specdec::predicted_speedup(alpha_hat(), draft_length, cost_ratio(), verify_cost_ratio);
  }

  /// \brief Pools `other` into these statistics (e.g. over many prompts): every counter and
  /// every time is summed, the per-position and per-rank vectors elementwise (the shorter
  /// grows to the longer, with zeros). Every derived figure is a ratio of sums, so those of the
  /// merge are the pooled ones (alpha_hat of all rounds together, not an average of alpha_hats).
  DecodeStats& operator+=(const DecodeStats& other) {
    rounds += other.rounds;
    drafted += other.drafted;
    accepted += other.accepted;
    emitted += other.emitted;
    rejecting_rounds += other.rejecting_rounds;
    draft_calls += other.draft_calls;
    target_calls += other.target_calls;
    predicted_rounds += other.predicted_rounds;
    predicted_tokens += other.predicted_tokens;
    predicted_seconds += other.predicted_seconds;
    add_elementwise(drafted_at, other.drafted_at);
    add_elementwise(accepted_at, other.accepted_at);
    add_elementwise(drafted_at_rank, other.drafted_at_rank);
    add_elementwise(accepted_at_rank, other.accepted_at_rank);
    draft_seconds += other.draft_seconds;
    target_seconds += other.target_seconds;
    total_seconds += other.total_seconds;
    library_seconds += other.library_seconds;
    return *this;
  }

  /// \brief The pooled statistics of two runs (see operator+=).
  [[nodiscard]] friend DecodeStats operator+(DecodeStats left, const DecodeStats& right) {
    left += right;
    return left;
  }

 private:
  static void add_elementwise(std::vector<std::size_t>& into,
                              const std::vector<std::size_t>& from) {
    if (into.size() < from.size()) into.resize(from.size(), 0);
    for (std::size_t k = 0; k < from.size(); ++k) into[k] += from[k];
  }
};

}  // namespace specdec

#pragma once
/// \file
/// \brief measure_speedup: paired speculative / plain decoding over a set of prompts and a list
/// of settings (draft lengths, verifiers, ...), summarised in one row per setting; and
/// print_speedup_table, a plain text rendering of that table.
///
/// How a measurement is made, and why:
///   - Paired runs. Every speculative run is paired with a plain run of the same prompt and the
///     same config (so the same seed), made right next to it: slow drift in the background load
///     hits both sides of a pair alike. The headline is the median over prompts of the
///     per-prompt ratio, with its interquartile range; the aggregate (total tokens / total
///     seconds, both ways) is reported next to it.
///   - Alternating order. For prompt i, speculative runs first when i is even and plain first
///     when i is odd, so whatever the first run of a pair leaves behind (warm caches, a CPU
///     clock ramp) favours neither side.
///   - Cache reset before every run. A model with a KV or prefix cache keeps it across
///     generate() calls (ContextCache lives as long as the model): without a reset the second
///     run of a pair finds the prompt already computed and looks faster than it is. The
///     caller's `reset_caches()` is called before every single run, outside the timed interval;
///     it must put every model the two decoders share back in its fresh state (e.g.
///     ContextCache::clear() plus truncating the model's KV cache to 0). Pass a no-op for
///     stateless models.
///   - Times are the decoders' own (DecodeStats::total_seconds, the generate() call alone);
///     process CPU time (std::clock) is taken around the same call, which ignores time spent
///     descheduled by other processes. Nothing the helper does for itself (pooling statistics,
///     comparing outputs, progress) falls inside either interval.
///   - Greedy identity. For a greedy setting (temperature 0) the speculative output must equal
///     the plain one token for token; every pair that differs is counted.
///
/// A measurement tool: it allocates freely and is not meant for a hot path.

#include <algorithm>
#include <array>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <ctime>
#include <functional>
#include <iomanip>
#include <ostream>
#include <span>
#include <sstream>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "specdec/detail/error.hpp"
#include "specdec/enum_names.hpp"
#include "specdec/generation.hpp"
#include "specdec/stats.hpp"
#include "specdec/types.hpp"

namespace specdec {

/// \brief One row of a speedup measurement: a name for the table and the config both decoders
/// run with (the plain decoder ignores draft_length and verifier).
struct SpeedupSetting {
  std::string name;         ///< e.g. "K=4"; shown in the first column of the table
  GenerationConfig config;  ///< same prompt, same config (hence same seed) on both sides
};

/// \brief One setting per draft length: `base` with draft_length = K, named "K=<K>".
/// \throws std::invalid_argument if `draft_lengths` is empty or holds a 0.
[[nodiscard]] inline std::vector<SpeedupSetting> draft_length_settings(
    const GenerationConfig& base, std::span<const std::size_t> draft_lengths) {
  if (draft_lengths.empty()) {
    detail::throw_invalid_argument(
        "draft_length_settings: the list of draft lengths is empty; "
        "expected at least one K >= 1");
  }
  std::vector<SpeedupSetting> settings;
  settings.reserve(draft_lengths.size());
  for (std::size_t i = 0; i < draft_lengths.size(); ++i) {
    if (draft_lengths[i] == 0) {
      detail::throw_invalid_argument("draft_length_settings: draft length 0 at index ", i,
                                     "; expected K >= 1 (tokens drafted per round)");
    }
    SpeedupSetting& setting = settings.emplace_back(SpeedupSetting{"", base});
    setting.config.draft_length = draft_lengths[i];
    setting.name = "K=" + std::to_string(draft_lengths[i]);
  }
  return settings;
}

/// \brief The 25th, 50th and 75th percentiles of a sample.
struct Quartiles {
  double p25 = 0;
  double median = 0;
  double p75 = 0;
};

/// \brief Quantile q in [0, 1] of `values` by linear interpolation between order statistics
/// (numpy's default): position q (n - 1) in the sorted sample; q outside [0, 1] is clamped to
/// it. 0 for an empty sample.
/// \throws std::invalid_argument if q or a value is NaN (a NaN has no place in the order).
[[nodiscard]] inline double quantile(std::vector<double> values, double q) {
  if (std::isnan(q)) {
    detail::throw_invalid_argument("quantile: q = ", q, "; expected a probability in [0, 1]");
  }
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (std::isnan(values[i])) {
      detail::throw_invalid_argument("quantile: value ", i, " of ", values.size(),
                                     " is NaN; expected numbers (a sample can be ordered)");
    }
  }
  if (values.empty()) return 0.0;
  std::sort(values.begin(), values.end());
  const double at = std::clamp(q, 0.0, 1.0) * static_cast<double>(values.size() - 1);
  const auto below = static_cast<std::size_t>(at);
  const std::size_t above = std::min(below + 1, values.size() - 1);
  return values[below] + (at - static_cast<double>(below)) * (values[above] - values[below]);
}

/// \brief quantile() at 0.25, 0.5 and 0.75. All 0 for an empty sample.
[[nodiscard]] inline Quartiles quartiles(std::span<const double> values) {
  const std::vector<double> sample(values.begin(), values.end());
  return {quantile(sample, 0.25), quantile(sample, 0.5), quantile(sample, 0.75)};
}

/// \brief Tokens per second of the speculative side over that of the plain side: the speedup of
/// one pair (or of pooled totals). Equals plain_seconds / speculative_seconds when both sides
/// emitted the same number of tokens. 0 if a side emitted nothing or took no time.
[[nodiscard]] inline double speedup_ratio(std::size_t plain_tokens, double plain_seconds,
                                          std::size_t speculative_tokens,
                                          double speculative_seconds) noexcept {
  if (plain_tokens == 0 || speculative_tokens == 0 || !(plain_seconds > 0.0) ||
      !(speculative_seconds > 0.0)) {
    return 0.0;
  }
  const double plain_rate = static_cast<double>(plain_tokens) / plain_seconds;
  const double speculative_rate = static_cast<double>(speculative_tokens) / speculative_seconds;
  return speculative_rate / plain_rate;
}

/// \brief What SpeedupRow::predicted() (the table's `predicted` column) is computed from.
enum class PredictionBasis {
  draft_length,         ///< a fixed K: the geometric formula at K
  mean_drafted_length,  ///< an adaptive policy: the formula at the mean drafted length
  policy,  ///< an adaptive policy that stated its expectations (DecodeStats::predicted_*)
};

/// \brief PredictionBasis's names (enum_names.hpp): the enumerators' own.
template <>
struct EnumNames<PredictionBasis> {
  static constexpr std::string_view what = "prediction basis";
  static constexpr std::array<EnumName<PredictionBasis>, 3> names{
      {{PredictionBasis::draft_length, "draft_length"},
       {PredictionBasis::mean_drafted_length, "mean_drafted_length"},
       {PredictionBasis::policy, "policy"}}};
};

namespace detail {

/// The geometric model at a (possibly fractional) draft length k: (1 - a^(k+1)) / ((1 - a)
/// (k c + 1) v); DecodeStats::predicted_speedup(K, v) at integer k. 0 unless v > 0.
[[nodiscard]] inline double geometric_speedup(double alpha, double k, double cost_ratio,
                                              double verify_cost_ratio) noexcept {
  if (!(verify_cost_ratio > 0.0)) return 0.0;
  const double tokens = alpha >= 1.0 ? k + 1.0 : (1.0 - std::pow(alpha, k + 1.0)) / (1.0 - alpha);
  return tokens / ((k * cost_ratio + 1.0) * verify_cost_ratio);
}

}  // namespace detail

/// \brief Everything measured for one setting over all prompts; the derived figures are
/// functions of what was added, so they can never disagree with it.
struct SpeedupRow {
  SpeedupSetting setting;
  std::vector<double> speedups;      ///< per pair (prompt order): speedup_ratio of wall times
  std::vector<double> cpu_speedups;  ///< per pair: the same with process CPU times
  DecodeStats plain;                 ///< pooled over prompts (DecodeStats::operator+=)
  DecodeStats speculative;           ///< pooled over prompts
  double plain_cpu_seconds = 0;
  double speculative_cpu_seconds = 0;
  std::size_t greedy_mismatches = 0;  ///< greedy settings only: pairs whose outputs differ

  /// \brief Adds one pair: the two results (same prompt and config) and their CPU times.
  void add(const GenerationResult& plain_run, double plain_cpu,
           const GenerationResult& speculative_run, double speculative_cpu) {
    const DecodeStats& p = plain_run.stats;
    const DecodeStats& s = speculative_run.stats;
    speedups.push_back(speedup_ratio(p.emitted, p.total_seconds, s.emitted, s.total_seconds));
    cpu_speedups.push_back(speedup_ratio(p.emitted, plain_cpu, s.emitted, speculative_cpu));
    plain += p;
    speculative += s;
    plain_cpu_seconds += plain_cpu;
    speculative_cpu_seconds += speculative_cpu;
    if (greedy() && speculative_run.tokens != plain_run.tokens) ++greedy_mismatches;
  }

  [[nodiscard]] std::size_t draft_length() const noexcept { return setting.config.draft_length; }
  [[nodiscard]] float temperature() const noexcept { return setting.config.sampling.temperature; }
  /// \brief Whether outputs must be identical (temperature 0): greedy_mismatches is counted.
  [[nodiscard]] bool greedy() const noexcept { return setting.config.sampling.greedy(); }
  [[nodiscard]] std::size_t pairs() const noexcept { return speedups.size(); }

  /// \brief Median and IQR of the per-pair speedups (wall time).
  [[nodiscard]] Quartiles speedup() const { return quartiles(speedups); }
  /// \brief Median and IQR of the per-pair speedups (process CPU time).
  [[nodiscard]] Quartiles cpu_speedup() const { return quartiles(cpu_speedups); }

  /// \brief Pooled tokens per second of each side (total tokens / total seconds).
  [[nodiscard]] double plain_tokens_per_second() const noexcept {
    return plain.total_seconds > 0 ? static_cast<double>(plain.emitted) / plain.total_seconds : 0;
  }
  [[nodiscard]] double speculative_tokens_per_second() const noexcept {
    return speculative.total_seconds > 0
               ? static_cast<double>(speculative.emitted) / speculative.total_seconds
               : 0;
  }
  /// \brief Aggregate speedup: speedup_ratio of the pooled totals, i.e. total plain time /
  /// total speculative time when both sides emitted the same tokens (any budget-bound run).
  [[nodiscard]] double aggregate_speedup() const noexcept {
    return speedup_ratio(plain.emitted, plain.total_seconds, speculative.emitted,
                         speculative.total_seconds);
  }

  /// \brief T(K+1) / T(1): seconds per speculative target call over seconds per plain target
  /// call, the cost of a verification call in one-row calls (1 on a target whose call time is
  /// flat in the row count). 0 if either side made no timed target call.
  [[nodiscard]] double verify_cost() const noexcept {
    if (speculative.target_calls == 0 || plain.target_calls == 0 || !(plain.target_seconds > 0.0)) {
      return 0.0;
    }
    return (speculative.target_seconds / static_cast<double>(speculative.target_calls)) /
           (plain.target_seconds / static_cast<double>(plain.target_calls));
  }
  /// \brief The geometric model's speedup counting target calls (flat verification cost).
  [[nodiscard]] double predicted_flat() const noexcept {
    return speculative.predicted_speedup(draft_length());
  }
  /// \brief Drafted tokens per round of the speculative runs (plain steps count as 0).
  [[nodiscard]] double mean_drafted_length() const noexcept {
    return speculative.rounds == 0
               ? 0.0
               : static_cast<double>(speculative.drafted) / static_cast<double>(speculative.rounds);
  }
  /// \brief What predicted() uses: K for a fixed draft length; for an adaptive policy (any
  /// other DraftLengthKind) what the policy itself expected when it recorded predictions and
  /// plain decoding's model time is known, the formula at the mean drafted length otherwise.
  [[nodiscard]] PredictionBasis prediction_basis() const noexcept {
    if (setting.config.draft_length_policy.kind == DraftLengthKind::fixed) {
      return PredictionBasis::draft_length;
    }
    if (speculative.predicted_rounds > 0 && speculative.predicted_seconds > 0.0 &&
        plain.emitted > 0 && plain.target_seconds > 0.0) {
      return PredictionBasis::policy;
    }
    return PredictionBasis::mean_drafted_length;
  }
  /// \brief The predicted speedup; compare with aggregate_speedup(). By prediction_basis():
  /// the geometric model with the measured verification cost at K
  /// (speculative.predicted_speedup(K, verify_cost())) or at the mean drafted length K̄ (with
  /// T(K̄+1)/T(1) = verify_cost(), the mean over the rounds actually run), or the policy's own
  /// expected tokens per second of model time (DecodeStats::predicted_tokens_per_second())
  /// over plain decoding's measured tokens per second of model time. (The formula at the cap
  /// K said what drafting K every round would give, which an adaptive policy does not do.)
  [[nodiscard]] double predicted() const noexcept {
    switch (prediction_basis()) {
      case PredictionBasis::draft_length:
        break;
      case PredictionBasis::mean_drafted_length:
        return detail::geometric_speedup(speculative.alpha_hat(), mean_drafted_length(),
                                         speculative.cost_ratio(), verify_cost());
      case PredictionBasis::policy:
        return speculative.predicted_tokens_per_second() /
               (static_cast<double>(plain.emitted) / plain.target_seconds);
    }
    return speculative.predicted_speedup(draft_length(), verify_cost());
  }
};

/// \brief The result of measure_speedup: one row per setting, in the settings' order.
struct SpeedupTable {
  std::size_t prompts = 0;
  std::vector<SpeedupRow> rows;

  /// \brief Greedy mismatches over all rows (0 means every greedy pair was identical).
  [[nodiscard]] std::size_t greedy_mismatches() const noexcept {
    std::size_t total = 0;
    for (const SpeedupRow& row : rows) total += row.greedy_mismatches;
    return total;
  }
};

/// \brief Options of measure_speedup beyond the prompts and the settings.
struct SpeedupOptions {
  /// Run plain decoding once per prompt (with the first setting's config) and pair it with
  /// every setting's speculative run: one plain run per prompt instead of one per setting, but
  /// pairs further apart in time. Only meaningful when the settings differ in nothing plain
  /// decoding reads (draft_length, verifier); the per-prompt order still alternates.
  bool shared_baseline = false;
  /// Called before each prompt with (prompt index, prompt count), outside every timed interval
  /// (e.g. to print progress). Optional.
  std::function<void(std::size_t, std::size_t)> on_prompt;
};

namespace detail {

/// What measure_speedup needs of a decoder.
template <class Decoder>
concept GeneratingDecoder = requires(Decoder& decoder, std::span<const token_t> prompt,
                                     const GenerationConfig& config) {
  { decoder.generate(prompt, config) } -> std::convertible_to<GenerationResult>;
};

/// One generate() call with the process CPU time around it.
template <class Decoder>
std::pair<GenerationResult, double> cpu_timed_generate(Decoder& decoder,
                                                       std::span<const token_t> prompt,
                                                       const GenerationConfig& config) {
  const std::clock_t start = std::clock();
  GenerationResult result = decoder.generate(prompt, config);
  const std::clock_t stop = std::clock();
  return {std::move(result), static_cast<double>(stop - start) / CLOCKS_PER_SEC};
}

}  // namespace detail

/// \brief Paired speculative / plain decoding of every prompt under every setting.
///
/// For prompt i (outer loop) and each setting (inner loop): reset_caches(), run one side;
/// reset_caches(), run the other; speculative first when i is even, plain first when i is odd.
/// With options.shared_baseline the plain run happens once per prompt (before the settings when
/// i is odd, after them when i is even) and the settings run in an order rotated by one per
/// prompt (prompt i starts with setting i mod n), each run still preceded by reset_caches().
///
/// \tparam Speculative, Plain any decoders with `GenerationResult generate(std::span<const
/// token_t> prompt, const GenerationConfig& config)` (SpeculativeDecoder, StrategyDecoder,
/// AutoregressiveDecoder, or wrappers of them); each is used by this thread only.
/// \tparam Reset callable as `reset_caches()`: puts every model of both decoders back in its
/// fresh state (see the file comment); called before every run.
/// \throws std::invalid_argument if `prompts` or `settings` is empty, or a prompt is empty;
/// anything a decoder or reset_caches throws, unchanged.
template <class Speculative, class Plain, class Reset>
[[nodiscard]] SpeedupTable measure_speedup(Speculative& speculative, Plain& plain,
                                           std::span<const std::vector<token_t>> prompts,
                                           std::span<const SpeedupSetting> settings,
                                           Reset&& reset_caches,
                                           const SpeedupOptions& options = {}) {
  static_assert(std::is_invocable_v<Reset&>,
                "specdec: measure_speedup's reset_caches must be callable with no arguments "
                "(pass [] {} for models without caches)");
  static_assert(detail::GeneratingDecoder<Speculative>,
                "specdec: measure_speedup's speculative decoder must provide GenerationResult "
                "generate(std::span<const specdec::token_t> prompt, const GenerationConfig&)");
  static_assert(detail::GeneratingDecoder<Plain>,
                "specdec: measure_speedup's plain decoder must provide GenerationResult "
                "generate(std::span<const specdec::token_t> prompt, const GenerationConfig&)");
  if constexpr (!std::is_invocable_v<Reset&> || !detail::GeneratingDecoder<Speculative> ||
                !detail::GeneratingDecoder<Plain>) {
    return {};  // unreachable: a static_assert above already failed
  } else {
    if (prompts.empty()) {
      detail::throw_invalid_argument(
          "measure_speedup: the prompt list is empty; expected at "
          "least one prompt (one pair of runs per prompt and setting)");
    }
    if (settings.empty()) {
      detail::throw_invalid_argument(
          "measure_speedup: the settings list is empty; expected at "
          "least one setting (e.g. draft_length_settings(config, Ks) "
          "with a non-empty list of K)");
    }
    for (std::size_t i = 0; i < prompts.size(); ++i) {
      if (prompts[i].empty()) {
        detail::throw_invalid_argument("measure_speedup: prompt ", i,
                                       " is empty; expected at least one token (e.g. BOS)");
      }
    }

    SpeedupTable table;
    table.prompts = prompts.size();
    table.rows.reserve(settings.size());
    for (const SpeedupSetting& setting : settings) table.rows.emplace_back().setting = setting;

    const auto run = [&](auto& decoder, std::span<const token_t> prompt,
                         const GenerationConfig& config) {
      reset_caches();
      return detail::cpu_timed_generate(decoder, prompt, config);
    };

    for (std::size_t i = 0; i < prompts.size(); ++i) {
      if (options.on_prompt) options.on_prompt(i, prompts.size());
      const std::span<const token_t> prompt(prompts[i]);
      const bool speculative_first = i % 2 == 0;
      if (options.shared_baseline) {
        std::pair<GenerationResult, double> shared;
        if (!speculative_first) shared = run(plain, prompt, settings.front().config);
        // The settings' order rotates from prompt to prompt, so none always runs right after
        // the same other one or last in a long sequence (seen: a setting always run last
        // measured ~4 % slower than when run alone against its neighbour).
        std::vector<std::pair<GenerationResult, double>> speculative_runs(settings.size());
        for (std::size_t t = 0; t < settings.size(); ++t) {
          const std::size_t s = (i + t) % settings.size();
          speculative_runs[s] = run(speculative, prompt, settings[s].config);
        }
        if (speculative_first) shared = run(plain, prompt, settings.front().config);
        for (std::size_t s = 0; s < settings.size(); ++s) {
          table.rows[s].add(shared.first, shared.second, speculative_runs[s].first,
                            speculative_runs[s].second);
        }
        continue;
      }
      for (std::size_t s = 0; s < settings.size(); ++s) {
        const GenerationConfig& config = settings[s].config;
        std::pair<GenerationResult, double> first =
            speculative_first ? run(speculative, prompt, config) : run(plain, prompt, config);
        std::pair<GenerationResult, double> second =
            speculative_first ? run(plain, prompt, config) : run(speculative, prompt, config);
        const auto& plain_run = speculative_first ? second : first;
        const auto& speculative_run = speculative_first ? first : second;
        table.rows[s].add(plain_run.first, plain_run.second, speculative_run.first,
                          speculative_run.second);
      }
    }
    return table;
  }
}

/// \brief As above with one setting per draft length (draft_length_settings(base, Ks)).
/// \throws std::invalid_argument if `draft_lengths` is empty or holds a 0, and as above.
template <class Speculative, class Plain, class Reset>
[[nodiscard]] SpeedupTable measure_speedup(Speculative& speculative, Plain& plain,
                                           std::span<const std::vector<token_t>> prompts,
                                           const GenerationConfig& base,
                                           std::span<const std::size_t> draft_lengths,
                                           Reset&& reset_caches,
                                           const SpeedupOptions& options = {}) {
  const std::vector<SpeedupSetting> settings = draft_length_settings(base, draft_lengths);
  return measure_speedup(speculative, plain, prompts, std::span<const SpeedupSetting>(settings),
                         std::forward<Reset>(reset_caches), options);
}

/// \brief Writes `table` as plain text, one line per setting: the speedup median [IQR] and
/// aggregate, α̂, τ, c, the measured T(K+1)/T(1), the prediction (SpeedupRow::predicted()) and
/// what it is computed from (`from`: `K` the formula at K; `mean 3.92` the formula at the mean
/// drafted length, for an adaptive policy; `policy` the policy's own expectation), and greedy
/// identity ("-" for sampled settings).
inline void print_speedup_table(std::ostream& out, const SpeedupTable& table) {
  std::ostringstream text;  // formatting flags stay off the caller's stream
  text << std::fixed;
  const int name_width = [&] {
    std::size_t width = 7;
    for (const SpeedupRow& row : table.rows) width = std::max(width, row.setting.name.size());
    return static_cast<int>(width);
  }();
  text << std::left << std::setw(name_width) << "setting" << std::right << "  K     T"
       << "  speedup median [p25, p75]  aggregate  alpha_hat    tau       c  T(K+1)/T(1)"
       << "  predicted  from       greedy identical\n";
  for (const SpeedupRow& row : table.rows) {
    const Quartiles speedup = row.speedup();
    std::ostringstream spread;
    spread << std::fixed << std::setprecision(2) << speedup.median << "x [" << speedup.p25 << ", "
           << speedup.p75 << "]";
    const std::string identical =
        !row.greedy() ? "-"
        : row.greedy_mismatches == 0
            ? "yes (" + std::to_string(row.pairs()) + "/" + std::to_string(row.pairs()) + ")"
            : "NO: " + std::to_string(row.greedy_mismatches) + "/" + std::to_string(row.pairs()) +
                  " differ";
    std::ostringstream basis;
    switch (row.prediction_basis()) {
      case PredictionBasis::draft_length:
        basis << "K";
        break;
      case PredictionBasis::mean_drafted_length:
        basis << "mean " << std::fixed << std::setprecision(2) << row.mean_drafted_length();
        break;
      case PredictionBasis::policy:
        basis << "policy";
        break;
    }
    text << std::left << std::setw(name_width) << row.setting.name << std::right << std::setw(3)
         << row.draft_length() << std::setw(6) << std::defaultfloat << row.temperature()
         << std::fixed << std::setprecision(2) << std::setw(28) << spread.str() << std::setw(10)
         << row.aggregate_speedup() << 'x' << std::setw(11) << std::setprecision(3)
         << row.speculative.alpha_hat() << std::setw(7) << std::setprecision(2)
         << row.speculative.tokens_per_round() << std::setw(8) << std::setprecision(4)
         << row.speculative.cost_ratio() << std::setw(13) << std::setprecision(2)
         << row.verify_cost() << std::setw(10) << row.predicted() << 'x' << "  " << std::left
         << std::setw(9) << basis.str() << std::right << "  " << identical << '\n';
  }
  out << text.str();
}

}  // namespace specdec

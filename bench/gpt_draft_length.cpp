// gpt_draft_length: draft-length policies on the example GPT pair (models/kjv-*.spdc), paired,
// on the held-out prompts of models/prompts.txt.
//
//   gpt_draft_length [--prompts N] [--tokens N] [--ks 1,2,...] [--cap K] [--temperatures 0,1]
//                    [--seed N]
//
// For every T, specdec::measure_speedup over the prompts with one setting per policy — static K
// for each K in --ks, and the schedule, confidence (p_min 0.75) and goodput policies capped at
// --cap — and one plain run per prompt shared by all of them (before or after them, alternating;
// the settings' order rotated by one per prompt), each run with fresh KV caches, all with the
// same seed. One decoder serves every run, so the
// goodput policy's measured costs and its calibration by the draft's probability carry over
// from prompt to prompt as they would in an application; its evidence about the text starts
// over at every generate().
// Per (T, policy): speedup over the plain run (median over prompts, and aggregate: total plain
// seconds / total speculative seconds), tokens per round, mean drafted per round, the fraction
// of rounds run as plain steps, and (T = 0) whether every output equals the plain one.
// Then, per T and adaptive policy, the comparison with static K that the sweep's own noise
// allows: the best static K by median speedup is the maximum of --ks noisy medians, biased
// upwards (the winner's curse), so it is reported three ways: (1) the policy's median over that
// K's median; (2) the median of the per-prompt ratios policy / that K (paired, the same prompts
// and plain run) with a bootstrap 95 % interval (2000 resamples, seeded); (3) cross-validated:
// K chosen by median on the even-numbered prompts and scored on the odd ones, and the reverse,
// against the policy on the same halves (mean of the two ratios): what "the best static K found
// by a sweep" delivers on prompts it was not chosen on.
// Output: markdown tables on stdout, progress on stderr.

#include <algorithm>
#include <cstdio>
#include <random>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <specdec/specdec.hpp>

#include "gpt/gpt_model.hpp"
#include "gpt_programs.hpp"

namespace {

using specdec::DraftLengthKind;
using specdec::token_t;
using specdec::examples::GptModel;
using specdec_bench::load_average;
using specdec_bench::parse_count;
using specdec_bench::parse_flags;
using specdec_bench::parse_list;
using specdec_bench::read_prompts;

struct Options {
  std::size_t prompts = 50;
  std::size_t tokens = 200;
  std::vector<double> ks{1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  std::size_t cap = 16;
  std::vector<double> temperatures{0.0, 1.0};
  std::uint64_t seed = 1234;
};

Options parse_args(int argc, char** argv) {
  Options o;
  parse_flags(argc, argv, [&](std::string_view flag, std::string_view value) {
    if (flag == "--prompts")
      o.prompts = parse_count(flag, value);
    else if (flag == "--tokens")
      o.tokens = parse_count(flag, value);
    else if (flag == "--ks")
      o.ks = parse_list(flag, value);
    else if (flag == "--cap")
      o.cap = parse_count(flag, value);
    else if (flag == "--temperatures")
      o.temperatures = parse_list(flag, value);
    else if (flag == "--seed")
      o.seed = parse_count(flag, value);
    else
      return false;
    return true;
  });
  return o;
}

/// values[first], values[first + step], ... (step 1 from 0: all of them).
std::vector<double> strided(const std::vector<double>& values, std::size_t first,
                            std::size_t step) {
  std::vector<double> sample;
  for (std::size_t i = first; i < values.size(); i += step) sample.push_back(values[i]);
  return sample;
}

double median(const std::vector<double>& values) { return specdec::quantile(values, 0.5); }

/// The static-K row of `rows` with the largest median speedup over the prompts `first`,
/// `first` + `step`, ...
const specdec::SpeedupRow* best_static(const std::vector<const specdec::SpeedupRow*>& rows,
                                       std::size_t first, std::size_t step) {
  const specdec::SpeedupRow* best = nullptr;
  double best_median = -1;
  for (const specdec::SpeedupRow* row : rows) {
    const double m = median(strided(row->speedups, first, step));
    if (m > best_median) {
      best_median = m;
      best = row;
    }
  }
  return best;
}

struct MedianInterval {
  double low = 0, median = 0, high = 0;
};

/// Median of the per-prompt ratios a / b and a bootstrap 95 % interval of it.
MedianInterval paired_ratio(const std::vector<double>& a, const std::vector<double>& b,
                            std::uint64_t seed) {
  std::vector<double> ratios;
  for (std::size_t i = 0; i < a.size() && i < b.size(); ++i) {
    if (b[i] > 0) ratios.push_back(a[i] / b[i]);
  }
  if (ratios.empty()) return {};
  std::mt19937_64 rng(seed);
  std::vector<double> medians, resample(ratios.size());
  for (int r = 0; r < 2000; ++r) {
    for (double& x : resample) x = ratios[rng() % ratios.size()];
    medians.push_back(median(resample));
  }
  return {specdec::quantile(medians, 0.025), median(ratios), specdec::quantile(medians, 0.975)};
}

void print_policy_comparison(const std::vector<specdec::SpeedupRow>& rows, std::uint64_t seed) {
  std::printf(
      "\n| T | policy | best static K (median) | policy / it, medians | paired median "
      "ratio [95 %% CI] | cross-validated K (even / odd) | policy / it, cross-validated "
      "|\n|--:|:--|:--|--:|--:|:--|--:|\n");
  std::vector<double> temperatures;
  for (const auto& row : rows) {
    if (std::find(temperatures.begin(), temperatures.end(), row.temperature()) ==
        temperatures.end()) {
      temperatures.push_back(row.temperature());
    }
  }
  for (const double t : temperatures) {
    std::vector<const specdec::SpeedupRow*> statics, policies;
    for (const auto& row : rows) {
      if (row.temperature() != t) continue;
      const bool fixed = row.setting.config.draft_length_policy.kind == DraftLengthKind::fixed;
      (fixed ? statics : policies).push_back(&row);
    }
    if (statics.empty()) continue;
    const specdec::SpeedupRow* best = best_static(statics, 0, 1);
    const specdec::SpeedupRow* best_even = best_static(statics, 0, 2);
    const specdec::SpeedupRow* best_odd = best_static(statics, 1, 2);
    const double best_median = median(best->speedups);
    for (const specdec::SpeedupRow* policy : policies) {
      const MedianInterval paired = paired_ratio(policy->speedups, best->speedups, seed);
      // K chosen on the even prompts is scored on the odd ones, and the reverse.
      const double on_odd =
          median(strided(policy->speedups, 1, 2)) / median(strided(best_even->speedups, 1, 2));
      const double on_even =
          median(strided(policy->speedups, 0, 2)) / median(strided(best_odd->speedups, 0, 2));
      std::printf("| %.2g | %s | %s (%.3f) | %.3f | %.3f [%.3f, %.3f] | %s / %s | %.3f |\n", t,
                  policy->setting.name.c_str(), best->setting.name.c_str(), best_median,
                  median(policy->speedups) / best_median, paired.median, paired.low, paired.high,
                  best_even->setting.name.c_str(), best_odd->setting.name.c_str(),
                  0.5 * (on_odd + on_even));
    }
  }
}

}  // namespace

int main(int argc, char** argv) try {
  const Options o = parse_args(argc, argv);
  GptModel target = GptModel::from_file(SPECDEC_MODELS_DIR "/kjv-target.spdc");
  GptModel draft = GptModel::from_file(SPECDEC_MODELS_DIR "/kjv-draft.spdc");
  const auto prompts = read_prompts(o.prompts);
  specdec::SpeculativeDecoder speculative(draft, target);
  specdec::AutoregressiveDecoder plain(target);
  const auto reset_caches = [&] {
    target.reset();
    draft.reset();
  };
  specdec::SpeedupOptions options;
  options.shared_baseline = true;  // the settings differ in nothing plain decoding reads
  options.on_prompt = [](std::size_t i, std::size_t n) {
    std::fprintf(stderr, "prompt %zu/%zu\n", i + 1, n);
  };

  const std::string load_start = load_average();
  std::vector<specdec::SpeedupRow> rows;
  for (const double t : o.temperatures) {
    specdec::GenerationConfig base;
    base.max_new_tokens = o.tokens;
    base.seed = o.seed;
    base.sampling.temperature = static_cast<float>(t);
    std::vector<specdec::SpeedupSetting> settings;
    for (const double k : o.ks) {
      base.draft_length = static_cast<std::size_t>(k);
      settings.push_back({"K=" + std::to_string(base.draft_length), base});
    }
    base.draft_length = o.cap;
    for (const auto& [name, kind] : {std::pair{"schedule", DraftLengthKind::schedule},
                                     std::pair{"confidence", DraftLengthKind::confidence},
                                     std::pair{"goodput", DraftLengthKind::goodput}}) {
      base.draft_length_policy.kind = kind;
      settings.push_back({name, base});
    }
    (void)speculative.generate(prompts[0], base);  // warm-up
    const specdec::SpeedupTable table =
        specdec::measure_speedup(speculative, plain, prompts, settings, reset_caches, options);
    rows.insert(rows.end(), table.rows.begin(), table.rows.end());
  }
  std::printf(
      "%zu held-out prompts x %zu tokens, one plain run per prompt shared by every "
      "setting, order alternating and rotating; load %s at start, %s at end\n\n",
      prompts.size(), o.tokens, load_start.c_str(), load_average().c_str());
  std::printf(
      "| T | policy | speedup (median) | IQR | aggregate | tokens/round | mean K | plain "
      "rounds | alpha_hat | greedy identical |\n"
      "|--:|:--|--:|--:|--:|--:|--:|--:|--:|:--|\n");
  for (const specdec::SpeedupRow& row : rows) {
    const specdec::DecodeStats& stats = row.speculative;
    const double rounds = static_cast<double>(stats.rounds);
    const specdec::Quartiles speedup = row.speedup();
    const std::string identical = !row.greedy() ? "-"
                                  : row.greedy_mismatches == 0
                                      ? "yes"
                                      : std::to_string(row.greedy_mismatches) + " differ";
    std::printf("| %.2g | %s | %.3f | %.2f-%.2f | %.3f | %.2f | %.2f | %.1f %% | %.3f | %s |\n",
                static_cast<double>(row.temperature()), row.setting.name.c_str(), speedup.median,
                speedup.p25, speedup.p75, row.aggregate_speedup(), stats.tokens_per_round(),
                static_cast<double>(stats.drafted) / rounds,
                100.0 * static_cast<double>(stats.plain_rounds()) / rounds, stats.alpha_hat(),
                identical.c_str());
  }
  print_policy_comparison(rows, o.seed);
  return 0;
} catch (const std::exception& error) {
  std::fprintf(stderr, "gpt_draft_length: %s\n", error.what());
  return 2;
}

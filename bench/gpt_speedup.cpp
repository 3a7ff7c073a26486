// gpt_speedup: end-to-end speedup of speculative decoding over plain decoding for the example GPT
// pair (models/kjv-{draft,target}.spdc), swept over K = k_min..k_max (default 1..8) and a list of
// temperatures, on the held-out prompts of models/prompts.txt. A plain program, not Google
// Benchmark: a data point is a whole generation, and what matters is its ratio to a plain run made
// under the same conditions, in the same process.
//
//   gpt_speedup [--prompts N] [--tokens N] [--k-max K] [--k-min K] [--temperatures 0,1]
//               [--seed N] [--shared-baseline] [--out results.json] [--prompts-file F]
//               [--target F] [--draft F]
//
// Honest ratios on a noisy machine: the runs are made by specdec::measure_speedup
// (specdec/speedup.hpp). Every speculative run is paired with a plain run of the same prompt,
// temperature and seed made right next to it, and the order of the two alternates with the prompt
// (speculative first for even prompts), so slow drift in the background load hits both sides
// alike. The headline is the median over prompts of the per-prompt ratio; the aggregate (total
// tokens / total seconds, both ways) is reported next to it. With --shared-baseline plain decoding
// runs once per (prompt, T) and is reused for every K: k_max times fewer plain runs, but pairs are
// further apart in time. Both models' KV caches are reset before every run, so each run pays for
// its own prompt. Times are the decoders' own (DecodeStats::total_seconds); "cpu" ratios use
// process CPU time instead, which ignores time spent descheduled by other processes (but not
// memory-bandwidth contention).
//
// Prompt tokens are "\n" + the line's bytes (the newline is the models' BOS). For T = 0 every
// speculative output must equal the plain output token for token; mismatches are counted and
// make the exit status 1.
//
// Why measured < predicted: DecodeStats::predicted_speedup counts target calls, but a call that
// verifies K drafts computes K + 1 rows and costs T(K+1) > T(1). The column T(K+1)/T(1) measures
// that factor (spec target seconds per call / plain target seconds per call), and the JSON/TSV
// field predicted_corrected = predicted / (T(K+1)/T(1)) is the geometric model with it included.
//
// Output: a markdown table on stdout; with --out, a JSON file and a TSV next to it (same name,
// .tsv) for scripts/plot_speedup.sh. Progress goes to stderr.

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <specdec/specdec.hpp>

#include "gpt/gpt_model.hpp"

namespace {

using specdec::token_t;
using specdec::examples::GptModel;

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct Options {
  std::size_t prompts = 0;  // 0 = every prompt in the file
  std::size_t tokens = 200;
  std::size_t k_max = 8;
  std::size_t k_min = 1;  // every run is seeded alike: a K's figures do not depend on k_min
  std::vector<float> temperatures{0.0f, 1.0f};
  std::uint64_t seed = 1234;
  bool shared_baseline = false;
  bool help = false;
  std::string out;
  std::string prompts_file = SPECDEC_MODELS_DIR "/prompts.txt";
  std::string target = SPECDEC_MODELS_DIR "/kjv-target.spdc";
  std::string draft = SPECDEC_MODELS_DIR "/kjv-draft.spdc";
};

template <class Number>
Number parse_number(std::string_view flag, std::string_view text) {
  Number value{};
  const char* end = text.data() + text.size();
  const auto [stop, error] = std::from_chars(text.data(), end, value);
  if (error != std::errc{} || stop != end || text.empty()) {
    throw UsageError(std::string(flag) + " expects a number, got '" + std::string(text) + "'");
  }
  return value;
}

/// "0,1" -> {0, 1}; each checked by the library's SamplingParams::validate.
std::vector<float> parse_temperatures(std::string_view flag, std::string_view list) {
  std::vector<float> temperatures;
  while (true) {
    const std::size_t comma = list.find(',');
    specdec::SamplingParams params;
    params.temperature = parse_number<float>(flag, list.substr(0, comma));
    try {
      params.validate();
    } catch (const std::invalid_argument& error) {
      throw UsageError(error.what());
    }
    temperatures.push_back(params.temperature);
    if (comma == std::string_view::npos) return temperatures;
    list.remove_prefix(comma + 1);
  }
}

Options parse_args(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string_view flag = argv[i];
    const auto value = [&]() -> std::string_view {
      if (i + 1 >= argc) throw UsageError(std::string(flag) + " needs a value");
      return argv[++i];
    };
    // One flag per line, read as a table.
    // clang-format off
    if (flag == "--prompts") o.prompts = parse_number<std::size_t>(flag, value());
    else if (flag == "--tokens") o.tokens = parse_number<std::size_t>(flag, value());
    else if (flag == "--k-max") o.k_max = parse_number<std::size_t>(flag, value());
    else if (flag == "--k-min") o.k_min = parse_number<std::size_t>(flag, value());
    else if (flag == "--temperatures") o.temperatures = parse_temperatures(flag, value());
    else if (flag == "--seed") o.seed = parse_number<std::uint64_t>(flag, value());
    else if (flag == "--shared-baseline") o.shared_baseline = true;
    else if (flag == "--out") o.out = value();
    else if (flag == "--prompts-file") o.prompts_file = value();
    else if (flag == "--target") o.target = value();
    else if (flag == "--draft") o.draft = value();
    else if (flag == "-h" || flag == "--help") o.help = true;
    else throw UsageError("unknown option '" + std::string(flag) + "' (see --help)");
    // clang-format on
  }
  if (o.tokens == 0 || o.k_max == 0 || o.temperatures.empty()) {
    throw UsageError("--tokens, --k-max and --temperatures must be non-empty / >= 1");
  }
  if (o.k_min == 0 || o.k_min > o.k_max) {
    throw UsageError("--k-min must be in 1..--k-max");
  }
  // The TSV is written next to the JSON with the extension replaced: an --out that already
  // ends in .tsv would name both files the same, and the TSV would overwrite the JSON.
  if (!o.out.empty() && std::filesystem::path(o.out).extension() == ".tsv") {
    throw UsageError("--out " + o.out +
                     ": expected the JSON file's name (e.g. results.json); "
                     "the TSV is written next to it with the extension .tsv");
  }
  return o;
}

/// One prompt per line, exactly as written (trailing spaces matter); the model sees "\n" + line.
std::vector<std::vector<token_t>> read_prompts(const std::string& path, std::size_t count) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open prompts file " + path);
  std::vector<std::vector<token_t>> prompts;
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    std::vector<token_t>& prompt = prompts.emplace_back(1, token_t{'\n'});
    for (const unsigned char byte : line) prompt.push_back(byte);
  }
  if (count > prompts.size()) {
    throw UsageError("--prompts " + std::to_string(count) + ": " + path + " has only " +
                     std::to_string(prompts.size()) + " prompts");
  }
  if (count > 0) prompts.resize(count);
  return prompts;
}

std::string load_average() {
  std::ifstream in("/proc/loadavg");
  std::string one, five, fifteen;
  in >> one >> five >> fifteen;
  return in ? one + " " + five + " " + fifteen : "unknown";
}

void print_table(const std::vector<specdec::SpeedupRow>& rows) {
  std::printf(
      "| K | T | plain tok/s | spec tok/s | speedup median [IQR] | speedup aggregate | "
      "speedup cpu median | acceptance | alpha_hat | tau | c | predicted | T(K+1)/T(1) | "
      "greedy identical |\n|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|:-:|\n");
  for (const specdec::SpeedupRow& row : rows) {
    const specdec::DecodeStats& s = row.speculative;
    const specdec::Quartiles speedup = row.speedup();
    const std::string identical =
        !row.greedy() ? "-"
        : row.greedy_mismatches == 0
            ? "yes (" + std::to_string(row.pairs()) + "/" + std::to_string(row.pairs()) + ")"
            : "**NO: " + std::to_string(row.greedy_mismatches) + " differ**";
    std::printf(
        "| %zu | %g | %.1f | %.1f | %.2fx [%.2f, %.2f] | %.2fx | %.2fx | %.3f | %.3f | "
        "%.2f | %.4f | %.2fx | %.2f | %s |\n",
        row.draft_length(), static_cast<double>(row.temperature()), row.plain_tokens_per_second(),
        row.speculative_tokens_per_second(), speedup.median, speedup.p25, speedup.p75,
        row.aggregate_speedup(), row.cpu_speedup().median, s.acceptance_rate(), s.alpha_hat(),
        s.tokens_per_round(), s.cost_ratio(), row.predicted_flat(), row.verify_cost(),
        identical.c_str());
  }
}

void write_results(const std::string& json_path, const Options& o, std::size_t prompt_count,
                   const std::string& load_start, const std::string& load_end,
                   const std::vector<specdec::SpeedupRow>& rows) {
  std::filesystem::path tsv_path(json_path);
  tsv_path.replace_extension(".tsv");
  std::ofstream json(json_path), tsv(tsv_path);
  if (!json || !tsv) throw std::runtime_error("cannot write " + json_path + " / .tsv");
  char line[1024];
  std::snprintf(line, sizeof line,
                "{\n  \"config\": {\"prompts\": %zu, \"tokens\": %zu, \"k_min\": %zu, "
                "\"k_max\": %zu, \"seed\": %llu, \"baseline\": \"%s\", \"target\": \"%s\", "
                "\"draft\": \"%s\", "
                "\"load_average_start\": \"%s\", \"load_average_end\": \"%s\"},\n  \"rows\": [",
                prompt_count, o.tokens, o.k_min, o.k_max, static_cast<unsigned long long>(o.seed),
                o.shared_baseline ? "shared" : "paired", o.target.c_str(), o.draft.c_str(),
                load_start.c_str(), load_end.c_str());
  json << line;
  std::snprintf(line, sizeof line,
                "# gpt_speedup: %zu prompts x %zu tokens, %s baseline, seed %llu, load %s -> %s\n",
                prompt_count, o.tokens, o.shared_baseline ? "shared" : "paired",
                static_cast<unsigned long long>(o.seed), load_start.c_str(), load_end.c_str());
  tsv << line;
  tsv << "k\ttemperature\tplain_tps\tspec_tps\tspeedup_median\tspeedup_p25\tspeedup_p75\t"
         "speedup_aggregate\tspeedup_cpu_median\tacceptance_rate\talpha_hat\ttau\tc\tpredicted\t"
         "verify_cost\tpredicted_corrected\tgreedy_mismatches\n";
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const specdec::SpeedupRow& row = rows[i];
    const specdec::DecodeStats& s = row.speculative;
    const specdec::Quartiles speedup = row.speedup();
    const double values[] = {row.plain_tokens_per_second(),
                             row.speculative_tokens_per_second(),
                             speedup.median,
                             speedup.p25,
                             speedup.p75,
                             row.aggregate_speedup(),
                             row.cpu_speedup().median,
                             s.acceptance_rate(),
                             s.alpha_hat(),
                             s.tokens_per_round(),
                             s.cost_ratio(),
                             row.predicted_flat(),
                             row.verify_cost(),
                             row.predicted()};
    tsv << row.draft_length() << '\t' << row.temperature();
    for (const double value : values) tsv << '\t' << value;
    tsv << '\t' << row.greedy_mismatches << '\n';

    std::snprintf(line, sizeof line,
                  "%s\n    {\"k\": %zu, \"temperature\": %g, \"plain_tokens_per_second\": %.6g, "
                  "\"speculative_tokens_per_second\": %.6g, \"speedup_median\": %.6g, "
                  "\"speedup_p25\": %.6g, \"speedup_p75\": %.6g, \"speedup_aggregate\": %.6g, "
                  "\"speedup_cpu_median\": %.6g, \"acceptance_rate\": %.6g, \"alpha_hat\": %.6g, "
                  "\"tokens_per_round\": %.6g, \"cost_ratio\": %.6g, \"predicted_speedup\": "
                  "%.6g, \"verify_cost\": %.6g, \"predicted_corrected\": %.6g, "
                  "\"library_fraction\": %.6g, "
                  "\"greedy_mismatches\": %zu,",
                  i == 0 ? "" : ",", row.draft_length(), static_cast<double>(row.temperature()),
                  values[0], values[1], values[2], values[3], values[4], values[5], values[6],
                  values[7], values[8], values[9], values[10], values[11], values[12], values[13],
                  s.library_seconds / s.total_seconds, row.greedy_mismatches);
    json << line << "\n     \"acceptance_by_position\": [";
    for (std::size_t k = 0; k < s.drafted_at.size(); ++k) {
      json << (k ? ", " : "")
           << static_cast<double>(s.accepted_at[k]) / static_cast<double>(s.drafted_at[k]);
    }
    json << "],\n     \"speedup_per_prompt\": [";
    for (std::size_t p = 0; p < row.speedups.size(); ++p) {
      json << (p ? ", " : "") << row.speedups[p];
    }
    json << "]}";
  }
  json << "\n  ]\n}\n";
  std::fprintf(stderr, "wrote %s and %s\n", json_path.c_str(), tsv_path.c_str());
}

int run(const Options& o) {
  GptModel target = GptModel::from_file(o.target);
  GptModel draft = GptModel::from_file(o.draft);
  const std::vector<std::vector<token_t>> prompts = read_prompts(o.prompts_file, o.prompts);
  const std::size_t max_context = std::min(target.max_context(), draft.max_context());
  for (const auto& prompt : prompts) {
    if (prompt.size() + o.tokens + o.k_max + 1 > max_context) {
      throw UsageError("a prompt of " + std::to_string(prompt.size()) + " tokens + --tokens " +
                       std::to_string(o.tokens) + " + K + 1 exceeds the max context of " +
                       std::to_string(max_context));
    }
  }

  specdec::SpeculativeDecoder speculative(draft, target);
  specdec::AutoregressiveDecoder plain(target);
  specdec::GenerationConfig config;
  config.max_new_tokens = o.tokens;
  config.seed = o.seed;
  // Every run pays for its own prompt: neither model may keep the previous run's KV cache.
  const auto reset_caches = [&] {
    target.reset();
    draft.reset();
  };
  reset_caches();  // warm-up: page in the weights, size the decoders' buffers
  (void)plain.generate(prompts[0], config);
  reset_caches();
  (void)speculative.generate(prompts[0], config);

  std::vector<std::size_t> draft_lengths;
  for (std::size_t k = o.k_min; k <= o.k_max; ++k) draft_lengths.push_back(k);
  const std::string load_start = load_average();
  std::fprintf(stderr,
               "gpt_speedup: %zu prompts x %zu tokens, K = %zu..%zu, %s baseline; load %s\n",
               prompts.size(), o.tokens, o.k_min, o.k_max, o.shared_baseline ? "shared" : "paired",
               load_start.c_str());
  std::vector<specdec::SpeedupRow> rows;
  for (const float temperature : o.temperatures) {
    config.sampling.temperature = temperature;
    specdec::SpeedupOptions options;
    options.shared_baseline = o.shared_baseline;
    options.on_prompt = [&](std::size_t p, std::size_t count) {
      std::fprintf(stderr, "  T = %g: prompt %zu/%zu\n", static_cast<double>(temperature), p + 1,
                   count);
    };
    specdec::SpeedupTable table = specdec::measure_speedup(speculative, plain, prompts, config,
                                                           draft_lengths, reset_caches, options);
    for (specdec::SpeedupRow& row : table.rows) rows.push_back(std::move(row));
  }
  const std::string load_end = load_average();

  std::printf(
      "%zu held-out prompts x %zu new tokens, seed %llu, %s plain baseline; load average "
      "%s at start, %s at end\n\n",
      prompts.size(), o.tokens, static_cast<unsigned long long>(o.seed),
      o.shared_baseline ? "shared" : "paired", load_start.c_str(), load_end.c_str());
  print_table(rows);
  if (!o.out.empty()) write_results(o.out, o, prompts.size(), load_start, load_end, rows);

  std::size_t mismatches = 0;
  for (const specdec::SpeedupRow& row : rows) mismatches += row.greedy_mismatches;
  if (mismatches > 0) {
    std::fprintf(stderr, "gpt_speedup: %zu greedy speculative outputs differ from plain decoding\n",
                 mismatches);
    return 1;
  }
  return 0;
}

}  // namespace

constexpr const char* kUsage =
    "usage: gpt_speedup [--prompts N] [--tokens N] [--k-max K] [--k-min K] [--temperatures 0,1]\n"
    "                   [--seed N] [--shared-baseline] [--out FILE.json] [--prompts-file F]\n"
    "                   [--target F] [--draft F]\n"
    "Defaults: every prompt of models/prompts.txt, 200 tokens, K = 1..8 (--k-min 1), T = 0,1,\n"
    "seed 1234, paired baseline (a plain run next to every speculative run),\n"
    "no files written. Every run is seeded alike, so a K's figures do not depend on --k-min.\n";

int main(int argc, char** argv) {
  try {
    const Options options = parse_args(argc, argv);
    if (options.help) {
      std::fputs(kUsage, stdout);
      return 0;
    }
    return run(options);
  } catch (const UsageError& error) {
    std::fprintf(stderr, "gpt_speedup: %s\n", error.what());
    return 2;
  } catch (const std::exception& error) {
    std::fprintf(stderr, "gpt_speedup: error: %s\n", error.what());
    return 1;
  }
}

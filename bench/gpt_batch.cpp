// gpt_batch: batched speculative decoding vs plain batched decoding on the shipped KJV pair.
//
// For every batch size B and temperature, B held-out prompts (models/prompts.txt, from the
// first) are decoded at once by BatchedDecoder over the example GPT's batched forward
// (score_batch / draft_batch): speculative with a fixed K per round (-k), speculative with
// the goodput policy (draft lengths planned for the whole batch, K <= --goodput-k, its cost
// curves measured by measure_batch_call_costs once per B, before the repetitions), and plain
// (no drafts: one row per sequence per target call, the same forward). Each repetition runs
// all three, in rotating order, in this one process, so they see the same machine state; the
// table gives the medians of total tokens/s (all sequences' tokens / wall time) and the
// median of the per-repetition ratios to plain, and the same ratio from the process's CPU time
// (one thread per call: CPU time is the run's time without what other processes took, and
// without the time the process was stopped), goodput's ratio to the fixed K, and per-sequence
// latency (the median over the sequences of the milliseconds per token each waited from
// joining the batch to leaving it; medians over the repetitions). Sequence i has seed i
// (T > 0). With --warm-decoder the goodput arm keeps one decoder for all the repetitions of a
// row, as a server keeps its decoder in service (its plan's verdicts and timings carry over
// from batch to batch); otherwise each repetition constructs its own.
//
// At B = 1 each repetition also runs the single-sequence decoders on the same prompt and config
// (SpeculativeDecoder with the fixed K, AutoregressiveDecoder), and a line after each B = 1 row
// gives BatchedDecoder's rate over theirs: what batching costs a lone sequence.
//
//   gpt_batch [--batches 1,2,4,8] [--temperatures 0,1] [-k 8] [--goodput-k 16] [--tokens 200]
//             [--repeats 5] [--threads 1] [--probe-interval N] [--warm-decoder]

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <specdec/specdec.hpp>

#include "batch_run.hpp"
#include "gpt/gpt_model.hpp"

namespace {

using specdec::token_t;
using specdec::examples::BatchPrompts;
using specdec::examples::BatchRun;
using specdec::examples::GptModel;
using specdec::examples::median;

/// CPU time of this process, in seconds.
double cpu_seconds() {
  timespec now{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &now);
  return static_cast<double>(now.tv_sec) + 1e-9 * static_cast<double>(now.tv_nsec);
}

struct Run {
  std::size_t tokens = 0;
  double seconds = 0;
  double cpu = 0;
  double ms_per_token = 0;  // per-sequence latency: the median over the sequences
  double rows_per_call = 0;
  double acceptance = 0;
  std::vector<std::vector<token_t>> tokens_by_sequence;
  [[nodiscard]] double tokens_per_second() const { return static_cast<double>(tokens) / seconds; }
  [[nodiscard]] double tokens_per_cpu_second() const { return static_cast<double>(tokens) / cpu; }
};

/// One sequence through the single-sequence decoder `Decoder` (SpeculativeDecoder or
/// AutoregressiveDecoder over the same models).
template <class Decoder>
Run decode_single(Decoder& decoder, const std::vector<token_t>& prompt,
                  const specdec::GenerationConfig& config) {
  const auto start = std::chrono::steady_clock::now();
  const double cpu_start = cpu_seconds();
  specdec::GenerationResult result = decoder.generate(prompt, config);
  Run run;
  run.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  run.cpu = cpu_seconds() - cpu_start;
  run.tokens = result.stats.emitted;
  run.acceptance = result.stats.acceptance_rate();
  run.tokens_by_sequence.push_back(std::move(result.tokens));
  return run;
}

template <class Policy>
using GptBatchedDecoder =
    specdec::BatchedDecoder<GptModel, specdec::ModelProposer<GptModel>, Policy>;

/// The prompts through `decoder` (empty before and after: a new one, or one kept in service).
template <class Decoder>
Run decode_with(Decoder& decoder, const BatchPrompts& prompts) {
  const double cpu_start = cpu_seconds();
  BatchRun batch = specdec::examples::run_batch(decoder, prompts);
  Run run;
  run.cpu = cpu_seconds() - cpu_start;
  run.seconds = batch.seconds;
  run.tokens = batch.tokens();
  run.ms_per_token = batch.median_ms_per_token();
  run.rows_per_call = batch.stats.rows_per_target_call();
  run.acceptance = batch.pooled().acceptance_rate();
  for (specdec::GenerationResult& result : batch.results) {
    run.tokens_by_sequence.push_back(std::move(result.tokens));
  }
  return run;
}

/// The prompts through a new decoder.
template <class Policy>
Run decode(GptModel& target, GptModel& draft, Policy policy, const BatchPrompts& prompts,
           const specdec::BatchGoodputOptions& costs = {}) {
  GptBatchedDecoder<Policy> decoder(target, specdec::ModelProposer<GptModel>(draft),
                                    std::move(policy), {}, costs);
  return decode_with(decoder, prompts);
}

std::vector<std::size_t> size_list(std::string_view text) {
  std::vector<std::size_t> values;
  std::size_t at = 0;
  while (at <= text.size()) {
    const std::size_t comma = std::min(text.find(',', at), text.size());
    values.push_back(std::stoul(std::string(text.substr(at, comma - at))));
    at = comma + 1;
  }
  return values;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::size_t> batches{1, 2, 4, 8};
  std::vector<float> temperatures{0.0f, 1.0f};
  std::size_t draft_length = 8, goodput_cap = 16, tokens = 200, repeats = 5, threads = 1;
  std::size_t probe_interval = 0;  // 0: BatchGoodputOptions' default
  bool warm_decoder = false;
  for (int i = 1; i < argc; ++i) {
    const std::string_view flag = argv[i];
    if (flag == "--warm-decoder") {
      warm_decoder = true;
      continue;
    }
    if (i + 1 == argc) {  // every other flag takes a value
      std::fprintf(stderr, "gpt_batch: %s expects a value (or is not a flag of gpt_batch)\n",
                   argv[i]);
      return 2;
    }
    const std::string value = argv[++i];
    if (flag == "--batches") {
      batches = size_list(value);
    } else if (flag == "--temperatures") {
      temperatures.clear();
      for (const std::size_t t : size_list(value)) temperatures.push_back(static_cast<float>(t));
    } else if (flag == "-k") {
      draft_length = std::stoul(value);
    } else if (flag == "--goodput-k") {
      goodput_cap = std::stoul(value);
    } else if (flag == "--tokens") {
      tokens = std::stoul(value);
    } else if (flag == "--repeats") {
      repeats = std::stoul(value);
    } else if (flag == "--probe-interval") {
      probe_interval = std::stoul(value);
    } else if (flag == "--threads") {
      threads = std::stoul(value);
    } else {
      std::fprintf(stderr, "gpt_batch: unknown flag %s\n", argv[i - 1]);
      return 2;
    }
  }
  GptModel target = GptModel::from_file(SPECDEC_MODELS_DIR "/kjv-target.spdc");
  GptModel draft = GptModel::from_file(SPECDEC_MODELS_DIR "/kjv-draft.spdc");
  target.set_threads(threads);
  std::vector<std::vector<token_t>> all_prompts;
  {
    std::ifstream in(SPECDEC_MODELS_DIR "/prompts.txt");
    for (std::string line; std::getline(in, line);) {
      std::vector<token_t> prompt{'\n'};
      for (const unsigned char byte : line) prompt.push_back(byte);
      all_prompts.push_back(std::move(prompt));
    }
  }
  target.target(all_prompts[0], 1);  // warm-up
  target.reset();

  std::printf(
      "| T | B | plain tokens/s | K = %zu tokens/s | goodput tokens/s | K = %zu / plain, median "
      "of %zu [min, max] | goodput / plain [min, max] | goodput / K = %zu | CPU time: K, goodput "
      "/ plain | ms per token per sequence (plain, K, goodput) | rows/target call (K, goodput) | "
      "acceptance (K, goodput) | greedy identical |\n"
      "|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|:-:|\n",
      draft_length, draft_length, repeats, draft_length);
  for (const float temperature : temperatures) {
    for (const std::size_t batch : batches) {
      BatchPrompts fixed, goodput;   // the same prompts, each sequence's config
      std::vector<token_t> context;  // the prompts back to back: measure_batch_call_costs'
      for (std::size_t i = 0; i < batch; ++i) {
        fixed.tokens.push_back(all_prompts[i % all_prompts.size()]);
        specdec::GenerationConfig config;
        config.max_new_tokens = tokens;
        config.sampling.temperature = temperature;
        config.draft_length = draft_length;
        config.verifier = specdec::VerifierKind::block;  // the demo's default
        config.seed = i;
        fixed.configs.push_back(config);
        config.draft_length = goodput_cap;
        config.draft_length_policy.kind = specdec::DraftLengthKind::goodput;
        goodput.configs.push_back(config);
      }
      goodput.tokens = fixed.tokens;
      for (std::size_t i = 0; context.size() < std::max<std::size_t>(64, 2 * goodput_cap + 2);
           ++i) {
        const auto& prompt = all_prompts[i % all_prompts.size()];
        context.insert(context.end(), prompt.begin(), prompt.end());
      }
      specdec::BatchGoodputOptions costs =
          specdec::measure_batch_call_costs(draft, target, context, batch, goodput_cap, 3)
              .goodput_options();
      if (probe_interval > 0) costs.probe_interval = probe_interval;
      using GoodputDecoder = GptBatchedDecoder<specdec::ConfiguredDraftLength>;
      std::optional<GoodputDecoder> kept;  // --warm-decoder: the goodput arm's, for the row
      if (warm_decoder) {
        kept.emplace(target, specdec::ModelProposer<GptModel>(draft),
                     specdec::ConfiguredDraftLength{}, specdec::ConfiguredVerifier{}, costs);
      }
      std::vector<double> plain_rate, fixed_rate, goodput_rate, fixed_ratio, goodput_ratio,
          versus_fixed, fixed_cpu, goodput_cpu, plain_ms, fixed_ms, goodput_ms;
      Run plain_run, fixed_run, goodput_run, single_fixed_run, single_plain_run;
      std::vector<double> single_fixed_ratio, single_plain_ratio;
      const std::size_t turns = batch == 1 ? 5 : 3;
      bool identical = true;
      for (std::size_t r = 0; r < repeats; ++r) {
        for (std::size_t turn = 0; turn < turns; ++turn) {
          switch ((turn + r) % turns) {
            case 3: {
              target.reset();
              draft.reset();
              specdec::SpeculativeDecoder single(draft, target);
              single_fixed_run = decode_single(single, fixed.tokens[0], fixed.configs[0]);
              break;
            }
            case 4: {
              target.reset();
              specdec::AutoregressiveDecoder single(target);
              single_plain_run = decode_single(single, fixed.tokens[0], fixed.configs[0]);
              break;
            }
            case 0:
              plain_run = decode(target, draft, specdec::NeverDraft{}, fixed);
              break;
            case 1:
              fixed_run = decode(target, draft, specdec::ConfiguredDraftLength{}, fixed);
              break;
            default:
              goodput_run =
                  kept ? decode_with(*kept, goodput)
                       : decode(target, draft, specdec::ConfiguredDraftLength{}, goodput, costs);
              break;
          }
        }
        plain_rate.push_back(plain_run.tokens_per_second());
        fixed_rate.push_back(fixed_run.tokens_per_second());
        goodput_rate.push_back(goodput_run.tokens_per_second());
        plain_ms.push_back(plain_run.ms_per_token);
        fixed_ms.push_back(fixed_run.ms_per_token);
        goodput_ms.push_back(goodput_run.ms_per_token);
        fixed_ratio.push_back(fixed_rate.back() / plain_rate.back());
        goodput_ratio.push_back(goodput_rate.back() / plain_rate.back());
        versus_fixed.push_back(goodput_rate.back() / fixed_rate.back());
        fixed_cpu.push_back(fixed_run.tokens_per_cpu_second() / plain_run.tokens_per_cpu_second());
        goodput_cpu.push_back(goodput_run.tokens_per_cpu_second() /
                              plain_run.tokens_per_cpu_second());
        identical = identical && fixed_run.tokens_by_sequence == plain_run.tokens_by_sequence &&
                    goodput_run.tokens_by_sequence == plain_run.tokens_by_sequence;
        if (batch == 1) {
          single_fixed_ratio.push_back(fixed_rate.back() / single_fixed_run.tokens_per_second());
          single_plain_ratio.push_back(plain_rate.back() / single_plain_run.tokens_per_second());
          identical = identical &&
                      single_fixed_run.tokens_by_sequence == fixed_run.tokens_by_sequence &&
                      single_plain_run.tokens_by_sequence == plain_run.tokens_by_sequence;
        }
      }
      const auto low = [](const std::vector<double>& v) {
        return *std::min_element(v.begin(), v.end());
      };
      const auto high = [](const std::vector<double>& v) {
        return *std::max_element(v.begin(), v.end());
      };
      std::printf(
          "| %g | %zu | %.0f | %.0f | %.0f | %.2fx [%.2f, %.2f] | %.2fx [%.2f, %.2f] | %.2f | "
          "%.2fx, %.2fx | %.2f, %.2f, %.2f | %.1f, %.1f | %.3f, %.3f | %s |\n",
          static_cast<double>(temperature), batch, median(plain_rate), median(fixed_rate),
          median(goodput_rate), median(fixed_ratio), low(fixed_ratio), high(fixed_ratio),
          median(goodput_ratio), low(goodput_ratio), high(goodput_ratio), median(versus_fixed),
          median(fixed_cpu), median(goodput_cpu), median(plain_ms), median(fixed_ms),
          median(goodput_ms), fixed_run.rows_per_call, goodput_run.rows_per_call,
          fixed_run.acceptance, goodput_run.acceptance,
          temperature > 0 ? "-"
          : identical     ? "yes"
                          : "NO");
      if (batch == 1) {
        std::printf(
            "B = 1 against the single-sequence decoders (T = %g): batched / single, K = %zu "
            "%.3fx [%.3f, %.3f], plain %.3fx [%.3f, %.3f]; the same tokens: %s\n",
            static_cast<double>(temperature), draft_length, median(single_fixed_ratio),
            low(single_fixed_ratio), high(single_fixed_ratio), median(single_plain_ratio),
            low(single_plain_ratio), high(single_plain_ratio),
            single_fixed_run.tokens_by_sequence == fixed_run.tokens_by_sequence &&
                    single_plain_run.tokens_by_sequence == plain_run.tokens_by_sequence
                ? "yes"
                : "NO");
      }
      std::fflush(stdout);
    }
  }
  return 0;
}

// gpt_threads: end-to-end tokens per second of the example GPT pair on one thread against N
// threads per call (GptModel::set_threads), for plain decoding and speculative decoding as
// specdec-demo runs it (draft model, static K), over the held-out prompts of models/prompts.txt.
//
//   gpt_threads [--prompts 10] [--tokens 200] [--k 8] [--temperatures 0,1] [--threads 2]
//               [--draft-threads 1] [--seed 1234]
//
// Paired: for every prompt, temperature and decoder the one-thread run and the N-thread run are
// made back to back (which goes first alternates with the prompt), each on its own target model
// (and draft model, when --draft-threads is not 1) with the KV caches reset before the run. The
// table gives the medians over prompts of each side's tokens/s and of the per-prompt ratio
// (N threads / 1 thread), and the aggregate tokens/s (all tokens / all seconds). Greedy outputs
// must be identical across thread counts and decoders (the logits are bitwise the same): a
// mismatch is reported and makes the exit status 1.

#include <algorithm>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <specdec/specdec.hpp>

#include "gpt/gpt_model.hpp"
#include "gpt_programs.hpp"

namespace {

using specdec::token_t;
using specdec::examples::GptModel;

struct Options {
  std::size_t prompts = 10;
  std::size_t tokens = 200;
  std::size_t k = 8;
  std::vector<double> temperatures{0.0, 1.0};
  std::size_t threads = 2;
  std::size_t draft_threads = 1;
  std::uint64_t seed = 1234;
};

/// One side of a pair: the models of a thread count.
struct Side {
  GptModel* target;
  GptModel* draft;
};

/// Per (decoder, temperature): per-prompt tokens/s of both sides, and the totals.
struct Row {
  std::string decoder;
  double temperature = 0;
  std::vector<double> one, many, ratio;
  double one_tokens = 0, one_seconds = 0, many_tokens = 0, many_seconds = 0;
  std::size_t mismatches = 0;
};

specdec::GenerationResult run(const Side& side, bool speculative, std::span<const token_t> prompt,
                              const specdec::GenerationConfig& config) {
  side.target->reset();
  side.draft->reset();
  if (speculative) {
    specdec::SpeculativeDecoder decoder(*side.draft, *side.target);
    return decoder.generate(prompt, config);
  }
  specdec::AutoregressiveDecoder decoder(*side.target);
  return decoder.generate(prompt, config);
}

double tokens_per_second(const specdec::GenerationResult& result) {
  return static_cast<double>(result.stats.emitted) / result.stats.total_seconds;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  try {
    specdec_bench::parse_flags(argc, argv, [&](std::string_view flag, std::string_view value) {
      if (flag == "--prompts")
        o.prompts = specdec_bench::parse_count(flag, value);
      else if (flag == "--tokens")
        o.tokens = specdec_bench::parse_count(flag, value);
      else if (flag == "--k")
        o.k = specdec_bench::parse_count(flag, value);
      else if (flag == "--temperatures")
        o.temperatures = specdec_bench::parse_list(flag, value);
      else if (flag == "--threads")
        o.threads = specdec_bench::parse_count(flag, value);
      else if (flag == "--draft-threads")
        o.draft_threads = specdec_bench::parse_count(flag, value);
      else if (flag == "--seed")
        o.seed = specdec_bench::parse_count(flag, value);
      else
        return false;
      return true;
    });
    if (o.prompts == 0 || o.tokens == 0 || o.k == 0 || o.threads == 0 || o.draft_threads == 0) {
      throw std::invalid_argument("--prompts, --tokens, --k, --threads, --draft-threads: >= 1");
    }
  } catch (const std::exception& error) {
    std::fprintf(stderr,
                 "gpt_threads: %s\nusage: gpt_threads [--prompts 10] [--tokens 200] [--k 8] "
                 "[--temperatures 0,1] [--threads 2] [--draft-threads 1] [--seed 1234]\n",
                 error.what());
    return 2;
  }

  const std::string target_path = SPECDEC_MODELS_DIR "/kjv-target.spdc";
  const std::string draft_path = SPECDEC_MODELS_DIR "/kjv-draft.spdc";
  GptModel target_one = GptModel::from_file(target_path);
  GptModel draft_one = GptModel::from_file(draft_path);
  GptModel target_many = GptModel::from_file(target_path);
  target_many.set_threads(o.threads);
  GptModel draft_many = GptModel::from_file(draft_path);
  draft_many.set_threads(o.draft_threads);
  const Side one{&target_one, &draft_one};
  const Side many{&target_many, &draft_many};

  const auto prompts = specdec_bench::read_prompts(o.prompts);
  specdec::GenerationConfig config;
  config.max_new_tokens = o.tokens;
  config.draft_length = o.k;
  config.seed = o.seed;

  // Warm-up: page in the weights, start the pools, size the decoders' buffers.
  for (const Side* side : {&one, &many}) {
    (void)run(*side, false, prompts[0], config);
    (void)run(*side, true, prompts[0], config);
  }

  const std::string load_start = specdec_bench::load_average();
  std::fprintf(stderr,
               "gpt_threads: %zu prompts x %zu tokens, K = %zu, 1 vs %zu threads (draft "
               "%zu); load %s\n",
               prompts.size(), o.tokens, o.k, o.threads, o.draft_threads, load_start.c_str());
  std::vector<Row> rows;
  for (const double temperature : o.temperatures) {
    config.sampling.temperature = static_cast<float>(temperature);
    for (const bool speculative : {false, true}) {
      Row& row = rows.emplace_back();
      row.decoder = speculative ? "speculative, K = " + std::to_string(o.k) : "plain";
      row.temperature = temperature;
      for (std::size_t p = 0; p < prompts.size(); ++p) {
        specdec::GenerationResult first, second;
        const bool one_first = p % 2 == 0;
        first = run(one_first ? one : many, speculative, prompts[p], config);
        second = run(one_first ? many : one, speculative, prompts[p], config);
        const specdec::GenerationResult& a = one_first ? first : second;  // 1 thread
        const specdec::GenerationResult& b = one_first ? second : first;  // N threads
        row.one.push_back(tokens_per_second(a));
        row.many.push_back(tokens_per_second(b));
        row.ratio.push_back(tokens_per_second(b) / tokens_per_second(a));
        row.one_tokens += static_cast<double>(a.stats.emitted);
        row.one_seconds += a.stats.total_seconds;
        row.many_tokens += static_cast<double>(b.stats.emitted);
        row.many_seconds += b.stats.total_seconds;
        // Same seed, same logits: the same tokens at any temperature.
        if (a.tokens != b.tokens) ++row.mismatches;
      }
      std::fprintf(stderr, "  %s, T = %g: done\n", row.decoder.c_str(), temperature);
    }
  }
  const std::string load_end = specdec_bench::load_average();

  std::printf(
      "%zu held-out prompts x %zu new tokens, seed %llu, target 1 vs %zu threads, draft "
      "1 vs %zu; load average %s at start, %s at end\n\n",
      prompts.size(), o.tokens, static_cast<unsigned long long>(o.seed), o.threads, o.draft_threads,
      load_start.c_str(), load_end.c_str());
  std::printf(
      "| decoder | T | 1 thread tok/s | %zu threads tok/s | ratio median [IQR] | "
      "aggregate 1 / %zu | same tokens |\n|---|--:|--:|--:|--:|--:|:-:|\n",
      o.threads, o.threads);
  std::size_t mismatches = 0;
  for (Row& row : rows) {
    std::vector<double> sorted = row.ratio;
    std::sort(sorted.begin(), sorted.end());
    const auto quantile = [&](double q) {
      return sorted[static_cast<std::size_t>(q * static_cast<double>(sorted.size() - 1) + 0.5)];
    };
    std::printf(
        "| %s | %g | %.1f | %.1f | %.2fx [%.2f, %.2f] | %.1f / %.1f | %s |\n", row.decoder.c_str(),
        row.temperature, specdec_bench::median(row.one), specdec_bench::median(row.many),
        specdec_bench::median(row.ratio), quantile(0.25), quantile(0.75),
        row.one_tokens / row.one_seconds, row.many_tokens / row.many_seconds,
        row.mismatches == 0 ? "yes"
                            : ("**NO: " + std::to_string(row.mismatches) + " differ**").c_str());
    mismatches += row.mismatches;
  }
  return mismatches == 0 ? 0 : 1;
}

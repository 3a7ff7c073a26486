// gpt_verifiers: token-level vs block verification on the example GPT pair
// (models/kjv-{draft,target}.spdc), paired, on the held-out prompts of models/prompts.txt.
//
//   gpt_verifiers [--prompts N] [--tokens N] [--ks 2,4,6] [--temperatures 1,0.7] [--seed N]
//
// For every (prompt, T) one plain run, then for every K one token-level and one block run with
// the same seed, in alternating order (token first for even prompts), each with fresh KV caches.
// Per (T, K): tokens per round of each verifier (pooled over prompts) and their ratio, the
// speedup of each over the plain run (median over prompts), and block / token tokens per second
// (median over prompts of the per-prompt ratio: the wall-clock gain measured pair by pair).
// Output: a markdown table on stdout, progress on stderr.

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <fstream>
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
using specdec_bench::load_average;
using specdec_bench::median;
using specdec_bench::parse_count;
using specdec_bench::parse_flags;
using specdec_bench::parse_list;
using specdec_bench::read_prompts;

struct Options {
  std::size_t prompts = 50;
  std::size_t tokens = 200;
  std::vector<double> ks{2, 4, 6};
  std::vector<double> temperatures{1.0, 0.7};
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

struct Cell {
  double temperature = 0;
  std::size_t k = 0;
  std::size_t tokens[2] = {0, 0}, rounds[2] = {0, 0};
  std::vector<double> speedup[2], block_vs_token;
};

}  // namespace

int main(int argc, char** argv) try {
  const Options o = parse_args(argc, argv);
  GptModel target = GptModel::from_file(SPECDEC_MODELS_DIR "/kjv-target.spdc");
  GptModel draft = GptModel::from_file(SPECDEC_MODELS_DIR "/kjv-draft.spdc");
  const auto prompts = read_prompts(o.prompts);
  specdec::SpeculativeDecoder speculative(draft, target);
  specdec::AutoregressiveDecoder plain(target);
  specdec::GenerationConfig config;
  config.max_new_tokens = o.tokens;
  config.seed = o.seed;
  auto timed = [&](auto& decoder, const std::vector<token_t>& prompt) {
    target.reset();
    draft.reset();
    return decoder.generate(prompt, config);
  };
  (void)timed(speculative, prompts[0]);  // warm-up

  const std::string load_start = load_average();
  std::vector<Cell> cells;
  for (const double t : o.temperatures) {
    for (const double k : o.ks) {
      Cell& cell = cells.emplace_back();
      cell.temperature = t;
      cell.k = static_cast<std::size_t>(k);
    }
  }
  for (std::size_t p = 0; p < prompts.size(); ++p) {
    std::fprintf(stderr, "prompt %zu/%zu\n", p + 1, prompts.size());
    for (const double t : o.temperatures) {
      config.sampling.temperature = static_cast<float>(t);
      config.seed = o.seed + p;
      const auto base = timed(plain, prompts[p]);
      const double base_rate = static_cast<double>(base.tokens.size()) / base.stats.total_seconds;
      for (Cell& cell : cells) {
        if (cell.temperature != t) continue;
        config.draft_length = cell.k;
        double rate[2] = {0, 0};
        for (int step = 0; step < 2; ++step) {
          const int which = (p % 2 == 0) ? step : 1 - step;  // 0 token, 1 block
          config.verifier =
              which == 1 ? specdec::VerifierKind::block : specdec::VerifierKind::token;
          const auto run = timed(speculative, prompts[p]);
          cell.tokens[which] += run.tokens.size();
          cell.rounds[which] += run.stats.rounds;
          rate[which] = static_cast<double>(run.tokens.size()) / run.stats.total_seconds;
          cell.speedup[which].push_back(rate[which] / base_rate);
        }
        cell.block_vs_token.push_back(rate[1] / rate[0]);
      }
    }
  }
  std::printf(
      "%zu held-out prompts x %zu tokens, paired token/block runs; load %s at start, %s "
      "at end\n\n",
      prompts.size(), o.tokens, load_start.c_str(), load_average().c_str());
  std::printf(
      "| T | K | tokens/round token | block | block/token | speedup token (median) | "
      "block | block/token tok/s (median) |\n|--:|--:|--:|--:|--:|--:|--:|--:|\n");
  for (const Cell& c : cells) {
    const double tau_token = static_cast<double>(c.tokens[0]) / static_cast<double>(c.rounds[0]);
    const double tau_block = static_cast<double>(c.tokens[1]) / static_cast<double>(c.rounds[1]);
    std::printf("| %.2g | %zu | %.3f | %.3f | %.3f | %.2f | %.2f | %.3f |\n", c.temperature, c.k,
                tau_token, tau_block, tau_block / tau_token, median(c.speedup[0]),
                median(c.speedup[1]), median(c.block_vs_token));
  }
  return 0;
} catch (const std::exception& error) {
  std::fprintf(stderr, "gpt_verifiers: %s\n", error.what());
  return 2;
}

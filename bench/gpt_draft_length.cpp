// gpt_draft_length: draft-length policies on the example GPT pair (models/kjv-*.spdc), paired,
// on the held-out prompts of models/prompts.txt.
//
//   gpt_draft_length [--prompts N] [--tokens N] [--ks 1,2,...] [--cap K] [--temperatures 0,1]
//                    [--seed N]
//
// For every (prompt, T): one plain run, then one speculative run per policy — static K for each
// K in --ks, and the schedule, confidence (p_min 0.75) and goodput policies capped at --cap —
// in an order rotated by one per prompt (so no policy always runs first), each with fresh KV
// caches, all with the same seed. One decoder serves every run, so the goodput policy's measured
// costs carry over from prompt to prompt as they would in an application; its acceptance
// estimates start over at every generate().
// Per (T, policy): speedup over the plain run (median over prompts, and aggregate: total plain
// seconds / total speculative seconds), tokens per round, mean drafted per round, the fraction
// of rounds run as plain steps, and (T = 0) whether every output equals the plain one.
// Output: a markdown table on stdout, progress on stderr.

#include <cstdio>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <specdec/specdec.hpp>

#include "gpt/gpt_model.hpp"
#include "gpt_programs.hpp"

namespace {

using specdec::DraftLengthKind;
using specdec::token_t;
using specdec::examples::GptModel;
using specdec_bench::load_average;
using specdec_bench::median;
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
  for (int i = 1; i < argc; ++i) {
    const std::string_view flag = argv[i];
    if (i + 1 >= argc) throw std::invalid_argument(std::string(flag) + " needs a value");
    const std::string_view value = argv[++i];
    const auto number = [&] { return static_cast<std::size_t>(parse_list(flag, value).at(0)); };
    if (flag == "--prompts") o.prompts = number();
    else if (flag == "--tokens") o.tokens = number();
    else if (flag == "--ks") o.ks = parse_list(flag, value);
    else if (flag == "--cap") o.cap = number();
    else if (flag == "--temperatures") o.temperatures = parse_list(flag, value);
    else if (flag == "--seed") o.seed = static_cast<std::uint64_t>(parse_list(flag, value).at(0));
    else throw std::invalid_argument("unknown option '" + std::string(flag) + "'");
  }
  return o;
}

struct Policy {
  std::string name;
  DraftLengthKind kind;
  std::size_t draft_length;
};

struct Cell {
  double temperature = 0;
  Policy policy;
  std::vector<double> speedups;
  double plain_seconds = 0, seconds = 0;
  specdec::DecodeStats stats;
  std::size_t mismatches = 0;
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
  auto timed = [&](auto& decoder, const std::vector<token_t>& prompt) {
    target.reset();
    draft.reset();
    return decoder.generate(prompt, config);
  };

  std::vector<Policy> policies;
  for (const double k : o.ks) {
    policies.push_back({"K=" + std::to_string(static_cast<int>(k)), DraftLengthKind::fixed,
                        static_cast<std::size_t>(k)});
  }
  policies.push_back({"schedule", DraftLengthKind::schedule, o.cap});
  policies.push_back({"confidence", DraftLengthKind::confidence, o.cap});
  policies.push_back({"goodput", DraftLengthKind::goodput, o.cap});
  std::vector<Cell> cells;
  for (const double t : o.temperatures) {
    for (const Policy& policy : policies) cells.push_back({t, policy, {}, 0, 0, {}, 0});
  }
  config.draft_length = 4;
  (void)timed(speculative, prompts[0]);  // warm-up

  const std::string load_start = load_average();
  for (std::size_t p = 0; p < prompts.size(); ++p) {
    std::fprintf(stderr, "prompt %zu/%zu\n", p + 1, prompts.size());
    for (const double t : o.temperatures) {
      config.sampling.temperature = static_cast<float>(t);
      config.seed = o.seed + p;
      const auto base = timed(plain, prompts[p]);
      const double base_rate = static_cast<double>(base.tokens.size()) / base.stats.total_seconds;
      std::vector<Cell*> row;
      for (Cell& cell : cells) {
        if (cell.temperature == t) row.push_back(&cell);
      }
      for (std::size_t i = 0; i < row.size(); ++i) {
        Cell& cell = *row[(i + p) % row.size()];
        config.draft_length = cell.policy.draft_length;
        config.draft_length_policy.kind = cell.policy.kind;
        const auto run = timed(speculative, prompts[p]);
        const double rate = static_cast<double>(run.tokens.size()) / run.stats.total_seconds;
        cell.speedups.push_back(rate / base_rate);
        cell.plain_seconds += base.stats.total_seconds;
        cell.seconds += run.stats.total_seconds;
        cell.stats += run.stats;
        if (t == 0 && run.tokens != base.tokens) ++cell.mismatches;
      }
    }
  }
  std::printf("%zu held-out prompts x %zu tokens, paired with a plain run per prompt; load %s at "
              "start, %s at end\n\n",
              prompts.size(), o.tokens, load_start.c_str(), load_average().c_str());
  std::printf("| T | policy | speedup (median) | aggregate | tokens/round | mean K | plain rounds "
              "| alpha_hat | greedy identical |\n|--:|:--|--:|--:|--:|--:|--:|--:|:--|\n");
  for (const Cell& c : cells) {
    const double rounds = static_cast<double>(c.stats.rounds);
    std::printf("| %.2g | %s | %.3f | %.3f | %.2f | %.2f | %.1f %% | %.3f | %s |\n",
                c.temperature, c.policy.name.c_str(), median(c.speedups),
                c.plain_seconds / c.seconds, c.stats.tokens_per_round(),
                static_cast<double>(c.stats.drafted) / rounds,
                100.0 * static_cast<double>(c.stats.plain_rounds()) / rounds, c.stats.alpha_hat(),
                c.temperature != 0         ? "-"
                : c.mismatches == 0        ? "yes"
                                           : (std::to_string(c.mismatches) + " differ").c_str());
  }
  return 0;
} catch (const std::exception& error) {
  std::fprintf(stderr, "gpt_draft_length: %s\n", error.what());
  return 2;
}

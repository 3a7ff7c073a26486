// ngram_speedup: model-free drafting on the example GPT pair (models/kjv-{draft,target}.spdc),
// greedy, paired runs. Four decoders per prompt: plain (AutoregressiveDecoder), n-gram lookup
// only (NgramDecoder: no draft model), the draft model only (SpeculativeDecoder), and n-gram
// lookup with the draft model as fallback (NgramThenModelDecoder).
//
//   ngram_speedup [--prompts N] [--tokens N] [--k K] [--min-ngram N] [--max-ngram N]
//                 [--quote-words N] [--seed N] [--show N] [--untimed-prefill 0|1]
//
// Two workloads of N prompts each:
//   repetitive: a held-out passage (2-3 consecutive verses of bench/data/kjv_heldout_passages.txt,
//               from chapters never seen in training), then the first verse's reference and
//               first three words again: a good continuation quotes the passage;
//   ordinary:   the held-out prompts of models/prompts.txt (a verse's beginning), no repeat.
// "mixed" pools the two. The passages file holds, per held-out chapter
// (tools/train/make_corpus.py's heldout.txt), up to two runs of 2-3 consecutive verses whose first
// verse has >= 70 bytes and which total <= 240 bytes: 40 passages, one blank line after each. Every
// prompt runs all four decoders back to back with fresh KV caches, in an order rotated per prompt,
// so background load hits them alike. Reported per workload and decoder: speedup over plain (median
// over prompts of the per-prompt tokens/s ratio, and the aggregate: total tokens / total seconds),
// acceptance (accepted / drafted), tokens per round, and how many outputs equal the plain greedy
// output token for token (all must: exit status 1 otherwise). Prompt + tokens must fit the models'
// context (384 bytes). Each run pays for its own prompt (a repetitive prompt is ~270 bytes: its
// prefill is a large share of a 96-token run); with --untimed-prefill 1 both models' KV caches hold
// the prompt before the clock starts (as a server's prefix cache would), so the figures are those
// of generation alone.
//
// Output: markdown tables on stdout, progress on stderr.

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

namespace {

using specdec::token_t;
using specdec::examples::GptModel;
using Tokens = std::vector<token_t>;

struct Options {
  std::size_t prompts = 20;  // per workload
  std::size_t tokens = 96;
  std::size_t k = 12;
  std::size_t min_ngram = 4;  // bytes: shorter matches are mostly coincidences (" th", "and")
  std::size_t max_ngram = 12;
  std::uint64_t seed = 1234;
  std::size_t quote_words = 3;  // words of the first verse quoted again after its reference
  std::size_t show = 0;  // print the first N prompts of each workload with their plain output
  bool untimed_prefill = false;  // run the prompt through both models before the clock starts
};

std::size_t parse_size(std::string_view flag, std::string_view text) {
  std::size_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc{} || end != text.data() + text.size() || text.empty()) {
    throw std::invalid_argument(std::string(flag) + " expects a number, got '" + std::string(text) +
                                "'");
  }
  return value;
}

Options parse_args(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string_view flag = argv[i];
    if (i + 1 >= argc) throw std::invalid_argument(std::string(flag) + " needs a value");
    const std::size_t value = parse_size(flag, argv[++i]);
    // clang-format off
    if (flag == "--prompts") o.prompts = value;
    else if (flag == "--tokens") o.tokens = value;
    else if (flag == "--k") o.k = value;
    else if (flag == "--min-ngram") o.min_ngram = value;
    else if (flag == "--max-ngram") o.max_ngram = value;
    else if (flag == "--seed") o.seed = value;
    else if (flag == "--quote-words") o.quote_words = value;
    else if (flag == "--show") o.show = value;
    else if (flag == "--untimed-prefill") o.untimed_prefill = value != 0;
    else throw std::invalid_argument("unknown option '" + std::string(flag) + "'");
    // clang-format on
  }
  return o;
}

Tokens bytes_of(std::string_view text) {
  Tokens tokens;
  for (const unsigned char byte : text) tokens.push_back(byte);
  return tokens;
}

/// "\n" + the passage's verses, one per line, + the first verse's reference and first three
/// words (the newline is the models' BOS, as for the ordinary prompts).
std::vector<Tokens> repetitive_prompts(std::size_t count, std::size_t quote_words) {
  std::ifstream in(SPECDEC_BENCH_DATA_DIR "/kjv_heldout_passages.txt", std::ios::binary);
  if (!in) throw std::runtime_error("cannot open kjv_heldout_passages.txt");
  std::vector<Tokens> prompts;
  std::vector<std::string> passage;
  auto finish_passage = [&] {
    if (passage.empty() || prompts.size() == count) return;
    std::string text = "\n";
    for (const std::string& verse : passage) text += verse + "\n";
    // The reference ("Book C:V": two words, or three for "1 Kings") plus quote_words words.
    const std::size_t reference_words = passage[0][0] >= '0' && passage[0][0] <= '9' ? 3 : 2;
    std::size_t quote = 0;
    for (std::size_t spaces = 0; quote < passage[0].size(); ++quote) {
      if (passage[0][quote] == ' ' && ++spaces == reference_words + quote_words) break;
    }
    text += passage[0].substr(0, quote);
    prompts.push_back(bytes_of(text));
    passage.clear();
  };
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) {
      finish_passage();
    } else {
      passage.push_back(line);
    }
  }
  finish_passage();
  return prompts;
}

std::vector<Tokens> ordinary_prompts(std::size_t count) {
  std::ifstream in(SPECDEC_MODELS_DIR "/prompts.txt", std::ios::binary);
  if (!in) throw std::runtime_error("cannot open prompts.txt");
  std::vector<Tokens> prompts;
  for (std::string line; std::getline(in, line) && prompts.size() < count;) {
    if (!line.empty()) prompts.push_back(bytes_of("\n" + line));
  }
  return prompts;
}

double median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

std::string load_average() {
  std::ifstream in("/proc/loadavg");
  std::string one, five, fifteen;
  in >> one >> five >> fifteen;
  return one + " " + five + " " + fifteen;
}

constexpr std::size_t kDecoders = 4;
constexpr const char* kNames[kDecoders] = {"plain", "n-gram only", "draft model only",
                                           "n-gram, else draft model"};

/// One decoder over one workload.
struct Tally {
  specdec::DecodeStats stats;
  std::vector<double> rates;     // tokens/s per prompt
  std::vector<double> speedups;  // over the paired plain run
  std::size_t identical = 0;
  std::size_t lookup_rounds = 0;  // combined decoder: rounds drafted by the lookup
};

struct Workload {
  std::string name;
  std::vector<Tally> tallies = std::vector<Tally>(kDecoders);
};

void print_table(const Workload& w, std::size_t prompts) {
  const Tally& plain = w.tallies[0];
  const double plain_rate = static_cast<double>(plain.stats.emitted) / plain.stats.total_seconds;
  std::printf("\n**%s** (%zu prompts)\n\n", w.name.c_str(), prompts);
  std::printf(
      "| decoder | tok/s (aggregate) | speedup median | speedup aggregate | acceptance | "
      "tokens/round | = plain |\n|---|--:|--:|--:|--:|--:|--:|\n");
  for (std::size_t d = 0; d < kDecoders; ++d) {
    const Tally& t = w.tallies[d];
    const double rate = static_cast<double>(t.stats.emitted) / t.stats.total_seconds;
    std::string acceptance = "-";
    if (d > 0 && t.stats.drafted > 0) {
      acceptance = std::to_string(static_cast<double>(t.stats.accepted) /
                                  static_cast<double>(t.stats.drafted))
                       .substr(0, 5);
    }
    std::printf("| %s | %.1f | %.2f | %.2f | %s | %.2f | %zu/%zu |\n", kNames[d], rate,
                d == 0 ? 1.0 : median(t.speedups), rate / plain_rate, acceptance.c_str(),
                t.stats.tokens_per_round(), t.identical, prompts);
  }
  const Tally& combined = w.tallies[3];
  std::printf("\nn-gram, else draft model: the lookup drafted %zu of %zu rounds.\n",
              combined.lookup_rounds, combined.stats.rounds);
}

}  // namespace

int main(int argc, char** argv) try {
  const Options o = parse_args(argc, argv);
  GptModel target = GptModel::from_file(SPECDEC_MODELS_DIR "/kjv-target.spdc");
  GptModel draft = GptModel::from_file(SPECDEC_MODELS_DIR "/kjv-draft.spdc");
  const specdec::NgramOptions ngram_options{.min_ngram = o.min_ngram, .max_ngram = o.max_ngram};

  specdec::AutoregressiveDecoder plain(target);
  specdec::NgramDecoder ngram(target, ngram_options);
  specdec::SpeculativeDecoder speculative(draft, target);
  specdec::NgramThenModelDecoder combined(draft, target, ngram_options);

  specdec::GenerationConfig config;
  config.max_new_tokens = o.tokens;
  config.draft_length = o.k;
  config.sampling.temperature = 0.0f;
  config.max_context = target.max_context();
  config.seed = o.seed;

  std::vector<Workload> workloads{{"repetitive"}, {"ordinary"}};
  const std::vector<Tokens> prompt_sets[2] = {repetitive_prompts(o.prompts, o.quote_words),
                                              ordinary_prompts(o.prompts)};
  for (const auto& set : prompt_sets) {
    for (const Tokens& prompt : set) {
      if (prompt.size() + o.tokens > config.max_context) {
        throw std::invalid_argument("a prompt of " + std::to_string(prompt.size()) +
                                    " bytes + --tokens exceeds the models' context");
      }
    }
  }

  auto run = [&](std::size_t which, const Tokens& prompt) {
    target.reset();
    draft.reset();
    if (o.untimed_prefill) {
      (void)target.target(prompt, 1);
      (void)draft.draft(prompt);
    }
    switch (which) {
      case 0:
        return plain.generate(prompt, config);
      case 1:
        return ngram.generate(prompt, config);
      case 2:
        return speculative.generate(prompt, config);
      default:
        return combined.generate(prompt, config);
    }
  };
  (void)run(3, prompt_sets[0][0]);  // warm-up

  const std::string load_start = load_average();
  for (std::size_t w = 0; w < 2; ++w) {
    const std::vector<Tokens>& prompts = prompt_sets[w];
    for (std::size_t p = 0; p < prompts.size(); ++p) {
      std::fprintf(stderr, "%s prompt %zu/%zu\n", workloads[w].name.c_str(), p + 1, prompts.size());
      config.seed = o.seed + p;
      std::vector<specdec::GenerationResult> results(kDecoders);
      for (std::size_t step = 0; step < kDecoders; ++step) {
        const std::size_t which = (step + p) % kDecoders;  // rotated order
        results[which] = run(which, prompts[p]);
        if (which == 3)
          workloads[w].tallies[3].lookup_rounds += combined.proposer().primary_rounds();
      }
      if (p < o.show) {
        const auto text = [](const Tokens& tokens) {
          return std::string(tokens.begin(), tokens.end());
        };
        std::printf("--- %s prompt %zu:%s|%s\n", workloads[w].name.c_str(), p + 1,
                    text(prompts[p]).c_str(), text(results[0].tokens).c_str());
      }
      const double plain_rate =
          static_cast<double>(results[0].tokens.size()) / results[0].stats.total_seconds;
      for (std::size_t d = 0; d < kDecoders; ++d) {
        Tally& tally = workloads[w].tallies[d];
        tally.stats += results[d].stats;
        const double rate =
            static_cast<double>(results[d].tokens.size()) / results[d].stats.total_seconds;
        tally.rates.push_back(rate);
        tally.speedups.push_back(rate / plain_rate);
        tally.identical += results[d].tokens == results[0].tokens ? 1 : 0;
      }
    }
  }
  Workload mixed{"mixed (repetitive + ordinary)"};
  for (std::size_t d = 0; d < kDecoders; ++d) {
    for (const Workload& w : workloads) {
      const Tally& t = w.tallies[d];
      mixed.tallies[d].stats += t.stats;
      mixed.tallies[d].rates.insert(mixed.tallies[d].rates.end(), t.rates.begin(), t.rates.end());
      mixed.tallies[d].speedups.insert(mixed.tallies[d].speedups.end(), t.speedups.begin(),
                                       t.speedups.end());
      mixed.tallies[d].identical += t.identical;
      mixed.tallies[d].lookup_rounds += t.lookup_rounds;
    }
  }

  std::printf(
      "greedy, %zu tokens, K = %zu, n-gram %zu..%zu, prefill %s; load average %s at "
      "start, %s at end\n",
      o.tokens, o.k, o.min_ngram, o.max_ngram, o.untimed_prefill ? "untimed" : "timed",
      load_start.c_str(), load_average().c_str());
  print_table(workloads[0], prompt_sets[0].size());
  print_table(workloads[1], prompt_sets[1].size());
  print_table(mixed, prompt_sets[0].size() + prompt_sets[1].size());
  bool all_identical = true;
  for (std::size_t d = 1; d < kDecoders; ++d) {
    all_identical = all_identical && mixed.tallies[d].identical == mixed.tallies[0].identical;
  }
  return all_identical ? 0 : 1;
} catch (const std::exception& error) {
  std::fprintf(stderr, "ngram_speedup: %s\n", error.what());
  return 2;
}

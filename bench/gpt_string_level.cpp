// gpt_string_level: a draft with a tokenizer of its own against the byte-level draft, on the
// example GPT target (models/kjv-target.spdc), over the held-out prompts of models/prompts.txt.
//   bytes K   the shipped byte-level draft (models/kjv-draft.spdc), SpeculativeDecoder
//   text K    the BPE draft (models/kjv-bpe-draft.spdc over models/kjv-bpe.tokenizer),
//             StringLevelDecoder: its text re-tokenized into the target's bytes, verified by
//             exact match (SLEM)
//   text-rs K the same draft, its bytes verified by rejection sampling against the draft's
//             law over them (SLRS, StringLevelOptions::rejection_sampling); T > 0 only (greedy
//             it is exact match)
// Each row is specdec::measure_speedup: every speculative run paired with a plain run of the
// same prompt, temperature and seed made right next to it (alternating order, caches reset
// before every run); the headline is the median of the per-prompt ratios. K counts target
// tokens (bytes) in both rows, so a row's draft calls per byte is what the tokenizer buys.
//
//   gpt_string_level [--prompts N] [--tokens N] [--ks 4,8] [--temperatures 0,1]
//                    [--verifier token|block] [--seed N] [--out FILE.json]
//
// Greedy: every speculative output must equal the plain one (exit 1 otherwise).

#include <cstdio>
#include <fstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <specdec/specdec.hpp>

#include "cli_args.hpp"
#include "gpt/bpe_tokenizer.hpp"
#include "gpt/gpt_model.hpp"

namespace {

using specdec::token_t;
using specdec::examples::BpeTokenizer;
using specdec::examples::GptModel;
using specdec::examples::parse_number;
using specdec::examples::UsageError;

struct Options {
  std::size_t prompts = 50;
  std::size_t tokens = 200;
  std::vector<std::size_t> ks{4, 8};
  std::vector<float> temperatures{0.0f, 1.0f};
  specdec::VerifierKind verifier = specdec::VerifierKind::block;
  std::uint64_t seed = 1234;
  std::string out;
  bool help = false;
  std::string prompts_file = SPECDEC_MODELS_DIR "/prompts.txt";
  std::string target = SPECDEC_MODELS_DIR "/kjv-target.spdc";
  std::string byte_draft = SPECDEC_MODELS_DIR "/kjv-draft.spdc";
  std::string bpe_draft = SPECDEC_MODELS_DIR "/kjv-bpe-draft.spdc";
  std::string tokenizer = SPECDEC_MODELS_DIR "/kjv-bpe.tokenizer";
};

template <class Number>
std::vector<Number> parse_list(std::string_view flag, std::string_view list) {
  std::vector<Number> values;
  while (true) {
    const std::size_t comma = list.find(',');
    values.push_back(parse_number<Number>(flag, list.substr(0, comma)));
    if (comma == std::string_view::npos) return values;
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
    // clang-format off
    if (flag == "--prompts") o.prompts = parse_number<std::size_t>(flag, value());
    else if (flag == "--tokens") o.tokens = parse_number<std::size_t>(flag, value());
    else if (flag == "--ks") o.ks = parse_list<std::size_t>(flag, value());
    else if (flag == "--temperatures") o.temperatures = parse_list<float>(flag, value());
    else if (flag == "--verifier") {
      o.verifier = specdec::examples::parse_flag<specdec::VerifierKind>(flag, value());
    }
    else if (flag == "--seed") o.seed = parse_number<std::uint64_t>(flag, value());
    else if (flag == "--out") o.out = value();
    else if (flag == "-h" || flag == "--help") o.help = true;
    else throw UsageError("unknown option '" + std::string(flag) + "' (see --help)");
    // clang-format on
  }
  if (o.prompts == 0 || o.tokens == 0 || o.ks.empty() || o.temperatures.empty()) {
    throw UsageError("--prompts, --tokens, --ks and --temperatures must be >= 1 / non-empty");
  }
  for (const std::size_t k : o.ks) {
    if (k == 0) throw UsageError("--ks: K must be >= 1");
  }
  return o;
}

std::vector<std::vector<token_t>> read_prompts(const std::string& path, std::size_t count) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open prompts file " + path);
  std::vector<std::vector<token_t>> prompts;
  for (std::string line; std::getline(in, line) && prompts.size() < count;) {
    if (line.empty()) continue;
    std::vector<token_t>& prompt = prompts.emplace_back(1, token_t{'\n'});  // the models' BOS
    for (const unsigned char byte : line) prompt.push_back(byte);
  }
  if (prompts.size() < count) {
    throw UsageError("--prompts " + std::to_string(count) + ": " + path + " has only " +
                     std::to_string(prompts.size()));
  }
  return prompts;
}

struct Row {
  std::string draft;  // "bytes", "text" or "text-rs"
  specdec::SpeedupRow row;
  specdec::StringLevelWork work;  // text rows: what drafting by text did
};

int run(const Options& o) {
  GptModel target = GptModel::from_file(o.target);
  GptModel byte_draft = GptModel::from_file(o.byte_draft);
  GptModel bpe_draft = GptModel::from_file(o.bpe_draft);
  const BpeTokenizer bpe = BpeTokenizer::load(o.tokenizer);
  const specdec::ByteTokenizer bytes;
  const auto prompts = read_prompts(o.prompts_file, o.prompts);
  const auto reset_caches = [&] {
    target.reset();
    byte_draft.reset();
    bpe_draft.reset();
  };
  specdec::AutoregressiveDecoder plain(target);
  specdec::SpeculativeDecoder by_bytes(byte_draft, target);
  specdec::StringLevelDecoder by_text(bpe_draft, bpe, target, bytes);
  specdec::StringLevelDecoder by_text_rs(
      bpe_draft, bpe, target, bytes,
      {.rejection_sampling = true, .target_vocab_size = target.vocab_size()});

  specdec::GenerationConfig config;
  config.max_new_tokens = o.tokens;
  config.seed = o.seed;
  config.verifier = o.verifier;
  reset_caches();  // warm-up: page the weights in, size the buffers
  (void)plain.generate(prompts[0], config);
  reset_caches();
  (void)by_bytes.generate(prompts[0], config);
  reset_caches();
  (void)by_text.generate(prompts[0], config);
  reset_caches();
  (void)by_text_rs.generate(prompts[0], config);

  std::vector<Row> rows;
  for (const float temperature : o.temperatures) {
    config.sampling.temperature = temperature;
    for (const std::size_t k : o.ks) {
      config.draft_length = k;
      const std::vector<specdec::SpeedupSetting> setting{{"K=" + std::to_string(k), config}};
      for (const std::string_view draft : {"bytes", "text", "text-rs"}) {
        if (draft == "text-rs" && temperature == 0.0f) continue;  // greedy: exact match
        std::fprintf(stderr, "T = %g, K = %zu, %s ...\n", static_cast<double>(temperature), k,
                     draft.data());
        auto& by_string = draft == "text" ? by_text : by_text_rs;
        const specdec::StringLevelWork before = by_string.proposer().work();
        specdec::SpeedupTable table =
            draft == "bytes"
                ? specdec::measure_speedup(by_bytes, plain, prompts, setting, reset_caches)
                : specdec::measure_speedup(by_string, plain, prompts, setting, reset_caches);
        specdec::StringLevelWork work = by_string.proposer().work();
        work.draft_calls -= before.draft_calls;
        work.draft_tokens -= before.draft_tokens;
        work.drafted_bytes -= before.drafted_bytes;
        work.proposed_tokens -= before.proposed_tokens;
        work.retokenization_stops -= before.retokenization_stops;
        rows.push_back({std::string(draft), std::move(table.rows.front()), work});
      }
    }
  }

  std::printf(
      "%zu held-out prompts x %zu new tokens, %s verification, paired plain runs\n\n"
      "| draft | T | K | speedup median [IQR] | acceptance | bytes per round | draft calls "
      "per byte drafted | library us per round | greedy identical |\n"
      "|---|--:|--:|--:|--:|--:|--:|--:|:-:|\n",
      prompts.size(), o.tokens, specdec::to_string(o.verifier).data());
  std::size_t mismatches = 0;
  for (const Row& r : rows) {
    const specdec::DecodeStats& s = r.row.speculative;
    const specdec::Quartiles speedup = r.row.speedup();
    const double calls_per_byte =
        s.drafted == 0 ? 0 : static_cast<double>(s.draft_calls) / static_cast<double>(s.drafted);
    mismatches += r.row.greedy_mismatches;
    std::printf("| %s | %g | %zu | %.2fx [%.2f, %.2f] | %.3f | %.2f | %.3f | %.1f | %s |\n",
                r.draft.c_str(), static_cast<double>(r.row.temperature()), r.row.draft_length(),
                speedup.median, speedup.p25, speedup.p75, s.acceptance_rate(), s.tokens_per_round(),
                calls_per_byte,
                s.rounds == 0 ? 0.0 : 1e6 * s.library_seconds / static_cast<double>(s.rounds),
                !r.row.greedy()                ? "-"
                : r.row.greedy_mismatches == 0 ? "yes"
                                               : "NO");
  }
  if (!o.out.empty()) {
    std::ofstream json(o.out);
    if (!json) throw std::runtime_error("cannot write " + o.out);
    json << "{\"prompts\": " << prompts.size() << ", \"tokens\": " << o.tokens
         << ", \"verifier\": \"" << specdec::to_string(o.verifier) << "\", \"rows\": [";
    for (std::size_t i = 0; i < rows.size(); ++i) {
      const Row& r = rows[i];
      const specdec::DecodeStats& s = r.row.speculative;
      const specdec::Quartiles speedup = r.row.speedup();
      json << (i ? ",\n  " : "\n  ") << "{\"draft\": \"" << r.draft
           << "\", \"temperature\": " << r.row.temperature() << ", \"k\": " << r.row.draft_length()
           << ", \"speedup_median\": " << speedup.median << ", \"speedup_p25\": " << speedup.p25
           << ", \"speedup_p75\": " << speedup.p75
           << ", \"speedup_aggregate\": " << r.row.aggregate_speedup()
           << ", \"acceptance_rate\": " << s.acceptance_rate()
           << ", \"tokens_per_round\": " << s.tokens_per_round() << ", \"drafted\": " << s.drafted
           << ", \"draft_calls\": " << s.draft_calls << ", \"rounds\": " << s.rounds
           << ", \"library_seconds\": " << s.library_seconds
           << ", \"draft_seconds\": " << s.draft_seconds
           << ", \"target_seconds\": " << s.target_seconds
           << ", \"total_seconds\": " << s.total_seconds
           << ", \"greedy_mismatches\": " << r.row.greedy_mismatches;
      if (r.draft != "bytes") {
        json << ", \"draft_tokens\": " << r.work.draft_tokens
             << ", \"drafted_bytes\": " << r.work.drafted_bytes
             << ", \"proposed_tokens\": " << r.work.proposed_tokens
             << ", \"retokenization_stops\": " << r.work.retokenization_stops;
      }
      json << "}";
    }
    json << "\n]}\n";
  }
  if (mismatches > 0) {
    std::fprintf(stderr, "gpt_string_level: %zu greedy outputs differ from plain decoding\n",
                 mismatches);
    return 1;
  }
  return 0;
}

}  // namespace

constexpr const char* kUsage =
    "usage: gpt_string_level [--prompts N] [--tokens N] [--ks 4,8] [--temperatures 0,1]\n"
    "                        [--verifier token|block] [--seed N] [--out FILE.json]\n"
    "The byte-level draft against the BPE draft drafting by text, paired with plain decoding.\n"
    "Defaults: 50 prompts of models/prompts.txt, 200 tokens, K = 4,8, T = 0,1, block, seed 1234.\n";

int main(int argc, char** argv) {
  try {
    const Options options = parse_args(argc, argv);
    if (options.help) {
      std::fputs(kUsage, stdout);
      return 0;
    }
    return run(options);
  } catch (const UsageError& error) {
    std::fprintf(stderr, "gpt_string_level: %s\n", error.what());
    return 2;
  } catch (const std::exception& error) {
    std::fprintf(stderr, "gpt_string_level: error: %s\n", error.what());
    return 1;
  }
}

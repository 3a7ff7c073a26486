// specdec-demo: streams speculative decoding of the shipped King James Bible models to the
// terminal, then runs plain decoding with the same settings and seed and compares the two.
// `specdec-demo --help` lists the flags.

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include <specdec/specdec.hpp>

#include "gpt/gpt_model.hpp"
#include "text_stream.hpp"

namespace {

using specdec::token_t;
using specdec::examples::GptModel;
using specdec::examples::TextStream;

constexpr const char* kHelp = R"(usage: specdec-demo [options]

Generates text with speculative decoding (a 1-layer draft GPT proposes K tokens, the 6-layer
target verifies them in one call), streaming it as it is committed, then runs plain decoding
with the same settings and seed and compares speed. The models see "\n" + prompt: a newline
starts every training verse.

  --prompt TEXT          "Book C:V text" (default "Psalms 23:1 ")
  --max-new-tokens N     tokens to generate, >= 1 (default 200); clamped so that
                         prompt + N + K + 1 <= the models' max context (384 positions)
  -k, --draft-length K   tokens drafted per target call, >= 1 (default 4); with an adaptive
                         --draft-policy, the most a round may draft. "auto" = --draft-policy
                         goodput with K = 16
  --draft-policy P       fixed | schedule (+2 after a fully accepted round, -1 after a
                         rejection) | confidence (stop after a token the draft gave < 0.75) |
                         goodput (the length that maximises expected tokens/s, from measured
                         acceptance and costs; plain steps when drafting cannot pay)
                         (default fixed)
  --temperature T        >= 0; 0 = greedy (default 0)
  --top-k N              keep the N most likely tokens; 0 = off (default 0)
  --top-p P              nucleus sampling, in (0, 1]; 1 = off (default 1)
  --min-p P              drop tokens below P * max probability, in [0, 1) (default 0)
  --seed N               random seed for sampling (default 0)
  --proposer P           model (the draft GPT) | ngram (prompt lookup: continue an earlier
                         occurrence of the last 4-12 bytes; no draft model) | both (lookup
                         when it matches, the draft model otherwise) (default model)
  --verifier token|block how sampled drafts are verified: token-level rejection sampling or
                         block verification (never fewer tokens per round) (default token)
  --target PATH          target weights (default <source dir>/models/kjv-target.spdc)
  --draft PATH           draft weights (default <source dir>/models/kjv-draft.spdc)
  --json                 print a JSON summary (with the text) instead of streaming
  --no-baseline          skip the plain-decoding run
  --no-baseline-text     run plain decoding but do not print its text
  -h, --help             this text

Exit status: 0 ok, 1 runtime error (unreadable weights, or greedy outputs that differ),
2 bad usage.
)";

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

specdec::VerifierKind parse_verifier(std::string_view name) {
  if (name == "token") return specdec::VerifierKind::token;
  if (name == "block") return specdec::VerifierKind::block;
  throw UsageError("--verifier expects token or block, got '" + std::string(name) + "'");
}

specdec::DraftLengthKind parse_draft_policy(std::string_view name) {
  if (name == "fixed") return specdec::DraftLengthKind::fixed;
  if (name == "schedule") return specdec::DraftLengthKind::schedule;
  if (name == "confidence") return specdec::DraftLengthKind::confidence;
  if (name == "goodput") return specdec::DraftLengthKind::goodput;
  throw UsageError("--draft-policy expects fixed, schedule, confidence or goodput, got '" +
                   std::string(name) + "'");
}

const char* draft_policy_name(specdec::DraftLengthKind kind) {
  switch (kind) {
    case specdec::DraftLengthKind::fixed: return "fixed";
    case specdec::DraftLengthKind::schedule: return "schedule";
    case specdec::DraftLengthKind::confidence: return "confidence";
    case specdec::DraftLengthKind::goodput: return "goodput";
  }
  return "?";
}

/// The most tokens `--draft-length auto` lets a round draft (llama.cpp's n_max default).
constexpr std::size_t kAutoDraftLengthCap = 16;

/// What drafts: the draft model, n-gram lookup in the context, or lookup when it matches and
/// the draft model otherwise.
enum class Proposer { model, ngram, both };

Proposer parse_proposer(std::string_view name) {
  if (name == "model") return Proposer::model;
  if (name == "ngram") return Proposer::ngram;
  if (name == "both") return Proposer::both;
  throw UsageError("--proposer expects model, ngram or both, got '" + std::string(name) + "'");
}

const char* proposer_name(Proposer proposer) {
  return proposer == Proposer::model ? "model" : proposer == Proposer::ngram ? "ngram" : "both";
}

/// Byte tokens: an n-gram of fewer than 4 bytes matches by coincidence far too often.
constexpr specdec::NgramOptions kByteNgrams{.min_ngram = 4, .max_ngram = 12};

struct Options {
  std::string prompt = "Psalms 23:1 ";
  specdec::GenerationConfig config;
  std::string target_path = SPECDEC_MODELS_DIR "/kjv-target.spdc";
  std::string draft_path = SPECDEC_MODELS_DIR "/kjv-draft.spdc";
  bool json = false, baseline = true, baseline_text = true, help = false;
  Proposer proposer = Proposer::model;
};

template <class Number>
Number parse_number(std::string_view flag, std::string_view text) {
  Number value{};
  const char* end = text.data() + text.size();
  const auto [stop, error] = std::from_chars(text.data(), end, value);
  if (error != std::errc{} || stop != end || text.empty()) {
    const char* expected = std::is_floating_point_v<Number> ? "a number"
                           : std::is_signed_v<Number>       ? "an integer"
                                                            : "a non-negative integer";
    throw UsageError(std::string(flag) + " expects " + expected + ", got '" + std::string(text) +
                     "'");
  }
  return value;
}

Options parse_args(int argc, char** argv) {
  Options options;
  specdec::GenerationConfig& config = options.config;
  config.max_new_tokens = 200;
  config.sampling.temperature = 0.0f;
  for (int i = 1; i < argc; ++i) {
    const std::string_view flag = argv[i];
    const auto value = [&]() -> std::string_view {
      if (i + 1 >= argc) throw UsageError(std::string(flag) + " needs a value");
      return argv[++i];
    };
    const auto size_value = [&] { return parse_number<std::size_t>(flag, value()); };
    const auto float_value = [&] { return parse_number<float>(flag, value()); };
    const auto set_draft_length = [&](std::string_view text) {
      if (text == "auto") {
        config.draft_length = kAutoDraftLengthCap;
        config.draft_length_policy.kind = specdec::DraftLengthKind::goodput;
      } else {
        config.draft_length = parse_number<std::size_t>(flag, text);
      }
    };
    // One flag per line, read as a table.
    // clang-format off
    if (flag == "-h" || flag == "--help") options.help = true;
    else if (flag == "--prompt") options.prompt = value();
    else if (flag == "--max-new-tokens") config.max_new_tokens = size_value();
    else if (flag == "-k" || flag == "--draft-length") set_draft_length(value());
    else if (flag == "--draft-policy") config.draft_length_policy.kind = parse_draft_policy(value());
    else if (flag == "--proposer") options.proposer = parse_proposer(value());
    else if (flag == "--temperature") config.sampling.temperature = float_value();
    else if (flag == "--top-k") config.sampling.top_k = parse_number<int>(flag, value());
    else if (flag == "--top-p") config.sampling.top_p = float_value();
    else if (flag == "--min-p") config.sampling.min_p = float_value();
    else if (flag == "--seed") config.seed = parse_number<std::uint64_t>(flag, value());
    else if (flag == "--verifier") config.verifier = parse_verifier(value());
    else if (flag == "--target") options.target_path = value();
    else if (flag == "--draft") options.draft_path = value();
    else if (flag == "--json") options.json = true;
    else if (flag == "--no-baseline") options.baseline = false;
    else if (flag == "--no-baseline-text") options.baseline_text = false;
    else throw UsageError("unknown option '" + std::string(flag) + "'");
    // clang-format on
  }
  if (config.max_new_tokens == 0) throw UsageError("--max-new-tokens must be >= 1");
  try {
    config.validate();  // the library's own checks: K >= 1, temperature, top-k, top-p, min-p
  } catch (const std::invalid_argument& error) {
    throw UsageError(error.what());
  }
  return options;
}

std::string to_text(std::span<const token_t> tokens) {
  std::string text;
  for (const token_t token : tokens) text.push_back(static_cast<char>(token));
  return text;
}

double tokens_per_second(const specdec::DecodeStats& stats) {
  return stats.total_seconds > 0 ? static_cast<double>(stats.emitted) / stats.total_seconds : 0;
}

double seconds_per_target_call(const specdec::DecodeStats& stats) {
  return stats.target_seconds / static_cast<double>(stats.target_calls);
}

/// A JSON string literal. Bytes >= 0x7f become \u00XX (byte = code point: lossless, since a
/// sampled byte sequence need not be valid UTF-8).
std::string json_string(std::string_view bytes) {
  std::string out = "\"";
  for (const unsigned char byte : bytes) {
    if (byte == '"' || byte == '\\') {
      out += {'\\', static_cast<char>(byte)};
    } else if (byte >= 0x20 && byte < 0x7f) {
      out += static_cast<char>(byte);
    } else {
      char escaped[8];
      std::snprintf(escaped, sizeof escaped, "\\u%04x", byte);
      out += escaped;
    }
  }
  return out + "\"";
}

void print_json(const Options& options, const specdec::GenerationResult& fast,
                const specdec::GenerationResult& slow) {
  const specdec::GenerationConfig& config = options.config;
  const specdec::SamplingParams& s = config.sampling;
  const specdec::DecodeStats& stats = fast.stats;
  std::printf(
      "{\n  \"prompt\": %s,\n  \"draft_length\": %zu,\n  \"draft_policy\": \"%s\",\n"
      "  \"proposer\": \"%s\",\n  \"verifier\": \"%s\",\n"
      "  \"max_new_tokens\": %zu,\n"
      "  \"seed\": %llu,\n  \"sampling\": {\"temperature\": %g, \"top_k\": %d, \"top_p\": %g, "
      "\"min_p\": %g},\n  \"speculative\": {\"text\": %s, \"new_tokens\": %zu, \"seconds\": %.6g, "
      "\"tokens_per_second\": %.6g, \"rounds\": %zu, \"acceptance_rate\": %.6g, \"alpha_hat\": "
      "%.6g, \"tokens_per_round\": %.6g, \"cost_ratio\": %.6g, \"predicted_speedup\": %.6g}",
      json_string(options.prompt).c_str(), config.draft_length,
      draft_policy_name(config.draft_length_policy.kind), proposer_name(options.proposer),
      config.verifier == specdec::VerifierKind::block ? "block" : "token", config.max_new_tokens,
      static_cast<unsigned long long>(config.seed), static_cast<double>(s.temperature), s.top_k,
      static_cast<double>(s.top_p), static_cast<double>(s.min_p),
      json_string(to_text(fast.tokens)).c_str(), stats.emitted, stats.total_seconds,
      tokens_per_second(stats), stats.rounds, stats.acceptance_rate(), stats.alpha_hat(),
      stats.tokens_per_round(), stats.cost_ratio(), stats.predicted_speedup(config.draft_length));
  std::string histogram;
  for (const std::size_t rounds : stats.draft_length_histogram()) {
    histogram += (histogram.empty() ? "" : ", ") + std::to_string(rounds);
  }
  std::printf(",\n  \"draft_length_histogram\": [%s],\n  \"plain_rounds\": %zu",
              histogram.c_str(), stats.plain_rounds());
  if (options.baseline) {
    const std::string text =
        options.baseline_text ? "\"text\": " + json_string(to_text(slow.tokens)) + ", " : "";
    const double verify_cost = seconds_per_target_call(stats) / seconds_per_target_call(slow.stats);
    std::printf(
        ",\n  \"plain\": {%s\"new_tokens\": %zu, \"seconds\": %.6g, \"tokens_per_second\""
        ": %.6g},\n  \"measured_speedup\": %.6g,\n  \"verify_cost\": %.6g,\n"
        "  \"predicted_speedup_with_verify_cost\": %.6g,\n  \"identical\": %s",
        text.c_str(), slow.stats.emitted, slow.stats.total_seconds, tokens_per_second(slow.stats),
        tokens_per_second(stats) / tokens_per_second(slow.stats), verify_cost,
        stats.predicted_speedup(config.draft_length, verify_cost),
        fast.tokens == slow.tokens ? "true" : "false");
  }
  std::printf("\n}\n");
}

void print_comparison(const Options& options, const specdec::GenerationResult& fast,
                      const specdec::GenerationResult& slow) {
  const std::size_t k = options.config.draft_length;
  const specdec::DecodeStats& stats = fast.stats;
  if (options.baseline && options.baseline_text) {
    std::printf("\n--- plain decoding ---\n%s%s\n", options.prompt.c_str(),
                to_text(slow.tokens).c_str());
  }
  const bool adaptive = options.config.draft_length_policy.kind != specdec::DraftLengthKind::fixed;
  std::printf("\nspeculative (%s%s K %s %zu%s): %4zu tokens in %.3f s, %7.1f tokens/s\n",
              adaptive ? draft_policy_name(options.config.draft_length_policy.kind) : "",
              adaptive ? "," : "", adaptive ? "<=" : "=", k,
              options.config.verifier == specdec::VerifierKind::block ? ", block" : "",
              stats.emitted, stats.total_seconds, tokens_per_second(stats));
  if (options.baseline) {
    std::printf("plain decoding:        %4zu tokens in %.3f s, %7.1f tokens/s\n",
                slow.stats.emitted, slow.stats.total_seconds, tokens_per_second(slow.stats));
    std::printf("measured speedup:      %.2fx\n",
                tokens_per_second(stats) / tokens_per_second(slow.stats));
  }
  // The geometric prediction assumes K tokens every round: for a fixed K only.
  if (!adaptive) {
    std::printf("predicted speedup:     %.2fx  (geometric model: alpha_hat %.3f, c %.4f, "
                "flat target cost)\n",
                stats.predicted_speedup(k), stats.alpha_hat(), stats.cost_ratio());
  }
  if (options.baseline && !adaptive) {
    // A round emits tau tokens for K draft calls and one target call that computes K + 1 rows,
    // which costs T(K+1)/T(1) one-token calls on this CPU target.
    const double verify_cost = seconds_per_target_call(stats) / seconds_per_target_call(slow.stats);
    std::printf("  with verify cost:    %.2fx  (this target's T(%zu)/T(1) = %.2f, measured)\n",
                stats.predicted_speedup(k, verify_cost), k + 1, verify_cost);
  }
  std::printf("tokens per round:      %.2f  (acceptance rate %.3f)\n", stats.tokens_per_round(),
              stats.acceptance_rate());
  if (adaptive) {
    // The chosen draft lengths, as "length x rounds" for every length that occurred.
    std::string chosen;
    const std::vector<std::size_t> histogram = stats.draft_length_histogram();
    for (std::size_t n = 0; n < histogram.size(); ++n) {
      if (histogram[n] == 0) continue;
      chosen += (chosen.empty() ? "" : ", ") + std::to_string(n) + ": " + std::to_string(histogram[n]);
    }
    std::printf("draft lengths chosen:  %s  (length: rounds; %zu plain steps)\n", chosen.c_str(),
                stats.plain_rounds());
    if (stats.predicted_seconds > 0) {
      const double model_seconds = stats.draft_seconds + stats.target_seconds;
      std::printf("policy expected:       %.1f tokens/s of model time, measured %.1f\n",
                  stats.predicted_tokens_per_second(),
                  static_cast<double>(stats.emitted) / model_seconds);
    }
  }
  if (options.baseline && options.config.sampling.greedy()) {
    std::printf("greedy outputs identical: %s\n",
                fast.tokens == slow.tokens ? "yes" : "NO (a bug: please report it)");
  } else if (options.baseline) {
    std::printf(
        "(sampling: both texts are exact samples from the target, but the two decoders "
        "spend the seed's random numbers differently, so they usually differ)\n");
  }
}

int run(Options& options) {
  specdec::GenerationConfig& config = options.config;
  GptModel target = GptModel::from_file(options.target_path);
  GptModel draft = GptModel::from_file(options.draft_path);

  std::vector<token_t> prompt{'\n'};  // BOS: every training verse follows a newline
  for (const unsigned char byte : options.prompt) prompt.push_back(byte);
  // A round's target call sees at most prompt + new tokens + K + 1 positions.
  const std::size_t max_context = std::min(target.max_context(), draft.max_context());
  const std::size_t fixed = prompt.size() + config.draft_length + 1;
  if (fixed >= max_context) {
    throw UsageError("prompt (" + std::to_string(prompt.size()) + " tokens) + K + 1 leaves " +
                     "no room for new tokens in the max context of " + std::to_string(max_context));
  }
  if (fixed + config.max_new_tokens > max_context) {
    config.max_new_tokens = max_context - fixed;
    std::fprintf(stderr,
                 "specdec-demo: --max-new-tokens clamped to %zu (prompt + new tokens + "
                 "K + 1 <= max context %zu)\n",
                 config.max_new_tokens, max_context);
  }

  // Warm-up, kept out of both timings: a model's first call may pay page faults and cold caches.
  target.target(prompt, 1);
  target.reset();

  // The speculative run, with the proposer --proposer names (the decoder types differ).
  const auto speculate = [&](auto& decoder) {
    if (options.json) return decoder.generate(prompt, config);
    TextStream stream(options.prompt, config.draft_length, config.max_new_tokens);
    specdec::GenerationResult result = decoder.generate(prompt, config, stream);
    stream.finish();
    return result;
  };
  specdec::GenerationResult fast, slow;
  if (options.proposer == Proposer::model) {
    specdec::SpeculativeDecoder speculative(draft, target);
    fast = speculate(speculative);
  } else if (options.proposer == Proposer::ngram) {
    specdec::NgramDecoder speculative(target, kByteNgrams);
    fast = speculate(speculative);
  } else {
    specdec::NgramThenModelDecoder speculative(draft, target, kByteNgrams);
    fast = speculate(speculative);
  }
  if (options.baseline) {
    target.reset();  // forget the cached prompt: plain decoding pays for it too
    specdec::AutoregressiveDecoder plain(target);
    slow = plain.generate(prompt, config);
  }

  if (options.json) {
    print_json(options, fast, slow);
  } else {
    print_comparison(options, fast, slow);
  }
  const bool greedy_mismatch =
      options.baseline && config.sampling.greedy() && fast.tokens != slow.tokens;
  return greedy_mismatch ? 1 : 0;
}

/// Library and model messages start with "specdec: "; ours get the program's name instead.
std::string_view without_prefix(std::string_view message) {
  return message.starts_with("specdec: ") ? message.substr(9) : message;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    Options options = parse_args(argc, argv);
    if (options.help) {
      std::fputs(kHelp, stdout);
      return 0;
    }
    return run(options);
  } catch (const UsageError& error) {
    std::fprintf(stderr, "specdec-demo: %s (see --help)\n", without_prefix(error.what()).data());
    return 2;
  } catch (const std::exception& error) {
    std::fprintf(stderr, "specdec-demo: error: %s\n", without_prefix(error.what()).data());
    return 1;
  }
}

// specdec-llama: speculative decoding of GGUF models through llama.cpp. Streams the text, then
// runs plain decoding of the same target with the same settings and prints the measured
// speedup. Flag names follow llama.cpp's (-m, -md, -p, -n, --temp, --spec-draft-n-max, ...),
// so its users know them. `specdec-llama --help` lists them.

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <specdec/batch.hpp>
#include <specdec/llama_cpp.hpp>
#include <specdec/specdec.hpp>

#include "batch_run.hpp"
#include "cli_args.hpp"
#include "decoder_ladder.hpp"

namespace specdec::examples {

/// --vocab-bridge: how a draft of another vocabulary drafts.
enum class VocabularyBridge { automatic, map, text };
/// --string-level: how text drafted by text is verified.
enum class StringLevelVerification { automatic, rejection, exact };

}  // namespace specdec::examples

template <>
struct specdec::EnumNames<specdec::examples::VocabularyBridge> {
  static constexpr std::string_view what = "vocabulary bridge";
  static constexpr std::array<EnumName<examples::VocabularyBridge>, 3> names{
      {{examples::VocabularyBridge::automatic, "auto"},
       {examples::VocabularyBridge::map, "map"},
       {examples::VocabularyBridge::text, "text"}}};
};

template <>
struct specdec::EnumNames<specdec::examples::StringLevelVerification> {
  static constexpr std::string_view what = "string-level verification";
  static constexpr std::array<EnumName<examples::StringLevelVerification>, 3> names{
      {{examples::StringLevelVerification::automatic, "auto"},
       {examples::StringLevelVerification::rejection, "rejection"},
       {examples::StringLevelVerification::exact, "exact"}}};
};

namespace {

using specdec::token_t;
using specdec::examples::BatchPrompts;
using specdec::examples::BatchRun;
using specdec::examples::histogram_text;
using specdec::examples::json_string;
using specdec::examples::kAutoDraftLengthCap;
using specdec::examples::median;
using specdec::examples::name_of;
using specdec::examples::parse_flag;
using specdec::examples::parse_number;
using specdec::examples::Proposer;
using specdec::examples::StringLevelVerification;
using specdec::examples::UsageError;
using specdec::examples::VocabularyBridge;
namespace llama = specdec::llama_cpp;

constexpr const char* kHelp = R"(usage: specdec-llama [options]

Generates text with speculative decoding over llama.cpp models (GGUF): the draft proposes K
tokens, the target verifies them in one llama_decode, and the output is exactly the target's
(token for token at --temp 0). Streams the text, then runs plain decoding of the target with the
same settings and prints the measured speedup. Without -m/-md it runs the shipped King James
Bible pair converted to GGUF at build time. With the shipped target (general.name kjv-target,
whatever its weights' type) the prompt follows a newline, as in training.

  -m,  --model PATH          target GGUF (default: the shipped pair's target, f16)
  -md, --model-draft PATH    draft GGUF (also --spec-draft-model; default: the shipped draft).
                             Its vocabulary may be the target's, padded or near-identical
                             (llama.cpp's rule), partly shared or another altogether: see
                             --vocab-bridge; the path is chosen and printed before decoding
  -p,  --prompt TEXT         prompt (default "Psalms 23:1 ")
  -n,  --n-predict N         tokens to generate, >= 1 (also --predict; default 200)
  --spec-draft-n-max K       tokens drafted per target call, or "auto" (the goodput policy,
                             K <= 16: measures this target's verification cost per row count
                             and drafts what pays; plain steps when nothing does); also
                             --draft-max, --draft-n, --draft, -k (default 8)
  --draft-policy P           fixed | schedule | confidence | goodput (default fixed)
  --draft-costs measure|online   how goodput learns the pair's costs: time both models before
                             decoding (draft call, target call of 1..K+1 rows; ~0.5 s for the
                             shipped pair, and the draft lengths no longer depend on timings)
                             or from the rounds' timings as it decodes (default measure)
  --spec-type T              draft-simple (the draft model) | ngram-simple (prompt lookup, no
                             draft model) | ngram-simple,draft-simple (lookup, else the draft)
                             (default draft-simple); --proposer model|ngram|both says the same
  --ngram-min N, --ngram-max N   lookup n-gram lengths (default 4..12 for byte vocabularies,
                             2..5 otherwise)
  --vocab-bridge auto|map|text   how a draft of another vocabulary drafts: map (through the
                             tokens both share, MappedDraft: token-level intersection) or text
                             (the draft writes text in its own tokens, which the target's
                             tokenizer re-tokenizes: string-level exact match); auto: one
                             vocabulary as it is, padded or near-identical ones by map, others
                             by map if at least half the draft's tokens are shared, else by
                             text (default auto). Either way the output is the target's
  --string-level auto|rejection|exact   how text drafted by text is verified: rejection
                             (each byte against the draft's own law over it: string-level
                             rejection sampling; a target of one token per byte only) or
                             exact (point masses: string-level exact match); auto: rejection
                             where the target allows it (default auto)
  --verifier token|block     how sampled drafts are verified (default token); with a tree:
                             recursive rejection sampling or sequence-level
  --tree WxWxW               draft a tree (W children per node at each depth, e.g. 4x2x2x1),
                             scored by the target in one llama_decode (one sequence per leaf)
  --tree-budget N            a tree of N nodes grown best first from the draft's probabilities
  --siblings MODE            replace (i.i.d.) | distinct (without replacement) | top-k
                             (default distinct)
  --temp T                   temperature >= 0; 0 = greedy (also --temperature; default 0)
  --top-k N, --top-p P, --min-p P   filters (defaults 0 = off, 1 = off, 0 = off)
  -s,  --seed N              sampling seed (default 0)
  -t,  --threads N           target threads (default 1: on a busy host llama.cpp's threads
                             wait for each other at a spinning barrier)
  -td, --threads-draft N     draft threads (also --spec-draft-threads; default 1)
  -c,  --ctx-size N          context length of both models (default: the models' own)
  -b,  --batch-size N        most tokens per llama_decode (default llama.cpp's)
  -fa, --flash-attn on|off|auto   (default auto)
  --rpc HOST:PORT            run the target's layers on a llama.cpp RPC server (ggml-rpc-server);
                             the draft stays local
  --parallel B               decode B prompts at once through BatchedDecoder (one llama_decode
                             per step for every sequence's rows, each on a llama.cpp sequence
                             of its own), then the same prompts by plain batched decoding (the
                             target alone, B rows per call); prints each sequence's text, the
                             per-sequence and total tokens/s and the ratio. Prompts from
                             --prompts, cycled. With the draft model only (no --tree, no
                             --spec-type ngram-simple); with goodput one plan per step sets
                             every sequence's draft length from its acceptance and the cost of
                             the batch's calls (timed first with --draft-costs measure);
                             sequence i samples with seed -s + i
  --prompts FILE             one prompt per line, for --parallel (default: the shipped
                             models/prompts.txt)
  --kv-unified on|off        with --parallel: one KV stream that the sequences share (on) or
                             one per sequence (off, the default: each attends over its own
                             cells only, but unequal row counts cost several micro-batches)
  --repeat R                 with --parallel: R paired runs (speculative and plain, each from
                             an empty KV cache, the order alternating); prints the medians
                             (default 1)
  --plain-control            with --parallel: the speculative arm drafts nothing, so both arms
                             are plain batched decoding: the spread of its paired ratios is the
                             host's, against which a policy's ratios are read (an A/A control)
  --warm-decoder             with --parallel --repeat: one speculative decoder for all R runs,
                             as a server keeps its decoder in service (the goodput plan's
                             verdicts and timings carry over from batch to batch); default: a
                             fresh decoder per run, which learns from nothing each time
  --ignore-eos               do not stop at the target's end-of-sequence token
  --json                     print a JSON summary instead of streaming
  --no-baseline              skip the plain-decoding run
  -v,  --verbose             llama.cpp's own log on stderr
  -h,  --help                this text

Exit status: 0 ok, 1 runtime error (unloadable model, greedy outputs that differ), 2 bad
usage.
)";

constexpr std::size_t kDefaultDraftLength = 8;

struct Options {
  std::string target_path = SPECDEC_GGUF_DIR "/kjv-target-f16.gguf";
  std::string draft_path = SPECDEC_GGUF_DIR "/kjv-draft-f16.gguf";
  bool newline_prompts = false;  // the target is the shipped pair's (follows_newlines)
  std::string prompt = "Psalms 23:1 ";
  specdec::GenerationConfig config;
  Proposer proposer = Proposer::model;
  std::optional<std::size_t> ngram_min, ngram_max;
  std::optional<specdec::TreeOptions> tree;  // --tree / --tree-budget
  llama::ContextOptions target_context, draft_context;
  std::string rpc;
  bool ignore_eos = false, json = false, baseline = true, verbose = false, help = false;
  bool measure_costs = true;  // --draft-costs
  std::size_t parallel = 0;   // --parallel B: sequences decoded at once (0: one, no batch)
  std::string prompts_path = SPECDEC_MODELS_DIR "/prompts.txt";
  std::size_t repeat = 1;      // --repeat R: paired runs of --parallel
  bool warm_decoder = false;   // --warm-decoder: one speculative decoder for the R runs
  bool plain_control = false;  // --plain-control: the speculative arm is plain too
  VocabularyBridge vocab_bridge = VocabularyBridge::automatic;
  StringLevelVerification string_level = StringLevelVerification::automatic;
};

/// The string-level path (--vocab-bridge text): the draft model over its own ids and both
/// vocabularies as tokenizers, for StringLevelDecoder.
struct TextBridge {
  llama::LoadedModel& draft;
  llama::VocabularyTokenizer draft_tokens;
  llama::VocabularyTokenizer target_tokens;
  specdec::StringLevelOptions options;
};

/// llama.cpp's --spec-type names, or the demo's --proposer names (model, ngram, both).
Proposer parse_spec_type(std::string_view text) {
  if (text == "draft-simple") return Proposer::model;
  if (text == "ngram-simple") return Proposer::ngram;
  if (text == "ngram-simple,draft-simple" || text == "draft-simple,ngram-simple") {
    return Proposer::both;
  }
  if (const std::optional<Proposer> proposer = specdec::try_parse<Proposer>(text)) {
    return *proposer;
  }
  throw UsageError(
      "--spec-type expects draft-simple, ngram-simple or ngram-simple,draft-simple "
      "(--proposer: model, ngram or both), got '" +
      std::string(text) + "'");
}

const char* proposer_name(Proposer proposer) {
  return proposer == Proposer::model   ? "draft-simple"
         : proposer == Proposer::ngram ? "ngram-simple"
                                       : "ngram-simple,draft-simple";
}

int parse_flash_attention(std::string_view text) {
  if (text == "auto") return -1;
  if (text == "off" || text == "0") return 0;
  if (text == "on" || text == "1") return 1;
  throw UsageError("--flash-attn expects on, off or auto, got '" + std::string(text) + "'");
}

/// Leaves of the largest tree `shape` drafts: the product of a fixed shape's widths (the
/// shape was validated, so it does not overflow), at most the budget of a dynamic one.
std::size_t most_leaves(const specdec::TreeShape& shape) {
  if (shape.is_dynamic()) return shape.budget;
  std::size_t leaves = 1;
  for (const std::size_t width : shape.widths) leaves *= width;
  return leaves;
}

/// A tree round is one llama_decode of nodes + 1 tokens on one sequence per leaf plus one, in
/// the target's context and in the draft's (which scores the tree drafted so far the same
/// way): -c and -b must hold that, and llama.cpp holds at most 256 sequences. Checked here so
/// that a flag, not llama.cpp, says what does not fit.
void check_tree_fits(Options& options) {
  const specdec::TreeShape& shape = options.tree->shape;
  const std::size_t nodes = shape.nodes();
  const std::size_t sequences = most_leaves(shape) + 1;
  const std::string tree = shape.is_dynamic() ? "--tree-budget " + std::to_string(shape.budget)
                                              : "--tree (" + std::to_string(nodes) + " nodes)";
  if (!shape.is_dynamic() && sequences > llama::detail::kMaxSequences) {
    throw UsageError(tree + " has " + std::to_string(sequences - 1) + " leaves: one llama.cpp " +
                     "sequence each plus one; expected at most " +
                     std::to_string(llama::detail::kMaxSequences - 1) + " leaves");
  }
  for (const auto& [flag, value] : {std::pair{"-c", options.target_context.n_ctx},
                                    std::pair{"-b", options.target_context.n_batch}}) {
    if (value != 0 && nodes + 1 > value) {
      throw UsageError(std::string(flag) + " " + std::to_string(value) + " with " + tree +
                       ": a round scores " + std::to_string(nodes + 1) +
                       " tokens in one llama_decode; expected " + flag +
                       " >= " + std::to_string(nodes + 1) + " (or a smaller tree)");
    }
  }
  // Both contexts sized here: one sequence per leaf plus sequence 0 (a dynamic tree of N
  // nodes has at most N leaves; llama.cpp holds at most 256 sequences).
  const auto n_seq_max =
      static_cast<std::uint32_t>(std::min<std::size_t>(llama::detail::kMaxSequences, sequences));
  options.target_context.n_seq_max = options.draft_context.n_seq_max = n_seq_max;
}

Options parse_args(int argc, char** argv) {
  Options options;
  specdec::GenerationConfig& config = options.config;
  config.max_new_tokens = 200;
  config.sampling.temperature = 0.0f;
  bool draft_length_given = false;
  std::optional<specdec::SiblingMode> siblings;
  const auto tree_options = [&]() -> specdec::TreeOptions& {
    if (!options.tree) options.tree = specdec::TreeOptions{};
    return *options.tree;
  };
  for (int i = 1; i < argc; ++i) {
    const std::string_view flag = argv[i];
    const auto value = [&]() -> std::string_view {
      if (i + 1 >= argc) throw UsageError(std::string(flag) + " needs a value");
      return argv[++i];
    };
    const auto size_value = [&] { return parse_number<std::size_t>(flag, value()); };
    const auto float_value = [&] { return parse_number<float>(flag, value()); };
    const auto threads_value = [&] {
      const int threads = parse_number<int>(flag, value());
      if (threads < 1) throw UsageError(std::string(flag) + " expects a thread count >= 1");
      return threads;
    };
    const auto set_draft_length = [&](std::string_view text) {
      draft_length_given = true;
      specdec::examples::set_draft_length(config, flag, text);
    };
    const auto is = [&](std::initializer_list<std::string_view> names) {
      return std::find(names.begin(), names.end(), flag) != names.end();
    };
    // clang-format off
    if (is({"-h", "--help"})) options.help = true;
    else if (is({"-m", "--model"})) options.target_path = value();
    else if (is({"-md", "--model-draft", "--spec-draft-model"})) options.draft_path = value();
    else if (is({"-p", "--prompt"})) options.prompt = value();
    else if (is({"-n", "--n-predict", "--predict"})) config.max_new_tokens = size_value();
    else if (is({"--spec-draft-n-max", "--draft-max", "--draft-n", "--draft", "-k"})) {
      set_draft_length(value());
    }
    else if (is({"--draft-policy"})) {
      config.draft_length_policy.kind = parse_flag<specdec::DraftLengthKind>(flag, value());
    }
    else if (is({"--spec-type", "--proposer"})) options.proposer = parse_spec_type(value());
    else if (is({"--ngram-min"})) options.ngram_min = size_value();
    else if (is({"--ngram-max"})) options.ngram_max = size_value();
    else if (is({"--vocab-bridge"})) {
      options.vocab_bridge = parse_flag<VocabularyBridge>(flag, value());
    }
    else if (is({"--string-level"})) {
      options.string_level = parse_flag<StringLevelVerification>(flag, value());
    }
    else if (is({"--verifier"})) config.verifier = parse_flag<specdec::VerifierKind>(flag, value());
    else if (is({"--tree"})) {
      tree_options().shape = specdec::examples::parse_tree_flag(flag, value());
    }
    else if (is({"--tree-budget"})) {
      tree_options().shape = specdec::examples::tree_budget_flag(flag, size_value());
    }
    else if (is({"--siblings"})) siblings = parse_flag<specdec::SiblingMode>(flag, value());
    else if (is({"--temp", "--temperature"})) config.sampling.temperature = float_value();
    else if (is({"--top-k"})) config.sampling.top_k = parse_number<int>(flag, value());
    else if (is({"--top-p"})) config.sampling.top_p = float_value();
    else if (is({"--min-p"})) config.sampling.min_p = float_value();
    else if (is({"-s", "--seed"})) config.seed = parse_number<std::uint64_t>(flag, value());
    else if (is({"-t", "--threads"})) options.target_context.threads = threads_value();
    else if (is({"-td", "--threads-draft", "--spec-draft-threads"})) {
      options.draft_context.threads = threads_value();
    }
    else if (is({"-c", "--ctx-size"})) {
      options.target_context.n_ctx = options.draft_context.n_ctx =
          parse_number<std::uint32_t>(flag, value());
    }
    else if (is({"-b", "--batch-size"})) {
      options.target_context.n_batch = options.draft_context.n_batch =
          parse_number<std::uint32_t>(flag, value());
    }
    else if (is({"-fa", "--flash-attn"})) {
      options.target_context.flash_attention = options.draft_context.flash_attention =
          parse_flash_attention(value());
    }
    else if (is({"--rpc"})) options.rpc = value();
    else if (is({"--parallel"})) {
      options.parallel = size_value();
      if (options.parallel == 0 || options.parallel > llama::detail::kMaxSequences) {
        throw UsageError("--parallel expects 1.." + std::to_string(llama::detail::kMaxSequences) +
                         " sequences, got " + std::to_string(options.parallel));
      }
    }
    else if (is({"--prompts"})) options.prompts_path = value();
    else if (is({"--kv-unified"})) {
      const std::string_view how = value();
      if (how != "on" && how != "off") {
        throw UsageError("--kv-unified expects on or off, got '" + std::string(how) + "'");
      }
      options.target_context.kv_unified = options.draft_context.kv_unified = how == "on" ? 1 : 0;
    }
    else if (is({"--repeat"})) {
      options.repeat = size_value();
      if (options.repeat == 0) throw UsageError("--repeat expects a count >= 1");
    }
    else if (is({"--ignore-eos"})) options.ignore_eos = true;
    else if (is({"--json"})) options.json = true;
    else if (is({"--no-baseline"})) options.baseline = false;
    else if (is({"--warm-decoder"})) options.warm_decoder = true;
    else if (is({"--plain-control"})) options.plain_control = true;
    else if (is({"--draft-costs"})) {
      const std::string_view how = value();
      if (how != "measure" && how != "online") {
        throw UsageError("--draft-costs expects measure or online, got '" + std::string(how) + "'");
      }
      options.measure_costs = how == "measure";
    }
    else if (is({"-v", "--verbose"})) options.verbose = true;
    else throw UsageError("unknown option '" + std::string(flag) + "'");
    // clang-format on
  }
  if (config.max_new_tokens == 0) throw UsageError("--n-predict must be >= 1");
  if (options.parallel > 0 && (options.tree || options.proposer != Proposer::model)) {
    throw UsageError(
        "--parallel decodes with the draft model's chains: not with --tree, --tree-budget or "
        "--spec-type ngram-simple");
  }
  if (options.warm_decoder && options.parallel == 0) {
    throw UsageError("--warm-decoder keeps one decoder for the batches of --parallel B");
  }
  if (options.plain_control && (options.parallel == 0 || !options.baseline)) {
    throw UsageError(
        "--plain-control compares plain batched decoding with itself: expected with --parallel B "
        "and without --no-baseline");
  }
  if (options.repeat > 1 && options.parallel == 0) {
    throw UsageError("--repeat R repeats the paired batches of --parallel B; expected with it");
  }
  if (siblings && !options.tree) throw UsageError("--siblings needs --tree or --tree-budget");
  if (options.tree) {
    if (siblings) options.tree->siblings = *siblings;
    // -k with a fixed tree cuts it to K nodes, breadth first (TreeShape::max_nodes).
    if (draft_length_given && !options.tree->shape.is_dynamic()) {
      options.tree->shape.max_nodes = config.draft_length;
      specdec::examples::flag_value("-k", [&] { options.tree->shape.validate(); });
    }
    check_tree_fits(options);
    if (options.proposer != Proposer::model ||
        config.draft_length_policy.kind != specdec::DraftLengthKind::fixed) {
      throw UsageError(
          "--tree / --tree-budget draft with the draft model and a fixed node "
          "budget: not with --spec-type ngram-simple or --draft-policy");
    }
  }
  if (!draft_length_given) {
    const bool adaptive = config.draft_length_policy.kind != specdec::DraftLengthKind::fixed;
    config.draft_length = adaptive ? kAutoDraftLengthCap : kDefaultDraftLength;
  }
  // What TreeProposer drafts per round (its round_limit()), for the summary lines.
  if (options.tree) config.draft_length = options.tree->shape.nodes();
  specdec::examples::validate_config(config);
  return options;
}

/// Text as it is printed: control bytes (other than newline and tab) as \xNN, so generated text
/// cannot drive the terminal; UTF-8 characters as they are.
std::string printable(std::string_view text) {
  std::string out;
  for (const unsigned char byte : text) {
    if (byte >= 0x20 && byte != 0x7f) {
      out.push_back(static_cast<char>(byte));
    } else if (byte == '\n' || byte == '\t') {
      out.push_back(static_cast<char>(byte));
    } else {
      char escaped[8];
      std::snprintf(escaped, sizeof escaped, "\\x%02x", byte);
      out += escaped;
    }
  }
  return out;
}

/// Whether `model` is the shipped pair's target (the project's GGUF export names it kjv-target,
/// whatever the weights' type): trained on verses that each follow a newline, so a prompt is
/// given one (with -m naming a quantized copy too).
bool follows_newlines(const llama_model* model) {
  char name[32] = {};
  return llama_model_meta_val_str(model, "general.name", name, sizeof name) > 0 &&
         std::string_view(name) == "kjv-target";
}

std::string detokenize(const llama_vocab* vocab, std::span<const token_t> tokens) {
  llama::TextDecoder decoder(vocab);
  std::string text(decoder.push(tokens));
  return text + decoder.flush();
}

/// Decodes with `drafting`: the draft model itself (one vocabulary) or a MappedDraft over it
/// (a padded or partly shared vocabulary). `draft` is the llama.cpp model underneath.
template <class Drafting>
int decode(Options& options, llama::LoadedModel& target, llama::LoadedModel& draft,
           Drafting& drafting, const std::string& vocabulary_path) {
  specdec::GenerationConfig& config = options.config;
  config.max_context = std::min(target.max_context(), draft.max_context());
  const llama_token eos = llama_vocab_eos(target.vocab());
  if (!options.ignore_eos && eos != LLAMA_TOKEN_NULL) config.stop_tokens = {eos};
  const std::string prompt_text = options.newline_prompts ? "\n" + options.prompt : options.prompt;
  const std::vector<token_t> prompt = llama::tokenize(target.vocab(), prompt_text);
  if (prompt.empty()) throw UsageError("the prompt tokenizes to nothing; give a non-empty -p");

  constexpr bool by_text = std::is_same_v<Drafting, TextBridge>;
  // A mapped draft's context buffers, sized once: no call of it allocates.
  if constexpr (requires { drafting.reserve(std::size_t{}); }) drafting.reserve(config.max_context);

  const bool byte_vocabulary = target.vocab_size() <= 512;
  specdec::NgramOptions ngrams = byte_vocabulary
                                     ? specdec::NgramOptions{.min_ngram = 4, .max_ngram = 12}
                                     : specdec::NgramOptions{};
  if (options.ngram_min) ngrams.min_ngram = *options.ngram_min;
  if (options.ngram_max) ngrams.max_ngram = *options.ngram_max;

  // Warm-up outside both timings: the first llama_decode of a shape allocates its graph.
  target(prompt, 1);
  if constexpr (by_text) {
    const std::vector<token_t> draft_prompt = llama::tokenize(draft.vocab(), prompt_text, false);
    if (!draft_prompt.empty()) (void)draft(draft_prompt);
  } else {
    (void)drafting(prompt);
  }
  target.reset();
  draft.reset();
  // goodput with measured costs: the pair timed on the prompt (repeated to cover the longest
  // verification call and the generation: the plain step's growth is timed over all of it),
  // before decoding and outside its timing.
  std::vector<double> measured_verify_costs;
  // (Not for drafting by text: a draft call there is one draft token, several target tokens;
  // goodput learns the costs per target token online.)
  if constexpr (!by_text) {
    if (config.draft_length_policy.kind == specdec::DraftLengthKind::goodput &&
        options.measure_costs && options.proposer != Proposer::ngram && !options.tree) {
      const std::size_t rows = std::min(config.draft_length + 1, config.max_context / 2);
      std::vector<token_t> context;
      // The rounds walk its second half.
      const std::size_t wanted =
          std::max<std::size_t>({4 * rows, 256, prompt.size() + config.max_new_tokens});
      while (context.size() < wanted) {
        context.insert(context.end(), prompt.begin(), prompt.end());
      }
      context.resize(std::min(context.size(), config.max_context - 1));
      config.draft_length_policy.goodput =
          specdec::measure_call_costs(drafting, target, context, rows, 11)
              .goodput_options(config.draft_length_policy.goodput);
      measured_verify_costs = config.draft_length_policy.goodput.verify_costs;
      target.reset();
      draft.reset();
    }
  }

  llama::TextDecoder text(target.vocab());
  if (!options.json && !vocabulary_path.empty()) {
    std::printf("draft vocabulary: %s\n", printable(vocabulary_path).c_str());
  }
  if (!options.json) std::fputs(printable(options.prompt).c_str(), stdout);
  const auto stream = [&](std::span<const token_t> chunk) {
    if (!options.json) {
      std::fputs(printable(text.push(chunk)).c_str(), stdout);
      std::fflush(stdout);
    }
    return true;
  };
  const auto speculate = [&](auto& decoder) { return decoder.generate(prompt, config, stream); };
  const specdec::examples::DecoderChoice choice{
      .proposer = options.proposer, .tree = options.tree, .ngrams = ngrams};
  specdec::GenerationResult fast;
  specdec::StringLevelWork text_work;
  if constexpr (by_text) {
    if (options.tree || options.proposer != Proposer::model) {
      throw UsageError(
          "--vocab-bridge text drafts chains with the draft model only (no --tree, "
          "no --spec-type ngram-simple)");
    }
    specdec::StringLevelDecoder decoder(drafting.draft, drafting.draft_tokens, target,
                                        drafting.target_tokens, drafting.options);
    fast = speculate(decoder);
    text_work = decoder.proposer().work();
  } else {
    fast = specdec::examples::run_decoder(choice, config.verifier, drafting, target, speculate);
  }
  specdec::GenerationResult slow;
  if (!options.json) std::printf("%s\n", printable(text.flush()).c_str());
  if (options.baseline) {
    target.reset();  // plain decoding pays for the prompt too
    specdec::AutoregressiveDecoder plain(target);
    slow = plain.generate(prompt, config);
  }

  const specdec::DecodeStats& stats = fast.stats;
  const bool adaptive = config.draft_length_policy.kind != specdec::DraftLengthKind::fixed;
  const double speedup =
      options.baseline ? stats.tokens_per_second() / slow.stats.tokens_per_second() : 0;
  const bool identical = fast.tokens == slow.tokens;
  if (options.json) {
    std::printf(
        "{\n  \"target\": %s,\n  \"draft\": %s,\n  \"prompt\": %s,\n  \"spec_type\": \"%s\",\n"
        "  \"draft_length\": %zu,\n  \"draft_policy\": \"%s\",\n  \"verifier\": \"%s\",\n"
        "  \"temperature\": %g,\n  \"seed\": %llu,\n  \"threads\": [%d, %d],\n  \"rpc\": %s,\n"
        "  \"draft_vocabulary\": %s,\n"
        "  \"speculative\": {\"text\": %s, \"new_tokens\": %zu, \"seconds\": %.6g, "
        "\"tokens_per_second\": %.6g, \"rounds\": %zu, \"acceptance_rate\": %.6g, "
        "\"tokens_per_round\": %.6g, \"draft_seconds\": %.6g, \"target_seconds\": %.6g, "
        "\"library_seconds\": %.6g, \"draft_calls\": %zu}",
        json_string(options.target_path).c_str(), json_string(options.draft_path).c_str(),
        json_string(prompt_text).c_str(), proposer_name(options.proposer), config.draft_length,
        name_of(config.draft_length_policy.kind), name_of(config.verifier),
        static_cast<double>(config.sampling.temperature),
        static_cast<unsigned long long>(config.seed), options.target_context.threads,
        options.draft_context.threads, json_string(options.rpc).c_str(),
        json_string(vocabulary_path).c_str(),
        json_string(detokenize(target.vocab(), fast.tokens)).c_str(), stats.emitted,
        stats.total_seconds, stats.tokens_per_second(), stats.rounds, stats.acceptance_rate(),
        stats.tokens_per_round(), stats.draft_seconds, stats.target_seconds, stats.library_seconds,
        stats.draft_calls);
    if constexpr (by_text) {
      std::printf(
          ",\n  \"string_level\": {\"rejection_rounds\": %zu, \"draft_tokens\": %zu, "
          "\"drafted_bytes\": %zu, \"proposed_tokens\": %zu, \"tokens_per_draft_call\": %.6g, "
          "\"seam_fallbacks\": %zu, \"retokenization_stops\": %zu}",
          text_work.rejection_rounds, text_work.draft_tokens, text_work.drafted_bytes,
          text_work.proposed_tokens, text_work.tokens_per_draft_call(), text_work.seam_fallbacks,
          text_work.retokenization_stops);
    }
    if (!measured_verify_costs.empty()) {
      std::string ratios;
      for (const double ratio : measured_verify_costs) {
        ratios += (ratios.empty() ? "" : ", ") + std::to_string(ratio);
      }
      std::printf(
          ",\n  \"measured_costs\": {\"draft_token\": %.6g, \"switch\": %.6g, "
          "\"verify\": [%s]}",
          config.draft_length_policy.goodput.draft_token_cost,
          config.draft_length_policy.goodput.switch_cost, ratios.c_str());
    }
    if (options.baseline) {
      std::printf(
          ",\n  \"plain\": {\"new_tokens\": %zu, \"seconds\": %.6g, "
          "\"tokens_per_second\": %.6g},\n  \"measured_speedup\": %.6g,\n"
          "  \"identical\": %s",
          slow.stats.emitted, slow.stats.total_seconds, slow.stats.tokens_per_second(), speedup,
          identical ? "true" : "false");
    }
    std::printf("\n}\n");
  } else {
    std::printf("\nspeculative (%s, %s %s %s %zu%s): %4zu tokens in %.3f s, %7.1f tokens/s\n",
                options.tree ? "tree" : proposer_name(options.proposer),
                name_of(config.draft_length_policy.kind), options.tree ? "nodes" : "K",
                adaptive || options.tree ? "<=" : "=", config.draft_length,
                config.verifier == specdec::VerifierKind::block ? ", block" : "", stats.emitted,
                stats.total_seconds, stats.tokens_per_second());
    std::printf(
        "  rounds %zu, tokens per round %.2f, acceptance rate %.3f; time in draft %.1f %%, "
        "target %.1f %%, library %.1f %%\n",
        stats.rounds, stats.tokens_per_round(), stats.acceptance_rate(),
        100 * stats.draft_seconds / stats.total_seconds,
        100 * stats.target_seconds / stats.total_seconds,
        100 * stats.library_seconds / stats.total_seconds);
    if constexpr (by_text) {
      std::printf(
          "  by text: %zu draft tokens (%zu bytes) proposed %zu target tokens, %.2f per draft "
          "call; seam fallbacks %zu, re-tokenization stops %zu\n",
          text_work.draft_tokens, text_work.drafted_bytes, text_work.proposed_tokens,
          text_work.tokens_per_draft_call(), text_work.seam_fallbacks,
          text_work.retokenization_stops);
    }
    if (options.tree) {
      // Per depth: rounds accepting a node there / rounds drafting one; per sibling rank:
      // accepted / drafted nodes that were a parent's r-th child.
      std::printf("  tree depth:");
      for (std::size_t d = 0; d < stats.drafted_at.size() && stats.drafted_at[d] > 0; ++d) {
        std::printf(" %zu: %zu/%zu", d + 1, stats.accepted_at[d], stats.drafted_at[d]);
      }
      std::printf("; sibling rank:");
      for (std::size_t r = 0; r < stats.drafted_at_rank.size() && stats.drafted_at_rank[r] > 0;
           ++r) {
        std::printf(" %zu: %zu/%zu", r + 1, stats.accepted_at_rank[r], stats.drafted_at_rank[r]);
      }
      std::printf("\n");
    }
    if (options.baseline) {
      std::printf("plain decoding:        %4zu tokens in %.3f s, %7.1f tokens/s\n",
                  slow.stats.emitted, slow.stats.total_seconds, slow.stats.tokens_per_second());
      std::printf("measured speedup:      %.2fx\n", speedup);
      if (config.sampling.greedy()) {
        std::printf("greedy outputs identical: %s\n",
                    identical ? "yes" : "NO (a bug: please report it)");
      }
    }
  }
  return options.baseline && config.sampling.greedy() && !identical ? 1 : 0;
}

int run(Options& options) {
  llama::set_verbose(options.verbose);
  llama::ModelOptions target_model, draft_model;
  if (!options.rpc.empty()) {
    target_model.devices = {llama::rpc_device(options.rpc)};
    draft_model.cpu_only = true;
  }
  // n_seq_max of both contexts: sized by check_tree_fits for a tree, 1 otherwise.
  options.target_context.name = "target";
  options.draft_context.name = "draft";
  auto target = llama::LoadedModel::load(options.target_path, options.target_context, target_model);
  auto draft = llama::LoadedModel::load(options.draft_path, options.draft_context, draft_model);
  options.newline_prompts = follows_newlines(target.model());
  if (options.proposer == Proposer::ngram) return decode(options, target, draft, draft, "");

  // The path follows the vocabularies' verdict (--vocab-bridge auto): one vocabulary drafts as
  // it is; a padded or near-identical one through MappedDraft (the draft's law over the shared
  // tokens, in the target's ids); a partly shared one through MappedDraft too if at least half
  // the draft's tokens are shared, else (and a disjoint one) by text: StringLevelDecoder
  // re-tokenizes the draft's text with the target's tokenizer. The output is the target's on
  // every path.
  const llama::VocabularyCheck check(llama::vocabulary_text(draft.model()),
                                     llama::vocabulary_text(target.model()));
  if (options.verbose) std::fprintf(stderr, "%s", specdec::detail::concat(check.report()).c_str());
  const specdec::VocabularyVerdict verdict = check.verdict();
  const bool by_text = options.vocab_bridge == VocabularyBridge::text ||
                       (options.vocab_bridge == VocabularyBridge::automatic &&
                        (verdict == specdec::VocabularyVerdict::disjoint ||
                         (verdict == specdec::VocabularyVerdict::needs_intersection &&
                          check.report().draft_overlap < 0.5)));
  if (!by_text && verdict == specdec::VocabularyVerdict::disjoint) {
    // --vocab-bridge map over vocabularies with nothing to map: check_compatible says why.
    (void)llama::check_compatible(draft.model(), target.model(),
                                  llama::VocabularyRequirement::mappable);
  }
  if (by_text) {
    TextBridge bridge{draft,
                      llama::VocabularyTokenizer(draft.vocab()),
                      llama::VocabularyTokenizer(target.vocab()),
                      {}};
    // Drafting by text needs a draft that can write the target's text: its tokenizer must
    // spell the prompt (the shipped pair's prompts follow a newline).
    const std::string prompt_text =
        options.newline_prompts ? "\n" + options.prompt : options.prompt;
    if (!bridge.draft_tokens.spells(prompt_text)) {
      throw std::domain_error(
          "specdec: draft and target vocabularies are " + check.description() +
          "; and the draft's tokenizer cannot write the prompt's text, so it cannot draft by "
          "text either: expected a draft whose tokenizer covers the target's text");
    }
    if (llama_vocab_get_add_bos(draft.vocab()) && llama_vocab_bos(draft.vocab()) >= 0) {
      bridge.options.draft_prefix = {llama_vocab_bos(draft.vocab())};
    }
    const llama_token draft_eos = llama_vocab_eos(draft.vocab());
    const llama_token target_eos = llama_vocab_eos(target.vocab());
    if (draft_eos != LLAMA_TOKEN_NULL) {
      bridge.options.draft_eos = draft_eos;
      if (target_eos != LLAMA_TOKEN_NULL) bridge.options.target_eos = target_eos;
    }
    const bool byte_target = bridge.target_tokens.one_token_per_byte();
    if (options.string_level == StringLevelVerification::rejection && !byte_target) {
      throw UsageError(
          "--string-level rejection needs a target of one token per byte (a byte-level "
          "vocabulary); this target's tokens join bytes: use --string-level exact or auto");
    }
    bridge.options.rejection_sampling =
        byte_target && options.string_level != StringLevelVerification::exact;
    bridge.options.target_vocab_size = bridge.target_tokens.size();
    return decode(options, target, draft, bridge,
                  check.summary() + (bridge.options.rejection_sampling
                                         ? ": drafting by text (string-level rejection sampling)"
                                         : ": drafting by text (string-level exact match)"));
  }
  if (!check.needs_map() && options.vocab_bridge != VocabularyBridge::map) {
    return decode(options, target, draft, draft, check.summary() + ": the draft as it is");
  }
  // Trees too: MappedDraft forwards the draft's score_tree (one llama_decode per depth).
  specdec::MappedDraft mapped(draft, check.map(), llama::retokenize(draft.vocab(), target.vocab()));
  static_assert(specdec::detail::HasScoreTree<decltype(mapped)>);
  return decode(options, target, draft, mapped, check.summary() + ": mapped draft");
}

// ---- --parallel: B sequences at once
// -------------------------------------------------------------

int run_parallel(Options& options) {
  llama::set_verbose(options.verbose);
  specdec::GenerationConfig& config = options.config;
  const std::size_t width = options.parallel;
  llama::ModelOptions target_model, draft_model;
  if (!options.rpc.empty()) {
    target_model.devices = {llama::rpc_device(options.rpc)};
    draft_model.cpu_only = true;
  }
  const std::vector<std::string> lines = specdec::examples::read_prompt_lines(options.prompts_path);
  std::size_t longest = 0;
  for (std::size_t i = 0; i < width; ++i) {
    longest = std::max(longest, 1 + lines[i % lines.size()].size());  // 1: a newline before it
  }
  // Each sequence's share of the unified KV cache: its prompt (bytes bound its tokens), its
  // budget and a round's draft, or -c if given.
  const auto per_sequence = static_cast<std::uint32_t>(
      options.target_context.n_ctx != 0
          ? options.target_context.n_ctx
          : std::min<std::size_t>(longest + config.max_new_tokens + config.draft_length + 2,
                                  1u << 20));
  options.target_context.name = "target";
  options.draft_context.name = "draft";
  auto target_context =
      llama::LoadedModel::load(options.target_path,
                               llama::batched_context_options(static_cast<std::uint32_t>(width),
                                                              per_sequence, options.target_context),
                               target_model);
  auto draft_context =
      llama::LoadedModel::load(options.draft_path,
                               llama::batched_context_options(static_cast<std::uint32_t>(width),
                                                              per_sequence, options.draft_context),
                               draft_model);
  llama::check_compatible(draft_context.model(), target_context.model());
  options.newline_prompts = follows_newlines(target_context.model());
  llama::BatchedModel target(target_context);
  llama::BatchedModel draft(draft_context);
  config.max_context = std::min(target.max_context(), draft.max_context());
  const llama_token eos = llama_vocab_eos(target_context.vocab());
  if (!options.ignore_eos && eos != LLAMA_TOKEN_NULL) config.stop_tokens = {eos};
  BatchPrompts prompts;
  for (std::size_t i = 0; i < width; ++i) {
    const std::string& line = lines[i % lines.size()];
    const std::string& text =
        prompts.texts.emplace_back(options.newline_prompts ? "\n" + line : line);
    if (prompts.tokens.emplace_back(llama::tokenize(target_context.vocab(), text)).empty()) {
      throw UsageError("prompt " + std::to_string(i) + " tokenizes to nothing");
    }
    // Sampled: a cycled prompt does not repeat its twin's text.
    prompts.configs.emplace_back(config).seed = config.seed + i;
  }
  // Warm-up outside the timings: the first llama_decode of a shape allocates its graph.
  (void)target(prompts.tokens[0], 1);
  (void)draft(prompts.tokens[0], 1);
  target.reset();
  draft.reset();

  // goodput: one plan per step sets every sequence's draft length (batch/goodput.hpp), from cost
  // curves timed here (target calls of 1 .. B (K + 1) rows, draft calls of 1 .. B sequences),
  // before decoding and outside its timing; --draft-costs online learns them while decoding.
  specdec::BatchGoodputOptions costs;
  if (config.draft_length_policy.kind == specdec::DraftLengthKind::goodput &&
      options.measure_costs) {
    const std::size_t wanted = std::max<std::size_t>(64, 2 * (config.draft_length + 1));
    const std::vector<token_t> context =
        specdec::examples::cost_context(prompts, std::min<std::size_t>(wanted, per_sequence - 1));
    costs = specdec::measure_batch_call_costs(draft, target, context, width, config.draft_length, 3)
                .goodput_options();
    target.reset();
    draft.reset();
  }

  // Paired runs, speculative and plain, each from an empty KV cache, the order alternating
  // from pair to pair (the first run of a pair may pay what the second does not: with the same
  // work in both, always speculative first read 0.94-0.98x); the medians are printed (the
  // other figures are the last pair's).
  BatchRun fast, slow;
  std::vector<double> fast_rates, slow_rates, ratios, fast_latencies, slow_latencies;
  const auto speculative_decoder = [&] {
    return specdec::BatchedDecoder(target, specdec::ModelProposer(draft),
                                   specdec::ConfiguredDraftLength{}, specdec::ConfiguredVerifier{},
                                   costs);
  };
  // With --warm-decoder every run is decoded by this one (between runs it holds no sequence,
  // so the caches may be cleared under it).
  auto warm = speculative_decoder();
  const auto run_fast = [&] {
    target.reset();
    draft.reset();
    if (options.plain_control) {
      specdec::BatchedDecoder decoder(target, specdec::ModelProposer(draft), specdec::NeverDraft{});
      fast = specdec::examples::run_batch(decoder, prompts);
    } else if (options.warm_decoder) {
      fast = specdec::examples::run_batch(warm, prompts);
    } else {
      auto decoder = speculative_decoder();
      fast = specdec::examples::run_batch(decoder, prompts);
    }
    fast_rates.push_back(fast.tokens_per_second());
    fast_latencies.push_back(fast.median_ms_per_token());
  };
  const auto run_slow = [&] {
    target.reset();
    specdec::BatchedDecoder decoder(target, specdec::ModelProposer(draft), specdec::NeverDraft{});
    slow = specdec::examples::run_batch(decoder, prompts);
    slow_rates.push_back(slow.tokens_per_second());
    slow_latencies.push_back(slow.median_ms_per_token());
  };
  for (std::size_t r = 0; r < options.repeat; ++r) {
    if (!options.baseline) {
      run_fast();
      continue;
    }
    if (r % 2 == 0) {
      run_fast();
      run_slow();
    } else {
      run_slow();
      run_fast();
    }
    ratios.push_back(fast_rates.back() / slow_rates.back());
  }
  const double fast_rate = median(fast_rates);
  const double slow_rate = median(slow_rates);
  const double fast_latency = median(fast_latencies);  // ms per token, per sequence
  const double slow_latency = median(slow_latencies);

  const specdec::DecodeStats pooled = fast.pooled();
  const std::size_t differing = options.baseline ? fast.differing_from(slow) : 0;
  const std::vector<std::size_t> histogram = pooled.draft_length_histogram();
  const double ratio = median(ratios);
  const bool greedy = config.sampling.greedy();
  if (options.json) {
    std::printf(
        "{\n  \"target\": %s,\n  \"draft\": %s,\n  \"parallel\": %zu,\n"
        "  \"repeats\": %zu,\n  \"warm_decoder\": %s,\n  \"plain_control\": %s,\n"
        "  \"draft_length\": %zu,\n  "
        "\"draft_policy\": \"%s\",\n  "
        "\"temperature\": %g,\n"
        "  \"sequences\": [",
        json_string(options.target_path).c_str(), json_string(options.draft_path).c_str(), width,
        options.repeat, options.warm_decoder ? "true" : "false",
        options.plain_control ? "true" : "false", config.draft_length,
        name_of(config.draft_length_policy.kind), static_cast<double>(config.sampling.temperature));
    for (std::size_t i = 0; i < width; ++i) {
      const specdec::DecodeStats& stats = fast.results[i].stats;
      std::printf(
          "%s\n    {\"prompt\": %s, \"text\": %s, \"new_tokens\": %zu, "
          "\"tokens_per_second\": %.6g, \"acceptance_rate\": %.6g}",
          i ? "," : "", json_string(prompts.texts[i]).c_str(),
          json_string(detokenize(target_context.vocab(), fast.results[i].tokens)).c_str(),
          stats.emitted, stats.tokens_per_second(), stats.acceptance_rate());
    }
    std::printf(
        "\n  ],\n  \"speculative\": {\"new_tokens\": %zu, \"seconds\": %.6g, "
        "\"tokens_per_second\": %.6g, \"target_calls\": %zu, "
        "\"rows_per_target_call\": %.6g, \"draft_calls\": %zu, "
        "\"acceptance_rate\": %.6g, \"ms_per_token_per_sequence\": %.6g, "
        "\"draft_length_histogram\": [%s]}",
        fast.tokens(), fast.seconds, fast_rate, fast.stats.target_calls,
        fast.stats.rows_per_target_call(), fast.stats.draft_calls, pooled.acceptance_rate(),
        fast_latency, histogram_text(histogram, true).c_str());
    if (costs.fixed_costs()) {  // the curves the plan priced its steps with, in ms
      const auto ms = [](const std::vector<double>& seconds) {
        std::string text;
        char value[32];
        for (const double s : seconds) {
          std::snprintf(value, sizeof value, "%s%.4g", text.empty() ? "" : ", ", 1e3 * s);
          text += value;
        }
        return text;
      };
      std::printf(
          ",\n  \"measured_costs\": {\"target_call_ms\": [%s], \"plain_step_ms\": [%s], "
          "\"draft_call_ms\": [%s], \"draft_catch_up_ms_per_token\": %.4g}",
          ms(costs.target_call_costs).c_str(), ms(costs.plain_step_costs).c_str(),
          ms(costs.draft_call_costs).c_str(), 1e3 * costs.draft_catch_up_cost);
    }
    if (options.baseline) {
      std::printf(
          ",\n  \"plain\": {\"new_tokens\": %zu, \"seconds\": %.6g, "
          "\"tokens_per_second\": %.6g, \"target_calls\": %zu, "
          "\"rows_per_target_call\": %.6g, \"ms_per_token_per_sequence\": %.6g},\n"
          "  \"measured_speedup\": %.6g,\n  \"identical\": %s",
          slow.tokens(), slow.seconds, slow_rate, slow.stats.target_calls,
          slow.stats.rows_per_target_call(), slow_latency, ratio,
          differing == 0 ? "true" : "false");
      // Every pair's ratio, in order (pairs 0, 2, 4, ... ran the speculative arm first): a
      // measurement pooled over processes reads these, not one process's median.
      std::printf(",\n  \"pair_ratios\": [");
      for (std::size_t r = 0; r < ratios.size(); ++r) {
        std::printf("%s%.6g", r ? ", " : "", ratios[r]);
      }
      std::printf("]");
    }
    std::printf("\n}\n");
  } else {
    for (std::size_t i = 0; i < width; ++i) {
      const specdec::DecodeStats& stats = fast.results[i].stats;
      std::printf("---- sequence %zu: %zu tokens, %.1f tokens/s, acceptance rate %.3f\n%s%s\n", i,
                  stats.emitted, stats.tokens_per_second(), stats.acceptance_rate(),
                  printable(options.newline_prompts ? prompts.texts[i].substr(1) : prompts.texts[i])
                      .c_str(),
                  printable(detokenize(target_context.vocab(), fast.results[i].tokens)).c_str());
    }
    if (options.repeat > 1) {
      std::printf("\nmedians of %zu paired runs (tokens/s in all; the speedup of each pair)\n",
                  options.repeat);
    }
    std::printf(
        "\nspeculative, %zu sequences at once (%s K %s %zu): %zu tokens in %.3f s, "
        "%.1f tokens/s in all, %.3f ms per token per sequence\n",
        width, name_of(config.draft_length_policy.kind),
        config.draft_length_policy.kind != specdec::DraftLengthKind::fixed ? "<=" : "=",
        config.draft_length, fast.tokens(), fast.seconds, fast_rate, fast_latency);
    std::printf(
        "  target calls %zu, rows per target call %.1f, sequence rounds per call %.2f; "
        "draft calls %zu; acceptance rate %.3f\n",
        fast.stats.target_calls, fast.stats.rows_per_target_call(),
        fast.stats.rounds_per_target_call(), fast.stats.draft_calls, pooled.acceptance_rate());
    std::printf("  draft lengths: %s (length: rounds)\n", histogram_text(histogram).c_str());
    if (options.baseline) {
      std::printf(
          "plain batched decoding: %zu tokens in %.3f s, %.1f tokens/s in all, %.3f ms per token "
          "per sequence (%zu target calls, %.1f rows each)\n",
          slow.tokens(), slow.seconds, slow_rate, slow_latency, slow.stats.target_calls,
          slow.stats.rows_per_target_call());
      std::printf("measured speedup:       %.2fx\n", ratio);
      if (greedy) {
        std::printf("greedy outputs identical: %s\n",
                    differing == 0 ? "yes"
                                   : (std::to_string(differing) +
                                      " sequences differ (a near-tie flipped by the batch's "
                                      "shape, or a bug: please report it)")
                                         .c_str());
      }
    }
  }
  return options.baseline && greedy && differing != 0 ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  return specdec::examples::run_cli("specdec-llama", [&] {
    Options options = parse_args(argc, argv);
    if (options.help) {
      std::fputs(kHelp, stdout);
      return 0;
    }
    // Both the speculative and the plain runs decode in this process: llama_decode's per-call
    // copy must not cost either of them fresh pages (backend.hpp).
    llama::keep_freed_heap();
    return options.parallel > 0 ? run_parallel(options) : run(options);
  });
}

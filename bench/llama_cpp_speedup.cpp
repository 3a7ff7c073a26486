// llama_cpp_speedup: specdec over llama.cpp (the adapter in specdec/llama_cpp.hpp) on GGUF
// models, one prompt at a time, every setting paired with plain decoding of the same prompt. A
// plain program, not Google Benchmark: a data point is a whole generation. Prints one JSON line
// per (prompt, temperature, setting) on stdout; bench/llama_cpp_compare.py runs it next to
// llama.cpp's own tools and makes the tables.
//
//   llama_cpp_speedup -m TARGET -md DRAFT [--prompts-file F] [--first I] [--count N]
//                     [-n TOKENS] [--temps 0,1] [-t N] [-td N] [--settings LIST] [--rpc H:P]
//                     [--call-costs [--repeats N] [--batch B]] [--catch-up [--repeats N]]
//                     [--text-draft DRAFT2]
//
// Settings (comma-separated; default all): llama (llama.cpp's own decoding loop through its C
// API, llama_sampler greedy / dist, no specdec: what the adapter must not slow down), plain
// (specdec's AutoregressiveDecoder over the adapter), K1..K16 (SpeculativeDecoder, fixed K),
// block4 etc. (block verification), goodput (K <= 16 chosen per round, costs measured online),
// goodput-block, goodput-measured / goodput-measured-block (the same policy with the pair's call
// costs measured once before the first prompt: measure_call_costs), each with -correct
// (GoodputOptions::correct_costs on), -noguard (plain_guard off) and/or -nogrowth (the guard
// told no plain_growth) appended for A/B runs;
// every goodput setting has a decoder of its own. batch-plain, batch-K8, batch-block4,
// batch-goodput-measured[-block] etc.: the setting through BatchedDecoder with one sequence
// (B = 1) over BatchedModel contexts of their own, the goodput plan's costs measured once by
// measure_batch_call_costs (batch-plain: NeverDraft, plain batched decoding): what the batched
// path costs a lone sequence, against the same setting's line. ngram (prompt lookup),
// ngram-draft (lookup, else the draft model); textK8, textblock8 etc. (StringLevelDecoder: the
// --text-draft model, a draft with a tokenizer of its own, drafts text that the target's
// tokenizer re-tokenizes; K counts target tokens; verified by exact match); textrsK8,
// textrsblock8 etc. (the same, verified by string-level rejection sampling: a byte-level target
// only); mapK8, mapblock8 etc. (the same draft through
// MappedDraft: its law over the tokens both vocabularies share, token-level intersection).
// Every setting except llama and
// plain is paired with a plain run of the same prompt, the order alternating by prompt; the KV
// caches are reset before every run, so each run pays for its own prompt.
//
// --call-costs instead prints T(n)/T(1) of the target for n = 1..16 (n fresh rows after a
// 64-token context, median of repeated calls), the verification cost curve the goodput policy
// measures for itself. With --batch B: the batched target's (llama_cpp::BatchedModel, a split
// KV cache of B sequences) T(n)/T(1) for n total rows up to B x 9 (B sequences drafting K = 8),
// the rows spread evenly over as many sequences as divide them (at most B), each after its own
// 64-token context: the curve a batch's draft lengths are planned on.
//
// --catch-up instead times what resuming drafting after m plain steps costs (m = 1, 2, 4, ...
// 64): the target takes m one-row steps, then the draft's next call reads the m tokens it has
// not seen (one llama_decode of m rows, on a graph of that shape) before its next token. One
// JSON line per m: the median catch-up call, and the same in plain steps (the median one-row
// target call of those steps) and in steady draft calls (the second one-token call after it).

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <specdec/llama_cpp.hpp>
#include <specdec/specdec.hpp>

namespace {

using specdec::token_t;
namespace llama = specdec::llama_cpp;

struct Options {
  std::string target_path, draft_path, text_draft_path,
      prompts_file = SPECDEC_MODELS_DIR "/prompts.txt", rpc;
  std::size_t first = 0, count = 1, tokens = 200;
  std::vector<float> temperatures{0.0f};
  int threads = 1, threads_draft = 1;
  std::vector<std::string> settings;
  bool call_costs = false;
  bool catch_up = false;
  std::size_t batch = 0;  // --call-costs --batch B: the batched target's curve
  int repeats = 41;       // --call-costs: calls per row count (the median is reported)
};

std::vector<std::string> split(std::string_view text) {
  std::vector<std::string> parts;
  while (!text.empty()) {
    const std::size_t comma = text.find(',');
    parts.emplace_back(text.substr(0, comma));
    if (comma == std::string_view::npos) break;
    text.remove_prefix(comma + 1);
  }
  return parts;
}

template <class Number>
Number number(std::string_view text) {
  Number value{};
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc{} || end != text.data() + text.size()) {
    throw std::invalid_argument("not a number: '" + std::string(text) + "'");
  }
  return value;
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string_view flag = argv[i];
    const auto value = [&]() -> std::string_view {
      if (i + 1 >= argc) throw std::invalid_argument(std::string(flag) + " needs a value");
      return argv[++i];
    };
    if (flag == "-m")
      o.target_path = value();
    else if (flag == "-md")
      o.draft_path = value();
    else if (flag == "--prompts-file")
      o.prompts_file = value();
    else if (flag == "--first")
      o.first = number<std::size_t>(value());
    else if (flag == "--count")
      o.count = number<std::size_t>(value());
    else if (flag == "-n")
      o.tokens = number<std::size_t>(value());
    else if (flag == "-t")
      o.threads = number<int>(value());
    else if (flag == "-td")
      o.threads_draft = number<int>(value());
    else if (flag == "--rpc")
      o.rpc = value();
    else if (flag == "--text-draft")
      o.text_draft_path = value();
    else if (flag == "--call-costs")
      o.call_costs = true;
    else if (flag == "--catch-up")
      o.catch_up = true;
    else if (flag == "--batch")
      o.batch = number<std::size_t>(value());
    else if (flag == "--repeats")
      o.repeats = std::max(1, number<int>(value()));
    else if (flag == "--settings")
      o.settings = split(value());
    else if (flag == "--temps") {
      o.temperatures.clear();
      for (const std::string& t : split(value())) o.temperatures.push_back(number<float>(t));
    } else {
      throw std::invalid_argument("unknown option '" + std::string(flag) + "'");
    }
  }
  if (o.target_path.empty()) throw std::invalid_argument("-m TARGET is required");
  if (o.settings.empty()) {
    o.settings = {"llama",
                  "plain",
                  "K1",
                  "K2",
                  "K3",
                  "K4",
                  "K5",
                  "K6",
                  "K7",
                  "K8",
                  "goodput",
                  "block4",
                  "block6",
                  "block8",
                  "goodput-block",
                  "goodput-measured",
                  "goodput-measured-block",
                  "ngram",
                  "ngram-draft"};
  }
  return o;
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

/// llama.cpp's own decoding loop through its C API: decode the prompt, then one token per
/// llama_decode, chosen by llama_sampler (greedy, or temperature then dist with the seed).
specdec::GenerationResult llama_loop(llama::ContextModel& model, const std::vector<token_t>& prompt,
                                     const specdec::GenerationConfig& config) {
  model.reset();
  llama_sampler* sampler = llama_sampler_chain_init(llama_sampler_chain_default_params());
  if (config.sampling.greedy()) {
    llama_sampler_chain_add(sampler, llama_sampler_init_greedy());
  } else {
    llama_sampler_chain_add(sampler, llama_sampler_init_temp(config.sampling.temperature));
    llama_sampler_chain_add(sampler,
                            llama_sampler_init_dist(static_cast<std::uint32_t>(config.seed)));
  }
  specdec::GenerationResult result;
  std::vector<llama_token> batch_tokens(prompt.begin(), prompt.end());
  const auto start = std::chrono::steady_clock::now();
  llama_batch batch =
      llama_batch_get_one(batch_tokens.data(), static_cast<std::int32_t>(batch_tokens.size()));
  for (std::size_t i = 0; i < config.max_new_tokens; ++i) {
    if (llama_decode(model.context(), batch) != 0) throw std::runtime_error("llama_decode failed");
    const llama_token next = llama_sampler_sample(sampler, model.context(), -1);
    result.tokens.push_back(next);
    batch_tokens.assign(1, next);
    batch = llama_batch_get_one(batch_tokens.data(), 1);
  }
  result.stats.total_seconds = seconds_since(start);
  result.stats.emitted = result.tokens.size();
  llama_sampler_free(sampler);
  model.reset();
  return result;
}

std::vector<std::string> read_prompts(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::invalid_argument("cannot read prompts file '" + path + "'");
  std::vector<std::string> prompts;
  for (std::string line; std::getline(in, line);) prompts.push_back(line);
  return prompts;
}

double median_of(std::vector<double> values) {
  const auto middle = values.begin() + static_cast<std::ptrdiff_t>(values.size() / 2);
  std::nth_element(values.begin(), middle, values.end());
  return *middle;
}

/// A held-out prompt as every run here reads it: a newline (the shipped pair's verses follow
/// one), then one token per byte.
std::vector<token_t> prompt_tokens(const std::string& line) {
  std::vector<token_t> prompt{'\n'};
  for (const unsigned char byte : line) prompt.push_back(byte);
  return prompt;
}

void print_call_costs(llama::ContextModel& target, int repeats) {
  std::vector<token_t> context(80);
  for (std::size_t i = 0; i < context.size(); ++i) context[i] = static_cast<token_t>(32 + i % 90);
  (void)target(context, 16);  // warm-up: every graph shape allocated
  std::vector<double> medians;
  for (std::size_t n = 1; n <= 16; ++n) {
    std::vector<double> times;
    for (int repeat = 0; repeat < repeats; ++repeat) {
      // The same context again: the adapter keeps context.size() - n positions and computes n.
      const auto start = std::chrono::steady_clock::now();
      (void)target(context, n);
      times.push_back(seconds_since(start));
    }
    medians.push_back(median_of(std::move(times)));
    std::printf("{\"n\": %zu, \"seconds\": %.6g, \"ratio\": %.4f}\n", n, medians.back(),
                medians.back() / medians[0]);
    std::fflush(stdout);
  }
}

/// --catch-up (the file comment): the draft resuming after m plain steps of the target, over a
/// prompt of the held-out set, as decoding meets it.
void print_catch_up_costs(llama::ContextModel& target, llama::ContextModel& draft,
                          const std::vector<token_t>& context, int repeats) {
  constexpr std::size_t kStart = 16;  // the tokens both models read first (a prompt)
  (void)target(context, 1);
  (void)draft(context);  // warm-up: both models' one-row graphs
  for (std::size_t m = 1; m <= 64 && kStart + m + 2 <= context.size(); m *= 2) {
    std::vector<double> catch_up, plain, steady;
    for (int repeat = 0; repeat < repeats; ++repeat) {
      target.reset();
      draft.reset();
      const auto at = [&](std::size_t n) { return std::span(context).first(n); };
      (void)target(at(kStart), 1);
      (void)draft(at(kStart));
      for (std::size_t j = 1; j <= m; ++j) {  // m plain steps
        const auto start = std::chrono::steady_clock::now();
        (void)target(at(kStart + j), 1);
        plain.push_back(seconds_since(start));
      }
      auto start = std::chrono::steady_clock::now();
      (void)draft(at(kStart + m));  // reads the m tokens the plain steps emitted
      catch_up.push_back(seconds_since(start));
      (void)draft(at(kStart + m + 1));  // the next drafted token (a one-row graph again)
      start = std::chrono::steady_clock::now();
      (void)draft(at(kStart + m + 2));  // and the one after it: a steady call
      steady.push_back(seconds_since(start));
    }
    const double seconds = median_of(catch_up);
    std::printf(
        "{\"m\": %zu, \"catch_up_seconds\": %.6g, \"in_plain_steps\": %.3f, "
        "\"in_draft_calls\": %.3f, \"plain_seconds\": %.6g, \"draft_seconds\": %.6g}\n",
        m, seconds, seconds / median_of(plain), seconds / median_of(steady), median_of(plain),
        median_of(steady));
    std::fflush(stdout);
  }
}

/// T(n)/T(1) of a batched call of n rows in total over up to `sequences` sequences (the file
/// comment): n = 1, 2, 4, 8, 9, then up to sequences x 9 the multiples of sequences and of
/// 9 / 8 of them; one JSON line per n, the median of `repeats` calls after one untimed call of
/// the same shape.
void print_batch_call_costs(const std::string& path, int threads, std::size_t sequences,
                            int repeats, const llama::ModelOptions& model_options) {
  constexpr std::size_t kContext = 64;
  const std::size_t most = sequences * 9;
  auto context_model = llama::LoadedModel::load(
      path,
      llama::batched_context_options(static_cast<std::uint32_t>(sequences),
                                     static_cast<std::uint32_t>(kContext + 9 + 8),
                                     {.threads = threads}),
      model_options);
  llama::BatchedModel target(context_model);
  std::vector<std::size_t> counts{1, 2, 4, 8, 9};
  for (std::size_t b = 2; b <= sequences; b *= 2) {
    for (const std::size_t n : {b, b * 2, b * 4, b * 8, b * 9}) {
      if (n <= most) counts.push_back(n);
    }
  }
  std::sort(counts.begin(), counts.end());
  counts.erase(std::unique(counts.begin(), counts.end()), counts.end());
  std::vector<std::vector<token_t>> contexts(sequences);
  for (std::size_t s = 0; s < sequences; ++s) {
    for (std::size_t i = 0; i < kContext + 9; ++i) {
      contexts[s].push_back(static_cast<token_t>(32 + (i * 7 + s * 13) % 90));
    }
  }
  // The committed context once per sequence, then every call recomputes only its rows.
  std::vector<specdec::ScoreRequest> requests;
  for (std::size_t s = 0; s < sequences; ++s) {
    requests.push_back({.id = static_cast<specdec::sequence_id>(s),
                        .context = std::span<const token_t>(contexts[s]).first(kContext + 1),
                        .committed = 0,
                        .rows = 1});
  }
  (void)target.score_batch(requests);
  double first = 0;
  for (const std::size_t n : counts) {
    std::size_t used = std::min(sequences, n);
    while (n % used != 0) --used;
    const std::size_t rows = n / used;
    requests.clear();
    for (std::size_t s = 0; s < used; ++s) {
      requests.push_back({.id = static_cast<specdec::sequence_id>(s),
                          .context = std::span<const token_t>(contexts[s]).first(kContext + rows),
                          .committed = kContext,
                          .rows = rows});
    }
    (void)target.score_batch(requests);  // the shape's first call: graph allocation
    std::vector<double> times;
    for (int repeat = 0; repeat < repeats; ++repeat) {
      const auto start = std::chrono::steady_clock::now();
      (void)target.score_batch(requests);
      times.push_back(seconds_since(start));
    }
    const auto middle = times.begin() + static_cast<std::ptrdiff_t>(times.size() / 2);
    std::nth_element(times.begin(), middle, times.end());
    if (n == 1) first = *middle;
    std::printf(
        "{\"batch\": %zu, \"threads\": %d, \"n\": %zu, \"sequences\": %zu, \"seconds\": %.6g, "
        "\"ratio\": %.4f}\n",
        sequences, threads, n, used, *middle, *middle / first);
    std::fflush(stdout);
  }
}

/// One prompt through a BatchedDecoder, alone (B = 1); its wall time as total_seconds.
template <class Decoder>
specdec::GenerationResult decode_alone(Decoder& decoder, const std::vector<token_t>& prompt,
                                       const specdec::GenerationConfig& config) {
  const auto start = std::chrono::steady_clock::now();
  decoder.add(0, prompt, config);
  std::vector<specdec::FinishedSequence> finished = decoder.run();
  const double seconds = seconds_since(start);
  if (finished.size() != 1) throw std::logic_error("a batch of one finished other than once");
  if (finished[0].error) std::rethrow_exception(finished[0].error);
  specdec::GenerationResult result = std::move(finished[0].result);
  result.stats.total_seconds = seconds;
  return result;
}

}  // namespace

int main(int argc, char** argv) try {
  const Options o = parse(argc, argv);
  llama::keep_freed_heap();  // as specdec-llama: no fresh pages per llama_decode (backend.hpp)
  llama::ModelOptions target_model, draft_model;
  if (!o.rpc.empty()) {
    target_model.devices = {llama::rpc_device(o.rpc)};
    draft_model.cpu_only = true;
  }
  if (o.call_costs && o.batch > 0) {
    print_batch_call_costs(o.target_path, o.threads, o.batch, o.repeats, target_model);
    return 0;
  }
  auto target = llama::LoadedModel::load(o.target_path, {.threads = o.threads}, target_model);
  if (o.call_costs) {
    print_call_costs(target, o.repeats);
    return 0;
  }
  auto draft = llama::LoadedModel::load(o.draft_path.empty() ? o.target_path : o.draft_path,
                                        {.threads = o.threads_draft}, draft_model);
  llama::check_compatible(draft.model(), target.model());
  if (o.catch_up) {
    std::vector<token_t> context;  // held-out prompts back to back, as the runs below read them
    for (const std::string& line : read_prompts(o.prompts_file)) {
      const std::vector<token_t> prompt = prompt_tokens(line);
      context.insert(context.end(), prompt.begin(), prompt.end());
      if (context.size() > 96) break;
    }
    print_catch_up_costs(target, draft, context, o.repeats);
    return 0;
  }

  // A draft of another tokenizer, for the text settings (string-level exact match).
  std::optional<llama::LoadedModel> text_draft;
  if (!o.text_draft_path.empty()) {
    text_draft.emplace(
        llama::LoadedModel::load(o.text_draft_path, {.threads = o.threads_draft}, draft_model));
  }
  const std::optional<llama::VocabularyTokenizer> text_draft_tokens =
      text_draft ? std::optional(llama::VocabularyTokenizer(text_draft->vocab())) : std::nullopt;
  const llama::VocabularyTokenizer target_tokens(target.vocab());
  std::optional<specdec::StringLevelDecoder<llama::LoadedModel, llama::VocabularyTokenizer,
                                            llama::LoadedModel, llama::VocabularyTokenizer>>
      by_text;
  if (text_draft) by_text.emplace(*text_draft, *text_draft_tokens, target, target_tokens);
  decltype(by_text) by_text_rs;  // rejection sampling (a byte-level target only)
  if (text_draft && target_tokens.one_token_per_byte()) {
    by_text_rs.emplace(*text_draft, *text_draft_tokens, target, target_tokens,
                       specdec::StringLevelOptions{.rejection_sampling = true,
                                                   .target_vocab_size = target_tokens.size()});
  }
  std::optional<llama::VocabularyCheck> text_draft_check;
  std::optional<specdec::MappedDraft<llama::LoadedModel>> mapped;
  if (text_draft) {
    text_draft_check.emplace(llama::vocabulary_text(text_draft->model()),
                             llama::vocabulary_text(target.model()));
    std::fprintf(stderr, "--text-draft vocabulary: %s\n", text_draft_check->description().c_str());
    if (text_draft_check->verdict() != specdec::VocabularyVerdict::disjoint) {
      mapped.emplace(*text_draft, text_draft_check->map(),
                     llama::retokenize(text_draft->vocab(), target.vocab()));
    }
  }
  std::optional<
      specdec::SpeculativeDecoder<specdec::MappedDraft<llama::LoadedModel>, llama::LoadedModel>>
      by_map;
  if (mapped) by_map.emplace(*mapped, target);
  specdec::AutoregressiveDecoder plain(target);
  specdec::SpeculativeDecoder speculative(draft, target);
  // Every goodput setting gets a decoder of its own (below): a policy keeps what it learnt
  // (calibration, measured costs, the plain guard) from one generate() to the next.
  using Speculative = decltype(speculative);
  std::map<std::string, std::unique_ptr<Speculative>> goodput_decoders;
  specdec::NgramDecoder lookup(target, {.min_ngram = 4, .max_ngram = 12});
  specdec::NgramThenModelDecoder lookup_then_draft(draft, target,
                                                   {.min_ngram = 4, .max_ngram = 12});
  // batch-*: the pair again as one-sequence batched contexts of the single ones' size.
  const bool batched =
      std::ranges::any_of(o.settings, [](const std::string& s) { return s.starts_with("batch-"); });
  std::optional<llama::LoadedModel> batch_target_context, batch_draft_context;
  std::optional<llama::BatchedModel> batch_target, batch_draft;
  if (batched) {
    batch_target_context.emplace(llama::LoadedModel::load(
        o.target_path,
        llama::batched_context_options(1, static_cast<std::uint32_t>(target.max_context()),
                                       {.threads = o.threads}),
        target_model));
    batch_draft_context.emplace(llama::LoadedModel::load(
        o.draft_path.empty() ? o.target_path : o.draft_path,
        llama::batched_context_options(1, static_cast<std::uint32_t>(draft.max_context()),
                                       {.threads = o.threads_draft}),
        draft_model));
    batch_target.emplace(*batch_target_context);
    batch_draft.emplace(*batch_draft_context);
  }
  using BatchedSpeculative =
      specdec::BatchedDecoder<llama::BatchedModel, specdec::ModelProposer<llama::BatchedModel>>;
  using BatchedPlain =
      specdec::BatchedDecoder<llama::BatchedModel, specdec::ModelProposer<llama::BatchedModel>,
                              specdec::NeverDraft>;
  std::map<std::string, std::unique_ptr<BatchedSpeculative>> batch_decoders;  // as goodput's
  std::unique_ptr<BatchedPlain> batch_plain;
  specdec::BatchGoodputOptions batch_costs;
  const auto reset = [&] {
    target.reset();
    draft.reset();
    if (text_draft) text_draft->reset();
    if (batch_target) batch_target->reset();
    if (batch_draft) batch_draft->reset();
  };
  // Warm-up outside every timing: llama.cpp allocates a graph per batch shape on first use.
  {
    std::vector<token_t> warm(40, 'a');
    for (std::size_t n = 1; n <= 17; ++n) (void)target(warm, n);
    (void)draft(warm, 1);
    if (batched) {
      for (std::size_t n = 1; n <= 17; ++n) (void)(*batch_target)(warm, n);
      (void)(*batch_draft)(warm, 1);
    }
    reset();
  }
  // goodput-measured: the pair's call costs measured once, before any prompt (as specdec-llama
  // does for --spec-draft-n-max auto).
  specdec::GoodputOptions measured_costs;
  if (std::ranges::any_of(o.settings, [](const std::string& s) {
        return s.starts_with("goodput-measured") || s.starts_with("batch-goodput-measured");
      })) {
    // 256 tokens: the rounds walk through positions 128-255, like a generation's (the KV cache
    // length matters to a call's cost).
    std::vector<token_t> context(256);
    for (std::size_t i = 0; i < context.size(); ++i) context[i] = static_cast<token_t>(32 + i % 90);
    const specdec::CallCosts costs = specdec::measure_call_costs(draft, target, context, 17, 9);
    measured_costs = costs.goodput_options();
    std::fprintf(
        stderr, "measured call costs: draft %.3f, switch %.3f, plain growth %.5f, T(n)/T(1):",
        measured_costs.draft_token_cost, measured_costs.switch_cost, measured_costs.plain_growth);
    for (const double ratio : measured_costs.verify_costs) std::fprintf(stderr, " %.2f", ratio);
    std::fprintf(stderr, "\n");
    if (batched) {
      batch_costs =
          specdec::measure_batch_call_costs(*batch_draft, *batch_target, context, 1, 16, 9)
              .goodput_options();
      std::fprintf(stderr, "measured batch (B = 1) plain growth %.5f\n", batch_costs.plain_growth);
    }
    reset();
  }
  const std::vector<std::string> lines = read_prompts(o.prompts_file);
  for (std::size_t p = o.first; p < std::min(lines.size(), o.first + o.count); ++p) {
    const std::vector<token_t> prompt = prompt_tokens(lines[p]);
    for (const float temperature : o.temperatures) {
      specdec::GenerationConfig base;
      base.max_new_tokens = o.tokens;
      base.sampling.temperature = temperature;
      base.seed = p;
      base.max_context = std::min(target.max_context(), draft.max_context());
      base.logprobs = false;
      for (const std::string& setting : o.settings) {
        specdec::GenerationConfig config = base;
        // batch-X: setting X through the batched path (its config parsed from X below).
        const bool batch = setting.starts_with("batch-");
        const std::string_view kind = std::string_view(setting).substr(batch ? 6 : 0);
        const auto run_batched = [&]() -> specdec::GenerationResult {
          if (kind == "plain") {
            if (!batch_plain) {
              batch_plain = std::make_unique<BatchedPlain>(
                  *batch_target, specdec::ModelProposer(*batch_draft), specdec::NeverDraft{});
            }
            return decode_alone(*batch_plain, prompt, config);
          }
          auto& decoder = batch_decoders[setting];
          if (!decoder) {
            specdec::BatchGoodputOptions costs = batch_costs;  // only goodput-measured parses
            if (kind.ends_with("-nogrowth")) costs.plain_growth = 0;
            decoder = std::make_unique<BatchedSpeculative>(
                *batch_target, specdec::ModelProposer(*batch_draft),
                specdec::ConfiguredDraftLength{}, specdec::ConfiguredVerifier{}, std::move(costs));
          }
          return decode_alone(*decoder, prompt, config);
        };
        const auto run_speculative = [&]() -> specdec::GenerationResult {
          if (batch) return run_batched();
          if (setting == "ngram") return lookup.generate(prompt, config);
          if (setting.starts_with("textrs")) return by_text_rs->generate(prompt, config);
          if (setting.starts_with("text")) return by_text->generate(prompt, config);
          if (setting.starts_with("map")) return by_map->generate(prompt, config);
          if (setting == "ngram-draft") return lookup_then_draft.generate(prompt, config);
          if (setting.starts_with("goodput")) {  // a decoder of its own: nothing learnt carries
            auto& decoder = goodput_decoders[setting];  // over from another setting
            if (!decoder) decoder = std::make_unique<Speculative>(draft, target);
            return decoder->generate(prompt, config);
          }
          return speculative.generate(prompt, config);
        };
        if (setting == "llama" || setting == "plain") {
          reset();
          const auto result = setting == "llama" ? llama_loop(target, prompt, config)
                                                 : plain.generate(prompt, config);
          std::printf(
              "{\"prompt\": %zu, \"temperature\": %g, \"setting\": \"%s\", \"tokens\": "
              "%zu, \"seconds\": %.6g}\n",
              p, static_cast<double>(temperature), setting.c_str(), result.tokens.size(),
              result.stats.total_seconds);
          continue;
        }
        if (!batch && (setting.starts_with("text") || setting.starts_with("map"))) {
          const bool text = setting.starts_with("text");
          const bool rejection = setting.starts_with("textrs");
          if (text ? !by_text : !by_map) {
            throw std::invalid_argument("setting '" + setting +
                                        "' needs --text-draft (sharing tokens with the target, "
                                        "for map)");
          }
          if (rejection && !by_text_rs) {
            throw std::invalid_argument("setting '" + setting +
                                        "' needs a target of one token per byte");
          }
          std::string_view rest = std::string_view(setting).substr(rejection ? 6 : text ? 4 : 3);
          if (rest.starts_with("block")) {
            config.verifier = specdec::VerifierKind::block;
            rest.remove_prefix(5);
          } else if (rest.starts_with("K")) {
            rest.remove_prefix(1);
          } else {
            throw std::invalid_argument("unknown setting '" + setting + "'");
          }
          config.draft_length = number<std::size_t>(rest);
        } else if (batch && kind == "plain") {
          // NeverDraft: nothing to configure
        } else if (kind.starts_with("K")) {
          config.draft_length = number<std::size_t>(kind.substr(1));
        } else if (kind.starts_with("block")) {
          config.draft_length = number<std::size_t>(kind.substr(5));
          config.verifier = specdec::VerifierKind::block;
        } else if (kind.starts_with("goodput")) {
          config.draft_length = 16;
          config.draft_length_policy.kind = specdec::DraftLengthKind::goodput;
          // goodput[-measured|-never][-block][-correct|-nocorrect][-noguard][-nogrowth]
          std::string_view rest = kind.substr(7);
          const auto take = [&](std::string_view part) {
            if (!rest.starts_with(part)) return false;
            rest.remove_prefix(part.size());
            return true;
          };
          if (take("-measured")) config.draft_length_policy.goodput = measured_costs;
          if (take("-never")) {  // a cost model under which drafting never pays: plain rounds
            config.draft_length_policy.goodput.draft_token_cost = 1e3;
            config.draft_length_policy.goodput.verify_row_cost = 1e3;
          }
          if (take("-block")) config.verifier = specdec::VerifierKind::block;
          if (take("-correct")) config.draft_length_policy.goodput.correct_costs = true;
          if (take("-nocorrect")) config.draft_length_policy.goodput.correct_costs = false;
          if (take("-noguard")) config.draft_length_policy.goodput.plain_guard = false;
          if (take("-nogrowth")) config.draft_length_policy.goodput.plain_growth = 0;
          if (!rest.empty() || (batch && !kind.starts_with("goodput-measured"))) {
            throw std::invalid_argument("unknown setting '" + setting + "'");
          }
        } else if (!batch && (setting == "ngram" || setting == "ngram-draft")) {
          config.draft_length = 8;
        } else {
          throw std::invalid_argument("unknown setting '" + setting + "'");
        }
        specdec::GenerationResult fast, slow;
        const bool speculative_first = p % 2 == 0;  // alternate the order by prompt
        for (int side = 0; side < 2; ++side) {
          reset();
          if ((side == 0) == speculative_first) {
            fast = run_speculative();
          } else {
            slow = plain.generate(prompt, config);
          }
        }
        const auto& s = fast.stats;
        std::string lengths;  // rounds per draft length: where an adaptive policy settled
        for (const std::size_t rounds : s.draft_length_histogram()) {
          lengths += (lengths.empty() ? "" : ", ") + std::to_string(rounds);
        }
        std::printf(
            "{\"prompt\": %zu, \"temperature\": %g, \"setting\": \"%s\", \"tokens\": %zu, "
            "\"seconds\": %.6g, \"plain_seconds\": %.6g, \"speedup\": %.5g, \"rounds\": %zu, "
            "\"tokens_per_round\": %.4g, \"draft_seconds\": %.6g, \"target_seconds\": %.6g, "
            "\"library_seconds\": %.6g, \"verify_cost\": %.4g, \"draft_lengths\": [%s], "
            "\"drafted\": %zu, \"accepted\": %zu, \"draft_calls\": %zu, \"identical\": %s}\n",
            p, static_cast<double>(temperature), setting.c_str(), fast.tokens.size(),
            s.total_seconds, slow.stats.total_seconds,
            slow.stats.total_seconds / s.total_seconds * static_cast<double>(fast.tokens.size()) /
                static_cast<double>(slow.tokens.size()),
            s.rounds, s.tokens_per_round(), s.draft_seconds, s.target_seconds, s.library_seconds,
            (s.target_seconds / static_cast<double>(s.target_calls)) /
                (slow.stats.target_seconds / static_cast<double>(slow.stats.target_calls)),
            lengths.c_str(), s.drafted, s.accepted, s.draft_calls,
            fast.tokens == slow.tokens ? "true" : "false");
      }
    }
    std::fflush(stdout);
  }
  return 0;
} catch (const std::exception& error) {
  std::fprintf(stderr, "llama_cpp_speedup: %s\n", error.what());
  return 1;
}

#pragma once
/// \file
/// \brief What the example CLIs' batch modes share (`specdec-demo --batch B`,
/// `specdec-llama --parallel B`): one timed run of a BatchedDecoder over a set of prompts, its
/// totals, and the context the batch's call costs are measured on.

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <exception>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <specdec/batch.hpp>
#include <specdec/specdec.hpp>

namespace specdec::examples {

/// The median of `values` (0 when empty).
inline double median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

/// Rows per call (0 with no call).
inline double per_call(std::size_t rows, std::size_t calls) {
  return calls == 0 ? 0 : static_cast<double>(rows) / static_cast<double>(calls);
}

/// The sequences of a batch, by index: each one's prompt as given, as tokens, and its settings.
struct BatchPrompts {
  std::vector<std::string> texts;
  std::vector<std::vector<token_t>> tokens;
  std::vector<GenerationConfig> configs;
  [[nodiscard]] std::size_t size() const noexcept { return tokens.size(); }
};

/// The non-empty lines of a --prompts file (one prompt per line); an error if it cannot be read
/// or has none.
inline std::vector<std::string> read_prompt_lines(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read --prompts file '" + path + "'");
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) lines.push_back(line);
  }
  if (lines.empty()) {
    throw std::runtime_error("--prompts file '" + path +
                             "' has no prompt; expected one prompt per line");
  }
  return lines;
}

/// A batched run: every sequence's result by index, the batch's engine calls, the wall time.
struct BatchRun {
  std::vector<GenerationResult> results;
  BatchStats stats;
  double seconds = 0;

  [[nodiscard]] std::size_t tokens() const {
    std::size_t total = 0;
    for (const auto& result : results) total += result.stats.emitted;
    return total;
  }
  [[nodiscard]] double tokens_per_second() const {
    return seconds > 0 ? static_cast<double>(tokens()) / seconds : 0;
  }
  /// Per-sequence latency: the median over the sequences of the milliseconds per token each
  /// waited from joining the batch to leaving it (its GenerationResult's total_seconds over its
  /// tokens; 0 without a token).
  [[nodiscard]] double median_ms_per_token() const {
    std::vector<double> ms;
    for (const auto& result : results) {
      if (const double rate = result.stats.tokens_per_second(); rate > 0) ms.push_back(1e3 / rate);
    }
    return median(std::move(ms));
  }
  /// The sequences' statistics pooled: acceptance and the draft-length histogram of all rounds.
  [[nodiscard]] DecodeStats pooled() const {
    DecodeStats all;
    for (const auto& result : results) all += result.stats;
    return all;
  }
  /// How many sequences emitted other tokens than in `other` (a run of the same prompts).
  [[nodiscard]] std::size_t differing_from(const BatchRun& other) const {
    std::size_t differing = 0;
    for (std::size_t i = 0; i < results.size(); ++i) {
      if (i >= other.results.size() || results[i].tokens != other.results[i].tokens) ++differing;
    }
    return differing;
  }
};

/// What `after` counted since `before` (a decoder's statistics at two times).
inline BatchStats since(const BatchStats& after, const BatchStats& before) {
  BatchStats run = after;
  run.steps -= before.steps;
  run.target_calls -= before.target_calls;
  run.target_rows -= before.target_rows;
  run.draft_calls -= before.draft_calls;
  run.draft_rows -= before.draft_rows;
  run.rounds -= before.rounds;
  run.tokens -= before.tokens;
  run.sequences_added -= before.sequences_added;
  run.sequences_finished -= before.sequences_finished;
  run.target_seconds -= before.target_seconds;
  run.draft_seconds -= before.draft_seconds;
  return run;
}

/// Adds every sequence of `prompts` (id = index) before the first step, runs `decoder` until
/// all have finished, and times it; a sequence's error is rethrown.
template <class Decoder>
BatchRun run_batch(Decoder& decoder, const BatchPrompts& prompts) {
  BatchRun run;
  run.results.resize(prompts.size());
  const BatchStats before = decoder.stats();  // a decoder in service counts from its start
  const auto start = std::chrono::steady_clock::now();
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    decoder.add(i, prompts.tokens[i], prompts.configs[i]);
  }
  for (FinishedSequence& done : decoder.run()) {
    if (done.error) std::rethrow_exception(done.error);
    run.results[done.id] = std::move(done.result);
  }
  run.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  run.stats = since(decoder.stats(), before);
  return run;
}

/// The context measure_batch_call_costs times the batch's calls on: the prompts one after
/// another, repeated up to `size` tokens (the text the batch will read, not a made-up one).
inline std::vector<token_t> cost_context(const BatchPrompts& prompts, std::size_t size) {
  std::vector<token_t> context;
  while (context.size() < size) {
    const std::size_t before = context.size();
    for (const auto& prompt : prompts.tokens) {
      context.insert(context.end(), prompt.begin(), prompt.end());
    }
    if (context.size() == before) break;  // no prompt has a token
  }
  context.resize(size);
  return context;
}

/// The draft-length histogram as "0: 3, 4: 120" (length: rounds, for the lengths that
/// occurred), or as a JSON array of every length's rounds ("3, 0, 0, 0, 120") with `as_json`.
inline std::string histogram_text(const std::vector<std::size_t>& histogram, bool as_json = false) {
  std::string text;
  for (std::size_t n = 0; n < histogram.size(); ++n) {
    if (histogram[n] == 0 && !as_json) continue;
    text += text.empty() ? "" : ", ";
    if (!as_json) text += std::to_string(n) + ": ";
    text += std::to_string(histogram[n]);
  }
  return text;
}

}  // namespace specdec::examples

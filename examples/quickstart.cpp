// quickstart: speculative decoding with the shipped King James Bible models.
//
// A 2-layer draft GPT proposes K tokens at a time; the 6-layer target checks all K in a single
// call and keeps the longest prefix it agrees with, plus one token of its own. With greedy
// decoding the output is exactly what the target alone would write, only faster.

#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include <specdec/specdec.hpp>

#include "gpt/gpt_model.hpp"  // the example model: a KV-cached GPT over bytes (vocabulary 256)

int main() try {
  using specdec::examples::GptModel;
  const std::string models = SPECDEC_MODELS_DIR;  // set by examples/CMakeLists.txt
  GptModel target = GptModel::from_file(models + "/kjv-target.spdc");
  GptModel draft = GptModel::from_file(models + "/kjv-draft.spdc");

  // Tokens are bytes. Every training verse follows a newline, so "\n" plays the role of BOS.
  const std::string prompt = "Psalms 23:1 ";
  std::vector<specdec::token_t> tokens{'\n'};
  for (const unsigned char byte : prompt) tokens.push_back(byte);

  specdec::GenerationConfig config;
  config.draft_length = 4;  // K: tokens drafted per target call
  config.max_new_tokens = 200;
  config.sampling.temperature = 0;  // greedy, so the two outputs below must be identical

  // Warm-up, outside both timings: a model's first calls pay page faults and cold caches, and
  // whichever run came first would pay them. Both models, then forget the cached prompt.
  (void)target(tokens, 1);
  (void)draft(tokens);
  target.reset();
  draft.reset();

  specdec::SpeculativeDecoder speculative(draft, target);  // holds references to both models
  specdec::AutoregressiveDecoder plain(target);            // the baseline: one call per token
  const specdec::GenerationResult fast = speculative.generate(tokens, config);
  target.reset();  // forget the cached prompt, so plain decoding pays for it too
  const specdec::GenerationResult slow = plain.generate(tokens, config);

  const std::string text(fast.tokens.begin(), fast.tokens.end());
  std::printf("%s%s\n\n", prompt.c_str(), text.c_str());

  const specdec::DecodeStats& stats = fast.stats;
  const double fast_rate = static_cast<double>(stats.emitted) / stats.total_seconds;
  const double slow_rate = static_cast<double>(slow.stats.emitted) / slow.stats.total_seconds;
  std::printf("speculative (K = %zu): %6.1f tokens/s\n", config.draft_length, fast_rate);
  std::printf("plain decoding:        %6.1f tokens/s\n", slow_rate);
  std::printf("measured speedup:      %6.2fx\n", fast_rate / slow_rate);
  // The geometric model (Leviathan et al.) counts target calls: right for a GPU target, whose
  // K + 1-row call costs about a one-row call. This CPU target's costs T(K+1) / T(1) one-row
  // calls, measured here from the two runs' average target call.
  const double verify_cost =
      (stats.target_seconds / static_cast<double>(stats.target_calls)) /
      (slow.stats.target_seconds / static_cast<double>(slow.stats.target_calls));
  std::printf("predicted speedup:     %6.2fx  (this target's measured T(%zu)/T(1) = %.2f)\n",
              stats.predicted_speedup(config.draft_length, verify_cost), config.draft_length + 1,
              verify_cost);
  std::printf(
      "  with a flat target cost: %.2fx  (a target call costing the same for any row "
      "count, as on a GPU)\n",
      stats.predicted_speedup(config.draft_length));
  std::printf(
      "acceptance rate %.2f, alpha_hat %.2f, %.2f tokens per target call, "
      "draft/target cost c = %.3f\n",
      stats.acceptance_rate(), stats.alpha_hat(), stats.tokens_per_round(), stats.cost_ratio());
  std::printf("same text as plain decoding: %s\n", fast.tokens == slow.tokens ? "yes" : "NO");
  return fast.tokens == slow.tokens ? 0 : 1;
} catch (const std::exception& error) {
  std::fprintf(stderr, "quickstart: %s\n", error.what());
  return 1;
}

#pragma once
/// \file
/// \brief The settings and results of one generation: GenerationConfig (budget, stop tokens,
/// sampling, seed, verifier, draft-length policy, context limit), FinishReason,
/// GenerationResult, and the validation of a request (config and prompt) every decoder applies.

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <type_traits>
#include <vector>

#include "specdec/detail/error.hpp"
#include "specdec/draft_length/options.hpp"
#include "specdec/enum_names.hpp"
#include "specdec/sampling/params.hpp"
#include "specdec/stats.hpp"
#include "specdec/types.hpp"

namespace specdec {

/// \brief The built-in verifiers GenerationConfig can select (sampled decoding; greedy decoding
/// always verifies by argmax matching).
enum class VerifierKind {
  token,  ///< token-level speculative sampling (TokenVerifier)
  block,  ///< block verification (BlockVerifier): never fewer accepted tokens in expectation
};

/// \brief VerifierKind's names (enum_names.hpp): "token", "block".
template <>
struct EnumNames<VerifierKind> {
  static constexpr std::string_view what = "verifier";
  static constexpr std::array<EnumName<VerifierKind>, 2> names{
      {{VerifierKind::token, "token"}, {VerifierKind::block, "block"}}};
};

/// \brief Everything one generate() call needs besides the prompt.
struct GenerationConfig {
  /// The largest draft length a round may use: min(draft_length, max_new_tokens - 1) must not
  /// exceed it. A round holds one row of V draft weights per drafted token (K V floats: 4096
  /// rows of a 32k vocabulary are 512 MB), and acceptance falls geometrically with the
  /// position, so nothing useful lies beyond; a larger value is almost surely a mistake.
  static constexpr std::size_t kMaxDraftLength = 4096;

  /// K >= 1, the most tokens drafted per round; a round drafts at most min(K, max_new_tokens -
  /// 1) (the budget), and that must be <= kMaxDraftLength. Buffers are sized by that usable
  /// length, so a huge K with a small budget costs O(budget). AutoregressiveDecoder ignores it.
  /// A proposer that states its own round size (`round_limit()`: TreeProposer, its shape's
  /// nodes) is used with that in place of K; a FallbackProposer states none (K caps both).
  std::size_t draft_length = 4;
  std::size_t max_new_tokens = 128;  ///< hard budget, never exceeded; 0 returns no tokens
  std::vector<token_t> stop_tokens;  ///< generation ends after emitting one (it is included)
  SamplingParams sampling;           ///< temperature, top_k, top_p, min_p, logits_processor
  std::uint64_t seed = 0;            ///< same seed, same models => same tokens
  bool logprobs = true;              ///< compute the target log-prob of each emitted token
  VerifierKind verifier = VerifierKind::token;  ///< SpeculativeDecoder's verifier (T > 0)
  /// SpeculativeDecoder's draft-length policy (default: draft_length tokens every round);
  /// draft_length caps every policy.
  DraftLengthPolicyOptions draft_length_policy{};
  /// The models' maximum context (tokens per call), 0 = unlimited. No model is called with a
  /// longer context: a round drafts at most max_context - committed tokens (its target call
  /// sees committed + drafted), and generation ends with FinishReason::context_limit when
  /// the committed sequence (prompt + emitted) exceeds it, i.e. holds max_context + 1 tokens
  /// (the last token is never fed back). A prompt longer than this is an invalid_argument.
  std::size_t max_context = 0;

  /// \brief Throws std::invalid_argument naming the first bad field.
  void validate() const {
    if (draft_length == 0) {
      detail::throw_invalid_argument(
          "draft_length = 0; expected K >= 1 (tokens drafted per round)");
    }
    if (usable_draft_length() > kMaxDraftLength) {
      detail::throw_invalid_argument(
          "draft_length = ", draft_length, " with max_new_tokens = ", max_new_tokens,
          " lets a round draft ", usable_draft_length(),
          " tokens; expected min(K, max_new_tokens - 1) <= ", kMaxDraftLength,
          " (GenerationConfig::kMaxDraftLength)");
    }
    if (verifier != VerifierKind::token && verifier != VerifierKind::block) {
      detail::throw_invalid_argument(
          "verifier = ", static_cast<std::underlying_type_t<VerifierKind>>(verifier),
          "; expected a VerifierKind: token (0) or block (1)");
    }
    draft_length_policy.validate();
    sampling.validate();
  }

  /// \brief min(draft_length, max_new_tokens - 1): the most tokens a round can draft (a round
  /// emits accepted + 1 tokens within the budget). 0 when max_new_tokens is 0.
  [[nodiscard]] std::size_t usable_draft_length() const noexcept {
    return max_new_tokens == 0 ? 0 : std::min(draft_length, max_new_tokens - 1);
  }
};

/// \brief Why generation ended.
enum class FinishReason {
  length,      ///< max_new_tokens reached
  stop_token,  ///< a stop token was emitted (it is the last token)
  callback,    ///< the chunk callback returned false while generation would have continued
  /// the next model call would exceed GenerationConfig::max_context: the prompt plus the
  /// emitted tokens hold max_context + 1 tokens
  context_limit,
  cancelled,  ///< BatchedDecoder::cancel() ended the sequence (batch/decoder.hpp)
};

/// \brief FinishReason's names (enum_names.hpp): the enumerators' own.
template <>
struct EnumNames<FinishReason> {
  static constexpr std::string_view what = "finish reason";
  static constexpr std::array<EnumName<FinishReason>, 5> names{
      {{FinishReason::length, "length"},
       {FinishReason::stop_token, "stop_token"},
       {FinishReason::callback, "callback"},
       {FinishReason::context_limit, "context_limit"},
       {FinishReason::cancelled, "cancelled"}}};
};

/// \brief The result of one generate() call.
struct GenerationResult {
  std::vector<token_t> tokens;  ///< new tokens only (not the prompt)
  /// Per emitted token, log p(token) under the processed target distribution; for greedy
  /// (T = 0) the log-softmax of the processor-applied target logits at T = 1. Empty if
  /// !config.logprobs.
  std::vector<float> logprobs;
  FinishReason finish_reason = FinishReason::length;
  DecodeStats stats;
};

namespace detail {

/// Result vectors are reserved up to this many tokens: a budget used as "unlimited"
/// (max_new_tokens = SIZE_MAX with stop tokens) must not reserve SIZE_MAX.
inline constexpr std::size_t kMaxReservedTokens = std::size_t{1} << 20;

inline bool is_stop_token(std::span<const token_t> stop_tokens, token_t token) noexcept {
  return std::find(stop_tokens.begin(), stop_tokens.end(), token) != stop_tokens.end();
}

inline void validate_prompt(std::span<const token_t> prompt) {
  if (prompt.empty()) {
    throw_invalid_argument(
        "prompt is empty; expected at least one token (e.g. BOS) for the "
        "models to condition on");
  }
  for (std::size_t i = 0; i < prompt.size(); ++i) {
    if (prompt[i] < 0) {
      throw_invalid_argument("prompt token ", prompt[i], " at index ", i,
                             " is negative; expected a token id in [0, V)");
    }
  }
}

/// The prompt against the vocabulary size, once per generate(), as soon as the first model call
/// has established V (negative ids were rejected up front by validate_prompt).
inline void check_prompt_vocabulary(std::span<const token_t> prompt, std::size_t vocab_size) {
  for (std::size_t i = 0; i < prompt.size(); ++i) {
    if (static_cast<std::size_t>(prompt[i]) >= vocab_size) {
      throw_invalid_argument("prompt token ", prompt[i], " at index ", i,
                             " is out of range; expected a token id in [0, ", vocab_size,
                             ") (V = ", vocab_size, ", the models' vocabulary size)");
    }
  }
}

/// A prompt the models can take: no longer than config.max_context (0 = unlimited).
inline void validate_prompt_length(std::span<const token_t> prompt,
                                   const GenerationConfig& config) {
  if (config.max_context != 0 && prompt.size() > config.max_context) {
    throw_invalid_argument("prompt has ", prompt.size(),
                           " tokens, more than max_context = ", config.max_context,
                           "; expected a prompt the models can take (at most max_context tokens)");
  }
}

/// Whether the committed sequence has outgrown the models' context: the next call would exceed
/// config.max_context.
[[nodiscard]] inline bool context_exhausted(std::size_t committed,
                                            const GenerationConfig& config) noexcept {
  return config.max_context != 0 && committed > config.max_context;
}

/// The limit of a round that starts with `emitted` tokens emitted and `committed` in the context:
/// budget (accepted + 1 <= remaining) and context (the target call sees committed + drafted
/// tokens, at most max_context; committed <= max_context, or generation has ended).
[[nodiscard]] inline std::size_t round_limit(const GenerationConfig& config,
                                             std::size_t usable_draft_length, std::size_t emitted,
                                             std::size_t committed) noexcept {
  const std::size_t remaining = config.max_new_tokens - emitted;
  std::size_t limit = std::min(usable_draft_length, remaining - 1);
  if (config.max_context != 0) limit = std::min(limit, config.max_context - committed);
  return limit;
}

/// After a round appended its chunk to result.tokens from `chunk_start` on: the chunk cut after
/// a stop token, stats.emitted, and whether generation ends (stop token, budget, context limit
/// given the `committed` length), with its finish_reason. The callback is the caller's.
[[nodiscard]] inline bool end_chunk(GenerationResult& result, std::size_t chunk_start,
                                    const GenerationConfig& config, std::size_t committed) {
  bool stopped = false;
  for (std::size_t j = chunk_start; j < result.tokens.size(); ++j) {
    if (is_stop_token(config.stop_tokens, result.tokens[j])) {
      result.tokens.resize(j + 1);
      if (config.logprobs) result.logprobs.resize(j + 1);
      stopped = true;
      break;
    }
  }
  result.stats.emitted = result.tokens.size();
  if (stopped) {
    result.finish_reason = FinishReason::stop_token;
    return true;
  }
  if (result.stats.emitted == config.max_new_tokens) {
    result.finish_reason = FinishReason::length;
    return true;
  }
  if (context_exhausted(committed, config)) {
    result.finish_reason = FinishReason::context_limit;
    return true;
  }
  return false;
}

inline void validate_request(std::span<const token_t> prompt, const GenerationConfig& config) {
  config.validate();
  validate_prompt(prompt);
  validate_prompt_length(prompt, config);
}

}  // namespace detail

}  // namespace specdec

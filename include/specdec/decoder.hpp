#pragma once
/// \file
/// \brief SpeculativeDecoder (draft K tokens, verify them with one target call) and
/// AutoregressiveDecoder (one target call per token: the baseline).
///
/// StrategyDecoder runs the speculative round of round.hpp (propose, check, one target call,
/// verify, commit) until the budget, a stop token, the context limit or the callback ends the
/// generation; the round's limit is min(K, remaining budget - 1, max_context - committed), so
/// the budget is exact. Coins per round (sampled only): one per sampled draft token, n
/// acceptance coins, 1 final. The settings and results are in generation.hpp.
///
/// Thread safety: a decoder and its models are used by one thread at a time.

#include <algorithm>
#include <chrono>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include <Eigen/Core>

#include "specdec/coins.hpp"
#include "specdec/detail/error.hpp"
#include "specdec/detail/model_traits.hpp"
#include "specdec/detail/timer.hpp"
#include "specdec/draft_length/configured.hpp"
#include "specdec/draft_length/static.hpp"
#include "specdec/generation.hpp"
#include "specdec/model.hpp"
#include "specdec/proposal.hpp"
#include "specdec/proposers/model.hpp"
#include "specdec/requirements.hpp"
#include "specdec/rng.hpp"
#include "specdec/round.hpp"
#include "specdec/sampling.hpp"
#include "specdec/stats.hpp"
#include "specdec/strategies.hpp"
#include "specdec/target_rows.hpp"
#include "specdec/tree.hpp"
#include "specdec/types.hpp"
#include "specdec/verifiers/configured.hpp"

namespace specdec {

namespace detail {

static_assert(TreeShape::kMaxNodes == GenerationConfig::kMaxDraftLength);

/// The most tokens a round of `proposer` drafts under `config`: min(K, max_new_tokens - 1), K
/// the proposer's round_limit() if it states one (TreeProposer: its shape's node count, so a
/// tree is drafted whole), else config.draft_length.
template <class P>
[[nodiscard]] std::size_t usable_draft_length(const GenerationConfig& config, const P& proposer) {
  if constexpr (requires {
                  { proposer.round_limit() } -> std::convertible_to<std::size_t>;
                }) {
    const std::size_t stated = proposer.round_limit();
    if (stated == 0 || stated > GenerationConfig::kMaxDraftLength) {
      throw_invalid_argument("proposer's round_limit() = ", stated, "; expected 1..",
                             GenerationConfig::kMaxDraftLength,
                             " tokens (nodes) per round (GenerationConfig::kMaxDraftLength)");
    }
    return config.max_new_tokens == 0 ? 0 : std::min(stated, config.max_new_tokens - 1);
  } else {
    return config.usable_draft_length();
  }
}

}  // namespace detail

/// \brief Speculative decoding from three strategies: a Proposer (what is drafted), a
/// DraftLengthPolicy (how many tokens), a Verifier (how they are verified); see strategies.hpp.
/// SpeculativeDecoder is this with a draft model, a static K and the configured verifier.
///
/// The decoder holds the target by reference (not owned; it must outlive the decoder), owns its
/// strategies, and keeps reusable buffers. Every generate() call starts from scratch (its own
/// Rng, statistics, context), so after an exception the next call works.
template <class Target, class Proposer, class Policy, class Verifier>
class StrategyDecoder {
  static_assert(detail::diagnosed<detail::TargetModelRequirements<Target>>);
  static_assert(detail::TreeTargetRequirements<Target>::satisfied);  // score_tree, if any
  static_assert(detail::diagnosed<detail::StrategyRequirements<Proposer, Policy, Verifier>>);

 public:
  StrategyDecoder(Target& target, Proposer proposer, Policy policy = {}, Verifier verifier = {})
      : target_(&target),
        proposer_(std::move(proposer)),
        policy_(std::move(policy)),
        verifier_(std::move(verifier)) {}

  /// \brief Generates up to config.max_new_tokens tokens after `prompt`.
  /// \throws std::invalid_argument for a bad config, an empty prompt or a prompt token outside
  /// [0, V) (negative ids before any model call, ids >= V after the first), a proposal or a
  /// verdict that breaks its strategy's contract (a proposal before its target call, see
  /// detail::check_proposal); std::domain_error for bad model output; anything a model or
  /// strategy throws, unchanged.
  GenerationResult generate(std::span<const token_t> prompt, const GenerationConfig& config) {
    return generate(prompt, config, [](std::span<const token_t>) { return true; });
  }

  /// \brief As generate(prompt, config), calling `on_chunk(std::span<const token_t>)` with each
  /// round's committed tokens (after stop-token truncation; valid during the call only).
  /// Returning false stops generation (finish_reason = callback, unless it had ended anyway).
  template <class OnChunk>
  GenerationResult generate(std::span<const token_t> prompt, const GenerationConfig& config,
                            OnChunk&& on_chunk) {
    static_assert(detail::diagnosed<detail::ChunkCallbackRequirements<OnChunk>>);
    if constexpr (TargetModel<Target>) {
      return run(prompt, config, on_chunk);
    } else {
      return {};  // unreachable: a static_assert above already failed
    }
  }

  Proposer& proposer() noexcept { return proposer_; }
  Policy& policy() noexcept { return policy_; }
  Verifier& verifier() noexcept { return verifier_; }

 private:
  template <class Strategy>
  static void begin(Strategy& strategy, const GenerationConfig& config) {
    if constexpr (requires { strategy.begin(config); }) strategy.begin(config);
  }

  template <class OnChunk>
  GenerationResult run(std::span<const token_t> prompt, const GenerationConfig& config,
                       OnChunk& on_chunk) {
    detail::validate_request(prompt, config);
    const auto start = std::chrono::steady_clock::now();
    const std::size_t reserve = std::min(config.max_new_tokens, detail::kMaxReservedTokens);
    begin(proposer_, config);
    begin(policy_, config);
    begin(verifier_, config);

    GenerationResult result;
    result.tokens.reserve(reserve);
    if (config.logprobs) result.logprobs.reserve(reserve);
    DecodeStats& stats = result.stats;
    // A proposer that states its round's size (a tree's nodes) is drafted whole.
    const std::size_t usable_draft_length = detail::usable_draft_length(config, proposer_);
    prepare_round_statistics(stats, usable_draft_length);

    Rng rng(config.seed);
    DraftCoins draft_coins(rng);
    std::vector<token_t>& context = context_;
    context.clear();
    context.reserve(prompt.size() + reserve + usable_draft_length + 1);
    context.assign(prompt.begin(), prompt.end());
    detail::ensure_size(acceptance_coins_, usable_draft_length);
    buffers_.prepare(usable_draft_length, context.capacity());
    if constexpr (requires { verifier_.reserve_nodes(usable_draft_length); }) {
      verifier_.reserve_nodes(usable_draft_length);
    }
    std::size_t vocab_size = 0;   // learned from the first model call of this generate()
    bool prompt_checked = false;  // against vocab_size, once it is known
    const auto check_prompt_once = [&] {
      if (prompt_checked) return;
      detail::check_prompt_vocabulary(prompt, vocab_size);
      prompt_checked = true;
    };
    // The one target call of a round: a chain to the target itself, a tree to its score_tree
    // (tree.hpp; only a target that has it).
    const auto score = [&](std::span<const token_t> tokens, std::size_t committed,
                           const Proposal<float>& proposal) -> LogitsRows<float> {
      if (!proposal.is_chain()) {
        return tree_call_.score(*target_, stats.target_seconds, tokens.first(committed), proposal);
      }
      const std::size_t rows = proposal.size() + 1;
      return detail::as_target_rows(chain_result_.hold([&]() -> decltype(auto) {
        return detail::timed_call(stats.target_seconds,
                                  [&]() -> decltype(auto) { return (*target_)(tokens, rows); });
      }),
                                    rows);
    };
    const auto verification_coins = [&](std::size_t n) {
      for (std::size_t i = 0; i < n; ++i) acceptance_coins_[i] = rng.uniform01();
      return VerificationCoins(std::span<const double>(acceptance_coins_.data(), n),
                               rng.uniform01());
    };

    bool proposer_sized = false;  // reserve_proposer, once V is known
    bool finished = config.max_new_tokens == 0;
    while (!finished) {
      const std::size_t limit =
          detail::round_limit(config, usable_draft_length, stats.emitted, context.size());
      const std::size_t chunk_start = result.tokens.size();
      run_round(proposer_, policy_, verifier_, draft_coins,
                RoundState{context, limit, config.sampling, config.logprobs, vocab_size, stats},
                score, verification_coins, check_prompt_once, buffers_, result.tokens,
                result.logprobs);
      // Between rounds (no proposal views the proposer's buffers): sized for the longest
      // round once, as soon as V is known.
      if (!proposer_sized && vocab_size != 0) {
        detail::reserve_proposer(proposer_, vocab_size, usable_draft_length, config.sampling);
        proposer_sized = true;
      }

      // ---- emit up to a stop token; budget, context limit, callback ----------------------
      finished = detail::end_chunk(result, chunk_start, config, context.size());
      const std::span<const token_t> chunk =
          std::span<const token_t>(result.tokens).subspan(chunk_start);
      if (!on_chunk(chunk) && !finished) {
        result.finish_reason = FinishReason::callback;
        finished = true;
      }
    }

    stats.total_seconds = detail::seconds_since(start);
    stats.library_seconds = stats.total_seconds - stats.draft_seconds - stats.target_seconds;
    return result;
  }

  Target* target_;
  Proposer proposer_;
  Policy policy_;
  Verifier verifier_;
  std::vector<token_t> context_;          // (prompt + budget + K) committed + speculative
  std::vector<double> acceptance_coins_;  // (K) usable draft length
  RoundBuffers<float> buffers_;           // the round's working memory
  detail::HeldResult<typename detail::chain_call_result<Target>::type>
      chain_result_;                    // the last chain call's rows, until the next call
  detail::TreeCall<Target> tree_call_;  // score_tree, for targets that have it
};

/// \brief Speculative decoding with a draft model and a target model: the two-model face of
/// StrategyDecoder (ModelProposer, ConfiguredDraftLength, ConfiguredVerifier).
///
/// \tparam Draft  a DraftModel: `draft(std::span<const token_t>)` -> one row of V float logits
/// \tparam Target a TargetModel: `target(std::span<const token_t>, std::size_t n)` -> n rows
///
/// Holds references to both models (not owned; they must outlive the decoder).
template <class Draft, class Target>
class SpeculativeDecoder : public StrategyDecoder<Target, ModelProposer<Draft>,
                                                  ConfiguredDraftLength, ConfiguredVerifier> {
  static_assert(detail::diagnosed<detail::DraftModelRequirements<Draft>>);

  using Base =
      StrategyDecoder<Target, ModelProposer<Draft>, ConfiguredDraftLength, ConfiguredVerifier>;

 public:
  /// \brief Binds the two models by reference (not owned; they must outlive the decoder).
  SpeculativeDecoder(Draft& draft, Target& target) : Base(target, ModelProposer<Draft>(draft)) {}
};

/// \brief Plain decoding with the target alone: one target(context, 1) call per token, the
/// same SamplingParams, sampler, budget and context limit as SpeculativeDecoder (one coin per
/// token). The baseline
/// against which a speedup is measured. config.draft_length is ignored (not validated).
template <class Target>
class AutoregressiveDecoder {
  static_assert(detail::diagnosed<detail::TargetModelRequirements<Target>>);

 public:
  /// \brief Binds the target model by reference (not owned; it must outlive the decoder).
  explicit AutoregressiveDecoder(Target& target) noexcept : target_(&target) {}

  GenerationResult generate(std::span<const token_t> prompt, const GenerationConfig& config) {
    return generate(prompt, config, [](std::span<const token_t>) { return true; });
  }

  /// \brief As SpeculativeDecoder::generate; each chunk is one token.
  template <class OnChunk>
  GenerationResult generate(std::span<const token_t> prompt, const GenerationConfig& config,
                            OnChunk&& on_chunk) {
    static_assert(detail::diagnosed<detail::ChunkCallbackRequirements<OnChunk>>);
    if constexpr (TargetModel<Target>) {
      return run(prompt, config, on_chunk);
    } else {
      return {};  // unreachable: a static_assert above already failed
    }
  }

 private:
  template <class OnChunk>
  GenerationResult run(std::span<const token_t> prompt, const GenerationConfig& config,
                       OnChunk& on_chunk) {
    // draft_length is meaningless here; validate the rest exactly as the speculative decoder.
    config.sampling.validate();
    detail::validate_prompt(prompt);
    detail::validate_prompt_length(prompt, config);
    const auto start = std::chrono::steady_clock::now();
    const SamplingParams& params = config.sampling;
    const std::size_t reserve = std::min(config.max_new_tokens, detail::kMaxReservedTokens);

    GenerationResult result;
    result.tokens.reserve(reserve);
    if (config.logprobs) result.logprobs.reserve(reserve);
    DecodeStats& stats = result.stats;

    Rng rng(config.seed);
    context_.clear();
    context_.reserve(prompt.size() + reserve);
    context_.assign(prompt.begin(), prompt.end());
    std::size_t vocab_size = 0;

    bool finished = config.max_new_tokens == 0;
    while (!finished) {
      auto&& target_result = detail::timed_call(stats.target_seconds, [&]() -> decltype(auto) {
        return (*target_)(std::span<const token_t>(context_), std::size_t{1});
      });
      ++stats.target_calls;
      const LogitsRows<float> rows = detail::as_target_rows(target_result, 1);
      const bool first_call = vocab_size == 0;
      detail::check_vocab_size(vocab_size, rows.vocab_size(), "target model");
      if (first_call) detail::check_prompt_vocabulary(prompt, vocab_size);
      const std::span<const float> logits =
          apply_logits_processor(params, context_, rows.row(0), processed_);

      token_t token;
      float logprob;
      const std::size_t position = context_.size();
      if (params.greedy()) {
        const auto [best, best_logit] = detail::on_model_row(
            [&] {
              if (!config.logprobs) return std::pair(detail::argmax_checked(logits).first, 0.0f);
              return detail::argmax_and_log_probability(logits);
            },
            "target model logits for position ", position, " (context length ", position, ")");
        token = best;
        logprob = best_logit;
      } else {
        detail::ensure_size(sample_scratch_, vocab_size);
        detail::ensure_size(block_sums_, weight_block_count(vocab_size));
        detail::ensure_size(block_references_, weight_block_count(vocab_size));
        const double coin = rng.uniform01();
        std::tie(token, logprob) = detail::on_model_row(
            [&] {
              const std::size_t blocks = weight_block_count(vocab_size);
              const TokenDistribution<float> p = process_logits(
                  logits, params, filter_scratch_,
                  BlockSumBuffers<float>{std::span<float>(block_sums_.data(), blocks),
                                         std::span<float>(block_references_.data(), blocks)});
              const token_t sampled =
                  sample(p, coin, std::span<float>(sample_scratch_.data(), vocab_size));
              return std::pair(sampled, config.logprobs ? p.log_probability(sampled) : 0.0f);
            },
            "target model logits for position ", position, " (context length ", position, ")");
      }

      ++stats.rounds;
      result.tokens.push_back(token);
      if (config.logprobs) result.logprobs.push_back(logprob);
      stats.emitted = result.tokens.size();
      context_.push_back(token);

      if (detail::is_stop_token(config.stop_tokens, token)) {
        result.finish_reason = FinishReason::stop_token;
        finished = true;
      } else if (stats.emitted == config.max_new_tokens) {
        result.finish_reason = FinishReason::length;
        finished = true;
      } else if (detail::context_exhausted(context_.size(), config)) {
        result.finish_reason = FinishReason::context_limit;
        finished = true;
      }
      if (!on_chunk(std::span<const token_t>(result.tokens).subspan(stats.emitted - 1)) &&
          !finished) {
        result.finish_reason = FinishReason::callback;
        finished = true;
      }
    }

    stats.total_seconds = detail::seconds_since(start);
    stats.library_seconds = stats.total_seconds - stats.target_seconds;
    return result;
  }

  Target* target_;
  std::vector<token_t> context_;  // (prompt + budget) committed tokens
  std::vector<float, Eigen::aligned_allocator<float>> processed_;       // (V) processed row
  std::vector<float, Eigen::aligned_allocator<float>> sample_scratch_;  // (V) sampling weights
  std::vector<float> filter_scratch_;    // (V) top-k / top-p selection
  std::vector<float> block_sums_;        // (B) block sums of the row being sampled, and
  std::vector<float> block_references_;  // (B) their references (one pass per sampled token)
};

}  // namespace specdec

#pragma once
/// \file
/// \brief SpeculativeDecoder (draft K tokens, verify them with one target call) and
/// AutoregressiveDecoder (one target call per token: the baseline).
///
/// Round structure (SpeculativeDecoder):
///   K_eff = min(K, remaining_budget - 1)      so accepted + 1 <= remaining: budget is exact
///   draft:  x_k ~ q_k for k < K_eff, q_k from draft(committed + x_0..x_{k-1})
///   target: one call target(committed + x_0..x_{K_eff-1}, K_eff + 1)
///   verify: verify_stochastic / verify_greedy (see verify.hpp for why it is exact)
///   emit:   x_0..x_{a-1} and next_token, cut after the first stop token
/// Coins per round (stochastic only): K_eff draft coins, K_eff acceptance coins, 1 final coin.
///
/// Thread safety: a decoder and its models are used by one thread at a time.

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include <Eigen/Core>

#include "specdec/detail/error.hpp"
#include "specdec/detail/model_traits.hpp"
#include "specdec/detail/timer.hpp"
#include "specdec/model.hpp"
#include "specdec/rng.hpp"
#include "specdec/sampling.hpp"
#include "specdec/softmax.hpp"
#include "specdec/stats.hpp"
#include "specdec/types.hpp"
#include "specdec/verify.hpp"

namespace specdec {

/// \brief Everything one generate() call needs besides the prompt.
struct GenerationConfig {
  std::size_t draft_length = 4;      ///< K >= 1 (AutoregressiveDecoder ignores it)
  std::size_t max_new_tokens = 128;  ///< hard budget, never exceeded; 0 returns no tokens
  std::vector<token_t> stop_tokens;  ///< generation ends after emitting one (it is included)
  SamplingParams sampling;           ///< temperature, top_k, top_p, min_p, logits_processor
  std::uint64_t seed = 0;            ///< same seed, same models => same tokens
  bool logprobs = true;              ///< compute the target log-prob of each emitted token

  /// \brief Throws std::invalid_argument naming the first bad field.
  void validate() const {
    if (draft_length == 0) {
      detail::throw_invalid_argument(
          "draft_length = 0; expected K >= 1 (tokens drafted per round)");
    }
    sampling.validate();
  }
};

/// \brief Why generation ended.
enum class FinishReason {
  length,      ///< max_new_tokens reached
  stop_token,  ///< a stop token was emitted (it is the last token)
  callback,    ///< the chunk callback returned false while generation would have continued
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
    throw_invalid_argument("prompt is empty; expected at least one token (e.g. BOS) for the "
                           "models to condition on");
  }
}

inline void validate_request(std::span<const token_t> prompt, const GenerationConfig& config) {
  config.validate();
  validate_prompt(prompt);
}

/// \brief Runs `kernel`, the library's processing of one row of model logits (max, filters,
/// exp, sampling), and re-throws a std::domain_error from it (NaN, +inf, a row left all -inf)
/// with the row named first, e.g. "specdec: draft model logits for position 17 (context length
/// 17): logits row contains NaN ...". Only the library's own step is wrapped: exceptions from
/// the models and the logits processor propagate unchanged.
template <class Kernel, class... Where>
decltype(auto) on_model_row(Kernel&& kernel, const Where&... where) {
  try {
    return kernel();
  } catch (const std::domain_error& error) {
    throw_domain_error_for_row(error, where...);
  }
}

/// Seconds since `start` on the steady clock.
inline double seconds_since(std::chrono::steady_clock::time_point start) noexcept {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

/// Grows `buffer` to at least `size` elements; never shrinks, so steady state allocates nothing.
template <class T, class Allocator>
void ensure_size(std::vector<T, Allocator>& buffer, std::size_t size) {
  if (buffer.size() < size) buffer.resize(size);
}

/// Checks the vocabulary size of a model call against the one established by earlier calls of
/// this generate() (0 = none yet).
inline void check_vocab_size(std::size_t& vocab_size, std::size_t got, const char* model) {
  if (got == 0) {
    throw_domain_error(model, " returned 0 logits per row; expected V >= 1");
  }
  if (vocab_size == 0) {
    vocab_size = got;
  } else if (got != vocab_size) {
    throw_domain_error(model, " returned rows of ", got, " logits; expected ", vocab_size,
                       " (the vocabulary size established by earlier draft/target calls)");
  }
}

/// The TargetModel requirements, one readable message each; instantiated by both decoders so a
/// wrong target fails with the same line whichever decoder it is given to.
template <class Target>
struct TargetModelRequirements {
  static_assert(std::invocable<Target&, std::span<const token_t>, std::size_t>,
                "specdec: TargetModel must be callable as model(std::span<const specdec::token_t> "
                "context, std::size_t n) and return n rows of V float logits");
  static_assert(!detail::returns_column_major_matrix_target<Target>(),
                "specdec: TargetModel returned a column-major Eigen matrix; logits rows must be "
                "contiguous, so the matrix must be RowMajor (Eigen::Matrix<float, "
                "Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>)");
  static_assert(TargetModel<Target> ||
                    !std::invocable<Target&, std::span<const token_t>, std::size_t> ||
                    detail::returns_column_major_matrix_target<Target>(),
                "specdec: TargetModel must return one row of logits per requested position: n "
                "rows of V contiguous floats (a range of n*V floats or a RowMajor Eigen matrix)");
  static constexpr bool satisfied = TargetModel<Target>;
};

}  // namespace detail

/// \brief Speculative decoding with a draft model and a target model.
///
/// \tparam Draft  a DraftModel: `draft(std::span<const token_t>)` -> one row of V float logits
/// \tparam Target a TargetModel: `target(std::span<const token_t>, std::size_t n)` -> n rows
///
/// The decoder holds references to both models (it does not own them; they must outlive it)
/// and reusable buffers. Every generate() call starts from scratch (its own Rng, statistics,
/// context), so after an exception (bad model output, a throwing model) the next call works.
template <class Draft, class Target>
class SpeculativeDecoder {
  static_assert(std::invocable<Draft&, std::span<const token_t>>,
                "specdec: DraftModel must be callable as model(std::span<const specdec::token_t> "
                "context) and return one row of V contiguous float logits");
  static_assert(!detail::returns_column_major_matrix_draft<Draft>(),
                "specdec: DraftModel returned a column-major Eigen matrix; a logits row must be "
                "contiguous: return Eigen::VectorXf / RowVectorXf or a RowMajor matrix");
  static_assert(DraftModel<Draft> || !std::invocable<Draft&, std::span<const token_t>> ||
                    detail::returns_column_major_matrix_draft<Draft>(),
                "specdec: DraftModel must be callable as model(std::span<const specdec::token_t>) "
                "and return one row of V contiguous float logits (std::span<const float>, "
                "std::vector<float>, Eigen::VectorXf, ...)");
  static_assert(detail::TargetModelRequirements<Target>::satisfied || true);

  static constexpr bool kModelsValid = DraftModel<Draft> && TargetModel<Target>;

 public:
  /// \brief Binds the two models by reference (not owned; they must outlive the decoder).
  SpeculativeDecoder(Draft& draft, Target& target) noexcept : draft_(&draft), target_(&target) {}

  /// \brief Generates up to config.max_new_tokens tokens after `prompt`.
  /// \throws std::invalid_argument for a bad config or an empty prompt; std::domain_error for
  /// bad model output; anything a model throws, unchanged.
  GenerationResult generate(std::span<const token_t> prompt, const GenerationConfig& config) {
    return generate(prompt, config, [](std::span<const token_t>) { return true; });
  }

  /// \brief As generate(prompt, config), calling `on_chunk(std::span<const token_t>)` with each
  /// round's committed tokens (after stop-token truncation; valid during the call only).
  /// Returning false stops generation (finish_reason = callback, unless it had ended anyway).
  template <class OnChunk>
  GenerationResult generate(std::span<const token_t> prompt, const GenerationConfig& config,
                            OnChunk&& on_chunk) {
    static_assert(std::is_invocable_r_v<bool, OnChunk&, std::span<const token_t>>,
                  "specdec: the chunk callback must be callable as bool(std::span<const "
                  "specdec::token_t> chunk)");
    if constexpr (kModelsValid) {
      return run(prompt, config, on_chunk);
    } else {
      return {};  // unreachable: a static_assert above already failed
    }
  }

 private:
  /// 64-byte aligned storage for rows the kernels store into (full-width vector stores).
  using AlignedFloats = std::vector<float, Eigen::aligned_allocator<float>>;

  /// Buffers reused across rounds and generate() calls. Sizes only grow. Shapes in comments.
  struct Buffers {
    AlignedFloats draft_weights;           // (K, S)  q_k weights each draft token was drawn
                                           //         from; row stride S = V rounded up to 16
    std::vector<float> draft_normalizers;  // (K)     sums of those rows
    std::vector<float> draft_block_sums;   // (B)     per-block sums of the row being sampled,
                                           //         B = weight_block_count(V)
    std::vector<float> target_block_sums;  // (B)     the last target row's block sums and their
    std::vector<float> target_block_references;  // (B) references: the bonus sample reads them
    std::vector<token_t> drafted;          // (K)
    std::vector<double> acceptance_coins;  // (K)
    std::vector<float> row_logprobs;       // (K+1)   target log-prob of the token at position j
    AlignedFloats draft_processed;         // (V)     draft row after the logits processor
    AlignedFloats target_processed;        // (V)     target row after the logits processor
    AlignedFloats sample_scratch;          // (V)     residual or bonus weights
    std::vector<float> filter_scratch;     // (V)     top-k / top-p selection (grown on use)
    std::vector<token_t> context;          // (prompt + budget + K) committed + speculative
  };

  /// Weight rows start on 64-byte boundaries (16 floats).
  static constexpr std::size_t padded_row_stride(std::size_t vocab_size) noexcept {
    return (vocab_size + 15) / 16 * 16;
  }

  void size_buffers(std::size_t vocab_size, std::size_t draft_length) {
    detail::ensure_size(buffers_.draft_weights, draft_length * padded_row_stride(vocab_size));
    detail::ensure_size(buffers_.draft_normalizers, draft_length);
    detail::ensure_size(buffers_.drafted, draft_length);
    detail::ensure_size(buffers_.acceptance_coins, draft_length);
    detail::ensure_size(buffers_.row_logprobs, draft_length + 1);
    detail::ensure_size(buffers_.sample_scratch, vocab_size);
    detail::ensure_size(buffers_.draft_block_sums, weight_block_count(vocab_size));
    detail::ensure_size(buffers_.target_block_sums, weight_block_count(vocab_size));
    detail::ensure_size(buffers_.target_block_references, weight_block_count(vocab_size));
    // Unfiltered draft rows keep per-block references there (2 B values; filters grow it to
    // ~2V on first use).
    detail::ensure_size(buffers_.filter_scratch, 2 * weight_block_count(vocab_size));
  }

  template <class OnChunk>
  GenerationResult run(std::span<const token_t> prompt, const GenerationConfig& config,
                       OnChunk& on_chunk) {
    detail::validate_request(prompt, config);
    const auto start = std::chrono::steady_clock::now();
    const SamplingParams& params = config.sampling;
    const bool greedy = params.greedy();
    const std::size_t draft_length = config.draft_length;
    const std::size_t reserve = std::min(config.max_new_tokens, detail::kMaxReservedTokens);

    GenerationResult result;
    result.tokens.reserve(reserve);
    if (config.logprobs) result.logprobs.reserve(reserve);
    DecodeStats& stats = result.stats;
    stats.drafted_at.assign(draft_length, 0);
    stats.accepted_at.assign(draft_length, 0);

    Rng rng(config.seed);
    std::vector<token_t>& context = buffers_.context;
    context.clear();
    context.reserve(prompt.size() + reserve + draft_length + 1);
    context.assign(prompt.begin(), prompt.end());
    // The vocabulary size is learned from the first model call of this generate().
    std::size_t vocab_size = 0;
    // K is known now; V-sized buffers are sized once V is known (first call below).
    size_buffers(0, draft_length);

    bool finished = config.max_new_tokens == 0;
    while (!finished) {
      const std::size_t remaining = config.max_new_tokens - stats.emitted;
      const std::size_t round_length = std::min(draft_length, remaining - 1);  // K_eff
      const std::size_t committed = context.size();

      // ---- draft: x_k ~ q_k, one draft call and one coin per token ----------------------
      for (std::size_t k = 0; k < round_length; ++k) {
        const std::span<const token_t> draft_context(context.data(), committed + k);
        auto&& draft_row = detail::timed_call(
            stats.draft_seconds, [&]() -> decltype(auto) { return (*draft_)(draft_context); });
        ++stats.draft_calls;
        const std::span<const float> raw = detail::as_logits_span(draft_row);
        if (vocab_size == 0) size_buffers(raw.size(), draft_length);
        detail::check_vocab_size(vocab_size, raw.size(), "draft model");
        const std::span<const float> logits =
            apply_logits_processor(params, draft_context, raw, buffers_.draft_processed);
        const std::size_t position = draft_context.size();
        const double coin = greedy ? 0.0 : rng.uniform01();
        const token_t token = detail::on_model_row(
            [&] {
              if (greedy) return argmax(logits);
              const std::span<float> weights(
                  buffers_.draft_weights.data() + k * padded_row_stride(vocab_size), vocab_size);
              const std::span<float> block_sums(buffers_.draft_block_sums.data(),
                                                weight_block_count(vocab_size));
              const TokenDistribution<float> q =
                  process_logits(logits, params, buffers_.filter_scratch, weights, block_sums);
              buffers_.draft_normalizers[k] = q.normalizer;
              return sample_from_weights(std::span<const float>(weights),
                                         std::span<const float>(block_sums), coin);
            },
            "draft model logits for position ", position, " (context length ", position, ")");
        buffers_.drafted[k] = token;
        context.push_back(token);
      }

      // ---- target: one call scores every drafted position plus the bonus position -------
      const std::size_t rows_needed = round_length + 1;
      auto&& target_result = detail::timed_call(stats.target_seconds, [&]() -> decltype(auto) {
        return (*target_)(std::span<const token_t>(context), rows_needed);
      });
      ++stats.target_calls;
      const LogitsRows<float> target_rows = detail::as_target_rows(target_result, rows_needed);
      if (vocab_size == 0) {
        size_buffers(target_rows.vocab_size(), draft_length);
        detail::check_vocab_size(vocab_size, target_rows.vocab_size(), "target model");
      } else if (target_rows.vocab_size() != vocab_size) {
        detail::throw_domain_error("target vocabulary size ", target_rows.vocab_size(),
                                   " (logits per row) differs from the draft vocabulary size ",
                                   vocab_size, "; expected both models to share one vocabulary");
      }

      // Processed target row j follows the committed tokens plus x_0..x_{j-1}.
      auto processed_target_row = [&](std::size_t j) {
        return apply_logits_processor(params,
                                      std::span<const token_t>(context.data(), committed + j),
                                      target_rows.row(j), buffers_.target_processed);
      };
      // The library's step on target row j, with the row named in its errors.
      auto on_target_row = [&](std::size_t j, auto&& kernel) -> decltype(auto) {
        return detail::on_model_row(kernel, "target model row ", j, " of ", rows_needed,
                                    " (position ", committed + j, ", context length ",
                                    committed + j, ")");
      };
      const std::span<const token_t> drafted(buffers_.drafted.data(), round_length);

      // ---- verify ------------------------------------------------------------------------
      VerifyResult verdict;
      if (greedy) {
        verdict = verify_greedy(drafted, [&](std::size_t j) {
          const std::span<const float> row = processed_target_row(j);
          return on_target_row(j, [&] {
            // Greedy log-prob: log-softmax at T = 1 of the processed row, at the argmax (one
            // pass for both).
            if (!config.logprobs) return detail::argmax_checked(row).first;
            const auto [best, log_p] = detail::argmax_and_log_probability(row);
            buffers_.row_logprobs[j] = log_p;
            return best;
          });
        });
      } else {
        for (std::size_t k = 0; k < round_length; ++k) {
          buffers_.acceptance_coins[k] = rng.uniform01();
        }
        const double final_coin = rng.uniform01();
        // Target rows record their block sums, so that the bonus sample (row K) costs a block,
        // not a pass.
        const std::size_t blocks = weight_block_count(vocab_size);
        const BlockSumBuffers<float> recorded{
            std::span<float>(buffers_.target_block_sums.data(), blocks),
            std::span<float>(buffers_.target_block_references.data(), blocks)};
        TokenDistribution<float> last_target_row;
        verdict = verify_stochastic(
            drafted,
            LogitsRows<float>(std::span<const float>(buffers_.draft_weights.data(),
                                                     round_length * padded_row_stride(vocab_size)),
                              vocab_size, padded_row_stride(vocab_size)),
            std::span<const float>(buffers_.draft_normalizers.data(), round_length),
            [&](std::size_t j) {
              const std::span<const float> row = processed_target_row(j);
              last_target_row = on_target_row(j, [&] {
                return process_logits(row, params, buffers_.filter_scratch, recorded);
              });
              if (config.logprobs && j < round_length) {
                buffers_.row_logprobs[j] = last_target_row.log_probability(drafted[j]);
              }
              return last_target_row;
            },
            std::span<const double>(buffers_.acceptance_coins.data(), round_length), final_coin,
            std::span<float>(buffers_.sample_scratch.data(), vocab_size));
        if (config.logprobs) {
          buffers_.row_logprobs[verdict.accepted] =
              last_target_row.log_probability(verdict.next_token);
        }
      }

      // ---- statistics of the verification (before stop-token truncation) ----------------
      ++stats.rounds;
      stats.drafted += round_length;
      stats.accepted += verdict.accepted;
      if (verdict.accepted < round_length) ++stats.rejecting_rounds;
      for (std::size_t k = 0; k < round_length; ++k) ++stats.drafted_at[k];
      for (std::size_t k = 0; k < verdict.accepted; ++k) ++stats.accepted_at[k];

      // ---- emit x_0..x_{a-1}, next_token; stop after the first stop token ----------------
      const std::size_t chunk_start = result.tokens.size();
      bool stopped = false;
      for (std::size_t j = 0; j <= verdict.accepted && !stopped; ++j) {
        const token_t token = j < verdict.accepted ? drafted[j] : verdict.next_token;
        result.tokens.push_back(token);
        if (config.logprobs) result.logprobs.push_back(buffers_.row_logprobs[j]);
        stopped = detail::is_stop_token(config.stop_tokens, token);
      }
      stats.emitted = result.tokens.size();
      context.resize(committed + verdict.accepted);
      context.push_back(verdict.next_token);

      if (stopped) {
        result.finish_reason = FinishReason::stop_token;
        finished = true;
      } else if (stats.emitted == config.max_new_tokens) {
        result.finish_reason = FinishReason::length;
        finished = true;
      }
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

  Draft* draft_;
  Target* target_;
  Buffers buffers_;
};

/// \brief Plain decoding with the target alone: one target(context, 1) call per token, the
/// same SamplingParams and sampler as SpeculativeDecoder (one coin per token). The baseline
/// against which a speedup is measured. config.draft_length is ignored (not validated).
template <class Target>
class AutoregressiveDecoder {
  static_assert(detail::TargetModelRequirements<Target>::satisfied || true);

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
    static_assert(std::is_invocable_r_v<bool, OnChunk&, std::span<const token_t>>,
                  "specdec: the chunk callback must be callable as bool(std::span<const "
                  "specdec::token_t> chunk)");
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
      detail::check_vocab_size(vocab_size, rows.vocab_size(), "target model");
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
  std::vector<float> filter_scratch_;  // (V) top-k / top-p selection
  std::vector<float> block_sums_;        // (B) block sums of the row being sampled, and
  std::vector<float> block_references_;  // (B) their references (one pass per sampled token)
};

}  // namespace specdec

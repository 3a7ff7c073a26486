#pragma once
/// \file
/// \brief SpeculativeDecoder (draft K tokens, verify them with one target call) and
/// AutoregressiveDecoder (one target call per token: the baseline).
///
/// A speculative round (StrategyDecoder::run reads as this list):
///   propose: the Proposer drafts n <= limit = min(K, remaining budget - 1, max_context -
///            committed) tokens, asking the DraftLengthPolicy before each, and reports the
///            distribution each was drawn from; the proposal is checked (detail::check_proposal)
///            before the target sees it: against V too once a model call has told V (in a first
///            round that called no model before the target, its token ids right after)
///   target:  one call target(committed + drafted, n + 1)
///   verify:  the Verifier keeps a prefix of a tokens and draws the next token (greedy: argmax
///            matching); a + 1 <= remaining, so the budget is exact
///   commit:  emit x_0..x_{a-1} and the next token, cut after the first stop token
/// Coins per round (sampled only): one per sampled draft token, n acceptance coins, 1 final.
///
/// Thread safety: a decoder and its models are used by one thread at a time.

#include <algorithm>
#include <chrono>
#include <functional>
#include <optional>
#include <cstddef>
#include <cstdint>
#include <limits>
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
#include "specdec/block_verifier.hpp"
#include "specdec/coins.hpp"
#include "specdec/configured_draft_length.hpp"
#include "specdec/model_proposer.hpp"
#include "specdec/proposal.hpp"
#include "specdec/static_draft_length.hpp"
#include "specdec/strategies.hpp"
#include "specdec/target_rows.hpp"
#include "specdec/token_verifier.hpp"
#include "specdec/tree.hpp"
#include "specdec/types.hpp"
#include "specdec/verify.hpp"

namespace specdec {

/// \brief The built-in verifiers GenerationConfig can select (sampled decoding; greedy decoding
/// always verifies by argmax matching).
enum class VerifierKind {
  token,  ///< token-level speculative sampling (TokenVerifier)
  block,  ///< block verification (BlockVerifier): never fewer accepted tokens in expectation
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

inline void validate_request(std::span<const token_t> prompt, const GenerationConfig& config) {
  config.validate();
  validate_prompt(prompt);
  validate_prompt_length(prompt, config);
}

/// Seconds since `start` on the steady clock.
inline double seconds_since(std::chrono::steady_clock::time_point start) noexcept {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
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

/// \brief The verifier GenerationConfig::verifier selects, dispatched at run time (one branch
/// per round; docs/benchmarks.md measures it against a compile-time choice).
class ConfiguredVerifier {
 public:
  void begin(const GenerationConfig& config) noexcept { kind_ = config.verifier; }

  template <class Scalar, class Coins>
  VerifyResult verify(const Proposal<Scalar>& proposal, TargetRows<Scalar>& target,
                      Coins& coins) const {
    if (kind_ == VerifierKind::block) return BlockVerifier{}.verify(proposal, target, coins);
    return TokenVerifier{}.verify(proposal, target, coins);
  }

 private:
  VerifierKind kind_ = VerifierKind::token;
};

namespace detail {

/// A proposal the decoder can verify: at most `limit` tokens, a chain or a tree whose parents
/// are in topological order (tree.hpp; a tree then needs a target with score_tree), each token
/// in [0, V),
/// one q row and a positive finite normalizer or a point-mass flag per token. Every span's
/// size is checked before any element is read. Cheap (O(n)); a user's proposer gets a clear
/// error, not UB. vocab_size = 0 (no model called yet in this generate()) checks all but the
/// upper bound of the token ids and the width of the q rows; the decoder checks again once V is
/// known.
template <class Scalar>
void check_proposal(const Proposal<Scalar>& proposal, std::size_t limit, std::size_t vocab_size) {
  const std::size_t n = proposal.size();
  if (n > limit) {
    throw_invalid_argument("proposer returned ", n, " tokens; expected at most the round's limit ",
                           limit);
  }
  if (!proposal.parents.empty() && proposal.parents.size() != n) {
    throw_invalid_argument("proposer returned ", proposal.parents.size(), " parents for ", n,
                           " tokens; expected one per token (or none for a chain)");
  }
  if (!proposal.point_mass.empty() && proposal.point_mass.size() != n) {
    throw_invalid_argument("proposer returned ", proposal.point_mass.size(),
                           " point-mass flags for ", n, " tokens; expected one per token");
  }
  if (!proposal.max_children.empty() && proposal.max_children.size() != n + 1) {
    throw_invalid_argument("proposer returned ", proposal.max_children.size(),
                           " max_children bounds for ", n,
                           " tokens; expected one per token plus the root's (or none)");
  }
  check_tree(proposal);
  bool sampled = false;
  for (std::size_t i = 0; i < n; ++i) {
    const token_t token = proposal.tokens[i];
    if (token < 0 || (vocab_size != 0 && static_cast<std::size_t>(token) >= vocab_size)) {
      if (vocab_size == 0) {
        throw_invalid_argument("proposer returned token ", token, " at node ", i,
                               "; expected a token id in [0, V)");
      }
      throw_invalid_argument("proposer returned token ", token, " at node ", i,
                             "; expected a token id in [0, ", vocab_size, ")");
    }
    sampled = sampled || !proposal.is_point_mass(i);
  }
  if (!sampled) return;
  if (proposal.q_weights.rows() != n || proposal.q_normalizers.size() != n ||
      (vocab_size != 0 && proposal.q_weights.vocab_size() != vocab_size)) {
    throw_invalid_argument("proposer returned ", proposal.q_weights.rows(), " q rows of ",
                           proposal.q_weights.vocab_size(), " weights and ",
                           proposal.q_normalizers.size(), " normalizers for ", n,
                           " sampled tokens; expected one row of V = ", vocab_size,
                           " weights and one normalizer per token");
  }
  for (std::size_t i = 0; i < n; ++i) {
    const Scalar normalizer = proposal.q_normalizers[i];
    if (!proposal.is_point_mass(i) &&
        !(normalizer > Scalar(0) && normalizer <= std::numeric_limits<Scalar>::max())) {
      throw_invalid_argument("proposer returned the q normalizer ", normalizer, " at node ", i,
                             "; expected the positive, finite sum of the q row");
    }
  }
}

/// Whether `tokens` points into `vector`'s storage (anywhere in its capacity). std::less gives
/// pointers into different objects a total order, where `<` would be unspecified.
template <class T>
[[nodiscard]] bool views_storage_of(std::span<const T> tokens, const std::vector<T>& vector) noexcept {
  if (tokens.empty() || vector.capacity() == 0) return false;
  const std::less<const T*> before;
  const T* first = vector.data();
  return !before(tokens.data(), first) && before(tokens.data(), first + vector.capacity());
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
  static_assert(detail::TargetModelRequirements<Target>::satisfied || true);
  static_assert(specdec::Proposer<Proposer>,
                "specdec: a Proposer must provide `template <class Coins> Proposal<float> "
                "propose(DraftRequest&, Coins&)` (see strategies.hpp)");
  static_assert(DraftLengthPolicy<Policy>,
                "specdec: a DraftLengthPolicy must provide `bool draft_more(const DraftState&)` "
                "and `void observe(const RoundReport&)` (see strategies.hpp)");
  static_assert(detail::TreeTargetRequirements<Target>::satisfied);  // score_tree, if any
  static_assert(specdec::Verifier<Verifier>,
                "specdec: a Verifier must provide `template <class Scalar, class Coins> "
                "VerifyResult verify(const Proposal<Scalar>&, TargetRows<Scalar>&, Coins&)` "
                "(see strategies.hpp)");

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
    static_assert(std::is_invocable_r_v<bool, OnChunk&, std::span<const token_t>>,
                  "specdec: the chunk callback must be callable as bool(std::span<const "
                  "specdec::token_t> chunk)");
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
    const SamplingParams& params = config.sampling;
    const std::size_t reserve = std::min(config.max_new_tokens, detail::kMaxReservedTokens);
    begin(proposer_, config);
    begin(policy_, config);
    begin(verifier_, config);

    GenerationResult result;
    result.tokens.reserve(reserve);
    if (config.logprobs) result.logprobs.reserve(reserve);
    DecodeStats& stats = result.stats;
    const std::size_t usable_draft_length = config.usable_draft_length();
    stats.drafted_at.assign(usable_draft_length, 0);
    stats.accepted_at.assign(usable_draft_length, 0);
    stats.drafted_at_rank.assign(usable_draft_length, 0);
    stats.accepted_at_rank.assign(usable_draft_length, 0);

    Rng rng(config.seed);
    DraftCoins draft_coins(rng);
    std::vector<token_t>& context = context_;
    context.clear();
    context.reserve(prompt.size() + reserve + usable_draft_length + 1);
    context.assign(prompt.begin(), prompt.end());
    detail::ensure_size(acceptance_coins_, usable_draft_length);
    detail::ensure_size(path_, usable_draft_length);
    detail::ensure_size(sibling_rank_, usable_draft_length);
    detail::ensure_size(tree_scratch_, 2 * usable_draft_length + 1);
    target_buffers_.path_context.reserve(context.capacity());
    if (certain_tokens_.size() < usable_draft_length) certain_tokens_.assign(usable_draft_length, 1.0);
    drafted_copy_.reserve(usable_draft_length);
    std::size_t vocab_size = 0;  // learned from the first model call of this generate()
    bool prompt_checked = false;  // against vocab_size, once it is known
    bool target_buffers_sized = false;
    auto check_prompt_once = [&] {
      if (prompt_checked || vocab_size == 0) return;
      detail::check_prompt_vocabulary(prompt, vocab_size);
      prompt_checked = true;
    };

    bool finished = config.max_new_tokens == 0;
    while (!finished) {
      const std::size_t committed = context.size();
      const std::size_t remaining = config.max_new_tokens - stats.emitted;
      const double draft_seconds_before = stats.draft_seconds;
      const double target_seconds_before = stats.target_seconds;

      // ---- propose: drafted tokens and the exact distributions they were drawn from -------
      // Budget: accepted + 1 <= remaining. Context: the target call sees committed + drafted
      // tokens, at most max_context (committed <= max_context, or generation has ended).
      std::size_t limit = std::min(usable_draft_length, remaining - 1);
      if (config.max_context != 0) limit = std::min(limit, config.max_context - committed);
      DraftRequest request(context, limit, params, vocab_size, stats);
      request.bind_policy(policy_);
      const auto proposal = proposer_.propose(request, draft_coins);
      check_prompt_once();
      // Before the target sees it: the limit (so no call exceeds max_context or the usable
      // draft length), the spans, the shape and, once a model call has told V, the token ids.
      const bool vocab_known = vocab_size != 0;
      // Against the round's own limit: request.limit is the proposer's to read, not to raise.
      detail::check_proposal(proposal, limit, vocab_size);
      const std::size_t n = proposal.size();
      if constexpr (requires { policy_.prediction(); }) {
        if (const std::optional<RoundPrediction> expected = policy_.prediction()) {
          ++stats.predicted_rounds;
          stats.predicted_tokens += expected->tokens;
          stats.predicted_seconds += expected->seconds;
        }
      }
      // A proposer may hand back tokens that view the context itself (e.g. the continuation of
      // an earlier occurrence, or the tokens it appended to request.context): inserting a
      // vector's own elements into it is undefined, so those are copied out first.
      std::span<const token_t> drafted = proposal.tokens;
      if (detail::views_storage_of(drafted, context)) {
        drafted_copy_.assign(drafted.begin(), drafted.end());  // within its reserved capacity
        drafted = drafted_copy_;
      }
      context.resize(committed);
      context.insert(context.end(), drafted.begin(), drafted.end());

      // ---- target: one call scores every drafted position plus the next ------------------
      // A tree goes to score_tree (tree.hpp), and only to a target that has it.
      const bool tree = !proposal.is_chain();
      const auto chain_call = [&]() -> decltype(auto) {
        return detail::timed_call(stats.target_seconds, [&]() -> decltype(auto) {
          return (*target_)(std::span<const token_t>(context), n + 1);
        });
      };
      const LogitsRows<float> rows =
          tree ? tree_call_.score(*target_, stats.target_seconds,
                                  std::span<const token_t>(context).first(committed), proposal)
               : detail::as_target_rows(chain_result_.hold(chain_call), n + 1);
      ++stats.target_calls;
      check_target_vocab(vocab_size, rows.vocab_size(), n);
      check_prompt_once();
      // A first round with no model called before the target (a proposer without a model):
      // the token ids against V now, as the prompt's.
      if (!vocab_known) detail::check_proposal(proposal, limit, vocab_size);
      if (!target_buffers_sized) {
        // For the longest round up front: a policy may draft few tokens for many rounds first.
        target_buffers_.reserve(usable_draft_length + 1, vocab_size,
                                static_cast<bool>(params.logits_processor));
        target_buffers_sized = true;
      }
      TargetRows<float> target(rows, context, committed, params, config.logprobs, target_buffers_,
                               tree ? proposal.parents : std::span<const std::int32_t>());

      // ---- verify: keep a prefix, draw the next token --------------------------------------
      VerifyResult verdict;
      if (params.greedy()) {
        // A deterministic target admits one lossless verifier: accept exactly its argmax path.
        const auto argmax_at = [&](std::size_t j) { return target.argmax(j); };
        verdict = tree ? verify_greedy_tree(proposal, argmax_at)
                       : verify_greedy(proposal.tokens, argmax_at);
      } else {
        for (std::size_t i = 0; i < n; ++i) acceptance_coins_[i] = rng.uniform01();
        const VerificationCoins coins(std::span<const double>(acceptance_coins_.data(), n),
                                      rng.uniform01());
        // An error from the final draw (bonus or correction) names the row it samples.
        verdict =
            target.naming_rows_in_errors([&] { return verifier_.verify(proposal, target, coins); });
        check_verdict(verdict, n, vocab_size);
      }

      // ---- commit: statistics, emit up to a stop token, budget, callback -------------------
      // The accepted path's nodes (a chain's: 0..accepted-1) and each node's sibling rank.
      const std::span<const std::int32_t> path =
          tree ? detail::accepted_path(proposal, verdict, path_)
               : std::span<const std::int32_t>(chain_path(verdict.accepted));
      const std::size_t depth =
          tree ? detail::sibling_ranks(proposal, sibling_rank_, tree_scratch_) : n;
      ++stats.rounds;
      stats.drafted += n;
      stats.accepted += verdict.accepted;
      if (tree ? !verdict.bonus : verdict.accepted < n) ++stats.rejecting_rounds;
      for (std::size_t k = 0; k < depth; ++k) ++stats.drafted_at[k];
      for (std::size_t k = 0; k < verdict.accepted; ++k) ++stats.accepted_at[k];
      for (std::size_t i = 0; i < n; ++i) ++stats.drafted_at_rank[tree ? sibling_rank_[i] : 0];
      for (const std::int32_t node : path) {
        ++stats.accepted_at_rank[tree ? sibling_rank_[static_cast<std::size_t>(node)] : 0];
      }
      const std::span<const double> token_probabilities =
          proposal.token_probabilities.size() == n
              ? proposal.token_probabilities
              : std::span<const double>(certain_tokens_.data(), n);
      policy_.observe(RoundReport{n, verdict.accepted, limit,
                                  stats.draft_seconds - draft_seconds_before,
                                  stats.target_seconds - target_seconds_before,
                                  token_probabilities});

      const std::size_t chunk_start = result.tokens.size();
      bool stopped = false;
      for (std::size_t j = 0; j <= verdict.accepted && !stopped; ++j) {
        const token_t token = j < verdict.accepted
                                  ? proposal.tokens[static_cast<std::size_t>(path[j])]
                                  : verdict.next_token;
        result.tokens.push_back(token);
        if (config.logprobs) {
          // Row 1 + node follows that node (row 0 the committed tokens), chain or tree.
          const std::size_t row = j == 0 ? 0 : static_cast<std::size_t>(path[j - 1]) + 1;
          result.logprobs.push_back(static_cast<float>(target.log_probability(row, token)));
        }
        stopped = detail::is_stop_token(config.stop_tokens, token);
      }
      stats.emitted = result.tokens.size();
      context.resize(committed);
      for (const std::int32_t node : path) {
        context.push_back(proposal.tokens[static_cast<std::size_t>(node)]);
      }
      context.push_back(verdict.next_token);

      if (stopped) {
        result.finish_reason = FinishReason::stop_token;
        finished = true;
      } else if (stats.emitted == config.max_new_tokens) {
        result.finish_reason = FinishReason::length;
        finished = true;
      } else if (detail::context_exhausted(context.size(), config)) {
        result.finish_reason = FinishReason::context_limit;
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

  static void check_target_vocab(std::size_t& vocab_size, std::size_t got, std::size_t drafted) {
    if (vocab_size != 0 && drafted > 0 && got != vocab_size) {
      detail::throw_domain_error("target vocabulary size ", got,
                                 " (logits per row) differs from the draft vocabulary size ",
                                 vocab_size, "; expected both models to share one vocabulary");
    }
    detail::check_vocab_size(vocab_size, got, "target model");
  }

  /// Nodes 0..accepted-1: a chain's accepted path.
  std::span<const std::int32_t> chain_path(std::size_t accepted) {
    for (std::size_t k = 0; k < accepted; ++k) path_[k] = static_cast<std::int32_t>(k);
    return std::span<const std::int32_t>(path_.data(), accepted);
  }

  static void check_verdict(const VerifyResult& verdict, std::size_t n, std::size_t vocab_size) {
    if (verdict.accepted > n || verdict.next_token < 0 ||
        static_cast<std::size_t>(verdict.next_token) >= vocab_size) {
      detail::throw_invalid_argument("verifier accepted ", verdict.accepted, " of ", n,
                                     " tokens and drew token ", verdict.next_token,
                                     "; expected at most ", n, " and a token in [0, ", vocab_size,
                                     ")");
    }
  }

  Target* target_;
  Proposer proposer_;
  Policy policy_;
  Verifier verifier_;
  std::vector<token_t> context_;          // (prompt + budget + K) committed + speculative
  std::vector<double> acceptance_coins_;  // (K) usable draft length
  std::vector<double> certain_tokens_;    // (K) all 1: probabilities of a proposer that has none
  std::vector<token_t> drafted_copy_;     // (K) drafted tokens that viewed the context itself
  TargetRowBuffers<float> target_buffers_;
  detail::HeldResult<typename detail::chain_call_result<Target>::type>
      chain_result_;                      // the last chain call's rows, until the next call
  detail::TreeCall<Target> tree_call_;    // score_tree, for targets that have it
  std::vector<std::int32_t> path_;        // (K) the accepted path's nodes
  std::vector<std::size_t> sibling_rank_;  // (K) each node's rank among its siblings
  std::vector<std::size_t> tree_scratch_;  // (2 K + 1) counters for sibling_ranks
};

/// \brief Speculative decoding with a draft model and a target model: the two-model face of
/// StrategyDecoder (ModelProposer, ConfiguredDraftLength, ConfiguredVerifier).
///
/// \tparam Draft  a DraftModel: `draft(std::span<const token_t>)` -> one row of V float logits
/// \tparam Target a TargetModel: `target(std::span<const token_t>, std::size_t n)` -> n rows
///
/// Holds references to both models (not owned; they must outlive the decoder).
template <class Draft, class Target>
class SpeculativeDecoder
    : public StrategyDecoder<Target, ModelProposer<Draft>, ConfiguredDraftLength,
                             ConfiguredVerifier> {
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
  std::vector<float> filter_scratch_;  // (V) top-k / top-p selection
  std::vector<float> block_sums_;        // (B) block sums of the row being sampled, and
  std::vector<float> block_references_;  // (B) their references (one pass per sampled token)
};

}  // namespace specdec

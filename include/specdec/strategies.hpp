#pragma once
/// \file
/// \brief The three strategies a speculative round is built from, as concepts:
///
///   propose  — a Proposer drafts tokens and reports the exact distribution each was drawn
///              from (proposal.hpp), asking the DraftLengthPolicy before every token;
///   target   — the decoder makes one target call over the proposal (not a strategy);
///   verify   — a Verifier decides how many drafted tokens to keep and draws the next token,
///              from the proposal, the target rows (target_rows.hpp) and coins (coins.hpp);
///   commit   — the decoder emits, applies the budget and stop tokens, keeps statistics.
///
/// Optional hooks (each detected with a requires-expression; a strategy without one gets the
/// default in brackets). One convention for every hook that sees the settings: it takes the
/// GenerationConfig (generation.hpp); a strategy may declare it as a template over the config
/// type (the draft-length policies do, so tests can drive them with a bare struct holding the
/// fields they read), the decoders always pass a GenerationConfig.
///
///   any strategy   void begin(const GenerationConfig& config)
///                    called by the decoder at the start of every generate(), before any
///                    model call; requires nothing; may reset per-generation state and size
///                    buffers (a round allocates nothing after it). [nothing]
///   Proposer       std::size_t round_limit() const
///                    the most tokens (tree nodes) one round of this proposer drafts, used in
///                    place of config.draft_length (TreeProposer: its shape's node count);
///                    requires 1..GenerationConfig::kMaxDraftLength (else invalid_argument).
///                    [config.draft_length]
///   Verifier       void reserve_nodes(std::size_t nodes)
///                    called after begin() with the most tokens (tree nodes) a round of this
///                    generation can draft: size buffers so that no round allocates, whatever
///                    its size (TreeVerifier, TraversalVerifier). [nothing]
///   Policy         bool reads_token_probabilities() const
///                    whether draft_more() reads DraftState::token_probabilities; false spares a
///                    greedy model proposer the softmax of each draft row. [true]
///   Policy         std::optional<RoundPrediction> prediction() const
///                    called after the proposer returned, before the target call: what the
///                    policy expected of the round it let draft; recorded in
///                    DecodeStats::predicted_*. Must not change the policy. [none recorded]
///
/// The built-in strategies (ModelProposer, StaticDraftLength, TokenVerifier, BlockVerifier)
/// satisfy exactly these concepts, as a user's do. What keeps the output exact, per strategy,
/// is in docs/design.md: a proposer must report q truthfully, a policy must decide from the
/// draft side only, a verifier must be lossless for any proposal (testing.hpp certifies it).

#include <concepts>
#include <cstddef>
#include <span>
#include <type_traits>
#include <vector>

#include "specdec/coins.hpp"
#include "specdec/proposal.hpp"
#include "specdec/sampling.hpp"
#include "specdec/stats.hpp"
#include "specdec/target_rows.hpp"
#include "specdec/types.hpp"
#include "specdec/verify.hpp"

namespace specdec {

/// \brief What a proposer gets for one round.
///
/// `context` holds the committed tokens (prompt + emitted) on entry; a proposer may append its
/// drafted tokens to it (a draft model needs them as context; capacity for `limit` more is
/// reserved) but must not change the committed ones. The decoder restores the size afterwards.
/// The tokens a proposal returns may view `context` (what the proposer appended, or committed
/// text): the decoder copies them before it rewrites the context.
struct DraftRequest {
  DraftRequest(std::vector<token_t>& context_, std::size_t limit_, const SamplingParams& params_,
               std::size_t& vocab_size_, DecodeStats& stats_) noexcept
      : context(context_),
        committed(context_.size()),
        limit(limit_),
        params(params_),
        vocab_size(vocab_size_),
        stats(stats_) {}

  std::vector<token_t>& context;
  std::size_t committed = 0;     ///< context.size() on entry
  std::size_t limit = 0;         ///< draft at most this many tokens (draft_length, budget)
  const SamplingParams& params;  ///< the same processing the target rows get
  /// The vocabulary size established by earlier model calls of this generate() (0 = none yet);
  /// a proposer that calls a model checks its rows against it and sets it if 0.
  std::size_t& vocab_size;
  DecodeStats& stats;  ///< a proposer that calls a model counts draft_calls / draft_seconds

  /// \brief Asks the draft-length policy whether to draft another token (a proposer must ask
  /// before each token; `state.drafted < limit` is the proposer's to check first).
  [[nodiscard]] bool draft_more(const DraftState& state) const { return ask_(policy_, state); }

  /// \brief Whether the policy reads DraftState::token_probabilities. A greedy model proposer
  /// computes its argmax's softmax probability (one more pass over the row) only if so.
  [[nodiscard]] bool reads_token_probabilities() const noexcept { return reads_probabilities_; }

  /// \brief Routes draft_more() to `policy`. A policy may declare `bool
  /// reads_token_probabilities() const` (false spares greedy proposers the softmax); without
  /// it, it is assumed to read them.
  template <class Policy>
  void bind_policy(Policy& policy) noexcept {
    policy_ = &policy;
    ask_ = [](void* p, const DraftState& state) {
      return static_cast<bool>(static_cast<Policy*>(p)->draft_more(state));
    };
    if constexpr (requires { policy.reads_token_probabilities(); }) {
      reads_probabilities_ = static_cast<bool>(policy.reads_token_probabilities());
    } else {
      reads_probabilities_ = true;
    }
  }

 private:
  void* policy_ = nullptr;
  bool (*ask_)(void*, const DraftState&) = [](void*, const DraftState&) { return true; };
  bool reads_probabilities_ = false;
};

/// \brief What a draft-length policy learns after each round (history it may use later).
struct RoundReport {
  std::size_t drafted = 0;    ///< tokens proposed this round
  std::size_t accepted = 0;   ///< of which verification kept
  std::size_t limit = 0;      ///< the round's cap
  double draft_seconds = 0;   ///< wall time in the draft model this round
  double target_seconds = 0;  ///< wall time of this round's target call (drafted + 1 rows)
  /// The drafted tokens' probabilities (DraftState::token_probabilities; `drafted` entries,
  /// all 1 when the proposer reports none). Tokens [0, accepted) were accepted; token
  /// `accepted`, if drafted, was rejected; the rest were never judged.
  std::span<const double> token_probabilities{};
  /// Tokens before the round (prompt and emitted): what a step's cost grows with (0: not told).
  std::size_t context = 0;
};

/// \brief What a policy expected of the round it just let the proposer draft (optional:
/// `policy.prediction()` returning this is recorded in DecodeStats::predicted_*).
struct RoundPrediction {
  double tokens = 0;   ///< expected tokens the round emits
  double seconds = 0;  ///< expected wall time of the round (draft + target)
};

namespace detail {
template <class T>
struct is_proposal : std::false_type {};
template <class Scalar>
struct is_proposal<Proposal<Scalar>> : std::true_type {};
}  // namespace detail

/// \brief `proposer.propose(request, coins)` drafts at most request.limit tokens, asking
/// request.draft_more() before each, draws every sampled token with coins.draw(law), and
/// returns a Proposal whose q is exactly the law each token was drawn from.
template <class P>
concept Proposer = requires(P& proposer, DraftRequest& request, DraftCoins& coins) {
  { proposer.propose(request, coins) } -> std::same_as<Proposal<float>>;
};

/// \brief `policy.draft_more(state)` decides from draft-side facts (DraftState) whether to draft
/// one more token; `policy.observe(report)` is told how each round went.
template <class P>
concept DraftLengthPolicy = requires(P& policy, const DraftState& state,
                                     const RoundReport& report) {
  { policy.draft_more(state) } -> std::convertible_to<bool>;
  policy.observe(report);
};

/// \brief `verifier.verify(proposal, target, coins)` keeps a prefix of the proposal (a path, for
/// trees) and draws the next token, using only the proposal, the processed target rows and the
/// coins; it must be lossless: the emitted tokens follow the target's distribution exactly.
template <class V>
concept Verifier = requires(V& verifier, const Proposal<float>& proposal, TargetRows<float>& target,
                            const VerificationCoins& coins) {
  { verifier.verify(proposal, target, coins) } -> std::same_as<VerifyResult>;
};

}  // namespace specdec

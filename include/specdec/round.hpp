#pragma once
/// \file
/// \brief The speculative round, written once: propose -> check -> one target call -> verify
/// -> commit the chunk. StrategyDecoder runs it round after round; the certification harness
/// (testing/enumeration.hpp) runs it under enumerated coins; a decoder of several sequences
/// runs it once per sequence (docs/design.md, "The round"). So what the harness certifies is
/// what users run.
///
/// One round, in order:
///   propose  the Proposer drafts n <= limit tokens, asking the DraftLengthPolicy before each,
///            and reports the law each was drawn from; the proposal is checked
///            (detail::check_proposal) before the target sees it, against V too once a model
///            call has told V (in a first round with no model call before the target, its token
///            ids right after that call)
///   target   one call `score(committed + drafted, committed, proposal)`: n + 1 rows (a chain),
///            or one row per node plus the root's (a tree)
///   verify   greedy: the target's argmax path (the one lossless verifier of a deterministic
///            target); sampled: the Verifier with the coins `verification_coins(n)` gives, and
///            its verdict is checked (at most n accepted, a token in [0, V))
///   commit   the statistics, the policy told (observe), the chunk (accepted path + the next
///            token) appended to the caller's output and to the context.
/// What the round leaves to its caller: the budget and context limit (`limit`), stop tokens,
/// streaming, timing of the whole generation, and where the coins come from.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <span>
#include <stdexcept>
#include <type_traits>
#include <utility>
#include <vector>

#include "specdec/detail/error.hpp"
#include "specdec/detail/model_traits.hpp"
#include "specdec/proposal.hpp"
#include "specdec/sampling/params.hpp"
#include "specdec/stats.hpp"
#include "specdec/strategies.hpp"
#include "specdec/target_rows.hpp"
#include "specdec/tree.hpp"
#include "specdec/types.hpp"
#include "specdec/verify.hpp"

namespace specdec {

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
[[nodiscard]] bool views_storage_of(std::span<const T> tokens,
                                    const std::vector<T>& vector) noexcept {
  if (tokens.empty() || vector.capacity() == 0) return false;
  const std::less<const T*> before;
  const T* first = vector.data();
  return !before(tokens.data(), first) && before(tokens.data(), first + vector.capacity());
}

/// The verdict against the proposal it judged: a chunk is never built from tokens that were
/// not drafted, nor ends in a token outside [0, V).
inline void check_verdict(const VerifyResult& verdict, std::size_t n, std::size_t vocab_size) {
  if (verdict.accepted > n || verdict.next_token < 0 ||
      static_cast<std::size_t>(verdict.next_token) >= vocab_size) {
    throw_invalid_argument("verifier accepted ", verdict.accepted, " of ", n,
                           " tokens and drew token ", verdict.next_token, "; expected at most ", n,
                           " and a token in [0, ", vocab_size, ")");
  }
}

/// The mismatch of a target row width with the V the draft established, as a domain error
/// (model output, not configuration); the first width seen establishes V.
inline void check_target_vocab(std::size_t& vocab_size, std::size_t got, std::size_t drafted) {
  if (vocab_size != 0 && drafted > 0 && got != vocab_size) {
    throw_domain_error("target vocabulary size ", got,
                       " (logits per row) differs from the draft vocabulary size ", vocab_size,
                       "; expected both models to share one vocabulary");
  }
  check_vocab_size(vocab_size, got, "target model");
}

/// Between rounds, once a generation's vocabulary is known: the proposer sizes its buffers for
/// the longest round (ModelProposer::reserve), so that a round drafting after plain ones
/// allocates nothing. Never while a proposal is alive (it views those buffers).
template <class ProposerT>
void reserve_proposer(ProposerT& proposer, std::size_t vocab_size, std::size_t max_draft,
                      const SamplingParams& params) {
  if constexpr (requires { proposer.reserve(vocab_size, max_draft, params); }) {
    proposer.reserve(vocab_size, max_draft, params);
  }
}

}  // namespace detail

/// \brief A round's working memory, reused from round to round (nothing is allocated once
/// prepare() has sized it and the first target call has told V). `Scalar` is the target rows'
/// (float for the decoders, double for the certification harness's exact laws).
template <class Scalar>
struct RoundBuffers {
  TargetRowBuffers<Scalar> target_rows;
  std::vector<token_t> drafted_copy;      // (K) drafted tokens that viewed the context itself
  std::vector<std::int32_t> path;         // (K) the accepted path's nodes
  std::vector<std::size_t> sibling_rank;  // (K) each node's rank among its siblings
  std::vector<std::size_t> tree_scratch;  // (2 K + 1) counters for detail::sibling_ranks
  std::vector<double> certain_tokens;     // (K) all 1: probabilities of a proposer that has none
  std::size_t max_draft = 0;
  bool sized_for_vocab = false;

  /// \brief For rounds of at most `max_draft_length` drafted tokens over a context of at most
  /// `context_capacity` tokens; called at the start of every generation.
  void prepare(std::size_t max_draft_length, std::size_t context_capacity) {
    max_draft = max_draft_length;
    detail::ensure_size(path, max_draft);
    detail::ensure_size(sibling_rank, max_draft);
    detail::ensure_size(tree_scratch, 2 * max_draft + 1);
    if (certain_tokens.size() < max_draft) certain_tokens.assign(max_draft, 1.0);
    drafted_copy.reserve(max_draft);
    target_rows.path_context.reserve(context_capacity);
    sized_for_vocab = false;
  }
};

/// \brief Sizes the per-position statistics of DecodeStats for rounds of at most
/// `max_draft_length` drafted tokens (zeroed): done once per generation, before the first round.
inline void prepare_round_statistics(DecodeStats& stats, std::size_t max_draft_length) {
  stats.drafted_at.assign(max_draft_length, 0);
  stats.accepted_at.assign(max_draft_length, 0);
  stats.drafted_at_rank.assign(max_draft_length, 0);
  stats.accepted_at_rank.assign(max_draft_length, 0);
}

/// \brief What one round works on; references into the caller's generation state.
struct RoundState {
  /// The committed tokens (prompt + emitted) on entry; on return, committed + the chunk.
  /// Capacity for limit + 1 more must be reserved (the drafted tokens are placed there).
  std::vector<token_t>& context;
  std::size_t limit = 0;         ///< draft at most this many tokens (budget, context, K)
  const SamplingParams& params;  ///< the processing both models' rows get
  bool logprobs = false;         ///< append the target log-prob of each chunk token
  std::size_t& vocab_size;       ///< V, learned from this generation's first model call (0: none)
  DecodeStats& stats;            ///< the round's counts are added here
};

/// \brief What the round emitted, besides the tokens appended to the output.
struct RoundResult {
  std::size_t drafted = 0;   ///< n, the proposal's size
  std::size_t accepted = 0;  ///< drafted tokens kept (the chunk holds accepted + 1 tokens)
  /// The drafted tokens' probabilities as the policy was told them (RoundReport); valid until
  /// the proposer's next propose().
  std::span<const double> token_probabilities{};
};

/// \brief Where a round started: what propose_round hands on to verify_and_commit (the
/// drafted tokens are then in the context, after the `committed` ones).
template <class ProposalT>
struct ProposedRound {
  ProposalT proposal;         ///< checked; views the proposer's buffers until its next propose()
  std::size_t committed = 0;  ///< the context's size before the round
  bool vocab_known = false;   ///< V was known when the proposal was checked
  double draft_seconds_before = 0;   ///< stats.draft_seconds at the round's start
  double target_seconds_before = 0;  ///< stats.target_seconds at the round's start
};

namespace detail {

/// Where a round starts: the committed length and the clocks, read before the proposer runs.
struct RoundStart {
  std::size_t committed = 0;
  double draft_seconds_before = 0;
  double target_seconds_before = 0;
};

/// The round's start: its limit against the caller's sizing, the clocks read.
template <class Scalar>
[[nodiscard]] RoundStart start_round(const RoundState& state, const RoundBuffers<Scalar>& buffers) {
  if (state.limit > buffers.max_draft || state.stats.drafted_at.size() < state.limit) {
    // The caller's sizing, not the user's input: prepare() and prepare_round_statistics() for
    // the generation's longest round keep every round free of allocation.
    throw std::logic_error(
        "specdec: run_round with a limit beyond RoundBuffers::prepare() or "
        "the statistics' size");
  }
  return {state.context.size(), state.stats.draft_seconds, state.stats.target_seconds};
}

/// The propose step's end, once the proposer has returned `proposal` for the request made at
/// `start`: the checks, the policy's prediction, the drafted tokens appended to the context.
template <class Scalar, class PolicyT, class ProposalT, class VocabularyKnown>
[[nodiscard]] ProposedRound<ProposalT> finish_proposal(PolicyT& policy, const RoundState& state,
                                                       const RoundStart& start,
                                                       ProposalT&& proposal,
                                                       VocabularyKnown&& vocabulary_known,
                                                       RoundBuffers<Scalar>& buffers) {
  std::vector<token_t>& context = state.context;
  DecodeStats& stats = state.stats;
  if (state.vocab_size != 0) vocabulary_known();
  // Before the target sees it: the limit (so no call exceeds the context or the usable draft
  // length), the spans, the shape and, once a model call has told V, the token ids. Against
  // the round's own limit: request.limit is the proposer's to read, not to raise.
  const bool vocab_known = state.vocab_size != 0;
  check_proposal(proposal, state.limit, state.vocab_size);
  if constexpr (requires { policy.prediction(); }) {
    if (const std::optional<RoundPrediction> expected = policy.prediction()) {
      ++stats.predicted_rounds;
      stats.predicted_tokens += expected->tokens;
      stats.predicted_seconds += expected->seconds;
    }
  }
  // A proposer may hand back tokens that view the context itself (the continuation of an
  // earlier occurrence, or the tokens it appended to request.context): inserting a vector's
  // own elements into it is undefined, so those are copied out first.
  std::span<const token_t> drafted = proposal.tokens;
  if (views_storage_of(drafted, context)) {
    buffers.drafted_copy.assign(drafted.begin(), drafted.end());  // within its capacity
    drafted = buffers.drafted_copy;
  }
  context.resize(start.committed);
  context.insert(context.end(), drafted.begin(), drafted.end());
  return {std::forward<ProposalT>(proposal), start.committed, vocab_known,
          start.draft_seconds_before, start.target_seconds_before};
}

}  // namespace detail

/// \brief The round's propose step: the Proposer drafts (asking the policy), the proposal is
/// checked and its tokens appended to state.context. Then one target call over
/// `(state.context, result.committed, result.proposal)` and verify_and_commit finish the
/// round; run_round is the three in order, a batched decoder makes the target call once for
/// several sequences' proposals.
template <class Scalar, class ProposerT, class PolicyT, class DraftCoinsT, class VocabularyKnown>
[[nodiscard]] auto propose_round(ProposerT& proposer, PolicyT& policy, DraftCoinsT& draft_coins,
                                 const RoundState& state, VocabularyKnown&& vocabulary_known,
                                 RoundBuffers<Scalar>& buffers) {
  const detail::RoundStart start = detail::start_round(state, buffers);
  // ---- propose: drafted tokens and the exact distributions they were drawn from ----------
  DraftRequest request(state.context, state.limit, state.params, state.vocab_size, state.stats);
  request.bind_policy(policy);
  return detail::finish_proposal(policy, state, start, proposer.propose(request, draft_coins),
                                 vocabulary_known, buffers);
}

/// \brief The rest of the round once the target has scored `proposed` (see run_round for the
/// parameters): the rows checked, verification, the statistics, the policy told, the chunk
/// appended to `output` and to state.context. `rows` must stay valid until it returns.
template <class Scalar, class PolicyT, class VerifierT, class ProposalT, class VerificationCoinsFn,
          class VocabularyKnown>
RoundResult verify_and_commit(PolicyT& policy, VerifierT& verifier, const RoundState& state,
                              const ProposedRound<ProposalT>& proposed,
                              const LogitsRows<Scalar>& rows,
                              VerificationCoinsFn&& verification_coins,
                              VocabularyKnown&& vocabulary_known, RoundBuffers<Scalar>& buffers,
                              std::vector<token_t>& output, std::vector<float>& logprobs) {
  std::vector<token_t>& context = state.context;
  DecodeStats& stats = state.stats;
  const ProposalT& proposal = proposed.proposal;
  const std::size_t committed = proposed.committed;
  const std::size_t limit = state.limit;
  const std::size_t n = proposal.size();
  const bool tree = !proposal.is_chain();
  ++stats.target_calls;
  detail::check_target_vocab(state.vocab_size, rows.vocab_size(), n);
  vocabulary_known();
  // A first round with no model called before the target (a proposer without a model): the
  // token ids against V now.
  if (!proposed.vocab_known) detail::check_proposal(proposal, limit, state.vocab_size);
  if (!buffers.sized_for_vocab) {
    // For the longest round up front: a policy may draft few tokens for many rounds first.
    buffers.target_rows.reserve(std::max(buffers.max_draft, n) + 1, state.vocab_size,
                                static_cast<bool>(state.params.logits_processor));
    buffers.sized_for_vocab = true;
  }
  TargetRows<Scalar> target(rows, context, committed, state.params, state.logprobs,
                            buffers.target_rows,
                            tree ? proposal.parents : std::span<const std::int32_t>());

  // ---- verify: keep a prefix (a path), draw the next token -------------------------------
  VerifyResult verdict;
  if (state.params.greedy()) {
    // A deterministic target admits one lossless verifier: accept exactly its argmax path.
    const auto argmax_at = [&](std::size_t j) { return target.argmax(j); };
    verdict =
        tree ? verify_greedy_tree(proposal, argmax_at) : verify_greedy(proposal.tokens, argmax_at);
  } else {
    auto&& coins = verification_coins(n);
    // An error from the final draw (bonus or correction) names the row it samples.
    verdict =
        target.naming_rows_in_errors([&] { return verifier.verify(proposal, target, coins); });
    detail::check_verdict(verdict, n, state.vocab_size);
  }

  // ---- commit: statistics, the policy told, the chunk ------------------------------------
  std::span<const std::int32_t> path;
  if (tree) {
    path = detail::accepted_path(proposal, verdict, buffers.path);
  } else {
    for (std::size_t k = 0; k < verdict.accepted; ++k) {
      buffers.path[k] = static_cast<std::int32_t>(k);
    }
    path = std::span<const std::int32_t>(buffers.path.data(), verdict.accepted);
  }
  const std::size_t depth =
      tree ? detail::sibling_ranks(proposal, buffers.sibling_rank, buffers.tree_scratch) : n;
  ++stats.rounds;
  stats.drafted += n;
  stats.accepted += verdict.accepted;
  if (tree ? !verdict.bonus : verdict.accepted < n) ++stats.rejecting_rounds;
  for (std::size_t k = 0; k < depth; ++k) ++stats.drafted_at[k];
  for (std::size_t k = 0; k < verdict.accepted; ++k) ++stats.accepted_at[k];
  for (std::size_t i = 0; i < n; ++i) ++stats.drafted_at_rank[tree ? buffers.sibling_rank[i] : 0];
  for (const std::int32_t node : path) {
    ++stats.accepted_at_rank[tree ? buffers.sibling_rank[static_cast<std::size_t>(node)] : 0];
  }
  const std::span<const double> token_probabilities =
      proposal.token_probabilities.size() == n
          ? proposal.token_probabilities
          : std::span<const double>(buffers.certain_tokens.data(), n);
  policy.observe(RoundReport{n, verdict.accepted, limit,
                             stats.draft_seconds - proposed.draft_seconds_before,
                             stats.target_seconds - proposed.target_seconds_before,
                             token_probabilities, proposed.committed});

  for (std::size_t j = 0; j <= verdict.accepted; ++j) {
    const token_t token = j < verdict.accepted ? proposal.tokens[static_cast<std::size_t>(path[j])]
                                               : verdict.next_token;
    output.push_back(token);
    if (state.logprobs) {
      // Row 1 + node follows that node (row 0 the committed tokens), chain or tree.
      const std::size_t row = j == 0 ? 0 : static_cast<std::size_t>(path[j - 1]) + 1;
      logprobs.push_back(static_cast<float>(target.log_probability(row, token)));
    }
  }
  context.resize(committed);
  for (const std::int32_t node : path) {
    context.push_back(proposal.tokens[static_cast<std::size_t>(node)]);
  }
  context.push_back(verdict.next_token);
  return {n, verdict.accepted, token_probabilities};
}

/// \brief Runs one speculative round (see the file comment): propose_round, the one target
/// call `score`, verify_and_commit.
///
/// \param proposer, policy, verifier  the strategies (strategies.hpp), used in place
/// \param draft_coins        the drafting coins (DraftCoins, or the harness's enumerated ones)
/// \param score              `score(std::span<const token_t> context, std::size_t committed,
///                           const Proposal<S>&)` -> LogitsRows<Scalar>: the one target call
///                           (a chain: context.size() - committed + 1 rows of the whole
///                           context; a tree: one row per node plus the root's). The rows must
///                           stay valid until the round returns. It counts its own time.
/// \param verification_coins `verification_coins(n)` -> the coins of a sampled verification of
///                           n drafted tokens (not called when greedy)
/// \param vocabulary_known   `vocabulary_known()`: called after the proposer and after the
///                           target call once V is known (the decoder checks the prompt there)
/// \param output, logprobs   the chunk's tokens (and with state.logprobs, their target
///                           log-probabilities) are appended here
/// \throws std::invalid_argument for a proposal or verdict that breaks its contract,
/// std::domain_error for bad model output, anything a strategy or model throws.
template <class Scalar, class ProposerT, class PolicyT, class VerifierT, class DraftCoinsT,
          class Score, class VerificationCoinsFn, class VocabularyKnown>
RoundResult run_round(ProposerT& proposer, PolicyT& policy, VerifierT& verifier,
                      DraftCoinsT& draft_coins, const RoundState& state, Score&& score,
                      VerificationCoinsFn&& verification_coins, VocabularyKnown&& vocabulary_known,
                      RoundBuffers<Scalar>& buffers, std::vector<token_t>& output,
                      std::vector<float>& logprobs) {
  const auto proposed =
      propose_round(proposer, policy, draft_coins, state, vocabulary_known, buffers);
  // ---- target: one call scores every drafted position plus the next --------------------
  const LogitsRows<Scalar> rows =
      score(std::span<const token_t>(state.context), proposed.committed, proposed.proposal);
  return verify_and_commit(policy, verifier, state, proposed, rows, verification_coins,
                           vocabulary_known, buffers, output, logprobs);
}

}  // namespace specdec

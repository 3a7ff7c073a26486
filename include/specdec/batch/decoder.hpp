#pragma once
/// \file
/// \brief BatchedDecoder: speculative decoding of several sequences at once, with sequences
/// joining and leaving between steps (continuous batching).
///
/// One step() is one round of every sequence in the batch, built from the round's two phases
/// (round.hpp): each sequence's propose_round; ONE target call over all proposals
/// (score_batch, batch/target.hpp; a target without it is called once per sequence); each
/// sequence's verify_and_commit; then, per sequence, stop tokens, budget, context limit and its
/// callback, as StrategyDecoder does. A sequence that leaves the batch is released from the
/// models that keep state per sequence (release(id), batch/target.hpp). With a
/// ModelProposer over a BatchedDraftModel (batch/draft.hpp) the drafting is shared too: one draft
/// call per drafted position, over every sequence still drafting. Everything else is the sequence's
/// own: its GenerationConfig, its strategies (copies of the decoder's), its Rng seeded from its
/// config.seed, its context, buffers, statistics and callback. So a sequence's tokens are those
/// StrategyDecoder gives it alone, whatever else is in the batch, as long as the models' rows do
/// not depend on the batch (docs/design.md, "Batched decoding").
///
/// Draft lengths. A sequence whose policy is the goodput one (DraftLengthKind::goodput) does
/// not choose its draft length alone: before each step one plan over the whole batch
/// (batch/goodput.hpp) weighs every such sequence's expected acceptance against the cost of
/// the step's shared calls, and their policies follow it; where no drafted row pays, the step
/// is exactly plain batched decoding. A sequence alone in the batch shares no call: its policy
/// plans its rounds as under a decoder of its own, priced with the batch's curves at one
/// sequence (GoodputDraftLength::price_alone). Such a sequence's law is still its target's and its
/// greedy tokens the same as alone, but its draft lengths depend on the batch, so its sampled
/// tokens for a seed do too (the other policies keep them batch-independent).
///
/// Errors. add() rejects a duplicate id or a bad request (std::invalid_argument naming the
/// sequence) and leaves the batch unchanged. An error of one sequence (its proposal, its rows,
/// its strategies, its callback) ends that sequence only: step() returns it with a
/// SequenceError, the others continue. A batched call that throws (or returns malformed rows)
/// fails every sequence in it: step() drops the whole batch and throws a std::runtime_error
/// naming the call's sequences, with the model's exception nested.
///
/// Leaving. When a sequence leaves the batch (returned by step(), dropped with a failed batched
/// call, or still in the batch when the decoder is destroyed), the decoder calls the target's
/// and, with batched drafting, the draft's optional `release(id)` (batch/target.hpp): a model
/// that keeps a KV cache per sequence frees it then.
///
/// Thread safety: a decoder and its models are used by one thread at a time.

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <sstream>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "specdec/batch/draft.hpp"
#include "specdec/batch/goodput.hpp"
#include "specdec/batch/target.hpp"
#include "specdec/coins.hpp"
#include "specdec/decoder.hpp"
#include "specdec/detail/error.hpp"
#include "specdec/detail/model_traits.hpp"
#include "specdec/detail/timer.hpp"
#include "specdec/draft_length/configured.hpp"
#include "specdec/draft_length/goodput.hpp"
#include "specdec/generation.hpp"
#include "specdec/proposal.hpp"
#include "specdec/proposers/model.hpp"
#include "specdec/requirements.hpp"
#include "specdec/rng.hpp"
#include "specdec/round.hpp"
#include "specdec/stats.hpp"
#include "specdec/strategies.hpp"
#include "specdec/tree.hpp"
#include "specdec/types.hpp"
#include "specdec/verifiers/configured.hpp"

namespace specdec {

/// \brief The error that ended one sequence of a batch. what() names the sequence; the original
/// exception is nested (std::rethrow_if_nested gives it back with its own type).
class SequenceError : public std::runtime_error, public std::nested_exception {
 public:
  /// \brief Must be constructed while the original exception is being handled.
  SequenceError(sequence_id id, const std::string& message)
      : std::runtime_error(message), id_(id) {}
  [[nodiscard]] sequence_id id() const noexcept { return id_; }

 private:
  sequence_id id_;
};

/// \brief A sequence that left the batch.
struct FinishedSequence {
  sequence_id id = 0;
  /// Its tokens and statistics (up to the error, if there was one); finish_reason is
  /// meaningless when `error` is set.
  GenerationResult result;
  std::exception_ptr error;  ///< a SequenceError if the sequence failed, else null
};

/// \brief What the batch's engine calls did, over the decoder's life.
struct BatchStats {
  std::size_t steps = 0;               ///< step() calls that ran a round of at least one sequence
  std::size_t target_calls = 0;        ///< target engine calls (one per step with score_batch)
  std::size_t target_rows = 0;         ///< rows those calls scored
  std::size_t draft_calls = 0;         ///< draft engine calls
  std::size_t draft_rows = 0;          ///< rows those calls returned
  std::size_t rounds = 0;              ///< sequence rounds (a step runs one per sequence)
  std::size_t tokens = 0;              ///< tokens emitted, all sequences
  std::size_t sequences_added = 0;     ///< add() calls that succeeded
  std::size_t sequences_finished = 0;  ///< sequences step() returned (errors included)
  double target_seconds = 0;           ///< wall time inside target calls
  double draft_seconds = 0;            ///< wall time inside draft calls

  /// \brief Mean rows per target call: the batch's amortisation of the target.
  [[nodiscard]] double rows_per_target_call() const noexcept {
    return target_calls == 0 ? 0.0
                             : static_cast<double>(target_rows) / static_cast<double>(target_calls);
  }
  /// \brief Mean sequence rounds per target call (1 without score_batch).
  [[nodiscard]] double rounds_per_target_call() const noexcept {
    return target_calls == 0 ? 0.0
                             : static_cast<double>(rounds) / static_cast<double>(target_calls);
  }
};

namespace detail {

/// The current exception's message without the library prefix ("unknown exception" for a
/// non-std one); for messages that wrap it.
[[nodiscard]] inline std::string current_message() {
  try {
    throw;
  } catch (const std::exception& error) {
    return std::string(message_without_prefix(error.what()));
  } catch (...) {
    return "unknown exception";
  }
}

/// The goodput policy inside a sequence's policy, if that is what it runs: its draft lengths
/// are then planned for the whole batch (batch/goodput.hpp).
template <class Policy>
[[nodiscard]] GoodputDraftLength* batch_planned_policy(Policy& policy) noexcept {
  if constexpr (std::is_same_v<Policy, GoodputDraftLength>) {
    return &policy;
  } else if constexpr (std::is_same_v<Policy, ConfiguredDraftLength>) {
    return policy.kind() == DraftLengthKind::goodput ? &policy.goodput() : nullptr;
  } else {
    return nullptr;
  }
}

/// Whether a proposer's drafting can be shared: a ModelProposer over a BatchedDraftModel (whose
/// draft_batch, if it declares one, is checked).
template <class Proposer>
struct batched_draft_proposer : std::false_type {
  static constexpr bool requirements_checked = true;
};
template <class Draft>
struct batched_draft_proposer<ModelProposer<Draft>> : std::bool_constant<BatchedDraftModel<Draft>> {
  static constexpr bool requirements_checked = BatchedModelRequirements<Draft>::satisfied;
};

}  // namespace detail

/// \brief Speculative decoding of several sequences at once (see the file comment).
///
/// \tparam Target   a TargetModel, optionally a BatchedTargetModel (score_batch)
/// \tparam Proposer, Policy, Verifier  the strategies (strategies.hpp); every sequence gets
///                  copies of the ones given to the constructor, begun with its own config
///
/// The target is held by reference (not owned; it must outlive the decoder, whose destructor
/// releases the sequences still in the batch from it and the draft). Chain proposals
/// only: a tree proposal ends its sequence with an error.
template <class Target, class Proposer, class Policy = ConfiguredDraftLength,
          class Verifier = ConfiguredVerifier>
class BatchedDecoder {
  static_assert(detail::diagnosed<detail::TargetModelRequirements<Target>>);
  static_assert(detail::BatchedModelRequirements<Target>::satisfied);
  static_assert(detail::batched_draft_proposer<Proposer>::requirements_checked);
  static_assert(detail::diagnosed<detail::StrategyRequirements<Proposer, Policy, Verifier>>);

  /// Drafting shared across sequences: a ModelProposer over a draft with draft_batch.
  static constexpr bool kBatchedDraft = detail::batched_draft_proposer<Proposer>::value;

 public:
  using ChunkCallback = std::function<bool(std::span<const token_t>)>;

  /// \brief Binds the target (not owned); `proposer`, `policy`, `verifier` are the prototypes
  /// every sequence copies. `batch_goodput` is the cost model of the draft lengths planned for
  /// the sequences whose policy is the goodput one (batch/goodput.hpp; default: measured from
  /// the decoder's own calls).
  /// \throws std::invalid_argument for bad BatchGoodputOptions.
  BatchedDecoder(Target& target, Proposer proposer, Policy policy = {}, Verifier verifier = {},
                 BatchGoodputOptions batch_goodput = {})
      : target_(&target),
        proposer_(std::move(proposer)),
        policy_(std::move(policy)),
        verifier_(std::move(verifier)),
        planner_(std::move(batch_goodput)) {
    planner_.set_call_shape(BatchedTargetModel<Target>, kBatchedDraft,
                            detail::cuts_equal_micro_batches(target));
  }

  /// \brief Releases every sequence still in the batch from the models (release(id)).
  ~BatchedDecoder() {
    for (const auto& sequence : sequences_) release(sequence->id);
  }
  BatchedDecoder(const BatchedDecoder&) = delete;
  BatchedDecoder& operator=(const BatchedDecoder&) = delete;
  /// \brief The moved-from decoder is empty (its sequences moved with the batch).
  BatchedDecoder(BatchedDecoder&&) = default;
  BatchedDecoder& operator=(BatchedDecoder&&) = delete;

  /// \brief Adds sequence `id`: generation of up to config.max_new_tokens tokens after
  /// `prompt`, its first round in the next step(). `on_chunk(std::span<const token_t>)` is
  /// called with each round's committed tokens, as StrategyDecoder::generate's; returning false
  /// ends the sequence (FinishReason::callback).
  /// \throws std::invalid_argument naming the sequence: an id already in the batch, a bad
  /// config, an empty prompt, a prompt longer than config.max_context, a negative token. The
  /// batch is unchanged then.
  template <class OnChunk>
  void add(sequence_id id, std::span<const token_t> prompt, const GenerationConfig& config,
           OnChunk on_chunk) {
    static_assert(detail::diagnosed<detail::ChunkCallbackRequirements<OnChunk>>);
    if (find(id) != nullptr) {
      detail::throw_invalid_argument("sequence ", id,
                                     " is already in the batch; expected an id that is not "
                                     "being decoded");
    }
    std::unique_ptr<Sequence> sequence;
    try {
      detail::validate_request(prompt, config);
      sequence = std::make_unique<Sequence>(id, prompt, config, ChunkCallback(std::move(on_chunk)),
                                            proposer_, policy_, verifier_);
    } catch (const std::invalid_argument&) {
      detail::throw_invalid_argument("sequence ", id, ": ", detail::current_message());
    }
    // Per-step lists, sized when a sequence joins so that a step allocates nothing.
    const std::size_t capacity = sequences_.size() + 1;
    score_requests_.reserve(capacity);
    draft_requests_.reserve(capacity);
    in_call_.reserve(capacity);
    longest_draft_ = std::max(longest_draft_, sequence->usable_draft_length);
    planner_.reserve(capacity, longest_draft_);
    sequences_.push_back(std::move(sequence));
    ++stats_.sequences_added;
  }

  /// \brief add() without a callback.
  void add(sequence_id id, std::span<const token_t> prompt, const GenerationConfig& config) {
    add(id, prompt, config, [](std::span<const token_t>) { return true; });
  }

  /// \brief Ends sequence `id` at the next step (FinishReason::cancelled, unless it finishes
  /// first); callable from a callback. Returns whether `id` is in the batch.
  bool cancel(sequence_id id) noexcept {
    Sequence* sequence = find(id);
    if (sequence == nullptr) return false;
    sequence->cancelled = true;
    return true;
  }

  /// \brief One round of every sequence in the batch (see the file comment); returns the
  /// sequences that finished, failed or were cancelled, removed from the batch.
  /// \throws std::runtime_error (a model's exception nested) when a batched call fails; the
  /// batch is then empty.
  std::vector<FinishedSequence> step() {
    std::vector<FinishedSequence> finished;
    remove_finished(finished);
    if (sequences_.empty()) return finished;
    ++stats_.steps;
    for (auto& sequence : sequences_) sequence->in_round = true;
    const auto start = std::chrono::steady_clock::now();
    const std::size_t tokens_before = stats_.tokens;
    const std::size_t sequences = sequences_.size();
    std::size_t context = 0;  // the sequences' committed tokens, for the plan's guard
    for (const auto& sequence : sequences_) context += sequence->context.size();
    propose_all();
    score_and_commit_all();
    if (prompt_step_) {
      planner_.skip_step();
    } else if (planned_step_) {
      planner_.observe_step(detail::seconds_since(start), stats_.tokens - tokens_before, sequences,
                            context / sequences);
    }
    for (auto& sequence : sequences_) sequence->in_round = false;
    remove_finished(finished);
    return finished;
  }

  /// \brief Steps until the batch is empty; returns every sequence that left it, in order.
  std::vector<FinishedSequence> run() {
    std::vector<FinishedSequence> all;
    while (!empty()) {
      for (FinishedSequence& done : step()) all.push_back(std::move(done));
    }
    return all;
  }

  [[nodiscard]] bool empty() const noexcept { return sequences_.empty(); }
  [[nodiscard]] std::size_t size() const noexcept { return sequences_.size(); }
  [[nodiscard]] bool contains(sequence_id id) const noexcept { return find(id) != nullptr; }
  [[nodiscard]] const BatchStats& stats() const noexcept { return stats_; }
  /// \brief The batch-wide goodput plan (its cost curves, its last step's plan).
  [[nodiscard]] const BatchGoodputPlanner& planner() const noexcept { return planner_; }

 private:
  /// One sequence's generation: StrategyDecoder::run's state, kept between steps.
  struct Sequence {
    Sequence(sequence_id id_, std::span<const token_t> prompt_, const GenerationConfig& config_,
             ChunkCallback on_chunk_, const Proposer& proposer_prototype,
             const Policy& policy_prototype, const Verifier& verifier_prototype)
        : id(id_),
          config(config_),
          prompt(prompt_.begin(), prompt_.end()),
          on_chunk(std::move(on_chunk_)),
          proposer(proposer_prototype),
          policy(policy_prototype),
          verifier(verifier_prototype),
          rng(config_.seed),
          draft_coins(rng),
          start(std::chrono::steady_clock::now()) {
      begin(proposer);
      begin(policy);
      begin(verifier);
      const std::size_t reserve = std::min(config.max_new_tokens, detail::kMaxReservedTokens);
      result.tokens.reserve(reserve);
      if (config.logprobs) result.logprobs.reserve(reserve);
      usable_draft_length = detail::usable_draft_length(config, proposer);
      prepare_round_statistics(result.stats, usable_draft_length);
      context.reserve(prompt.size() + reserve + usable_draft_length + 1);
      context.assign(prompt.begin(), prompt.end());
      acceptance_coins.resize(usable_draft_length);
      buffers.prepare(usable_draft_length, context.capacity());
      if constexpr (requires { verifier.reserve_nodes(usable_draft_length); }) {
        verifier.reserve_nodes(usable_draft_length);
      }
      finished = config.max_new_tokens == 0;
    }

    template <class Strategy>
    void begin(Strategy& strategy) {
      if constexpr (requires { strategy.begin(config); }) strategy.begin(config);
    }

    [[nodiscard]] RoundState round_state() {
      return RoundState{context, limit, config.sampling, config.logprobs, vocab_size, result.stats};
    }
    /// The prompt against V, once, as soon as a model call has told V.
    [[nodiscard]] auto vocabulary_known() {
      return [this] {
        if (prompt_checked) return;
        detail::check_prompt_vocabulary(prompt, vocab_size);
        prompt_checked = true;
      };
    }
    [[nodiscard]] auto verification_coins() {
      return [this](std::size_t n) {
        for (std::size_t i = 0; i < n; ++i) acceptance_coins[i] = rng.uniform01();
        return VerificationCoins(std::span<const double>(acceptance_coins.data(), n),
                                 rng.uniform01());
      };
    }
    /// Whether this step's later phases still concern it.
    [[nodiscard]] bool active() const noexcept { return in_round && !finished && !cancelled; }

    sequence_id id;
    GenerationConfig config;
    std::vector<token_t> prompt;
    ChunkCallback on_chunk;
    Proposer proposer;
    Policy policy;
    Verifier verifier;
    Rng rng;
    DraftCoins draft_coins;
    std::chrono::steady_clock::time_point start;
    GenerationResult result;
    std::vector<token_t> context;          // (prompt + budget + K) committed + speculative
    std::vector<double> acceptance_coins;  // (K) usable draft length
    RoundBuffers<float> buffers;           // the round's working memory
    std::size_t usable_draft_length = 0;
    std::size_t limit = 0;       // this round's
    std::size_t vocab_size = 0;  // learned from its first model call
    bool prompt_checked = false;
    bool proposer_sized = false;            // reserve_proposer, once V is known
    bool prefilled = false;                 // its first target call (which read the prompt) is done
    bool draft_prefilled = false;           // its first draft call (which read the prompt) is done
    GoodputDraftLength* planned = nullptr;  // this step: its goodput policy, if the batch plans
    std::size_t plan_index = 0;             //   its draft length (its entry in the plan)
    std::optional<detail::RoundStart> round_start;           // batched drafting's round
    std::optional<DraftRequest> draft_request;               //   "
    bool drafting = false;                                   //   "
    std::optional<ProposedRound<Proposal<float>>> proposed;  // between propose and commit
    bool in_round = false;   // joined before this step's rounds began
    bool finished = false;   // ended (result or error); removed at the end of the step
    bool cancelled = false;  // cancel() was called
    std::exception_ptr error;
  };

  /// Sequence `id` left the batch: the models that keep state per sequence forget it.
  void release(sequence_id id) noexcept {
    if constexpr (detail::HasRelease<Target>) target_->release(id);
    if constexpr (kBatchedDraft) {
      if constexpr (detail::HasRelease<std::remove_cvref_t<decltype(proposer_.draft())>>) {
        proposer_.draft().release(id);
      }
    }
  }

  Sequence* find(sequence_id id) const noexcept {
    for (const auto& sequence : sequences_) {
      if (sequence->id == id) return sequence.get();
    }
    return nullptr;
  }

  /// Runs one phase of one sequence; an exception ends that sequence only.
  template <class Phase>
  void guarded(Sequence& sequence, Phase&& phase) {
    if (!sequence.active()) return;
    try {
      phase();
    } catch (...) {
      sequence.error = std::make_exception_ptr(SequenceError(
          sequence.id,
          detail::error_message("sequence ", sequence.id, ": ", detail::current_message())));
      sequence.finished = true;
    }
  }

  /// A batched call failed: every sequence is mid-round, so the batch is dropped; the error
  /// names the call's sequences and nests the model's exception.
  [[noreturn]] void fail_batch(const char* call, std::span<Sequence* const> in_call) {
    std::ostringstream ids;
    for (std::size_t i = 0; i < in_call.size(); ++i) ids << (i ? ", " : "") << in_call[i]->id;
    const std::string message =
        detail::error_message("the batched ", call, " call for sequences ", ids.str(),
                              " failed; the batch was dropped: ", detail::current_message());
    for (const auto& sequence : sequences_) release(sequence->id);
    sequences_.clear();
    std::throw_with_nested(std::runtime_error(message));
  }

  /// Every sequence's limit for this step, before any proposer runs: within its budget and
  /// context (as StrategyDecoder); for the sequences whose policy is the goodput one, from one
  /// plan over the whole batch (batch/goodput.hpp), which their policies then follow.
  void choose_limits() {
    planner_.clear();
    bool planning = false;
    prompt_step_ = false;
    const bool alone = std::ranges::count_if(sequences_, [](const auto& sequence) {
                         return sequence->active();
                       }) == 1;
    for (auto& sequence : sequences_) {
      Sequence& s = *sequence;
      if (!s.active()) continue;
      s.limit = detail::round_limit(s.config, s.usable_draft_length, s.result.stats.emitted,
                                    s.context.size());
      s.planned = detail::batch_planned_policy(s.policy);
      prompt_step_ = prompt_step_ || !s.prefilled;
      if (s.planned != nullptr && s.limit > 0 && alone) {
        // A batch of one shares no call: its policy plans the round as a decoder of its own
        // would, in the batch's cost model. (Planned as a batch, whose plan fixes the length
        // before drafting, B = 1 ran at 0.97 of the single-sequence decoder on the shipped
        // pair's f16 weights through llama.cpp.)
        s.planned->price_alone(planner_.alone_costs());
        s.planned = nullptr;
      } else if (s.planned != nullptr && s.limit > 0) {
        // A sequence that has not drafted yet probes after one plain step: its acceptance is
        // the prior's until a verdict comes, and waiting probe_interval steps for the first
        // one left short generations plain for a good part of their length.
        const std::size_t wait =
            s.result.stats.drafted == 0 ? 1 : planner_.options().probe_interval;
        const std::size_t plain_steps = s.planned->plain_streak();
        s.plan_index = planner_.add_planned(s.planned->expected_acceptance(s.limit),
                                            s.planned->optimistic_acceptance(), plain_steps >= wait,
                                            plain_steps);
        planning = true;
      } else {
        s.planned = nullptr;
        s.plan_index = planner_.add_fixed(s.limit);
      }
    }
    planned_step_ = planning;
    if (!planning) return;
    planner_.solve();
    for (auto& sequence : sequences_) {
      Sequence& s = *sequence;
      if (!s.active() || s.planned == nullptr) continue;
      s.limit = planner_.length(s.plan_index);
      prompt_step_ = prompt_step_ || (s.limit > 0 && !s.draft_prefilled);
      // A probe drafts its whole length: the batch's threshold belongs to the rows it planned.
      s.planned->follow_batch_plan(s.limit,
                                   planner_.probing(s.plan_index) ? 0.0 : planner_.threshold());
    }
  }

  // ---- propose ------------------------------------------------------------------------------
  void propose_all() {
    choose_limits();
    if constexpr (kBatchedDraft) {
      propose_all_batched();
    } else {
      for (auto& sequence : sequences_) {
        Sequence& s = *sequence;
        const std::size_t draft_calls_before = s.result.stats.draft_calls;
        const double draft_seconds_before = s.result.stats.draft_seconds;
        guarded(s, [&] {
          s.proposed.emplace(propose_round(s.proposer, s.policy, s.draft_coins, s.round_state(),
                                           s.vocabulary_known(), s.buffers));
        });
        // Each sequence's proposer called the draft itself: one row per call.
        const std::size_t calls = s.result.stats.draft_calls - draft_calls_before;
        stats_.draft_calls += calls;
        stats_.draft_rows += calls;
        if (calls > 0) {
          if (s.draft_prefilled) {
            planner_.observe_draft_call(1, (s.result.stats.draft_seconds - draft_seconds_before) /
                                               static_cast<double>(calls));
          }
          s.draft_prefilled = true;
        }
      }
    }
  }

  /// The propose phase with one draft_batch call per drafted position: the steps of
  /// propose_round, with ModelProposer's propose() unrolled across sequences.
  void propose_all_batched() {
    for (auto& sequence : sequences_) {
      Sequence& s = *sequence;
      guarded(s, [&] {
        const RoundState state = s.round_state();
        s.round_start = detail::start_round(state, s.buffers);
        s.draft_request.emplace(state.context, state.limit, state.params, state.vocab_size,
                                state.stats);
        s.draft_request->bind_policy(s.policy);
        s.proposer.start(*s.draft_request);
        s.drafting = true;
      });
    }
    for (;;) {
      draft_requests_.clear();
      in_call_.clear();
      for (auto& sequence : sequences_) {
        Sequence& s = *sequence;
        guarded(s, [&] {
          if (!s.drafting) return;
          s.drafting = s.proposer.wants_row(*s.draft_request);
          if (!s.drafting) return;
          draft_requests_.push_back({s.id, s.proposer.row_context(*s.draft_request)});
          in_call_.push_back(&s);
        });
      }
      if (in_call_.empty()) break;
      double seconds = 0;
      LogitsRows<float> rows;
      try {
        auto&& result = draft_result_.hold([&]() -> decltype(auto) {
          return detail::timed_call(seconds, [&]() -> decltype(auto) {
            return proposer_.draft().draft_batch(
                std::span<const DraftStepRequest>(draft_requests_));
          });
        });
        rows = detail::as_target_rows(result, in_call_.size(), "draft_batch");
      } catch (...) {
        fail_batch("draft", in_call_);
      }
      ++stats_.draft_calls;
      stats_.draft_rows += in_call_.size();
      stats_.draft_seconds += seconds;
      // A call that read some sequence's prompt says nothing about a step's cost.
      if (std::all_of(in_call_.begin(), in_call_.end(),
                      [](const Sequence* s) { return s->draft_prefilled; })) {
        planner_.observe_draft_call(in_call_.size(), seconds);
      }
      for (Sequence* s : in_call_) s->draft_prefilled = true;
      for (std::size_t i = 0; i < in_call_.size(); ++i) {
        Sequence& s = *in_call_[i];
        ++s.result.stats.draft_calls;
        s.result.stats.draft_seconds += seconds;
        guarded(s, [&] { s.proposer.take_row(*s.draft_request, s.draft_coins, rows.row(i)); });
      }
    }
    for (auto& sequence : sequences_) {
      Sequence& s = *sequence;
      guarded(s, [&] {
        s.proposed.emplace(detail::finish_proposal(s.policy, s.round_state(), *s.round_start,
                                                   s.proposer.finish(*s.draft_request),
                                                   s.vocabulary_known(), s.buffers));
      });
    }
  }

  // ---- one target call, then verify and commit per sequence ---------------------------------
  void score_and_commit_all() {
    score_requests_.clear();
    in_call_.clear();
    std::size_t total_rows = 0;
    for (auto& sequence : sequences_) {
      Sequence& s = *sequence;
      guarded(s, [&] {
        const Proposal<float>& proposal = s.proposed->proposal;
        if (!proposal.is_chain()) {
          detail::throw_invalid_argument(
              "proposer returned a tree of ", proposal.size(),
              " nodes; expected a chain (BatchedDecoder scores chains only)");
        }
        const std::size_t rows = proposal.size() + 1;
        score_requests_.push_back(
            {s.id, std::span<const token_t>(s.context), s.proposed->committed, rows});
        in_call_.push_back(&s);
        total_rows += rows;
      });
    }
    if (in_call_.empty()) return;

    if constexpr (BatchedTargetModel<Target>) {
      double seconds = 0;
      LogitsRows<float> rows;
      try {
        auto&& result = batch_result_.hold([&]() -> decltype(auto) {
          return detail::timed_call(seconds, [&]() -> decltype(auto) {
            return target_->score_batch(std::span<const ScoreRequest>(score_requests_));
          });
        });
        rows = detail::as_target_rows(result, total_rows, "score_batch");
      } catch (...) {
        fail_batch("target", in_call_);
      }
      ++stats_.target_calls;
      stats_.target_rows += total_rows;
      stats_.target_seconds += seconds;
      if (std::all_of(in_call_.begin(), in_call_.end(),
                      [](const Sequence* s) { return s->prefilled; })) {
        planner_.observe_target_call(total_rows, seconds);
      }
      for (Sequence* s : in_call_) s->prefilled = true;
      planner_.last_call(total_rows);
      std::size_t first_row = 0;
      for (std::size_t i = 0; i < in_call_.size(); ++i) {
        Sequence& s = *in_call_[i];
        const std::size_t n = score_requests_[i].rows;
        const LogitsRows<float> own(
            rows.values().subspan(first_row * rows.vocab_size(), n * rows.vocab_size()),
            rows.vocab_size());
        first_row += n;
        s.result.stats.target_seconds += seconds;
        commit(s, own);
      }
    } else {
      // Without score_batch: one call per sequence, each verified before the next call (a
      // model's rows may be a view valid until its next call).
      for (std::size_t i = 0; i < in_call_.size(); ++i) {
        Sequence& s = *in_call_[i];
        const ScoreRequest& request = score_requests_[i];
        guarded(s, [&] {
          const double before = s.result.stats.target_seconds;
          auto&& result = chain_result_.hold([&]() -> decltype(auto) {
            return detail::timed_call(s.result.stats.target_seconds, [&]() -> decltype(auto) {
              return (*target_)(request.context, request.rows);
            });
          });
          ++stats_.target_calls;
          stats_.target_rows += request.rows;
          stats_.target_seconds += s.result.stats.target_seconds - before;
          if (s.prefilled) {
            planner_.observe_target_call(request.rows, s.result.stats.target_seconds - before);
          }
          s.prefilled = true;
          commit(s, detail::as_target_rows(result, request.rows));
        });
      }
    }
  }

  /// The rest of the round, then what StrategyDecoder does after it: stop tokens, budget,
  /// context limit, the callback.
  void commit(Sequence& s, const LogitsRows<float>& rows) {
    guarded(s, [&] {
      const std::size_t chunk_start = s.result.tokens.size();
      verify_and_commit(s.policy, s.verifier, s.round_state(), *s.proposed, rows,
                        s.verification_coins(), s.vocabulary_known(), s.buffers, s.result.tokens,
                        s.result.logprobs);
      s.proposed.reset();
      // Between rounds (no proposal views the proposer's buffers): sized for the longest
      // round once, as soon as V is known.
      if (!s.proposer_sized && s.vocab_size != 0) {
        detail::reserve_proposer(s.proposer, s.vocab_size, s.usable_draft_length,
                                 s.config.sampling);
        s.proposer_sized = true;
      }
      ++stats_.rounds;
      const std::size_t emitted_before = s.result.stats.emitted;
      const bool finished = detail::end_chunk(s.result, chunk_start, s.config, s.context.size());
      stats_.tokens += s.result.stats.emitted - emitted_before;
      const std::span<const token_t> chunk =
          std::span<const token_t>(s.result.tokens).subspan(chunk_start);
      s.finished = finished;  // before the callback: it may throw
      if (!s.on_chunk(chunk) && !finished) {
        s.result.finish_reason = FinishReason::callback;
        s.finished = true;
      }
    });
  }

  /// Moves every finished or cancelled sequence out of the batch, in order.
  void remove_finished(std::vector<FinishedSequence>& out) {
    for (auto& sequence : sequences_) {
      Sequence& s = *sequence;
      if (!s.finished && !s.cancelled) continue;
      if (!s.finished) s.result.finish_reason = FinishReason::cancelled;
      DecodeStats& stats = s.result.stats;
      stats.total_seconds = detail::seconds_since(s.start);
      stats.library_seconds = stats.total_seconds - stats.draft_seconds - stats.target_seconds;
      // What a goodput sequence learnt of the pair (its acceptance calibration by the draft's
      // probability, which carries over between generations as in StrategyDecoder) is where
      // the next sequence starts; the other policies' prototypes stay as given, so their
      // sequences decode as alone.
      if (s.error == nullptr && detail::batch_planned_policy(s.policy) != nullptr) {
        policy_ = s.policy;
      }
      out.push_back({s.id, std::move(s.result), s.error});
      ++stats_.sequences_finished;
      release(s.id);
    }
    std::erase_if(sequences_,
                  [](const std::unique_ptr<Sequence>& s) { return s->finished || s->cancelled; });
  }

  Target* target_;
  Proposer proposer_;  // the prototypes each sequence copies
  Policy policy_;
  Verifier verifier_;
  std::vector<std::unique_ptr<Sequence>> sequences_;  // in the order they joined
  std::vector<ScoreRequest> score_requests_;          // (sequences) this step's target call
  std::vector<DraftStepRequest> draft_requests_;      // (sequences) one batched draft call
  std::vector<Sequence*> in_call_;                    // (sequences) who is in that call
  BatchStats stats_;
  BatchGoodputPlanner planner_;
  std::size_t longest_draft_ = 0;  // the longest usable draft length of any sequence that joined
  bool planned_step_ = false;      // this step's lengths came from the plan
  bool prompt_step_ = false;       // this step's calls read some sequence's prompt
  detail::HeldResult<typename detail::chain_call_result<Target>::type>
      chain_result_;  // the last per-sequence call's rows, until the next call
  struct NoBatchCall {
    using type = std::span<const float>;
  };
  template <class M, bool = detail::HasScoreBatch<M>>
  struct score_batch_call {
    using type = detail::score_batch_result_t<M>;
  };
  template <class M>
  struct score_batch_call<M, false> : NoBatchCall {};
  template <class P, bool = kBatchedDraft>
  struct draft_batch_call : NoBatchCall {};
  template <class P>
  struct draft_batch_call<P, true> {
    using type = decltype(std::declval<P&>().draft().draft_batch(
        std::declval<std::span<const DraftStepRequest>>()));
  };
  detail::HeldResult<typename score_batch_call<Target>::type> batch_result_;  // until next call
  detail::HeldResult<typename draft_batch_call<Proposer>::type> draft_result_;
};

}  // namespace specdec

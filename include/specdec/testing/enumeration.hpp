#pragma once
/// \file
/// \brief Exact enumeration (testing.hpp): the target's law, EnumeratingCoins, and the exact
/// law of the library's own round (round.hpp) and of whole generations, in double precision.

#include <algorithm>
#include <array>
#include <cmath>
#include <compare>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <numeric>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "specdec/coins.hpp"
#include "specdec/detail/exact_float.hpp"
#include "specdec/enum_names.hpp"
#include "specdec/proposal.hpp"
#include "specdec/round.hpp"
#include "specdec/sampling.hpp"
#include "specdec/sampling/laws.hpp"
#include "specdec/stats.hpp"
#include "specdec/strategies.hpp"
#include "specdec/target_rows.hpp"
#include "specdec/testing/statistics.hpp"
#include "specdec/tree.hpp"
#include "specdec/types.hpp"
#include "specdec/verify.hpp"

namespace specdec::testing {

// ============================================================================================
// Exact laws
// ============================================================================================

/// \brief The exact law of the target's first `length` tokens after `context`, each row
/// processed as the decoder processes it (logits processor, temperature, filters; greedy: the
/// argmax path) in double. `target` is a TargetModel-like callable returning n rows of doubles.
template <class TargetFn>
[[nodiscard]] Law target_law(TargetFn&& target, const SamplingParams& params,
                             const Sequence& context, std::size_t length) {
  Law law;
  std::vector<double> filter_scratch;
  std::function<void(Sequence&, std::size_t, double)> extend = [&](Sequence& sequence,
                                                                   std::size_t start, double mass) {
    if (sequence.size() - start == length) {
      law[Sequence(sequence.begin() + static_cast<std::ptrdiff_t>(start), sequence.end())] += mass;
      return;
    }
    const std::vector<double> row = target(std::span<const token_t>(sequence), std::size_t{1});
    std::vector<double> processed(row.size());
    const std::span<const double> logits = specdec::detail::apply_processor_into(
        params, std::span<const token_t>(sequence), std::span<const double>(row),
        std::span<double>(processed));
    if (params.greedy()) {
      sequence.push_back(argmax(logits));
      extend(sequence, start, mass);
      sequence.pop_back();
      return;
    }
    const TokenDistribution<double> p = process_logits(logits, params, filter_scratch);
    for (std::size_t v = 0; v < logits.size(); ++v) {
      const double probability = p.probability(static_cast<token_t>(v));
      if (!(probability > 0)) continue;
      sequence.push_back(static_cast<token_t>(v));
      extend(sequence, start, mass * probability);
      sequence.pop_back();
    }
  };
  Sequence sequence = context;
  extend(sequence, context.size(), 1.0);
  return law;
}

/// \brief A coin source that enumerates instead of sampling (see the file comment).
///
/// Drive it with `do { coins.start(); ...run the strategy...; use coins.probability(); }
/// while (coins.next());` — every run follows one branch of the strategy's execution tree and
/// probability() is that branch's exact probability; the branches of all runs partition the
/// coin space. It also checks the coin contract: in verification (after begin_verification(n)),
/// each acceptance coin i < n is read at most once and the final coin at most once — the
/// decoder's coins are single numbers, so reading one twice would correlate decisions the
/// enumeration treats as independent. Violations throw std::logic_error.
class EnumeratingCoins {
 public:
  /// \brief Starts a run (the first, or the one next() prepared).
  void start() {
    depth_ = 0;
    probability_ = 1.0;
    verifying_ = false;
    final_read_ = false;
    read_.clear();
  }

  /// \brief Prepares the next unexplored branch; false when every branch has been run.
  bool next() {
    while (!script_.empty() && script_.back().choice + 1 == script_.back().options) {
      script_.pop_back();
    }
    if (script_.empty()) return false;
    ++script_.back().choice;
    return true;
  }

  /// \brief The exact probability of the branch the current run followed.
  [[nodiscard]] double probability() const noexcept { return probability_; }

  /// \brief From now on the run is verifying a proposal of n tokens (n acceptance coins).
  void begin_verification(std::size_t n) {
    verifying_ = true;
    read_.assign(n, false);
  }

  template <SamplingLaw Law>
  [[nodiscard]] token_t draw(const Law& law) {
    if (verifying_) {
      if (final_read_) {
        throw std::logic_error(
            "specdec::testing: a verifier drew twice from the final coin; the decoder has one "
            "final coin per round, so the second draw would not be independent");
      }
      final_read_ = true;
    }
    std::vector<token_t> tokens;
    std::vector<double> masses;
    double total = 0;
    for (std::size_t v = 0; v < law.vocab_size(); ++v) {
      const double mass = static_cast<double>(law.mass(static_cast<token_t>(v)));
      if (mass > 0) {
        tokens.push_back(static_cast<token_t>(v));
        masses.push_back(mass);
        total += mass;
      }
    }
    if (!(total > 0)) {
      throw std::logic_error("specdec::testing: a law with no positive mass was drawn from");
    }
    for (double& mass : masses) mass /= total;
    return tokens[choose(masses)];
  }

  [[nodiscard]] bool accept(std::size_t position, double probability) {
    if (!verifying_ || position >= read_.size()) {
      throw std::logic_error("specdec::testing: acceptance coin " + std::to_string(position) +
                             " read outside verification or beyond the drafted tokens");
    }
    if (read_[position]) {
      throw std::logic_error("specdec::testing: acceptance coin " + std::to_string(position) +
                             " read twice; each coin may decide one comparison");
    }
    read_[position] = true;
    if (!(probability > 0)) return false;  // coin < 0 (or NaN) never holds
    if (probability >= 1) return true;     // coin in [0, 1) always below
    const double outcomes[2] = {probability, 1.0 - probability};
    return choose(outcomes) == 0;
  }

 private:
  struct Event {
    std::size_t choice;
    std::size_t options;
  };

  std::size_t choose(std::span<const double> probabilities) {
    if (depth_ == script_.size()) {
      script_.push_back({0, probabilities.size()});
    } else if (script_[depth_].options != probabilities.size()) {
      throw std::logic_error(
          "specdec::testing: a strategy's randomness changed between runs that made the same "
          "choices so far (is it deterministic given its coins and inputs?)");
    }
    const std::size_t choice = script_[depth_++].choice;
    probability_ *= probabilities[choice];
    return choice;
  }

  std::vector<Event> script_;
  std::size_t depth_ = 0;
  double probability_ = 1.0;
  bool verifying_ = false;
  bool final_read_ = false;
  std::vector<bool> read_;
};

/// \brief The rows of a tree call (tree.hpp) computed from a chain-call target, one call per
/// path: row 0 after `context`, row 1 + i after context + the path root -> node i.
template <class Scalar, class TargetFn>
[[nodiscard]] std::vector<Scalar> tree_rows(TargetFn&& target, const Sequence& context,
                                            const Proposal<Scalar>& proposal) {
  std::vector<Scalar> rows;
  std::vector<std::int32_t> path;
  for (std::int32_t node = -1; node < static_cast<std::int32_t>(proposal.size()); ++node) {
    Sequence path_context = context;
    const std::size_t length = specdec::detail::path_to(proposal, node, path);
    for (std::size_t k = 0; k < length; ++k) {
      path_context.push_back(proposal.tokens[static_cast<std::size_t>(path[k])]);
    }
    const auto row = target(std::span<const token_t>(path_context), std::size_t{1});
    rows.insert(rows.end(), row.begin(), row.end());
  }
  return rows;
}

/// \brief What a round's history records for a draft-length policy: the emitted chunk and the
/// drafted tokens' probabilities (their count is the number drafted).
struct RoundOutcome {
  Sequence chunk;
  std::vector<double> token_probabilities;
  auto operator<=>(const RoundOutcome&) const = default;
};

/// \brief The exact law of one speculative round.
struct RoundLaw {
  Law chunks;  ///< emitted tokens of the round -> probability
  /// RoundOutcome -> probability: the round as a policy's observe() would be told of it
  std::map<RoundOutcome, double> outcomes;
  double expected_accepted = 0;  ///< E[accepted drafted tokens]
  double expected_drafted = 0;   ///< E[drafted tokens]
  std::size_t branches = 0;      ///< runs enumerated
};

/// \brief Enumerates one round of the library's own round (run_round, round.hpp) — propose
/// (asking `policy`), one target call, verify — from `context` with the round limit `limit`,
/// using copies of the strategies for every run (so stateful strategies start each run from
/// the same state). Greedy params verify by argmax matching, as the decoder does. `target`
/// returns n rows of doubles (ScriptedPair::target()); a tree is scored as a tree-capable
/// target would score it (tree_rows). Anything run_round rejects (a proposal or verdict that
/// breaks its contract) throws what the decoder throws.
template <class ProposerT, class PolicyT, class VerifierT, class TargetFn>
[[nodiscard]] RoundLaw round_law(const ProposerT& proposer, const PolicyT& policy,
                                 const VerifierT& verifier, TargetFn&& target,
                                 const SamplingParams& params, const Sequence& context,
                                 std::size_t limit) {
  RoundLaw law;
  EnumeratingCoins coins;
  std::vector<double> rows;
  RoundBuffers<double> buffers;
  std::vector<token_t> chunk;
  std::vector<float> no_logprobs;
  do {
    coins.start();
    ProposerT run_proposer = proposer;
    PolicyT run_policy = policy;
    VerifierT run_verifier = verifier;
    std::vector<token_t> tokens = context;
    tokens.reserve(context.size() + limit + 1);
    std::size_t vocab_size = 0;
    DecodeStats stats;
    prepare_round_statistics(stats, limit);
    buffers.prepare(limit, tokens.capacity());
    chunk.clear();
    const auto score = [&](std::span<const token_t> scored, std::size_t committed,
                           const auto& proposal) {
      const std::size_t n = proposal.size();
      rows = proposal.is_chain()
                 ? target(scored, n + 1)
                 : tree_rows(target,
                             Sequence(scored.begin(),
                                      scored.begin() + static_cast<std::ptrdiff_t>(committed)),
                             proposal);
      return LogitsRows<double>(std::span<const double>(rows), rows.size() / (n + 1));
    };
    const auto verification_coins = [&](std::size_t n) -> EnumeratingCoins& {
      coins.begin_verification(n);
      return coins;
    };
    const RoundResult round = run_round(
        run_proposer, run_policy, run_verifier, coins,
        RoundState{tokens, limit, params, false, vocab_size, stats}, score, verification_coins,
        [] {}, buffers, chunk, no_logprobs);
    const double probability = coins.probability();
    law.chunks[chunk] += probability;
    law.outcomes[RoundOutcome{chunk, std::vector<double>(round.token_probabilities.begin(),
                                                         round.token_probabilities.end())}] +=
        probability;
    law.expected_accepted += probability * static_cast<double>(round.accepted);
    law.expected_drafted += probability * static_cast<double>(round.drafted);
    ++law.branches;
  } while (coins.next());
  return law;
}

/// \brief How close one round comes to the target.
struct RoundCertificate {
  /// TV between the law of the first draft_length + 1 tokens — the round's chunk, continued by
  /// the target itself — and the target's own law of those tokens. 0 (to ~1e-15) iff the round
  /// is exact for this context: every chunk the round can emit has the target's probability.
  double total_variation = 0;
  double expected_accepted = 0;  ///< E[accepted drafted tokens] in the round
  double expected_drafted = 0;   ///< E[drafted tokens]
  std::size_t branches = 0;      ///< runs enumerated
};

/// \brief Certifies one round from `context` with limit `draft_length` (see RoundCertificate).
/// A round that is exact from every context makes the whole decoder exact (rounds compose).
template <class ProposerT, class PolicyT, class VerifierT, class TargetFn>
[[nodiscard]] RoundCertificate certify_round(const ProposerT& proposer, const PolicyT& policy,
                                             const VerifierT& verifier, TargetFn&& target,
                                             const SamplingParams& params, const Sequence& context,
                                             std::size_t draft_length) {
  const RoundLaw round =
      round_law(proposer, policy, verifier, target, params, context, draft_length);
  const std::size_t length = draft_length + 1;
  Law continued;
  for (const auto& [chunk, probability] : round.chunks) {
    if (chunk.size() == length) {
      continued[chunk] += probability;
      continue;
    }
    Sequence after = context;
    after.insert(after.end(), chunk.begin(), chunk.end());
    for (const auto& [rest, rest_probability] :
         target_law(target, params, after, length - chunk.size())) {
      Sequence sequence = chunk;
      sequence.insert(sequence.end(), rest.begin(), rest.end());
      continued[sequence] += probability * rest_probability;
    }
  }
  return {total_variation(continued, target_law(target, params, context, length)),
          round.expected_accepted, round.expected_drafted, round.branches};
}

/// \brief How speculative_law caps each round's draft.
enum class Budget {
  exact,      ///< the decoder's rule with max_new_tokens = length: min(K, remaining - 1)
  unlimited,  ///< K every round; the law of the first `length` tokens (longer chunks are cut)
};

}  // namespace specdec::testing

/// \brief Budget's names (enum_names.hpp): the enumerators' own.
template <>
struct specdec::EnumNames<specdec::testing::Budget> {
  static constexpr std::string_view what = "budget";
  static constexpr std::array<EnumName<testing::Budget>, 2> names{
      {{testing::Budget::exact, "exact"}, {testing::Budget::unlimited, "unlimited"}}};
};

namespace specdec::testing {

// to_string(Budget) by argument-dependent lookup, like the enums of namespace specdec.
using specdec::to_string;

/// \brief The exact law of the first `length` tokens the decoder emits after `prompt`: rounds
/// composed under `budget` (default: the decoder's rule with max_new_tokens = length), the
/// policy told of every round (observe) along each path.
///
/// A stateless policy (an empty type, like StaticDraftLength) makes a round depend only on its
/// context, so the law is built breadth first with identical emitted prefixes pooled (one
/// round_law per distinct prefix: polynomial in `length`); a stateful policy is followed along
/// every path separately (exponential, for small lengths).
template <class ProposerT, class PolicyT, class VerifierT, class TargetFn>
[[nodiscard]] Law speculative_law(const ProposerT& proposer, const PolicyT& policy,
                                  const VerifierT& verifier, TargetFn&& target,
                                  const SamplingParams& params, const Sequence& prompt,
                                  std::size_t length, std::size_t draft_length,
                                  Budget budget = Budget::exact) {
  auto round_limit = [&](std::size_t remaining) {
    return budget == Budget::exact ? std::min(draft_length, remaining - 1) : draft_length;
  };
  auto cut = [&](Sequence sequence) {
    if (sequence.size() > length) sequence.resize(length);
    return sequence;
  };
  auto context_after = [&](const Sequence& emitted) {
    Sequence context = prompt;
    context.insert(context.end(), emitted.begin(), emitted.end());
    return context;
  };
  if constexpr (std::is_empty_v<PolicyT>) {
    // frontier[emitted] = mass; every prefix has fewer than `length` tokens.
    std::map<Sequence, double> frontier{{Sequence{}, 1.0}};
    Law law;
    while (!frontier.empty()) {
      std::map<Sequence, double> next;
      for (const auto& [emitted, mass] : frontier) {
        const std::size_t limit = round_limit(length - emitted.size());
        const RoundLaw round =
            round_law(proposer, policy, verifier, target, params, context_after(emitted), limit);
        for (const auto& [chunk, probability] : round.chunks) {
          Sequence longer = emitted;
          longer.insert(longer.end(), chunk.begin(), chunk.end());
          if (longer.size() >= length) {
            law[cut(std::move(longer))] += mass * probability;
          } else {
            next[longer] += mass * probability;
          }
        }
      }
      frontier = std::move(next);
    }
    if (length == 0) law[Sequence{}] = 1.0;
    return law;
  } else {
    Law law;
    std::function<void(const Sequence&, const PolicyT&, double)> extend =
        [&](const Sequence& emitted, const PolicyT& state, double mass) {
          if (emitted.size() >= length) {
            law[cut(emitted)] += mass;
            return;
          }
          const std::size_t limit = round_limit(length - emitted.size());
          const RoundLaw round =
              round_law(proposer, state, verifier, target, params, context_after(emitted), limit);
          for (const auto& [outcome, probability] : round.outcomes) {
            const Sequence& chunk = outcome.chunk;
            PolicyT next_state = state;
            next_state.observe(RoundReport{outcome.token_probabilities.size(), chunk.size() - 1,
                                           limit, 0.0, 0.0, outcome.token_probabilities});
            Sequence longer = emitted;
            longer.insert(longer.end(), chunk.begin(), chunk.end());
            extend(longer, next_state, mass * probability);
          }
        };
    extend(Sequence{}, policy, 1.0);
    return law;
  }
}

}  // namespace specdec::testing

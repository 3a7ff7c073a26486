#pragma once
/// \file
/// \brief FallbackProposer: a primary proposer when it has something to propose, a secondary
/// one otherwise (e.g. n-gram lookup first, the draft model when nothing matches).

#include <cstddef>
#include <type_traits>
#include <utility>

#include "specdec/generation.hpp"
#include "specdec/proposal.hpp"
#include "specdec/strategies.hpp"

namespace specdec {

/// \brief Each round, runs `Primary`; if it declines — returns no tokens without having asked
/// the draft-length policy (NgramProposer with no match) — runs `Secondary` on the same request.
/// A primary that asked and was told to stop keeps the round (empty): the policy decided.
///
/// Exact whenever both proposers are: which one drafts depends only on what the primary sees
/// (the committed context and its own state), never on the target, and the chosen proposal
/// reports its own q. A declining primary must draw no coins (the coin order is then the
/// secondary's alone) and leave the context at the committed tokens.
///
/// Both proposers are owned. begin(config) is forwarded to each that has one. Each sizes its
/// buffers on its own first round (ModelProposer needs V, known after the first model call), so
/// a decoder round allocates nothing once both have drafted.
template <class Primary, class Secondary>
class FallbackProposer {
 public:
  using primary_type = Primary;
  using secondary_type = Secondary;

  FallbackProposer(Primary primary, Secondary secondary)
      : primary_(std::move(primary)), secondary_(std::move(secondary)) {}

  void begin(const GenerationConfig& config) {
    if constexpr (requires { primary_.begin(config); }) primary_.begin(config);
    if constexpr (requires { secondary_.begin(config); }) secondary_.begin(config);
    primary_rounds_ = 0;
    secondary_rounds_ = 0;
  }

  /// \brief Sizes both proposers' buffers, for those that can (ModelProposer::reserve).
  void reserve(std::size_t vocab_size, std::size_t max_draft, const SamplingParams& params) {
    if constexpr (requires { primary_.reserve(vocab_size, max_draft, params); }) {
      primary_.reserve(vocab_size, max_draft, params);
    }
    if constexpr (requires { secondary_.reserve(vocab_size, max_draft, params); }) {
      secondary_.reserve(vocab_size, max_draft, params);
    }
  }

  template <class Coins>
  auto propose(DraftRequest& request, Coins& coins) {
    using PrimaryProposal = decltype(primary_.propose(request, coins));
    using SecondaryProposal = decltype(secondary_.propose(request, coins));
    static_assert(std::is_same_v<PrimaryProposal, SecondaryProposal>,
                  "specdec: FallbackProposer needs two proposers that return the same "
                  "Proposal<Scalar> type");

    // The primary asks the policy through this probe, which remembers that it was asked.
    PolicyProbe probe{&request};
    DraftRequest primary_request = request;
    primary_request.bind_policy(probe);
    PrimaryProposal proposal = primary_.propose(primary_request, coins);
    if (!proposal.empty() || probe.asked) {
      ++primary_rounds_;
      return proposal;
    }
    ++secondary_rounds_;
    return secondary_.propose(request, coins);
  }

  Primary& primary() noexcept { return primary_; }
  Secondary& secondary() noexcept { return secondary_; }
  /// \brief Rounds of the current generate() the primary (secondary) proposer drafted.
  [[nodiscard]] std::size_t primary_rounds() const noexcept { return primary_rounds_; }
  [[nodiscard]] std::size_t secondary_rounds() const noexcept { return secondary_rounds_; }

 private:
  struct PolicyProbe {
    const DraftRequest* request;
    bool asked = false;
    bool draft_more(const DraftState& state) {
      asked = true;
      return request->draft_more(state);
    }
    /// Passes the real policy's answer through (a greedy model proposer as primary computes
    /// token probabilities only if the policy reads them).
    [[nodiscard]] bool reads_token_probabilities() const noexcept {
      return request->reads_token_probabilities();
    }
  };

  Primary primary_;
  Secondary secondary_;
  std::size_t primary_rounds_ = 0;
  std::size_t secondary_rounds_ = 0;
};

}  // namespace specdec

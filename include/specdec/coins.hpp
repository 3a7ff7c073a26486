#pragma once
/// \file
/// \brief Coin sources: how a strategy gets its randomness.
///
/// Strategies (proposers, verifiers) take their coin source as a template parameter, the way the
/// standard library's distributions take a URBG: `template <class Coins> ... propose(..., Coins&
/// coins)`. They ask it for exactly two things:
///   - `coins.draw(law)`: a token from a SamplingLaw (sampling_laws.hpp), one coin per draw;
///   - `coins.accept(i, probability)`: a Bernoulli decision with acceptance coin i of the round
///     (verifiers only; each coin is read once: `accept(i, a)` is `coin_i < a`).
/// The decoder's sources (below) turn those into inverse-CDF samples and comparisons of Rng
/// coins; the certification harness (testing.hpp) substitutes a source that *enumerates* them
/// — every token of a law with its mass, both outcomes of a decision with their probabilities —
/// so the exact output law of a strategy can be computed from the strategy's own code.
///
/// Coin order (fixed, so a seed reproduces a run on every platform): per round, one coin per
/// sampled draft token as it is drafted, then one acceptance coin per drafted token, then one
/// final coin (the correction or bonus token), whether or not a verifier reads them all.

#include <cassert>
#include <cstddef>
#include <span>

#include "specdec/rng.hpp"
#include "specdec/sampling/laws.hpp"
#include "specdec/types.hpp"

namespace specdec {

/// \brief The draft side's coins: a fresh Rng coin per draw.
class DraftCoins {
 public:
  explicit DraftCoins(Rng& rng) noexcept : rng_(&rng) {}

  /// \brief One token from `law` (one coin).
  template <SamplingLaw Law>
  [[nodiscard]] token_t draw(const Law& law) {
    return law.sample(rng_->uniform01());
  }

 private:
  Rng* rng_;
};

/// \brief One round's verification coins, drawn before verification starts: acceptance coin i
/// for drafted position i, and one final coin for the correction or bonus token.
class VerificationCoins {
 public:
  VerificationCoins(std::span<const double> acceptance_coins, double final_coin) noexcept
      : acceptance_(acceptance_coins), final_(final_coin) {}

  /// \brief Number of acceptance coins (one per drafted token).
  [[nodiscard]] std::size_t size() const noexcept { return acceptance_.size(); }

  /// \brief True with probability `probability` (clamped to [0, 1]): acceptance coin `position`
  /// < probability. Requires position < size().
  [[nodiscard]] bool accept(std::size_t position, double probability) const noexcept {
    assert(position < acceptance_.size());
    return acceptance_[position] < probability;
  }

  /// \brief The correction or bonus token from `law` (the final coin).
  template <SamplingLaw Law>
  [[nodiscard]] token_t draw(const Law& law) const {
    return law.sample(final_);
  }

 private:
  std::span<const double> acceptance_;
  double final_;
};

}  // namespace specdec

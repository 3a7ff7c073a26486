#pragma once
/// \file
/// \brief Sampling laws: what a strategy draws a token from, as an object that can both sample
/// with one coin (the fast path the decoder runs) and state the unnormalised mass of every
/// token (the exact path the certification harness enumerates).
///
/// A strategy never turns a coin into a token itself: it hands a law to its coin source
/// (`coins.draw(law)`, see coins.hpp). The decoder's coin source calls `law.sample(coin)`; the
/// harness's instead branches over every token with `law.mass(token) > 0`, weighted by the
/// mass. Both must describe one distribution: `sample(u)` for u uniform in [0, 1) returns t
/// with probability mass(t) / sum_v mass(v). The laws below keep that promise by construction
/// (sample is the inverse CDF of exactly the weights mass reports, up to float rounding of the
/// weights); the decoder's χ² tests check it end to end.

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <limits>
#include <span>

#include "specdec/sampling.hpp"
#include "specdec/types.hpp"
#include "specdec/verify.hpp"

namespace specdec {

/// \brief A distribution over token ids 0..V-1 that can be sampled with one coin in [0, 1) and
/// enumerated token by token (see the file comment for the contract between the two).
template <class L>
concept SamplingLaw = requires(const L& law, double coin, token_t token) {
  { law.vocab_size() } -> std::convertible_to<std::size_t>;
  { law.sample(coin) } -> std::convertible_to<token_t>;
  { law.mass(token) } -> std::convertible_to<double>;
};

/// \brief Stored unnormalised weights with their per-block sums (process_logits with weights):
/// the law of a sampled draft token. `sample` reads one block (the sums locate it).
template <class Scalar>
struct WeightsLaw {
  std::span<const Scalar> weights;     ///< V weights, 0 for filtered tokens
  std::span<const Scalar> block_sums;  ///< weight_block_count(V) sums of those weights

  [[nodiscard]] std::size_t vocab_size() const noexcept { return weights.size(); }
  [[nodiscard]] token_t sample(double coin) const {
    return sample_from_weights(weights, block_sums, coin);
  }
  [[nodiscard]] double mass(token_t token) const noexcept {
    return static_cast<double>(weights[static_cast<std::size_t>(token)]);
  }
};

/// \brief Stored unnormalised weights and their sum, sampled without block sums (one scan):
/// the law of a residual a verifier has materialised (tree verification's running residual).
template <class Scalar>
struct StoredWeightsLaw {
  std::span<const Scalar> weights;  ///< V weights >= 0
  Scalar total = 0;                 ///< their sum (> 0)

  [[nodiscard]] std::size_t vocab_size() const noexcept { return weights.size(); }
  [[nodiscard]] token_t sample(double coin) const {
    return sample_from_weights(weights, total, coin);
  }
  [[nodiscard]] double mass(token_t token) const noexcept {
    return static_cast<double>(weights[static_cast<std::size_t>(token)]);
  }
};

/// \brief A processed target distribution p: the law of a bonus token (or of a plain step).
template <class Scalar>
struct DistributionLaw {
  TokenDistribution<Scalar> distribution;
  std::span<Scalar> scratch;  ///< V values of scratch space for sample()

  [[nodiscard]] std::size_t vocab_size() const noexcept { return distribution.vocab_size(); }
  [[nodiscard]] token_t sample(double coin) const {
    return specdec::sample(distribution, coin, scratch);
  }
  [[nodiscard]] double mass(token_t token) const noexcept {
    return static_cast<double>(distribution.probability(token));
  }
};

/// \brief The residual after a rejection: r(y) ∝ max(0, scale * p(y) - q(y)), q given by stored
/// weights. scale = 1 is token-level speculative sampling's residual; block verification uses
/// its running weight w (see block_verifier.hpp).
///
/// If the residual is identically 0 — a rejection that has probability 0 in exact arithmetic
/// and only happens through rounding — the law is p itself (mass() says so too).
template <class Scalar>
struct ResidualLaw {
  TokenDistribution<Scalar> p;
  std::span<const Scalar> q_weights;  ///< the weights the drafted token was drawn from
  Scalar q_normalizer = 1;            ///< their sum
  Scalar scale = 1;                   ///< w in max(0, w p - q), 0 < w <= 1
  std::span<Scalar> scratch;          ///< V values of scratch space for sample()

  [[nodiscard]] std::size_t vocab_size() const noexcept { return p.vocab_size(); }
  [[nodiscard]] token_t sample(double coin) const {
    return sample_residual(p, q_weights, q_normalizer, coin, scratch, scale);
  }
  [[nodiscard]] double mass(token_t token) const {
    if (residual_is_zero()) return static_cast<double>(p.probability(token));
    return std::max(
        0.0, static_cast<double>(scale * p.probability(token)) -
                 static_cast<double>(q_weights[static_cast<std::size_t>(token)] / q_normalizer));
  }

 private:
  [[nodiscard]] bool residual_is_zero() const {
    for (std::size_t v = 0; v < vocab_size(); ++v) {
      const auto token = static_cast<token_t>(v);
      if (scale * p.probability(token) - q_weights[v] / q_normalizer > Scalar(0)) return false;
    }
    return true;
  }
};

/// \brief The residual after rejecting a deterministic proposal x (q = point mass at x):
/// max(0, w p(y) - [y = x]) ∝ p(y) for y != x, 0 for x (w p(x) <= 1 always). If p is itself a
/// point mass at x (a rejection of probability 0), the law is p.
template <class Scalar>
struct ExcludingLaw {
  TokenDistribution<Scalar> p;
  token_t excluded = 0;
  std::span<Scalar> scratch;  ///< V values of scratch space for sample()

  [[nodiscard]] std::size_t vocab_size() const noexcept { return p.vocab_size(); }
  [[nodiscard]] token_t sample(double coin) const {
    return sample_excluding(p, excluded, coin, scratch);
  }
  [[nodiscard]] double mass(token_t token) const noexcept {
    if (token == excluded && !only_excluded()) return 0.0;
    return static_cast<double>(p.probability(token));
  }

 private:
  [[nodiscard]] bool only_excluded() const noexcept {
    for (std::size_t v = 0; v < vocab_size(); ++v) {
      if (static_cast<token_t>(v) != excluded && p.weight(static_cast<token_t>(v)) > Scalar(0)) {
        return false;
      }
    }
    return true;
  }
};

}  // namespace specdec

#pragma once
/// \file
/// \brief Scripted, context-dependent toy models (ScriptedModel, ScriptedPair): deterministic
/// draft / target pairs with small vocabularies for exact and statistical tests (testing.hpp).

#include <algorithm>
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
#include <type_traits>
#include <utility>
#include <vector>

#include "specdec/sampling.hpp"
#include "specdec/testing/statistics.hpp"
#include "specdec/types.hpp"

namespace specdec::testing {

// ============================================================================================
// Scripted models
// ============================================================================================

namespace detail {

constexpr std::uint64_t mix(std::uint64_t x) noexcept {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

/// Uniform in [0, 1), a pure function of the arguments.
constexpr double hash_unit(std::uint64_t salt, std::uint64_t a, std::uint64_t b, std::uint64_t c,
                           std::uint64_t d) noexcept {
  const std::uint64_t h = mix(mix(mix(mix(mix(salt) ^ a) ^ b) ^ c) ^ d);
  return static_cast<double>(h >> 11) * 0x1.0p-53;
}

}  // namespace detail

/// \brief A deterministic, context-dependent toy model: logits are a hash of the last two
/// tokens and the context length's parity, in [-scale, scale). Options: `bans` sets one token
/// per context to -inf (so draft and target can disagree on the support); `quantum` > 0 rounds
/// logits to a grid (exact ties, for greedy). Logits are float-representable, so float and
/// double instantiations see the same numbers.
struct ScriptedModel {
  std::uint64_t salt = 1;
  std::size_t vocab = 5;
  double scale = 2.0;
  bool bans = false;
  double quantum = 0.0;

  [[nodiscard]] std::vector<double> logits(std::span<const token_t> context) const {
    if (context.empty()) {
      specdec::detail::throw_invalid_argument("ScriptedModel: empty context");
    }
    const auto last = static_cast<std::uint64_t>(context.back());
    const auto before =
        context.size() >= 2 ? static_cast<std::uint64_t>(context[context.size() - 2]) : 99;
    const std::uint64_t parity = context.size() % 2;
    std::vector<double> row(vocab);
    for (std::size_t v = 0; v < vocab; ++v) {
      double logit = scale * (2.0 * detail::hash_unit(salt, last, before, parity, v) - 1.0);
      if (quantum > 0) logit = quantum * std::floor(logit / quantum);
      row[v] = static_cast<double>(static_cast<float>(logit));
    }
    if (bans && detail::hash_unit(salt ^ 0xb4aULL, last, before, parity, 0) < 0.5) {
      const auto banned = static_cast<std::size_t>(
          detail::hash_unit(salt ^ 0xb4bULL, last, before, parity, 0) * static_cast<double>(vocab));
      row[banned] = -std::numeric_limits<double>::infinity();
    }
    return row;
  }
};

/// \brief A draft / target pair of scripted models: the draft's logits are the target's plus
/// `noise` times an independent model's (noise 0: identical; large: unrelated), rounded to
/// float. draft<Scalar>() / target<Scalar>() are the models as callables (DraftModel /
/// TargetModel for float; double for exact enumeration); they point at the pair, which must
/// outlive them (do not call them on a temporary pair).
struct ScriptedPair {
  ScriptedModel target_model{};
  ScriptedModel perturbation{.salt = 77};
  double noise = 0.7;
  SamplingParams params{};

  [[nodiscard]] std::size_t vocab() const noexcept { return target_model.vocab; }

  [[nodiscard]] std::vector<double> draft_logits(std::span<const token_t> context) const {
    std::vector<double> row = target_model.logits(context);
    if (specdec::detail::exactly_equal(noise, 0.0))
      return row;  // identical (0 * -inf would be NaN)
    const std::vector<double> extra = perturbation.logits(context);
    for (std::size_t v = 0; v < row.size(); ++v) {
      row[v] = static_cast<double>(static_cast<float>(row[v] + noise * extra[v]));
    }
    return row;
  }
  /// TargetModel contract: n rows, row i follows the first context.size() - n + 1 + i tokens.
  [[nodiscard]] std::vector<double> target_rows(std::span<const token_t> context,
                                                std::size_t n) const {
    std::vector<double> rows;
    for (std::size_t i = 0; i < n; ++i) {
      const std::vector<double> row =
          target_model.logits(context.first(context.size() - n + 1 + i));
      rows.insert(rows.end(), row.begin(), row.end());
    }
    return rows;
  }

  template <class Scalar = double>
  struct Draft {
    const ScriptedPair* pair;
    std::vector<Scalar> operator()(std::span<const token_t> context) const {
      const std::vector<double> row = pair->draft_logits(context);
      return std::vector<Scalar>(row.begin(), row.end());
    }
  };
  template <class Scalar = double>
  struct Target {
    const ScriptedPair* pair;
    std::vector<Scalar> operator()(std::span<const token_t> context, std::size_t n) const {
      const std::vector<double> rows = pair->target_rows(context, n);
      return std::vector<Scalar>(rows.begin(), rows.end());
    }
  };
  template <class Scalar = double>
  [[nodiscard]] Draft<Scalar> draft() const noexcept {
    return {this};
  }
  template <class Scalar = double>
  [[nodiscard]] Target<Scalar> target() const noexcept {
    return {this};
  }
};

}  // namespace specdec::testing

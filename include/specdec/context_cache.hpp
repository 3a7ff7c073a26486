#pragma once
/// \file
/// \brief KV-cache reuse and rollback for models served by specdec.
///
/// The decoder guarantees that every context it passes to a model is the committed sequence
/// followed by speculative tokens. After a rejection the speculative tail changes, so a model
/// with a KV cache must roll back to the longest common prefix (LCP) of what it has cached and
/// the new context, then compute the remaining positions. plan_cache_update() computes that
/// split; ContextCache keeps the cached token list for you.

#include <algorithm>
#include <cstddef>
#include <span>
#include <vector>

#include "specdec/detail/error.hpp"
#include "specdec/types.hpp"

namespace specdec {

/// \brief What a cached model must do for one call.
struct CacheUpdate {
  /// Positions [0, keep) of the cache stay valid; truncate the KV cache to `keep` entries.
  std::size_t keep = 0;
  /// Tokens at positions [keep, context.size()): run these through the model (in order).
  /// A view into the `context` passed to plan_cache_update / ContextCache::update.
  std::span<const token_t> new_tokens;
};

/// \brief Splits `context` into a reusable cached prefix and the tokens to (re)compute.
///
/// keep = min(LCP(cached, context), context.size() - rows_needed): a position whose logits
/// must be returned has to be computed in this call even if its keys/values are cached, because
/// the logits themselves are not cached. rows_needed is 1 for a draft call and n for a target
/// call.
///
/// \throws std::invalid_argument if rows_needed > context.size() or rows_needed == 0.
[[nodiscard]] inline CacheUpdate plan_cache_update(std::span<const token_t> cached,
                                                   std::span<const token_t> context,
                                                   std::size_t rows_needed) {
  if (rows_needed == 0 || rows_needed > context.size()) {
    detail::throw_invalid_argument("plan_cache_update: rows_needed = ", rows_needed,
                                   " for a context of ", context.size(),
                                   " tokens; expected 1 <= rows_needed <= context size");
  }
  const auto common = static_cast<std::size_t>(
      std::mismatch(cached.begin(), cached.end(), context.begin(), context.end()).first -
      cached.begin());
  const std::size_t keep = std::min(common, context.size() - rows_needed);
  return {keep, context.subspan(keep)};
}

/// \brief Remembers the tokens a model's KV cache holds and plans each call against them.
///
/// Typical use inside a model callable:
/// \code
///   auto [keep, new_tokens] = cache.update(context, n);
///   kv.truncate(keep);
///   for (token_t t : new_tokens) forward(t);    // positions keep .. context.size()-1
///   return last_n_rows;
/// \endcode
/// update() assumes the model then computes every new token, so afterwards the cache holds
/// exactly `context`. If the model throws mid-way, call clear() (or the next update() will
/// trust tokens that were never computed).
///
/// The cache lives as long as the model, not one generate() call: a cached model shared by two
/// decoders (or called by two generate() calls) reuses whatever prefix the previous call left,
/// e.g. the prompt. That is correct prefix caching, and the output is the same, but it biases a
/// speedup measurement: the second decoder does not pay for the prompt. To start fresh (before
/// each measured run, or for an unrelated prompt), call clear() and truncate the model's KV
/// cache to 0 with it; update() then plans the whole context as new.
class ContextCache {
 public:
  ContextCache() = default;
  /// \brief Reserves room for `capacity` tokens so update() does not allocate below that.
  explicit ContextCache(std::size_t capacity) { tokens_.reserve(capacity); }

  void reserve(std::size_t capacity) { tokens_.reserve(capacity); }

  /// \brief Plans the call for `context` (see plan_cache_update) and records `context` as
  /// the cached sequence.
  CacheUpdate update(std::span<const token_t> context, std::size_t rows_needed = 1) {
    const CacheUpdate plan = plan_cache_update(tokens_, context, rows_needed);
    tokens_.resize(plan.keep);
    tokens_.insert(tokens_.end(), plan.new_tokens.begin(), plan.new_tokens.end());
    return plan;
  }

  /// \brief Forgets everything: the next update() recomputes the whole context. Use it to start
  /// fresh (a speedup measurement, a new unrelated prompt) or after a failed forward; the model
  /// truncates its own KV cache to 0 at the same time.
  void clear() noexcept { tokens_.clear(); }

  /// \brief The tokens whose keys/values the model holds, in position order.
  [[nodiscard]] std::span<const token_t> tokens() const noexcept { return tokens_; }
  [[nodiscard]] std::size_t size() const noexcept { return tokens_.size(); }

 private:
  std::vector<token_t> tokens_;
};

}  // namespace specdec

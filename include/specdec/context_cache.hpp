#pragma once
/// \file
/// \brief KV-cache reuse and rollback for models served by specdec.
///
/// The decoder guarantees that every context it passes to a model is the committed sequence
/// followed by speculative tokens. After a rejection the speculative tail changes, so a model
/// with a KV cache must roll back to the longest common prefix (LCP) of what it has cached and
/// the new context, then compute the remaining positions. plan_cache_update() computes that
/// split; ContextCache keeps the cached token list for you.
///
/// A model that also scores trees of drafts in one call (score_tree: every node's row, each node
/// attending to the committed context and its ancestors) holds the nodes' K/V rows beside the
/// committed ones. Its next context says which path the decoder kept: TreeContextCache finds the
/// deepest tree path that the new context follows, tells the model which node rows to move into
/// place (the kept path becomes ordinary positions), and then plans the call as ContextCache does.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "specdec/detail/error.hpp"
#include "specdec/tree.hpp"
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

// ----------------------------------------------------------------------------
// Trees: one call scores many branches, the next context says which one was kept

// tree_depths(parents, depths), the depth convention (0 = a child of the root, so node i sits
// at position committed.size() + depth(i)) and the search for the path a new context kept
// (deepest_followed_node) are specdec/tree.hpp's tree topology, shared with the decoder and the
// model adapters.

/// \brief What a KV-cached model that scores trees must do for one call, in this order.
///
/// 1. Move the rows of the kept tree path into place: for d = 0, 1, ... the K/V row at slot
///    `tree_start + kept_nodes[d]` goes to slot `tree_start + d` (move_kept_nodes() does the
///    loop). kept_nodes[d] >= d, so in this order no move overwrites a row still to be moved.
/// 2. Truncate the KV cache to `keep` slots and run `new_tokens` through the model at positions
///    keep, keep + 1, ... (as CacheUpdate).
/// 3. For a tree call (TreeContextCache::update_tree): put node i of the new tree at slot
///    committed.size() + i, at position committed.size() + depth(i), attending to slots
///    [0, committed.size()) and to its ancestors' slots.
///
/// Slots are rows of the model's KV buffers. Slots below the committed length are positions; a
/// tree's nodes follow, one slot per node, so a model that scores trees of up to N nodes needs
/// N slots beyond its maximum context.
struct TreeCacheUpdate {
  /// Slot of node 0 of the last call's tree (its committed length); meaningless without kept nodes.
  std::size_t tree_start = 0;
  /// The last call's tree nodes on the path the new context follows, root first, at most up to
  /// slot keep (positions that must be recomputed are not moved). Empty after a chain call, or
  /// when the new context follows no node. A view into the TreeContextCache, valid until its
  /// next update.
  std::span<const std::size_t> kept_nodes;
  /// Slots [0, keep) hold valid K/V rows once the kept nodes are moved; truncate to `keep`.
  std::size_t keep = 0;
  /// Tokens to run at positions [keep, keep + new_tokens.size()): a view into the context (or,
  /// for a tree call, the committed context) that was passed in.
  std::span<const token_t> new_tokens;

  /// \brief Calls move_row(from_slot, to_slot) for every kept node not already in place, in the
  /// order that makes in-place moves safe.
  template <class MoveRow>
  void move_kept_nodes(MoveRow&& move_row) const {
    for (std::size_t depth = 0; depth < kept_nodes.size(); ++depth) {
      if (kept_nodes[depth] != depth) move_row(tree_start + kept_nodes[depth], tree_start + depth);
    }
  }
};

/// \brief ContextCache for models that also score trees of drafts in one call.
///
/// After a tree call the model holds K/V rows for the committed context and for every node of
/// the tree. The decoder tells nothing about the outcome; the next call's context does (context
/// guarantee: the committed sequence, which now ends with the accepted path and the next token,
/// then speculative tokens). The next update() or update_tree() matches that context against
/// the tree: node i survives iff its whole root-to-node path equals the tokens of the new
/// context after the old committed length. Of the surviving nodes the deepest is kept with its
/// ancestors (siblings may hold the same token, e.g. drawn with replacement; their K/V rows are
/// equal, and searching every branch finds the deepest path whichever sibling it goes through).
/// Everything else of the tree is dropped; then the call is planned against the committed
/// context plus the kept path exactly as ContextCache plans it.
///
/// Correct for any sequence of chain calls (update), tree calls (update_tree), clear() and
/// errors: every update validates its arguments before it changes anything, so a call that
/// throws leaves the cache as it was. As with ContextCache, the model must then compute what
/// the plan says; if its forward fails midway, call clear().
///
/// A model sketch (docs/design.md, "KV-cached tree targets", has a complete one):
/// \code
///   rows = target(context, n):
///     plan = cache.update(context, n);
///     plan.move_kept_nodes([&](auto from, auto to) { kv.copy_row(from, to); });
///     kv.truncate(plan.keep); forward plan.new_tokens; return the last n rows
///   rows = score_tree(committed, tokens, parents):
///     plan = cache.update_tree(committed, tokens, parents);
///     (move, truncate and forward as above: the last committed row is row 0)
///     forward node i at slot committed.size() + i, position committed.size() + depth(i)
/// \endcode
class TreeContextCache {
 public:
  TreeContextCache() = default;
  /// \brief Reserves room for contexts of `context_capacity` tokens and trees of `tree_capacity`
  /// nodes, so updates within those sizes do not allocate.
  TreeContextCache(std::size_t context_capacity, std::size_t tree_capacity) {
    reserve(context_capacity, tree_capacity);
  }

  void reserve(std::size_t context_capacity, std::size_t tree_capacity) {
    chain_.reserve(context_capacity + tree_capacity);
    tree_tokens_.reserve(tree_capacity);
    tree_parents_.reserve(tree_capacity);
    tree_depths_.reserve(tree_capacity);
    reaches_.reserve(tree_capacity);
    path_.reserve(tree_capacity);
    incoming_depths_.reserve(tree_capacity);
    kept_.reserve(tree_capacity);
  }

  /// \brief A chain call: plans `context` with `rows_needed` rows of logits (see
  /// plan_cache_update) after moving whatever the last call's tree keeps, and records `context`
  /// as the cached sequence (no tree).
  /// \throws std::invalid_argument if rows_needed == 0 or rows_needed > context.size().
  TreeCacheUpdate update(std::span<const token_t> context, std::size_t rows_needed = 1) {
    if (rows_needed == 0 || rows_needed > context.size()) {
      detail::throw_invalid_argument("TreeContextCache::update: rows_needed = ", rows_needed,
                                     " for a context of ", context.size(),
                                     " tokens; expected 1 <= rows_needed <= context size");
    }
    TreeCacheUpdate plan = keep_tree_path(context, rows_needed);
    record_chain(context, plan);
    clear_tree();
    return plan;
  }

  /// \brief A tree call: plans the committed context (one row of logits: row 0 follows it) after
  /// moving whatever the last call's tree keeps, and records the new tree, whose node i the
  /// model computes at slot committed.size() + i (tree_depths() gives its position).
  /// \throws std::invalid_argument for an empty committed context, tokens and parents of
  /// different sizes, or a parent outside [-1, i) (see tree_depths), before changing anything.
  TreeCacheUpdate update_tree(std::span<const token_t> committed, std::span<const token_t> tokens,
                              std::span<const std::int32_t> parents) {
    if (committed.empty()) {
      detail::throw_invalid_argument(
          "tree call with an empty committed context; expected at least one token (row 0 "
          "follows the committed context)");
    }
    check_tree_sizes(tokens.size(), parents.size());
    incoming_depths_.resize(parents.size());
    (void)specdec::tree_depths(parents, incoming_depths_);  // throws before anything changes
    TreeCacheUpdate plan = keep_tree_path(committed, 1);
    record_chain(committed, plan);
    tree_tokens_.assign(tokens.begin(), tokens.end());
    tree_parents_.assign(parents.begin(), parents.end());
    tree_depths_.swap(incoming_depths_);  // both keep their reserved capacity
    has_tree_ = true;
    return plan;
  }

  /// \brief Forgets everything: the next update recomputes its whole context (the model drops
  /// its KV rows at the same time). Use it to start fresh or after a failed forward.
  void clear() noexcept {
    chain_.clear();
    clear_tree();
  }

  /// \brief The tokens at slots [0, size()): positions, in order (the committed context after a
  /// tree call, the whole context after a chain call).
  [[nodiscard]] std::span<const token_t> tokens() const noexcept { return chain_; }
  [[nodiscard]] std::size_t size() const noexcept { return chain_.size(); }
  /// \brief The tree the last call scored (empty after a chain call): node i at slot size() + i.
  [[nodiscard]] bool has_tree() const noexcept { return has_tree_; }
  [[nodiscard]] std::span<const token_t> tree_tokens() const noexcept { return tree_tokens_; }
  [[nodiscard]] std::span<const std::int32_t> tree_parents() const noexcept {
    return tree_parents_;
  }
  /// \brief depth of each node of that tree: node i sits at position size() + depth(i).
  [[nodiscard]] std::span<const std::size_t> tree_depths() const noexcept { return tree_depths_; }

 private:
  /// The kept path of the last tree against `context` (into kept_), and the plan of the call.
  /// Changes nothing but scratch: the caller records the result.
  TreeCacheUpdate keep_tree_path(std::span<const token_t> context, std::size_t rows_needed) {
    kept_.clear();
    const std::size_t tree_start = chain_.size();
    const std::size_t common = static_cast<std::size_t>(
        std::mismatch(chain_.begin(), chain_.end(), context.begin(), context.end()).first -
        chain_.begin());
    if (has_tree_ && common == tree_start) {
      const std::int32_t deepest = deepest_followed_node(tree_tokens_, tree_parents_, tree_depths_,
                                                         context.subspan(tree_start), reaches_);
      kept_.resize(tree_path(tree_parents_, deepest, path_));
      std::copy_n(path_.begin(), kept_.size(), kept_.begin());
    }
    // The kept path now continues the cached chain: plan as plan_cache_update over both.
    const std::size_t common_with_path = tree_start + kept_.size();
    const std::size_t keep =
        std::min(common == tree_start ? common_with_path : common, context.size() - rows_needed);
    kept_.resize(keep > tree_start ? std::min(kept_.size(), keep - tree_start) : 0);
    return {tree_start, kept_, keep, context.subspan(keep)};
  }

  /// Makes chain_ = context: its first min(keep, size) tokens already match; past them come the
  /// kept path's tokens and the new ones, both read from the context.
  void record_chain(std::span<const token_t> context, const TreeCacheUpdate& plan) {
    chain_.resize(std::min(plan.keep, chain_.size()));
    chain_.insert(chain_.end(), context.begin() + static_cast<std::ptrdiff_t>(chain_.size()),
                  context.end());
  }

  void clear_tree() noexcept {
    has_tree_ = false;
    tree_tokens_.clear();
    tree_parents_.clear();
    tree_depths_.clear();
  }

  std::vector<token_t> chain_;                // tokens at slots [0, size): positions
  bool has_tree_ = false;                     // the last call scored a tree (possibly of 0 nodes)
  std::vector<token_t> tree_tokens_;          // (nodes) that tree, node i at slot chain_.size() + i
  std::vector<std::int32_t> tree_parents_;    // (nodes)
  std::vector<std::size_t> tree_depths_;      // (nodes)
  std::vector<std::uint8_t> reaches_;         // (nodes) scratch: the context follows node i's path
  std::vector<std::size_t> incoming_depths_;  // (nodes) scratch: the new tree's depths, checked
  std::vector<std::int32_t> path_;            // (height) scratch: the kept path as node ids
  std::vector<std::size_t> kept_;             // (height) the kept path, root first
};

}  // namespace specdec

#pragma once
/// \file
/// \brief ContextModel: a specdec DraftModel, TargetModel and TreeTargetModel over a
/// llama_context the caller owns.
///
/// What one call does (ContextModel::operator()(context, n)):
///   1. plan against the tokens the KV cache holds (plan_cache_update): keep the longest common
///      prefix, but never past context.size() - n (logits are not cached, only keys/values);
///   2. roll the KV cache back to that prefix (llama_memory_seq_rm on sequence 0);
///   3. run the fresh tokens through llama_decode, in chunks of the context's n_batch, with
///      logits requested only for the last n positions;
///   4. return a view of llama.cpp's own logits buffer (n rows of V floats, row-major: exactly
///      specdec's TargetModel layout), valid until this model's next call. Nothing is copied
///      unless the n rows straddle two n_batch chunks (n > n_batch).
/// If llama_decode fails, the KV cache is rolled back to the kept prefix and the adapter's
/// record of cached tokens says the same, so the next call (or a fresh generate()) recomputes
/// what is missing and gives the output a fresh context would.
///
/// A tree call (ContextModel::score_tree) puts every root-to-leaf path on a llama.cpp sequence
/// of its own; the next call keeps the path its context follows (docs/llama_cpp.md, "What a
/// call does").

#include <llama.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "specdec/context_cache.hpp"
#include "specdec/detail/error.hpp"
#include "specdec/llama_cpp/detail/error.hpp"
#include "specdec/tree.hpp"
#include "specdec/types.hpp"

namespace specdec::llama_cpp {

/// \brief A specdec DraftModel and TargetModel over a llama_context the caller owns: KV-cache
/// reuse and rollback on sequence 0, one llama_decode per n_batch fresh tokens, logits only
/// for the requested rows, handed out as views of llama.cpp's logits buffer.
///
/// The context must outlive this object, and nothing else may decode on it or change its
/// memory while this object is in use (call reset() after you do). Construction clears the
/// context's memory (the adapter's record of cached tokens starts empty). Not thread-safe.
class ContextModel {
 public:
  /// \param threads, threads_batch  applied with llama_set_n_threads (0 = leave as is)
  explicit ContextModel(llama_context* context, int threads = 0, int threads_batch = 0)
      : context_(context) {
    if (context_ == nullptr) {
      detail::throw_invalid_argument("llama_cpp::ContextModel: the llama_context is null");
    }
    model_ = llama_get_model(context_);
    vocab_ = llama_model_get_vocab(model_);
    vocab_size_ = static_cast<std::size_t>(llama_vocab_n_tokens(vocab_));
    // llama.cpp rounds n_ctx up (to a multiple of 256); a model with learned positions (no
    // RoPE, e.g. GPT-2) has no embedding for positions past its training context, and ggml
    // asserts (aborts the process) on one. Such a model's usable context ends there.
    n_ctx_ = llama_n_ctx(context_);
    const std::int32_t trained = llama_model_n_ctx_train(model_);
    if (llama_model_rope_type(model_) == LLAMA_ROPE_TYPE_NONE && trained > 0) {
      n_ctx_ = std::min(n_ctx_, static_cast<std::size_t>(trained));
    }
    n_batch_ = llama_n_batch(context_);
    n_seq_max_ = llama_n_seq_max(context_);
    if (threads > 0) {
      llama_set_n_threads(context_, threads, threads_batch > 0 ? threads_batch : threads);
    }
    batch_ = llama_batch_init(static_cast<std::int32_t>(n_batch_), 0, 1);
    cached_.reserve(n_ctx_);
    reset();
  }
  ~ContextModel() {
    llama_batch_free(batch_);
    if (tree_batch_.token != nullptr) llama_batch_free(tree_batch_);
  }
  ContextModel(const ContextModel&) = delete;
  ContextModel& operator=(const ContextModel&) = delete;
  ContextModel(ContextModel&& other) noexcept
      : context_(std::exchange(other.context_, nullptr)),
        model_(other.model_),
        vocab_(other.vocab_),
        vocab_size_(other.vocab_size_),
        n_ctx_(other.n_ctx_),
        n_batch_(other.n_batch_),
        n_seq_max_(other.n_seq_max_),
        batch_(std::exchange(other.batch_, llama_batch{})),
        tree_batch_(std::exchange(other.tree_batch_, llama_batch{})),
        tree_pending_(other.tree_pending_),
        tree_leaves_(other.tree_leaves_),
        tree_tokens_(std::move(other.tree_tokens_)),
        tree_parents_(std::move(other.tree_parents_)),
        tree_depth_(std::move(other.tree_depth_)),
        children_(std::move(other.children_)),
        leaf_begin_(std::move(other.leaf_begin_)),
        leaf_end_(std::move(other.leaf_end_)),
        cached_(std::move(other.cached_)),
        straddled_rows_(std::move(other.straddled_rows_)),
        name_(std::move(other.name_)) {}
  ContextModel& operator=(ContextModel&&) = delete;

  /// \brief Draft call: the V next-token logits after the whole context.
  std::span<const float> operator()(std::span<const token_t> context) {
    return (*this)(context, 1);
  }

  /// \brief Target call: n rows of V logits, row i after the first context.size() - n + 1 + i
  /// tokens. \throws std::invalid_argument for a context longer than n_ctx, n outside
  /// [1, context.size()] or a token outside [0, V); std::runtime_error if llama_decode fails
  /// (the KV cache is rolled back first).
  std::span<const float> operator()(std::span<const token_t> context, std::size_t n) {
    check_call(context, n);
    settle_tree(context);
    const CacheUpdate plan = plan_cache_update(cached_, context, n);
    check_tokens(context, plan.keep);
    if (plan.keep < cached_.size()) roll_back(plan.keep);
    const std::span<const token_t> fresh = plan.new_tokens;
    const std::size_t chunks = (fresh.size() + n_batch_ - 1) / n_batch_;
    // The first chunk takes the remainder, so the last one is a full n_batch (or all of fresh):
    // the n output rows then come from a single llama_decode whenever n <= n_batch.
    // Only n > n_batch spreads the rows over several decodes; they are copied then.
    std::size_t begin = 0;
    std::size_t end = fresh.size() - (chunks - 1) * n_batch_;
    const std::size_t first_output = fresh.size() - n;  // index in fresh of the first row
    const bool straddles = n > n_batch_;
    if (straddles) straddled_rows_.resize(n * vocab_size_);
    for (std::size_t chunk = 0; chunk < chunks; ++chunk) {
      batch_.n_tokens = 0;
      for (std::size_t i = begin; i < end; ++i) {
        add_to_batch(fresh[i], static_cast<llama_pos>(plan.keep + i), i >= first_output);
      }
      decode_or_roll_back(plan.keep + begin, context.size());
      for (std::size_t i = begin; i < end; ++i) cached_.push_back(fresh[i]);
      if (straddles) copy_rows(begin, end, first_output);
      begin = end;
      end += n_batch_;
    }
    if (straddles) return straddled_rows_;
    const float* logits = llama_get_logits(context_);
    return {logits, n * vocab_size_};
  }

  /// \brief Tree call (specdec's TreeTargetModel, specdec/tree.hpp): one llama_decode scores
  /// every node of a drafted tree. Returns tokens.size() + 1 rows: row 0 after `committed`,
  /// row 1 + i after committed and the path root -> node i. Nodes are topologically ordered
  /// (parents[i] < i; -1 = a child of the committed context).
  ///
  /// Every root-to-leaf path is a llama.cpp sequence of its own (1..L; sequence 0 holds the
  /// committed tokens): the committed prefix is shared with all of them (llama_memory_seq_cp,
  /// no copy in a unified KV cache), and a node carries the ids of every leaf below it, so its
  /// attention sees exactly its ancestors. The next call's context (committed + accepted path
  /// + ...) tells which path survived: its positions move to sequence 0, the other sequences
  /// are dropped. Needs a context created with n_seq_max >= L + 1 (ContextOptions::n_seq_max;
  /// LoadedModel then makes the KV cache unified).
  /// \throws std::invalid_argument for malformed parents, a token outside [0, V), more leaves
  /// than sequences, more nodes than n_batch or the context holds; std::runtime_error if
  /// llama_decode fails (the KV cache is rolled back to the committed prefix first).
  std::span<const float> score_tree(std::span<const token_t> committed,
                                    std::span<const token_t> tokens,
                                    std::span<const std::int32_t> parents) {
    check_call(committed, 1);
    settle_tree(committed);  // the previous tree's layout is read here, before it is replaced
    const std::size_t leaves = plan_tree(committed, tokens, parents);

    // The committed tokens but the last, as a chain on sequence 0 (no rows wanted).
    const std::size_t c = committed.size();
    const CacheUpdate plan = plan_cache_update(cached_, committed, 1);
    check_tokens(committed, plan.keep);
    if (plan.keep < cached_.size()) roll_back(plan.keep);
    for (std::size_t begin = plan.keep; begin + 1 < c; begin += n_batch_) {
      const std::size_t end = std::min(begin + n_batch_, c - 1);
      batch_.n_tokens = 0;
      for (std::size_t i = begin; i < end; ++i) {
        add_to_batch(committed[i], static_cast<llama_pos>(i), false);
      }
      decode_or_roll_back(begin, c);
      for (std::size_t i = begin; i < end; ++i) cached_.push_back(committed[i]);
    }

    // Every path sequence shares the prefix; then one llama_decode: the last committed token
    // (all sequences, the root row) and every node (its leaves' sequences).
    llama_memory_t memory = llama_get_memory(context_);
    for (std::size_t leaf = 0; leaf < leaves; ++leaf) {
      llama_memory_seq_cp(memory, 0, static_cast<llama_seq_id>(1 + leaf), 0,
                          static_cast<llama_pos>(c - 1));
    }
    tree_batch_.n_tokens = 0;
    add_to_tree_batch(committed[c - 1], static_cast<llama_pos>(c - 1), 0, leaves, true);
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      add_to_tree_batch(tokens[i], static_cast<llama_pos>(c + tree_depth_[i]), leaf_begin_[i],
                        leaf_end_[i], false);
    }
    const std::int32_t status = llama_decode(context_, tree_batch_);
    if (status != 0) {
      for (std::size_t leaf = 0; leaf < leaves; ++leaf) {
        llama_memory_seq_rm(memory, static_cast<llama_seq_id>(1 + leaf), -1, -1);
      }
      roll_back(c - 1);
      detail::throw_runtime_error(who(), ": llama_decode returned ", status, " (",
                                  detail::decode_status_meaning(status), ") scoring a tree of ",
                                  tokens.size(), " nodes after a context of ", c,
                                  " (n_ctx = ", n_ctx_, ")");
    }
    cached_.push_back(committed[c - 1]);
    tree_tokens_.assign(tokens.begin(), tokens.end());
    tree_parents_.assign(parents.begin(), parents.end());
    tree_leaves_ = leaves;
    tree_pending_ = true;
    return {llama_get_logits(context_), (tokens.size() + 1) * vocab_size_};
  }

  /// \brief Forgets the KV cache: the next call recomputes its whole context. Use it before
  /// each measured run, or after decoding on the context yourself.
  void reset() {
    llama_memory_clear(llama_get_memory(context_), true);
    cached_.clear();
    tree_pending_ = false;
  }

  /// \brief The tokens whose keys/values the KV cache holds (sequence 0), in position order.
  [[nodiscard]] std::span<const token_t> cached_tokens() const noexcept { return cached_; }

  [[nodiscard]] std::size_t vocab_size() const noexcept { return vocab_size_; }
  /// \brief The longest context a call may have: llama_n_ctx, and for a model with learned
  /// positions at most its training context. Set GenerationConfig::max_context to at most this.
  [[nodiscard]] std::size_t max_context() const noexcept { return n_ctx_; }
  [[nodiscard]] llama_context* context() const noexcept { return context_; }
  /// \brief How errors name this model (ContextOptions::name; LoadedModel defaults to the GGUF
  /// file's name). Empty: "llama.cpp model".
  [[nodiscard]] const std::string& name() const noexcept { return name_; }
  void set_name(std::string name) { name_ = std::move(name); }
  [[nodiscard]] const llama_model* model() const noexcept { return model_; }
  [[nodiscard]] const llama_vocab* vocab() const noexcept { return vocab_; }

 private:
  /// "llama.cpp model 'draft'" (or "llama.cpp model" without a name): errors say which.
  [[nodiscard]] std::string who() const {
    return name_.empty() ? std::string("llama.cpp model") : "llama.cpp model '" + name_ + "'";
  }

  void check_call(std::span<const token_t> context, std::size_t n) const {
    if (context.size() > n_ctx_) {
      detail::throw_invalid_argument(who(), " called with a context of ", context.size(),
                                     " tokens, more than its n_ctx = ", n_ctx_,
                                     "; expected GenerationConfig::max_context <= max_context()");
    }
    if (n == 0 || n > context.size()) {
      detail::throw_invalid_argument(who(), " asked for ", n, " rows after a context of ",
                                     context.size(), " tokens; expected 1 <= n <= context size");
    }
  }

  /// Tokens about to reach llama_decode (those already cached were checked when they did).
  void check_tokens(std::span<const token_t> context, std::size_t from) const {
    for (std::size_t i = from; i < context.size(); ++i) {
      if (context[i] < 0 || static_cast<std::size_t>(context[i]) >= vocab_size_) {
        detail::throw_invalid_argument(who(), " got token ", context[i], " at position ", i,
                                       "; expected a token id in [0, ", vocab_size_, ")");
      }
    }
  }

  /// Checks a tree (specdec/tree.hpp's topology: one parent per token, parents[i] in [-1, i),
  /// messages behind who() + " score_tree: ") and lays it out: each node's depth (tree_depths,
  /// 0 = a child of the root), its children (ChildLinks) and, with leaves numbered in
  /// depth-first order, the range [leaf_begin, leaf_end) of the leaves below each node (its
  /// sequences are 1 + that range). Returns the number of leaves.
  std::size_t plan_tree(std::span<const token_t> committed, std::span<const token_t> tokens,
                        std::span<const std::int32_t> parents) {
    const std::size_t nodes = tokens.size();
    std::size_t height = 0;
    try {
      check_tree_sizes(nodes, parents.size());
      tree_depth_.resize(nodes);
      height = tree_depths(parents, tree_depth_);
    } catch (const std::invalid_argument& error) {
      detail::throw_invalid_argument(who(), " score_tree: ", message_without_prefix(error.what()));
    }
    if (nodes + 1 > n_batch_) {
      detail::throw_invalid_argument(who(), " score_tree: a tree of ", nodes, " nodes needs ",
                                     nodes + 1,
                                     " tokens in one llama_decode; "
                                     "expected at most n_batch = ",
                                     n_batch_);
    }
    if (committed.size() + nodes > n_ctx_) {
      detail::throw_invalid_argument(who(), " score_tree: ", committed.size(),
                                     " committed tokens and ", nodes,
                                     " nodes need more KV cells than n_ctx = ", n_ctx_);
    }
    for (std::size_t i = 0; i < nodes; ++i) {
      if (tokens[i] < 0 || static_cast<std::size_t>(tokens[i]) >= vocab_size_) {
        detail::throw_invalid_argument(who(), " score_tree: node ", i, " has token ", tokens[i],
                                       "; expected a token id in [0, ", vocab_size_, ")");
      }
    }
    if (committed.size() + height > n_ctx_) {
      detail::throw_invalid_argument(who(), " score_tree: a path of ", height, " nodes after ",
                                     committed.size(), " tokens exceeds n_ctx = ", n_ctx_);
    }
    children_.build(parents, nodes);
    // Depth-first: a node's leaves are contiguous in this numbering.
    leaf_begin_.assign(nodes, 0);
    leaf_end_.assign(nodes, 0);
    std::size_t leaves = 0;
    dfs_stack_.clear();
    for (std::int32_t root = children_.first(-1); root >= 0; root = children_.next(root)) {
      dfs_stack_.push_back(root);
    }
    std::reverse(dfs_stack_.begin(), dfs_stack_.end());
    dfs_order_.clear();
    while (!dfs_stack_.empty()) {
      const std::int32_t node = dfs_stack_.back();
      dfs_stack_.pop_back();
      dfs_order_.push_back(node);
      leaf_begin_[static_cast<std::size_t>(node)] = leaves;
      const std::size_t first = dfs_stack_.size();
      for (std::int32_t child = children_.first(node); child >= 0; child = children_.next(child)) {
        dfs_stack_.push_back(child);
      }
      if (dfs_stack_.size() == first) ++leaves;  // a leaf
      std::reverse(dfs_stack_.begin() + static_cast<std::ptrdiff_t>(first), dfs_stack_.end());
    }
    // A node's leaves end where the last leaf below it ends: children finish after parents in
    // the preorder, so a backward pass over it closes every range.
    for (std::size_t k = dfs_order_.size(); k-- > 0;) {
      const std::int32_t node = dfs_order_[k];
      const auto n = static_cast<std::size_t>(node);
      if (children_.first(node) < 0) leaf_end_[n] = leaf_begin_[n] + 1;
      const std::int32_t parent = parents[n];
      if (parent >= 0) {
        const auto p = static_cast<std::size_t>(parent);
        leaf_end_[p] = std::max(leaf_end_[p], leaf_end_[n]);
      }
    }
    if (leaves + 1 > n_seq_max_) {
      detail::throw_invalid_argument(who(), " score_tree: a tree with ", leaves, " leaves needs ",
                                     leaves + 1,
                                     " sequences; this context holds n_seq_max = ", n_seq_max_,
                                     " (create it with ContextOptions::n_seq_max >= ", leaves + 1,
                                     "; a TreeProposer's draft needs it as much as the target)");
    }
    if (tree_batch_.token == nullptr) {
      tree_batch_ = llama_batch_init(static_cast<std::int32_t>(n_batch_), 0,
                                     static_cast<std::int32_t>(n_seq_max_));
    }
    return leaves;
  }

  void add_to_tree_batch(token_t token, llama_pos position, std::size_t leaf_begin,
                         std::size_t leaf_end, bool on_sequence_zero) noexcept {
    const auto i = static_cast<std::size_t>(tree_batch_.n_tokens++);
    tree_batch_.token[i] = token;
    tree_batch_.pos[i] = position;
    std::int32_t count = 0;
    if (on_sequence_zero) tree_batch_.seq_id[i][count++] = 0;
    for (std::size_t leaf = leaf_begin; leaf < leaf_end; ++leaf) {
      tree_batch_.seq_id[i][count++] = static_cast<llama_seq_id>(1 + leaf);
    }
    tree_batch_.n_seq_id[i] = count;
    tree_batch_.logits[i] = 1;
  }

  /// After a tree call: the deepest tree path that `context` continues with moves to sequence
  /// 0 (it is what verification accepted); every path sequence is dropped. The path is the one
  /// TreeContextCache keeps (deepest_followed_node searches every branch, so siblings sharing a
  /// token do not hide a deeper path behind the first of them).
  void settle_tree(std::span<const token_t> context) {
    if (!tree_pending_) return;
    tree_pending_ = false;
    llama_memory_t memory = llama_get_memory(context_);
    const std::size_t c = cached_.size();  // the tree's committed tokens, all on sequence 0
    std::int32_t deepest = -1;
    if (context.size() > c && std::equal(cached_.begin(), cached_.end(), context.begin())) {
      deepest = deepest_followed_node(tree_tokens_, tree_parents_, tree_depth_, context.subspan(c),
                                      reaches_);
    }
    if (deepest >= 0) {
      const std::size_t length = tree_path(tree_parents_, deepest, path_);
      // Any leaf below the deepest node holds the whole path at positions [c, c + length).
      const auto leaf_sequence =
          static_cast<llama_seq_id>(1 + leaf_begin_[static_cast<std::size_t>(deepest)]);
      const auto end = static_cast<llama_pos>(c + length);
      llama_memory_seq_rm(memory, leaf_sequence, end, -1);
      llama_memory_seq_cp(memory, leaf_sequence, 0, static_cast<llama_pos>(c), end);
      for (std::size_t d = 0; d < length; ++d) {
        cached_.push_back(tree_tokens_[static_cast<std::size_t>(path_[d])]);
      }
    }
    for (std::size_t leaf = 0; leaf < tree_leaves_; ++leaf) {
      llama_memory_seq_rm(memory, static_cast<llama_seq_id>(1 + leaf), -1, -1);
    }
  }

  void add_to_batch(token_t token, llama_pos position, bool wants_logits) noexcept {
    const auto i = static_cast<std::size_t>(batch_.n_tokens++);
    batch_.token[i] = token;
    batch_.pos[i] = position;
    batch_.n_seq_id[i] = 1;
    batch_.seq_id[i][0] = 0;
    batch_.logits[i] = wants_logits ? 1 : 0;
  }

  /// Drops positions [keep, ...) from the KV cache and from the record of cached tokens.
  void roll_back(std::size_t keep) {
    if (!llama_memory_seq_rm(llama_get_memory(context_), 0, static_cast<llama_pos>(keep), -1)) {
      reset();  // a memory that cannot drop a partial sequence (recurrent): start over
      return;
    }
    cached_.resize(keep);
  }

  void decode_or_roll_back(std::size_t first_position, std::size_t context_size) {
    const std::int32_t status = llama_decode(context_, batch_);
    if (status == 0) return;
    // Processed micro-batches may remain in the memory after a failure: drop everything past
    // the positions the record says are cached, so the two agree again.
    roll_back(first_position);
    detail::throw_runtime_error(who(), ": llama_decode returned ", status, " (",
                                detail::decode_status_meaning(status), ") decoding ",
                                batch_.n_tokens, " tokens at positions ", first_position, "..",
                                first_position + static_cast<std::size_t>(batch_.n_tokens) - 1,
                                " of a context of ", context_size, " (n_ctx = ", n_ctx_, ")");
  }

  void copy_rows(std::size_t begin, std::size_t end, std::size_t first_output) {
    for (std::size_t i = std::max(begin, first_output); i < end; ++i) {
      // llama_get_logits_ith takes the token's index in the batch.
      const float* logits = llama_get_logits_ith(context_, static_cast<std::int32_t>(i - begin));
      std::copy_n(
          logits, vocab_size_,
          straddled_rows_.begin() + static_cast<std::ptrdiff_t>((i - first_output) * vocab_size_));
    }
  }

  llama_context* context_ = nullptr;
  const llama_model* model_ = nullptr;
  const llama_vocab* vocab_ = nullptr;
  std::size_t vocab_size_ = 0;
  std::size_t n_ctx_ = 0;
  std::size_t n_batch_ = 0;
  std::size_t n_seq_max_ = 1;
  llama_batch batch_{};       // (n_batch) tokens of one llama_decode
  llama_batch tree_batch_{};  // (n_batch, n_seq_max) a tree's llama_decode, on demand
  // The last tree scored (nodes), until the next call tells which path survived:
  bool tree_pending_ = false;
  std::size_t tree_leaves_ = 0;
  std::vector<token_t> tree_tokens_;                 // (nodes)
  std::vector<std::int32_t> tree_parents_;           // (nodes)
  std::vector<std::size_t> tree_depth_;              // (nodes) tree_depths: 0 = a child of the root
  ChildLinks children_;                              // (nodes) the tree's child links
  std::vector<std::size_t> leaf_begin_;              // (nodes) the leaves below a node, depth-first
  std::vector<std::size_t> leaf_end_;                // (nodes)
  std::vector<std::int32_t> dfs_stack_, dfs_order_;  // (nodes) scratch
  std::vector<std::uint8_t> reaches_;                // (nodes) scratch: deepest_followed_node
  std::vector<std::int32_t> path_;                   // (height) scratch: the kept path as node ids
  std::vector<token_t> cached_;        // (n_ctx) tokens held by the KV cache, sequence 0
  std::vector<float> straddled_rows_;  // (n, V) rows copied when they span two decodes
  std::string name_;                   // how errors name this model (name())
};

}  // namespace specdec::llama_cpp

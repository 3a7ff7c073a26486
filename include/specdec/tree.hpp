#pragma once
/// \file
/// \brief Tree drafts: the tree call in the target contract (TreeTargetModel), tree shapes and
/// sibling modes, and the pure helpers a decoder and the tree strategies share (node depths,
/// accepted paths, greedy verification of a tree).
///
/// A tree proposal is a Proposal whose `parents` are not a chain: nodes in topological order
/// (parents[i] < i; -1 = a child of the committed context, "the root"), each with the exact law
/// its token was drawn from. A round verifies the whole tree with ONE target call:
///
///   auto&& rows = target.score_tree(committed, tokens, parents);
///
/// which returns tokens.size() + 1 rows of V logits (any of the return types a TargetModel's
/// rows may have): row 0 follows `committed` (the root), row 1 + i follows committed and the
/// path root -> node i (node i's ancestors' tokens in order, then tokens[i]). For a chain this
/// is exactly the chain call's rows, so one row index serves both: row 1 + i follows node i.
///
/// The tree call is optional: a model without score_tree keeps working, and the decoder asks a
/// target for a tree only if it is a TreeTargetModel and the proposal is not a chain (a chain
/// goes through the ordinary call). A tree proposal for a target without score_tree is a
/// std::invalid_argument naming both.
///
/// KV caches keep the accepted path through the context guarantee, with no hook: the decoder's
/// next call (chain or tree) has the context committed + accepted path + next token + ..., so a
/// cached model matches that context against the tree it scored last (the accepted path is the
/// root-to-node path whose tokens the new context continues with) and keeps exactly those
/// positions (docs/design.md, "Tree drafts").

#include <algorithm>
#include <array>
#include <charconv>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "specdec/detail/error.hpp"
#include "specdec/detail/model_traits.hpp"
#include "specdec/detail/timer.hpp"
#include "specdec/enum_names.hpp"
#include "specdec/model.hpp"
#include "specdec/proposal.hpp"
#include "specdec/types.hpp"
#include "specdec/verify.hpp"

namespace specdec {

// ============================================================================================
// The tree call
// ============================================================================================

namespace detail {

template <class M>
using tree_result_t = decltype(std::declval<M&>().score_tree(
    std::declval<std::span<const token_t>>(), std::declval<std::span<const token_t>>(),
    std::declval<std::span<const std::int32_t>>()));

template <class M>
concept HasScoreTree = requires(M& model, std::span<const token_t> committed,
                                std::span<const token_t> tokens,
                                std::span<const std::int32_t> parents) {
  model.score_tree(committed, tokens, parents);
};

}  // namespace detail

/// \brief A TargetModel that can also score a whole tree of drafted tokens in one call:
/// `target.score_tree(committed, tokens, parents)` -> tokens.size() + 1 rows of V float logits
/// (see the file comment for the rows' order).
template <class M>
concept TreeTargetModel = TargetModel<M> && detail::HasScoreTree<M> &&
    detail::LogitsRowsLike<std::remove_cvref_t<detail::tree_result_t<M>>>;

namespace detail {

/// The TreeTargetModel requirements, one readable message each (instantiated for targets that
/// declare score_tree; a target without it is simply not asked for trees).
template <class Target>
struct TreeTargetRequirements {
  static constexpr bool check() {
    if constexpr (HasScoreTree<Target>) {
      static_assert(LogitsRowsLike<std::remove_cvref_t<tree_result_t<Target>>>,
                    "specdec: TreeTargetModel::score_tree(committed, tokens, parents) must return "
                    "tokens.size() + 1 rows of V contiguous floats (a range of (n + 1) * V floats "
                    "or a RowMajor Eigen matrix), like a TargetModel's rows");
    }
    return true;
  }
  static constexpr bool satisfied = check();
};

/// Keeps what a model call returned alive until the next call of that model (the decoder's
/// lifetime promise): a returned reference as a pointer, a returned value as the value.
template <class Result>
class HeldResult {
 public:
  template <class Call>
  const std::remove_cvref_t<Result>& hold(Call&& call) {
    if constexpr (std::is_lvalue_reference_v<Result>) {
      pointer_ = &std::forward<Call>(call)();
      return *pointer_;
    } else {
      value_.reset();
      value_.emplace(std::forward<Call>(call)());
      return *value_;
    }
  }

 private:
  const std::remove_cvref_t<Result>* pointer_ = nullptr;
  std::optional<std::remove_cvref_t<Result>> value_;
};

/// The decoder's tree call: `score(...)` calls target.score_tree (timed into `seconds`) and
/// views its n + 1 rows; for a target without score_tree it throws std::invalid_argument.
template <class Target, bool = HasScoreTree<Target>>
class TreeCall {
 public:
  template <class Scalar>
  LogitsRows<float> score(Target& target, double& seconds, std::span<const token_t> committed,
                          const Proposal<Scalar>& proposal) {
    static_assert(TreeTargetRequirements<Target>::satisfied);
    if constexpr (LogitsRowsLike<std::remove_cvref_t<tree_result_t<Target>>>) {
      const auto& rows = held_.hold([&]() -> decltype(auto) {
        return timed_call(seconds, [&]() -> decltype(auto) {
          return target.score_tree(committed, proposal.tokens, proposal.parents);
        });
      });
      return as_target_rows(rows, proposal.size() + 1);
    } else {
      return {};  // unreachable: the static_assert above already failed
    }
  }

 private:
  HeldResult<tree_result_t<Target>> held_;
};

template <class Target>
class TreeCall<Target, false> {
 public:
  template <class Scalar>
  LogitsRows<float> score(Target&, double&, std::span<const token_t>,
                          const Proposal<Scalar>& proposal) {
    throw_invalid_argument(
        "proposer returned a tree of ", proposal.size(),
        " nodes (parents not a chain) for a target without score_tree; expected a chain, or a "
        "TreeTargetModel: target.score_tree(committed, tokens, parents) returning one row per "
        "node plus the root row (specdec/tree.hpp)");
  }
};

}  // namespace detail

// ============================================================================================
// Shapes and sibling modes
// ============================================================================================

/// \brief How the children of one node are drafted.
enum class SiblingMode {
  /// i.i.d. from the node's draft distribution q (SpecInfer): duplicates possible.
  with_replacement,
  /// each from q renormalised without its earlier siblings' tokens (Sequoia, Gumbel-top-k):
  /// distinct tokens; sibling k reports exactly that renormalised law.
  without_replacement,
  /// the draft's k most probable tokens, deterministic: point masses (Medusa, EAGLE).
  top_k,
};

/// \brief SiblingMode's names (enum_names.hpp): "replace", "distinct", "top-k".
template <>
struct EnumNames<SiblingMode> {
  static constexpr std::string_view what = "sibling mode";
  static constexpr std::array<EnumName<SiblingMode>, 3> names{
      {{SiblingMode::with_replacement, "replace"},
       {SiblingMode::without_replacement, "distinct"},
       {SiblingMode::top_k, "top-k"}}};
};

/// \brief The shape of the tree a TreeProposer drafts each round.
///
/// Fixed: `widths[d]` children for every node at depth d (widths[0] = children of the root):
/// {4, 2, 2, 1} is the tree "4x2x2x1" (4 + 8 + 16 + 16 = 44 nodes), drafted breadth first and
/// cut to `max_nodes` nodes if that is set. Dynamic (`budget` > 0): up to `budget` nodes, grown
/// best first from the draft's own probabilities (EAGLE-2): the next node is the child, of any
/// node drafted so far, with the highest estimated probability that its whole path is accepted
/// (the product of the draft's probabilities along the path, times the parent's next-best
/// probability), at most `max_width` children per node.
///
/// nodes() is what a round drafts: TreeProposer::round_limit() states it and the decoder uses
/// it in place of GenerationConfig::draft_length (a chain's K), so a tree is never cut silently;
/// only the budget (max_new_tokens - 1) and max_context cut a round's tree, near their ends.
/// Every count is at most kMaxNodes (validate(), parse()).
struct TreeShape {
  /// The most nodes a tree may have: GenerationConfig::kMaxDraftLength, for the same reason (a
  /// round holds one row of V draft weights per node).
  static constexpr std::size_t kMaxNodes = 4096;

  std::vector<std::size_t> widths;  ///< fixed shape (used when budget == 0)
  std::size_t budget = 0;           ///< dynamic shape: nodes per round (0 = fixed)
  std::size_t max_width = 4;        ///< dynamic shape: children per node at most
  std::size_t max_nodes = 0;        ///< fixed shape: cut to this many nodes (0 = the whole tree)

  /// \brief "4x2x2x1" -> widths {4, 2, 2, 1}.
  /// \throws std::invalid_argument for anything but positive integers joined by 'x', or a shape
  /// validate() rejects (a width or a node count above kMaxNodes).
  [[nodiscard]] static TreeShape parse(std::string_view text) {
    TreeShape shape;
    std::size_t start = 0;
    while (start <= text.size()) {
      const std::size_t end = std::min(text.find('x', start), text.size());
      std::size_t width = 0;
      const char* first = text.data() + start;
      const char* last = text.data() + end;
      const auto [ptr, error] = std::from_chars(first, last, width);
      if (end == start || error != std::errc{} || ptr != last || width == 0) {
        detail::throw_invalid_argument("tree shape \"", std::string(text),
                                       "\"; expected positive widths joined by 'x', e.g. 4x2x2x1");
      }
      shape.widths.push_back(width);
      start = end + 1;
    }
    shape.validate();
    return shape;
  }

  /// \brief A dynamic shape of `nodes` nodes, at most `max_width` children per node.
  [[nodiscard]] static TreeShape dynamic(std::size_t nodes, std::size_t max_width = 4) {
    TreeShape shape;
    shape.budget = nodes;
    shape.max_width = max_width;
    return shape;
  }

  [[nodiscard]] bool is_dynamic() const noexcept { return budget > 0; }

  /// \brief Nodes a round drafts: the budget, or 4 + 4*2 + ... for a fixed shape (at most
  /// max_nodes if set). Saturates at kMaxNodes + 1 for a shape validate() rejects.
  [[nodiscard]] std::size_t nodes() const noexcept {
    if (is_dynamic()) return budget;
    const std::size_t full = std::min(full_nodes(), kMaxNodes + 1);
    return max_nodes > 0 ? std::min(full, max_nodes) : full;
  }

  /// \brief Throws std::invalid_argument naming the width or the node count that does not fit:
  /// widths and max_width in [1, kMaxNodes], at most kMaxNodes nodes (budget, max_nodes, the
  /// full fixed tree).
  void validate() const {
    if (!is_dynamic() && widths.empty()) {
      detail::throw_invalid_argument(
          "tree shape has no widths and budget = 0; expected fixed widths (e.g. 4x2x2x1) or a "
          "node budget > 0");
    }
    if (is_dynamic()) {
      if (budget > kMaxNodes) {
        detail::throw_invalid_argument("tree shape budget = ", budget, "; expected at most ",
                                       kMaxNodes, " nodes (TreeShape::kMaxNodes)");
      }
      if (max_width == 0 || max_width > kMaxNodes) {
        detail::throw_invalid_argument("tree shape max_width = ", max_width, "; expected 1..",
                                       kMaxNodes, " children per node");
      }
      return;
    }
    for (const std::size_t width : widths) {
      if (width == 0 || width > kMaxNodes) {
        detail::throw_invalid_argument("tree shape width ", width, "; expected 1..", kMaxNodes,
                                       " children per node (TreeShape::kMaxNodes)");
      }
    }
    if (max_nodes > kMaxNodes) {
      detail::throw_invalid_argument("tree shape max_nodes = ", max_nodes, "; expected at most ",
                                     kMaxNodes, " nodes (TreeShape::kMaxNodes)");
    }
    const std::size_t full = full_nodes();
    if (full > kMaxNodes && max_nodes == 0) {
      std::string text;
      for (const std::size_t width : widths) {
        if (!text.empty()) text += 'x';
        text += std::to_string(width);
      }
      if (full == kNodesOverflow) {
        detail::throw_invalid_argument("tree shape ", text, " has more than ", kMaxNodes,
                                       " nodes; expected at most ", kMaxNodes,
                                       " (TreeShape::kMaxNodes), or max_nodes set");
      }
      detail::throw_invalid_argument("tree shape ", text, " has ", full,
                                     " nodes; expected at most ", kMaxNodes,
                                     " nodes (TreeShape::kMaxNodes), or max_nodes set");
    }
  }

 private:
  static constexpr std::size_t kNodesOverflow = static_cast<std::size_t>(-1);

  /// The full fixed tree's node count, kNodesOverflow if it does not fit a size_t.
  [[nodiscard]] std::size_t full_nodes() const noexcept {
    std::size_t total = 0, level = 1;
    for (const std::size_t width : widths) {
      if (width != 0 && level > (kNodesOverflow - 1) / width) return kNodesOverflow;
      level *= width;
      if (total > kNodesOverflow - 1 - level) return kNodesOverflow;
      total += level;
    }
    return total;
  }
};

/// \brief "replace" | "distinct" | "top-k" -> SiblingMode: parse<SiblingMode>(text).
/// \throws std::invalid_argument naming the text and listing the accepted names.
[[nodiscard]] inline SiblingMode parse_sibling_mode(std::string_view text) {
  return parse<SiblingMode>(text);
}

// ============================================================================================
// Tree topology: the one convention of the decoder, TreeContextCache and the model adapters
// ============================================================================================
//
// A tree of n nodes is its `parents` (n entries) in topological order: parents[i] in [-1, i),
// -1 for a child of the root (the committed context). A chain proposal has no parents: node i's
// parent is i - 1.
//
//   depth(i)  = 0 for a child of the root, depth(parents[i]) + 1 otherwise: node i sits at
//               position committed.size() + depth(i), and its root-to-node path has
//               depth(i) + 1 nodes;
//   height    = the nodes on the longest root-to-node path: max depth + 1 (0 for no nodes).
//
// Each invariant has one message, whoever checks it (a caller may name itself in front):
//   "tree of T tokens and P parents; expected one parent per token"
//   "tree node i has parent p; expected a parent in [-1, i): nodes in topological order
//    (parents[i] < i), -1 for a child of the root"

/// \brief Throws std::invalid_argument unless a tree has one parent per token.
inline void check_tree_sizes(std::size_t tokens, std::size_t parents) {
  if (tokens != parents) {
    detail::throw_invalid_argument("tree of ", tokens, " tokens and ", parents,
                                   " parents; expected one parent per token");
  }
}

/// \brief Throws std::invalid_argument naming the first node whose parent is not in [-1, i).
inline void check_tree_parents(std::span<const std::int32_t> parents) {
  for (std::size_t i = 0; i < parents.size(); ++i) {
    const std::int32_t parent = parents[i];
    if (parent < -1 || (parent >= 0 && static_cast<std::size_t>(parent) >= i)) {
      detail::throw_invalid_argument(
          "tree node ", i, " has parent ", parent, "; expected a parent in [-1, ", i,
          "): nodes in topological order (parents[i] < i), -1 for a child of the root");
    }
  }
}

/// \brief Checks a tree (check_tree_parents) and writes each node's depth (0 = a child of the
/// root). \returns the height (0 for no nodes).
/// \throws std::invalid_argument for a bad parent, or if depths holds fewer entries than
/// parents.
inline std::size_t tree_depths(std::span<const std::int32_t> parents,
                               std::span<std::size_t> depths) {
  if (depths.size() < parents.size()) {
    detail::throw_invalid_argument("tree_depths: room for ", depths.size(), " depths for ",
                                   parents.size(), " nodes; expected one per node");
  }
  check_tree_parents(parents);
  std::size_t height = 0;
  for (std::size_t i = 0; i < parents.size(); ++i) {
    const std::int32_t parent = parents[i];
    depths[i] = parent < 0 ? 0 : depths[static_cast<std::size_t>(parent)] + 1;
    height = std::max(height, depths[i] + 1);
  }
  return height;
}

namespace detail {

// ============================================================================================
// Tree helpers
// ============================================================================================

/// Node i's parent (-1 = the root); chains (empty parents) have i - 1.
[[nodiscard]] inline std::int32_t parent_in(std::span<const std::int32_t> parents,
                                            std::size_t node) noexcept {
  return parents.empty() ? static_cast<std::int32_t>(node) - 1 : parents[node];
}

}  // namespace detail

/// \brief Node `node`'s parent: -1 for a child of the root (the committed context); node - 1
/// for a chain (empty parents). Requires node < proposal.size().
template <class Scalar>
[[nodiscard]] std::int32_t parent_of(const Proposal<Scalar>& proposal, std::size_t node) noexcept {
  return detail::parent_in(proposal.parents, node);
}

/// \brief The path root -> `node` (node indices, the node last) written to the front of `path`
/// (its size only grows); \returns its length, depth(node) + 1 (0 for node = -1, the root).
/// Empty `parents` is a chain. The tree must be valid (check_tree_parents).
inline std::size_t tree_path(std::span<const std::int32_t> parents, std::int32_t node,
                             std::vector<std::int32_t>& path) {
  std::size_t length = 0;
  for (std::int32_t v = node; v >= 0; v = detail::parent_in(parents, static_cast<std::size_t>(v))) {
    ++length;
  }
  if (path.size() < length) path.resize(length);
  std::size_t i = length;
  for (std::int32_t v = node; v >= 0; v = detail::parent_in(parents, static_cast<std::size_t>(v))) {
    path[--i] = v;
  }
  return length;
}

/// \brief The deepest node whose whole root-to-node path `continuation` begins with
/// (continuation[depth(v)] == tokens[v] for every node v on the path), or -1 if none: which
/// path of the last tree a new context kept. Siblings may hold the same token (drawn with
/// replacement), so every branch is searched; of equally deep nodes the first wins.
/// `depths` as tree_depths wrote them; `reaches` is scratch (its size only grows). O(n).
inline std::int32_t deepest_followed_node(std::span<const token_t> tokens,
                                          std::span<const std::int32_t> parents,
                                          std::span<const std::size_t> depths,
                                          std::span<const token_t> continuation,
                                          std::vector<std::uint8_t>& reaches) {
  if (reaches.size() < tokens.size()) reaches.resize(tokens.size());
  std::int32_t deepest = -1;
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    const std::int32_t parent = parents[i];
    const bool parent_reached = parent < 0 || reaches[static_cast<std::size_t>(parent)] != 0;
    reaches[i] =
        parent_reached && depths[i] < continuation.size() && continuation[depths[i]] == tokens[i];
    if (reaches[i] != 0 && (deepest < 0 || depths[i] > depths[static_cast<std::size_t>(deepest)])) {
      deepest = static_cast<std::int32_t>(i);
    }
  }
  return deepest;
}

/// \brief The children of every node (and of the root) in node order: first(u) is node u's
/// first child (u = -1: the root's), next(i) the next child of i's parent, -1 for none. Built in
/// O(n) into buffers whose sizes only grow.
class ChildLinks {
 public:
  /// \brief Room for trees of up to `n` nodes: build() allocates nothing for them.
  void reserve(std::size_t n) {
    if (first_child_.size() < n + 1) first_child_.resize(n + 1);
    if (last_child_.size() < n + 1) last_child_.resize(n + 1);
    if (next_sibling_.size() < n) next_sibling_.resize(n);
  }
  /// \brief The links of a valid tree (empty parents: a chain of n nodes).
  void build(std::span<const std::int32_t> parents, std::size_t n) {
    reserve(n);
    std::fill_n(first_child_.begin(), n + 1, -1);
    std::fill_n(last_child_.begin(), n + 1, -1);
    for (std::size_t i = 0; i < n; ++i) {
      const auto slot = static_cast<std::size_t>(detail::parent_in(parents, i) + 1);
      next_sibling_[i] = -1;
      if (first_child_[slot] < 0) {
        first_child_[slot] = static_cast<std::int32_t>(i);
      } else {
        next_sibling_[static_cast<std::size_t>(last_child_[slot])] = static_cast<std::int32_t>(i);
      }
      last_child_[slot] = static_cast<std::int32_t>(i);
    }
  }
  template <class Scalar>
  void build(const Proposal<Scalar>& proposal) {
    build(proposal.parents, proposal.size());
  }
  [[nodiscard]] std::int32_t first(std::int32_t node) const noexcept {
    return first_child_[static_cast<std::size_t>(node + 1)];
  }
  [[nodiscard]] std::int32_t next(std::int32_t node) const noexcept {
    return next_sibling_[static_cast<std::size_t>(node)];
  }

 private:
  std::vector<std::int32_t> first_child_;   // (n + 1) first child of node u at [u + 1], -1 none
  std::vector<std::int32_t> next_sibling_;  // (n) next child of the same parent, -1 none
  std::vector<std::int32_t> last_child_;    // (n + 1) scratch
};

namespace detail {
// The names verifiers used before they were public.
using specdec::ChildLinks;
using specdec::parent_of;
}  // namespace detail

namespace detail {

/// A proposal's tree is well formed: parents[i] in [-1, i) (check_tree_parents, the message
/// behind "proposer returned a tree: ").
template <class Scalar>
void check_tree(const Proposal<Scalar>& proposal) {
  try {
    check_tree_parents(proposal.parents);
  } catch (const std::invalid_argument& error) {
    throw_invalid_argument("proposer returned a tree: ", message_without_prefix(error.what()));
  }
}

/// tree_path of a proposal.
template <class Scalar>
std::size_t path_to(const Proposal<Scalar>& proposal, std::int32_t node,
                    std::vector<std::int32_t>& path) {
  return tree_path(proposal.parents, node, path);
}

/// The accepted path of a verdict on a tree (node indices root -> verdict.accepted_node) in
/// `path` (size >= the proposal's); throws std::invalid_argument for a verdict that names no
/// node of the tree or a path of another length than verdict.accepted.
template <class Scalar>
std::span<const std::int32_t> accepted_path(const Proposal<Scalar>& proposal,
                                            const VerifyResult& verdict,
                                            std::vector<std::int32_t>& path) {
  const std::int32_t node = verdict.accepted_node;
  if (node < -1 || node >= static_cast<std::int32_t>(proposal.size())) {
    throw_invalid_argument("verifier accepted node ", node, " of a tree of ", proposal.size(),
                           " nodes; expected -1 (none) or a node in [0, ", proposal.size(), ")");
  }
  const std::size_t length = path_to(proposal, node, path);
  if (length != verdict.accepted) {
    throw_invalid_argument("verifier accepted ", verdict.accepted, " tokens ending at node ", node,
                           ", whose path has ", length, "; expected the path's length");
  }
  return std::span<const std::int32_t>(path.data(), length);
}

/// ranks[i] = how many earlier siblings node i has (0 = its parent's first child); returns the
/// tree's height. `scratch` holds n + 1 counters and n depths.
template <class Scalar>
std::size_t sibling_ranks(const Proposal<Scalar>& proposal, std::vector<std::size_t>& ranks,
                          std::vector<std::size_t>& scratch) {
  const std::size_t n = proposal.size();
  if (ranks.size() < n) ranks.resize(n);
  if (scratch.size() < 2 * n + 1) scratch.resize(2 * n + 1);
  std::fill_n(scratch.begin(), n + 1, std::size_t{0});
  std::size_t* const depth = scratch.data() + n + 1;  // (n) depth(i), as tree_depths
  std::size_t height = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const std::int32_t parent = parent_of(proposal, i);
    ranks[i] = scratch[static_cast<std::size_t>(parent + 1)]++;
    depth[i] = parent < 0 ? 0 : depth[static_cast<std::size_t>(parent)] + 1;
    height = std::max(height, depth[i] + 1);
  }
  return height;
}

/// A target call's result type for a callable target; a stand-in for anything else (whose
/// decoder fails a static_assert with a readable message instead).
template <class Target, bool = std::invocable<Target&, std::span<const token_t>, std::size_t>>
struct chain_call_result {
  using type = std::invoke_result_t<Target&, std::span<const token_t>, std::size_t>;
};
template <class Target>
struct chain_call_result<Target, false> {
  using type = std::span<const float>;
};

}  // namespace detail

/// \brief Serves score_tree for any TargetModel by one chain call per node (and one for the
/// root), each on the path's full context: a TreeTargetModel for correctness tests and for
/// models without a tree forward, at n + 1 calls per tree instead of one. Holds the target by
/// reference; the rows it returns stay valid until its next call.
template <class Target>
class PathwiseTreeTarget {
 public:
  explicit PathwiseTreeTarget(Target& target) noexcept : target_(&target) {}

  /// The wrapped target's own call, unchanged.
  decltype(auto) operator()(std::span<const token_t> context, std::size_t n) {
    return (*target_)(context, n);
  }

  std::span<const float> score_tree(std::span<const token_t> committed,
                                    std::span<const token_t> tokens,
                                    std::span<const std::int32_t> parents) {
    rows_.clear();
    context_.assign(committed.begin(), committed.end());
    append_row();
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      const std::size_t length = tree_path(parents, static_cast<std::int32_t>(i), path_);
      context_.resize(committed.size());
      for (std::size_t d = 0; d < length; ++d) {
        context_.push_back(tokens[static_cast<std::size_t>(path_[d])]);
      }
      append_row();
    }
    return rows_;
  }

 private:
  void append_row() {
    auto&& result = (*target_)(std::span<const token_t>(context_), std::size_t{1});
    const LogitsRows<float> row = as_target_rows_of(result);
    const std::span<const float> values = row.row(0);
    rows_.insert(rows_.end(), values.begin(), values.end());
  }
  template <class Rows>
  static LogitsRows<float> as_target_rows_of(const Rows& rows) {
    return detail::as_target_rows(rows, 1);
  }

  Target* target_;
  std::vector<token_t> context_;
  std::vector<std::int32_t> path_;
  std::vector<float> rows_;
};

/// \brief Greedy verification of a tree: from the root, follow the child whose token is the
/// target's argmax (the first such child if several), while there is one; the next token is
/// the argmax after the last node followed. Hence exactly the tokens of greedy decoding.
///
/// \param argmax_at callable row -> token_t: the argmax of processed target row `row` (row 0
///        the root, row 1 + i after node i); called only along the followed path.
/// \returns accepted = the path's length, accepted_node = its last node (-1: none), bonus =
///          whether that node is a leaf.
template <class Scalar, class ArgmaxAt>
[[nodiscard]] VerifyResult verify_greedy_tree(const Proposal<Scalar>& proposal,
                                              ArgmaxAt&& argmax_at) {
  std::int32_t node = -1;
  std::size_t depth = 0;
  for (;;) {
    const token_t best = argmax_at(static_cast<std::size_t>(node + 1));
    std::int32_t match = -1;
    bool leaf = true;
    // Children of `node` come after it (topological order).
    for (std::size_t i = static_cast<std::size_t>(node + 1); i < proposal.size(); ++i) {
      if (detail::parent_of(proposal, i) != node) continue;
      leaf = false;
      if (proposal.tokens[i] == best) {
        match = static_cast<std::int32_t>(i);
        break;
      }
    }
    if (match < 0) return {depth, best, leaf, node};
    node = match;
    ++depth;
  }
}

}  // namespace specdec

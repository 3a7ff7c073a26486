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
#include "specdec/tree_topology.hpp"
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

namespace detail {

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

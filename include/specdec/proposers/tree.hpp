#pragma once
/// \file
/// \brief TreeProposer: drafts a tree of tokens with a draft model, in a fixed shape (widths
/// per depth, e.g. 4x2x2x1) or grown best first under a node budget (EAGLE-2 style), with
/// siblings drawn i.i.d., without replacement, or as the deterministic top-k; each node
/// reports exactly the law its token was drawn from (tree.hpp, tree_verifier.hpp).
///
/// Drafting order is topological (a node after its parent) and every decision about a node —
/// whether it exists, which law it is drawn from — uses only what was drafted before it: that
/// is what keeps TreeVerifier exact for dynamic shapes too (see tree_verifier.hpp). Nothing is
/// pruned after drafting (pruning a node by its own token would change the law it was drawn
/// from).
///
/// Draft calls: a node's children are drawn from its row, the draft's distribution after the
/// path to it. A draft that has score_tree (the TreeTargetModel call, tree.hpp) is asked for
/// the rows of every node drafted so far in one call whenever a row is missing: one call per
/// depth for fixed shapes (EAGLE's batched drafting; a GPU draft costs the same for one row or
/// many). Any other draft is called node by node, draft(committed + path), once per node that
/// gets children. Either way the context guarantee holds (committed tokens followed by
/// speculative ones), so a KV-cached draft keeps the common prefix.
///
/// Each node's q is a row of its own (a copy of the parent's processed row, with the earlier
/// siblings' tokens zeroed for siblings drawn without replacement), so Proposal::q and the
/// verifiers need no notion of sibling modes. At T = 0 every mode drafts the top-k (point
/// masses; the draft's probabilities at T = 1 rank the dynamic shape).

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

#include <Eigen/Core>

#include "specdec/coins.hpp"
#include "specdec/detail/exact_float.hpp"
#include "specdec/detail/model_traits.hpp"
#include "specdec/detail/timer.hpp"
#include "specdec/proposal.hpp"
#include "specdec/proposers/model.hpp"
#include "specdec/sampling.hpp"
#include "specdec/sampling/laws.hpp"
#include "specdec/strategies.hpp"
#include "specdec/target_rows.hpp"
#include "specdec/tree.hpp"
#include "specdec/types.hpp"

namespace specdec {

/// \brief What TreeProposer drafts: the shape and how siblings are drawn.
struct TreeOptions {
  TreeShape shape = TreeShape::parse("2x2x1");
  SiblingMode siblings = SiblingMode::without_replacement;

  /// \brief Throws std::invalid_argument for a shape TreeShape::validate rejects or a
  /// `siblings` that is not a SiblingMode.
  void validate() const {
    shape.validate();
    if (siblings != SiblingMode::with_replacement && siblings != SiblingMode::without_replacement &&
        siblings != SiblingMode::top_k) {
      detail::throw_invalid_argument(
          "tree siblings = ", static_cast<std::underlying_type_t<SiblingMode>>(siblings),
          "; expected a SiblingMode: with_replacement (0), without_replacement (1) or top_k (2)");
    }
  }
};

/// \brief Drafts a tree per round (see the file comment). The model is held by reference.
template <class Draft>
class TreeProposer {
  using Row = detail::draft_result_t<Draft>;
  using RowSpan = decltype(detail::view_row(std::declval<const Row&>()));

 public:
  /// The logits' scalar: float for DraftModel rows; double for exact tests' models.
  using Scalar = std::remove_const_t<typename RowSpan::element_type>;

  /// \throws std::invalid_argument for invalid options (TreeOptions::validate).
  TreeProposer(Draft& draft, TreeOptions options) : draft_(&draft), options_(std::move(options)) {
    options_.validate();
  }

  [[nodiscard]] const TreeOptions& options() const noexcept { return options_; }

  /// \brief The nodes a round drafts: the shape's (TreeShape::nodes). The decoder sizes a round
  /// by this in place of GenerationConfig::draft_length; a draft-length policy then counts
  /// nodes (DraftState::drafted, limit), and may stop a round's tree early.
  [[nodiscard]] std::size_t round_limit() const noexcept { return options_.shape.nodes(); }

  template <class Coins>
  Proposal<Scalar> propose(DraftRequest& request, Coins& coins) {
    const std::size_t limit = std::min(request.limit, options_.shape.nodes());
    begin_round(request, limit);
    Round<Coins> round{*this, request, coins, limit};
    if (options_.shape.is_dynamic()) {
      draft_best_first(round);
    } else {
      draft_fixed(round);
    }
    request.context.resize(request.committed);

    const std::size_t n = nodes_;
    Proposal<Scalar> proposal;
    proposal.tokens = std::span<const token_t>(tokens_.data(), n);
    proposal.parents = std::span<const std::int32_t>(parents_.data(), n);
    proposal.token_probabilities = std::span<const double>(probabilities_.data(), n);
    // The shape's bound on each node's children: fixed by its depth (or max_width) before any of
    // them is drafted, as Proposal::max_children asks.
    max_children_[0] = static_cast<std::uint32_t>(children_bound(0));
    for (std::size_t i = 0; i < n; ++i) {
      max_children_[i + 1] = static_cast<std::uint32_t>(children_bound(depth_[i] + 1));
    }
    proposal.max_children = std::span<const std::uint32_t>(max_children_.data(), n + 1);
    if (point_masses()) {
      proposal.point_mass = std::span<const std::uint8_t>(point_mass_.data(), n);
    } else if (n > 0) {
      proposal.q_weights = LogitsRows<Scalar>(
          std::span<const Scalar>(q_weights_.data(), n * stride_), request.vocab_size, stride_);
      proposal.q_normalizers = std::span<const Scalar>(q_normalizers_.data(), n);
    }
    return proposal;
  }

 private:
  template <class Coins>
  struct Round {
    TreeProposer& self;
    DraftRequest& request;
    Coins& coins;
    std::size_t limit;
  };

  /// A child the dynamic shape may draft next.
  struct Candidate {
    double score;       // estimated probability that its path is accepted
    std::int32_t node;  // the parent to draft a child of
    bool estimated;     // the parent's row is not computed yet
  };

  /// A node that has its draft row: the weights its children are drawn from (zeroed where
  /// earlier distinct siblings took a token), their block sums and sum.
  struct Expansion {
    std::size_t row = 0;       // index into rows_ / row_block_sums_
    double normalizer = 0;     // sum of the row's remaining weights
    std::size_t children = 0;  // drafted so far
  };

  /// How many children a node at depth d - 1 (d = 0: the root) may get: the shape's width at
  /// depth d, or max_width for a dynamic shape.
  [[nodiscard]] std::size_t children_bound(std::size_t depth) const noexcept {
    if (options_.shape.is_dynamic()) return options_.shape.max_width;
    return depth < options_.shape.widths.size() ? options_.shape.widths[depth] : 0;
  }

  [[nodiscard]] bool point_masses() const noexcept {
    return greedy_ || options_.siblings == SiblingMode::top_k;
  }

  void begin_round(DraftRequest& request, std::size_t limit) {
    greedy_ = request.params.greedy();
    nodes_ = 0;
    rows_used_ = 0;
    detail::ensure_size(tokens_, limit);
    detail::ensure_size(parents_, limit);
    detail::ensure_size(probabilities_, limit);
    detail::ensure_size(path_probability_, limit);
    detail::ensure_size(point_mass_, limit);
    detail::ensure_size(q_normalizers_, limit);
    detail::ensure_size(expansion_of_, limit + 1);
    detail::ensure_size(expansions_, limit + 1);
    detail::ensure_size(depth_, limit);
    detail::ensure_size(max_children_, limit + 1);
    std::fill_n(expansion_of_.begin(), limit + 1, -1);
    std::fill_n(point_mass_.begin(), limit, std::uint8_t{1});
    if (greedy_) {
      scoring_params_ = request.params;
      scoring_params_.temperature = 1.0f;
    }
    if (request.vocab_size != 0) size_buffers(request.vocab_size, limit);
  }

  void size_buffers(std::size_t vocab_size, std::size_t limit) {
    vocab_size_ = vocab_size;
    stride_ = (vocab_size + 15) / 16 * 16;
    blocks_ = weight_block_count(vocab_size);
    if (!point_masses()) detail::ensure_size(q_weights_, limit * stride_);
    detail::ensure_size(rows_, (limit + 1) * stride_);
    detail::ensure_size(row_block_sums_, (limit + 1) * blocks_);
    detail::ensure_size(processed_, vocab_size);
    detail::ensure_size(filter_scratch_, 2 * blocks_);
    sized_limit_ = limit;
  }

  /// Writes the path root -> node after the committed tokens of the request's context and
  /// returns that context.
  std::span<const token_t> path_context(DraftRequest& request, std::int32_t node) {
    auto& context = request.context;
    context.resize(request.committed);
    if (node >= 0) {
      const std::size_t depth = depth_[static_cast<std::size_t>(node)] + 1;
      context.resize(request.committed + depth);
      std::size_t i = request.committed + depth;
      for (std::int32_t v = node; v >= 0; v = parents_[static_cast<std::size_t>(v)]) {
        context[--i] = tokens_[static_cast<std::size_t>(v)];
      }
    }
    return std::span<const token_t>(context.data(), context.size());
  }

  static constexpr bool kBatched = detail::HasScoreTree<Draft> && std::is_same_v<Scalar, float>;

  /// Computes node `node`'s draft row (node = -1: the root) and returns its expansion; a
  /// batched draft computes every missing row at once (see the file comment).
  template <class Coins>
  Expansion& expand(Round<Coins>& round, std::int32_t node) {
    DraftRequest& request = round.request;
    if constexpr (kBatched) {
      auto&& result = detail::timed_call(request.stats.draft_seconds, [&]() -> decltype(auto) {
        return draft_->score_tree(
            std::span<const token_t>(request.context.data(), request.committed),
            std::span<const token_t>(tokens_.data(), nodes_),
            std::span<const std::int32_t>(parents_.data(), nodes_));
      });
      ++request.stats.draft_calls;
      const LogitsRows<float> rows = detail::as_target_rows(result, nodes_ + 1);
      for (std::int32_t u = -1; u < static_cast<std::int32_t>(nodes_); ++u) {
        if (expansion_of_[static_cast<std::size_t>(u + 1)] >= 0 || !may_expand(u)) continue;
        (void)process_row(round, u, rows.row(static_cast<std::size_t>(u + 1)));
      }
      return expansions_[static_cast<std::size_t>(
          expansion_of_[static_cast<std::size_t>(node + 1)])];
    } else {
      const std::span<const token_t> path = path_context(request, node);
      auto&& result = detail::timed_call(request.stats.draft_seconds,
                                         [&]() -> decltype(auto) { return (*draft_)(path); });
      ++request.stats.draft_calls;
      return process_row(round, node, detail::view_row(result));
    }
  }

  /// Whether a node may get children: fixed shapes stop at their last depth.
  [[nodiscard]] bool may_expand(std::int32_t node) const noexcept {
    if (options_.shape.is_dynamic()) return true;
    const std::size_t depth = node < 0 ? 0 : depth_[static_cast<std::size_t>(node)] + 1;
    return depth < options_.shape.widths.size();
  }

  /// Processes node `node`'s raw draft row into an expansion (its children's law).
  template <class Coins>
  Expansion& process_row(Round<Coins>& round, std::int32_t node, std::span<const Scalar> raw) {
    DraftRequest& request = round.request;
    detail::check_vocab_size(request.vocab_size, raw.size(), "draft model");
    // q rows exist only for sampled rounds: a sampled round after greedy ones (same V and
    // limit) still has to size them.
    if (vocab_size_ != request.vocab_size || sized_limit_ < round.limit ||
        (!point_masses() && q_weights_.size() < round.limit * stride_)) {
      size_buffers(request.vocab_size, round.limit);
    }
    std::span<const token_t> path;
    if (request.params.logits_processor) path = path_context(request, node);
    const std::span<const Scalar> logits = detail::apply_processor_into(
        request.params, path, raw, std::span<Scalar>(processed_.data(), vocab_size_));
    const std::size_t index = rows_used_++;
    const std::span<Scalar> weights(rows_.data() + index * stride_, vocab_size_);
    const std::span<Scalar> block_sums(row_block_sums_.data() + index * blocks_, blocks_);
    const std::size_t position =
        request.committed + (node < 0 ? 0 : depth_[static_cast<std::size_t>(node)] + 1);
    const TokenDistribution<Scalar> q = detail::on_model_row(
        [&] {
          return process_logits(logits, greedy_ ? scoring_params_ : request.params, filter_scratch_,
                                weights, block_sums);
        },
        "draft model logits for position ", position, " (context length ", position, ")");
    Expansion& expansion = expansions_[index];
    expansion = Expansion{index, static_cast<double>(q.normalizer), 0};
    expansion_of_[static_cast<std::size_t>(node + 1)] = static_cast<std::int32_t>(index);
    return expansion;
  }

  [[nodiscard]] std::span<Scalar> row_weights(const Expansion& expansion) noexcept {
    return std::span<Scalar>(rows_.data() + expansion.row * stride_, vocab_size_);
  }
  [[nodiscard]] std::span<Scalar> row_block_sums(const Expansion& expansion) noexcept {
    return std::span<Scalar>(row_block_sums_.data() + expansion.row * blocks_, blocks_);
  }

  /// The token a deterministic sibling takes next: the most probable remaining one (lowest
  /// index on ties); -1 if none has weight left.
  [[nodiscard]] token_t best_remaining(const Expansion& expansion) noexcept {
    const std::span<Scalar> weights = row_weights(expansion);
    token_t best = -1;
    Scalar best_weight = 0;
    for (std::size_t v = 0; v < weights.size(); ++v) {
      if (weights[v] > best_weight) {
        best_weight = weights[v];
        best = static_cast<token_t>(v);
      }
    }
    return best;
  }

  /// Removes `token` from an expansion's row (distinct siblings): its weight to 0, its block
  /// re-summed, the normalizer the double sum of the block sums (as process_logits has it).
  void remove_token(Expansion& expansion, token_t token) {
    const std::span<Scalar> weights = row_weights(expansion);
    const std::span<Scalar> block_sums = row_block_sums(expansion);
    const auto t = static_cast<std::size_t>(token);
    weights[t] = Scalar(0);
    const std::size_t block = t / detail::kBlockSize;
    const std::size_t begin = block * detail::kBlockSize;
    const std::size_t end = std::min(weights.size(), begin + detail::kBlockSize);
    Scalar sum = 0;
    for (std::size_t v = begin; v < end; ++v) sum += weights[v];
    block_sums[block] = sum;
    double total = 0;
    for (const Scalar s : block_sums) total += static_cast<double>(s);
    expansion.normalizer = total;
  }

  /// Drafts the next child of `parent` (whose expansion is given). False when the parent has
  /// no token left to offer (distinct siblings that exhausted the support).
  template <class Coins>
  bool draft_child(Round<Coins>& round, std::int32_t parent, Expansion& expansion) {
    if (!(expansion.normalizer > 0)) return false;
    const std::size_t node = nodes_;
    const std::span<Scalar> weights = row_weights(expansion);
    token_t token;
    if (point_masses()) {
      token = best_remaining(expansion);
      if (token < 0) return false;
    } else {
      token = round.coins.draw(WeightsLaw<Scalar>{weights, row_block_sums(expansion)});
      Scalar* q_row = q_weights_.data() + node * stride_;
      std::copy(weights.begin(), weights.end(), q_row);
      q_normalizers_[node] = static_cast<Scalar>(expansion.normalizer);
    }
    const double probability =
        static_cast<double>(weights[static_cast<std::size_t>(token)]) / expansion.normalizer;
    tokens_[node] = token;
    parents_[node] = parent;
    point_mass_[node] = point_masses() ? 1 : 0;
    probabilities_[node] = probability;
    const double parent_path =
        parent < 0 ? 1.0 : path_probability_[static_cast<std::size_t>(parent)];
    path_probability_[node] = parent_path * probability;
    depth_[node] = parent < 0 ? 0 : depth_[static_cast<std::size_t>(parent)] + 1;
    ++nodes_;
    ++expansion.children;
    if (point_masses() || options_.siblings == SiblingMode::without_replacement) {
      remove_token(expansion, token);
    }
    return true;
  }

  template <class Coins>
  [[nodiscard]] bool may_draft(Round<Coins>& round) const {
    return nodes_ < round.limit &&
           round.request.draft_more(DraftState{
               nodes_, round.limit, std::span<const double>(probabilities_.data(), nodes_)});
  }

  /// Fixed widths, breadth first: every node at depth d gets widths[d] children, nodes in
  /// creation order, until the limit.
  template <class Coins>
  void draft_fixed(Round<Coins>& round) {
    const std::vector<std::size_t>& widths = options_.shape.widths;
    // Parents in breadth-first order: the root, then the nodes in the order they were made.
    for (std::int32_t parent = -1; parent < static_cast<std::int32_t>(nodes_); ++parent) {
      const std::size_t depth = parent < 0 ? 0 : depth_[static_cast<std::size_t>(parent)] + 1;
      if (depth >= widths.size()) break;  // breadth first: every later node is as deep
      if (!may_draft(round)) return;
      const std::int32_t known = expansion_of_[static_cast<std::size_t>(parent + 1)];
      Expansion& expansion =
          known >= 0 ? expansions_[static_cast<std::size_t>(known)] : expand(round, parent);
      for (std::size_t k = 0; k < widths[depth]; ++k) {
        if (k > 0 && !may_draft(round)) return;
        if (!draft_child(round, parent, expansion)) break;
      }
    }
  }

  /// Best first under the budget: repeatedly draft the child with the highest estimated path
  /// probability (the parent's path probability times the best probability its row has left;
  /// for a node whose row is not computed yet, its own probability stands in until it is).
  template <class Coins>
  void draft_best_first(Round<Coins>& round) {
    auto before = [](const Candidate& a, const Candidate& b) {
      return a.score < b.score || (detail::exactly_equal(a.score, b.score) && a.node > b.node);
    };
    heap_.clear();
    heap_.reserve(2 * round.limit + 2);
    auto push = [&](Candidate candidate) {
      heap_.push_back(candidate);
      std::push_heap(heap_.begin(), heap_.end(), before);
    };
    auto score_of = [&](std::int32_t node, const Expansion& expansion) {
      const double path = node < 0 ? 1.0 : path_probability_[static_cast<std::size_t>(node)];
      const token_t best = best_remaining(expansion);
      if (best < 0 || !(expansion.normalizer > 0)) return -1.0;
      return path * static_cast<double>(row_weights(expansion)[static_cast<std::size_t>(best)]) /
             expansion.normalizer;
    };
    push({1.0, -1, true});
    const std::size_t max_width = options_.shape.max_width;
    while (!heap_.empty() && may_draft(round)) {
      std::pop_heap(heap_.begin(), heap_.end(), before);
      const Candidate candidate = heap_.back();
      heap_.pop_back();
      const std::int32_t parent = candidate.node;
      const std::int32_t known = expansion_of_[static_cast<std::size_t>(parent + 1)];
      Expansion& expansion =
          known >= 0 ? expansions_[static_cast<std::size_t>(known)] : expand(round, parent);
      if (candidate.estimated) {
        // Now that the row is known, the estimate gives way to the real score.
        const double score = score_of(parent, expansion);
        if (score < 0) continue;
        if (!heap_.empty() && before(Candidate{score, parent, false}, heap_.front())) {
          push({score, parent, false});
          continue;
        }
      }
      if (!draft_child(round, parent, expansion)) continue;
      // The child's own children: until its row is known, its own probability stands in for
      // its best child's (an upper bound would cost a draft call per candidate reaching the top).
      const auto child = static_cast<std::int32_t>(nodes_ - 1);
      push({path_probability_[nodes_ - 1] * probabilities_[nodes_ - 1], child, true});
      if (expansion.children < max_width) {
        const double score = score_of(parent, expansion);
        if (score >= 0) push({score, parent, false});
      }
    }
  }

  using Aligned = std::vector<Scalar, Eigen::aligned_allocator<Scalar>>;
  Draft* draft_;
  TreeOptions options_;
  SamplingParams scoring_params_;  // greedy rounds: the draft row at T = 1, to rank tokens
  bool greedy_ = false;
  std::size_t nodes_ = 0;
  std::size_t rows_used_ = 0;
  std::size_t vocab_size_ = 0;
  std::size_t stride_ = 0;
  std::size_t blocks_ = 0;
  std::size_t sized_limit_ = 0;
  std::vector<token_t> tokens_;              // (N) node tokens
  std::vector<std::int32_t> parents_;        // (N) node parents, -1 = root
  std::vector<double> probabilities_;        // (N) draft probability of the node's token
  std::vector<double> path_probability_;     // (N) product along the path root -> node
  std::vector<std::uint8_t> point_mass_;     // (N)
  std::vector<std::size_t> depth_;           // (N) 0 = child of the root
  std::vector<std::uint32_t> max_children_;  // (N + 1) the shape's bound, [0] the root's
  Aligned q_weights_;                        // (N, S) node i's q row (sampled modes)
  std::vector<Scalar> q_normalizers_;        // (N)
  Aligned rows_;                             // (N + 1, S) expanded nodes' draft rows
  std::vector<Scalar> row_block_sums_;       // (N + 1, B) their block sums
  std::vector<Expansion> expansions_;        // (N + 1)
  std::vector<std::int32_t> expansion_of_;   // (N + 1) [node + 1] -> expansion, -1 none
  Aligned processed_;                        // (V) draft row after the logits processor
  std::vector<Scalar> filter_scratch_;       // top-k / top-p selection
  std::vector<Candidate> heap_;              // best-first candidates (dynamic shapes)
};

}  // namespace specdec

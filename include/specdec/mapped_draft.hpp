#pragma once
/// \file
/// \brief MappedDraft: a draft model of another vocabulary presented in the target's id space
/// (token-level intersection), so every proposer and verifier works with it unchanged.
///
/// Given a VocabularyMap (vocabulary.hpp), `MappedDraft mapped(draft, map)` is a draft model
/// whose row over V_target holds the draft's logit of draft id d at target id map(d) for every
/// shared token and -inf at every target id without a draft counterpart. -inf is the library's
/// "banned token" (NaN and +inf are errors): its probability is exactly 0 after any temperature
/// and filter. So the q the library forms from this row (logits processor, temperature, top-k,
/// top-p, min-p, all applied in the target's space) is the draft's law restricted to the shared
/// tokens and renormalised, processed like any draft row; the drafted token is drawn from that
/// q and the verifier is told that q. Speculative sampling is exact for any q it is told
/// truthfully, so the output law is the target's at every temperature and filter, with every
/// verifier (token, block, tree). Only acceptance depends on the overlap. A padded pair
/// (VocabularyVerdict::compatible) is the special case where the map is the identity.
///
/// Contexts: the decoder calls the draft with target ids (committed tokens, then drafted ones).
/// Each is translated through VocabularyMap::target_to_draft(). A target token the draft
/// vocabulary lacks (the prompt's or the target's own choices) is handed to the
/// ContextTranslation callback, which appends the draft tokens that stand for it (its text
/// re-tokenized by the draft's tokenizer, or nothing); without a callback it is a
/// std::invalid_argument naming the token and its text. Drafted tokens are always shared (their
/// q is 0 elsewhere) unless a logits processor lifts a masked logit; such a token is then a
/// context token like any other.
///
/// Cost per call: the translated context is kept, and only the part after the prefix it shares
/// with the previous call's context is translated again (the context guarantee of model.hpp:
/// consecutive contexts share a prefix, so a KV-cached draft sees its own prefix extended). The
/// draft's row is read in place (a view, no copy) and written once into the adapter's row of
/// V_target logits: one pass over the target vocabulary. The row is allocated at construction;
/// the context buffers grow to the longest context and are reused (reserve() sizes them up
/// front, so that no call allocates).
///
/// Ownership: the draft and the map are held by reference and must outlive the adapter. The
/// returned row is the adapter's buffer, valid until its next call (model.hpp's rule for views).
/// Trees: when the draft has score_tree (tree.hpp; float rows), so has the adapter: the
/// committed context is translated as above, the tree's tokens one to one (drafted from mapped
/// rows, they are shared tokens; one the draft lacks is a std::invalid_argument), and each of
/// the draft's n + 1 rows is gathered into the target's ids, so TreeProposer drafts a tree with
/// one draft call per depth, as it does with the draft itself. Without it, TreeProposer calls
/// the adapter node by node. The tree rows' buffer grows to the largest tree and is reused.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <iterator>
#include <limits>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

#include "specdec/detail/error.hpp"
#include "specdec/detail/model_traits.hpp"
#include "specdec/proposers/model.hpp"
#include "specdec/requirements.hpp"
#include "specdec/tree.hpp"
#include "specdec/types.hpp"
#include "specdec/vocabulary.hpp"

namespace specdec {

/// \brief Called for a context token of the target that the draft vocabulary lacks:
/// `translate(target_token, draft_context)` appends the draft ids that stand for it (possibly
/// none). Appended ids must be in [0, V_draft). It may throw; the adapter stays usable.
using ContextTranslation = std::function<void(token_t target_token, std::vector<token_t>&)>;

/// \brief A draft model of another vocabulary as a draft model of the target's (see the file
/// comment). Satisfies DraftModel when `Draft` returns float rows; with double rows (exact
/// tests) it returns double rows, as ModelProposer and TreeProposer accept.
template <class Draft>
class MappedDraft {
  static_assert(detail::diagnosed<detail::MappedDraftRequirements<Draft>>);
  using Row = detail::draft_result_t<Draft>;
  using RowSpan = decltype(detail::view_row(std::declval<const Row&>()));

 public:
  /// The logits' scalar: the draft's (float for DraftModel rows).
  using Scalar = std::remove_const_t<typename RowSpan::element_type>;

  /// \brief Binds the draft and the map (both by reference). `translate` handles context
  /// tokens without a draft counterpart; empty (the default): they throw.
  MappedDraft(Draft& draft, const VocabularyMap& map, ContextTranslation translate = {})
      : draft_(&draft), map_(&map), translate_(std::move(translate)) {
    row_.resize(map.target_size());
    offsets_.push_back(0);
  }

  /// \brief The draft's next-token logits after `context` (target ids), as a row of V_target
  /// logits: -inf at target ids the draft lacks.
  /// \throws std::invalid_argument for a context token outside [0, V_target), or one without a
  /// draft counterpart and no ContextTranslation (message: the token, its text, its position);
  /// std::domain_error if the draft's row does not have V_draft logits; whatever the draft or
  /// the callback throws.
  std::span<const Scalar> operator()(std::span<const token_t> context) {
    translate(context);
    auto&& result = (*draft_)(std::span<const token_t>(draft_context_));
    const std::span<const Scalar> draft_row = detail::view_row(result);
    if (draft_row.size() != map_->draft_size()) {
      detail::throw_domain_error("MappedDraft: the draft model returned ", draft_row.size(),
                                 " logits; expected ", map_->draft_size(),
                                 " (the draft vocabulary of the VocabularyMap)");
    }
    // One pass over V_target: a gather from the draft's row, -inf where no draft id maps.
    constexpr Scalar masked = -std::numeric_limits<Scalar>::infinity();
    const std::span<const token_t> sources = map_->logit_sources();
    for (std::size_t t = 0; t < row_.size(); ++t) {
      const token_t d = sources[t];
      row_[t] = d >= 0 ? draft_row[static_cast<std::size_t>(d)] : masked;
    }
    return row_;
  }

  /// \brief The draft's rows for a tree of `tokens` (target ids, parents as tree.hpp says)
  /// after `committed`, as n + 1 rows of V_target logits (see the file comment). Present when
  /// the draft has score_tree and returns float rows.
  /// \throws std::invalid_argument for a committed token as operator() says, or a tree token
  /// outside [0, V_target) or without a draft counterpart; std::domain_error if the draft's
  /// rows are not n + 1 rows of V_draft logits; whatever the draft throws.
  std::span<const Scalar> score_tree(std::span<const token_t> committed,
                                     std::span<const token_t> tokens,
                                     std::span<const std::int32_t> parents) requires
      detail::HasScoreTree<Draft> && std::is_same_v<Scalar, float> {
    translate(committed);
    const std::span<const token_t> to_draft = map_->target_to_draft();
    tree_tokens_.clear();
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      const token_t token = tokens[i];
      const token_t draft_token = token >= 0 && static_cast<std::size_t>(token) < to_draft.size()
                                      ? to_draft[static_cast<std::size_t>(token)]
                                      : -1;
      if (draft_token < 0) {
        detail::throw_invalid_argument("MappedDraft score_tree: node ", i, " has token ", token,
                                       " (\"", map_->target_text(token),
                                       "\"); expected a token the draft vocabulary shares (in [0, ",
                                       to_draft.size(), "), with a draft counterpart)");
      }
      tree_tokens_.push_back(draft_token);
    }
    auto&& result = draft_->score_tree(std::span<const token_t>(draft_context_),
                                       std::span<const token_t>(tree_tokens_), parents);
    const std::size_t n = tokens.size() + 1;
    const LogitsRows<float> rows = detail::as_target_rows(result, n, "MappedDraft's draft");
    if (rows.vocab_size() != map_->draft_size()) {
      detail::throw_domain_error("MappedDraft: the draft model's score_tree returned rows of ",
                                 rows.vocab_size(), " logits; expected ", map_->draft_size(),
                                 " (the draft vocabulary of the VocabularyMap)");
    }
    constexpr Scalar masked = -std::numeric_limits<Scalar>::infinity();
    const std::span<const token_t> sources = map_->logit_sources();
    const std::size_t width = map_->target_size();
    tree_rows_.resize(n * width);
    for (std::size_t r = 0; r < n; ++r) {
      const std::span<const float> draft_row = rows.row(r);
      float* out = tree_rows_.data() + r * width;
      for (std::size_t t = 0; t < width; ++t) {
        const token_t d = sources[t];
        out[t] = d >= 0 ? draft_row[static_cast<std::size_t>(d)] : masked;
      }
    }
    return tree_rows_;
  }

  /// \brief Sizes the context buffers for contexts of up to `context_tokens` target tokens
  /// (translated one to one; a ContextTranslation that appends more may still grow them), so
  /// that no call allocates. Without it they grow by doubling as contexts lengthen.
  void reserve(std::size_t context_tokens) {
    target_context_.reserve(context_tokens);
    offsets_.reserve(context_tokens + 1);
    draft_context_.reserve(context_tokens);
  }

  /// \brief The draft-id context of the last call (as the draft saw it).
  [[nodiscard]] std::span<const token_t> draft_context() const noexcept { return draft_context_; }

  [[nodiscard]] const VocabularyMap& map() const noexcept { return *map_; }

 private:
  /// Brings draft_context_ to the translation of `context`, translating only what follows the
  /// prefix shared with the previous context. On an exception the kept state is the
  /// translation of the tokens before the offending one (consistent for the next call).
  void translate(std::span<const token_t> context) {
    const auto mismatch = std::mismatch(context.begin(), context.end(), target_context_.begin(),
                                        target_context_.end());
    const auto common = static_cast<std::size_t>(std::distance(context.begin(), mismatch.first));
    target_context_.resize(common);
    offsets_.resize(common + 1);
    draft_context_.resize(offsets_[common]);
    const std::span<const token_t> to_draft = map_->target_to_draft();
    for (std::size_t position = common; position < context.size(); ++position) {
      const token_t token = context[position];
      if (token < 0 || static_cast<std::size_t>(token) >= to_draft.size()) {
        detail::throw_invalid_argument("MappedDraft: context token ", token, " at position ",
                                       position, "; expected an id in [0, ", to_draft.size(),
                                       ") (the target vocabulary)");
      }
      if (const token_t draft_token = to_draft[static_cast<std::size_t>(token)]; draft_token >= 0) {
        draft_context_.push_back(draft_token);
      } else {
        translate_missing(token, position);
      }
      target_context_.push_back(token);
      offsets_.push_back(draft_context_.size());
    }
  }

  void translate_missing(token_t token, std::size_t position) {
    if (!translate_) {
      detail::throw_invalid_argument(
          "MappedDraft: context token ", token, " (\"", map_->target_text(token),
          "\") at position ", position,
          " has no draft counterpart; expected a token the draft vocabulary shares, or a "
          "ContextTranslation that supplies draft tokens for it");
    }
    const std::size_t before = draft_context_.size();
    try {
      translate_(token, draft_context_);
      for (std::size_t i = before; i < draft_context_.size(); ++i) {
        const token_t draft_token = draft_context_[i];
        if (draft_token < 0 || static_cast<std::size_t>(draft_token) >= map_->draft_size()) {
          detail::throw_invalid_argument("MappedDraft: the ContextTranslation gave draft token ",
                                         draft_token, " for target token ", token,
                                         "; expected an id in [0, ", map_->draft_size(),
                                         ") (the draft vocabulary)");
        }
      }
    } catch (...) {
      draft_context_.resize(before);
      throw;
    }
  }

  Draft* draft_;
  const VocabularyMap* map_;
  ContextTranslation translate_;
  std::vector<Scalar> row_;              // (V_target) the last row, in target ids
  std::vector<Scalar> tree_rows_;        // (n + 1, V_target) the last tree's rows, score_tree
  std::vector<token_t> tree_tokens_;     // (n) the last tree's tokens, draft ids
  std::vector<token_t> target_context_;  // (n) the last context, target ids
  std::vector<std::size_t> offsets_;     // (n + 1) draft-context length after i target tokens
  std::vector<token_t> draft_context_;   // (m) its translation, draft ids
};

}  // namespace specdec

#pragma once
/// \file
/// \brief Every contract's compile-time diagnostics in one place (as Eigen's StaticAssert.h):
/// a wrong model, strategy or callback fails with one readable line naming what is required,
/// not a template backtrace. The decoders check `detail::diagnosed<...Requirements<T>>`;
/// tests/failtest/ keeps each message true (programs that must not compile).

#include <concepts>
#include <cstddef>
#include <span>
#include <type_traits>
#include <utility>

#include "specdec/batch/draft.hpp"
#include "specdec/batch/target.hpp"
#include "specdec/detail/model_traits.hpp"
#include "specdec/model.hpp"
#include "specdec/strategies.hpp"
#include "specdec/text_tokenizer.hpp"
#include "specdec/tree.hpp"
#include "specdec/types.hpp"

namespace specdec::detail {

/// True once `Requirements` is instantiated: its static_asserts print the readable messages.
/// (sizeof needs the complete type, so naming this instantiates the checks.)
template <class Requirements>
inline constexpr bool diagnosed = sizeof(Requirements) > 0;

/// The TargetModel requirements, one readable message each; instantiated by both decoders so a
/// wrong target fails with the same line whichever decoder it is given to.
template <class Target>
struct TargetModelRequirements {
  static_assert(std::invocable<Target&, std::span<const token_t>, std::size_t>,
                "specdec: TargetModel must be callable as model(std::span<const specdec::token_t> "
                "context, std::size_t n) and return n rows of V float logits");
  static_assert(!detail::returns_column_major_matrix_target<Target>(),
                "specdec: TargetModel returned a column-major Eigen matrix; logits rows must be "
                "contiguous, so the matrix must be RowMajor (Eigen::Matrix<float, "
                "Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>)");
  static_assert(TargetModel<Target> ||
                    !std::invocable<Target&, std::span<const token_t>, std::size_t> ||
                    detail::returns_column_major_matrix_target<Target>(),
                "specdec: TargetModel must return one row of logits per requested position: n "
                "rows of V contiguous floats (a range of n*V floats or a RowMajor Eigen matrix)");
  static constexpr bool satisfied = TargetModel<Target>;
};

/// The DraftModel requirements, one readable message each (SpeculativeDecoder's draft).
template <class Draft>
struct DraftModelRequirements {
  static_assert(std::invocable<Draft&, std::span<const token_t>>,
                "specdec: DraftModel must be callable as model(std::span<const specdec::token_t> "
                "context) and return one row of V contiguous float logits");
  static_assert(!detail::returns_column_major_matrix_draft<Draft>(),
                "specdec: DraftModel returned a column-major Eigen matrix; a logits row must be "
                "contiguous: return Eigen::VectorXf / RowVectorXf or a RowMajor matrix");
  static_assert(DraftModel<Draft> || !std::invocable<Draft&, std::span<const token_t>> ||
                    detail::returns_column_major_matrix_draft<Draft>(),
                "specdec: DraftModel must be callable as model(std::span<const specdec::token_t>) "
                "and return one row of V contiguous float logits (std::span<const float>, "
                "std::vector<float>, Eigen::VectorXf, ...)");
};

/// The draft MappedDraft (mapped_draft.hpp) wraps: a draft model, or an exact test's draft
/// returning a contiguous range of doubles.
template <class Draft>
struct MappedDraftRequirements {
  static_assert(std::invocable<Draft&, std::span<const token_t>>,
                "specdec: MappedDraft's draft must be callable as draft(std::span<const "
                "specdec::token_t> context) (draft ids) and return one row of V_draft logits");
  static constexpr bool satisfied = std::invocable<Draft&, std::span<const token_t>>;
};

/// The tokenizers of string-level drafting (StringLevelProposer, text_tokenizer.hpp).
template <class Tokenizer>
struct TextTokenizerRequirements {
  static_assert(TextTokenizer<Tokenizer>,
                "specdec: a string-level tokenizer must provide std::string_view bytes(token_t "
                "id) const (the bytes token id stands for) and void encode(std::string_view text, "
                "std::vector<specdec::token_t>& out) const (appends the tokens that spell text): "
                "the TextTokenizer concept of specdec/text_tokenizer.hpp");
};

/// The optional batched calls (batch/target.hpp, batch/draft.hpp), checked for a model that
/// declares one: a member named score_batch / draft_batch that cannot be
/// called as the contract says, or returns no rows, is a mistake, not a model without it.
template <class Model>
struct BatchedModelRequirements {
  static constexpr bool check() {
    if constexpr (requires { &Model::score_batch; }) {
      static_assert(HasScoreBatch<Model>,
                    "specdec: BatchedTargetModel::score_batch must be callable as "
                    "score_batch(std::span<const specdec::ScoreRequest> requests)");
    }
    if constexpr (HasScoreBatch<Model>) {
      static_assert(LogitsRowsLike<std::remove_cvref_t<score_batch_result_t<Model>>>,
                    "specdec: BatchedTargetModel::score_batch(requests) must return the sum of "
                    "requests[i].rows rows of V contiguous floats (a range of floats or a "
                    "RowMajor Eigen matrix), request by request");
    }
    if constexpr (requires { &Model::draft_batch; }) {
      static_assert(HasDraftBatch<Model>,
                    "specdec: BatchedDraftModel::draft_batch must be callable as "
                    "draft_batch(std::span<const specdec::DraftStepRequest> requests)");
    }
    if constexpr (HasDraftBatch<Model>) {
      static_assert(LogitsRowsLike<std::remove_cvref_t<draft_batch_result_t<Model>>>,
                    "specdec: BatchedDraftModel::draft_batch(requests) must return "
                    "requests.size() rows of V contiguous floats (a range of floats or a "
                    "RowMajor Eigen matrix), one per request");
    }
    if constexpr (HasRelease<Model>) {
      static_assert(noexcept(std::declval<Model&>().release(sequence_id{})),
                    "specdec: a batched model's release(sequence_id) must be noexcept: "
                    "BatchedDecoder calls it while it removes sequences");
    }
    return true;
  }
  static constexpr bool satisfied = check();
};

/// The strategy concepts of strategies.hpp (TreeTargetRequirements, for score_tree, is in
/// tree.hpp next to the tree contract).
template <class Proposer, class Policy, class Verifier>
struct StrategyRequirements {
  static_assert(specdec::Proposer<Proposer>,
                "specdec: a Proposer must provide `template <class Coins> Proposal<float> "
                "propose(DraftRequest&, Coins&)` (see strategies.hpp)");
  static_assert(DraftLengthPolicy<Policy>,
                "specdec: a DraftLengthPolicy must provide `bool draft_more(const DraftState&)` "
                "and `void observe(const RoundReport&)` (see strategies.hpp)");
  static_assert(specdec::Verifier<Verifier>,
                "specdec: a Verifier must provide `template <class Scalar, class Coins> "
                "VerifyResult verify(const Proposal<Scalar>&, TargetRows<Scalar>&, Coins&)` "
                "(see strategies.hpp)");
};

/// A decoder's chunk callback.
template <class OnChunk>
struct ChunkCallbackRequirements {
  static_assert(std::is_invocable_r_v<bool, OnChunk&, std::span<const token_t>>,
                "specdec: the chunk callback must be callable as bool(std::span<const "
                "specdec::token_t> chunk)");
};

}  // namespace specdec::detail

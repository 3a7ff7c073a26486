#pragma once
/// \file
/// \brief The model contract: DraftModel / TargetModel concepts and what their results may be.
///
/// specdec never owns or runs a network; it calls two user callables.
///
/// - Draft model: `auto&& row = draft(std::span<const token_t> context);` returns the V
///   next-token logits after the whole context.
/// - Target model: `auto&& rows = target(std::span<const token_t> context, std::size_t n);`
///   returns n rows of V logits; row i holds the next-token logits after the first
///   `context.size() - n + 1 + i` tokens, so row n-1 follows the whole context. Verifying K
///   drafted tokens costs one target call with n = K + 1.
///
/// Accepted return types (float logits only):
/// - a row: any contiguous sized range of float (`std::span<const float>`, `std::vector<float>`,
///   `std::array<float, V>`), or a contiguous Eigen vector (`Eigen::VectorXf`, `RowVectorXf`,
///   `Map`, `Ref`);
/// - rows: a contiguous range of n*V floats (V = size / n, must divide), or a RowMajor Eigen
///   matrix with n rows. A ColMajor matrix is rejected at compile time: its rows are strided.
///
/// Ownership and lifetime: views (span, Map, const reference to the model's buffer) are read
/// in place, zero-copy, and must stay valid until the *same* model's next call. Owning results
/// (vector, VectorXf, matrices) are kept alive by the decoder until that model's next call.
///
/// Context guarantee: every call's context is the committed sequence (prompt + tokens emitted
/// so far) followed by zero or more speculative tokens, so consecutive contexts share a prefix;
/// see context_cache.hpp for reusing a KV cache across calls.
///
/// Exceptions thrown by a model propagate out of generate() unchanged.

#include <concepts>
#include <cstddef>
#include <span>

#include "specdec/detail/model_traits.hpp"
#include "specdec/types.hpp"

namespace specdec {

/// \brief A callable `model(std::span<const token_t> context)` returning one row of V float
/// logits (next-token logits after the whole context).
template <class M>
concept DraftModel = std::invocable<M&, std::span<const token_t>> &&
    detail::LogitsRowLike<detail::draft_result_t<M>>;

/// \brief A callable `model(std::span<const token_t> context, std::size_t n)` returning n rows
/// of V float logits, row i following the first `context.size() - n + 1 + i` tokens.
template <class M>
concept TargetModel = std::invocable<M&, std::span<const token_t>, std::size_t> &&
    detail::LogitsRowsLike<detail::target_result_t<M>>;

}  // namespace specdec

#pragma once
/// \file
/// \brief What counts as "a row of logits" / "rows of logits" and how to view it (internal).

#include <concepts>
#include <cstddef>
#include <functional>
#include <ranges>
#include <span>
#include <type_traits>

#include <Eigen/Core>

#include "specdec/detail/error.hpp"
#include "specdec/types.hpp"

namespace specdec::detail {

/// Any Eigen dense object (Matrix, Array, Map, Ref, Block with direct access ...).
template <class T>
concept EigenDense = std::derived_from<T, Eigen::DenseBase<T>>;

/// An Eigen object of floats whose coefficients are contiguous along the storage order.
template <class T>
concept EigenContiguousFloats = EigenDense<T> && std::same_as<typename T::Scalar, float> &&
                                ((T::Flags & Eigen::DirectAccessBit) != 0) &&
                                (T::InnerStrideAtCompileTime == 1);

/// Vectors (one compile-time row or column) have a single contiguous run of coefficients.
template <class T>
concept EigenVectorShape = EigenDense<T> &&(T::RowsAtCompileTime == 1 || T::ColsAtCompileTime == 1);

/// A column-major matrix type that can have more than one row: its rows are not contiguous.
template <class T>
concept EigenColumnMajorMatrix = EigenDense<T> && !EigenVectorShape<T> && !bool(T::IsRowMajor);

/// std::vector<float>, std::span<const float>, std::array<float, N>, ...
template <class T>
concept ContiguousFloatRange =
    !EigenDense<T> && std::ranges::contiguous_range<const T> && std::ranges::sized_range<const T> &&
    std::same_as<std::ranges::range_value_t<const T>, float>;

/// One row of V logits (what a DraftModel returns).
template <class T>
concept LogitsRowLike = ContiguousFloatRange<T> ||
    (EigenContiguousFloats<T> && (EigenVectorShape<T> || bool(T::IsRowMajor)));

/// n rows of V logits (what a TargetModel returns): a flat contiguous range of n*V floats or a
/// row-major Eigen matrix with n rows.
template <class T>
concept LogitsRowsLike = LogitsRowLike<T>;

template <class M>
using draft_result_t = std::remove_cvref_t<std::invoke_result_t<M&, std::span<const token_t>>>;
template <class M>
using target_result_t =
    std::remove_cvref_t<std::invoke_result_t<M&, std::span<const token_t>, std::size_t>>;

/// True iff M is callable as a target model and returns a column-major Eigen matrix (lazy, so
/// it is false rather than ill-formed for non-callables).
template <class M>
[[nodiscard]] consteval bool returns_column_major_matrix_draft() {
  if constexpr (std::invocable<M&, std::span<const token_t>>) {
    return EigenColumnMajorMatrix<draft_result_t<M>>;
  } else {
    return false;
  }
}
template <class M>
[[nodiscard]] consteval bool returns_column_major_matrix_target() {
  if constexpr (std::invocable<M&, std::span<const token_t>, std::size_t>) {
    return EigenColumnMajorMatrix<target_result_t<M>>;
  } else {
    return false;
  }
}

/// \brief Zero-copy view of one logits row returned by a model.
template <LogitsRowLike Row>
[[nodiscard]] std::span<const float> as_logits_span(const Row& row) noexcept {
  if constexpr (EigenDense<Row>) {
    return {row.data(), static_cast<std::size_t>(row.size())};
  } else {
    return {std::ranges::data(row), std::ranges::size(row)};
  }
}

/// \brief Zero-copy view of the n rows a target model (or `model`, a batched call) returned.
/// \throws std::domain_error if the row count or the flat size does not fit n rows.
template <LogitsRowsLike Rows>
[[nodiscard]] LogitsRows<float> as_target_rows(const Rows& rows, std::size_t n,
                                               const char* model = "target model") {
  if constexpr (EigenDense<Rows> && !EigenVectorShape<Rows>) {
    // Row-major matrix: one row per position.
    if (static_cast<std::size_t>(rows.rows()) != n) {
      throw_domain_error(model, " returned ", rows.rows(), " rows of logits; expected ", n,
                         " (one per requested position)");
    }
    if (n > 1 && rows.outerStride() != rows.cols()) {
      throw_domain_error(model, " returned a matrix with outer stride ", rows.outerStride(),
                         " for ", rows.cols(), " columns; expected contiguous rows");
    }
    const auto vocab_size = static_cast<std::size_t>(rows.cols());
    if (vocab_size == 0) {
      throw_domain_error(model, " returned rows of 0 logits; expected V >= 1");
    }
    return LogitsRows<float>({rows.data(), n * vocab_size}, vocab_size);
  } else {
    const std::span<const float> flat = as_logits_span(rows);
    if (flat.empty() || flat.size() % n != 0) {
      throw_domain_error(model, " returned ", flat.size(), " logits for ", n,
                         " rows; expected a positive multiple of ", n, " (n rows of V logits)");
    }
    return LogitsRows<float>(flat, flat.size() / n);
  }
}

/// Checks the vocabulary size of a model call against the one established by earlier calls of
/// this generate() (0 = none yet).
inline void check_vocab_size(std::size_t& vocab_size, std::size_t got, const char* model) {
  if (got == 0) {
    throw_domain_error(model, " returned 0 logits per row; expected V >= 1");
  }
  if (vocab_size == 0) {
    vocab_size = got;
  } else if (got != vocab_size) {
    throw_domain_error(model, " returned rows of ", got, " logits; expected ", vocab_size,
                       " (the vocabulary size established by earlier draft/target calls)");
  }
}

}  // namespace specdec::detail

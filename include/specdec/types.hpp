#pragma once
/// \file
/// \brief Basic vocabulary of specdec: token ids and a row-major view of logits rows.

#include <cassert>
#include <cstddef>
#include <cstdint>
#include <span>

#include "specdec/detail/error.hpp"

namespace specdec {

/// \brief A token id. Valid ids are 0 .. V-1 where V is the models' vocabulary size.
using token_t = std::int32_t;

/// \brief Names one sequence of a batch (batch/): unique among the sequences being decoded, so
/// a model may keep per-sequence state (a KV cache) under it.
using sequence_id = std::uint64_t;

/// \brief Non-owning, row-major view of `rows()` rows of `vocab_size()` contiguous values.
///
/// The layout is the one llama.cpp uses for its logits buffer: row i starts at
/// `values()[i * row_stride()]`; by default row_stride() == vocab_size() (rows back to back).
/// A larger stride lets a caller pad rows to an alignment boundary. The viewed memory belongs
/// to someone else (a model or a caller buffer) and must outlive the view.
///
/// \tparam Scalar element type; `float` for model logits, `double` in exact tests.
template <class Scalar>
class LogitsRows {
 public:
  LogitsRows() = default;

  /// \brief Views `values` as rows of `vocab_size` values, `row_stride` values apart
  /// (0 = vocab_size).
  /// \throws std::invalid_argument if vocab_size is 0, row_stride < vocab_size, or the values
  /// do not hold a whole number of strided rows.
  LogitsRows(std::span<const Scalar> values, std::size_t vocab_size, std::size_t row_stride = 0)
      : values_(values),
        vocab_size_(vocab_size),
        row_stride_(row_stride == 0 ? vocab_size : row_stride) {
    if (vocab_size == 0 || row_stride_ < vocab_size || values.size() % row_stride_ != 0) {
      detail::throw_invalid_argument("LogitsRows: ", values.size(),
                                     " values cannot be split into rows of vocab_size ", vocab_size,
                                     " with stride ", row_stride_,
                                     " (expected vocab_size >= 1, stride >= vocab_size and a "
                                     "whole number of rows)");
    }
  }

  [[nodiscard]] std::size_t rows() const noexcept {
    return row_stride_ == 0 ? 0 : values_.size() / row_stride_;
  }
  [[nodiscard]] std::size_t vocab_size() const noexcept { return vocab_size_; }
  [[nodiscard]] std::size_t row_stride() const noexcept { return row_stride_; }
  [[nodiscard]] std::span<const Scalar> values() const noexcept { return values_; }

  /// \brief Row `i` (requires i < rows()).
  [[nodiscard]] std::span<const Scalar> row(std::size_t i) const noexcept {
    assert(i < rows());
    return values_.subspan(i * row_stride_, vocab_size_);
  }
  [[nodiscard]] std::span<const Scalar> operator[](std::size_t i) const noexcept { return row(i); }

 private:
  std::span<const Scalar> values_;
  std::size_t vocab_size_ = 0;
  std::size_t row_stride_ = 0;
};

}  // namespace specdec

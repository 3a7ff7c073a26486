#pragma once
/// \file
/// \brief TargetRows: the rows of one verification call, processed lazily and at most once.
///
/// A verifier asks for what it needs — `distribution(j)` (sampled decoding) or `argmax(j)`
/// (greedy) — and only those rows are processed: token-level verification stops at the first
/// rejection, block verification reads every row. Each processed row keeps its own logits
/// processor output and block sums, so a verifier may come back to any earlier row (block
/// verification samples its residual at the row where it stops). Errors from the library's
/// processing name the row: "target model row 2 of 5 (position 19, context length 19): ...";
/// so do errors from a verifier's draws from those rows (the correction or bonus token) when
/// the decoder runs the verifier through naming_rows_in_errors().

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <utility>
#include <vector>

#include <Eigen/Core>

#include "specdec/detail/error.hpp"
#include "specdec/sampling.hpp"
#include "specdec/sampling/softmax.hpp"
#include "specdec/types.hpp"

namespace specdec {

namespace detail {

/// Runs `kernel`, the library's processing of one row of model logits (max, filters, exp,
/// sampling), and re-throws a std::domain_error from it (NaN, +inf, a row left all -inf) with
/// the row named first, e.g. "specdec: draft model logits for position 17 (context length 17):
/// logits row contains NaN ...". Only the library's own step is wrapped: exceptions from the
/// models and the logits processor propagate unchanged.
template <class Kernel, class... Where>
decltype(auto) on_model_row(Kernel&& kernel, const Where&... where) {
  try {
    return kernel();
  } catch (const std::domain_error& error) {
    throw_domain_error_for_row(error, where...);
  }
}

/// Grows `buffer` to at least `size` elements; never shrinks, so steady state allocates nothing.
template <class T, class Allocator>
void ensure_size(std::vector<T, Allocator>& buffer, std::size_t size) {
  if (buffer.size() < size) buffer.resize(size);
}

/// The row a logits processor sees and rewrites: `logits` copied into `out` (float rows in
/// place; other scalars through a float copy, which is exact for float-representable logits).
template <class Scalar>
std::span<const Scalar> apply_processor_into(const SamplingParams& params,
                                             std::span<const token_t> context,
                                             std::span<const Scalar> logits,
                                             std::span<Scalar> out) {
  if (!params.logits_processor) return logits;
  if constexpr (std::is_same_v<Scalar, float>) {
    std::copy(logits.begin(), logits.end(), out.begin());
    params.logits_processor(context, out);
  } else {
    std::vector<float> row(logits.begin(), logits.end());
    params.logits_processor(context, std::span<float>(row));
    std::copy(row.begin(), row.end(), out.begin());
  }
  return out;
}

}  // namespace detail

/// \brief Storage behind TargetRows, owned by a decoder and reused across rounds (sizes only
/// grow, so steady-state rounds allocate nothing).
template <class Scalar>
struct TargetRowBuffers {
  using Aligned = std::vector<Scalar, Eigen::aligned_allocator<Scalar>>;
  Aligned processed;                     // (R, V) rows after the logits processor
  std::vector<Scalar> block_sums;        // (R, B) each sampled row's recorded block sums
  std::vector<Scalar> block_references;  // (R, B) and their references
  std::vector<TokenDistribution<Scalar>> distributions;  // (R)
  std::vector<token_t> argmaxes;                         // (R) greedy rows
  std::vector<Scalar> greedy_logprobs;  // (R) log-softmax at T = 1 of greedy rows, at the argmax
  std::vector<std::uint8_t> done;       // (R) row j's TargetRows::Done flags
  std::vector<Scalar> filter_scratch;   // top-k / top-p selection (grown on first use)
  Aligned scratch;                      // (V) sampling scratch for verifiers
  std::vector<token_t> path_context;    // (committed + depth) a tree row's context, for the
                                        // logits processor

  /// \brief Room for `rows` rows of `vocab_size` logits.
  void reserve(std::size_t rows, std::size_t vocab_size, bool with_processor) {
    const std::size_t blocks = weight_block_count(vocab_size);
    if (with_processor) detail::ensure_size(processed, rows * vocab_size);
    detail::ensure_size(block_sums, rows * blocks);
    detail::ensure_size(block_references, rows * blocks);
    detail::ensure_size(distributions, rows);
    detail::ensure_size(argmaxes, rows);
    detail::ensure_size(greedy_logprobs, rows);
    detail::ensure_size(done, rows);
    detail::ensure_size(scratch, vocab_size);
  }
};

/// \brief The R = n + 1 rows of one target call for a proposal of n tokens, processed on
/// demand. Row j follows the committed tokens and drafted tokens 0..j-1; for a tree proposal
/// (`parents` given), row 0 follows the committed tokens and row 1 + i the path root -> node i
/// (tree.hpp), which is also what a logits processor sees as the row's context.
/// distribution(j) and argmax(j) may be asked for in any order and any number of times; the
/// logits processor runs at most once per row, and both read its output.
template <class Scalar>
class TargetRows {
 public:
  /// \param rows the target's raw logits rows (R rows)
  /// \param context committed tokens followed by the drafted tokens (the call's context)
  /// \param committed number of committed tokens at the start of `context`
  /// \param greedy_logprobs whether argmax(j) also computes the greedy log-prob
  /// \param parents a tree proposal's parents (empty: a chain); context then needs to hold
  /// the committed tokens followed by the nodes' tokens in node order
  TargetRows(LogitsRows<Scalar> rows, std::span<const token_t> context, std::size_t committed,
             const SamplingParams& params, bool greedy_logprobs, TargetRowBuffers<Scalar>& buffers,
             std::span<const std::int32_t> parents = {})
      : rows_(rows),
        context_(context),
        committed_(committed),
        params_(&params),
        greedy_logprobs_(greedy_logprobs),
        buffers_(&buffers),
        parents_(parents) {
    buffers.reserve(rows.rows(), rows.vocab_size(), static_cast<bool>(params.logits_processor));
    std::fill_n(buffers.done.begin(), rows.rows(), std::uint8_t{0});
  }

  /// \brief Runs `verify` (a verifier's pass over these rows) and re-throws a std::domain_error
  /// that does not name a row yet with the row the verifier last asked for named first: the
  /// row a failing draw samples from (the bonus row, or the row of the correction), e.g.
  /// "specdec: target model row 4 of 5 (position 7, context length 7): cannot sample: ...".
  /// Errors from processing a row already name it and pass unchanged, as does anything else.
  template <class Verify>
  decltype(auto) naming_rows_in_errors(Verify&& verify) {
    try {
      return verify();
    } catch (const std::domain_error& error) {
      if (row_error_named_ || last_row_ >= size()) throw;
      const std::size_t position = committed_ + depth(last_row_);
      detail::throw_domain_error_for_row(error, "target model row ", last_row_, " of ", size(),
                                         " (position ", position, ", context length ", position,
                                         ")");
    }
  }

  /// \brief Number of rows (drafted tokens + 1).
  [[nodiscard]] std::size_t size() const noexcept { return rows_.rows(); }
  [[nodiscard]] std::size_t vocab_size() const noexcept { return rows_.vocab_size(); }

  /// \brief The processed distribution p_j (sampled decoding, T > 0): the logits processor,
  /// temperature and filters applied; one pass over the row the first time, cached after.
  const TokenDistribution<Scalar>& distribution(std::size_t j) {
    check_row_index(j);
    last_row_ = j;
    if ((buffers_->done[j] & kDistributionDone) == 0) {
      const std::span<const Scalar> row = processed_row(j);
      const std::size_t blocks = weight_block_count(vocab_size());
      const BlockSumBuffers<Scalar> recorded{
          std::span<Scalar>(buffers_->block_sums.data() + j * blocks, blocks),
          std::span<Scalar>(buffers_->block_references.data() + j * blocks, blocks)};
      buffers_->distributions[j] = on_row(
          j, [&] { return process_logits(row, *params_, buffers_->filter_scratch, recorded); });
      mark(j, kDistributionDone);
    }
    return buffers_->distributions[j];
  }

  /// \brief The argmax of processed row j (greedy decoding; lowest index on ties), with the
  /// log-softmax at T = 1 at it when log-probs are on (same pass).
  token_t argmax(std::size_t j) {
    check_row_index(j);
    last_row_ = j;
    if ((buffers_->done[j] & kArgmaxDone) == 0) {
      const std::span<const Scalar> row = processed_row(j);
      on_row(j, [&] {
        if (greedy_logprobs_) {
          const auto [best, log_p] = detail::argmax_and_log_probability(row);
          buffers_->argmaxes[j] = best;
          buffers_->greedy_logprobs[j] = log_p;
        } else {
          buffers_->argmaxes[j] = detail::argmax_checked(row).first;
        }
        return 0;
      });
      mark(j, kArgmaxDone);
    }
    return buffers_->argmaxes[j];
  }

  /// \brief log p_j(token) of an emitted token: under the processed distribution (sampled), or
  /// the greedy log-softmax at the argmax (greedy; token must be argmax(j)).
  Scalar log_probability(std::size_t j, token_t token) {
    if (params_->greedy()) {
      (void)argmax(j);
      return buffers_->greedy_logprobs[j];
    }
    return distribution(j).log_probability(token);
  }

  /// \brief V values of scratch space for sampling laws (DistributionLaw, ResidualLaw, ...).
  [[nodiscard]] std::span<Scalar> scratch() noexcept {
    return std::span<Scalar>(buffers_->scratch.data(), vocab_size());
  }

 private:
  /// Per row, what has been computed: each accessor its own result, and the processor's output
  /// (which both read) once, so a stateful processor is not run twice on one row.
  static constexpr std::uint8_t kProcessed = 1, kDistributionDone = 2, kArgmaxDone = 4;
  void mark(std::size_t j, std::uint8_t flag) noexcept {
    buffers_->done[j] = static_cast<std::uint8_t>(buffers_->done[j] | flag);
  }

  void check_row_index(std::size_t j) const {
    if (j >= size()) {
      detail::throw_invalid_argument("TargetRows: row ", j, " requested of ", size(),
                                     "; expected j < drafted tokens + 1");
    }
  }

  /// Drafted tokens row j follows: j for a chain, the depth of node j - 1 plus 1 for a tree.
  [[nodiscard]] std::size_t depth(std::size_t j) const noexcept {
    if (parents_.empty() || j == 0) return j;
    std::size_t length = 0;
    for (std::int32_t v = static_cast<std::int32_t>(j) - 1; v >= 0;
         v = parents_[static_cast<std::size_t>(v)]) {
      ++length;
    }
    return length;
  }

  /// The context row j follows: committed + drafted 0..j-1 (chain), committed + the path
  /// root -> node j - 1 (tree; built in a buffer, only for a logits processor).
  std::span<const token_t> row_context(std::size_t j) {
    if (parents_.empty()) return context_.first(committed_ + j);
    const std::size_t length = depth(j);
    std::vector<token_t>& path = buffers_->path_context;
    path.resize(committed_ + length);
    std::copy_n(context_.begin(), committed_, path.begin());
    std::size_t i = committed_ + length;
    for (std::int32_t v = static_cast<std::int32_t>(j) - 1; v >= 0;
         v = parents_[static_cast<std::size_t>(v)]) {
      path[--i] = context_[committed_ + static_cast<std::size_t>(v)];
    }
    return path;
  }

  std::span<const Scalar> processed_row(std::size_t j) {
    if (!params_->logits_processor) return rows_.row(j);
    const std::size_t v = vocab_size();
    const std::span<Scalar> out(buffers_->processed.data() + j * v, v);
    if ((buffers_->done[j] & kProcessed) != 0) return out;
    const std::span<const Scalar> processed =
        detail::apply_processor_into(*params_, row_context(j), rows_.row(j), out);
    mark(j, kProcessed);
    return processed;
  }

  template <class Kernel>
  decltype(auto) on_row(std::size_t j, Kernel&& kernel) {
    try {
      const std::size_t position = committed_ + depth(j);
      return detail::on_model_row(kernel, "target model row ", j, " of ", size(), " (position ",
                                  position, ", context length ", position, ")");
    } catch (const std::domain_error&) {
      row_error_named_ = true;  // naming_rows_in_errors must not name the row twice
      throw;
    }
  }

  LogitsRows<Scalar> rows_;
  std::span<const token_t> context_;
  std::size_t committed_;
  const SamplingParams* params_;
  bool greedy_logprobs_;
  TargetRowBuffers<Scalar>* buffers_;
  std::span<const std::int32_t> parents_;                // a tree's parents; empty for a chain
  std::size_t last_row_ = static_cast<std::size_t>(-1);  // the row last asked for (none yet)
  bool row_error_named_ = false;  // a row-processing error (already naming its row) was thrown
};

}  // namespace specdec

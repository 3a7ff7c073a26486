#pragma once
/// \file
/// \brief ModelProposer: drafts a chain with a draft model, one call and one coin per token,
/// keeping the weights each token was drawn from (its q). The proposer behind
/// SpeculativeDecoder.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <ranges>
#include <span>
#include <type_traits>
#include <vector>

#include <Eigen/Core>

#include "specdec/coins.hpp"
#include "specdec/detail/kernels/argmax.hpp"
#include "specdec/detail/model_traits.hpp"
#include "specdec/detail/timer.hpp"
#include "specdec/proposal.hpp"
#include "specdec/sampling.hpp"
#include "specdec/sampling/laws.hpp"
#include "specdec/sampling/softmax.hpp"
#include "specdec/strategies.hpp"
#include "specdec/target_rows.hpp"
#include "specdec/types.hpp"

namespace specdec {

namespace detail {

/// A model's logits row as a span: the zero-copy views of model.hpp for float rows; any other
/// contiguous range (std::vector<double> of an exact test's model) viewed as it is.
template <class Row>
[[nodiscard]] auto view_row(const Row& row) noexcept {
  if constexpr (LogitsRowLike<Row>) {
    return as_logits_span(row);
  } else {
    using Scalar = std::ranges::range_value_t<const Row>;
    return std::span<const Scalar>(std::ranges::data(row), std::ranges::size(row));
  }
}

}  // namespace detail

/// \brief Drafts x_k ~ q_k from a draft model, k = 0, 1, ... while the policy agrees and the
/// round's limit allows: q_k is the processed draft row (same logits processor, temperature and
/// filters as the target's), x_k its inverse-CDF sample; greedy (T = 0) drafts the argmax and
/// reports a point mass (and, for a policy that reads it, the argmax's softmax probability). The
/// model is held by reference (not owned; it must outlive this).
template <class Draft>
class ModelProposer {
  using Row = detail::draft_result_t<Draft>;
  using RowSpan = decltype(detail::view_row(std::declval<const Row&>()));

 public:
  /// The logits' scalar: float for DraftModel rows; double for exact tests' models.
  using Scalar = std::remove_const_t<typename RowSpan::element_type>;

  explicit ModelProposer(Draft& draft) noexcept : draft_(&draft) {}

  template <class Coins>
  Proposal<Scalar> propose(DraftRequest& request, Coins& coins) {
    start(request);
    while (wants_row(request)) {
      auto&& row = detail::timed_call(request.stats.draft_seconds, [&]() -> decltype(auto) {
        return (*draft_)(row_context(request));
      });
      ++request.stats.draft_calls;
      take_row(request, coins, detail::view_row(row));
    }
    return finish(request);
  }

  /// \name Drafting one row at a time
  /// propose() is start(); while (wants_row()) take_row(the draft's row after request.context);
  /// finish(). A decoder of several sequences calls these itself, to give every still-drafting
  /// sequence its row from one batched draft call (batch/draft.hpp): same rows, same coins, so
  /// the same proposal. The caller counts the draft calls and their time.
  /// \{

  /// \brief Sizes every buffer for rounds of up to `max_draft` tokens over `vocab_size` ids.
  /// The decoders call it between rounds once a generation's vocabulary is known (a policy
  /// may keep the first rounds plain, and the first round that drafts must not be the one
  /// that allocates). Not during a round: it may move the buffers the proposal views.
  void reserve(std::size_t vocab_size, std::size_t max_draft, const SamplingParams& params) {
    detail::ensure_size(tokens_, max_draft);
    detail::ensure_size(normalizers_, max_draft);
    detail::ensure_size(probabilities_, max_draft);
    detail::ensure_size(point_mass_, max_draft);
    size_buffers(vocab_size, max_draft);
    // What top-k / top-p selection grows the scratch to on first use (sampling/filters.hpp).
    if (params.top_k > 0 || params.top_p < 1.0f) {
      detail::ensure_size(filter_scratch_, 2 * (vocab_size + 1));
    }
  }

  /// \brief Begins a round of `request`.
  void start(const DraftRequest& request) {
    const std::size_t limit = request.limit;
    detail::ensure_size(tokens_, limit);
    detail::ensure_size(normalizers_, limit);
    detail::ensure_size(probabilities_, limit);
    if (request.params.greedy()) {
      detail::ensure_size(point_mass_, limit);
      std::fill_n(point_mass_.begin(), limit, std::uint8_t{1});
    }
    if (request.vocab_size != 0) size_buffers(request.vocab_size, limit);
    drafted_ = 0;
  }

  /// \brief Whether another token is drafted (the limit allows it and the policy agrees); its
  /// row is the draft's after row_context(request).
  [[nodiscard]] bool wants_row(const DraftRequest& request) {
    return drafted_ < request.limit &&
           request.draft_more(DraftState{drafted_, request.limit,
                                         std::span<const double>(probabilities_.data(), drafted_)});
  }

  /// \brief The context the next row follows: the committed tokens and those drafted so far.
  [[nodiscard]] std::span<const token_t> row_context(const DraftRequest& request) const noexcept {
    return {request.context.data(), request.committed + drafted_};
  }

  /// \brief Drafts the next token from `raw`, the draft's logits after row_context(request),
  /// and appends it to request.context.
  template <class Coins>
  void take_row(DraftRequest& request, Coins& coins, std::span<const Scalar> raw) {
    const SamplingParams& params = request.params;
    const bool greedy = params.greedy();
    const bool wants_confidence = greedy && request.reads_token_probabilities();
    const std::size_t limit = request.limit;
    const std::size_t drafted = drafted_;
    const std::span<const token_t> context = row_context(request);
    if (request.vocab_size == 0) size_buffers(raw.size(), limit);
    detail::check_vocab_size(request.vocab_size, raw.size(), "draft model");
    const std::size_t vocab_size = request.vocab_size;
    const std::span<const Scalar> logits = detail::apply_processor_into(
        params, context, raw, std::span<Scalar>(processed_.data(), vocab_size));
    const std::size_t position = context.size();
    const token_t token = detail::on_model_row(
        [&]() -> token_t {
          if (wants_confidence) {
            const auto [best, log_probability] = detail::argmax_and_log_probability(logits);
            probabilities_[drafted] = std::exp(static_cast<double>(log_probability));
            return best;
          }
          if (greedy) {
            probabilities_[drafted] = 1.0;
            return argmax(logits);
          }
          const std::span<Scalar> weights(weights_.data() + drafted * stride_, vocab_size);
          const std::span<Scalar> block_sums(block_sums_.data(), weight_block_count(vocab_size));
          const TokenDistribution<Scalar> q =
              process_logits(logits, params, filter_scratch_, weights, block_sums);
          normalizers_[drafted] = q.normalizer;
          const token_t drawn = coins.draw(WeightsLaw<Scalar>{weights, block_sums});
          probabilities_[drafted] =
              static_cast<double>(weights[static_cast<std::size_t>(drawn)] / q.normalizer);
          return drawn;
        },
        "draft model logits for position ", position, " (context length ", position, ")");
    tokens_[drafted] = token;
    request.context.push_back(token);
    ++drafted_;
  }

  /// \brief The round's proposal (views this proposer's buffers until its next start()).
  [[nodiscard]] Proposal<Scalar> finish(const DraftRequest& request) const {
    const std::size_t drafted = drafted_;
    Proposal<Scalar> proposal;
    proposal.tokens = std::span<const token_t>(tokens_.data(), drafted);
    proposal.token_probabilities = std::span<const double>(probabilities_.data(), drafted);
    if (request.params.greedy()) {
      proposal.point_mass = std::span<const std::uint8_t>(point_mass_.data(), drafted);
    } else if (drafted > 0) {
      proposal.q_weights = LogitsRows<Scalar>(
          std::span<const Scalar>(weights_.data(), drafted * stride_), request.vocab_size, stride_);
      proposal.q_normalizers = std::span<const Scalar>(normalizers_.data(), drafted);
    }
    return proposal;
  }
  /// \}

  /// \brief The draft model this proposer calls.
  [[nodiscard]] Draft& draft() const noexcept { return *draft_; }

 private:
  /// Weight rows start on 64-byte boundaries (16 floats) so the kernels' full-width and
  /// streaming stores are aligned.
  static constexpr std::size_t padded_row_stride(std::size_t vocab_size) noexcept {
    return (vocab_size + 15) / 16 * 16;
  }

  void size_buffers(std::size_t vocab_size, std::size_t limit) {
    stride_ = padded_row_stride(vocab_size);
    detail::ensure_size(weights_, limit * stride_);
    detail::ensure_size(block_sums_, weight_block_count(vocab_size));
    detail::ensure_size(processed_, vocab_size);
    // Unfiltered draft rows keep per-block references there (2 B values; filters grow it to
    // ~2V on first use).
    detail::ensure_size(filter_scratch_, 2 * weight_block_count(vocab_size));
  }

  using Aligned = std::vector<Scalar, Eigen::aligned_allocator<Scalar>>;
  Draft* draft_;
  std::size_t stride_ = 0;
  std::size_t drafted_ = 0;               // tokens drafted in the current round
  Aligned weights_;                       // (K, S) q_k weights; row stride S = V rounded up to 16
  std::vector<Scalar> normalizers_;       // (K) sums of those rows
  std::vector<Scalar> block_sums_;        // (B) block sums of the row being sampled
  std::vector<token_t> tokens_;           // (K)
  std::vector<double> probabilities_;     // (K) q_k(x_k), for the policy
  std::vector<std::uint8_t> point_mass_;  // (K) all 1 for greedy drafts
  Aligned processed_;                     // (V) draft row after the logits processor
  std::vector<Scalar> filter_scratch_;    // top-k / top-p selection (grown on use)
};

}  // namespace specdec

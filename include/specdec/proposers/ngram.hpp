#pragma once
/// \file
/// \brief NgramProposer: model-free drafting by prompt lookup. The longest suffix of the context
/// that occurred earlier is continued with what followed it then, token by token (lookup
/// decoding, as llama.cpp's `lookup` and vLLM's n-gram proposer).
///
/// Exactness: a lookup is a deterministic function of the committed context (and of the tokens
/// drafted before it this round), so every drafted token is reported as a point mass. Sampled
/// verification then accepts x with probability min(1, p(x) / 1) = p(x) and resamples from
/// p without x on rejection; greedy verification accepts x iff it is the target's argmax. Either
/// way the output is the target's (docs/design.md, "Model-free drafting").

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "specdec/detail/error.hpp"
#include "specdec/detail/ngram_index.hpp"
#include "specdec/generation.hpp"
#include "specdec/proposal.hpp"
#include "specdec/strategies.hpp"
#include "specdec/target_rows.hpp"
#include "specdec/types.hpp"

namespace specdec {

/// \brief Which suffixes NgramProposer looks up.
///
/// Defaults 2..5 (for subword vocabularies): a single repeated token is mostly a coincidence,
/// and each drafted token costs a target row, so unigram matches are not worth verifying;
/// 5 tokens already pin a quoted passage down, and every extra n costs one more table per
/// committed token. Byte-level vocabularies want longer n-grams (3..8 or so): a byte is a
/// fraction of a word.
struct NgramOptions {
  static constexpr std::size_t kMaxNgram = 64;  ///< longest n-gram an index may use

  std::size_t min_ngram = 2;  ///< shortest suffix that counts as a match (>= 1)
  std::size_t max_ngram = 5;  ///< longest suffix looked up (>= min_ngram, <= kMaxNgram)

  /// \brief Throws std::invalid_argument naming the bad field.
  void validate() const {
    if (min_ngram == 0 || min_ngram > max_ngram || max_ngram > kMaxNgram) {
      detail::throw_invalid_argument("NgramOptions: min_ngram = ", min_ngram,
                                     ", max_ngram = ", max_ngram,
                                     "; expected 1 <= min_ngram <= max_ngram <= ", kMaxNgram);
    }
  }
};

/// \brief What an NgramProposer's index has done (cumulative; see work()).
using NgramWork = detail::NgramIndexWork;

/// \brief Drafts by n-gram lookup in the committed context (a Proposer; see the file comment).
///
/// Rule: the longest suffix of (committed + drafted) tokens of length in [min_ngram, max_ngram]
/// that occurred earlier in the committed tokens, and of its occurrences the most recent one
/// (local repetition — a quoted verse, an edited line of code — continues like its latest
/// copy), proposes the token that followed it. Drafting goes on while a suffix matches, the
/// policy agrees (asked before every token) and the round's limit allows. With no match at the
/// first token it returns an empty proposal without asking the policy, so a FallbackProposer
/// can hand the round to another proposer.
///
/// Cost: an incremental index (detail/ngram_index.hpp) of the committed tokens, one hashed table
/// per n mapping an n-gram to the position after its most recent occurrence. propose() appends
/// the tokens committed since the last round (O(max_ngram - min_ngram + 1) expected per token)
/// and costs O(max_ngram) expected per drafted token: nothing depends on the context's length.
/// Drafted tokens never enter the index, so a rejected draft leaves nothing behind. begin()
/// (each generate()) clears the index and reserves for the prompt plus the budget (up to 64k
/// generated tokens), so rounds allocate nothing; a context that is not an extension of the
/// indexed one (sync's check) is indexed afresh.
///
/// \tparam Scalar the Proposal's scalar: float for the decoder, double for the exact harness
/// (testing.hpp). The proposal holds tokens and point-mass flags only.
template <class Scalar = float>
class BasicNgramProposer {
 public:
  using scalar_type = Scalar;

  BasicNgramProposer() : BasicNgramProposer(NgramOptions{}) {}

  /// \throws std::invalid_argument for options that fail NgramOptions::validate.
  explicit BasicNgramProposer(const NgramOptions& options)
      : options_(validated(options)), index_(options.min_ngram, options.max_ngram) {}

  /// \brief Starts a generate(): forgets the previous context, and sizes the buffers for a
  /// round of config.usable_draft_length() tokens and the index for the budget on top of the
  /// prompt (reserved at the first round, when the prompt's length is known).
  void begin(const GenerationConfig& config) {
    index_.clear();
    planned_growth_ = std::min(config.max_new_tokens, kMaxReservedGrowth);
    reserve_at_first_round_ = true;
    size_buffers(config.usable_draft_length());
  }

  template <class Coins>
  Proposal<Scalar> propose(DraftRequest& request, Coins& /*coins: lookups draw nothing*/) {
    const std::span<const token_t> committed(request.context.data(), request.committed);
    if (reserve_at_first_round_) {
      index_.reserve(committed.size() + planned_growth_);
      reserve_at_first_round_ = false;
    }
    index_.sync(committed);
    const std::size_t limit = request.limit;
    size_buffers(limit);

    std::size_t drafted = 0;
    while (drafted < limit) {
      const std::optional<token_t> next = index_.continuation(
          std::span<const token_t>(request.context.data(), request.committed + drafted));
      if (!next) break;
      if (!request.draft_more(DraftState{
              drafted, limit, std::span<const double>(probabilities_.data(), drafted)})) {
        break;
      }
      tokens_[drafted] = *next;
      request.context.push_back(*next);  // the next lookup's suffix ends with it
      ++drafted;
    }

    Proposal<Scalar> proposal;
    proposal.tokens = std::span<const token_t>(tokens_.data(), drafted);
    proposal.point_mass = std::span<const std::uint8_t>(point_mass_.data(), drafted);
    return proposal;
  }

  [[nodiscard]] const NgramOptions& options() const noexcept { return options_; }
  /// \brief Cumulative index work (tokens indexed, table probes, rehashes, rebuilds): the
  /// counters a test reads to show that a round's work does not grow with the context.
  [[nodiscard]] const NgramWork& work() const noexcept { return index_.work(); }
  /// \brief Tokens currently indexed (the committed context as of the last propose()).
  [[nodiscard]] std::size_t indexed_tokens() const noexcept { return index_.size(); }

 private:
  static const NgramOptions& validated(const NgramOptions& options) {
    options.validate();
    return options;
  }

  void size_buffers(std::size_t limit) {
    detail::ensure_size(tokens_, limit);
    if (point_mass_.size() < limit) point_mass_.resize(limit, std::uint8_t{1});
    if (probabilities_.size() < limit) probabilities_.resize(limit, 1.0);
  }

  /// A budget used as "unlimited" must not reserve tables for it: beyond this many generated
  /// tokens the index grows by doubling (amortised O(1) per token, an allocation now and then).
  static constexpr std::size_t kMaxReservedGrowth = std::size_t{1} << 16;

  NgramOptions options_;
  detail::NgramIndex index_;
  std::size_t planned_growth_ = 0;        // tokens a generate() may add to the prompt
  bool reserve_at_first_round_ = false;   // begin() was called; the prompt is not seen yet
  std::vector<token_t> tokens_;           // (K) drafted tokens
  std::vector<std::uint8_t> point_mass_;  // (K) all 1: every drafted token is deterministic
  std::vector<double> probabilities_;     // (K) all 1: q(x) of each drafted token, for the policy
};

/// \brief The n-gram proposer the decoder uses (float proposals).
using NgramProposer = BasicNgramProposer<float>;

}  // namespace specdec

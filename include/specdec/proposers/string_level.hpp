#pragma once
/// \file
/// \brief StringLevelProposer: a draft with a tokenizer of its own drafts TEXT, and that text,
/// re-tokenized by the target's tokenizer, is the proposal (string-level exact match, SLEM;
/// Timor et al., ICML 2025). Draft and target may have any vocabularies: nothing is shared but
/// the bytes. For a byte-level target, `rejection_sampling` verifies the drafted bytes against
/// the draft's own law over them instead (string-level rejection sampling, SLRS; see below).
///
/// Exactness: the proposal is a deterministic function of the committed tokens and of the
/// draft's own coins, so every proposed token is reported as a point mass. Verification then
/// accepts x with probability p(x) (sampled) or iff x is the target's argmax (greedy), and on a
/// rejection samples from p without x: the output is the target's law, at every temperature
/// and filter, with the token and block verifiers, whatever the draft proposed (the same
/// argument as n-gram lookup, docs/design.md, "Model-free drafting"). That is why the seam
/// handling below may be approximate: it only decides what is proposed, never what is emitted.
///
/// A round:
///  1. sync: the committed target tokens are spelled into the committed text (each token's
///     bytes, kept incrementally: only the part after the prefix shared with the previous
///     round's context is spelled again). The draft's context is the draft tokenizer's tokens
///     of that text after `draft_prefix`. A tokenizer does not tokenize a text piece by piece
///     as it tokenizes the whole ("th" + "e" vs "the"), so the draft tokens are kept up to the
///     first changed byte minus `draft_look_behind` tokens, and the rest of the text is
///     tokenized again (a KV-cached draft keeps its cache for the prefix it still shares).
///     With `heal_last_token` (the default) the last of those draft tokens is held back and
///     the draft's first tokens must spell its bytes (token healing, see the option).
///  2. draft: one draft call per draft token: the draft's most probable token, or with
///     `sample_draft` a sample of its row after temperature and filters in its own vocabulary. The
///     logits processor is not applied to the draft: it is written for the target's ids. Its bytes
///     are appended to the round's draft text.
///  3. re-tokenize: the target tokenizer's tokens of the last `target_look_behind` committed
///     tokens' text followed by the draft text; if they start with those committed tokens
///     (the seam agrees), the rest is the proposal, else the draft text is tokenized alone (a
///     seam fallback, counted). The last token of a text still growing may merge with the
///     next bytes, so only the tokens before it are proposed while the draft runs (unless the
///     target tokenizer declares one_token_per_byte, text_tokenizer.hpp); if a later
///     re-tokenization changes a token already proposed, the round stops there (counted).
///  4. The policy is asked before every proposed (target) token, as by every proposer. A
///     token's probability for the policy (DraftState::token_probabilities) is the draft's:
///     each draft token's q(d) is shared geometrically among its bytes, and a target token
///     gets the product over its bytes (1 at T = 0 for a point-mass draft: the argmax's
///     softmax probability is used instead when the policy reads it).
///  A draft token with no bytes (a special token) ends the drafting; the draft's
///  `draft_eos` is proposed as the target's `target_eos` if that is set.
///
/// Rejection sampling (SLRS, `rejection_sampling`; a target of one token per byte, T > 0):
/// the draft token d is drawn from the draft's law w (temperature and filters, healing's mask),
/// and each of its new bytes is proposed with the law it was drawn from given what came before
/// it in d: q_j(b) = sum of w over the draft tokens that spell d's first j bytes and then b,
/// over the sum of w over those of more than j bytes (the draft's token trie below d's
/// prefix). Verification then accepts byte x with min(1, p(x) / q_j(x)) instead of p(x), and
/// on a rejection samples from the residual of p and q_j: exact, by the argument of every
/// sampled draft, since x_j is drawn from q_j given everything that decided it is proposed
/// (the round's earlier bytes and draft tokens, and that d goes on past byte j). A point mass
/// is the law of x_j given all of d, which is why SLEM is exact too, and why SLRS, given less,
/// accepts more: min(1, p / q) >= p. Tokens that end at byte j, whose next byte would come from
/// the next draft call, are not mixed in: that would need the draft's row after each of them.
/// Greedy rounds stay exact match (the argmax is a point mass), and so does the one token
/// proposed for draft_eos. A byte the target has no token for ends the drafting before it
/// (its mass is left out of q_j: given that x_j is proposed, it is not that byte).
///
/// Cost: one draft call per draft token (a multi-byte draft token proposes several target
/// tokens of a byte-level target per call: the reason to use one); the re-tokenization of the
/// round's draft text after each draft token (texts of a few dozen bytes). Buffers are kept
/// from round to round and grow with the generation's text; the tokenizers' own encode may
/// allocate.
///
/// Errors: a tokenizer whose tokens do not spell the text it was given, a draft row of
/// another width than the draft's first, NaN / +inf draft logits: std::invalid_argument /
/// std::domain_error naming what was wrong. The next generate() starts clean (begin()).

#include <algorithm>
#include <array>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "specdec/coins.hpp"
#include "specdec/detail/error.hpp"
#include "specdec/detail/kernels/argmax.hpp"
#include "specdec/detail/model_traits.hpp"
#include "specdec/detail/timer.hpp"
#include "specdec/generation.hpp"
#include "specdec/proposal.hpp"
#include "specdec/proposers/model.hpp"
#include "specdec/requirements.hpp"
#include "specdec/sampling.hpp"
#include "specdec/sampling/laws.hpp"
#include "specdec/sampling/softmax.hpp"
#include "specdec/strategies.hpp"
#include "specdec/target_rows.hpp"
#include "specdec/text_tokenizer.hpp"
#include "specdec/types.hpp"

namespace specdec {

/// \brief How StringLevelProposer joins the two tokenizations (see the file comment).
struct StringLevelOptions {
  static constexpr std::size_t kMaxLookBehind = 64;

  /// Draft tokens its context starts with before the text (its BOS, a system prefix).
  std::vector<token_t> draft_prefix{};
  /// Draft tokens before the first changed byte that are tokenized again with the new text.
  std::size_t draft_look_behind = 2;
  /// Committed target tokens tokenized again with the draft text, to join it at the seam.
  std::size_t target_look_behind = 1;
  /// The draft's end-of-text token (-1: none); drafting ends there.
  token_t draft_eos = -1;
  /// What draft_eos is proposed as (-1: nothing; drafting just ends). Needs draft_eos.
  token_t target_eos = -1;
  /// Draw the draft's tokens from its own law (temperature and filters as configured, in its
  /// own vocabulary) instead of taking its most probable token. Off by default: a proposed
  /// token is a point mass, accepted with probability p(x) whatever it was drawn from, so at
  /// T > 0 the draft's best guess is accepted more often than a sample of it.
  bool sample_draft = false;
  /// Token healing: the committed text's last draft token is held back from the draft's
  /// context and the draft's first tokens must spell its bytes (a draft token that is a prefix
  /// of them, or that they are a prefix of). A round's committed text ends wherever
  /// verification stopped, mostly inside a word, and the tokens of a cut word (" LO") are ones
  /// the draft seldom saw before the rest of the word; healed, it writes " LORD" as it learnt
  /// to, and only "RD" is proposed.
  bool heal_last_token = true;
  /// The most draft calls a round makes per token it may propose (a target whose tokens are
  /// longer than the draft's needs several per token); >= 1.
  std::size_t max_draft_calls_per_token = 4;
  /// String-level rejection sampling (the file comment): for a target tokenizer of one token
  /// per byte, each drafted byte is verified against the draft's law over it rather than as a
  /// point mass; the draft's tokens are then drawn from its law (sample_draft) at T > 0.
  /// Needs target_vocab_size.
  bool rejection_sampling = false;
  /// The target's vocabulary size (its logits per row): the width of the q rows that
  /// rejection_sampling reports. 0: unknown (allowed without rejection_sampling).
  std::size_t target_vocab_size = 0;

  /// \brief Throws std::invalid_argument naming the bad field.
  void validate() const {
    if (draft_look_behind > kMaxLookBehind || target_look_behind > kMaxLookBehind) {
      detail::throw_invalid_argument("StringLevelOptions: draft_look_behind = ", draft_look_behind,
                                     ", target_look_behind = ", target_look_behind,
                                     "; expected at most ", kMaxLookBehind, " tokens each");
    }
    if (draft_eos < -1 || target_eos < -1 || (target_eos >= 0 && draft_eos < 0)) {
      detail::throw_invalid_argument(
          "StringLevelOptions: draft_eos = ", draft_eos, ", target_eos = ", target_eos,
          "; expected ids >= 0 or -1 (none), and a draft_eos for a target_eos to stand for");
    }
    for (const token_t token : draft_prefix) {
      if (token < 0) {
        detail::throw_invalid_argument("StringLevelOptions: draft_prefix holds token ", token,
                                       "; expected ids >= 0");
      }
    }
    if (max_draft_calls_per_token == 0) {
      detail::throw_invalid_argument(
          "StringLevelOptions: max_draft_calls_per_token = 0; expected >= 1");
    }
    if (rejection_sampling && target_vocab_size == 0) {
      detail::throw_invalid_argument(
          "StringLevelOptions: rejection_sampling with target_vocab_size = 0; expected the "
          "target's vocabulary size (the width of the q rows it reports)");
    }
  }
};

/// \brief What a StringLevelProposer has done (cumulative over its life): the counters a user
/// reads to see how well the two tokenizations join.
struct StringLevelWork {
  std::size_t rounds = 0;                 ///< propose() calls
  std::size_t draft_calls = 0;            ///< draft model calls (one per draft token)
  std::size_t draft_tokens = 0;           ///< draft tokens with text (bytes) drafted
  std::size_t drafted_bytes = 0;          ///< their bytes
  std::size_t proposed_tokens = 0;        ///< target tokens proposed
  std::size_t seam_fallbacks = 0;         ///< re-tokenizations whose seam disagreed
  std::size_t retokenization_stops = 0;   ///< rounds stopped because a proposed token changed
  std::size_t resynced_draft_tokens = 0;  ///< draft context tokens tokenized again by sync
  std::size_t healed_rounds = 0;          ///< rounds that drafted from a healed last token
  std::size_t rejection_rounds = 0;       ///< rounds whose bytes carried the draft's law (SLRS)

  /// \brief Target tokens proposed per draft call (0 before any call).
  [[nodiscard]] double tokens_per_draft_call() const noexcept {
    return draft_calls == 0
               ? 0.0
               : static_cast<double>(proposed_tokens) / static_cast<double>(draft_calls);
  }
};

/// \brief String-level drafting (a Proposer; see the file comment).
///
/// \tparam Draft a DraftModel over the draft's own ids (float rows; double rows for the exact
/// harness, testing.hpp)
/// \tparam DraftTokenizer, TargetTokenizer TextTokenizer (text_tokenizer.hpp)
/// The draft and both tokenizers are held by reference (not owned; they must outlive this).
template <class Draft, class DraftTokenizer, class TargetTokenizer>
class StringLevelProposer {
  static_assert(detail::diagnosed<detail::TextTokenizerRequirements<DraftTokenizer>>);
  static_assert(detail::diagnosed<detail::TextTokenizerRequirements<TargetTokenizer>>);
  using Row = detail::draft_result_t<Draft>;
  using RowSpan = decltype(detail::view_row(std::declval<const Row&>()));

 public:
  /// The logits' scalar: float for a DraftModel; double for the exact harness's models.
  using Scalar = std::remove_const_t<typename RowSpan::element_type>;
  using scalar_type = Scalar;

  /// \throws std::invalid_argument for options that fail StringLevelOptions::validate, or
  /// rejection_sampling with a target tokenizer that does not declare one token per byte.
  StringLevelProposer(Draft& draft, const DraftTokenizer& draft_tokenizer,
                      const TargetTokenizer& target_tokenizer, StringLevelOptions options = {})
      : draft_(&draft),
        draft_tokenizer_(&draft_tokenizer),
        target_tokenizer_(&target_tokenizer),
        options_(validated(std::move(options))),
        draft_context_(options_.draft_prefix) {
    if (options_.rejection_sampling && !one_token_per_byte(target_tokenizer)) {
      detail::throw_invalid_argument(
          "StringLevelProposer: rejection_sampling needs a target tokenizer of one token per "
          "byte (TextTokenizer's one_token_per_byte); this one may join bytes into a token: "
          "use exact match (rejection_sampling = false)");
    }
  }

  /// \brief Starts a generate(): forgets the previous text.
  void begin(const GenerationConfig& config) {
    synced_.clear();
    token_ends_.clear();
    text_.clear();
    draft_context_.assign(options_.draft_prefix.begin(), options_.draft_prefix.end());
    draft_ends_.clear();
    size_round_buffers(config.usable_draft_length());
  }

  /// \brief Sizes the round buffers for rounds of up to `max_draft` proposed tokens (the
  /// draft-side row buffers are sized by the first draft call: the draft's V is its own).
  void reserve(std::size_t /*target vocab_size*/, std::size_t max_draft,
               const SamplingParams& /*params*/) {
    size_round_buffers(max_draft);
  }

  template <class Coins>
  Proposal<Scalar> propose(DraftRequest& request, Coins& coins) {
    ++work_.rounds;
    sync(std::span<const token_t>(request.context.data(), request.committed));
    const std::size_t limit = request.limit;
    size_round_buffers(limit);
    start_round();
    rejection_round_ = options_.rejection_sampling && !request.params.greedy();
    if (rejection_round_) {
      if (request.vocab_size != 0 && request.vocab_size != options_.target_vocab_size) {
        detail::throw_invalid_argument("StringLevelProposer: the target's rows have ",
                                       request.vocab_size,
                                       " logits; expected StringLevelOptions::target_vocab_size = ",
                                       options_.target_vocab_size);
      }
      ++work_.rejection_rounds;
    }
    if (options_.rejection_sampling) map_bytes();
    // However the round ends (a model or tokenizer may throw), the draft context is the
    // committed text's tokens again.
    struct RoundEnd {
      StringLevelProposer* self;
      ~RoundEnd() { self->end_round(); }
    } round_end{this};
    const std::size_t max_calls = limit * options_.max_draft_calls_per_token;

    std::size_t proposed = 0;
    while (proposed < limit) {
      if (!request.draft_more(DraftState{
              proposed, limit, std::span<const double>(probabilities_.data(), proposed)})) {
        break;
      }
      while (ready_ <= proposed && !drafting_done_) {
        if (round_calls_ == max_calls) {
          finish_drafting();
          break;
        }
        draw_draft_token(request, coins, proposed);
      }
      if (ready_ <= proposed) break;
      const token_t token = encoded_[proposed];
      tokens_[proposed] = token;
      probabilities_[proposed] = token_probability(token);
      // Under rejection sampling every byte has its q row; draft_eos's token does not.
      point_mass_[proposed] =
          rejection_round_ && proposed < draft_text_.size() ? std::uint8_t{0} : std::uint8_t{1};
      ++proposed;
    }
    work_.proposed_tokens += proposed;

    Proposal<Scalar> proposal;
    proposal.tokens = std::span<const token_t>(tokens_.data(), proposed);
    proposal.point_mass = std::span<const std::uint8_t>(point_mass_.data(), proposed);
    proposal.token_probabilities = std::span<const double>(probabilities_.data(), proposed);
    if (rejection_round_) {
      const std::size_t width = options_.target_vocab_size;
      proposal.q_weights =
          LogitsRows<Scalar>(std::span<const Scalar>(q_rows_.data(), proposed * width), width);
      proposal.q_normalizers = std::span<const Scalar>(q_normalizers_.data(), proposed);
    }
    return proposal;
  }

  [[nodiscard]] const StringLevelOptions& options() const noexcept { return options_; }
  [[nodiscard]] const StringLevelWork& work() const noexcept { return work_; }
  /// \brief The draft's context as of the last propose(): draft_prefix, then the draft
  /// tokenizer's tokens of the committed text.
  [[nodiscard]] std::span<const token_t> draft_context() const noexcept { return draft_context_; }
  /// \brief The committed text as of the last propose().
  [[nodiscard]] std::string_view committed_text() const noexcept { return text_; }

 private:
  static StringLevelOptions validated(StringLevelOptions options) {
    options.validate();
    return options;
  }

  void size_round_buffers(std::size_t limit) {
    detail::ensure_size(tokens_, limit);
    detail::ensure_size(probabilities_, limit);
    if (point_mass_.size() < limit) point_mass_.resize(limit, std::uint8_t{1});
    if (options_.rejection_sampling) {
      detail::ensure_size(q_rows_, limit * options_.target_vocab_size);
      detail::ensure_size(q_normalizers_, limit);
    }
  }

  /// The target's token for each byte, once: the one token encode() gives for the byte alone
  /// if it spells it, else none (-1).
  void map_bytes() {
    if (bytes_mapped_) return;
    std::vector<token_t> encoded;
    for (std::size_t b = 0; b < byte_ids_.size(); ++b) {
      const char byte = static_cast<char>(static_cast<unsigned char>(b));
      byte_ids_[b] = -1;
      encoded.clear();
      try {
        target_tokenizer_->encode(std::string_view(&byte, 1), encoded);
        if (encoded.size() == 1 && encoded[0] >= 0 &&
            static_cast<std::size_t>(encoded[0]) < options_.target_vocab_size &&
            target_tokenizer_->bytes(encoded[0]) == std::string_view(&byte, 1)) {
          byte_ids_[b] = encoded[0];
        }
      } catch (const std::exception&) {
        // no token for this byte: drafting stops before it
      }
    }
    bytes_mapped_ = true;
  }

  /// Appends the encoding of `text` by `tokenizer` to `out` and checks that it spells `text`;
  /// returns the number of tokens appended.
  template <class Tokenizer>
  static std::size_t encode_checked(const Tokenizer& tokenizer, std::string_view text,
                                    std::vector<token_t>& out, const char* side) {
    const std::size_t before = out.size();
    tokenizer.encode(text, out);
    std::size_t at = 0;
    for (std::size_t i = before; i < out.size(); ++i) {
      const std::string_view piece = tokenizer.bytes(out[i]);
      if (piece.empty() || text.substr(at, piece.size()) != piece) {
        detail::throw_invalid_argument(
            "StringLevelProposer: the ", side, " tokenizer's token ", out[i], " (", piece.size(),
            " bytes) at byte ", at, " of a ", text.size(),
            "-byte text does not spell the text there; expected encode() to append tokens "
            "whose bytes are the text exactly, with no special tokens");
      }
      at += piece.size();
    }
    if (at != text.size()) {
      detail::throw_invalid_argument("StringLevelProposer: the ", side,
                                     " tokenizer's tokens spell ", at, " of the ", text.size(),
                                     " bytes of the text; expected all of them");
    }
    return out.size() - before;
  }

  /// Brings the committed text and the draft's context up to `committed` (the file comment's
  /// step 1).
  void sync(std::span<const token_t> committed) {
    std::size_t shared = 0;
    const std::size_t limit = std::min(synced_.size(), committed.size());
    while (shared < limit && synced_[shared] == committed[shared]) ++shared;
    if (shared == synced_.size() && shared == committed.size()) return;
    const std::size_t first_changed = shared == 0 ? 0 : token_ends_[shared - 1];
    synced_.resize(shared);
    token_ends_.resize(shared);
    text_.resize(first_changed);
    for (std::size_t i = shared; i < committed.size(); ++i) {
      text_ += target_tokenizer_->bytes(committed[i]);
      synced_.push_back(committed[i]);
      token_ends_.push_back(text_.size());
    }
    // Draft tokens wholly before the first changed byte, less the look-behind, are kept.
    std::size_t kept = static_cast<std::size_t>(
        std::upper_bound(draft_ends_.begin(), draft_ends_.end(), first_changed) -
        draft_ends_.begin());
    kept = kept > options_.draft_look_behind ? kept - options_.draft_look_behind : 0;
    const std::size_t from = kept == 0 ? 0 : draft_ends_[kept - 1];
    draft_ends_.resize(kept);
    draft_context_.resize(options_.draft_prefix.size() + kept);
    if (from == text_.size()) return;
    const std::size_t before = draft_context_.size();
    work_.resynced_draft_tokens += encode_checked(
        *draft_tokenizer_, std::string_view(text_).substr(from), draft_context_, "draft");
    std::size_t end = from;
    for (std::size_t i = before; i < draft_context_.size(); ++i) {
      end += draft_tokenizer_->bytes(draft_context_[i]).size();
      draft_ends_.push_back(end);
    }
  }

  void start_round() {
    tail_ = {};
    healed_ = false;
    if (options_.heal_last_token && !draft_ends_.empty() && draft_context_.size() > 1) {
      const std::size_t last = draft_ends_.size() - 1;
      tail_ = std::string_view(text_).substr(last == 0 ? 0 : draft_ends_[last - 1]);
      healed_token_ = draft_context_.back();
      draft_context_.pop_back();
      healed_ = true;
      ++work_.healed_rounds;
      compatible_for_.clear();  // the compatible tokens are found at the first draft call
    }
    pending_log_probability_ = 0;
    round_base_ = draft_context_.size();
    draft_text_.clear();
    byte_log_probability_.clear();
    encoded_.clear();
    ready_ = 0;
    round_calls_ = 0;
    drafting_done_ = false;
    proposed_bytes_ = 0;
    const std::size_t look = std::min(options_.target_look_behind, synced_.size());
    seam_tokens_ = std::span<const token_t>(synced_.data() + synced_.size() - look, look);
    const std::size_t seam_start =
        synced_.size() == look ? 0 : token_ends_[synced_.size() - look - 1];
    seam_text_ = std::string_view(text_).substr(seam_start);
  }

  /// The drafted tokens leave the draft's context; a healed token returns to it.
  void end_round() noexcept {
    draft_context_.resize(round_base_);
    if (healed_) draft_context_.push_back(healed_token_);  // within capacity: it was there
    healed_ = false;
  }

  /// The draft's pieces by id, read once (an id its tokenizer rejects: no piece).
  void cache_pieces(std::size_t vocab_size) {
    if (pieces_.size() == vocab_size) return;
    pieces_.assign(vocab_size, std::string_view{});
    candidates_.reserve(vocab_size);
    for (std::size_t id = 0; id < vocab_size; ++id) {
      try {
        pieces_[id] = draft_tokenizer_->bytes(static_cast<token_t>(id));
      } catch (const std::exception&) {
        // left empty: never compatible with a tail; if drawn, bytes() reports it below
      }
    }
  }

  /// The draft tokens that agree with the tail (a prefix of it, or starting with it), for the
  /// current tail; recomputed only when the tail changes.
  std::span<const token_t> compatible_tokens() {
    if (compatible_for_.size() != tail_.size() || compatible_for_ != tail_) {
      compatible_for_.assign(tail_);
      compatible_.clear();
      for (std::size_t id = 0; id < pieces_.size(); ++id) {
        const std::string_view piece = pieces_[id];
        const bool agrees = !piece.empty() &&
                            (piece.size() <= tail_.size() ? tail_.substr(0, piece.size()) == piece
                                                          : piece.substr(0, tail_.size()) == tail_);
        if (agrees) compatible_.push_back(static_cast<token_t>(id));
      }
    }
    return compatible_;
  }

  /// `logits` with every token that disagrees with the tail at -inf (banned: probability 0
  /// under every temperature and filter).
  std::span<const Scalar> mask_to_tail(std::span<const Scalar> logits) {
    detail::ensure_size(masked_, logits.size());
    std::fill_n(masked_.begin(), logits.size(), -std::numeric_limits<Scalar>::infinity());
    for (const token_t id : compatible_) {
      masked_[static_cast<std::size_t>(id)] = logits[static_cast<std::size_t>(id)];
    }
    return {masked_.data(), logits.size()};
  }

  /// Drafting is over: every token of the draft text is final.
  void finish_drafting() {
    drafting_done_ = true;
    ready_ = encoded_.size();
  }

  /// One draft call and its token (the file comment's steps 2 and 3).
  template <class Coins>
  void draw_draft_token(DraftRequest& request, Coins& coins, std::size_t proposed) {
    if (!tail_.empty() && !pieces_.empty() && compatible_tokens().empty()) {
      finish_drafting();  // no draft token can write the healed bytes
      return;
    }
    ++round_calls_;
    auto&& row = detail::timed_call(request.stats.draft_seconds, [&]() -> decltype(auto) {
      return (*draft_)(std::span<const token_t>(draft_context_));
    });
    ++request.stats.draft_calls;
    ++work_.draft_calls;
    std::span<const Scalar> logits = detail::view_row(row);
    detail::check_vocab_size(draft_vocab_size_, logits.size(), "string-level draft model");
    if (rejection_round_) cache_pieces(logits.size());
    if (!tail_.empty()) {
      cache_pieces(logits.size());
      if (compatible_tokens().empty()) {
        finish_drafting();
        return;
      }
      logits = mask_to_tail(logits);
    }
    double probability = 1.0;
    const SamplingParams& params = request.params;
    const std::size_t position = draft_context_.size();
    const token_t token = detail::on_model_row(
        [&]() -> token_t {
          if (params.greedy() || !(options_.sample_draft || rejection_round_)) {
            if (!request.reads_token_probabilities()) return argmax(logits);
            const auto [best, log_probability] = detail::argmax_and_log_probability(logits);
            probability = std::exp(static_cast<double>(log_probability));
            return best;
          }
          detail::ensure_size(weights_, logits.size());
          detail::ensure_size(block_sums_, weight_block_count(logits.size()));
          const std::span<Scalar> weights(weights_.data(), logits.size());
          const std::span<Scalar> block_sums(block_sums_.data(), weight_block_count(logits.size()));
          const TokenDistribution<Scalar> q =
              process_logits(logits, params, filter_scratch_, weights, block_sums);
          const token_t drawn = coins.draw(WeightsLaw<Scalar>{weights, block_sums});
          probability =
              static_cast<double>(weights[static_cast<std::size_t>(drawn)] / q.normalizer);
          return drawn;
        },
        "string-level draft model logits for draft position ", position);

    std::string_view piece = draft_tokenizer_->bytes(token);
    if (piece.empty() || token == options_.draft_eos) {
      finish_drafting();
      if (token == options_.draft_eos && options_.target_eos >= 0) {
        encoded_.push_back(options_.target_eos);
        pending_eos_probability_ = probability;
        ready_ = encoded_.size();
      }
      return;
    }
    ++work_.draft_tokens;
    draft_context_.push_back(token);
    pending_log_probability_ += std::log(probability);
    std::size_t healed = 0;
    if (!tail_.empty()) {  // healing: the bytes already committed are not drafted again
      healed = std::min(piece.size(), tail_.size());
      tail_.remove_prefix(healed);
      piece.remove_prefix(healed);
      if (piece.empty()) return;  // still inside the healed token
    }
    if (options_.rejection_sampling) {  // greedy rounds too: the same bytes, point masses
      append_bytes(draft_tokenizer_->bytes(token), healed, request.limit);
      return;
    }
    work_.drafted_bytes += piece.size();
    draft_text_ += piece;
    byte_log_probability_.insert(byte_log_probability_.end(), piece.size(),
                                 take_byte_share(piece.size()));
    retokenize(proposed, piece.size());
  }

  /// The drawn token's log-probability (pending_log_probability_, reset here) spread evenly
  /// over its `bytes` new bytes: the policy's per-byte shares of point-mass proposals.
  double take_byte_share(std::size_t bytes) noexcept {
    const double share = pending_log_probability_ / static_cast<double>(bytes);
    pending_log_probability_ = 0;
    return share;
  }

  /// With rejection_sampling: appends the bytes of the drawn draft token `full` after its
  /// first `healed` (already committed) bytes, each as its byte's target token (map_bytes), and
  /// in a rejection round with its q row (the file comment), up to the round's `limit` bytes; a
  /// byte the target has no token for ends the drafting there. In a rejection round weights_
  /// holds the law the token was drawn from.
  void append_bytes(std::string_view full, std::size_t healed, std::size_t limit) {
    if (!rejection_round_) {  // greedy: point masses, the policy's shares as in exact match
      const double share = take_byte_share(full.size() - healed);
      for (std::size_t j = healed; j < full.size(); ++j) {
        const token_t target_id = byte_ids_[static_cast<unsigned char>(full[j])];
        if (target_id < 0) {
          finish_drafting();
          return;
        }
        draft_text_ += full[j];
        encoded_.push_back(target_id);
        byte_log_probability_.push_back(share);
        ++work_.drafted_bytes;
      }
      ready_ = encoded_.size();
      return;
    }
    const std::size_t width = options_.target_vocab_size;
    // The draft tokens that could have been drawn and go on past the healed bytes, as d does.
    candidates_.clear();
    for (std::size_t id = 0; id < pieces_.size(); ++id) {
      const std::string_view piece = pieces_[id];
      if (weights_[id] > Scalar(0) && piece.size() > healed &&
          static_cast<token_t>(id) != options_.draft_eos &&
          piece.substr(0, healed) == full.substr(0, healed)) {
        candidates_.push_back(static_cast<token_t>(id));
      }
    }
    pending_log_probability_ = 0;
    for (std::size_t j = healed; j < full.size(); ++j) {
      const auto byte = static_cast<unsigned char>(full[j]);
      const token_t target_id = byte_ids_[byte];
      if (target_id < 0) {
        finish_drafting();
        return;
      }
      const std::size_t at = draft_text_.size();
      if (at < limit) {
        // q_j over the target's tokens of the candidates' byte j; the candidates that go on
        // past byte j with d's byte are the next byte's.
        const std::span<Scalar> q(q_rows_.data() + at * width, width);
        std::fill(q.begin(), q.end(), Scalar(0));
        Scalar sum(0);
        std::size_t kept = 0;
        for (const token_t id : candidates_) {
          const std::string_view piece = pieces_[static_cast<std::size_t>(id)];
          const token_t mapped = byte_ids_[static_cast<unsigned char>(piece[j])];
          if (mapped >= 0) {
            const Scalar weight = weights_[static_cast<std::size_t>(id)];
            q[static_cast<std::size_t>(mapped)] += weight;
            sum += weight;
          }
          if (piece.size() > j + 1 && piece[j] == full[j]) candidates_[kept++] = id;
        }
        candidates_.resize(kept);
        q_normalizers_[at] = sum;
        byte_log_probability_.push_back(
            std::log(static_cast<double>(q[static_cast<std::size_t>(target_id)] / sum)));
      } else {
        byte_log_probability_.push_back(0);  // beyond the round's limit: never proposed
      }
      draft_text_ += full[j];
      encoded_.push_back(target_id);
      ++work_.drafted_bytes;
    }
    ready_ = encoded_.size();
  }

  /// The target tokens of the round's draft text, joined at the seam; stops the round if a
  /// token already proposed changed. `added`: the bytes just appended to the draft text.
  void retokenize(std::size_t proposed, std::size_t added) {
    if (one_token_per_byte(*target_tokenizer_)) {
      // Bytes never merge: the new bytes' tokens extend the encoding, and nothing proposed or
      // committed can change (no seam, no stop).
      encode_checked(*target_tokenizer_,
                     std::string_view(draft_text_).substr(draft_text_.size() - added), encoded_,
                     "target");
      ready_ = encoded_.size();
      return;
    }
    encoded_.clear();
    bool seam_agrees = false;
    if (!seam_tokens_.empty()) {
      joined_.assign(seam_text_);
      joined_ += draft_text_;
      encode_checked(*target_tokenizer_, joined_, encoded_, "target");
      seam_agrees = encoded_.size() > seam_tokens_.size() &&
                    std::equal(seam_tokens_.begin(), seam_tokens_.end(), encoded_.begin());
      if (seam_agrees) {
        encoded_.erase(encoded_.begin(),
                       encoded_.begin() + static_cast<std::ptrdiff_t>(seam_tokens_.size()));
      } else {
        ++work_.seam_fallbacks;
        encoded_.clear();
      }
    }
    if (!seam_agrees) encode_checked(*target_tokenizer_, draft_text_, encoded_, "target");
    if (encoded_.size() < proposed ||
        !std::equal(tokens_.begin(), tokens_.begin() + static_cast<std::ptrdiff_t>(proposed),
                    encoded_.begin())) {
      ++work_.retokenization_stops;
      encoded_.assign(tokens_.begin(), tokens_.begin() + static_cast<std::ptrdiff_t>(proposed));
      drafting_done_ = true;
      ready_ = proposed;
      return;
    }
    // The last token may still merge with the next draft bytes, unless no token spans bytes.
    ready_ = encoded_.empty() || one_token_per_byte(*target_tokenizer_) ? encoded_.size()
                                                                        : encoded_.size() - 1;
  }

  /// Whether the tokenizer declares one token per byte (text_tokenizer.hpp), statically or at
  /// run time.
  static bool one_token_per_byte(const TargetTokenizer& tokenizer) {
    if constexpr (requires { requires TargetTokenizer::one_token_per_byte; }) {
      return true;
    } else if constexpr (requires {
                           { tokenizer.one_token_per_byte() } -> std::convertible_to<bool>;
                         }) {
      return static_cast<bool>(tokenizer.one_token_per_byte());
    } else {
      return false;
    }
  }

  /// The policy's probability of the next proposed token: the product of its bytes' shares.
  double token_probability(token_t token) {
    if (proposed_bytes_ == draft_text_.size()) return pending_eos_probability_;  // target_eos
    const std::size_t length = target_tokenizer_->bytes(token).size();
    double log_probability = 0;
    for (std::size_t b = proposed_bytes_; b < proposed_bytes_ + length; ++b) {
      log_probability += byte_log_probability_[b];
    }
    proposed_bytes_ += length;
    return std::exp(log_probability);
  }

  Draft* draft_;
  const DraftTokenizer* draft_tokenizer_;
  const TargetTokenizer* target_tokenizer_;
  StringLevelOptions options_;
  StringLevelWork work_{};
  std::size_t draft_vocab_size_ = 0;

  // The committed text (sync).
  std::vector<token_t> synced_;          // committed target tokens
  std::vector<std::size_t> token_ends_;  // end byte of each in text_
  std::string text_;                     // their bytes
  std::vector<token_t> draft_context_;   // draft_prefix + the draft tokens of text_
  std::vector<std::size_t> draft_ends_;  // end byte in text_ of each draft token (not prefix)

  // The round.
  std::size_t round_base_ = 0;  // draft_context_'s size before the drafted tokens
  std::span<const token_t> seam_tokens_{};
  std::string_view seam_text_{};
  std::string draft_text_;                    // the bytes drafted this round
  std::vector<double> byte_log_probability_;  // per byte of draft_text_: its share of log q(d)
  std::string joined_;                        // seam text + draft text
  std::vector<token_t> encoded_;              // the target tokens of the draft text
  std::size_t ready_ = 0;                     // encoded_[0, ready_) are final
  std::size_t round_calls_ = 0;
  std::size_t proposed_bytes_ = 0;  // bytes of draft_text_ the proposed tokens spell
  double pending_eos_probability_ = 1.0;
  double pending_log_probability_ = 0;  // log q of draft tokens whose bytes were all healed
  std::string_view tail_{};             // healed bytes the draft has still to write
  token_t healed_token_ = -1;           // the draft token held back from the context
  bool healed_ = false;
  std::string compatible_for_;            // the tail compatible_ was computed for
  std::vector<token_t> compatible_;       // draft tokens that agree with it
  std::vector<std::string_view> pieces_;  // the draft's bytes by id
  std::vector<Scalar> masked_;            // a draft row masked to compatible_
  bool drafting_done_ = false;
  bool rejection_round_ = false;         // this round's bytes carry q rows (SLRS)
  std::array<token_t, 256> byte_ids_{};  // the target's token of each byte (-1: none)
  bool bytes_mapped_ = false;
  std::vector<token_t> candidates_;       // draft tokens below the drawn token's prefix
  std::vector<Scalar> q_rows_;            // (K x target V) each proposed byte's law
  std::vector<Scalar> q_normalizers_;     // (K) their sums
  std::vector<token_t> tokens_;           // (K) proposed target tokens
  std::vector<double> probabilities_;     // (K) their probabilities for the policy
  std::vector<std::uint8_t> point_mass_;  // (K) 1: a point mass (0: q row, SLRS)

  // The draft's row.
  std::vector<Scalar> weights_;
  std::vector<Scalar> block_sums_;
  std::vector<Scalar> filter_scratch_;
};

}  // namespace specdec

#pragma once
/// \file
/// \brief Text and token ids through a llama.cpp model's tokenizer: tokenize, TextDecoder for
/// streaming whole UTF-8 characters, and VocabularyTokenizer, a vocabulary as string-level
/// drafting's TextTokenizer (text_tokenizer.hpp).

#include <llama.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "specdec/llama_cpp/detail/error.hpp"
#include "specdec/llama_cpp/detail/token_piece.hpp"
#include "specdec/text_tokenizer.hpp"
#include "specdec/types.hpp"

namespace specdec::llama_cpp {

/// \brief Text to token ids with the model's tokenizer. `add_special`: add BOS/EOS as the
/// model's metadata asks; `parse_special`: treat special-token text (e.g. "<|eot|>") as such.
[[nodiscard]] inline std::vector<token_t> tokenize(const llama_vocab* vocab, std::string_view text,
                                                   bool add_special = true,
                                                   bool parse_special = false) {
  if (text.size() > static_cast<std::size_t>(INT32_MAX) / 2) {
    detail::throw_invalid_argument("tokenize: text of ", text.size(), " bytes; expected at most ",
                                   INT32_MAX / 2);
  }
  std::vector<llama_token> tokens(text.size() + 2);
  const auto text_length = static_cast<std::int32_t>(text.size());
  std::int32_t count =
      llama_tokenize(vocab, text.data(), text_length, tokens.data(),
                     static_cast<std::int32_t>(tokens.size()), add_special, parse_special);
  if (count < 0) {  // -count tokens are needed
    tokens.resize(static_cast<std::size_t>(-count));
    count = llama_tokenize(vocab, text.data(), text_length, tokens.data(), -count, add_special,
                           parse_special);
  }
  if (count < 0) {
    detail::throw_invalid_argument("tokenize: llama_tokenize failed (", count, ") on a text of ",
                                   text.size(), " bytes");
  }
  tokens.resize(static_cast<std::size_t>(count));
  return {tokens.begin(), tokens.end()};
}

/// \brief Token ids to text for streaming: push() returns only whole UTF-8 characters and keeps
/// an incomplete one (a character split across tokens, or across chunks) for the next push.
class TextDecoder {
 public:
  explicit TextDecoder(const llama_vocab* vocab, bool render_special = false) noexcept
      : vocab_(vocab), render_special_(render_special) {}

  /// \brief Appends the tokens' text; returns what is complete so far (a view into an internal
  /// buffer, valid until the next push or flush).
  std::string_view push(std::span<const token_t> tokens) {
    ready_.clear();
    for (const token_t token : tokens) append_piece(token);
    const std::size_t complete = complete_prefix(pending_);
    ready_.assign(pending_, 0, complete);
    pending_.erase(0, complete);
    return ready_;
  }

  /// \brief Whatever is left (an incomplete character at the end of the generation).
  std::string flush() { return std::exchange(pending_, {}); }

  /// \brief Length of the longest prefix of `bytes` that does not end inside a UTF-8 character.
  [[nodiscard]] static std::size_t complete_prefix(std::string_view bytes) noexcept {
    // Look back at most 3 bytes for the lead byte of the last character.
    const std::size_t n = bytes.size();
    for (std::size_t back = 1; back <= std::min<std::size_t>(4, n); ++back) {
      const auto byte = static_cast<unsigned char>(bytes[n - back]);
      if ((byte & 0xC0) == 0x80) continue;  // continuation byte: keep looking
      std::size_t length = 1;
      if ((byte & 0xE0) == 0xC0)
        length = 2;
      else if ((byte & 0xF0) == 0xE0)
        length = 3;
      else if ((byte & 0xF8) == 0xF0)
        length = 4;
      return back >= length ? n : n - back;  // complete, or hold the partial character
    }
    return n;  // only continuation bytes (invalid UTF-8): pass them through
  }

 private:
  void append_piece(token_t token) {
    pending_ += detail::token_piece(vocab_, token, piece_, render_special_);
  }

  const llama_vocab* vocab_;
  bool render_special_;
  std::string piece_;    // llama_token_to_piece's output, reused
  std::string pending_;  // bytes of an incomplete trailing character
  std::string ready_;
};

/// \brief A llama.cpp vocabulary as a TextTokenizer (text_tokenizer.hpp), for string-level
/// drafting (StringLevelDecoder) between models of different tokenizers.
///
/// bytes(id): the token's piece (llama_token_to_piece, specials rendered as nothing), read for
/// every id once at construction so that a call is a lookup. encode(text, out): llama_tokenize
/// with no BOS / EOS and specials not parsed, into a reused buffer. A vocabulary that prefixes
/// every text with a space (SentencePiece's add_space_prefix) spells " " + text: a leading
/// token that is that space alone is dropped; one that merges it into a word cannot spell the
/// text, and string-level drafting says so (std::invalid_argument). Text that is not valid
/// UTF-8 (a byte-level model may write any byte, and a round may end inside a character) is
/// not given to llama_tokenize, which replaces what it cannot decode: each valid run is
/// tokenized alone, and each byte outside one is the vocabulary's token of that byte alone
/// (a byte-level BPE and SentencePiece's byte fallback have one for every byte); a vocabulary
/// without it cannot spell the text (std::invalid_argument naming the byte). The vocabulary
/// must outlive the tokenizer.
class VocabularyTokenizer {
 public:
  explicit VocabularyTokenizer(const llama_vocab* vocab) : vocab_(vocab) {
    const std::int32_t count = llama_vocab_n_tokens(vocab);
    pieces_.reserve(static_cast<std::size_t>(count));
    byte_tokens_.fill(-1);
    std::string buffer;
    for (std::int32_t id = 0; id < count; ++id) {
      pieces_.emplace_back(detail::token_piece(vocab, id, buffer));
      one_token_per_byte_ = one_token_per_byte_ && pieces_.back().size() <= 1;
      if (pieces_.back().size() == 1) {
        token_t& byte_token = byte_tokens_[static_cast<unsigned char>(pieces_.back()[0])];
        if (byte_token < 0) byte_token = id;
      }
    }
  }

  /// \throws std::invalid_argument for an id outside the vocabulary.
  [[nodiscard]] std::string_view bytes(token_t id) const {
    if (id < 0 || static_cast<std::size_t>(id) >= pieces_.size()) {
      detail::throw_invalid_argument("VocabularyTokenizer: token ", id,
                                     " is outside the vocabulary; expected an id in [0, ",
                                     pieces_.size(), ")");
    }
    return pieces_[static_cast<std::size_t>(id)];
  }

  /// \throws std::invalid_argument for a text llama_tokenize fails on, longer than INT32_MAX / 2
  /// bytes, or with a byte outside valid UTF-8 that the vocabulary has no token for.
  void encode(std::string_view text, std::vector<token_t>& out) const {
    std::size_t at = 0;
    while (at < text.size()) {
      std::size_t end = at;
      while (end < text.size()) {
        const std::size_t length = utf8_sequence_length(text.substr(end));
        if (length == 0) break;
        end += length;
      }
      tokenize_valid(text.substr(at, end - at), out);
      if (end == text.size()) break;
      const auto byte = static_cast<unsigned char>(text[end]);
      if (byte_tokens_[byte] < 0) {
        detail::throw_invalid_argument("VocabularyTokenizer: byte ", static_cast<unsigned>(byte),
                                       " at ", end,
                                       " is not valid UTF-8 and the vocabulary has no token for "
                                       "it alone; expected a byte-level vocabulary or byte "
                                       "fallback tokens");
      }
      out.push_back(byte_tokens_[byte]);
      at = end + 1;
    }
  }

  [[nodiscard]] std::size_t size() const noexcept { return pieces_.size(); }

  /// \brief Whether every token is at most one byte (a byte-level vocabulary): its texts then
  /// never re-tokenize differently as they grow (TextTokenizer's one_token_per_byte).
  [[nodiscard]] bool one_token_per_byte() const noexcept { return one_token_per_byte_; }

  /// \brief Whether encode(text) spells `text` exactly: a vocabulary without tokens for some of
  /// its bytes (or one that adds a space prefix it cannot drop) cannot write it.
  [[nodiscard]] bool spells(std::string_view text) const {
    std::vector<token_t> tokens;
    try {
      encode(text, tokens);
    } catch (const std::exception&) {
      return false;  // llama.cpp's tokenizer throws for text it has no tokens for
    }
    std::string spelled;
    for (const token_t token : tokens) spelled += bytes(token);
    return spelled == text;
  }

 private:
  /// The bytes of the well-formed UTF-8 character at the start of `text` (1-4), or 0 if it
  /// does not start with one (a stray continuation byte, an overlong form, a surrogate, past
  /// U+10FFFF, or cut short).
  static std::size_t utf8_sequence_length(std::string_view text) noexcept {
    const auto at = [&](std::size_t i) { return static_cast<unsigned char>(text[i]); };
    const unsigned char lead = at(0);
    if (lead < 0x80) return 1;
    std::size_t length = 0;
    unsigned char low = 0x80, high = 0xBF;  // the second byte's range
    if (lead >= 0xC2 && lead <= 0xDF) {
      length = 2;
    } else if (lead >= 0xE0 && lead <= 0xEF) {
      length = 3;
      if (lead == 0xE0) low = 0xA0;
      if (lead == 0xED) high = 0x9F;
    } else if (lead >= 0xF0 && lead <= 0xF4) {
      length = 4;
      if (lead == 0xF0) low = 0x90;
      if (lead == 0xF4) high = 0x8F;
    } else {
      return 0;
    }
    if (text.size() < length || at(1) < low || at(1) > high) return 0;
    for (std::size_t i = 2; i < length; ++i) {
      if (at(i) < 0x80 || at(i) > 0xBF) return 0;
    }
    return length;
  }

  /// llama_tokenize of valid UTF-8, appended to `out` (the class comment).
  void tokenize_valid(std::string_view text, std::vector<token_t>& out) const {
    if (text.empty()) return;
    if (text.size() > static_cast<std::size_t>(INT32_MAX) / 2) {
      detail::throw_invalid_argument("VocabularyTokenizer: text of ", text.size(),
                                     " bytes; expected at most ", INT32_MAX / 2);
    }
    if (ids_.size() < text.size() + 2) ids_.resize(text.size() + 2);
    const auto length = static_cast<std::int32_t>(text.size());
    std::int32_t count = llama_tokenize(vocab_, text.data(), length, ids_.data(),
                                        static_cast<std::int32_t>(ids_.size()), false, false);
    if (count < 0) {
      ids_.resize(static_cast<std::size_t>(-count));
      count = llama_tokenize(vocab_, text.data(), length, ids_.data(), -count, false, false);
    }
    if (count < 0) {
      detail::throw_invalid_argument("VocabularyTokenizer: llama_tokenize failed (", count,
                                     ") on a text of ", text.size(), " bytes");
    }
    std::size_t first = 0;
    if (count > 0 && text.front() != ' ' && bytes(ids_[0]) == " ") first = 1;  // space prefix
    out.insert(out.end(), ids_.begin() + static_cast<std::ptrdiff_t>(first), ids_.begin() + count);
  }

  const llama_vocab* vocab_;
  std::vector<std::string> pieces_;
  bool one_token_per_byte_ = true;
  std::array<token_t, 256> byte_tokens_{};  // the token of each byte alone (-1: none)
  mutable std::vector<llama_token> ids_;    // llama_tokenize's output, reused
};

static_assert(TextTokenizer<VocabularyTokenizer>);

}  // namespace specdec::llama_cpp

#pragma once
/// \file
/// \brief Text and token ids through a llama.cpp model's tokenizer: tokenize, and TextDecoder
/// for streaming whole UTF-8 characters.

#include <llama.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "specdec/llama_cpp/detail/error.hpp"
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
    char buffer[64];
    std::int32_t length =
        llama_token_to_piece(vocab_, token, buffer, sizeof buffer, 0, render_special_);
    if (length >= 0) {
      pending_.append(buffer, static_cast<std::size_t>(length));
      return;
    }
    std::string piece(static_cast<std::size_t>(-length), '\0');
    length = llama_token_to_piece(vocab_, token, piece.data(), -length, 0, render_special_);
    if (length > 0) pending_.append(piece.data(), static_cast<std::size_t>(length));
  }

  const llama_vocab* vocab_;
  bool render_special_;
  std::string pending_;  // bytes of an incomplete trailing character
  std::string ready_;
};

}  // namespace specdec::llama_cpp

#pragma once
/// \file
/// \brief detail::token_piece: a token's text through llama_token_to_piece, into a caller's
/// buffer grown to what llama.cpp asks for (TextDecoder, VocabularyTokenizer, retokenize).

#include <llama.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "specdec/types.hpp"

namespace specdec::llama_cpp::detail {

/// The bytes `token` stands for (no leading space removed; specials as text only with
/// `render_special`), written into `buffer`; empty for a token with no text. The view is valid
/// until `buffer` changes.
[[nodiscard]] inline std::string_view token_piece(const llama_vocab* vocab, token_t token,
                                                  std::string& buffer,
                                                  bool render_special = false) {
  if (buffer.size() < 64) buffer.resize(64);
  std::int32_t length = llama_token_to_piece(
      vocab, token, buffer.data(), static_cast<std::int32_t>(buffer.size()), 0, render_special);
  if (length < 0) {  // -length bytes are needed
    buffer.resize(static_cast<std::size_t>(-length));
    length = llama_token_to_piece(vocab, token, buffer.data(),
                                  static_cast<std::int32_t>(buffer.size()), 0, render_special);
  }
  return {buffer.data(), length > 0 ? static_cast<std::size_t>(length) : 0};
}

}  // namespace specdec::llama_cpp::detail

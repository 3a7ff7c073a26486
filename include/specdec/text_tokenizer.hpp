#pragma once
/// \file
/// \brief The tokenizer contract of string-level drafting (proposers/string_level.hpp): the
/// bytes a token stands for, and the tokens of a text. ByteTokenizer is the byte-level case
/// (token id b is the byte b), the vocabulary of the shipped example target.

#include <array>
#include <concepts>
#include <cstddef>
#include <string_view>
#include <vector>

#include "specdec/detail/error.hpp"
#include "specdec/types.hpp"

namespace specdec {

/// \brief A tokenizer as string-level drafting uses it:
///   - `tokenizer.bytes(id)`: the bytes token `id` stands for (empty for a special token such
///     as BOS / EOS, which stands for no text); a view valid while the tokenizer lives;
///   - `tokenizer.encode(text, out)`: APPENDS the tokens of `text` to `out`, with no BOS / EOS
///     added, such that the concatenated bytes of the appended tokens are `text` exactly.
/// Optional: `static constexpr bool one_token_per_byte = true`, or a member function
/// `bool one_token_per_byte() const` for a vocabulary known at run time, declares that every
/// byte is a token of its own and no token spans two (a byte-level vocabulary), so a text's
/// tokens never change as it grows: string-level drafting then proposes the last token of a
/// draft text without waiting for the next draft token.
/// A llama.cpp vocabulary (llama_cpp::VocabularyTokenizer), the example BPE draft's tokenizer
/// and ByteTokenizer satisfy it.
template <class T>
concept TextTokenizer = requires(const T& tokenizer, token_t id, std::string_view text,
                                 std::vector<token_t>& out) {
  { tokenizer.bytes(id) } -> std::convertible_to<std::string_view>;
  tokenizer.encode(text, out);
};

/// \brief The byte-level vocabulary: ids 0..255 are the bytes 0..255 (the shipped example
/// models; any byte-level model). Stateless.
struct ByteTokenizer {
  static constexpr bool one_token_per_byte = true;

  /// \throws std::invalid_argument for an id outside [0, 256).
  [[nodiscard]] std::string_view bytes(token_t id) const {
    if (id < 0 || id > 255) {
      detail::throw_invalid_argument("ByteTokenizer: token ", id,
                                     " has no byte; expected an id in [0, 256)");
    }
    return {&table()[static_cast<std::size_t>(id)], 1};
  }

  void encode(std::string_view text, std::vector<token_t>& out) const {
    for (const char c : text) out.push_back(static_cast<token_t>(static_cast<unsigned char>(c)));
  }

 private:
  static const std::array<char, 256>& table() noexcept {
    static const std::array<char, 256> all = [] {
      std::array<char, 256> bytes{};
      for (std::size_t b = 0; b < bytes.size(); ++b) {
        bytes[b] = static_cast<char>(static_cast<unsigned char>(b));
      }
      return bytes;
    }();
    return all;
  }
};

static_assert(TextTokenizer<ByteTokenizer>);

}  // namespace specdec

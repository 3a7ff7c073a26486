#pragma once
/// \file
/// \brief Vocabulary maps between a draft and a target that tokenize differently: the tokens
/// they share by text, the draft-id <-> target-id maps, a report and a graded verdict
/// (identical, compatible after padding, needs intersection, disjoint). MappedDraft
/// (mapped_draft.hpp) uses the map to present a draft in the target's id space.
///
/// Token text is compared after normalising the space markers of the common tokenizer
/// families to the bytes a token stands for (TokenEncoding):
///   byte_level     GPT-2 byte-level BPE: each character is one byte through GPT-2's
///                  bytes_to_unicode table ('Ġ' U+0120 = space, 'Ċ' U+010A = newline, ...);
///   sentencepiece  '▁' (U+2581) = space, and a byte token "<0xNN>" = the single byte NN;
///   plain          the text is the bytes already (a user's own vocabulary).
/// So the target's "Ġthe" and the draft's "▁the" are one shared token " the", and the target's
/// "\n" (raw) is the draft's "<0x0A>".
///
/// Duplicates: two ids of one vocabulary with the same normalised text (a SentencePiece
/// vocabulary's "▁" and "<0x20>") share one entry. The lowest id is that text's representative:
/// draft_to_target maps only the draft's representative, to the target's representative, so
/// each target id receives at most one draft logit (the other duplicates are unmapped there);
/// target_to_draft maps every target id of a shared text, duplicates included, to the draft's
/// representative (that is what translating a context needs). The report counts duplicates.
///
/// Special tokens (caller-supplied ids: BOS, EOS, control tokens) are never normalised and
/// never share with ordinary tokens: a special maps only to a special of the other side with
/// the same raw text (SpecialTokens::match_by_text, so "</s>" <-> "</s>"), or to nothing
/// (SpecialTokens::exclude). Specials of one side without a counterpart are listed in the
/// report.

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <ostream>
#include <span>
#include <sstream>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "specdec/detail/error.hpp"
#include "specdec/enum_names.hpp"
#include "specdec/types.hpp"

namespace specdec {

/// \brief How a vocabulary writes the bytes of its tokens (see the file comment).
enum class TokenEncoding {
  automatic,      ///< byte_level, sentencepiece or plain, guessed from the markers the text uses
  byte_level,     ///< GPT-2 byte-level BPE ('Ġ' = space, 'Ċ' = newline)
  sentencepiece,  ///< '▁' = space, "<0xNN>" = byte NN
  plain,          ///< the token text is its bytes
};

/// \brief TokenEncoding's names (enum_names.hpp): "auto", "byte-level", "sentencepiece",
/// "plain".
template <>
struct EnumNames<TokenEncoding> {
  static constexpr std::string_view what = "token encoding";
  static constexpr std::array<EnumName<TokenEncoding>, 4> names{
      {{TokenEncoding::automatic, "auto"},
       {TokenEncoding::byte_level, "byte-level"},
       {TokenEncoding::sentencepiece, "sentencepiece"},
       {TokenEncoding::plain, "plain"}}};
};

/// \brief How special tokens are mapped.
enum class SpecialTokens {
  match_by_text,  ///< a special maps to the other side's special of the same raw text
  exclude,        ///< specials are never mapped
};

/// \brief SpecialTokens' names (enum_names.hpp): "match", "exclude".
template <>
struct EnumNames<SpecialTokens> {
  static constexpr std::string_view what = "special tokens";
  static constexpr std::array<EnumName<SpecialTokens>, 2> names{
      {{SpecialTokens::match_by_text, "match"}, {SpecialTokens::exclude, "exclude"}}};
};

/// \brief The graded verdict on a draft / target pair of vocabularies.
enum class VocabularyVerdict {
  /// the same size, type, BOS/EOS handling and text for every id: no map needed
  identical,
  /// near-identical (llama.cpp's rule for a draft it accepts): the same type and BOS/EOS
  /// handling, sizes within kMaxPaddingDifference, the same text for every shared id from
  /// kFirstComparedId on (padding or a few added tokens), and, stricter than llama.cpp, every
  /// shared token at the same id on both sides: the map is the identity on the shared ids, and
  /// MappedDraft only masks the ids one side lacks.
  compatible,
  /// partially overlapping: drafting needs token-level intersection (MappedDraft)
  needs_intersection,
  /// no ordinary token in common: the draft cannot propose anything the target has
  disjoint,
};

/// \brief VocabularyVerdict's names (enum_names.hpp): "identical", "compatible",
/// "intersection", "disjoint".
template <>
struct EnumNames<VocabularyVerdict> {
  static constexpr std::string_view what = "vocabulary verdict";
  static constexpr std::array<EnumName<VocabularyVerdict>, 4> names{
      {{VocabularyVerdict::identical, "identical"},
       {VocabularyVerdict::compatible, "compatible"},
       {VocabularyVerdict::needs_intersection, "intersection"},
       {VocabularyVerdict::disjoint, "disjoint"}}};
};

/// \brief One side's vocabulary, as views (the caller's strings must outlive the call that
/// reads them; VocabularyMap keeps copies of what it reports, nothing else).
struct Vocabulary {
  std::span<const std::string> tokens;        ///< token text by id: tokens[id], V entries
  std::span<const token_t> special_tokens{};  ///< ids of special / control tokens
  TokenEncoding encoding = TokenEncoding::automatic;
  /// Tokenizer family as its source names it ("llama-spm", "gpt2", ...); "" = unknown. Only
  /// the verdict reads it: near-identical vocabularies must be of one type.
  std::string_view type{};
  token_t bos = -1;  ///< -1 = none; the verdict compares BOS / EOS handling
  token_t eos = -1;
  bool add_bos = false;
  bool add_eos = false;
};

/// \brief What to map (see the file comment).
struct VocabularyMapOptions {
  SpecialTokens special_tokens = SpecialTokens::match_by_text;
  std::size_t examples = 5;  ///< unmapped tokens listed in the report, per side
};

/// \brief A token of one side with no counterpart on the other, for the report.
struct UnmappedToken {
  token_t id = -1;
  std::string text;  ///< as the vocabulary writes it (not normalised)
};

/// \brief What the comparison found; printed by operator<<.
struct VocabularyReport {
  std::size_t draft_size = 0;
  std::size_t target_size = 0;
  TokenEncoding draft_encoding = TokenEncoding::plain;   ///< as used (automatic resolved)
  TokenEncoding target_encoding = TokenEncoding::plain;  ///< as used (automatic resolved)
  std::size_t shared = 0;             ///< draft ids mapped to a target id (specials included)
  std::size_t shared_special = 0;     ///< of those, special tokens
  double draft_overlap = 0;           ///< shared / draft_size
  double target_overlap = 0;          ///< shared / target_size
  std::size_t draft_duplicates = 0;   ///< draft ids whose text a lower draft id already has
  std::size_t target_duplicates = 0;  ///< target ids whose text a lower target id already has
  /// special tokens without a counterpart: "draft special 2 \"</s>\": no target special of that
  /// text" (every one, however many)
  std::vector<std::string> special_differences;
  std::vector<UnmappedToken> unmapped_draft;   ///< the first few draft ids without a target id
  std::vector<UnmappedToken> unmapped_target;  ///< the first few target ids without a draft id
  VocabularyVerdict verdict = VocabularyVerdict::disjoint;
  std::string reason;  ///< why that verdict: "sizes 32000 and 50257 differ by more than 128"
};

/// \brief Prints the report, one fact a line.
inline std::ostream& operator<<(std::ostream& out, const VocabularyReport& report) {
  out << "vocabulary: " << to_string(report.verdict) << " (" << report.reason << ")\n"
      << "  draft " << report.draft_size << " tokens (" << to_string(report.draft_encoding)
      << "), target " << report.target_size << " tokens (" << to_string(report.target_encoding)
      << ")\n"
      << "  shared " << report.shared << " (" << report.shared_special
      << " special): " << 100.0 * report.draft_overlap << "% of the draft, "
      << 100.0 * report.target_overlap << "% of the target\n"
      << "  duplicate texts: draft " << report.draft_duplicates << ", target "
      << report.target_duplicates << "\n";
  for (const std::string& difference : report.special_differences) {
    out << "  " << difference << "\n";
  }
  const auto list = [&out](const char* side, const std::vector<UnmappedToken>& tokens) {
    if (tokens.empty()) return;
    out << "  unmapped " << side << " tokens, first " << tokens.size() << ":";
    for (const UnmappedToken& token : tokens) out << " " << token.id << " \"" << token.text << "\"";
    out << "\n";
  };
  list("draft", report.unmapped_draft);
  list("target", report.unmapped_target);
  return out;
}

namespace detail {

/// The streamed parts as one string (a report's line; error messages use error_message()).
template <class... Parts>
[[nodiscard]] std::string concat(const Parts&... parts) {
  std::ostringstream stream;
  (stream << ... << parts);
  return stream.str();
}

/// The code point starting at text[i] and its length in bytes; an invalid or truncated
/// sequence is one byte standing for itself (length 1, code point = 0x110000 + byte).
struct DecodedCodePoint {
  std::uint32_t code_point;
  std::size_t length;
};
inline DecodedCodePoint decode_utf8(std::string_view text, std::size_t i) {
  const auto byte = [&](std::size_t k) { return static_cast<std::uint8_t>(text[k]); };
  const std::uint8_t lead = byte(i);
  const DecodedCodePoint invalid{0x110000u + lead, 1};
  if (lead < 0x80) return {lead, 1};
  std::size_t length = 0;
  std::uint32_t code_point = 0;
  if ((lead & 0xE0) == 0xC0) {
    length = 2;
    code_point = lead & 0x1Fu;
  } else if ((lead & 0xF0) == 0xE0) {
    length = 3;
    code_point = lead & 0x0Fu;
  } else if ((lead & 0xF8) == 0xF0) {
    length = 4;
    code_point = lead & 0x07u;
  } else {
    return invalid;
  }
  if (i + length > text.size()) return invalid;
  for (std::size_t k = 1; k < length; ++k) {
    if ((byte(i + k) & 0xC0) != 0x80) return invalid;
    code_point = (code_point << 6) | (byte(i + k) & 0x3Fu);
  }
  return {code_point, length};
}

/// GPT-2's bytes_to_unicode, inverted: the byte a byte-level character stands for, or -1 for a
/// character outside the table. Printable bytes (33..126, 161..172, 174..255) are their own
/// code point; the other 68 bytes (0..32, 127..160, 173), in increasing order, are 256 + n.
[[nodiscard]] constexpr int byte_level_byte(std::uint32_t code_point) noexcept {
  const auto printable = [](std::uint32_t b) {
    return (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
  };
  if (code_point < 256) return printable(code_point) ? static_cast<int>(code_point) : -1;
  if (code_point >= 256 + 68) return -1;
  std::uint32_t n = code_point - 256;
  for (std::uint32_t b = 0; b < 256; ++b) {
    if (printable(b)) continue;
    if (n == 0) return static_cast<int>(b);
    --n;
  }
  return -1;
}

/// "<0xNN>" -> NN (two hex digits, either case), else -1.
[[nodiscard]] inline int sentencepiece_byte(std::string_view text) noexcept {
  if (text.size() != 6 || !text.starts_with("<0x") || text[5] != '>') return -1;
  const auto hex = [](char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  const int high = hex(text[3]);
  const int low = hex(text[4]);
  return high < 0 || low < 0 ? -1 : high * 16 + low;
}

inline constexpr std::string_view kSentencePieceSpace = "\xE2\x96\x81";  // U+2581 '▁'
inline constexpr std::string_view kByteLevelSpace = "\xC4\xA0";          // U+0120 'Ġ'

/// Appends the bytes an ordinary token stands for under `encoding` (not automatic).
inline void append_token_bytes(std::string& out, std::string_view text, TokenEncoding encoding) {
  switch (encoding) {
    case TokenEncoding::byte_level:
      for (std::size_t i = 0; i < text.size();) {
        const DecodedCodePoint decoded = decode_utf8(text, i);
        const int byte = byte_level_byte(decoded.code_point);
        if (byte >= 0) {
          out += static_cast<char>(byte);
        } else {
          // Outside the byte table (added tokens written in plain UTF-8): the text as it is.
          out.append(text.substr(i, decoded.length));
        }
        i += decoded.length;
      }
      return;
    case TokenEncoding::sentencepiece: {
      if (const int byte = sentencepiece_byte(text); byte >= 0) {
        out += static_cast<char>(byte);
        return;
      }
      for (std::size_t i = 0; i < text.size();) {
        if (text.substr(i).starts_with(kSentencePieceSpace)) {
          out += ' ';
          i += kSentencePieceSpace.size();
        } else {
          out += text[i++];
        }
      }
      return;
    }
    case TokenEncoding::automatic:
    case TokenEncoding::plain:
      break;
  }
  out.append(text);
}

/// TokenEncoding::automatic resolved from the markers the ordinary tokens use: more 'Ġ' than
/// '▁' -> byte_level; any '▁' or "<0xNN>" -> sentencepiece; else plain.
[[nodiscard]] inline TokenEncoding resolve_encoding(const Vocabulary& vocabulary,
                                                    const std::vector<bool>& special) {
  if (vocabulary.encoding != TokenEncoding::automatic) return vocabulary.encoding;
  std::size_t byte_level = 0;
  std::size_t sentencepiece = 0;
  for (std::size_t id = 0; id < vocabulary.tokens.size(); ++id) {
    if (special[id]) continue;
    const std::string_view text = vocabulary.tokens[id];
    if (text.find(kByteLevelSpace) != std::string_view::npos) ++byte_level;
    if (text.find(kSentencePieceSpace) != std::string_view::npos || sentencepiece_byte(text) >= 0)
      ++sentencepiece;
  }
  if (byte_level > sentencepiece) return TokenEncoding::byte_level;
  if (sentencepiece > 0) return TokenEncoding::sentencepiece;
  return TokenEncoding::plain;
}

/// One flag per id; throws for a special id outside [0, V).
[[nodiscard]] inline std::vector<bool> special_flags(const Vocabulary& vocabulary,
                                                     const char* side) {
  std::vector<bool> special(vocabulary.tokens.size(), false);
  for (const token_t id : vocabulary.special_tokens) {
    if (id < 0 || static_cast<std::size_t>(id) >= vocabulary.tokens.size()) {
      throw_invalid_argument(side, " special token id ", id, "; expected an id in [0, ",
                             vocabulary.tokens.size(), ") (the ", side, " vocabulary's size)");
    }
    special[static_cast<std::size_t>(id)] = true;
  }
  return special;
}

/// The key a token is matched by: ordinary tokens by their bytes, specials by their raw text,
/// tagged so the two never meet.
[[nodiscard]] inline std::string match_key(std::string_view text, bool special,
                                           TokenEncoding encoding) {
  // Built by appending (GCC 12 at -O3 warns falsely on "S" + std::string: bug 105329).
  std::string key(1, special ? 'S' : 'T');
  key.reserve(text.size() + 1);
  if (special) {
    key.append(text);
  } else {
    append_token_bytes(key, text, encoding);
  }
  return key;
}

}  // namespace detail

/// \brief The draft <-> target token maps of two vocabularies and the report on them.
///
/// Holds the two maps (V_draft and V_target entries, -1 where none); built once, read per call.
class VocabularyMap {
 public:
  /// Near-identical vocabularies differ in size by at most this (llama.cpp's
  /// SPEC_VOCAB_MAX_SIZE_DIFFERENCE).
  static constexpr std::size_t kMaxPaddingDifference = 128;
  /// Near-identical vocabularies agree on the text of every shared id from this one on (the
  /// first ids are control tokens whose text tokenizers write differently; llama.cpp's
  /// SPEC_VOCAB_CHECK_START_TOKEN_ID).
  static constexpr std::size_t kFirstComparedId = 5;

  /// \brief Compares and maps the two vocabularies (see the file comment).
  /// \throws std::invalid_argument for an empty vocabulary, a special id out of range, or
  /// vocabularies that share no ordinary token (verdict disjoint; the message says why).
  /// compare_vocabularies() reports without throwing.
  VocabularyMap(const Vocabulary& draft, const Vocabulary& target,
                const VocabularyMapOptions& options = {})
      : VocabularyMap(draft, target, options, /*require_shared=*/true) {}

  /// \brief The map and its report without throwing for disjoint vocabularies (verdict()
  /// says so; such a map maps no ordinary token): for a caller that grades a pair and maps it
  /// only if the verdict allows, with one comparison.
  /// \throws std::invalid_argument for an empty vocabulary or a special id out of range.
  [[nodiscard]] static VocabularyMap compare(const Vocabulary& draft, const Vocabulary& target,
                                             const VocabularyMapOptions& options = {}) {
    return VocabularyMap(draft, target, options, /*require_shared=*/false);
  }

  [[nodiscard]] std::size_t draft_size() const noexcept { return draft_to_target_.size(); }
  [[nodiscard]] std::size_t target_size() const noexcept { return target_to_draft_.size(); }

  /// \brief Target id of draft id `d` (its text's representative, see the file comment), or
  /// -1. Injective: no two draft ids map to one target id.
  [[nodiscard]] std::span<const token_t> draft_to_target() const noexcept {
    return draft_to_target_;
  }
  /// \brief Draft id of target id `t` (the draft's representative of its text), or -1.
  [[nodiscard]] std::span<const token_t> target_to_draft() const noexcept {
    return target_to_draft_;
  }
  /// \brief The draft id whose logit target id `t` receives (-1: none); the inverse of
  /// draft_to_target(), so a target duplicate of a shared text receives nothing.
  [[nodiscard]] std::span<const token_t> logit_sources() const noexcept { return sources_; }

  /// \brief Whether draft_to_target() is the identity on every mapped id (a padded pair).
  [[nodiscard]] bool identity_on_shared() const noexcept { return identity_; }

  [[nodiscard]] const VocabularyReport& report() const noexcept { return report_; }
  [[nodiscard]] VocabularyVerdict verdict() const noexcept { return report_.verdict; }

  /// \brief The raw text of target id `t` (for error messages), "" if out of range.
  [[nodiscard]] std::string_view target_text(token_t t) const noexcept {
    return t >= 0 && static_cast<std::size_t>(t) < target_text_.size()
               ? std::string_view(target_text_[static_cast<std::size_t>(t)])
               : std::string_view{};
  }

 private:
  VocabularyMap(const Vocabulary& draft, const Vocabulary& target,
                const VocabularyMapOptions& options, bool require_shared) {
    if (draft.tokens.empty() || target.tokens.empty()) {
      detail::throw_invalid_argument("vocabulary map: the draft has ", draft.tokens.size(),
                                     " tokens and the target ", target.tokens.size(),
                                     "; expected at least one token on each side");
    }
    const std::vector<bool> draft_special = detail::special_flags(draft, "draft");
    const std::vector<bool> target_special = detail::special_flags(target, "target");
    VocabularyReport& report = report_;
    report.draft_size = draft.tokens.size();
    report.target_size = target.tokens.size();
    report.draft_encoding = detail::resolve_encoding(draft, draft_special);
    report.target_encoding = detail::resolve_encoding(target, target_special);
    const bool exclude_specials = options.special_tokens == SpecialTokens::exclude;

    // Target key -> the target's representative (lowest id).
    std::unordered_map<std::string, token_t> target_by_key;
    target_by_key.reserve(target.tokens.size());
    std::vector<std::string> target_keys(target.tokens.size());
    for (std::size_t t = 0; t < target.tokens.size(); ++t) {
      if (target_special[t] && exclude_specials) continue;
      target_keys[t] =
          detail::match_key(target.tokens[t], target_special[t], report.target_encoding);
      if (!target_by_key.try_emplace(target_keys[t], static_cast<token_t>(t)).second) {
        ++report.target_duplicates;
      }
    }

    draft_to_target_.assign(draft.tokens.size(), -1);
    target_to_draft_.assign(target.tokens.size(), -1);
    sources_.assign(target.tokens.size(), -1);
    std::unordered_map<std::string, token_t> draft_by_key;
    draft_by_key.reserve(draft.tokens.size());
    identity_ = true;
    for (std::size_t d = 0; d < draft.tokens.size(); ++d) {
      if (draft_special[d] && exclude_specials) continue;
      std::string key = detail::match_key(draft.tokens[d], draft_special[d], report.draft_encoding);
      const auto found = target_by_key.find(key);
      if (!draft_by_key.try_emplace(std::move(key), static_cast<token_t>(d)).second) {
        ++report.draft_duplicates;
        continue;
      }
      if (found == target_by_key.end()) continue;
      const token_t t = found->second;
      draft_to_target_[d] = t;
      sources_[static_cast<std::size_t>(t)] = static_cast<token_t>(d);
      if (identity_ && t != static_cast<token_t>(d)) {
        identity_ = false;
        first_moved_ = detail::concat("draft ", d, " \"", draft.tokens[d], "\" is target ", t,
                                      " \"", target.tokens[static_cast<std::size_t>(t)], "\"");
      }
      ++report.shared;
      if (draft_special[d]) ++report.shared_special;
    }
    for (std::size_t t = 0; t < target.tokens.size(); ++t) {
      if (target_keys[t].empty()) continue;  // an excluded special
      if (const auto found = draft_by_key.find(target_keys[t]); found != draft_by_key.end()) {
        target_to_draft_[t] = found->second;
      }
    }
    report.draft_overlap =
        static_cast<double>(report.shared) / static_cast<double>(report.draft_size);
    report.target_overlap =
        static_cast<double>(report.shared) / static_cast<double>(report.target_size);

    // Specials without a counterpart, every one; unmapped ordinary tokens, the first few.
    for (std::size_t d = 0; d < draft.tokens.size(); ++d) {
      if (draft_special[d] && draft_to_target_[d] < 0) {
        report.special_differences.push_back(detail::concat(
            "draft special ", d, " \"", draft.tokens[d], "\": no target special of that text"));
      } else if (draft_to_target_[d] < 0 && report.unmapped_draft.size() < options.examples) {
        report.unmapped_draft.push_back({static_cast<token_t>(d), draft.tokens[d]});
      }
    }
    for (std::size_t t = 0; t < target.tokens.size(); ++t) {
      if (target_special[t] && target_to_draft_[t] < 0) {
        report.special_differences.push_back(detail::concat(
            "target special ", t, " \"", target.tokens[t], "\": no draft special of that text"));
      } else if (sources_[t] < 0 && report.unmapped_target.size() < options.examples) {
        report.unmapped_target.push_back({static_cast<token_t>(t), target.tokens[t]});
      }
    }
    grade(draft, target);
    if (require_shared && report.verdict == VocabularyVerdict::disjoint) {
      detail::throw_invalid_argument("vocabulary map: ", report.reason,
                                     "; expected vocabularies that share tokens (a draft of "
                                     "another tokenizer family can only propose shared tokens)");
    }
    target_text_.assign(target.tokens.begin(), target.tokens.end());
  }

  /// The verdict and its reason, the first condition that fails.
  void grade(const Vocabulary& draft, const Vocabulary& target) {
    VocabularyReport& report = report_;
    if (report.shared == report.shared_special) {
      report.verdict = VocabularyVerdict::disjoint;
      report.reason = detail::concat("the draft's ", report.draft_size, " tokens and the target's ",
                                     report.target_size, " share no ordinary token (",
                                     to_string(report.draft_encoding), " vs ",
                                     to_string(report.target_encoding), " text)");
      return;
    }
    report.verdict = VocabularyVerdict::needs_intersection;
    const auto because = [&](const auto&... parts) {
      report.reason = detail::concat(parts..., "; mapping ", report.shared, " shared tokens");
    };
    const std::size_t smaller = std::min(report.draft_size, report.target_size);
    const std::size_t difference = std::max(report.draft_size, report.target_size) - smaller;
    if (draft.type != target.type) {
      because("tokenizer types differ (draft \"", draft.type, "\", target \"", target.type, "\")");
      return;
    }
    if (draft.bos != target.bos || draft.eos != target.eos || draft.add_bos != target.add_bos ||
        draft.add_eos != target.add_eos) {
      because("BOS/EOS handling differs (draft bos ", draft.bos, " add ", draft.add_bos, ", eos ",
              draft.eos, " add ", draft.add_eos, "; target bos ", target.bos, " add ",
              target.add_bos, ", eos ", target.eos, " add ", target.add_eos, ")");
      return;
    }
    if (difference > kMaxPaddingDifference) {
      because("sizes ", report.draft_size, " and ", report.target_size, " differ by more than ",
              kMaxPaddingDifference);
      return;
    }
    if (!identity_) {
      because("shared tokens sit at different ids (", first_moved_, ")");
      return;
    }
    for (std::size_t id = kFirstComparedId; id < smaller; ++id) {
      if (draft.tokens[id] != target.tokens[id]) {
        because("token ", id, " differs (draft \"", draft.tokens[id], "\", target \"",
                target.tokens[id], "\")");
        return;
      }
    }
    bool same_text = difference == 0;
    for (std::size_t id = 0; same_text && id < smaller; ++id) {
      same_text = draft.tokens[id] == target.tokens[id];
    }
    const auto sorted = [](std::span<const token_t> ids) {
      std::vector<token_t> out(ids.begin(), ids.end());
      std::sort(out.begin(), out.end());
      out.erase(std::unique(out.begin(), out.end()), out.end());
      return out;
    };
    if (same_text && sorted(draft.special_tokens) == sorted(target.special_tokens)) {
      report.verdict = VocabularyVerdict::identical;
      report.reason = detail::concat("the same ", report.target_size, " tokens, text for text");
      return;
    }
    report.verdict = VocabularyVerdict::compatible;
    report.reason =
        detail::concat("near-identical: sizes ", report.draft_size, " and ", report.target_size,
                       ", the same text for every shared id from ", kFirstComparedId,
                       " on; mapping ", report.shared, " shared tokens");
  }

  std::vector<token_t> draft_to_target_;  // (V_draft) target id or -1
  std::vector<token_t> target_to_draft_;  // (V_target) draft id or -1
  std::vector<token_t> sources_;          // (V_target) the draft id whose logit it receives, or -1
  std::vector<std::string> target_text_;  // (V_target) raw text, for error messages
  bool identity_ = true;
  std::string first_moved_;  // the first shared token at different ids, for the verdict's reason
  VocabularyReport report_;
};

/// \brief The report (verdict included) on two vocabularies, without throwing for disjoint
/// ones. \throws std::invalid_argument for an empty vocabulary or a special id out of range.
[[nodiscard]] inline VocabularyReport compare_vocabularies(
    const Vocabulary& draft, const Vocabulary& target, const VocabularyMapOptions& options = {}) {
  return VocabularyMap::compare(draft, target, options).report();
}

}  // namespace specdec

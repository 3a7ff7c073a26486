#pragma once
/// \file
/// \brief A llama.cpp model's vocabulary as specdec needs it: its size (the length of a logits
/// row), its token text (vocabulary_text), and the graded verdict on a draft / target pair
/// (check_compatible): identical, compatible after mapping (padded or near-identical),
/// needs token-level intersection, or disjoint. The verdict is vocabulary.hpp's
/// (VocabularyMap's grading, llama.cpp's padded rule included); this header only reads the
/// vocabularies out of llama.cpp and says what it found in its words.
///
/// A pair that is not identical drafts through MappedDraft (mapped_draft.hpp) over the check's
/// map(): the draft's law restricted to the shared tokens, in the target's ids, so the output
/// is still exactly the target's. retokenize() supplies the draft tokens for a context token
/// the draft vocabulary lacks.

#include <llama.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "specdec/enum_names.hpp"
#include "specdec/llama_cpp/detail/error.hpp"
#include "specdec/llama_cpp/detail/token_piece.hpp"
#include "specdec/mapped_draft.hpp"
#include "specdec/types.hpp"
#include "specdec/vocabulary.hpp"

namespace specdec::llama_cpp {

/// \brief The vocabulary size of a model (llama_vocab_n_tokens).
[[nodiscard]] inline std::size_t vocab_size(const llama_model* model) {
  return static_cast<std::size_t>(llama_vocab_n_tokens(llama_model_get_vocab(model)));
}

/// \brief A llama.cpp vocabulary as text, owned: what specdec's Vocabulary (a view) reads.
/// Built from a model by vocabulary_text(), or by hand (tests, other sources).
struct VocabularyText {
  std::vector<std::string> tokens;   ///< (V) llama_vocab_get_text per id
  std::vector<token_t> special_ids;  ///< control, unknown and unused ids (never share text)
  std::vector<bool> unused;          ///< (V) LLAMA_TOKEN_ATTR_UNUSED: padding rows
  std::string type;                  ///< "spm", "bpe", ... (llama_vocab_type)
  TokenEncoding encoding = TokenEncoding::automatic;
  token_t bos = -1;  ///< -1 = none (LLAMA_TOKEN_NULL)
  token_t eos = -1;
  bool add_bos = false;
  bool add_eos = false;

  /// \brief The view vocabulary.hpp compares (valid while this object lives, unchanged).
  [[nodiscard]] Vocabulary view() const noexcept {
    return {.tokens = tokens,
            .special_tokens = special_ids,
            .encoding = encoding,
            .type = type,
            .bos = bos,
            .eos = eos,
            .add_bos = add_bos,
            .add_eos = add_eos};
  }
};

namespace detail {

/// llama_vocab_type's name (llama.h), and how its token text writes bytes.
struct VocabularyKind {
  std::string name;
  TokenEncoding encoding;
};
[[nodiscard]] inline VocabularyKind vocabulary_kind(int type) {
  switch (type) {
    case LLAMA_VOCAB_TYPE_SPM:
      return {"spm", TokenEncoding::sentencepiece};
    case LLAMA_VOCAB_TYPE_BPE:
      return {"bpe", TokenEncoding::byte_level};
    case LLAMA_VOCAB_TYPE_WPM:
      return {"wpm", TokenEncoding::plain};
    case LLAMA_VOCAB_TYPE_UGM:
      return {"ugm", TokenEncoding::sentencepiece};
    case LLAMA_VOCAB_TYPE_RWKV:
      return {"rwkv", TokenEncoding::plain};
    default:
      return {"type " + std::to_string(type), TokenEncoding::automatic};
  }
}

/// A llama.cpp token id as specdec's: LLAMA_TOKEN_NULL is -1 either way.
[[nodiscard]] inline token_t token_or_none(llama_token token) noexcept {
  return token == LLAMA_TOKEN_NULL ? -1 : static_cast<token_t>(token);
}

}  // namespace detail

/// \brief The text, special ids, type and BOS/EOS handling of `model`'s vocabulary. Control,
/// unknown and unused tokens are special (they pair only with a special of the same text);
/// unused ones (LLAMA_TOKEN_ATTR_UNUSED) are also flagged as padding.
[[nodiscard]] inline VocabularyText vocabulary_text(const llama_model* model) {
  const llama_vocab* vocab = llama_model_get_vocab(model);
  const std::int32_t n = llama_vocab_n_tokens(vocab);
  VocabularyText text;
  detail::VocabularyKind kind = detail::vocabulary_kind(llama_vocab_type(vocab));
  text.type = std::move(kind.name);
  text.encoding = kind.encoding;
  text.tokens.reserve(static_cast<std::size_t>(n));
  text.unused.assign(static_cast<std::size_t>(n), false);
  constexpr int kSpecial =
      LLAMA_TOKEN_ATTR_CONTROL | LLAMA_TOKEN_ATTR_UNKNOWN | LLAMA_TOKEN_ATTR_UNUSED;
  for (llama_token id = 0; id < n; ++id) {
    const char* token = llama_vocab_get_text(vocab, id);
    text.tokens.emplace_back(token != nullptr ? token : "");
    const int attributes = static_cast<int>(llama_vocab_get_attr(vocab, id));
    if ((attributes & kSpecial) != 0) text.special_ids.push_back(id);
    text.unused[static_cast<std::size_t>(id)] = (attributes & LLAMA_TOKEN_ATTR_UNUSED) != 0;
  }
  text.bos = detail::token_or_none(llama_vocab_bos(vocab));
  text.eos = detail::token_or_none(llama_vocab_eos(vocab));
  text.add_bos = llama_vocab_get_add_bos(vocab);
  text.add_eos = llama_vocab_get_add_eos(vocab);
  return text;
}

/// \brief What check_compatible() demands of a pair.
enum class VocabularyRequirement {
  identical,  ///< one vocabulary: the draft's rows are used as they are (throws otherwise)
  mappable,   ///< any pair that shares tokens: MappedDraft over the map (throws if disjoint)
};

}  // namespace specdec::llama_cpp

/// \brief VocabularyRequirement's names (enum_names.hpp): "identical", "mappable".
template <>
struct specdec::EnumNames<specdec::llama_cpp::VocabularyRequirement> {
  static constexpr std::string_view what = "vocabulary requirement";
  static constexpr std::array<EnumName<llama_cpp::VocabularyRequirement>, 2> names{
      {{llama_cpp::VocabularyRequirement::identical, "identical"},
       {llama_cpp::VocabularyRequirement::mappable, "mappable"}}};
};

namespace specdec::llama_cpp {

/// \brief The graded verdict on a draft / target pair and the map that drafts across it.
///
/// verdict() is vocabulary.hpp's: identical; compatible (llama.cpp's padded rule: the same
/// type and BOS/EOS handling, sizes within 128, the same text for every shared id from id 5
/// on, shared tokens at the same ids); needs_intersection (tokens shared by text); disjoint.
/// summary() says which in a few words ("padded (32 extra draft ids, all unused)"),
/// description() also why (sizes, the first differing id and its texts, special tokens that
/// differ, the overlap).
class VocabularyCheck {
 public:
  /// \brief Grades `draft` against `target` (one comparison; the map keeps what it needs).
  VocabularyCheck(const VocabularyText& draft, const VocabularyText& target)
      : map_(VocabularyMap::compare(draft.view(), target.view())) {
    const std::size_t dn = draft.tokens.size();
    const std::size_t tn = target.tokens.size();
    const VocabularyText& larger = dn > tn ? draft : target;
    const std::size_t smaller = std::min(dn, tn);
    extra_ids_ = larger.tokens.size() - smaller;
    extra_side_ = dn > tn ? "draft" : "target";
    for (std::size_t id = smaller; id < larger.tokens.size(); ++id) {
      if (id < larger.unused.size() && larger.unused[id]) ++unused_extra_ids_;
    }
    for (std::size_t id = VocabularyMap::kFirstComparedId; id < smaller; ++id) {
      if (draft.tokens[id] != target.tokens[id]) {
        first_difference_ = concat("token ", id, " is \"", draft.tokens[id],
                                   "\" in the draft and \"", target.tokens[id], "\" in the target");
        break;
      }
    }
  }

  [[nodiscard]] VocabularyVerdict verdict() const noexcept { return map_.verdict(); }
  [[nodiscard]] const VocabularyReport& report() const noexcept { return map_.report(); }
  /// \brief The draft <-> target map (MappedDraft's); a disjoint pair's maps no ordinary token.
  [[nodiscard]] const VocabularyMap& map() const noexcept { return map_; }
  /// \brief Whether the draft must be wrapped in MappedDraft (compatible or intersection).
  [[nodiscard]] bool needs_map() const noexcept {
    return verdict() == VocabularyVerdict::compatible ||
           verdict() == VocabularyVerdict::needs_intersection;
  }
  /// \brief Ids one side has beyond the other's size, and how many of them are unused
  /// (LLAMA_TOKEN_ATTR_UNUSED, i.e. padding).
  [[nodiscard]] std::size_t extra_ids() const noexcept { return extra_ids_; }
  [[nodiscard]] std::size_t unused_extra_ids() const noexcept { return unused_extra_ids_; }

  /// \brief The verdict in a few words: "identical (256 tokens)", "padded (32 extra draft
  /// ids, all unused)", "near-identical (...)", "token-level intersection (...)", "disjoint".
  [[nodiscard]] std::string summary() const {
    const VocabularyReport& r = report();
    switch (verdict()) {
      case VocabularyVerdict::identical:
        return concat("identical (", r.target_size, " tokens)");
      case VocabularyVerdict::compatible:
        if (extra_ids_ > 0 && unused_extra_ids_ == extra_ids_) {
          return concat("padded (", extra_ids_, " extra ", extra_side_, " ids, all unused)");
        }
        if (extra_ids_ > 0) {
          return concat("near-identical (", extra_ids_, " extra ", extra_side_, " ids, ",
                        unused_extra_ids_, " of them unused)");
        }
        return concat("near-identical (", r.target_size, " tokens, the same text from id ",
                      VocabularyMap::kFirstComparedId, " on)");
      case VocabularyVerdict::needs_intersection:
        return concat("token-level intersection (", r.shared,
                      " shared tokens: ", percent(r.target_overlap), " of the target's ",
                      r.target_size, ", ", percent(r.draft_overlap), " of the draft's ",
                      r.draft_size, ")");
      case VocabularyVerdict::disjoint:
        break;
    }
    return "disjoint";
  }

  /// \brief summary() and why, on one line: the grading's reason (sizes, the condition that
  /// failed), the first differing id from id 5 on, the special tokens that differ (the first
  /// three), the overlap.
  [[nodiscard]] std::string description() const {
    const VocabularyReport& r = report();
    std::string out = summary() + ": " + r.reason;
    if (!first_difference_.empty() && r.reason.find("differs (draft") == std::string::npos &&
        verdict() != VocabularyVerdict::identical) {
      out += "; first difference: " + first_difference_;
    }
    if (!r.special_differences.empty()) {
      constexpr std::size_t kShown = 3;
      out += "; special tokens that differ: ";
      for (std::size_t i = 0; i < r.special_differences.size() && i < kShown; ++i) {
        out += (i > 0 ? ", " : "") + r.special_differences[i];
      }
      if (r.special_differences.size() > kShown) {
        out += concat(" and ", r.special_differences.size() - kShown, " more");
      }
    }
    if (verdict() != VocabularyVerdict::identical) {
      out += concat("; shared ", r.shared, " of the draft's ", r.draft_size, " (",
                    percent(r.draft_overlap), ") and of the target's ", r.target_size, " (",
                    percent(r.target_overlap), ")");
    }
    return out;
  }

 private:
  template <class... Parts>
  [[nodiscard]] static std::string concat(const Parts&... parts) {
    return specdec::detail::concat(parts...);
  }
  static std::string percent(double fraction) {
    char text[32];
    std::snprintf(text, sizeof text, "%.1f%%", 100.0 * fraction);
    return text;
  }

  VocabularyMap map_;
  std::size_t extra_ids_ = 0;
  std::size_t unused_extra_ids_ = 0;
  const char* extra_side_ = "draft";
  std::string first_difference_;  // from id kFirstComparedId on; "" if none
};

/// \brief Grades the pair (VocabularyCheck) and throws std::domain_error if it falls short of
/// `requirement`: with VocabularyRequirement::identical (the default, what a draft used as it
/// is needs) unless the vocabularies are identical; with mappable if they are disjoint. The
/// message is VocabularyCheck::description(): which verdict and why.
///
/// (llama.cpp's common_speculative_are_compatible accepts sizes that differ by up to 128
/// tokens: such a pair is VocabularyVerdict::compatible here, and drafts through MappedDraft
/// over check.map(), since specdec compares probabilities token by token in the target's ids.)
inline VocabularyCheck check_compatible(
    const llama_model* draft, const llama_model* target,
    VocabularyRequirement requirement = VocabularyRequirement::identical) {
  VocabularyCheck check(vocabulary_text(draft), vocabulary_text(target));
  if (check.verdict() == VocabularyVerdict::disjoint) {
    detail::throw_domain_error("draft and target vocabularies are ", check.description(),
                               "; expected vocabularies that share tokens (the draft can only "
                               "propose tokens the target has)");
  }
  if (requirement == VocabularyRequirement::identical &&
      check.verdict() != VocabularyVerdict::identical) {
    detail::throw_domain_error(
        "draft and target vocabularies are not identical: ", check.description(),
        "; expected one vocabulary (a padded or partly shared one drafts "
        "through MappedDraft over check_compatible(draft, target, "
        "VocabularyRequirement::mappable).map())");
  }
  return check;
}

/// \brief The ContextTranslation (mapped_draft.hpp) for a target token the draft vocabulary
/// lacks: its text (llama_token_to_piece, specials rendered as nothing) tokenized by the
/// draft's tokenizer (no BOS, specials not parsed). A text the draft's tokenizer cannot
/// tokenize (a vocabulary missing bytes; invalid UTF-8 from a partial character) stands for
/// nothing: the draft sees a shorter context, which lowers acceptance, never correctness. A
/// context that would so start with no draft token at all starts with the draft's BOS (if it
/// has one; else the draft model's empty-context error names the problem). Both vocabularies
/// must outlive the translation.
[[nodiscard]] inline ContextTranslation retokenize(const llama_vocab* draft,
                                                   const llama_vocab* target) {
  return [draft, target, piece = std::string(), ids = std::vector<llama_token>()](
             token_t token, std::vector<token_t>& draft_context) mutable {
    const std::string_view text = detail::token_piece(target, token, piece);
    const auto length = static_cast<std::int32_t>(text.size());
    if (length > 0) {
      try {
        ids.resize(text.size() + 8);
        std::int32_t count = llama_tokenize(draft, text.data(), length, ids.data(),
                                            static_cast<std::int32_t>(ids.size()), false, false);
        if (count < 0) {
          ids.resize(static_cast<std::size_t>(-count));
          count = llama_tokenize(draft, text.data(), length, ids.data(),
                                 static_cast<std::int32_t>(ids.size()), false, false);
        }
        for (std::int32_t i = 0; i < count; ++i) {
          draft_context.push_back(static_cast<token_t>(ids[static_cast<std::size_t>(i)]));
        }
      } catch (const std::exception&) {
        // llama.cpp's tokenizer throws for text it has no tokens for: the token stands for none.
      }
    }
    // A draft is never called on an empty context: a context that so far stands for no draft
    // token starts with the draft's BOS, if it has one.
    if (const llama_token bos = llama_vocab_bos(draft); draft_context.empty() && bos >= 0) {
      draft_context.push_back(static_cast<token_t>(bos));
    }
  };
}

}  // namespace specdec::llama_cpp

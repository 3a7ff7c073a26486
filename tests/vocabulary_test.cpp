// Vocabulary maps (vocabulary.hpp): shared tokens by normalised text across the GPT-2
// byte-level and SentencePiece conventions ('Ġ' / '▁' spaces, 'Ċ' / "<0x0A>" newlines, byte
// tokens), duplicates, special tokens, the graded verdict on hand-made vocabularies (identical,
// padded by 5 tokens either way, near-identical, partial, disjoint), the report and its errors.
#include <gtest/gtest.h>

#include <cstddef>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "specdec/vocabulary.hpp"

namespace {

using specdec::SpecialTokens;
using specdec::token_t;
using specdec::TokenEncoding;
using specdec::Vocabulary;
using specdec::VocabularyMap;
using specdec::VocabularyMapOptions;
using specdec::VocabularyVerdict;

// GPT-2 byte-level text: 'Ġ' (U+0120) is a space, 'Ċ' (U+010A) a newline, and the UTF-8 bytes
// C3 A9 of "é" are the characters 'Ã' (U+00C3) and '©' (U+00A9).
const std::string kG = "\xC4\xA0";                   // Ġ
const std::string kC = "\xC4\x8A";                   // Ċ
const std::string kByteLevelE = "\xC3\x83\xC2\xA9";  // "Ã©" = bytes C3 A9
const std::string kSpm = "\xE2\x96\x81";             // ▁
const std::string kE = "\xC3\xA9";                   // é in UTF-8

// Target: a GPT-2 style vocabulary; draft: a SentencePiece one with byte tokens.
const std::vector<std::string> kByteLevelTokens{
    "<|endoftext|>", "a", "b", kG + "the", kC, kG, "hello", kByteLevelE, kG + "world"};
const std::vector<token_t> kByteLevelSpecial{0};
const std::vector<std::string> kSentencePieceTokens{"<unk>",      "<s>", "</s>",         "<0x0A>",
                                                    kSpm + "the", "a",   kSpm,           "cat",
                                                    "<0x20>",     kE,    kSpm + "world", "<0xC3>"};
const std::vector<token_t> kSentencePieceSpecial{0, 1, 2};

Vocabulary byte_level_target() {
  return {.tokens = kByteLevelTokens, .special_tokens = kByteLevelSpecial};
}
Vocabulary sentencepiece_draft() {
  return {.tokens = kSentencePieceTokens, .special_tokens = kSentencePieceSpecial};
}

TEST(VocabularyMap, SharesTokensAcrossSpaceMarkersAndByteTokens) {
  const VocabularyMap map(sentencepiece_draft(), byte_level_target());
  EXPECT_EQ(map.report().draft_encoding, TokenEncoding::sentencepiece);
  EXPECT_EQ(map.report().target_encoding, TokenEncoding::byte_level);
  const auto d2t = map.draft_to_target();
  const auto t2d = map.target_to_draft();
  ASSERT_EQ(d2t.size(), kSentencePieceTokens.size());
  ASSERT_EQ(t2d.size(), kByteLevelTokens.size());
  EXPECT_EQ(d2t[3], 4);    // "<0x0A>" = "Ċ"
  EXPECT_EQ(d2t[4], 3);    // "▁the" = "Ġthe"
  EXPECT_EQ(d2t[5], 1);    // "a" = "a"
  EXPECT_EQ(d2t[6], 5);    // "▁" = "Ġ"
  EXPECT_EQ(d2t[7], -1);   // "cat": the target has none
  EXPECT_EQ(d2t[9], 7);    // "é" = "Ã©" (the bytes C3 A9)
  EXPECT_EQ(d2t[10], 8);   // "▁world" = "Ġworld"
  EXPECT_EQ(d2t[11], -1);  // the lone byte C3 is no target token
  EXPECT_EQ(t2d[2], -1);   // "b"
  EXPECT_EQ(t2d[6], -1);   // "hello"
  EXPECT_EQ(t2d[4], 3);
  EXPECT_EQ(t2d[5], 6);
  EXPECT_EQ(map.report().shared, 6u);
  EXPECT_FALSE(map.identity_on_shared());
  EXPECT_EQ(map.verdict(), VocabularyVerdict::needs_intersection);
}

TEST(VocabularyMap, DuplicateTextMapsItsLowestIdOnly) {
  // "▁" (6) and "<0x20>" (8) are both a space: 6 is the representative; 8 is unmapped in
  // draft_to_target, so the target's "Ġ" receives exactly one draft logit.
  const VocabularyMap map(sentencepiece_draft(), byte_level_target());
  EXPECT_EQ(map.draft_to_target()[6], 5);
  EXPECT_EQ(map.draft_to_target()[8], -1);
  EXPECT_EQ(map.logit_sources()[5], 6);
  EXPECT_EQ(map.report().draft_duplicates, 1u);
  EXPECT_EQ(map.report().target_duplicates, 0u);

  // A target duplicate: both target ids translate to the draft's token in a context, but only
  // the lowest receives its logit.
  const std::vector<std::string> target_tokens{"x", kSpm, "<0x20>", "y"};
  const std::vector<std::string> draft_tokens{"y", " ", "x"};
  const VocabularyMap duplicate(
      {.tokens = draft_tokens, .encoding = TokenEncoding::plain},
      {.tokens = target_tokens, .encoding = TokenEncoding::sentencepiece});
  EXPECT_EQ(duplicate.report().target_duplicates, 1u);
  EXPECT_EQ(duplicate.target_to_draft()[1], 1);
  EXPECT_EQ(duplicate.target_to_draft()[2], 1);
  EXPECT_EQ(duplicate.logit_sources()[1], 1);
  EXPECT_EQ(duplicate.logit_sources()[2], -1);
  EXPECT_EQ(duplicate.draft_to_target()[1], 1);
}

TEST(VocabularyMap, SpecialTokensMatchOnlySpecialsOfTheSameText) {
  // The draft's ordinary "<|endoftext|>" is not the target's special one.
  const std::vector<std::string> draft_tokens{"<|endoftext|>", "a", "</s>"};
  const std::vector<token_t> draft_special{2};
  const VocabularyMap ordinary({.tokens = draft_tokens, .special_tokens = draft_special},
                               byte_level_target());
  EXPECT_EQ(ordinary.draft_to_target()[0], -1);
  EXPECT_EQ(ordinary.draft_to_target()[1], 1);
  ASSERT_EQ(ordinary.report().special_differences.size(), 2u);
  EXPECT_EQ(ordinary.report().special_differences[0],
            "draft special 2 \"</s>\": no target special of that text");
  EXPECT_EQ(ordinary.report().special_differences[1],
            "target special 0 \"<|endoftext|>\": no draft special of that text");

  const std::vector<token_t> both_special{0, 2};
  const VocabularyMap matched({.tokens = draft_tokens, .special_tokens = both_special},
                              byte_level_target());
  EXPECT_EQ(matched.draft_to_target()[0], 0);
  EXPECT_EQ(matched.report().shared_special, 1u);
  EXPECT_EQ(matched.report().special_differences.size(), 1u);

  const VocabularyMap excluded({.tokens = draft_tokens, .special_tokens = both_special},
                               byte_level_target(),
                               VocabularyMapOptions{.special_tokens = SpecialTokens::exclude});
  EXPECT_EQ(excluded.draft_to_target()[0], -1);
  EXPECT_EQ(excluded.target_to_draft()[0], -1);
  EXPECT_EQ(excluded.report().shared_special, 0u);
}

TEST(VocabularyMap, EncodingIsDetectedOrGiven) {
  const std::vector<std::string> plain{"a", " b", "\n"};
  const std::vector<std::string> sentencepiece{"a", kSpm + "b", "<0x0A>"};
  const VocabularyMap detected({.tokens = sentencepiece}, {.tokens = plain});
  EXPECT_EQ(detected.report().draft_encoding, TokenEncoding::sentencepiece);
  EXPECT_EQ(detected.report().target_encoding, TokenEncoding::plain);
  EXPECT_EQ(detected.report().shared, 3u);
  // Read as plain text, "▁b" and "<0x0A>" are just strings.
  const VocabularyMap literal({.tokens = sentencepiece, .encoding = TokenEncoding::plain},
                              {.tokens = plain});
  EXPECT_EQ(literal.report().shared, 1u);
}

// ---- the graded verdict ------------------------------------------------------------------------

std::vector<std::string> base_tokens(std::size_t size) {
  std::vector<std::string> tokens;
  for (std::size_t i = 0; i < size; ++i) tokens.push_back("tok" + std::to_string(i));
  return tokens;
}

TEST(VocabularyVerdict, IdenticalVocabularies) {
  const std::vector<std::string> tokens = base_tokens(40);
  const VocabularyMap map({.tokens = tokens, .type = "bpe"}, {.tokens = tokens, .type = "bpe"});
  EXPECT_EQ(map.verdict(), VocabularyVerdict::identical);
  EXPECT_TRUE(map.identity_on_shared());
  EXPECT_EQ(map.report().shared, 40u);
  EXPECT_DOUBLE_EQ(map.report().draft_overlap, 1.0);
  EXPECT_DOUBLE_EQ(map.report().target_overlap, 1.0);
}

TEST(VocabularyVerdict, PaddedDraftFiveTokensFewerOrMore) {
  const std::vector<std::string> tokens = base_tokens(40);
  std::vector<std::string> padded = tokens;
  for (int i = 0; i < 5; ++i) padded.push_back("<pad" + std::to_string(i) + ">");
  for (const bool draft_is_smaller : {true, false}) {
    SCOPED_TRACE(draft_is_smaller ? "draft 5 fewer" : "draft 5 more");
    const Vocabulary smaller{.tokens = tokens, .type = "spm", .bos = 1, .eos = 2, .add_bos = true};
    Vocabulary larger = smaller;
    larger.tokens = padded;
    const VocabularyMap map(draft_is_smaller ? smaller : larger,
                            draft_is_smaller ? larger : smaller);
    EXPECT_EQ(map.verdict(), VocabularyVerdict::compatible) << map.report().reason;
    EXPECT_TRUE(map.identity_on_shared());
    EXPECT_EQ(map.report().shared, 40u);
    EXPECT_EQ(map.draft_size(), draft_is_smaller ? 40u : 45u);
    for (token_t id = 0; id < 40; ++id) EXPECT_EQ(map.draft_to_target()[id], id);
    const std::vector<specdec::UnmappedToken>& unmapped =
        draft_is_smaller ? map.report().unmapped_target : map.report().unmapped_draft;
    ASSERT_EQ(unmapped.size(), 5u);
    EXPECT_EQ(unmapped[0].id, 40);
    EXPECT_EQ(unmapped[0].text, "<pad0>");
  }
}

TEST(VocabularyVerdict, NearIdenticalIgnoresTheFirstIdsLikeLlamaCpp) {
  std::vector<std::string> draft = base_tokens(40);
  const std::vector<std::string> target = base_tokens(40);
  draft[2] = "<control>";  // below kFirstComparedId: still compatible, id 2 unmapped
  const VocabularyMap map({.tokens = draft}, {.tokens = target});
  EXPECT_EQ(map.verdict(), VocabularyVerdict::compatible) << map.report().reason;
  EXPECT_EQ(map.draft_to_target()[2], -1);
  EXPECT_EQ(map.report().shared, 39u);
}

TEST(VocabularyVerdict, WhatMakesAPairNeedIntersection) {
  const std::vector<std::string> tokens = base_tokens(40);
  std::vector<std::string> changed = tokens;
  changed[7] = "other";
  const VocabularyMap text({.tokens = changed}, {.tokens = tokens});
  EXPECT_EQ(text.verdict(), VocabularyVerdict::needs_intersection);
  EXPECT_NE(text.report().reason.find("token 7 differs (draft \"other\", target \"tok7\")"),
            std::string::npos)
      << text.report().reason;
  EXPECT_EQ(text.report().shared, 39u);

  // Every id from 5 on agrees, but a token moved below: not the identity on shared ids.
  std::vector<std::string> moved = tokens;
  moved[1] = "tok2";
  moved[2] = "tok1";
  const VocabularyMap swapped({.tokens = moved}, {.tokens = tokens});
  EXPECT_EQ(swapped.verdict(), VocabularyVerdict::needs_intersection);
  EXPECT_NE(swapped.report().reason.find("shared tokens sit at different ids (draft 1 \"tok2\" "
                                         "is target 2 \"tok2\")"),
            std::string::npos)
      << swapped.report().reason;

  const VocabularyMap type({.tokens = tokens, .type = "spm"}, {.tokens = tokens, .type = "bpe"});
  EXPECT_EQ(type.verdict(), VocabularyVerdict::needs_intersection);
  EXPECT_NE(type.report().reason.find("tokenizer types differ"), std::string::npos);

  const VocabularyMap bos({.tokens = tokens, .bos = 1}, {.tokens = tokens, .bos = 2});
  EXPECT_EQ(bos.verdict(), VocabularyVerdict::needs_intersection);
  EXPECT_NE(bos.report().reason.find("BOS/EOS handling differs"), std::string::npos);

  const std::vector<std::string> large = base_tokens(40 + 129);
  const VocabularyMap size({.tokens = tokens}, {.tokens = large});
  EXPECT_EQ(size.verdict(), VocabularyVerdict::needs_intersection);
  EXPECT_NE(size.report().reason.find("sizes 40 and 169 differ by more than 128"),
            std::string::npos)
      << size.report().reason;
  const std::vector<std::string> within = base_tokens(40 + 128);
  EXPECT_EQ(VocabularyMap({.tokens = tokens}, {.tokens = within}).verdict(),
            VocabularyVerdict::compatible);
}

TEST(VocabularyVerdict, DisjointVocabulariesAreAClearError) {
  const std::vector<std::string> draft{"<s>", "x", "y"};
  const std::vector<std::string> target{"<s>", "p", "q"};
  const std::vector<token_t> special{0};
  const Vocabulary d{.tokens = draft, .special_tokens = special};
  const Vocabulary t{.tokens = target, .special_tokens = special};
  // Sharing only a special token is still disjoint: nothing to draft.
  const specdec::VocabularyReport report = specdec::compare_vocabularies(d, t);
  EXPECT_EQ(report.verdict, VocabularyVerdict::disjoint);
  EXPECT_EQ(report.shared, 1u);
  try {
    const VocabularyMap map(d, t);
    FAIL() << "disjoint vocabularies were mapped";
  } catch (const std::invalid_argument& error) {
    EXPECT_STREQ(error.what(),
                 "specdec: vocabulary map: the draft's 3 tokens and the target's 3 share no "
                 "ordinary token (plain vs plain text); expected vocabularies that share tokens "
                 "(a draft of another tokenizer family can only propose shared tokens)");
  }
}

TEST(VocabularyMap, BadInputIsAClearError) {
  const std::vector<std::string> tokens{"a", "b"};
  const std::vector<std::string> none;
  const std::vector<token_t> out_of_range{2};
  EXPECT_THROW((void)VocabularyMap({.tokens = none}, {.tokens = tokens}), std::invalid_argument);
  try {
    (void)VocabularyMap({.tokens = tokens, .special_tokens = out_of_range}, {.tokens = tokens});
    FAIL();
  } catch (const std::invalid_argument& error) {
    EXPECT_STREQ(error.what(),
                 "specdec: draft special token id 2; expected an id in [0, 2) (the draft "
                 "vocabulary's size)");
  }
}

TEST(VocabularyReport, PrintsVerdictOverlapAndExamples) {
  const VocabularyMap map(sentencepiece_draft(), byte_level_target());
  std::ostringstream out;
  out << map.report();
  const std::string text = out.str();
  EXPECT_NE(text.find("vocabulary: intersection ("), std::string::npos) << text;
  EXPECT_NE(text.find("draft 12 tokens (sentencepiece), target 9 tokens (byte-level)"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("shared 6 (0 special)"), std::string::npos) << text;
  EXPECT_NE(text.find("unmapped target tokens, first 2: 2 \"b\" 6 \"hello\""), std::string::npos)
      << text;
  EXPECT_NE(text.find("draft special 2 \"</s>\""), std::string::npos) << text;
}

}  // namespace

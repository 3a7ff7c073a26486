// The names of specdec's public enums (enum_names.hpp): every enumerator's name parses back to
// it, an unknown name is an error that lists the accepted names, and a value outside the
// enumerators has no name.

#include <gtest/gtest.h>

#include <cstddef>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "specdec/measure/speedup.hpp"
#include "specdec/specdec.hpp"
#include "specdec/testing/enumeration.hpp"

namespace {

/// Every enumerator of E round-trips through its name, the names are distinct, and the table
/// covers the values 0 .. count - 1 (each enum here is declared without explicit values).
template <class E>
void expect_round_trips(const std::vector<std::string_view>& expected_names) {
  const auto& names = specdec::EnumNames<E>::names;
  ASSERT_EQ(names.size(), expected_names.size());
  for (std::size_t i = 0; i < names.size(); ++i) {
    const E value = static_cast<E>(i);
    EXPECT_EQ(names[i].value, value) << "table entry " << i << " out of declaration order";
    EXPECT_EQ(to_string(value), expected_names[i]);
    EXPECT_EQ(specdec::parse<E>(expected_names[i]), value);
    EXPECT_EQ(specdec::try_parse<E>(expected_names[i]), std::optional<E>(value));
  }
  EXPECT_EQ(to_string(static_cast<E>(names.size())), "") << "a value outside the enumerators";
}

/// An unknown name: try_parse says nothing, parse throws a message naming it and listing
/// every accepted name.
template <class E>
void expect_rejected(std::string_view bad, std::string_view expected_message) {
  EXPECT_EQ(specdec::try_parse<E>(bad), std::nullopt);
  try {
    (void)specdec::parse<E>(bad);
    ADD_FAILURE() << "parse accepted \"" << bad << "\"";
  } catch (const std::invalid_argument& error) {
    EXPECT_EQ(std::string(error.what()), expected_message);
  }
}

TEST(EnumNames, VerifierKind) {
  expect_round_trips<specdec::VerifierKind>({"token", "block"});
  expect_rejected<specdec::VerifierKind>("tree",
                                         "specdec: verifier \"tree\"; expected token or block");
  EXPECT_EQ(specdec::accepted_names<specdec::VerifierKind>(), "token or block");
}

TEST(EnumNames, FinishReason) {
  expect_round_trips<specdec::FinishReason>(
      {"length", "stop_token", "callback", "context_limit", "cancelled"});
  expect_rejected<specdec::FinishReason>(
      "stop",
      "specdec: finish reason \"stop\"; expected length, stop_token, callback, "
      "context_limit or cancelled");
}

TEST(EnumNames, DraftLengthKind) {
  expect_round_trips<specdec::DraftLengthKind>({"fixed", "schedule", "confidence", "goodput"});
  expect_rejected<specdec::DraftLengthKind>(
      "always",
      "specdec: draft-length policy \"always\"; expected fixed, schedule, confidence "
      "or goodput");
}

TEST(EnumNames, SiblingMode) {
  expect_round_trips<specdec::SiblingMode>({"replace", "distinct", "top-k"});
  expect_rejected<specdec::SiblingMode>(
      "top_k", "specdec: sibling mode \"top_k\"; expected replace, distinct or top-k");
  // The older spelling forwards to parse<SiblingMode>.
  EXPECT_EQ(specdec::parse_sibling_mode("top-k"), specdec::SiblingMode::top_k);
  EXPECT_THROW((void)specdec::parse_sibling_mode("all"), std::invalid_argument);
}

TEST(EnumNames, PredictionBasis) {
  expect_round_trips<specdec::PredictionBasis>({"draft_length", "mean_drafted_length", "policy"});
  expect_rejected<specdec::PredictionBasis>(
      "K", "specdec: prediction basis \"K\"; expected draft_length, mean_drafted_length or policy");
}

TEST(EnumNames, VocabularyVerdict) {
  expect_round_trips<specdec::VocabularyVerdict>(
      {"identical", "compatible", "intersection", "disjoint"});
  expect_rejected<specdec::VocabularyVerdict>(
      "padded",
      "specdec: vocabulary verdict \"padded\"; expected identical, compatible, intersection or "
      "disjoint");
}

TEST(EnumNames, TokenEncoding) {
  expect_round_trips<specdec::TokenEncoding>({"auto", "byte-level", "sentencepiece", "plain"});
  expect_rejected<specdec::TokenEncoding>(
      "bpe", "specdec: token encoding \"bpe\"; expected auto, byte-level, sentencepiece or plain");
}

TEST(EnumNames, SpecialTokens) {
  expect_round_trips<specdec::SpecialTokens>({"match", "exclude"});
  expect_rejected<specdec::SpecialTokens>(
      "keep", "specdec: special tokens \"keep\"; expected match or exclude");
}

TEST(EnumNames, TestingBudget) {
  expect_round_trips<specdec::testing::Budget>({"exact", "unlimited"});
  expect_rejected<specdec::testing::Budget>("",
                                            "specdec: budget \"\"; expected exact or unlimited");
}

TEST(EnumNames, NamesAreCaseSensitiveAndExact) {
  EXPECT_EQ(specdec::try_parse<specdec::VerifierKind>("Block"), std::nullopt);
  EXPECT_EQ(specdec::try_parse<specdec::VerifierKind>("block "), std::nullopt);
  EXPECT_EQ(specdec::try_parse<specdec::VerifierKind>(""), std::nullopt);
}

TEST(EnumNames, ToStringIsConstexpr) {
  static_assert(to_string(specdec::VerifierKind::block) == "block");
  static_assert(specdec::try_parse<specdec::SiblingMode>("distinct") ==
                specdec::SiblingMode::without_replacement);
  static_assert(specdec::NamedEnum<specdec::FinishReason>);
  static_assert(!specdec::NamedEnum<int>);
}

TEST(ErrorPrefix, MessageWithoutPrefix) {
  EXPECT_EQ(specdec::message_without_prefix("specdec: K = 0"), "K = 0");
  EXPECT_EQ(specdec::message_without_prefix("no such file"), "no such file");
  EXPECT_EQ(specdec::message_without_prefix("specdec:"), "specdec:");
  try {
    (void)specdec::parse<specdec::VerifierKind>("x");
  } catch (const std::invalid_argument& error) {
    EXPECT_EQ(specdec::message_without_prefix(error.what()),
              "verifier \"x\"; expected token or block");
  }
}

}  // namespace

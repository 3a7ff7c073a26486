// MappedDraft (mapped_draft.hpp): a draft of another, partially overlapping vocabulary in the
// target's id space. The row it returns (draft logits at mapped ids, -inf elsewhere), the
// context translation (kept across calls, the callback for target tokens the draft lacks), and
// exactness: the certification harness (specdec/testing.hpp) enumerates rounds of a scripted
// draft over its own 6-token vocabulary, 3 tokens of which the 5-token target shares, through
// the adapter with the token, block and both tree verifiers, under temperatures, filters and a
// logits processor (one that lifts a masked token too), and finds the target's law (TV < 1e-9).
// Greedy decoding is the target's token for token; bad input is a clear error after which the
// decoder decodes as a fresh one does.
#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "specdec/decoder.hpp"
#include "specdec/mapped_draft.hpp"
#include "specdec/proposers/tree.hpp"
#include "specdec/testing.hpp"
#include "specdec/verifiers.hpp"
#include "specdec/vocabulary.hpp"

#include "sampling_cases.hpp"

namespace {

using specdec::MappedDraft;
using specdec::SamplingParams;
using specdec::SiblingMode;
using specdec::StaticDraftLength;
using specdec::token_t;
using specdec::TreeOptions;
using specdec::TreeProposer;
using specdec::TreeShape;
using specdec::VocabularyMap;
using specdec::testing::ScriptedModel;
using specdec::testing::ScriptedPair;
using specdec::testing::Sequence;
using specdec_test::processed_case;
using specdec_test::sampling_case;
using specdec_test::SamplingCase;

constexpr double kExactnessBound = 1e-9;

// Target: GPT-2 byte-level text, 5 tokens. Draft: SentencePiece text, 6 tokens. Shared by text:
// " a" (target 0, draft 1), "b" (target 1, draft 3), "\n" (target 2, draft 2). The target's "d"
// and "e" have no draft token; the draft's "x", "y", "z" no target token.
const std::vector<std::string> kTargetTokens{
    "\xC4\xA0"
    "a",
    "b", "\xC4\x8A", "d", "e"};
const std::vector<std::string> kDraftTokens{"x",
                                            "\xE2\x96\x81"
                                            "a",
                                            "<0x0A>",
                                            "b",
                                            "y",
                                            "z"};
constexpr std::size_t kTargetVocab = 5;
constexpr std::size_t kDraftVocab = 6;

VocabularyMap foreign_map() {
  return VocabularyMap({.tokens = kDraftTokens}, {.tokens = kTargetTokens});
}

// The target's "d" stands for the draft's "y"; its "e" for nothing.
void translate(token_t target_token, std::vector<token_t>& draft_context) {
  if (target_token == 3) draft_context.push_back(4);
}

// A context-dependent scripted draft over its own 6 ids (no bans: every shared token keeps a
// finite logit).
template <class Scalar>
struct ForeignDraft {
  ScriptedModel model{.salt = 23, .vocab = kDraftVocab, .scale = 2.0};
  std::size_t returned_size = kDraftVocab;  // != kDraftVocab: a broken draft
  std::size_t calls = 0;
  std::vector<Scalar> operator()(std::span<const token_t> context) {
    ++calls;
    const std::vector<double> row = model.logits(context);
    std::vector<Scalar> out(row.begin(), row.end());
    out.resize(returned_size, Scalar(0));
    return out;
  }
};

ScriptedPair target_pair(const SamplingParams& params) {
  ScriptedPair pair;
  pair.target_model = {.salt = 11, .vocab = kTargetVocab, .scale = 2.0};
  pair.params = params;
  return pair;
}

// ---- the row and the context -------------------------------------------------------------------

TEST(MappedDraft, RowHoldsDraftLogitsAtMappedIdsAndMinusInfinityElsewhere) {
  const VocabularyMap map = foreign_map();
  ASSERT_EQ(map.verdict(), specdec::VocabularyVerdict::needs_intersection);
  ForeignDraft<float> draft;
  MappedDraft mapped(draft, map, translate);
  static_assert(specdec::DraftModel<MappedDraft<ForeignDraft<float>>>);
  const Sequence context{0, 3, 1, 4, 2};
  const std::span<const float> row = mapped(context);
  const Sequence expected_draft_context{1, 4, 3, 2};  // "e" (4) stands for nothing
  EXPECT_EQ(Sequence(mapped.draft_context().begin(), mapped.draft_context().end()),
            expected_draft_context);
  const std::vector<double> draft_row = draft.model.logits(expected_draft_context);
  ASSERT_EQ(row.size(), kTargetVocab);
  EXPECT_EQ(row[0], static_cast<float>(draft_row[1]));
  EXPECT_EQ(row[1], static_cast<float>(draft_row[3]));
  EXPECT_EQ(row[2], static_cast<float>(draft_row[2]));
  EXPECT_EQ(row[3], -std::numeric_limits<float>::infinity());
  EXPECT_EQ(row[4], -std::numeric_limits<float>::infinity());
}

// ForeignDraft<float> with a tree call: every node's row, each computed on its own path.
struct ForeignTreeDraft : ForeignDraft<float> {
  std::size_t tree_calls = 0;
  std::vector<float> score_tree(std::span<const token_t> committed, std::span<const token_t> tokens,
                                std::span<const std::int32_t> parents) {
    ++tree_calls;
    std::vector<float> rows;
    for (std::int32_t node = -1; node < static_cast<std::int32_t>(tokens.size()); ++node) {
      Sequence path;
      for (std::int32_t v = node; v >= 0; v = parents[static_cast<std::size_t>(v)]) {
        path.insert(path.begin(), tokens[static_cast<std::size_t>(v)]);
      }
      Sequence context(committed.begin(), committed.end());
      context.insert(context.end(), path.begin(), path.end());
      const std::vector<double> row = model.logits(context);
      rows.insert(rows.end(), row.begin(), row.end());
    }
    return rows;
  }
};

TEST(MappedDraft, ScoreTreeGathersTheDraftsTreeRowsWhenTheDraftHasThem) {
  static_assert(specdec::detail::HasScoreTree<MappedDraft<ForeignTreeDraft>>);
  static_assert(!specdec::detail::HasScoreTree<MappedDraft<ForeignDraft<float>>>);
  static_assert(!specdec::detail::HasScoreTree<MappedDraft<ForeignDraft<double>>>);
  const VocabularyMap map = foreign_map();
  ForeignTreeDraft tree_draft;
  MappedDraft batched(tree_draft, map, translate);
  ForeignDraft<float> draft;
  MappedDraft node_by_node(draft, map, translate);
  // Committed " a", "d", "b" (the draft's 1, 4, 3); the tree: " a" <- "b", and "\n".
  const Sequence committed{0, 3, 1};
  const Sequence tokens{0, 2, 1};
  const std::vector<std::int32_t> parents{-1, -1, 0};
  const std::span<const float> rows = batched.score_tree(committed, tokens, parents);
  ASSERT_EQ(rows.size(), 4 * kTargetVocab);
  EXPECT_EQ(tree_draft.tree_calls, 1u);
  EXPECT_EQ(tree_draft.calls, 0u);
  const std::vector<Sequence> paths{{}, {0}, {2}, {0, 1}};
  for (std::size_t r = 0; r < paths.size(); ++r) {
    Sequence context = committed;
    context.insert(context.end(), paths[r].begin(), paths[r].end());
    const std::span<const float> expected = node_by_node(context);
    for (std::size_t t = 0; t < kTargetVocab; ++t) {
      EXPECT_EQ(rows[r * kTargetVocab + t], expected[t]) << "row " << r << ", token " << t;
    }
  }
  // A tree token the draft lacks ("d": only the ContextTranslation knows it) is an error.
  try {
    (void)batched.score_tree(committed, Sequence{0, 3}, std::vector<std::int32_t>{-1, 0});
    ADD_FAILURE() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& error) {
    EXPECT_NE(std::string(error.what()).find("MappedDraft score_tree: node 1 has token 3 (\"d\")"),
              std::string::npos)
        << error.what();
  }
}

TEST(MappedDraft, TranslatesOnlyWhatFollowsTheSharedPrefix) {
  const VocabularyMap map = foreign_map();
  ForeignDraft<float> draft;
  std::size_t translations = 0;
  MappedDraft mapped(draft, map, [&](token_t token, std::vector<token_t>& out) {
    ++translations;
    translate(token, out);
  });
  (void)mapped(Sequence{3, 0});
  EXPECT_EQ(translations, 1u);
  (void)mapped(Sequence{3, 0, 1, 2});  // the prefix is kept
  EXPECT_EQ(translations, 1u);
  (void)mapped(Sequence{3, 0, 3});  // a rollback and a new token
  EXPECT_EQ(translations, 2u);
  EXPECT_EQ(Sequence(mapped.draft_context().begin(), mapped.draft_context().end()),
            (Sequence{4, 1, 4}));
  (void)mapped(Sequence{2});  // a new generation
  EXPECT_EQ(Sequence(mapped.draft_context().begin(), mapped.draft_context().end()), Sequence{2});
}

TEST(MappedDraft, ContextTokenWithoutCounterpartIsAClearErrorAndTheAdapterStaysUsable) {
  const VocabularyMap map = foreign_map();
  ForeignDraft<float> draft;
  MappedDraft mapped(draft, map);  // no translation
  try {
    (void)mapped(Sequence{0, 1, 3, 2});
    FAIL() << "an untranslatable context token was accepted";
  } catch (const std::invalid_argument& error) {
    EXPECT_STREQ(error.what(),
                 "specdec: MappedDraft: context token 3 (\"d\") at position 2 has no draft "
                 "counterpart; expected a token the draft vocabulary shares, or a "
                 "ContextTranslation that supplies draft tokens for it");
  }
  const std::vector<float> after(mapped(Sequence{0, 1, 2}).begin(),
                                 mapped(Sequence{0, 1, 2}).end());
  ForeignDraft<float> fresh_draft;
  MappedDraft fresh(fresh_draft, map);
  const std::span<const float> expected = fresh(Sequence{0, 1, 2});
  EXPECT_EQ(after, std::vector<float>(expected.begin(), expected.end()));

  EXPECT_THROW((void)mapped(Sequence{0, 5}), std::invalid_argument);   // not a target id
  EXPECT_THROW((void)mapped(Sequence{0, -1}), std::invalid_argument);  // not a target id
  MappedDraft bad_translation(draft, map, [](token_t, std::vector<token_t>& out) {
    out.push_back(static_cast<token_t>(kDraftVocab));
  });
  try {
    (void)bad_translation(Sequence{0, 4});
    FAIL();
  } catch (const std::invalid_argument& error) {
    EXPECT_STREQ(error.what(),
                 "specdec: MappedDraft: the ContextTranslation gave draft token 6 for target "
                 "token 4; expected an id in [0, 6) (the draft vocabulary)");
  }
  EXPECT_EQ(
      Sequence(bad_translation.draft_context().begin(), bad_translation.draft_context().end()),
      Sequence{1});
}

TEST(MappedDraft, DraftRowOfTheWrongSizeIsADomainError) {
  const VocabularyMap map = foreign_map();
  ForeignDraft<float> draft;
  draft.returned_size = kDraftVocab - 1;
  MappedDraft mapped(draft, map, translate);
  try {
    (void)mapped(Sequence{0});
    FAIL();
  } catch (const std::domain_error& error) {
    EXPECT_STREQ(error.what(),
                 "specdec: MappedDraft: the draft model returned 5 logits; expected 6 (the draft "
                 "vocabulary of the VocabularyMap)");
  }
}

// ---- exactness: the certification harness ----------------------------------------------------

std::vector<SamplingCase> params_cases() {
  std::vector<SamplingCase> cases{
      sampling_case("T=1", 1.0f), sampling_case("T=0.6", 0.6f), sampling_case("T=1.4", 1.4f),
      sampling_case("top_k=2", 1.0f, 2), sampling_case("top_p=0.7", 1.0f, 0, 0.7f),
      sampling_case("min_p=0.2", 1.0f, 0, 1.0f, 0.2f),
      sampling_case("T=0.8,top_k=3,top_p=0.9,min_p=0.05", 0.8f, 3, 0.9f, 0.05f),
      sampling_case("greedy", 0.0f),
      // Context dependent: penalise the last token, ban
      // (last + 2) mod V after odd lengths.
      processed_case("T=0.9+processor", 0.9f, /*bans=*/true)};
  // Lifts the target's "d" (no draft token) to a finite logit: the draft then proposes it, and
  // the next draft call meets it in its context (translated to the draft's "y").
  SamplingParams lifting;
  lifting.logits_processor = [](std::span<const token_t>, std::span<float> logits) {
    logits[3] = 0.5f;
  };
  cases.push_back({"T=1+processor lifting a masked token", lifting});
  return cases;
}

const std::vector<Sequence> kContexts{{0, 1}, {3, 2}, {4, 0, 3}};

TEST(MappedDraftExactness, ChainsThroughTokenAndBlockVerifiers) {
  const VocabularyMap map = foreign_map();
  ForeignDraft<double> draft;
  MappedDraft mapped(draft, map, translate);
  const specdec::ModelProposer proposer(mapped);
  for (const SamplingCase& params_case : params_cases()) {
    const ScriptedPair pair = target_pair(params_case.params);
    double accepted = 0;  // a draft that shares tokens gets some accepted (not a vacuous pass)
    for (const Sequence& context : kContexts) {
      for (const std::size_t draft_length : {1u, 3u}) {
        SCOPED_TRACE(params_case.name + " context " + std::to_string(context.size()) +
                     " K=" + std::to_string(draft_length));
        const auto token =
            specdec::testing::certify_round(proposer, StaticDraftLength{}, specdec::TokenVerifier{},
                                            pair.target(), pair.params, context, draft_length);
        const auto block =
            specdec::testing::certify_round(proposer, StaticDraftLength{}, specdec::BlockVerifier{},
                                            pair.target(), pair.params, context, draft_length);
        EXPECT_LT(token.total_variation, kExactnessBound);
        EXPECT_LT(block.total_variation, kExactnessBound);
        accepted += token.expected_accepted;
      }
    }
    EXPECT_GT(accepted, 0.1) << params_case.name;
  }
}

TEST(MappedDraftExactness, RoundsComposedUnderTheDecodersBudget) {
  const VocabularyMap map = foreign_map();
  ForeignDraft<double> draft;
  MappedDraft mapped(draft, map, translate);
  const specdec::ModelProposer proposer(mapped);
  for (const SamplingCase& params_case : params_cases()) {
    SCOPED_TRACE(params_case.name);
    const ScriptedPair pair = target_pair(params_case.params);
    const auto law =
        specdec::testing::speculative_law(proposer, StaticDraftLength{}, specdec::TokenVerifier{},
                                          pair.target(), pair.params, {0, 1}, 4, 2);
    const auto target = specdec::testing::target_law(pair.target(), pair.params, {0, 1}, 4);
    EXPECT_LT(specdec::testing::total_variation(law, target), kExactnessBound);
  }
}

TEST(MappedDraftExactness, TreesThroughBothTreeVerifiers) {
  const VocabularyMap map = foreign_map();
  ForeignDraft<double> draft;
  MappedDraft mapped(draft, map, translate);
  // At most 4 nodes, so that every coin is enumerated in seconds (minutes under the sanitizers).
  const std::vector<TreeShape> shapes{TreeShape::parse("3"), TreeShape::parse("2x1"),
                                      TreeShape::parse("1x3"), TreeShape::dynamic(4, 3)};
  for (const SamplingCase& params_case : params_cases()) {
    if (params_case.params.greedy()) continue;
    const ScriptedPair pair = target_pair(params_case.params);
    for (const TreeShape& shape : shapes) {
      for (const SiblingMode mode :
           {SiblingMode::with_replacement, SiblingMode::without_replacement, SiblingMode::top_k}) {
        SCOPED_TRACE(params_case.name + " shape " + std::to_string(shape.nodes()) + " nodes, " +
                     std::string(specdec::to_string(mode)));
        const TreeProposer proposer(mapped, TreeOptions{shape, mode});
        const auto rrs =
            specdec::testing::certify_round(proposer, StaticDraftLength{}, specdec::TreeVerifier{},
                                            pair.target(), pair.params, {3, 2}, shape.nodes());
        const auto traversal = specdec::testing::certify_round(
            proposer, StaticDraftLength{}, specdec::TraversalVerifier{}, pair.target(), pair.params,
            {3, 2}, shape.nodes());
        EXPECT_LT(rrs.total_variation, kExactnessBound);
        EXPECT_LT(traversal.total_variation, kExactnessBound);
      }
    }
  }
}

TEST(MappedDraftExactness, PaddedPairIsTheIdentityMap) {
  // The draft's vocabulary is the target's plus 5 tokens (a padded embedding table).
  std::vector<std::string> padded = kTargetTokens;
  for (int i = 0; i < 5; ++i) padded.push_back("<pad" + std::to_string(i) + ">");
  const VocabularyMap map({.tokens = padded}, {.tokens = kTargetTokens});
  ASSERT_EQ(map.verdict(), specdec::VocabularyVerdict::compatible) << map.report().reason;
  ASSERT_TRUE(map.identity_on_shared());
  ForeignDraft<double> draft;
  draft.model.vocab = draft.returned_size = padded.size();
  MappedDraft mapped(draft, map);
  const specdec::ModelProposer proposer(mapped);
  for (const SamplingCase& params_case : params_cases()) {
    SCOPED_TRACE(params_case.name);
    const ScriptedPair pair = target_pair(params_case.params);
    for (const Sequence& context : kContexts) {
      const auto block =
          specdec::testing::certify_round(proposer, StaticDraftLength{}, specdec::BlockVerifier{},
                                          pair.target(), pair.params, context, 3);
      EXPECT_LT(block.total_variation, kExactnessBound);
    }
  }
}

// ---- the float decoder -----------------------------------------------------------------------

TEST(MappedDraftDecoder, GreedyIsThePlainTargetTokenForToken) {
  const VocabularyMap map = foreign_map();
  ScriptedPair pair = target_pair({});
  ScriptedPair::Target<float> target{&pair};
  ForeignDraft<float> draft;
  MappedDraft mapped(draft, map, translate);
  specdec::SpeculativeDecoder decoder(mapped, target);
  specdec::AutoregressiveDecoder plain(target);
  specdec::GenerationConfig config;
  config.sampling.temperature = 0;
  config.max_new_tokens = 48;
  for (const Sequence& prompt : kContexts) {
    for (const auto verifier : {specdec::VerifierKind::token, specdec::VerifierKind::block}) {
      config.verifier = verifier;
      const auto expected = plain.generate(prompt, config);
      const auto got = decoder.generate(prompt, config);
      EXPECT_EQ(got.tokens, expected.tokens);
      EXPECT_GT(got.stats.accepted, 0u);
    }
  }
}

TEST(MappedDraftDecoder, BadInputIsAClearErrorAndTheNextDecodeIsClean) {
  const VocabularyMap map = foreign_map();
  ScriptedPair pair = target_pair({});
  ScriptedPair::Target<float> target{&pair};
  ForeignDraft<float> draft;
  MappedDraft mapped(draft, map);  // no translation: the target's "d" / "e" cannot be drafted on
  specdec::SpeculativeDecoder decoder(mapped, target);
  specdec::GenerationConfig config;
  config.max_new_tokens = 24;
  config.seed = 7;
  // The target never emits "d" / "e" (nor does the draft propose them), so only a prompt can
  // bring them into a draft context.
  config.sampling.logits_processor = [](std::span<const token_t>, std::span<float> logits) {
    logits[3] = logits[4] = -std::numeric_limits<float>::infinity();
  };
  const auto fresh_result = [&](const Sequence& prompt) {
    ForeignDraft<float> fresh_draft;
    MappedDraft fresh_mapped(fresh_draft, map);
    specdec::SpeculativeDecoder fresh(fresh_mapped, target);
    return fresh.generate(prompt, config).tokens;
  };

  // A prompt token the draft lacks.
  try {
    (void)decoder.generate(Sequence{0, 3}, config);
    FAIL() << "an untranslatable prompt token was accepted";
  } catch (const std::invalid_argument& error) {
    EXPECT_NE(std::string(error.what()).find("context token 3 (\"d\") at position 1"),
              std::string::npos)
        << error.what();
  }
  EXPECT_EQ(decoder.generate(Sequence{0, 1}, config).tokens, fresh_result(Sequence{0, 1}));

  // A drafted token the draft lacks: a processor lifts the target's "d" in both rows, so the
  // draft proposes it (and the target emits it) and the next draft call meets it.
  specdec::GenerationConfig lifting = config;
  lifting.sampling.logits_processor = [](std::span<const token_t>, std::span<float> logits) {
    logits[3] = 1.0f;
    logits[4] = -std::numeric_limits<float>::infinity();
  };
  try {
    (void)decoder.generate(Sequence{0, 1}, lifting);
    FAIL() << "a drafted token without a draft counterpart went unnoticed";
  } catch (const std::invalid_argument& error) {
    EXPECT_NE(std::string(error.what()).find("context token 3 (\"d\")"), std::string::npos)
        << error.what();
  }
  EXPECT_EQ(decoder.generate(Sequence{0, 1}, config).tokens, fresh_result(Sequence{0, 1}));

  // A draft returning rows of the wrong size.
  draft.returned_size = kDraftVocab + 1;
  EXPECT_THROW((void)decoder.generate(Sequence{0, 1}, config), std::domain_error);
  draft.returned_size = kDraftVocab;
  EXPECT_EQ(decoder.generate(Sequence{2, 0}, config).tokens, fresh_result(Sequence{2, 0}));

  // A target whose rows do not have the map's V_target logits.
  ScriptedPair wider = target_pair({});
  wider.target_model.vocab = kTargetVocab + 1;
  ScriptedPair::Target<float> wider_target{&wider};
  specdec::SpeculativeDecoder mismatched(mapped, wider_target);
  try {
    (void)mismatched.generate(Sequence{0, 1}, config);
    FAIL();
  } catch (const std::domain_error& error) {
    EXPECT_NE(std::string(error.what()).find("target vocabulary size 6"), std::string::npos)
        << error.what();
  }
  EXPECT_EQ(decoder.generate(Sequence{0, 1}, config).tokens, fresh_result(Sequence{0, 1}));
}

}  // namespace

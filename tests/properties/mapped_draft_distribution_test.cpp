// Statistical test of the float decoder with a draft of another vocabulary (MappedDraft,
// mapped_draft.hpp): the first three tokens follow the target's own law. The draft is a scripted
// model over its own 6 ids sharing 3 tokens with the 5-token target (tests/mapped_draft_test.cpp
// enumerates the same pair exactly in double); here the float decoder runs it: SpeculativeDecoder
// with the token and block verifiers at T = 1 and with top-p 0.9, and StrategyDecoder with a
// TreeProposer and TreeVerifier at T = 1.
//
// Pearson chi-square over the 5^3 = 125 cells (pooled below 5 expected), kRuns = 60k generations
// per case with seeds 1000 + run; each case must give p > kMinPValue = 1e-4 (4 cases: a correct
// decoder fails a run with probability ~4e-4; the seeds are fixed, so a run's verdict is
// reproducible). Power: the draft's own (masked) law differs from the target's by a total
// variation that kRuns detects (samples_to_detect at the same threshold), and the same counts
// tested against that law fail.
//
// ctest label: statistical.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <span>
#include <string>
#include <vector>

#include "specdec/decoder.hpp"
#include "specdec/mapped_draft.hpp"
#include "specdec/proposers/tree.hpp"
#include "specdec/testing.hpp"
#include "specdec/verifiers.hpp"
#include "specdec/vocabulary.hpp"

namespace {

using specdec::MappedDraft;
using specdec::SamplingParams;
using specdec::token_t;
using specdec::VocabularyMap;
using specdec::testing::ScriptedModel;
using specdec::testing::ScriptedPair;
using specdec::testing::Sequence;

constexpr std::size_t kTargetVocab = 5;
constexpr std::size_t kDraftVocab = 6;
constexpr std::size_t kEmitted = 3;
constexpr std::size_t kRuns = 60'000;
constexpr double kMinPValue = 1e-4;
const Sequence kPrompt{0, 1};

// The pair of tests/mapped_draft_test.cpp: " a", "b", "\n" shared (byte-level target,
// SentencePiece draft); the target's "d" stands for the draft's "y", its "e" for nothing.
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

void translate(token_t target_token, std::vector<token_t>& draft_context) {
  if (target_token == 3) draft_context.push_back(4);
}

template <class Scalar>
struct ForeignDraft {
  ScriptedModel model{.salt = 23, .vocab = kDraftVocab, .scale = 2.0};
  std::vector<Scalar> operator()(std::span<const token_t> context) const {
    const std::vector<double> row = model.logits(context);
    return std::vector<Scalar>(row.begin(), row.end());
  }
};

// The scripted target with score_tree (one row per tree node plus the root's), for trees.
struct TreeTarget {
  const ScriptedPair* pair;
  std::vector<float> rows{};

  std::vector<float> operator()(std::span<const token_t> context, std::size_t n) const {
    const std::vector<double> values = pair->target_rows(context, n);
    return std::vector<float>(values.begin(), values.end());
  }
  std::span<const float> score_tree(std::span<const token_t> committed,
                                    std::span<const token_t> tokens,
                                    std::span<const std::int32_t> parents) {
    rows.clear();
    for (std::int32_t node = -1; node < static_cast<std::int32_t>(tokens.size()); ++node) {
      Sequence context(committed.begin(), committed.end());
      const std::size_t root_length = context.size();
      for (std::int32_t v = node; v >= 0; v = parents[static_cast<std::size_t>(v)]) {
        context.insert(context.begin() + static_cast<std::ptrdiff_t>(root_length),
                       tokens[static_cast<std::size_t>(v)]);
      }
      const std::vector<double> row = pair->target_model.logits(context);
      rows.insert(rows.end(), row.begin(), row.end());
    }
    return rows;
  }
};

std::vector<double> as_cells(const specdec::testing::Law& law) {
  return specdec::testing::law_cells(law, kTargetVocab, kEmitted);
}

template <class Decoder>
std::vector<std::uint64_t> first_three_counts(Decoder& decoder, specdec::GenerationConfig config) {
  std::vector<std::uint64_t> counts(kTargetVocab * kTargetVocab * kTargetVocab, 0);
  config.max_new_tokens = kEmitted;
  for (std::size_t run = 0; run < kRuns; ++run) {
    config.seed = 1000 + run;
    ++counts[specdec::testing::cell_of(decoder.generate(kPrompt, config).tokens, kTargetVocab,
                                       kEmitted)];
  }
  return counts;
}

struct Case {
  std::string name;
  SamplingParams params;
  specdec::VerifierKind verifier = specdec::VerifierKind::token;
  bool tree = false;
};

std::vector<Case> cases() {
  SamplingParams top_p;
  top_p.top_p = 0.9f;
  return {{"token T=1", {}},
          {"token top_p=0.9", top_p},
          {"block T=1", {}, specdec::VerifierKind::block},
          {"tree 2x2 T=1", {}, specdec::VerifierKind::token, true}};
}

TEST(MappedDraftStatisticalTest, DecoderFollowsTheTarget) {
  const VocabularyMap map({.tokens = kDraftTokens}, {.tokens = kTargetTokens});
  ForeignDraft<float> draft;
  MappedDraft mapped(draft, map, translate);
  ForeignDraft<double> exact_draft;
  MappedDraft exact_mapped(exact_draft, map, translate);
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    ScriptedPair pair;
    pair.target_model = {.salt = 11, .vocab = kTargetVocab, .scale = 2.0};
    pair.params = c.params;
    TreeTarget target{&pair};
    specdec::GenerationConfig config;
    config.draft_length = 3;
    config.sampling = c.params;
    config.verifier = c.verifier;
    std::vector<std::uint64_t> counts;
    if (c.tree) {
      specdec::StrategyDecoder decoder(
          target,
          specdec::TreeProposer(mapped,
                                specdec::TreeOptions{specdec::TreeShape::parse("2x2"),
                                                     specdec::SiblingMode::with_replacement}),
          specdec::StaticDraftLength{}, specdec::TreeVerifier{});
      counts = first_three_counts(decoder, config);
    } else {
      specdec::SpeculativeDecoder decoder(mapped, target);
      counts = first_three_counts(decoder, config);
    }
    const specdec::testing::Law target_law =
        specdec::testing::target_law(pair.target(), pair.params, kPrompt, kEmitted);
    const auto fit = specdec::testing::chi_square_test(counts, as_cells(target_law));
    std::printf("%-16s chi2 = %7.2f over %3zu cells, p = %.3g\n", c.name.c_str(), fit.statistic,
                fit.cells, fit.p_value);
    EXPECT_EQ(fit.impossible, 0u);
    EXPECT_GT(fit.p_value, kMinPValue) << "chi2 = " << fit.statistic << " over " << fit.cells;

    // Power: the draft's own law (restricted to the shared tokens) is detectably different,
    // and these counts reject it.
    const auto draft_as_target = [&](std::span<const token_t> context, std::size_t) {
      const std::span<const double> row = exact_mapped(context);
      return std::vector<double>(row.begin(), row.end());
    };
    const specdec::testing::Law draft_law =
        specdec::testing::target_law(draft_as_target, pair.params, kPrompt, kEmitted);
    const double distance = specdec::testing::total_variation(draft_law, target_law);
    EXPECT_LE(specdec::testing::samples_to_detect(distance, 125, kMinPValue), kRuns) << distance;
    EXPECT_LT(specdec::testing::chi_square_test(counts, as_cells(draft_law)).p_value, kMinPValue);
  }
}

}  // namespace

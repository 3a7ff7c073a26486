// Tree drafts in the decoder: a tree goes to score_tree, and only to a target that has it; a
// chain still goes to the ordinary call; greedy trees emit exactly plain greedy decoding's
// tokens and log-probs; sampled trees pass a chi-square test of the first tokens against the
// target's exact law; statistics per depth and per sibling rank add up.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <numeric>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "specdec/specdec.hpp"
#include "specdec/testing.hpp"

#include "restated_tree_verifier.hpp"

namespace {

using specdec::SiblingMode;
using specdec::StaticDraftLength;
using specdec::token_t;
using specdec::TreeOptions;
using specdec::TreeProposer;
using specdec::TreeShape;
using specdec::TreeVerifier;
using specdec::testing::ScriptedPair;

constexpr std::size_t kVocab = 5;
const std::vector<token_t> kContext{1, 2};

// An uncached tree target: every row computed from scratch from its full context (the
// scripted model), counting its calls.
struct CountingTreeTarget {
  const ScriptedPair* pair;
  std::size_t chain_calls = 0;
  std::size_t tree_calls = 0;
  std::vector<float> rows{};

  std::vector<float> operator()(std::span<const token_t> context, std::size_t n) {
    ++chain_calls;
    const std::vector<double> values = pair->target_rows(context, n);
    return std::vector<float>(values.begin(), values.end());
  }
  std::span<const float> score_tree(std::span<const token_t> committed,
                                    std::span<const token_t> tokens,
                                    std::span<const std::int32_t> parents) {
    ++tree_calls;
    rows.clear();
    for (std::int32_t node = -1; node < static_cast<std::int32_t>(tokens.size()); ++node) {
      std::vector<token_t> context(committed.begin(), committed.end());
      std::vector<token_t> path;
      for (std::int32_t v = node; v >= 0; v = parents[static_cast<std::size_t>(v)]) {
        path.insert(path.begin(), tokens[static_cast<std::size_t>(v)]);
      }
      context.insert(context.end(), path.begin(), path.end());
      const std::vector<double> row = pair->target_model.logits(context);
      rows.insert(rows.end(), row.begin(), row.end());
    }
    return rows;
  }
};

// A draft that can also score a tree in one call (TreeProposer then drafts a depth per call).
struct BatchedDraft {
  const ScriptedPair* pair;
  std::size_t tree_calls = 0;
  std::vector<float> rows{};

  std::vector<float> operator()(std::span<const token_t> context) const {
    const std::vector<double> row = pair->draft_logits(context);
    return std::vector<float>(row.begin(), row.end());
  }
  std::span<const float> score_tree(std::span<const token_t> committed,
                                    std::span<const token_t> tokens,
                                    std::span<const std::int32_t> parents) {
    ++tree_calls;
    rows.clear();
    for (std::int32_t node = -1; node < static_cast<std::int32_t>(tokens.size()); ++node) {
      std::vector<token_t> context(committed.begin(), committed.end());
      std::vector<token_t> path;
      for (std::int32_t v = node; v >= 0; v = parents[static_cast<std::size_t>(v)]) {
        path.insert(path.begin(), tokens[static_cast<std::size_t>(v)]);
      }
      context.insert(context.end(), path.begin(), path.end());
      const std::vector<double> row = pair->draft_logits(context);
      rows.insert(rows.end(), row.begin(), row.end());
    }
    return rows;
  }
};

static_assert(specdec::TreeTargetModel<CountingTreeTarget>);
static_assert(!specdec::TreeTargetModel<ScriptedPair::Target<float>>);
static_assert(specdec::TreeTargetModel<specdec::PathwiseTreeTarget<ScriptedPair::Target<float>>>);

ScriptedPair make_pair(float temperature, double quantum = 0.0) {
  ScriptedPair pair;
  pair.target_model = {.salt = 11, .vocab = kVocab, .scale = 2.0, .quantum = quantum};
  pair.perturbation = {.salt = 12, .vocab = kVocab, .scale = 2.0};
  pair.noise = 1.0;
  pair.params.temperature = temperature;
  return pair;
}

struct TreeCase {
  std::string name;
  TreeOptions options;
};

std::vector<TreeCase> tree_cases() {
  return {{"2x2x1 distinct", {TreeShape::parse("2x2x1"), SiblingMode::without_replacement}},
          {"3x1 replace", {TreeShape::parse("3x1"), SiblingMode::with_replacement}},
          {"2x2 top-k", {TreeShape::parse("2x2"), SiblingMode::top_k}},
          {"dynamic6 distinct", {TreeShape::dynamic(6, 3), SiblingMode::without_replacement}},
          {"dynamic6 top-k", {TreeShape::dynamic(6, 3), SiblingMode::top_k}}};
}

TEST(TreeDecoder, GreedyTreesEmitPlainGreedyTokenForToken) {
  const ScriptedPair pair = make_pair(0.0f, /*quantum=*/0.25);  // exact ties in the target
  ScriptedPair::Draft<float> draft{&pair};
  CountingTreeTarget target{&pair};
  specdec::AutoregressiveDecoder plain(target);
  specdec::GenerationConfig config;
  config.draft_length = 8;
  config.max_new_tokens = 60;
  config.sampling.temperature = 0;
  const auto expected = plain.generate(kContext, config);
  for (const TreeCase& tree_case : tree_cases()) {
    SCOPED_TRACE(tree_case.name);
    specdec::StrategyDecoder decoder(target, TreeProposer(draft, tree_case.options),
                                     StaticDraftLength{}, TreeVerifier{});
    target.tree_calls = 0;
    const auto got = decoder.generate(kContext, config);
    EXPECT_EQ(got.tokens, expected.tokens);
    EXPECT_EQ(got.logprobs, expected.logprobs);
    EXPECT_GT(target.tree_calls, 0u);
  }
}

TEST(TreeDecoder, TreeProposalForATargetWithoutScoreTreeIsAnInvalidArgument) {
  const ScriptedPair pair = make_pair(1.0f);
  ScriptedPair::Draft<float> draft{&pair};
  ScriptedPair::Target<float> target{&pair};
  specdec::StrategyDecoder decoder(target, TreeProposer(draft, tree_cases()[0].options),
                                   StaticDraftLength{}, TreeVerifier{});
  specdec::GenerationConfig config;
  config.draft_length = 8;
  try {
    (void)decoder.generate(kContext, config);
    FAIL() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& error) {
    const std::string message = error.what();
    EXPECT_EQ(message.rfind("specdec: ", 0), 0u) << message;
    EXPECT_NE(message.find("score_tree"), std::string::npos) << message;
  }
}

TEST(TreeDecoder, ChainShapesUseTheChainCallAndTreesTheTreeCall) {
  const ScriptedPair pair = make_pair(1.0f);
  ScriptedPair::Draft<float> draft{&pair};
  CountingTreeTarget target{&pair};
  specdec::GenerationConfig config;
  config.draft_length = 8;
  config.max_new_tokens = 30;
  specdec::StrategyDecoder chain(
      target, TreeProposer(draft, {TreeShape::parse("1x1x1"), SiblingMode::with_replacement}),
      StaticDraftLength{}, TreeVerifier{});
  const auto chained = chain.generate(kContext, config);
  EXPECT_EQ(target.tree_calls, 0u);
  EXPECT_EQ(target.chain_calls, chained.stats.target_calls);
  specdec::StrategyDecoder tree(target, TreeProposer(draft, tree_cases()[0].options),
                                StaticDraftLength{}, TreeVerifier{});
  target.chain_calls = 0;
  const auto treed = tree.generate(kContext, config);
  // Near the budget a round's tree can be cut down to a chain: that round takes the chain call.
  EXPECT_EQ(target.tree_calls + target.chain_calls, treed.stats.target_calls);
  EXPECT_GE(target.tree_calls, treed.stats.target_calls - 2);
  EXPECT_EQ(treed.tokens.size(), 30u);
}

TEST(TreeDecoder, StatisticsPerDepthAndSiblingRankAddUp) {
  const ScriptedPair pair = make_pair(1.0f);
  ScriptedPair::Draft<float> draft{&pair};
  CountingTreeTarget target{&pair};
  specdec::StrategyDecoder decoder(target, TreeProposer(draft, tree_cases()[0].options),
                                   StaticDraftLength{}, TreeVerifier{});
  specdec::GenerationConfig config;
  config.draft_length = 8;
  config.max_new_tokens = 200;
  const auto result = decoder.generate(kContext, config);
  const auto& stats = result.stats;
  const auto sum = [](const std::vector<std::size_t>& v) {
    return std::accumulate(v.begin(), v.end(), std::size_t{0});
  };
  EXPECT_EQ(sum(stats.drafted_at_rank), stats.drafted);
  EXPECT_EQ(sum(stats.accepted_at_rank), stats.accepted);
  EXPECT_EQ(sum(stats.accepted_at), stats.accepted);
  EXPECT_GT(stats.accepted_at_rank[1], 0u) << "second siblings are never accepted?";
  EXPECT_LE(stats.drafted_at[0], stats.rounds);
  EXPECT_EQ(stats.drafted_at[3], 0u) << "a 2x2x1 tree has 3 depths";
}

TEST(TreeDecoder, BatchedDraftDraftsOneDepthPerCallWithTheSameTokens) {
  const ScriptedPair pair = make_pair(0.9f);
  ScriptedPair::Draft<float> draft{&pair};
  BatchedDraft batched{&pair};
  CountingTreeTarget target{&pair};
  specdec::GenerationConfig config;
  config.draft_length = 14;
  config.max_new_tokens = 40;
  config.sampling = pair.params;
  config.seed = 3;
  const TreeOptions options{TreeShape::parse("2x2x2"), SiblingMode::without_replacement};
  specdec::StrategyDecoder one_by_one(target, TreeProposer(draft, options), StaticDraftLength{},
                                      TreeVerifier{});
  specdec::StrategyDecoder per_depth(target, TreeProposer(batched, options), StaticDraftLength{},
                                     TreeVerifier{});
  const auto expected = one_by_one.generate(kContext, config);
  const auto got = per_depth.generate(kContext, config);
  EXPECT_EQ(got.tokens, expected.tokens);  // the same rows, the same coins
  EXPECT_EQ(got.stats.draft_calls, batched.tree_calls);
  EXPECT_LE(got.stats.draft_calls, 3 * got.stats.rounds);  // one call per depth
  // Node by node: one call per node with children (1 + 2 + 4 for a whole tree).
  EXPECT_LE(expected.stats.draft_calls, 7 * expected.stats.rounds);
  EXPECT_LT(got.stats.draft_calls, expected.stats.draft_calls / 2);
}

// ---- the full float decoder against the target's exact law
// ---------------------------------------

constexpr std::size_t kRuns = 40'000;
constexpr double kMinPValue = 1e-4;

std::vector<double> target_three_token_law(const ScriptedPair& pair) {
  std::vector<double> law(kVocab * kVocab * kVocab, 0.0);
  for (const auto& [s, p] : specdec::testing::target_law(pair.target(), pair.params, kContext, 3)) {
    law[(static_cast<std::size_t>(s[0]) * kVocab + static_cast<std::size_t>(s[1])) * kVocab +
        static_cast<std::size_t>(s[2])] = p;
  }
  return law;
}

template <class Verifier>
std::vector<std::uint64_t> first_three_counts(const ScriptedPair& pair, const TreeOptions& options,
                                              Verifier verifier) {
  ScriptedPair::Draft<float> draft{&pair};
  CountingTreeTarget target{&pair};
  specdec::StrategyDecoder decoder(target, TreeProposer(draft, options), StaticDraftLength{},
                                   verifier);
  specdec::GenerationConfig config;
  config.draft_length = 8;
  config.max_new_tokens = 8;  // the first round drafts 7 nodes: the whole tree
  config.sampling = pair.params;
  std::vector<std::uint64_t> counts(kVocab * kVocab * kVocab, 0);
  for (std::size_t run = 0; run < kRuns; ++run) {
    config.seed = 5000 + run;
    const auto t = decoder.generate(kContext, config).tokens;
    ++counts[(static_cast<std::size_t>(t[0]) * kVocab + static_cast<std::size_t>(t[1])) * kVocab +
             static_cast<std::size_t>(t[2])];
  }
  return counts;
}

TEST(TreeDecoderStatistical, NoResidualUpdateMutantFailsTheSameTest) {
  const ScriptedPair pair = make_pair(1.0f);
  const auto counts = first_three_counts(
      pair, {TreeShape::parse("3x1"), SiblingMode::with_replacement},
      specdec_test::RestatedTreeVerifier{specdec_test::TreeMutation::no_residual_update});
  const auto fit = specdec::testing::chi_square_test(counts, target_three_token_law(pair));
  EXPECT_LT(fit.p_value, kMinPValue) << "the mutant passed: the test is blind";
}

TEST(TreeDecoderStatistical, FirstTokensFollowTheTarget) {
  for (const float temperature : {0.7f, 1.0f}) {
    const ScriptedPair pair = make_pair(temperature);
    const std::vector<double> law = target_three_token_law(pair);
    for (const TreeCase& tree_case : tree_cases()) {
      SCOPED_TRACE(tree_case.name + " T=" + std::to_string(temperature));
      const auto counts = first_three_counts(pair, tree_case.options, TreeVerifier{});
      const auto sequence_level =
          first_three_counts(pair, tree_case.options, specdec::TraversalVerifier{});
      const auto fit_sequence_level = specdec::testing::chi_square_test(sequence_level, law);
      EXPECT_EQ(fit_sequence_level.impossible, 0u);
      EXPECT_GT(fit_sequence_level.p_value, kMinPValue)
          << "TraversalVerifier: chi2 = " << fit_sequence_level.statistic;
      const auto fit = specdec::testing::chi_square_test(counts, law);
      EXPECT_EQ(fit.impossible, 0u);
      EXPECT_GT(fit.p_value, kMinPValue) << "chi2 = " << fit.statistic << " over " << fit.cells;
    }
  }
}

}  // namespace

// Tree drafts: TreeProposer (every sibling mode, fixed and dynamic shapes) verified by
// TreeVerifier (recursive rejection sampling) is exact, certified by exact enumeration of every
// coin (testing.hpp) for width <= 3, depth <= 3, T in {0.7, 1}, top-k / top-p / min-p and a
// logits processor; the mutants the rule guards against miss the bound by orders of magnitude;
// the decoder asks a target for a tree only when it can score one; greedy trees emit the tokens
// of plain greedy decoding; the full decoder's first tokens pass a chi-square test.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "specdec/specdec.hpp"
#include "specdec/testing.hpp"

#include "restated_tree_verifier.hpp"

namespace {

using specdec::SamplingParams;
using specdec::SiblingMode;
using specdec::StaticDraftLength;
using specdec::token_t;
using specdec::TreeOptions;
using specdec::TreeProposer;
using specdec::TreeShape;
using specdec::TreeVerifier;
using specdec::testing::ScriptedPair;
using specdec::testing::Sequence;
using specdec_test::ParentRowProposer;
using specdec_test::RestatedTreeVerifier;
using specdec_test::TreeMutation;

constexpr double kExactnessBound = 1e-9;
constexpr double kMutantMinError = 1e-4;

const char* name_of(SiblingMode mode) {
  switch (mode) {
    case SiblingMode::with_replacement:
      return "replace";
    case SiblingMode::without_replacement:
      return "distinct";
    case SiblingMode::top_k:
      return "top-k";
  }
  return "?";
}

struct ParamsCase {
  std::string name;
  SamplingParams params;
};

std::vector<ParamsCase> params_cases() {
  std::vector<ParamsCase> cases;
  auto add = [&](std::string name, float temperature, int top_k, float top_p, float min_p) {
    SamplingParams params;
    params.temperature = temperature;
    params.top_k = top_k;
    params.top_p = top_p;
    params.min_p = min_p;
    cases.push_back({std::move(name), params});
  };
  add("T=1", 1.0f, 0, 1.0f, 0.0f);
  add("T=0.7", 0.7f, 0, 1.0f, 0.0f);
  add("T=1,top_k=3", 1.0f, 3, 1.0f, 0.0f);
  add("T=0.7,top_p=0.8", 0.7f, 0, 0.8f, 0.0f);
  add("T=1,min_p=0.2", 1.0f, 0, 1.0f, 0.2f);
  SamplingParams processed;
  processed.temperature = 0.7f;
  processed.logits_processor = [](std::span<const token_t> context, std::span<float> logits) {
    const auto last = static_cast<std::size_t>(context.back());
    logits[last] -= 1.5f;
    if (context.size() % 2 == 1) {
      logits[(last + 2) % logits.size()] = -std::numeric_limits<float>::infinity();
    }
  };
  cases.push_back({"T=0.7+processor", processed});
  return cases;
}

ScriptedPair make_pair(std::size_t vocab, const SamplingParams& params, double noise = 0.9,
                       bool bans = false) {
  ScriptedPair pair;
  pair.target_model = {.salt = 11, .vocab = vocab, .scale = 2.0, .bans = bans};
  pair.perturbation = {.salt = 23, .vocab = vocab, .scale = 2.0, .bans = bans};
  pair.noise = noise;
  pair.params = params;
  return pair;
}

struct ShapeCase {
  std::string name;
  TreeShape shape;
};

// Width <= 3, depth <= 3, small enough to enumerate every coin with V = 4.
std::vector<ShapeCase> shape_cases() {
  return {{"3", TreeShape::parse("3")},         {"2x2", TreeShape::parse("2x2")},
          {"3x1", TreeShape::parse("3x1")},     {"1x3", TreeShape::parse("1x3")},
          {"2x1x1", TreeShape::parse("2x1x1")}, {"dynamic4", TreeShape::dynamic(4, 3)}};
}

constexpr SiblingMode kModes[] = {SiblingMode::with_replacement, SiblingMode::without_replacement,
                                  SiblingMode::top_k};

template <class VerifierT, class ProposerT>
double certify(const ProposerT& proposer, const VerifierT& verifier, const ScriptedPair& pair,
               const Sequence& context, std::size_t limit) {
  return specdec::testing::certify_round(proposer, StaticDraftLength{}, verifier, pair.target(),
                                         pair.params, context, limit)
      .total_variation;
}

TEST(TreeVerifier, ExactForEverySiblingModeShapeAndFilter) {
  // V = 3: distinct siblings of width 3 exhaust the support (and filters shrink it further).
  for (const ParamsCase& params_case : params_cases()) {
    const ScriptedPair pair = make_pair(3, params_case.params);
    auto draft = pair.draft();
    for (const ShapeCase& shape_case : shape_cases()) {
      for (const SiblingMode mode : kModes) {
        SCOPED_TRACE(params_case.name + " shape " + shape_case.name + " " + name_of(mode));
        const TreeProposer proposer(draft, TreeOptions{shape_case.shape, mode});
        EXPECT_LT(certify(proposer, TreeVerifier{}, pair, {1, 2}, 8), kExactnessBound);
      }
    }
  }
}

TEST(TreeVerifier, ExactWithFourTokensUnderFilters) {
  for (const ParamsCase& params_case : params_cases()) {
    if (params_case.name.find("top_k") == std::string::npos &&
        params_case.name.find("processor") == std::string::npos) {
      continue;
    }
    const ScriptedPair pair = make_pair(4, params_case.params);
    auto draft = pair.draft();
    for (const ShapeCase& shape_case : shape_cases()) {
      for (const SiblingMode mode : kModes) {
        SCOPED_TRACE(params_case.name + " shape " + shape_case.name + " " + name_of(mode));
        const TreeProposer proposer(draft, TreeOptions{shape_case.shape, mode});
        EXPECT_LT(certify(proposer, TreeVerifier{}, pair, {3}, 8), kExactnessBound);
      }
    }
  }
}

TEST(TreeVerifier, RestatedRuleIsExactAndAgreesOnExpectedAcceptance) {
  const ScriptedPair pair = make_pair(3, params_cases()[0].params);
  auto draft = pair.draft();
  for (const ShapeCase& shape_case : shape_cases()) {
    for (const SiblingMode mode : kModes) {
      const TreeProposer proposer(draft, TreeOptions{shape_case.shape, mode});
      const auto library = specdec::testing::certify_round(
          proposer, StaticDraftLength{}, TreeVerifier{}, pair.target(), pair.params, {1, 2}, 8);
      const auto restated =
          specdec::testing::certify_round(proposer, StaticDraftLength{}, RestatedTreeVerifier{},
                                          pair.target(), pair.params, {1, 2}, 8);
      EXPECT_LT(restated.total_variation, kExactnessBound) << shape_case.name << name_of(mode);
      EXPECT_NEAR(library.expected_accepted, restated.expected_accepted, 1e-12)
          << shape_case.name << " " << name_of(mode);
    }
  }
}

TEST(TreeVerifier, BannedTokensAndFarDraftsStayExact) {
  SamplingParams params;
  params.temperature = 1.0f;
  const ScriptedPair pair = make_pair(4, params, 1.8, /*bans=*/true);
  auto draft = pair.draft();
  for (const SiblingMode mode : kModes) {
    for (const ShapeCase& shape_case : shape_cases()) {
      const TreeProposer proposer(draft, TreeOptions{shape_case.shape, mode});
      EXPECT_LT(certify(proposer, TreeVerifier{}, pair, {2, 0}, 8), kExactnessBound)
          << shape_case.name << " " << name_of(mode);
    }
  }
}

// ---- sequence-level verification ---------------------------------------------------------------

TEST(TraversalVerifier, ExactEverywhereAndComparedWithRecursiveRejectionSampling) {
  std::size_t more = 0, equal = 0, fewer = 0;
  double worst_ratio = 10, best_ratio = 0;
  for (const ParamsCase& params_case : params_cases()) {
    const ScriptedPair pair = make_pair(3, params_case.params);
    auto draft = pair.draft();
    for (const ShapeCase& shape_case : shape_cases()) {
      for (const SiblingMode mode : kModes) {
        SCOPED_TRACE(params_case.name + " shape " + shape_case.name + " " + name_of(mode));
        const TreeProposer proposer(draft, TreeOptions{shape_case.shape, mode});
        const auto rrs = specdec::testing::certify_round(
            proposer, StaticDraftLength{}, TreeVerifier{}, pair.target(), pair.params, {1, 2}, 8);
        const auto traversal = specdec::testing::certify_round(
            proposer, StaticDraftLength{}, specdec::TraversalVerifier{}, pair.target(), pair.params,
            {1, 2}, 8);
        EXPECT_LT(traversal.total_variation, kExactnessBound);
        if (params_case.name == "T=1") {  // the rule restated with vectors agrees (slow)
          const auto restated = specdec::testing::certify_round(
              proposer, StaticDraftLength{}, specdec_test::RestatedTraversalVerifier{},
              pair.target(), pair.params, {1, 2}, 8);
          EXPECT_LT(restated.total_variation, kExactnessBound);
          EXPECT_NEAR(traversal.expected_accepted, restated.expected_accepted, 1e-12);
        }
        const double difference = traversal.expected_accepted - rrs.expected_accepted;
        (difference > 1e-12 ? more : difference < -1e-12 ? fewer : equal) += 1;
        const double ratio = traversal.expected_accepted / rrs.expected_accepted;
        worst_ratio = std::min(worst_ratio, ratio);
        best_ratio = std::max(best_ratio, ratio);
      }
    }
  }
  std::printf(
      "E[accepted], sequence-level vs recursive rejection sampling, %zu trees: more on %zu, "
      "equal on %zu, fewer on %zu; ratio %.5f .. %.5f\n",
      more + equal + fewer, more, equal, fewer, worst_ratio, best_ratio);
  EXPECT_GT(more, 5 * fewer);
  EXPECT_GT(worst_ratio, 0.999);
}

TEST(TraversalVerifier, IsBlockVerificationOnAChain) {
  for (const ParamsCase& params_case : params_cases()) {
    SCOPED_TRACE(params_case.name);
    const ScriptedPair pair = make_pair(4, params_case.params);
    auto draft = pair.draft();
    const specdec::ModelProposer proposer(draft);
    const auto block =
        specdec::testing::round_law(proposer, StaticDraftLength{}, specdec::BlockVerifier{},
                                    pair.target(), pair.params, {1, 2}, 3);
    const auto traversal =
        specdec::testing::round_law(proposer, StaticDraftLength{}, specdec::TraversalVerifier{},
                                    pair.target(), pair.params, {1, 2}, 3);
    EXPECT_LT(specdec::testing::max_abs_difference(block.chunks, traversal.chunks), 1e-12);
    EXPECT_NEAR(block.expected_accepted, traversal.expected_accepted, 1e-12);
  }
}

TEST(TraversalVerifier, ExactWithFourTokensUnderFiltersAndBans) {
  SamplingParams params;
  params.temperature = 1.0f;
  params.top_k = 3;
  const ScriptedPair pair = make_pair(4, params, 1.8, /*bans=*/true);
  auto draft = pair.draft();
  for (const SiblingMode mode : kModes) {
    for (const ShapeCase& shape_case : shape_cases()) {
      const TreeProposer proposer(draft, TreeOptions{shape_case.shape, mode});
      EXPECT_LT(certify(proposer, specdec::TraversalVerifier{}, pair, {2, 0}, 8), kExactnessBound)
          << shape_case.name << " " << name_of(mode);
    }
  }
}

// ---- mutants: each must miss the bound by orders of magnitude ----------------------------------

TEST(TreeVerifierMutants, NoResidualUpdateBetweenSiblingsFails) {
  SamplingParams params;
  params.temperature = 1.0f;
  const ScriptedPair pair = make_pair(4, params);
  auto draft = pair.draft();
  const TreeProposer proposer(draft,
                              TreeOptions{TreeShape::parse("3"), SiblingMode::with_replacement});
  EXPECT_GT(
      certify(proposer, RestatedTreeVerifier{TreeMutation::no_residual_update}, pair, {1, 2}, 3),
      kMutantMinError);
  EXPECT_LT(certify(proposer, RestatedTreeVerifier{}, pair, {1, 2}, 3), kExactnessBound);
}

TEST(TreeVerifierMutants, BonusFromTheParentsRowFails) {
  SamplingParams params;
  params.temperature = 0.7f;
  const ScriptedPair pair = make_pair(4, params);
  auto draft = pair.draft();
  const TreeProposer proposer(
      draft, TreeOptions{TreeShape::parse("2x1"), SiblingMode::without_replacement});
  EXPECT_GT(
      certify(proposer, RestatedTreeVerifier{TreeMutation::bonus_from_parent}, pair, {1, 2}, 4),
      kMutantMinError);
}

TEST(TreeVerifierMutants, DistinctSiblingsVerifiedAgainstTheOriginalQFail) {
  SamplingParams params;
  params.temperature = 1.0f;
  const ScriptedPair pair = make_pair(4, params);
  auto draft = pair.draft();
  using Inner = TreeProposer<ScriptedPair::Draft<double>>;
  const Inner inner(draft, TreeOptions{TreeShape::parse("3"), SiblingMode::without_replacement});
  const ParentRowProposer<Inner, ScriptedPair::Draft<double>> lying{inner, draft, {}, {}, {}};
  EXPECT_GT(certify(lying, TreeVerifier{}, pair, {1, 2}, 3), kMutantMinError);
  // The same report is the truth for i.i.d. siblings.
  const Inner iid(draft, TreeOptions{TreeShape::parse("3"), SiblingMode::with_replacement});
  const ParentRowProposer<Inner, ScriptedPair::Draft<double>> truthful{iid, draft, {}, {}, {}};
  EXPECT_LT(certify(truthful, TreeVerifier{}, pair, {1, 2}, 3), kExactnessBound);
}

TEST(TreeVerifierMutants, DeterministicSiblingsAcceptedWithPOverQFail) {
  SamplingParams params;
  params.temperature = 1.0f;
  const ScriptedPair pair = make_pair(4, params);
  auto draft = pair.draft();
  using Inner = TreeProposer<ScriptedPair::Draft<double>>;
  const Inner inner(draft, TreeOptions{TreeShape::parse("2"), SiblingMode::top_k});
  const ParentRowProposer<Inner, ScriptedPair::Draft<double>> lying{inner, draft, {}, {}, {}};
  EXPECT_GT(certify(lying, TreeVerifier{}, pair, {1, 2}, 2), kMutantMinError);
}

}  // namespace

// The tree seams as a careless user meets them: shapes whose widths or node counts overflow are
// rejected up front, naming the width or the count; an out-of-range SiblingMode is rejected
// like the other enums; a tree is drafted whole (GenerationConfig::draft_length does not cut
// it), or cut explicitly (TreeShape::max_nodes); the tree verifiers reject a q row that gives
// its own drafted token no probability (NaN, negative, all zero); and a verifier written from
// the public helpers (parent_of, ChildLinks, RunningResidual) is TreeVerifier, bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "specdec/specdec.hpp"
#include "specdec/testing.hpp"

namespace {

using specdec::SiblingMode;
using specdec::StaticDraftLength;
using specdec::token_t;
using specdec::TreeOptions;
using specdec::TreeProposer;
using specdec::TreeShape;
using specdec::testing::ScriptedPair;

constexpr std::size_t kVocab = 5;
const std::vector<token_t> kContext{1, 2};

template <class F>
void expect_invalid(F&& f, const std::vector<std::string>& needles) {
  try {
    f();
    ADD_FAILURE() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& error) {
    const std::string message = error.what();
    EXPECT_EQ(message.rfind("specdec: ", 0), 0u) << message;
    for (const std::string& needle : needles) {
      EXPECT_NE(message.find(needle), std::string::npos) << "'" << needle << "' in " << message;
    }
  }
}

ScriptedPair make_pair(float temperature) {
  ScriptedPair pair;
  pair.target_model = {.salt = 11, .vocab = kVocab, .scale = 2.0};
  pair.perturbation = {.salt = 12, .vocab = kVocab, .scale = 2.0};
  pair.noise = 1.0;
  pair.params.temperature = temperature;
  return pair;
}

// A tree target that records the largest tree it was asked to score.
struct RecordingTreeTarget {
  const ScriptedPair* pair;
  std::size_t most_nodes = 0;
  std::vector<float> rows{};

  std::vector<float> operator()(std::span<const token_t> context, std::size_t n) {
    const std::vector<double> values = pair->target_rows(context, n);
    return std::vector<float>(values.begin(), values.end());
  }
  std::span<const float> score_tree(std::span<const token_t> committed,
                                    std::span<const token_t> tokens,
                                    std::span<const std::int32_t> parents) {
    most_nodes = std::max(most_nodes, tokens.size());
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

// ---- shapes -------------------------------------------------------------------------------------

TEST(TreeShapeBounds, WidthsThatDoNotFitAreRejectedNamingTheWidth) {
  expect_invalid([] { (void)TreeShape::parse("4294967296"); }, {"width 4294967296", "4096"});
  expect_invalid([] { (void)TreeShape::parse("2x4294967297x1"); }, {"width 4294967297"});
  expect_invalid([] { (void)TreeShape::parse("18446744073709551615x18446744073709551615"); },
                 {"width 18446744073709551615"});
  expect_invalid([] { TreeShape::dynamic(8, (std::size_t{1} << 32) + 1).validate(); },
                 {"max_width = 4294967297"});
  TreeShape shape;
  shape.widths = {std::numeric_limits<std::size_t>::max(), 2};
  expect_invalid([&] { shape.validate(); }, {"width 18446744073709551615"});
  // Through the proposer too: nothing truncated into Proposal::max_children.
  const ScriptedPair pair = make_pair(1.0f);
  ScriptedPair::Draft<float> draft{&pair};
  expect_invalid(
      [&] {
        (void)TreeProposer(draft, TreeOptions{shape, SiblingMode::without_replacement});
      },
      {"width"});
}

TEST(TreeShapeBounds, NodeCountsThatDoNotFitAreRejectedNamingTheCount) {
  // Each width fits, the tree does not: 64 + 64^2 + 64^2 * 2 = 12352 nodes.
  expect_invalid([] { (void)TreeShape::parse("64x64x2"); }, {"12352 nodes", "at most 4096"});
  // Widths whose product wraps a size_t must not wrap to a small count.
  TreeShape deep;
  deep.widths.assign(70, 2);  // 2^71 - 2 nodes
  expect_invalid([&] { deep.validate(); }, {"more than", "4096 nodes"});
  expect_invalid([] { TreeShape::dynamic(5000).validate(); }, {"budget = 5000", "4096"});
  EXPECT_EQ(TreeShape::parse("4x2x2x1").nodes(), 44u);
  EXPECT_EQ(TreeShape::parse("64x63").nodes(), 64u + 64u * 63u);  // 4096: the largest
}

TEST(TreeShapeBounds, OutOfRangeSiblingModeIsRejectedLikeTheOtherEnums) {
  const ScriptedPair pair = make_pair(1.0f);
  ScriptedPair::Draft<float> draft{&pair};
  expect_invalid(
      [&] {
        (void)TreeProposer(draft,
                           TreeOptions{TreeShape::parse("2x1"), static_cast<SiblingMode>(7)});
      },
      {"siblings = 7", "expected a SiblingMode"});
}

// ---- node counts and draft_length ---------------------------------------------------------------

TEST(TreeNodeCount, AFixedTreeIsDraftedWholeWhateverDraftLengthSays) {
  const ScriptedPair pair = make_pair(0.0f);
  ScriptedPair::Draft<float> draft{&pair};
  RecordingTreeTarget target{&pair};
  specdec::GenerationConfig config;  // draft_length = 4, the default: a chain's K
  config.max_new_tokens = 60;
  config.sampling.temperature = 0;
  TreeProposer proposer(draft, TreeOptions{TreeShape::parse("2x2x1"), SiblingMode::top_k});
  EXPECT_EQ(proposer.round_limit(), 10u);
  specdec::StrategyDecoder decoder(target, proposer, StaticDraftLength{}, specdec::TreeVerifier{});
  const auto result = decoder.generate(kContext, config);
  EXPECT_EQ(target.most_nodes, 10u) << "a 2x2x1 tree has 10 nodes";
  EXPECT_EQ(result.tokens.size(), 60u);
}

TEST(TreeNodeCount, MaxNodesCutsATreeExplicitly) {
  const ScriptedPair pair = make_pair(1.0f);
  ScriptedPair::Draft<float> draft{&pair};
  RecordingTreeTarget target{&pair};
  TreeShape shape = TreeShape::parse("4x2x2x1");
  shape.max_nodes = 9;
  EXPECT_EQ(shape.nodes(), 9u);
  specdec::GenerationConfig config;
  config.max_new_tokens = 40;
  config.sampling = pair.params;
  specdec::StrategyDecoder decoder(
      target, TreeProposer(draft, TreeOptions{shape, SiblingMode::without_replacement}),
      StaticDraftLength{}, specdec::TraversalVerifier{});
  (void)decoder.generate(kContext, config);
  EXPECT_EQ(target.most_nodes, 9u);
  shape.max_nodes = 5000;
  expect_invalid([&] { shape.validate(); }, {"max_nodes = 5000", "4096"});
}

// Found by the fuzzer: a sampled generate() after greedy ones on the same proposer wrote q rows
// it had never sized (greedy rounds draft point masses and size none, yet raised the size the
// buffers were said to have).
TEST(TreeNodeCount, SampledAfterGreedyOnTheSameProposer) {
  const ScriptedPair pair = make_pair(1.0f);
  ScriptedPair::Draft<float> draft{&pair};
  RecordingTreeTarget target{&pair};
  specdec::StrategyDecoder decoder(
      target,
      TreeProposer(draft, TreeOptions{TreeShape::dynamic(6), SiblingMode::with_replacement}),
      StaticDraftLength{}, specdec::TreeVerifier{});
  specdec::GenerationConfig config;
  config.sampling = pair.params;
  config.max_new_tokens = 3;  // rounds of at most 2 nodes: q rows for 2
  EXPECT_EQ(decoder.generate(kContext, config).tokens.size(), 3u);
  config.sampling.temperature = 0;  // greedy rounds of 6 nodes: no q rows
  config.max_new_tokens = 20;
  EXPECT_EQ(decoder.generate(kContext, config).tokens.size(), 20u);
  config.sampling = pair.params;  // sampled rounds of 6 nodes: q rows for 6
  EXPECT_EQ(decoder.generate(kContext, config).tokens.size(), 20u);
}

// ---- q rows the verifiers read ------------------------------------------------------------------

enum class BadRow { nan, negative, zero };

// A user's tree proposer: two children of the root (tokens 0 and 1), sampled, with q rows that
// break the contract in the way `bad` says (and a positive finite normalizer, as checked).
class BadRowProposer {
 public:
  explicit BadRowProposer(BadRow bad) : bad_(bad) {}

  template <class Coins>
  specdec::Proposal<float> propose(specdec::DraftRequest& request, Coins& coins) {
    (void)coins;
    if (request.limit < 2) return {};
    const float value = bad_ == BadRow::nan        ? std::numeric_limits<float>::quiet_NaN()
                        : bad_ == BadRow::negative ? -1.0f
                                                   : 0.0f;
    q_.assign(2 * kVocab, value);
    specdec::Proposal<float> proposal;
    proposal.tokens = tokens_;
    proposal.parents = parents_;
    proposal.q_weights = specdec::LogitsRows<float>(q_, kVocab, kVocab);
    proposal.q_normalizers = normalizers_;
    return proposal;
  }

 private:
  BadRow bad_;
  std::vector<token_t> tokens_{0, 1};
  std::vector<std::int32_t> parents_{-1, -1};
  std::vector<float> q_;
  std::vector<float> normalizers_{1.0f, 1.0f};
};

template <class Verifier>
void expect_bad_rows_rejected(const char* name) {
  const ScriptedPair pair = make_pair(1.0f);
  for (const BadRow bad : {BadRow::nan, BadRow::negative, BadRow::zero}) {
    SCOPED_TRACE(std::string(name) + " row " + std::to_string(static_cast<int>(bad)));
    RecordingTreeTarget target{&pair};
    specdec::StrategyDecoder decoder(target, BadRowProposer(bad), StaticDraftLength{}, Verifier{});
    specdec::GenerationConfig config;
    config.max_new_tokens = 8;
    config.sampling = pair.params;
    for (std::uint64_t seed = 0; seed < 8; ++seed) {
      config.seed = seed;
      expect_invalid([&] { (void)decoder.generate(kContext, config); },
                     {"q row of node 0", "expected a probability in (0, 1]"});
    }
  }
}

TEST(TreeVerifierContract, QRowsThatGiveTheirTokenNoProbabilityAreRejected) {
  expect_bad_rows_rejected<specdec::TreeVerifier>("TreeVerifier");
  expect_bad_rows_rejected<specdec::TraversalVerifier>("TraversalVerifier");
}

// ---- a user's verifier from the public helpers --------------------------------------------------

// Recursive rejection sampling written as a user would, from specdec::ChildLinks (each node's
// children), specdec::parent_of and specdec::RunningResidual (the residual law of siblings).
class UserTreeVerifier {
 public:
  template <class Scalar, class Coins>
  specdec::VerifyResult verify(const specdec::Proposal<Scalar>& proposal,
                               specdec::TargetRows<Scalar>& target, Coins& coins) {
    links_.build(proposal);
    std::int32_t node = -1;
    std::size_t depth = 0;
    for (;;) {
      std::int32_t child = links_.first(node);
      const auto& p = target.distribution(static_cast<std::size_t>(node + 1));
      if (child < 0) {
        return {depth, coins.draw(specdec::DistributionLaw<Scalar>{p, target.scratch()}), true,
                node};
      }
      specdec::RunningResidual<Scalar> residual(p, target.scratch());
      std::int32_t accepted = -1;
      for (; child >= 0; child = links_.next(child)) {
        const auto c = static_cast<std::size_t>(child);
        EXPECT_EQ(specdec::parent_of(proposal, c), node);
        const double q_x = static_cast<double>(proposal.q(c, proposal.tokens[c]));
        const double p_x = residual.probability(proposal.tokens[c]);
        if (coins.accept(c, p_x >= q_x ? 1.0 : p_x / q_x)) {
          accepted = child;
          break;
        }
        residual.reject(proposal, c);
      }
      if (accepted < 0) return {depth, residual.draw(coins, target.scratch()), false, node};
      node = accepted;
      ++depth;
    }
  }

 private:
  specdec::ChildLinks links_;
};

TEST(TreeVerifierContract, AVerifierFromThePublicHelpersIsTreeVerifier) {
  const ScriptedPair pair = make_pair(1.0f);
  ScriptedPair::Draft<float> draft{&pair};
  RecordingTreeTarget target{&pair};
  const TreeOptions options{TreeShape::parse("3x2x1"), SiblingMode::without_replacement};
  specdec::StrategyDecoder builtin(target, TreeProposer(draft, options), StaticDraftLength{},
                                   specdec::TreeVerifier{});
  specdec::StrategyDecoder user(target, TreeProposer(draft, options), StaticDraftLength{},
                                UserTreeVerifier{});
  specdec::GenerationConfig config;
  config.max_new_tokens = 40;
  config.sampling = pair.params;
  for (std::uint64_t seed = 0; seed < 20; ++seed) {
    config.seed = seed;
    EXPECT_EQ(user.generate(kContext, config).tokens, builtin.generate(kContext, config).tokens);
  }
}

}  // namespace

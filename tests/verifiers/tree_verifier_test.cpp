// Tree drafts: TreeProposer (every sibling mode, fixed and dynamic shapes) verified by
// TreeVerifier (recursive rejection sampling) is exact, certified by exact enumeration of every
// coin (testing.hpp) for width <= 3, depth <= 3, T in {0.7, 1}, top-k / top-p / min-p and a
// logits processor; the mutants the rule guards against miss the bound by orders of magnitude;
// the decoder asks a target for a tree only when it can score one; greedy trees emit the tokens
// of plain greedy decoding; the full decoder's first tokens pass a chi-square test.
// TraversalVerifier (sequence-level) is certified the same way, and its exact expected accepted
// tokens are compared with TreeVerifier's on every enumerated tree and on 4200 trees of random
// laws and shapes: never below (the traversal rule alone is, on some of them).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "specdec/specdec.hpp"
#include "specdec/testing.hpp"

#include "../restated_tree_verifier.hpp"
#include "../sampling_cases.hpp"

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
using specdec_test::processed_case;
using specdec_test::RestatedTreeVerifier;
using specdec_test::sampling_case;
using specdec_test::SamplingCase;
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

std::vector<SamplingCase> params_cases() {
  return {sampling_case("T=1", 1.0f),
          sampling_case("T=0.7", 0.7f),
          sampling_case("T=1,top_k=3", 1.0f, 3),
          sampling_case("T=0.7,top_p=0.8", 0.7f, 0, 0.8f),
          sampling_case("T=1,min_p=0.2", 1.0f, 0, 1.0f, 0.2f),
          processed_case("T=0.7+processor", 0.7f, /*bans=*/true)};
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
  for (const SamplingCase& params_case : params_cases()) {
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
  for (const SamplingCase& params_case : params_cases()) {
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
  for (const SamplingCase& params_case : params_cases()) {
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
        EXPECT_GE(difference, -1e-12) << "sequence-level below recursive rejection sampling";
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
  EXPECT_EQ(fewer, 0u);
  EXPECT_GT(more, 10u);
}

TEST(TraversalVerifier, IsBlockVerificationOnAChain) {
  for (const SamplingCase& params_case : params_cases()) {
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

// ---- never below recursive rejection sampling: random laws and explicit shapes ------------------

// Random rows: the logits after a context are a hash of the whole context (every node of a tree
// sees its own row), uniform in [-scale, scale), rounded to float.
struct TableModel {
  std::uint64_t salt = 1;
  std::size_t vocab = 3;
  double scale = 2.0;

  std::vector<double> logits(std::span<const token_t> context) const {
    std::uint64_t h = specdec::testing::detail::mix(salt);
    for (const token_t t : context) {
      h = specdec::testing::detail::mix(h ^ static_cast<std::uint64_t>(t + 1));
    }
    h = specdec::testing::detail::mix(h ^ context.size());
    std::vector<double> row(vocab);
    for (std::size_t v = 0; v < vocab; ++v) {
      const double u = specdec::testing::detail::hash_unit(h, v, 0, 0, 0);
      row[v] = static_cast<double>(static_cast<float>(scale * (2.0 * u - 1.0)));
    }
    return row;
  }
};

struct TableDraft {
  TableModel model;
  std::vector<double> operator()(std::span<const token_t> context) const {
    return model.logits(context);
  }
};

struct TableTarget {
  TableModel model;
  std::vector<double> operator()(std::span<const token_t> context, std::size_t n) const {
    std::vector<double> rows;
    for (std::size_t i = 0; i < n; ++i) {
      const std::vector<double> row = model.logits(context.first(context.size() - n + 1 + i));
      rows.insert(rows.end(), row.begin(), row.end());
    }
    return rows;
  }
};

// Drafts an explicit tree (parents in topological order) with a draft model: node i's token
// from its parent's processed draft row, siblings i.i.d., without replacement or as the top-k;
// declares each node's actual number of children as its bound (the shape is fixed in advance).
template <class DraftFn>
struct ShapedProposer {
  DraftFn draft;
  std::vector<std::int32_t> shape;
  SiblingMode mode = SiblingMode::with_replacement;
  std::vector<token_t> tokens{};
  std::vector<double> weights{}, normalizers{}, probabilities{};
  std::vector<std::uint8_t> point_mass{};
  std::vector<std::uint32_t> bounds{};
  std::vector<double> filter_scratch{};

  template <class Coins>
  specdec::Proposal<double> propose(specdec::DraftRequest& request, Coins& coins) {
    const std::size_t n = shape.size();
    std::vector<token_t> committed(
        request.context.begin(),
        request.context.begin() + static_cast<std::ptrdiff_t>(request.committed));
    std::vector<double> row;
    std::size_t vocab = 0;
    tokens.assign(n, 0);
    point_mass.assign(n, mode == SiblingMode::top_k ? 1 : 0);
    probabilities.assign(n, 0.0);
    bounds.assign(n + 1, 0);
    for (std::size_t i = 0; i < n; ++i) bounds[static_cast<std::size_t>(shape[i] + 1)] += 1;
    std::vector<std::int32_t> path;
    for (std::size_t i = 0; i < n; ++i) {
      std::vector<token_t> context = committed;
      const std::size_t length = specdec::detail::path_to(
          specdec::Proposal<double>{.tokens = tokens, .parents = shape}, shape[i], path);
      for (std::size_t k = 0; k < length; ++k) {
        context.push_back(tokens[static_cast<std::size_t>(path[k])]);
      }
      const std::vector<double> logits = draft(std::span<const token_t>(context));
      vocab = logits.size();
      if (weights.size() != n * vocab) weights.assign(n * vocab, 0.0);
      normalizers.resize(n);
      const specdec::TokenDistribution<double> q =
          specdec::process_logits(std::span<const double>(logits), request.params, filter_scratch);
      const std::span<double> w(weights.data() + i * vocab, vocab);
      for (std::size_t v = 0; v < vocab; ++v) w[v] = q.probability(static_cast<token_t>(v));
      if (mode != SiblingMode::with_replacement) {  // earlier siblings' tokens are taken
        for (std::size_t j = 0; j < i; ++j) {
          if (shape[j] == shape[i]) w[static_cast<std::size_t>(tokens[j])] = 0.0;
        }
      }
      double total = 0;
      for (const double x : w) total += x;
      if (!(total > 0)) {  // distinct siblings took the whole support: the tree ends here
        tokens.resize(i);
        break;
      }
      normalizers[i] = total;
      if (mode == SiblingMode::top_k) {
        tokens[i] = static_cast<token_t>(std::max_element(w.begin(), w.end()) - w.begin());
      } else {
        tokens[i] = coins.draw(specdec::StoredWeightsLaw<double>{w, total});
      }
      probabilities[i] = w[static_cast<std::size_t>(tokens[i])] / total;
    }
    const std::size_t drafted = tokens.size();
    specdec::Proposal<double> proposal;
    proposal.tokens = tokens;
    proposal.parents = std::span<const std::int32_t>(shape).first(drafted);
    proposal.token_probabilities = std::span<const double>(probabilities).first(drafted);
    proposal.max_children = std::span<const std::uint32_t>(bounds).first(drafted + 1);
    if (mode == SiblingMode::top_k) {
      proposal.point_mass = std::span<const std::uint8_t>(point_mass).first(drafted);
    } else if (drafted > 0) {
      proposal.q_weights = specdec::LogitsRows<double>(
          std::span<const double>(weights).first(drafted * vocab), vocab);
      proposal.q_normalizers = std::span<const double>(normalizers).first(drafted);
    }
    return proposal;
  }
};

// Trees where a later sibling carries the deeper subtree: -1 -> 0 -> {1 (a leaf), 2 -> 3}, and
// its mirror; the plain traversal rule gives the first sibling the debt the deep one needed.
const std::vector<std::vector<std::int32_t>>& explicit_shapes() {
  static const std::vector<std::vector<std::int32_t>> shapes = {
      {-1, 0, 0, 2}, {-1, 0, 1, 0}, {-1, 0, 0, 0}, {-1, -1, 0, 1}, {-1, 0, 0, 1, 2}};
  return shapes;
}

struct Comparison {
  std::size_t trees = 0, more = 0, fewer = 0;
  double worst = 10, best = 0, worst_tv = 0;
  void add(const specdec::testing::RoundCertificate& rrs,
           const specdec::testing::RoundCertificate& sequence) {
    ++trees;
    const double difference = sequence.expected_accepted - rrs.expected_accepted;
    more += difference > 1e-12 ? 1 : 0;
    fewer += difference < -1e-12 ? 1 : 0;
    const double ratio = sequence.expected_accepted / rrs.expected_accepted;
    worst = std::min(worst, ratio);
    best = std::max(best, ratio);
    worst_tv = std::max(worst_tv, sequence.total_variation);
  }
};

SamplingParams random_params(std::uint64_t k) {
  SamplingParams params;
  params.temperature = k % 2 == 0 ? 1.0f : 0.7f;
  switch (k % 5) {
    case 1:
      params.top_k = 2;
      break;
    case 3:
      params.min_p = 0.15f;
      break;
    default:
      break;
  }
  return params;
}

TEST(TraversalVerifier, NeverBelowRecursiveRejectionSamplingOnRandomLaws) {
  // Random V in 2..5, random target and draft rows, fixed seeds; TreeProposer's fixed and
  // dynamic shapes and explicit shapes; every sibling mode. Exact, and never below RRS.
  const std::vector<ShapeCase> shapes = {
      {"3", TreeShape::parse("3")},          {"2x2", TreeShape::parse("2x2")},
      {"1x3", TreeShape::parse("1x3")},      {"2x1x1", TreeShape::parse("2x1x1")},
      {"1x2x1", TreeShape::parse("1x2x1")},  {"dynamic4", TreeShape::dynamic(4, 3)},
      {"dynamic5", TreeShape::dynamic(5, 2)}};
  Comparison library, paper;
  for (std::uint64_t k = 0; k < 200; ++k) {
    const std::size_t vocab = 2 + k % 4;
    const TableDraft draft{{.salt = 1000 + k, .vocab = vocab, .scale = 1.0 + 0.25 * (k % 9)}};
    const TableTarget target{{.salt = 2000 + k, .vocab = vocab, .scale = 1.0 + 0.5 * (k % 5)}};
    const SamplingParams params = random_params(k);
    const specdec::testing::Sequence context{static_cast<token_t>(k % vocab)};
    for (const SiblingMode mode : kModes) {
      SCOPED_TRACE("law " + std::to_string(k) + " " + name_of(mode));
      // The round limit is the tree's size: the certificate's horizon (limit + 1 tokens) stays
      // small enough to enumerate with V = 5.
      auto compare = [&](const auto& proposer, const std::string& shape, std::size_t nodes) {
        SCOPED_TRACE(shape);
        const auto rrs = specdec::testing::certify_round(
            proposer, StaticDraftLength{}, TreeVerifier{}, target, params, context, nodes);
        const auto sequence = specdec::testing::certify_round(proposer, StaticDraftLength{},
                                                              specdec::TraversalVerifier{}, target,
                                                              params, context, nodes);
        EXPECT_LT(sequence.total_variation, kExactnessBound);
        EXPECT_GE(sequence.expected_accepted, rrs.expected_accepted - 1e-12);
        library.add(rrs, sequence);
        const auto plain = specdec::testing::certify_round(
            proposer, StaticDraftLength{}, specdec_test::RestatedTraversalVerifier{false}, target,
            params, context, nodes);
        EXPECT_LT(plain.total_variation, kExactnessBound);
        paper.add(rrs, plain);
      };
      const std::size_t most_nodes = vocab >= 5 ? 3 : vocab == 4 ? 4 : 5;  // enumeration size
      for (const ShapeCase& shape_case : shapes) {
        const std::size_t nodes = shape_case.shape.nodes();
        if (nodes > most_nodes) continue;
        compare(TreeProposer(draft, TreeOptions{shape_case.shape, mode}), shape_case.name, nodes);
      }
      for (const auto& shape : explicit_shapes()) {
        if (shape.size() > most_nodes) continue;
        compare(ShapedProposer<TableDraft>{draft, shape, mode}, "explicit", shape.size());
      }
    }
  }
  std::printf(
      "random laws, %zu trees: sequence-level vs recursive rejection sampling more on %zu, fewer "
      "on %zu, ratio %.5f .. %.5f; the traversal rule alone fewer on %zu, ratio %.5f .. %.5f\n",
      library.trees, library.more, library.fewer, library.worst, library.best, paper.fewer,
      paper.worst, paper.best);
  EXPECT_EQ(library.fewer, 0u);
  EXPECT_GT(library.more, library.trees / 10);
  // Why the rule keeps branching nodes below weight 1 by their coin: without it, trees whose
  // later sibling has the deeper subtree accept fewer tokens than recursive rejection sampling.
  EXPECT_GT(paper.fewer, 0u);
}

// Declares one child fewer for node 0 than it has.
template <class DraftFn>
struct UnderDeclared {
  ShapedProposer<DraftFn> inner;
  template <class Coins>
  specdec::Proposal<double> propose(specdec::DraftRequest& request, Coins& coins) {
    specdec::Proposal<double> proposal = inner.propose(request, coins);
    inner.bounds[1] -= 1;
    return proposal;
  }
};

TEST(TraversalVerifier, DeclaredBoundsAreChecked) {
  SamplingParams params;
  params.temperature = 1.0f;
  const ScriptedPair pair = make_pair(3, params);
  auto draft = pair.draft();
  ShapedProposer<decltype(draft)> proposer{draft, {-1, 0, 0}, SiblingMode::with_replacement};
  EXPECT_THROW((void)certify(UnderDeclared<decltype(draft)>{proposer}, specdec::TraversalVerifier{},
                             pair, {1, 2}, 3),
               std::invalid_argument);
  EXPECT_LT(certify(proposer, specdec::TraversalVerifier{}, pair, {1, 2}, 3), kExactnessBound);
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

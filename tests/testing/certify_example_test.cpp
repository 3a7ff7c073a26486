// The README's "certify your own drafter" example, compiled and run: a user-written proposer
// (bigram prompt lookup: propose what followed the last earlier occurrence of the current token)
// certified exact with specdec/testing.hpp, for both built-in verifiers. The second test shows
// the harness catching the same proposer when it lies about q.
#include <gtest/gtest.h>

#include <cstdint>
#include <span>
#include <vector>

#include "specdec/specdec.hpp"
#include "specdec/testing.hpp"

namespace {

// --- README example begins ---
struct BigramLookup {  // deterministic, so every drafted token is a point mass
  std::vector<specdec::token_t> tokens;
  std::vector<std::uint8_t> point_mass;
  template <class Coins>
  specdec::Proposal<double> propose(specdec::DraftRequest& request, Coins&) {
    tokens.clear();
    auto& context = request.context;
    while (tokens.size() < request.limit &&
           request.draft_more({tokens.size(), request.limit, {}})) {
      std::size_t i = context.size() - 1;  // find the last earlier occurrence of context.back()
      while (i > 0 && context[i - 1] != context.back()) --i;
      if (i == 0) break;  // no match: propose nothing more
      tokens.push_back(context[i]);
      context.push_back(context[i]);
    }
    point_mass.assign(tokens.size(), 1);
    return {.tokens = tokens, .point_mass = point_mass};
  }
};

TEST(CertifyExample, BigramLookupIsExact) {
  specdec::testing::ScriptedPair pair;  // context-dependent toy target, V = 5
  for (float temperature : {0.0f, 0.7f, 1.0f}) {
    pair.params.temperature = temperature;
    for (const specdec::testing::Sequence& context :
         {specdec::testing::Sequence{1, 2, 1}, specdec::testing::Sequence{3, 0, 3, 0}}) {
      const auto token = specdec::testing::certify_round(
          BigramLookup{}, specdec::StaticDraftLength{}, specdec::TokenVerifier{}, pair.target(),
          pair.params, context, /*draft_length=*/3);
      const auto block = specdec::testing::certify_round(
          BigramLookup{}, specdec::StaticDraftLength{}, specdec::BlockVerifier{}, pair.target(),
          pair.params, context, 3);
      EXPECT_LT(token.total_variation, 1e-9);
      EXPECT_LT(block.total_variation, 1e-9);
    }
  }
}
// README shows this one.
TEST(CertifyExample, ReadmeSnippet) {
  specdec::testing::ScriptedPair pair;  // context-dependent toy target, V = 5
  pair.params.temperature = 0.7f;
  const auto cert = specdec::testing::certify_round(BigramLookup{}, specdec::StaticDraftLength{},
                                                    specdec::BlockVerifier{}, pair.target(),
                                                    pair.params, /*context=*/{1, 2, 1}, /*K=*/3);
  EXPECT_LT(cert.total_variation, 1e-9);  // a proposer that misreported q would fail here
}
// --- README example ends ---

// The same lookup, but claiming it sampled from a uniform q: the verifier then accepts with
// min(1, p / (1/V)) and the output is no longer the target's. The harness must say so.
struct LyingLookup : BigramLookup {
  std::vector<double> weights;
  std::vector<double> normalizers;
  template <class Coins>
  specdec::Proposal<double> propose(specdec::DraftRequest& request, Coins& coins) {
    specdec::Proposal<double> proposal = BigramLookup::propose(request, coins);
    const std::size_t vocab = 5;
    weights.assign(proposal.size() * vocab, 1.0);
    normalizers.assign(proposal.size(), static_cast<double>(vocab));
    proposal.point_mass = {};
    proposal.q_weights = specdec::LogitsRows<double>(weights, vocab);
    proposal.q_normalizers = normalizers;
    return proposal;
  }
};

TEST(CertifyExample, CatchesAProposerThatMisreportsQ) {
  specdec::testing::ScriptedPair pair;
  pair.params.temperature = 1.0f;
  const auto cert = specdec::testing::certify_round(LyingLookup{}, specdec::StaticDraftLength{},
                                                    specdec::TokenVerifier{}, pair.target(),
                                                    pair.params, {1, 2, 1}, 3);
  EXPECT_GT(cert.total_variation, 1e-3);
}

}  // namespace

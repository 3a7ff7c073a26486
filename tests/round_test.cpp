// One round (round.hpp): the decoder and the certification harness run the same function, so
// the law the harness enumerates is the law of the decoder's own rounds. These tests would fail
// if the two drifted apart:
//  - greedy: from every context tried, the decoder's first chunk is the one chunk of the
//    enumerated round (token for token);
//  - sampled: over 40,000 seeds the decoder's first chunk never falls outside the enumerated
//    support, and its frequencies pass Pearson's chi-square against the enumerated law
//    (p > 1e-4, fixed seeds) for chains (token and block verification) and trees (both tree
//    verifiers). A round that differed by 0.02 in total variation would fail: the power check
//    below shows a one-token shift of the bonus is caught.
//  - errors: a verdict beyond the proposal is the same std::invalid_argument in both.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "specdec/specdec.hpp"
#include "specdec/testing.hpp"

namespace {

using specdec::SamplingParams;
using specdec::StaticDraftLength;
using specdec::token_t;
using specdec::testing::RoundLaw;
using specdec::testing::ScriptedPair;
using specdec::testing::Sequence;

constexpr std::size_t kVocab = 5;
constexpr std::size_t kSeeds = 40000;
constexpr double kMinPValue = 1e-4;

ScriptedPair make_pair(float temperature, double quantum = 0.0) {
  ScriptedPair pair;
  pair.target_model = {.salt = 21, .vocab = kVocab, .scale = 2.0, .quantum = quantum};
  pair.perturbation = {.salt = 22, .vocab = kVocab, .scale = 2.0};
  pair.noise = 0.8;
  pair.params.temperature = temperature;
  return pair;
}

// The decoder's first chunk from `context` with a round limit of `k` (max_new_tokens = k + 1).
template <class Decoder>
Sequence first_chunk(Decoder& decoder, const Sequence& context, std::size_t k,
                     const SamplingParams& params, std::uint64_t seed) {
  specdec::GenerationConfig config;
  config.draft_length = k;
  config.max_new_tokens = k + 1;
  config.sampling = params;
  config.seed = seed;
  config.logprobs = false;
  Sequence chunk;
  (void)decoder.generate(context, config, [&](std::span<const token_t> tokens) {
    chunk.assign(tokens.begin(), tokens.end());
    return false;
  });
  return chunk;
}

// Chi-square of the decoder's first chunks against the enumerated law; fails on a chunk the
// law does not have.
template <class Decoder>
void expect_decoder_follows(const RoundLaw& law, Decoder& decoder, const Sequence& context,
                            std::size_t k, const SamplingParams& params) {
  std::map<Sequence, std::uint64_t> counts;
  for (std::uint64_t seed = 0; seed < kSeeds; ++seed) {
    ++counts[first_chunk(decoder, context, k, params, seed)];
  }
  std::vector<std::uint64_t> observed;
  std::vector<double> expected;
  for (const auto& [chunk, probability] : law.chunks) {
    observed.push_back(counts.count(chunk) ? counts.at(chunk) : 0);
    expected.push_back(probability);
  }
  for (const auto& [chunk, count] : counts) {
    EXPECT_TRUE(law.chunks.count(chunk)) << "the decoder emitted a chunk the enumerated round "
                                            "cannot emit ("
                                         << count << " times)";
  }
  const auto fit = specdec::testing::chi_square_test(observed, expected);
  EXPECT_GT(fit.p_value, kMinPValue)
      << "chi-square " << fit.statistic << " over " << fit.cells << " cells";
}

TEST(Round, GreedyDecoderChunkIsTheEnumeratedChunk) {
  const ScriptedPair pair = make_pair(0.0f, /*quantum=*/0.25);
  ScriptedPair::Draft<float> draft{&pair};
  ScriptedPair::Target<float> target{&pair};
  auto exact_draft = pair.draft();
  const specdec::ModelProposer proposer(exact_draft);
  specdec::StrategyDecoder decoder(target, specdec::ModelProposer(draft), StaticDraftLength{},
                                   specdec::TokenVerifier{});
  for (token_t a = 0; a < static_cast<token_t>(kVocab); ++a) {
    for (token_t b = 0; b < static_cast<token_t>(kVocab); ++b) {
      const Sequence context{a, b};
      for (const std::size_t k : {1u, 3u, 5u}) {
        const RoundLaw law =
            specdec::testing::round_law(proposer, StaticDraftLength{}, specdec::TokenVerifier{},
                                        pair.target(), pair.params, context, k);
        ASSERT_EQ(law.chunks.size(), 1u);
        EXPECT_EQ(first_chunk(decoder, context, k, pair.params, 0), law.chunks.begin()->first);
      }
    }
  }
}

TEST(Round, SampledChainDecoderFollowsTheEnumeratedRound) {
  const ScriptedPair pair = make_pair(1.0f);
  ScriptedPair::Draft<float> draft{&pair};
  ScriptedPair::Target<float> target{&pair};
  auto exact_draft = pair.draft();
  const specdec::ModelProposer proposer(exact_draft);
  const Sequence context{1, 3};
  {
    SCOPED_TRACE("token verifier, K = 3");
    const RoundLaw law =
        specdec::testing::round_law(proposer, StaticDraftLength{}, specdec::TokenVerifier{},
                                    pair.target(), pair.params, context, 3);
    specdec::StrategyDecoder decoder(target, specdec::ModelProposer(draft), StaticDraftLength{},
                                     specdec::TokenVerifier{});
    expect_decoder_follows(law, decoder, context, 3, pair.params);
  }
  {
    SCOPED_TRACE("block verifier, K = 2, top-p 0.9");
    SamplingParams params = pair.params;
    params.top_p = 0.9f;
    const RoundLaw law = specdec::testing::round_law(
        proposer, StaticDraftLength{}, specdec::BlockVerifier{}, pair.target(), params, context, 2);
    specdec::StrategyDecoder decoder(target, specdec::ModelProposer(draft), StaticDraftLength{},
                                     specdec::BlockVerifier{});
    expect_decoder_follows(law, decoder, context, 2, params);
  }
}

TEST(Round, SampledTreeDecoderFollowsTheEnumeratedRound) {
  const ScriptedPair pair = make_pair(0.8f);
  ScriptedPair::Draft<float> draft{&pair};
  ScriptedPair::Target<float> chain_target{&pair};
  specdec::PathwiseTreeTarget target(chain_target);
  const specdec::TreeOptions options{specdec::TreeShape::parse("2x1"),
                                     specdec::SiblingMode::without_replacement};
  auto exact_draft = pair.draft();
  const specdec::TreeProposer proposer(exact_draft, options);
  const Sequence context{2, 4};
  const std::size_t nodes = options.shape.nodes();
  {
    SCOPED_TRACE("TreeVerifier");
    const RoundLaw law =
        specdec::testing::round_law(proposer, StaticDraftLength{}, specdec::TreeVerifier{},
                                    pair.target(), pair.params, context, nodes);
    specdec::StrategyDecoder decoder(target, specdec::TreeProposer(draft, options),
                                     StaticDraftLength{}, specdec::TreeVerifier{});
    expect_decoder_follows(law, decoder, context, nodes, pair.params);
  }
  {
    SCOPED_TRACE("TraversalVerifier");
    const RoundLaw law =
        specdec::testing::round_law(proposer, StaticDraftLength{}, specdec::TraversalVerifier{},
                                    pair.target(), pair.params, context, nodes);
    specdec::StrategyDecoder decoder(target, specdec::TreeProposer(draft, options),
                                     StaticDraftLength{}, specdec::TraversalVerifier{});
    expect_decoder_follows(law, decoder, context, nodes, pair.params);
  }
}

// Power: a verifier whose bonus token is shifted by one (mod V) after a full acceptance: the
// same chi-square fails against the correct round's law.
struct ShiftedBonusVerifier {
  template <class Scalar, class Coins>
  specdec::VerifyResult verify(const specdec::Proposal<Scalar>& proposal,
                               specdec::TargetRows<Scalar>& target, Coins& coins) const {
    specdec::VerifyResult result = specdec::TokenVerifier{}.verify(proposal, target, coins);
    if (result.bonus) {
      result.next_token = static_cast<token_t>((result.next_token + 1) % kVocab);
    }
    return result;
  }
};

TEST(Round, ChiSquareCatchesADecoderThatDiffersFromTheRound) {
  const ScriptedPair pair = make_pair(1.0f);
  ScriptedPair::Draft<float> draft{&pair};
  ScriptedPair::Target<float> target{&pair};
  auto exact_draft = pair.draft();
  const specdec::ModelProposer proposer(exact_draft);
  const Sequence context{1, 3};
  const RoundLaw law =
      specdec::testing::round_law(proposer, StaticDraftLength{}, specdec::TokenVerifier{},
                                  pair.target(), pair.params, context, 2);
  specdec::StrategyDecoder decoder(target, specdec::ModelProposer(draft), StaticDraftLength{},
                                   ShiftedBonusVerifier{});
  std::map<Sequence, std::uint64_t> counts;
  for (std::uint64_t seed = 0; seed < kSeeds; ++seed) {
    ++counts[first_chunk(decoder, context, 2, pair.params, seed)];
  }
  std::vector<std::uint64_t> observed;
  std::vector<double> expected;
  for (const auto& [chunk, probability] : law.chunks) {
    observed.push_back(counts.count(chunk) ? counts.at(chunk) : 0);
    expected.push_back(probability);
  }
  EXPECT_LT(specdec::testing::chi_square_test(observed, expected).p_value, 1e-6);
}

// A verdict beyond the proposal: one check, one error type, in the decoder and the harness.
struct AcceptsOneTooMany {
  template <class Scalar, class Coins>
  specdec::VerifyResult verify(const specdec::Proposal<Scalar>& proposal,
                               specdec::TargetRows<Scalar>& target, Coins& coins) const {
    specdec::VerifyResult result = specdec::TokenVerifier{}.verify(proposal, target, coins);
    result.accepted = proposal.size() + 1;
    return result;
  }
};

TEST(Round, AVerdictBeyondTheProposalIsTheSameErrorInDecoderAndHarness) {
  const ScriptedPair pair = make_pair(1.0f);
  ScriptedPair::Draft<float> draft{&pair};
  ScriptedPair::Target<float> target{&pair};
  auto exact_draft = pair.draft();
  const specdec::ModelProposer proposer(exact_draft);
  const Sequence context{1, 3};
  std::string harness_message, decoder_message;
  try {
    (void)specdec::testing::round_law(proposer, StaticDraftLength{}, AcceptsOneTooMany{},
                                      pair.target(), pair.params, context, 2);
  } catch (const std::invalid_argument& error) {
    harness_message = error.what();
  }
  specdec::StrategyDecoder decoder(target, specdec::ModelProposer(draft), StaticDraftLength{},
                                   AcceptsOneTooMany{});
  try {
    (void)first_chunk(decoder, context, 2, pair.params, 7);
  } catch (const std::invalid_argument& error) {
    decoder_message = error.what();
  }
  EXPECT_NE(harness_message.find("verifier accepted 3 of 2 tokens"), std::string::npos)
      << harness_message;
  EXPECT_EQ(harness_message.substr(0, 40), decoder_message.substr(0, 40));
}

}  // namespace

// Code written against the flat header paths of earlier versions builds unchanged and
// warning-free (this target compiles with -Wall -Wextra -Wpedantic -Werror): every old path is a
// forwarding header (docs/design.md, "Layout"), and the names they declared are all reachable.
#include "specdec/block_verifier.hpp"
#include "specdec/call_costs.hpp"
#include "specdec/confidence_draft_length.hpp"
#include "specdec/configured_draft_length.hpp"
#include "specdec/decoder.hpp"
#include "specdec/fallback_proposer.hpp"
#include "specdec/goodput_draft_length.hpp"
#include "specdec/model_proposer.hpp"
#include "specdec/ngram_proposer.hpp"
#include "specdec/sampling.hpp"
#include "specdec/sampling_laws.hpp"
#include "specdec/schedule_draft_length.hpp"
#include "specdec/softmax.hpp"
#include "specdec/speedup.hpp"
#include "specdec/static_draft_length.hpp"
#include "specdec/testing.hpp"
#include "specdec/token_verifier.hpp"
#include "specdec/tree_proposer.hpp"
#include "specdec/tree_verifier.hpp"

#include <gtest/gtest.h>

#include <vector>

namespace {

using specdec::testing::ScriptedPair;

TEST(ForwardingHeaders, OldPathsDeclareTheSameNames) {
  ScriptedPair pair;
  pair.params.temperature = 0.0f;
  ScriptedPair::Draft<float> draft{&pair};
  ScriptedPair::Target<float> target{&pair};
  specdec::SpeculativeDecoder decoder(draft, target);
  specdec::AutoregressiveDecoder plain(target);
  specdec::GenerationConfig config;
  config.sampling = pair.params;
  config.max_new_tokens = 12;
  const std::vector<specdec::token_t> prompt{1, 2};
  EXPECT_EQ(decoder.generate(prompt, config).tokens, plain.generate(prompt, config).tokens);

  [[maybe_unused]] specdec::StrategyDecoder tree(
      target,
      specdec::TreeProposer(draft, {specdec::TreeShape::parse("2x1"), specdec::SiblingMode::top_k}),
      specdec::ScheduleDraftLength{}, specdec::TraversalVerifier{});
  [[maybe_unused]] specdec::NgramProposer ngram;
  [[maybe_unused]] specdec::GoodputDraftLength goodput;
  [[maybe_unused]] specdec::ConfidenceDraftLength confidence;
  [[maybe_unused]] specdec::BlockVerifier block;
  [[maybe_unused]] specdec::TreeVerifier tree_verifier;
  [[maybe_unused]] specdec::ConfiguredDraftLength configured;
  [[maybe_unused]] specdec::StaticDraftLength fixed;
  const std::vector<float> logits{0.5f, 1.5f, -1.0f};
  EXPECT_EQ(specdec::argmax(std::span<const float>(logits)), 1);
}

}  // namespace

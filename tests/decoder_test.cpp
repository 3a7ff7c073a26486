// Smoke tests of SpeculativeDecoder / AutoregressiveDecoder end to end with tiny models.
#include "specdec/decoder.hpp"

#include <gtest/gtest.h>

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "specdec/specdec.hpp"

namespace {

using specdec::token_t;

constexpr std::size_t kVocab = 8;

// Deterministic "model": logits depend on the last token and the context length.
std::vector<float> toy_logits(std::span<const token_t> context, float sharpness) {
  std::vector<float> logits(kVocab);
  const auto last = static_cast<std::size_t>(context.back());
  for (std::size_t v = 0; v < kVocab; ++v) {
    const double phase = static_cast<double>((last * 3 + v * 5 + context.size()) % kVocab);
    logits[v] = static_cast<float>(sharpness * std::cos(phase));
  }
  return logits;
}

struct ToyTarget {
  int calls = 0;
  std::vector<float> buffer;
  std::span<const float> operator()(std::span<const token_t> context, std::size_t n) {
    ++calls;
    buffer.clear();
    for (std::size_t i = 0; i < n; ++i) {
      const auto row = toy_logits(context.first(context.size() - n + 1 + i), 2.0f);
      buffer.insert(buffer.end(), row.begin(), row.end());
    }
    return buffer;
  }
};

struct ToyDraft {
  std::vector<float> operator()(std::span<const token_t> context) const {
    return toy_logits(context, 1.5f);
  }
};

TEST(DecoderTest, GeneratesExactlyTheBudget) {
  ToyDraft draft;
  ToyTarget target;
  specdec::SpeculativeDecoder decoder(draft, target);
  specdec::GenerationConfig config;
  config.max_new_tokens = 37;
  config.draft_length = 4;
  const std::vector<token_t> prompt{1, 2};
  const auto result = decoder.generate(prompt, config);
  EXPECT_EQ(result.tokens.size(), 37u);
  EXPECT_EQ(result.logprobs.size(), 37u);
  EXPECT_EQ(result.finish_reason, specdec::FinishReason::length);
  EXPECT_EQ(result.stats.emitted, 37u);
  EXPECT_EQ(result.stats.target_calls, result.stats.rounds);
  EXPECT_EQ(result.stats.draft_calls, result.stats.drafted);
  EXPECT_LE(result.stats.accepted, result.stats.drafted);
  for (token_t t : result.tokens) {
    EXPECT_GE(t, 0);
    EXPECT_LT(t, static_cast<token_t>(kVocab));
  }
  for (float lp : result.logprobs) EXPECT_LE(lp, 0.0f);
}

TEST(DecoderTest, SameSeedSameTokens) {
  ToyDraft draft;
  ToyTarget target;
  specdec::SpeculativeDecoder decoder(draft, target);
  specdec::GenerationConfig config;
  config.max_new_tokens = 50;
  config.seed = 1234;
  const std::vector<token_t> prompt{3};
  const auto first = decoder.generate(prompt, config);
  const auto second = decoder.generate(prompt, config);
  EXPECT_EQ(first.tokens, second.tokens);
  config.seed = 99;
  const auto third = decoder.generate(prompt, config);
  EXPECT_NE(first.tokens, third.tokens);
}

TEST(DecoderTest, GreedyEqualsAutoregressiveGreedy) {
  ToyDraft draft;
  ToyTarget target;
  specdec::SpeculativeDecoder speculative(draft, target);
  specdec::AutoregressiveDecoder plain(target);
  specdec::GenerationConfig config;
  config.sampling.temperature = 0.0f;
  config.max_new_tokens = 40;
  config.draft_length = 3;
  const std::vector<token_t> prompt{5, 1};
  const auto fast = speculative.generate(prompt, config);
  const auto slow = plain.generate(prompt, config);
  EXPECT_EQ(fast.tokens, slow.tokens);
  ASSERT_EQ(fast.logprobs.size(), slow.logprobs.size());
  for (std::size_t i = 0; i < fast.logprobs.size(); ++i) {
    EXPECT_NEAR(fast.logprobs[i], slow.logprobs[i], 1e-5f);
  }
}

// A proposer may return tokens that view the context itself: the tokens it appended to
// request.context, or a stretch of the committed text (the continuation of an earlier
// occurrence). The decoder copies them out before it rewrites the context.
struct ContextViewingProposer {
  bool view_appended = true;
  std::vector<std::uint8_t> point_mass;
  template <class Coins>
  specdec::Proposal<float> propose(specdec::DraftRequest& request, Coins&) {
    const std::size_t n = std::min<std::size_t>({3, request.limit, request.committed});
    for (std::size_t i = 0; i < n; ++i) request.context.push_back(request.context[i]);
    point_mass.assign(n, 1);
    const token_t* first =
        view_appended ? request.context.data() + request.committed : request.context.data();
    return {.tokens = std::span<const token_t>(first, n), .point_mass = point_mass};
  }
};

TEST(DecoderTest, DraftedTokensMayViewTheContext) {
  for (const bool view_appended : {true, false}) {
    ToyTarget target;
    specdec::StrategyDecoder decoder(target, ContextViewingProposer{view_appended, {}},
                                     specdec::StaticDraftLength{}, specdec::TokenVerifier{});
    specdec::AutoregressiveDecoder plain(target);
    specdec::GenerationConfig config;
    config.sampling.temperature = 0.0f;
    config.max_new_tokens = 40;
    config.draft_length = 3;
    const std::vector<token_t> prompt{5, 1, 5, 1, 5};
    const auto fast = decoder.generate(prompt, config);
    EXPECT_EQ(fast.tokens, plain.generate(prompt, config).tokens) << view_appended;
    EXPECT_GT(fast.stats.drafted, 0u);
  }
}

TEST(DecoderTest, StopTokenEndsGenerationAndIsIncluded) {
  ToyDraft draft;
  ToyTarget target;
  specdec::SpeculativeDecoder decoder(draft, target);
  specdec::GenerationConfig config;
  config.max_new_tokens = 200;
  config.seed = 7;
  const std::vector<token_t> prompt{2};
  const auto free_run = decoder.generate(prompt, config);
  ASSERT_GE(free_run.tokens.size(), 10u);
  const token_t stop = free_run.tokens[9];
  config.stop_tokens = {stop};
  const auto stopped = decoder.generate(prompt, config);
  ASSERT_FALSE(stopped.tokens.empty());
  EXPECT_EQ(stopped.tokens.back(), stop);
  EXPECT_EQ(stopped.finish_reason, specdec::FinishReason::stop_token);
  for (std::size_t i = 0; i + 1 < stopped.tokens.size(); ++i) EXPECT_NE(stopped.tokens[i], stop);
}

TEST(DecoderTest, CallbackSeesEveryTokenAndCanStop) {
  ToyDraft draft;
  ToyTarget target;
  specdec::SpeculativeDecoder decoder(draft, target);
  specdec::GenerationConfig config;
  config.max_new_tokens = 30;
  const std::vector<token_t> prompt{4};
  std::vector<token_t> streamed;
  const auto result = decoder.generate(prompt, config, [&](std::span<const token_t> chunk) {
    streamed.insert(streamed.end(), chunk.begin(), chunk.end());
    return true;
  });
  EXPECT_EQ(streamed, result.tokens);

  int chunks = 0;
  const auto early =
      decoder.generate(prompt, config, [&](std::span<const token_t>) { return ++chunks < 2; });
  EXPECT_EQ(early.finish_reason, specdec::FinishReason::callback);
  EXPECT_EQ(early.stats.rounds, 2u);
}

TEST(DecoderTest, ZeroBudgetReturnsNothingWithoutCallingModels) {
  ToyDraft draft;
  ToyTarget target;
  specdec::SpeculativeDecoder decoder(draft, target);
  specdec::GenerationConfig config;
  config.max_new_tokens = 0;
  const std::vector<token_t> prompt{1};
  const auto result = decoder.generate(prompt, config);
  EXPECT_TRUE(result.tokens.empty());
  EXPECT_EQ(result.finish_reason, specdec::FinishReason::length);
  EXPECT_EQ(target.calls, 0);
}

TEST(DecoderTest, RejectsEmptyPromptAndZeroDraftLength) {
  ToyDraft draft;
  ToyTarget target;
  specdec::SpeculativeDecoder decoder(draft, target);
  specdec::GenerationConfig config;
  EXPECT_THROW((void)decoder.generate({}, config), std::invalid_argument);
  config.draft_length = 0;
  const std::vector<token_t> prompt{1};
  EXPECT_THROW((void)decoder.generate(prompt, config), std::invalid_argument);
}

TEST(DecoderTest, ThrowingModelLeavesDecoderUsable) {
  ToyDraft draft;
  ToyTarget inner;
  int calls = 0;
  auto target = [&](std::span<const token_t> context, std::size_t n) {
    if (++calls == 3) throw std::runtime_error("model failure");
    return inner(context, n);
  };
  specdec::SpeculativeDecoder decoder(draft, target);
  specdec::GenerationConfig config;
  config.max_new_tokens = 20;
  const std::vector<token_t> prompt{1};
  EXPECT_THROW((void)decoder.generate(prompt, config), std::runtime_error);
  const auto result = decoder.generate(prompt, config);
  EXPECT_EQ(result.tokens.size(), 20u);
  ToyTarget reference_target;
  specdec::SpeculativeDecoder reference(draft, reference_target);
  EXPECT_EQ(reference.generate(prompt, config).tokens, result.tokens);
}

TEST(DecoderTest, EigenReturnTypes) {
  auto draft = [](std::span<const token_t> context) {
    const auto row = toy_logits(context, 1.0f);
    return Eigen::VectorXf(Eigen::Map<const Eigen::VectorXf>(row.data(), kVocab));
  };
  using RowMajor = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  auto target = [](std::span<const token_t> context, std::size_t n) {
    RowMajor rows(static_cast<Eigen::Index>(n), static_cast<Eigen::Index>(kVocab));
    for (std::size_t i = 0; i < n; ++i) {
      const auto row = toy_logits(context.first(context.size() - n + 1 + i), 2.0f);
      for (std::size_t v = 0; v < kVocab; ++v) {
        rows(static_cast<Eigen::Index>(i), static_cast<Eigen::Index>(v)) = row[v];
      }
    }
    return rows;
  };
  specdec::SpeculativeDecoder decoder(draft, target);
  specdec::GenerationConfig config;
  config.max_new_tokens = 16;
  const std::vector<token_t> prompt{1};
  EXPECT_EQ(decoder.generate(prompt, config).tokens.size(), 16u);
}

TEST(DecoderTest, BudgetIsExactForEveryBudgetAndDraftLength) {
  ToyDraft draft;
  std::size_t max_rows = 0;
  ToyTarget inner;
  auto target = [&](std::span<const token_t> context, std::size_t n) {
    max_rows = std::max(max_rows, n);
    return inner(context, n);
  };
  specdec::SpeculativeDecoder decoder(draft, target);
  const std::vector<token_t> prompt{3, 1};
  for (std::size_t k = 1; k <= 6; ++k) {
    for (std::size_t budget = 1; budget <= 20; ++budget) {
      specdec::GenerationConfig config;
      config.draft_length = k;
      config.max_new_tokens = budget;
      config.seed = budget * 10 + k;
      max_rows = 0;
      const auto result = decoder.generate(prompt, config);
      ASSERT_EQ(result.tokens.size(), budget) << "K=" << k;
      EXPECT_LE(max_rows, std::min(k, budget - 1) + 1);
      EXPECT_EQ(result.stats.emitted, budget);
      EXPECT_EQ(result.stats.drafted_at.size(), std::min(k, budget - 1));
    }
  }
}

// The processor bans a token that depends on the context length, so a processor that saw the
// wrong context for some row would change the greedy output.
TEST(DecoderTest, LogitsProcessorSeesThePrecedingContextOfEachRow) {
  ToyDraft draft;
  ToyTarget target;
  ToyTarget baseline_target;
  specdec::SpeculativeDecoder speculative(draft, target);
  specdec::AutoregressiveDecoder plain(baseline_target);
  specdec::GenerationConfig config;
  config.sampling.temperature = 0.0f;
  config.max_new_tokens = 60;
  config.sampling.logits_processor = [](std::span<const token_t> context, std::span<float> row) {
    row[context.size() % row.size()] = -std::numeric_limits<float>::infinity();
    row[static_cast<std::size_t>(context.back())] -= 1.0f;
  };
  const std::vector<token_t> prompt{6, 2, 2};
  for (std::size_t k = 1; k <= 5; ++k) {
    config.draft_length = k;
    const auto fast = speculative.generate(prompt, config);
    const auto slow = plain.generate(prompt, config);
    EXPECT_EQ(fast.tokens, slow.tokens) << "K=" << k;
    for (std::size_t i = 0; i < fast.tokens.size(); ++i) {
      // The banned token of that position is never emitted.
      EXPECT_NE(static_cast<std::size_t>(fast.tokens[i]), (prompt.size() + i) % kVocab);
    }
  }
}

TEST(DecoderTest, BadModelOutputThrowsDomainErrorAndDecoderRecovers) {
  bool poison = true;
  auto draft = [&](std::span<const token_t> context) {
    auto row = toy_logits(context, 1.0f);
    if (poison) row[3] = std::numeric_limits<float>::quiet_NaN();
    return row;
  };
  ToyTarget target;
  specdec::SpeculativeDecoder decoder(draft, target);
  specdec::GenerationConfig config;
  config.max_new_tokens = 10;
  const std::vector<token_t> prompt{1};
  EXPECT_THROW((void)decoder.generate(prompt, config), std::domain_error);
  poison = false;
  EXPECT_EQ(decoder.generate(prompt, config).tokens.size(), 10u);

  auto short_target = [](std::span<const token_t> context, std::size_t n) {
    std::vector<float> rows;
    for (std::size_t i = 0; i < n; ++i) {
      const auto row = toy_logits(context.first(context.size() - n + 1 + i), 1.0f);
      rows.insert(rows.end(), row.begin(), row.end() - 1);  // V - 1 logits per row
    }
    return rows;
  };
  specdec::SpeculativeDecoder mismatched(draft, short_target);
  try {
    (void)mismatched.generate(prompt, config);
    FAIL() << "expected std::domain_error";
  } catch (const std::domain_error& error) {
    const std::string message = error.what();
    EXPECT_EQ(message.rfind("specdec: ", 0), 0u) << message;
    EXPECT_NE(message.find("vocabulary"), std::string::npos) << message;
  }
}

TEST(DecoderTest, AutoregressiveMatchesSpeculativeWhenEveryRoundIsAPlainStep) {
  // With max_new_tokens = 1 the speculative round has K_eff = 0: one coin, the bonus sampler.
  ToyDraft draft;
  ToyTarget target;
  specdec::SpeculativeDecoder speculative(draft, target);
  specdec::AutoregressiveDecoder plain(target);
  specdec::GenerationConfig config;
  config.max_new_tokens = 1;
  const std::vector<token_t> prompt{4, 4};
  for (std::uint64_t seed = 0; seed < 20; ++seed) {
    config.seed = seed;
    EXPECT_EQ(speculative.generate(prompt, config).tokens, plain.generate(prompt, config).tokens);
  }
}

TEST(DecoderTest, NeverDraftRoundsArePlainStepsWithoutDraftCalls) {
  // Every round one target row and no draft call; greedy, plain decoding's tokens; sampled, the
  // same tokens as AutoregressiveDecoder with the same seed (a round without drafts spends one
  // coin, on the bonus sampler, as a plain step does).
  ToyDraft draft;
  ToyTarget target;
  specdec::StrategyDecoder never(target, specdec::ModelProposer(draft), specdec::NeverDraft{},
                                 specdec::ConfiguredVerifier{});
  specdec::AutoregressiveDecoder plain(target);
  const std::vector<token_t> prompt{4, 4};
  for (const float temperature : {0.0f, 1.0f}) {
    specdec::GenerationConfig config;
    config.max_new_tokens = 30;
    config.sampling.temperature = temperature;
    config.seed = 7;
    const specdec::GenerationResult result = never.generate(prompt, config);
    EXPECT_EQ(result.tokens, plain.generate(prompt, config).tokens) << "T = " << temperature;
    EXPECT_EQ(result.stats.draft_calls, 0u);
    EXPECT_EQ(result.stats.drafted, 0u);
    EXPECT_EQ(result.stats.rounds, 30u);
    EXPECT_EQ(result.stats.target_calls, 30u);
  }
}

}  // namespace

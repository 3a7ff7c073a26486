// The decoding rules around the sampler: stop tokens (also inside an accepted run), the exact
// token budget (never exceeded, also for K > remaining budget), streaming callbacks, the empty
// prompt, exact statistics on scripted models, alpha_hat on a known geometric acceptance
// process, and seeding.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <set>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "specdec/decoder.hpp"
#include "specdec/rng.hpp"

namespace {

using specdec::FinishReason;
using specdec::token_t;

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Every model below throws once a context grows absurdly long: a decoder that overshoots its
// budget (or otherwise never terminates) then fails the test at once instead of hanging it.
constexpr std::size_t kRunawayContext = 10'000;

void guard_runaway(std::span<const token_t> context) {
  if (context.size() > kRunawayContext) {
    throw std::runtime_error("test model: context of " + std::to_string(context.size()) +
                             " tokens; the decoder is not terminating (budget overshoot?)");
  }
}

// ---- scripted models ------------------------------------------------------------------------
//
// The target is deterministic in every sampling mode: its row after a prefix of length L is
// one-hot on script(L) (logit 0, every other logit -inf), so p is a point mass. The draft is
// one-hot too and is right exactly at round positions < right_positions: it counts its calls
// since the last target call (a new round starts after every target call), and proposes
// script(L) + 1 (wrong) from that position on. A wrong draft x has p(x) = 0 (always
// rejected) and the residual max(0, p - q) is the point mass on script(L): every quantity is
// known in advance.

constexpr std::size_t kScriptVocab = 32;

// Distinct tokens for L = 0..31 (5 is coprime with 32), so a stop token occurs exactly once.
token_t script(std::size_t prefix_length) {
  return static_cast<token_t>((prefix_length * 5 + 1) % kScriptVocab);
}

std::vector<float> one_hot(token_t token) {
  std::vector<float> row(kScriptVocab, kNegInf);
  row[static_cast<std::size_t>(token)] = 0.0f;
  return row;
}

struct RoundTracker {
  std::size_t draft_calls_this_round = 0;
  std::size_t draft_calls = 0;
  std::size_t target_calls = 0;
  std::size_t max_draft_context = 0;
  std::size_t max_target_context = 0;
  std::size_t max_target_rows = 0;
};

struct ScriptedTarget {
  RoundTracker* tracker;
  std::vector<float> buffer;
  std::span<const float> operator()(std::span<const token_t> context, std::size_t n) {
    guard_runaway(context);
    tracker->draft_calls_this_round = 0;
    ++tracker->target_calls;
    tracker->max_target_context = std::max(tracker->max_target_context, context.size());
    tracker->max_target_rows = std::max(tracker->max_target_rows, n);
    buffer.clear();
    for (std::size_t i = 0; i < n; ++i) {
      const std::vector<float> row = one_hot(script(context.size() - n + 1 + i));
      buffer.insert(buffer.end(), row.begin(), row.end());
    }
    return buffer;
  }
};

struct ScriptedDraft {
  RoundTracker* tracker;
  std::size_t right_positions;
  std::vector<float> operator()(std::span<const token_t> context) {
    guard_runaway(context);
    const std::size_t position = tracker->draft_calls_this_round++;
    ++tracker->draft_calls;
    tracker->max_draft_context = std::max(tracker->max_draft_context, context.size());
    const token_t correct = script(context.size());
    const auto wrong = static_cast<token_t>((static_cast<std::size_t>(correct) + 1) % kScriptVocab);
    return one_hot(position < right_positions ? correct : wrong);
  }
};

constexpr std::size_t kAlwaysRight = std::numeric_limits<std::size_t>::max();

specdec::GenerationConfig make_config(std::size_t draft_length, std::size_t budget, bool greedy) {
  specdec::GenerationConfig config;
  config.draft_length = draft_length;
  config.max_new_tokens = budget;
  config.sampling.temperature = greedy ? 0.0f : 1.0f;
  return config;
}

std::vector<token_t> scripted_continuation(std::size_t prompt_length, std::size_t count) {
  std::vector<token_t> tokens;
  for (std::size_t i = 0; i < count; ++i) tokens.push_back(script(prompt_length + i));
  return tokens;
}

const std::vector<token_t> kPrompt{3, 1, 4};

// ---- stop tokens ------------------------------------------------------------------------------

TEST(StopTokenTest, StopInsideAnAcceptedRunEndsGenerationThere) {
  for (bool greedy : {true, false}) {
    RoundTracker tracker;
    ScriptedDraft draft{&tracker, kAlwaysRight};
    ScriptedTarget target{&tracker, {}};
    specdec::SpeculativeDecoder decoder(draft, target);
    specdec::GenerationConfig config = make_config(6, 50, greedy);
    const token_t stop = script(kPrompt.size() + 2);  // the third emitted token
    config.stop_tokens = {stop};
    std::vector<std::vector<token_t>> chunks;
    const auto result = decoder.generate(kPrompt, config, [&](std::span<const token_t> chunk) {
      chunks.emplace_back(chunk.begin(), chunk.end());
      return true;
    });
    // One round drafts 6 tokens, all accepted, plus a bonus: 7 candidates, cut after the 3rd.
    EXPECT_EQ(result.tokens, scripted_continuation(kPrompt.size(), 3)) << "greedy=" << greedy;
    EXPECT_EQ(result.tokens.back(), stop);
    EXPECT_EQ(result.finish_reason, FinishReason::stop_token);
    EXPECT_EQ(result.logprobs.size(), 3u);
    ASSERT_EQ(chunks.size(), 1u);
    EXPECT_EQ(chunks[0], result.tokens) << "tokens after the stop token reached the callback";
    EXPECT_EQ(result.stats.rounds, 1u);
    EXPECT_EQ(result.stats.emitted, 3u);
    EXPECT_EQ(result.stats.drafted, 6u);
    EXPECT_EQ(result.stats.accepted, 6u);  // documented: counts accepted tokens later dropped
    EXPECT_EQ(tracker.target_calls, 1u) << "generation continued after the stop token";
  }
}

// Every position of the stop token within a round (accepted draft, correction after a
// rejection, bonus), every K, both decoders, greedy and sampled.
TEST(StopTokenTest, StopAtAnyPositionIsTheLastEmittedToken) {
  for (bool greedy : {true, false}) {
    for (std::size_t right : {kAlwaysRight, std::size_t{0}, std::size_t{2}}) {
      for (std::size_t k = 1; k <= 8; ++k) {
        for (std::size_t position = 0; position < 12; ++position) {
          RoundTracker tracker;
          ScriptedDraft draft{&tracker, right};
          ScriptedTarget target{&tracker, {}};
          specdec::SpeculativeDecoder decoder(draft, target);
          specdec::GenerationConfig config = make_config(k, 40, greedy);
          // An unreachable stop token first: any listed token stops generation.
          // (Move-assigned: GCC 12 -Wnonnull misfires on initializer-list assign.)
          config.stop_tokens = std::vector<token_t>{static_cast<token_t>(kScriptVocab + 7),
                                                    script(kPrompt.size() + position)};
          std::vector<token_t> streamed;
          const auto result =
              decoder.generate(kPrompt, config, [&](std::span<const token_t> chunk) {
                streamed.insert(streamed.end(), chunk.begin(), chunk.end());
                return true;
              });
          const std::string label = "greedy=" + std::to_string(greedy) +
                                    " right=" + std::to_string(right == kAlwaysRight ? 99 : right) +
                                    " K=" + std::to_string(k) + " stop at " +
                                    std::to_string(position);
          EXPECT_EQ(result.tokens, scripted_continuation(kPrompt.size(), position + 1)) << label;
          EXPECT_EQ(result.finish_reason, FinishReason::stop_token) << label;
          EXPECT_EQ(streamed, result.tokens) << label;
          EXPECT_EQ(result.stats.emitted, result.tokens.size()) << label;
          EXPECT_EQ(result.logprobs.size(), result.tokens.size()) << label;
        }
      }
    }
  }
  // The baseline honours stop tokens the same way.
  RoundTracker tracker;
  ScriptedTarget target{&tracker, {}};
  specdec::AutoregressiveDecoder baseline(target);
  specdec::GenerationConfig config = make_config(1, 40, true);
  config.stop_tokens = {script(kPrompt.size() + 4)};
  const auto result = baseline.generate(kPrompt, config);
  EXPECT_EQ(result.tokens, scripted_continuation(kPrompt.size(), 5));
  EXPECT_EQ(result.finish_reason, FinishReason::stop_token);
}

// A stop token that is also the last token the budget allows: finish_reason = stop_token.
TEST(StopTokenTest, StopTokenOnTheLastBudgetedTokenReportsStop) {
  RoundTracker tracker;
  ScriptedDraft draft{&tracker, kAlwaysRight};
  ScriptedTarget target{&tracker, {}};
  specdec::SpeculativeDecoder decoder(draft, target);
  specdec::GenerationConfig config = make_config(4, 5, false);
  config.stop_tokens = {script(kPrompt.size() + 4)};
  const auto result = decoder.generate(kPrompt, config);
  EXPECT_EQ(result.tokens.size(), 5u);
  EXPECT_EQ(result.finish_reason, FinishReason::stop_token);
}

// ---- the budget -------------------------------------------------------------------------------

// A context-dependent stochastic model pair (V = 8) for rules that must hold in every run.
std::uint64_t mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

constexpr std::size_t kHashVocab = 8;

std::vector<float> hash_row(std::span<const token_t> context, std::uint64_t salt) {
  std::uint64_t h = mix(salt ^ context.size());
  for (std::size_t i = context.size() >= 2 ? context.size() - 2 : 0; i < context.size(); ++i) {
    h = mix(h ^ static_cast<std::uint64_t>(context[i]));
  }
  std::vector<float> row(kHashVocab);
  for (std::size_t v = 0; v < kHashVocab; ++v) {
    row[v] = static_cast<float>(static_cast<double>(mix(h + v) >> 11) * 0x1.0p-53 * 4.0 - 2.0);
  }
  return row;
}

struct HashTarget {
  RoundTracker* tracker;
  std::vector<float> buffer;
  std::span<const float> operator()(std::span<const token_t> context, std::size_t n) {
    guard_runaway(context);
    ++tracker->target_calls;
    tracker->max_target_context = std::max(tracker->max_target_context, context.size());
    tracker->max_target_rows = std::max(tracker->max_target_rows, n);
    buffer.clear();
    for (std::size_t i = 0; i < n; ++i) {
      const std::vector<float> row = hash_row(context.first(context.size() - n + 1 + i), 1);
      buffer.insert(buffer.end(), row.begin(), row.end());
    }
    return buffer;
  }
};

struct HashDraft {
  RoundTracker* tracker;
  std::vector<float> operator()(std::span<const token_t> context) {
    guard_runaway(context);
    ++tracker->draft_calls;
    tracker->max_draft_context = std::max(tracker->max_draft_context, context.size());
    std::vector<float> row = hash_row(context, 1);
    const std::vector<float> noise = hash_row(context, 2);
    for (std::size_t v = 0; v < kHashVocab; ++v) row[v] += 0.8f * noise[v];
    return row;
  }
};

TEST(BudgetTest, MaxNewTokensIsExactAndNeverExceeded) {
  const std::vector<token_t> prompt{1, 2, 3};
  for (bool greedy : {false, true}) {
    for (std::size_t budget = 1; budget <= 20; ++budget) {
      for (std::size_t k = 1; k <= 8; ++k) {
        for (std::uint64_t seed = 0; seed < 4; ++seed) {
          RoundTracker tracker;
          HashDraft draft{&tracker};
          HashTarget target{&tracker, {}};
          specdec::SpeculativeDecoder decoder(draft, target);
          specdec::GenerationConfig config = make_config(k, budget, greedy);
          config.seed = seed;
          const auto result = decoder.generate(prompt, config);
          const std::string label = "greedy=" + std::to_string(greedy) +
                                    " budget=" + std::to_string(budget) + " K=" + std::to_string(k);
          ASSERT_EQ(result.tokens.size(), budget) << label;
          EXPECT_EQ(result.logprobs.size(), budget) << label;
          EXPECT_EQ(result.finish_reason, FinishReason::length) << label;
          EXPECT_EQ(result.stats.emitted, budget) << label;
          // K_eff = min(K, remaining - 1): nothing is ever drafted or scored past the budget.
          // The last token never needs to be fed to a model.
          EXPECT_LE(tracker.max_target_context, prompt.size() + budget - 1) << label;
          if (tracker.draft_calls > 0) {
            EXPECT_LE(tracker.max_draft_context, prompt.size() + budget - 2) << label;
          }
          EXPECT_LE(tracker.max_target_rows, std::min(k, budget - 1) + 1) << label;
          EXPECT_LE(result.stats.accepted, result.stats.drafted) << label;
          EXPECT_LE(result.stats.acceptance_rate(), 1.0) << label;
          EXPECT_EQ(result.stats.draft_calls, tracker.draft_calls) << label;
          EXPECT_EQ(result.stats.target_calls, tracker.target_calls) << label;
          for (token_t t : result.tokens) {
            EXPECT_TRUE(t >= 0 && t < static_cast<token_t>(kHashVocab)) << label;
          }
        }
      }
    }
  }
}

TEST(BudgetTest, ZeroBudgetReturnsNothingWithoutCallingModels) {
  RoundTracker tracker;
  HashDraft draft{&tracker};
  HashTarget target{&tracker, {}};
  specdec::SpeculativeDecoder decoder(draft, target);
  const auto result = decoder.generate(std::vector<token_t>{1}, make_config(4, 0, false));
  EXPECT_TRUE(result.tokens.empty());
  EXPECT_EQ(result.finish_reason, FinishReason::length);
  EXPECT_EQ(tracker.draft_calls + tracker.target_calls, 0u);
}

// ---- streaming --------------------------------------------------------------------------------

TEST(StreamingTest, CallbackReceivesExactlyTheEmittedTokensInOrder) {
  for (std::size_t k : {1u, 3u, 8u}) {
    for (std::uint64_t seed = 0; seed < 20; ++seed) {
      RoundTracker tracker;
      HashDraft draft{&tracker};
      HashTarget target{&tracker, {}};
      specdec::SpeculativeDecoder decoder(draft, target);
      specdec::GenerationConfig config = make_config(k, 57, false);
      config.seed = seed;
      std::vector<token_t> streamed;
      std::size_t chunks = 0;
      const auto result =
          decoder.generate(std::vector<token_t>{4}, config, [&](std::span<const token_t> chunk) {
            EXPECT_FALSE(chunk.empty());
            EXPECT_LE(chunk.size(), k + 1);
            streamed.insert(streamed.end(), chunk.begin(), chunk.end());
            ++chunks;
            return true;
          });
      EXPECT_EQ(streamed, result.tokens) << "K=" << k << " seed " << seed;
      EXPECT_EQ(chunks, result.stats.rounds) << "one chunk per round";
      // Streaming does not change what is generated.
      EXPECT_EQ(decoder.generate(std::vector<token_t>{4}, config).tokens, result.tokens);
    }
  }
}

TEST(StreamingTest, CallbackCanStopGeneration) {
  for (std::size_t k : {1u, 2u, 5u}) {
    for (std::size_t stop_after : {1u, 4u, 9u}) {
      RoundTracker tracker;
      HashDraft draft{&tracker};
      HashTarget target{&tracker, {}};
      specdec::SpeculativeDecoder decoder(draft, target);
      specdec::GenerationConfig config = make_config(k, 100, false);
      config.seed = 77;
      std::vector<token_t> streamed;
      std::size_t calls_when_stopped = 0;
      bool stopped = false;
      const auto result =
          decoder.generate(std::vector<token_t>{4}, config, [&](std::span<const token_t> chunk) {
            EXPECT_FALSE(stopped) << "callback called after it returned false";
            streamed.insert(streamed.end(), chunk.begin(), chunk.end());
            if (streamed.size() >= stop_after) {
              stopped = true;
              calls_when_stopped = tracker.draft_calls + tracker.target_calls;
              return false;
            }
            return true;
          });
      EXPECT_TRUE(stopped);
      EXPECT_EQ(result.finish_reason, FinishReason::callback);
      EXPECT_EQ(result.tokens, streamed) << "the result must hold exactly what was streamed";
      EXPECT_EQ(tracker.draft_calls + tracker.target_calls, calls_when_stopped)
          << "models were called after the callback stopped generation";
      EXPECT_LT(result.tokens.size(), stop_after + k + 1);
    }
  }
}

TEST(StreamingTest, StoppingOnTheFinalChunkKeepsTheNaturalReason) {
  RoundTracker tracker;
  HashDraft draft{&tracker};
  HashTarget target{&tracker, {}};
  specdec::SpeculativeDecoder decoder(draft, target);
  const auto result = decoder.generate(std::vector<token_t>{4}, make_config(3, 1, false),
                                       [](std::span<const token_t>) { return false; });
  EXPECT_EQ(result.tokens.size(), 1u);
  EXPECT_EQ(result.finish_reason, FinishReason::length);
}

TEST(StreamingTest, AutoregressiveStreamsOneTokenPerChunkAndCanStop) {
  RoundTracker tracker;
  HashTarget target{&tracker, {}};
  specdec::AutoregressiveDecoder decoder(target);
  std::vector<token_t> streamed;
  const auto result = decoder.generate(
      std::vector<token_t>{4}, make_config(1, 30, false), [&](std::span<const token_t> chunk) {
        EXPECT_EQ(chunk.size(), 1u);
        streamed.insert(streamed.end(), chunk.begin(), chunk.end());
        return streamed.size() < 6;
      });
  EXPECT_EQ(streamed, result.tokens);
  EXPECT_EQ(result.tokens.size(), 6u);
  EXPECT_EQ(result.finish_reason, FinishReason::callback);
  EXPECT_EQ(tracker.target_calls, 6u);
}

// ---- empty prompt -----------------------------------------------------------------------------

TEST(EmptyPromptTest, IsRejectedWithInvalidArgumentAndTheDecoderStaysUsable) {
  RoundTracker tracker;
  HashDraft draft{&tracker};
  HashTarget target{&tracker, {}};
  specdec::SpeculativeDecoder decoder(draft, target);
  specdec::AutoregressiveDecoder baseline(target);
  const std::vector<token_t> empty;
  for (bool greedy : {false, true}) {
    const specdec::GenerationConfig config = make_config(4, 10, greedy);
    for (int which = 0; which < 2; ++which) {
      try {
        if (which == 0) {
          (void)decoder.generate(empty, config);
        } else {
          (void)baseline.generate(empty, config);
        }
        ADD_FAILURE() << "an empty prompt was accepted (decoder " << which << ")";
      } catch (const std::invalid_argument& error) {
        const std::string message = error.what();
        EXPECT_EQ(message.rfind("specdec: ", 0), 0u) << message;
        EXPECT_NE(message.find("prompt"), std::string::npos) << message;
      }
    }
  }
  EXPECT_EQ(tracker.draft_calls + tracker.target_calls, 0u) << "a model saw an empty context";
  // Still usable, and as good as new.
  specdec::GenerationConfig config = make_config(4, 10, false);
  config.seed = 5;
  RoundTracker fresh_tracker;
  HashDraft fresh_draft{&fresh_tracker};
  HashTarget fresh_target{&fresh_tracker, {}};
  specdec::SpeculativeDecoder fresh(fresh_draft, fresh_target);
  EXPECT_EQ(decoder.generate(std::vector<token_t>{1}, config).tokens,
            fresh.generate(std::vector<token_t>{1}, config).tokens);
}

// ---- exact statistics on scripted models ------------------------------------------------------

struct ExpectedStats {
  std::size_t rounds = 0, drafted = 0, accepted = 0, emitted = 0, rejecting_rounds = 0;
  std::vector<std::size_t> drafted_at, accepted_at;
};

// The round structure for a draft right at positions < right, written from the contract:
// K_eff = min(K, remaining - 1), accepted = min(right, K_eff), one correction or bonus token.
ExpectedStats simulate(std::size_t k, std::size_t budget, std::size_t right) {
  ExpectedStats s;
  // One entry per position a round can use: min(K, budget - 1).
  const std::size_t usable = budget == 0 ? 0 : std::min(k, budget - 1);
  s.drafted_at.assign(usable, 0);
  s.accepted_at.assign(usable, 0);
  while (s.emitted < budget) {
    const std::size_t round_length = std::min(k, budget - s.emitted - 1);
    const std::size_t accepted = std::min(right, round_length);
    ++s.rounds;
    s.drafted += round_length;
    s.accepted += accepted;
    if (accepted < round_length) ++s.rejecting_rounds;
    for (std::size_t j = 0; j < round_length; ++j) ++s.drafted_at[j];
    for (std::size_t j = 0; j < accepted; ++j) ++s.accepted_at[j];
    s.emitted += accepted + 1;
  }
  return s;
}

// Worked by hand: K = 4, budget 30, draft right at positions 0 and 1 only. Nine rounds draft 4,
// accept 2, correct 1 (3 tokens each); the tenth has remaining = 3, so K_eff = 2: both accepted
// plus the bonus.
TEST(StatisticsTest, RightAtPositionsZeroAndOneThenWrong) {
  for (bool greedy : {true, false}) {
    RoundTracker tracker;
    ScriptedDraft draft{&tracker, 2};
    ScriptedTarget target{&tracker, {}};
    specdec::SpeculativeDecoder decoder(draft, target);
    const auto result = decoder.generate(kPrompt, make_config(4, 30, greedy));
    const specdec::DecodeStats& s = result.stats;
    EXPECT_EQ(result.tokens, scripted_continuation(kPrompt.size(), 30));
    EXPECT_EQ(s.rounds, 10u);
    EXPECT_EQ(s.drafted, 38u);
    EXPECT_EQ(s.accepted, 20u);
    EXPECT_EQ(s.emitted, 30u);
    EXPECT_EQ(s.rejecting_rounds, 9u);
    EXPECT_EQ(s.draft_calls, 38u);
    EXPECT_EQ(s.target_calls, 10u);
    EXPECT_EQ(s.drafted_at, (std::vector<std::size_t>{10, 10, 9, 9}));
    EXPECT_EQ(s.accepted_at, (std::vector<std::size_t>{10, 10, 0, 0}));
    EXPECT_DOUBLE_EQ(s.tokens_per_round(), 3.0);
    EXPECT_DOUBLE_EQ(s.acceptance_rate(), 20.0 / 38.0);
    EXPECT_DOUBLE_EQ(s.alpha_hat(), 20.0 / 29.0);
  }
}

TEST(StatisticsTest, CountersMatchTheRoundStructureForEveryKBudgetAndDraft) {
  for (bool greedy : {true, false}) {
    for (std::size_t right :
         {std::size_t{0}, std::size_t{1}, std::size_t{2}, std::size_t{3}, kAlwaysRight}) {
      for (std::size_t k = 1; k <= 8; ++k) {
        for (std::size_t budget = 1; budget <= 25; ++budget) {
          RoundTracker tracker;
          ScriptedDraft draft{&tracker, right};
          ScriptedTarget target{&tracker, {}};
          specdec::SpeculativeDecoder decoder(draft, target);
          const auto result = decoder.generate(kPrompt, make_config(k, budget, greedy));
          const specdec::DecodeStats& s = result.stats;
          const ExpectedStats e = simulate(k, budget, right);
          const std::string label = "greedy=" + std::to_string(greedy) +
                                    " right=" + std::to_string(right == kAlwaysRight ? 99 : right) +
                                    " K=" + std::to_string(k) + " budget=" + std::to_string(budget);
          ASSERT_EQ(result.tokens, scripted_continuation(kPrompt.size(), budget)) << label;
          EXPECT_EQ(s.rounds, e.rounds) << label;
          EXPECT_EQ(s.drafted, e.drafted) << label;
          EXPECT_EQ(s.accepted, e.accepted) << label;
          EXPECT_EQ(s.emitted, e.emitted) << label;
          EXPECT_EQ(s.rejecting_rounds, e.rejecting_rounds) << label;
          EXPECT_EQ(s.draft_calls, e.drafted) << label;
          EXPECT_EQ(s.target_calls, e.rounds) << label;
          EXPECT_EQ(s.drafted_at, e.drafted_at) << label;
          EXPECT_EQ(s.accepted_at, e.accepted_at) << label;
          EXPECT_DOUBLE_EQ(s.tokens_per_round(),
                           static_cast<double>(e.emitted) / static_cast<double>(e.rounds))
              << label;
          const std::size_t trials = e.accepted + e.rejecting_rounds;
          EXPECT_DOUBLE_EQ(
              s.alpha_hat(),
              trials == 0 ? 0.0 : static_cast<double>(e.accepted) / static_cast<double>(trials))
              << label;
        }
      }
    }
  }
}

// ---- alpha_hat on a known geometric acceptance process ----------------------------------------
//
// Context-independent p and q: every drafted token is accepted independently with probability
// alpha = sum_x min(p(x), q(x)). Each evaluated draft is a Bernoulli(alpha) trial (accepted =
// success, a rejection = failure; drafts after a rejection are never evaluated), so alpha_hat =
// successes / trials has standard error sqrt(alpha (1 - alpha) / trials).

struct FixedRow {
  std::vector<float> logits;
  std::span<const float> operator()(std::span<const token_t> context) const {
    guard_runaway(context);
    return logits;
  }
};

struct FixedRows {
  std::vector<float> logits;
  std::vector<float> buffer;
  std::span<const float> operator()(std::span<const token_t> context, std::size_t n) {
    guard_runaway(context);
    buffer.clear();
    for (std::size_t i = 0; i < n; ++i) buffer.insert(buffer.end(), logits.begin(), logits.end());
    return buffer;
  }
};

std::vector<float> log_of(const std::vector<double>& probabilities) {
  std::vector<float> logits;
  for (double p : probabilities) logits.push_back(static_cast<float>(std::log(p)));
  return logits;
}

TEST(AlphaHatTest, IsWithinFourStandardErrorsOfTheTrueAcceptance) {
  struct Case {
    std::vector<double> p, q;
    std::size_t k;
  };
  const std::vector<Case> cases = {
      {{0.4, 0.3, 0.2, 0.1}, {0.1, 0.2, 0.3, 0.4}, 4},      // alpha = 0.6
      {{0.4, 0.3, 0.2, 0.1}, {0.35, 0.3, 0.2, 0.15}, 6},    // alpha = 0.95
      {{0.7, 0.1, 0.1, 0.1}, {0.05, 0.05, 0.1, 0.8}, 2},    // alpha = 0.3
      {{0.25, 0.25, 0.25, 0.25}, {0.5, 0.5, 0.0, 0.0}, 3},  // alpha = 0.5 (q has zeros)
  };
  for (const Case& c : cases) {
    double alpha = 0;
    for (std::size_t x = 0; x < c.p.size(); ++x) alpha += std::min(c.p[x], c.q[x]);
    FixedRow draft{log_of(c.q)};
    FixedRows target{log_of(c.p), {}};
    specdec::SpeculativeDecoder decoder(draft, target);
    specdec::GenerationConfig config = make_config(c.k, 97, false);
    std::size_t accepted = 0, rejecting = 0, first_drafted = 0, first_accepted = 0;
    for (std::uint64_t seed = 0; seed < 400; ++seed) {
      config.seed = seed;
      const specdec::DecodeStats s = decoder.generate(std::vector<token_t>{0}, config).stats;
      accepted += s.accepted;
      rejecting += s.rejecting_rounds;
      first_drafted += s.drafted_at[0];
      first_accepted += s.accepted_at[0];
    }
    const auto trials = static_cast<double>(accepted + rejecting);
    const double alpha_hat = static_cast<double>(accepted) / trials;
    const double standard_error = std::sqrt(alpha * (1 - alpha) / trials);
    EXPECT_NEAR(alpha_hat, alpha, 4 * standard_error) << "alpha=" << alpha << " K=" << c.k;
    // Position 0 is evaluated in every round that drafts: a plain binomial proportion.
    const double first = static_cast<double>(first_accepted) / static_cast<double>(first_drafted);
    EXPECT_NEAR(first, alpha,
                4 * std::sqrt(alpha * (1 - alpha) / static_cast<double>(first_drafted)))
        << "alpha=" << alpha << " K=" << c.k;
    std::printf("[ alpha ] true %.3f  alpha_hat %.4f +- %.4f (%zu trials), position 0: %.4f\n",
                alpha, alpha_hat, standard_error, accepted + rejecting, first);
  }
}

// ---- seeds ------------------------------------------------------------------------------------

TEST(SeedTest, SameSeedSameTokensDifferentSeedDifferentTokens) {
  RoundTracker tracker;
  HashDraft draft{&tracker};
  HashTarget target{&tracker, {}};
  specdec::SpeculativeDecoder decoder(draft, target);
  RoundTracker other_tracker;
  HashDraft other_draft{&other_tracker};
  HashTarget other_target{&other_tracker, {}};
  specdec::SpeculativeDecoder other_decoder(other_draft, other_target);
  specdec::AutoregressiveDecoder baseline(target);
  const std::vector<token_t> prompt{6, 2};
  std::set<std::vector<token_t>> distinct;
  std::set<std::vector<token_t>> distinct_baseline;
  for (std::uint64_t seed = 0; seed < 20; ++seed) {
    specdec::GenerationConfig config = make_config(3, 64, false);
    config.seed = seed * 1000003 + 17;
    const auto first = decoder.generate(prompt, config);
    const auto again = decoder.generate(prompt, config);            // same decoder, reused buffers
    const auto elsewhere = other_decoder.generate(prompt, config);  // a fresh decoder
    EXPECT_EQ(first.tokens, again.tokens) << "seed " << config.seed;
    EXPECT_EQ(first.logprobs, again.logprobs) << "seed " << config.seed;
    EXPECT_EQ(first.tokens, elsewhere.tokens) << "seed " << config.seed;
    distinct.insert(first.tokens);
    const auto base = baseline.generate(prompt, config);
    EXPECT_EQ(base.tokens, baseline.generate(prompt, config).tokens);
    distinct_baseline.insert(base.tokens);
  }
  // 64 tokens from V = 8 with spread-out probabilities: a collision between two of 20 seeds
  // would mean the seed is ignored.
  EXPECT_EQ(distinct.size(), 20u);
  EXPECT_EQ(distinct_baseline.size(), 20u);
}

}  // namespace

// Proves the context guarantee of the model contract (design.md, "Model contract") end to end: a
// KV-cached model served by SpeculativeDecoder through specdec::ContextCache does O(new tokens)
// forward work per round, independent of how long the context already is, and its rolled-back
// cache produces exactly the tokens a stateless model produces.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "specdec/specdec.hpp"

namespace {

using specdec::token_t;
constexpr std::size_t kVocab = 16;

// Logits after a position depend on the token there and the one before it. A cached model keeps
// one "hidden state" (the token pair) per computed position, like a KV cache keeps keys/values;
// `salt` makes the draft differ from the target so rounds see rejections and rollbacks.
float logit(token_t previous, token_t current, std::size_t v, std::uint32_t salt) {
  std::uint32_t h = static_cast<std::uint32_t>(previous) * 2654435761u ^
                    static_cast<std::uint32_t>(current) * 40503u ^
                    static_cast<std::uint32_t>(v) * 2246822519u ^ salt;
  h ^= h >> 15;
  h *= 2246822519u;
  h ^= h >> 13;
  return static_cast<float>(h % 1000u) / 250.0f;  // spread of 4 nats: a real, peaked-ish choice
}

class CachedModel {
 public:
  explicit CachedModel(std::uint32_t salt, std::size_t capacity) : salt_(salt), cache_(capacity) {
    states_.reserve(capacity);
    rows_.resize(capacity * kVocab);
  }

  std::span<const float> operator()(std::span<const token_t> context) { return run(context, 1); }
  std::span<const float> operator()(std::span<const token_t> context, std::size_t n) {
    return run(context, n);
  }

  std::size_t positions_computed = 0;

  /// Starts fresh: forgets every cached position (ContextCache::clear and the states).
  void reset() {
    cache_.clear();
    states_.clear();
  }

 private:
  std::span<const float> run(std::span<const token_t> context, std::size_t n) {
    const auto [keep, fresh] = cache_.update(context, n);
    states_.resize(keep);  // roll back: drop the states of rejected speculative tokens
    for (std::size_t i = keep; i < context.size(); ++i) {
      const token_t previous = i == 0 ? token_t{0} : context[i - 1];
      states_.push_back({previous, context[i]});
      ++positions_computed;
    }
    for (std::size_t r = 0; r < n; ++r) {  // row r follows position size - n + r
      const State s = states_[context.size() - n + r];
      for (std::size_t v = 0; v < kVocab; ++v)
        rows_[r * kVocab + v] = logit(s.first, s.second, v, salt_);
    }
    return {rows_.data(), n * kVocab};
  }

  struct State {
    token_t first, second;
  };
  std::uint32_t salt_;
  specdec::ContextCache cache_;
  std::vector<State> states_;
  std::vector<float> rows_;
};

// The same logits, recomputed from the context on every call: the reference for correctness.
struct StatelessModel {
  std::uint32_t salt;
  std::vector<float> rows = std::vector<float>(64 * kVocab);
  std::span<const float> operator()(std::span<const token_t> c) { return (*this)(c, 1); }
  std::span<const float> operator()(std::span<const token_t> c, std::size_t n) {
    for (std::size_t r = 0; r < n; ++r) {
      const std::size_t i = c.size() - n + r;
      for (std::size_t v = 0; v < kVocab; ++v)
        rows[r * kVocab + v] = logit(i == 0 ? token_t{0} : c[i - 1], c[i], v, salt);
    }
    return {rows.data(), n * kVocab};
  }
};

struct Work {
  std::vector<token_t> tokens;
  std::size_t draft_positions, target_positions, rounds, draft_calls;
};

Work generate(std::size_t prompt_length, float temperature, std::size_t k) {
  std::vector<token_t> prompt(prompt_length);
  for (std::size_t i = 0; i < prompt_length; ++i) prompt[i] = static_cast<token_t>(i * 7 % kVocab);
  prompt[prompt_length - 2] = 3;  // same last pair for every length: same logits after the prompt
  prompt[prompt_length - 1] = 9;
  const std::size_t capacity = prompt_length + 256;
  CachedModel draft(0x5eed, capacity), target(0, capacity);
  specdec::SpeculativeDecoder decoder(draft, target);
  specdec::GenerationConfig config;
  config.draft_length = k;
  config.max_new_tokens = 120;
  config.sampling.temperature = temperature;
  config.seed = 11;
  auto result = decoder.generate(prompt, config);
  return {result.tokens, draft.positions_computed - prompt_length,
          target.positions_computed - prompt_length, result.stats.rounds, result.stats.draft_calls};
}

class KvCacheWork : public ::testing::TestWithParam<float> {};

TEST_P(KvCacheWork, PerRoundWorkDoesNotGrowWithTheContext) {
  for (std::size_t k : {1u, 4u, 8u}) {
    const Work short_context = generate(8, GetParam(), k);
    const Work long_context = generate(2000, GetParam(), k);
    ASSERT_GT(short_context.rounds, 10u);
    // Beyond the prompt itself, a model computes only tokens that are new to its cache: each
    // draft call adds at most the tokens committed since its last call plus one; each target call
    // re-reads at most K_eff + 1 rows plus the committed correction. Neither depends on length.
    EXPECT_LE(short_context.target_positions, short_context.rounds * (k + 2)) << "K=" << k;
    EXPECT_LE(short_context.draft_positions, short_context.draft_calls + 2 * short_context.rounds)
        << "K=" << k;
    // Both prompts end in the same token pair, so both runs make the same rounds; the work
    // beyond the prompt must then be identical whether the context is 8 or 2000 tokens long.
    ASSERT_EQ(short_context.tokens, long_context.tokens) << "K=" << k;
    EXPECT_EQ(short_context.target_positions, long_context.target_positions) << "K=" << k;
    EXPECT_EQ(short_context.draft_positions, long_context.draft_positions) << "K=" << k;
    EXPECT_LE(long_context.target_positions, long_context.rounds * (k + 2)) << "K=" << k;
  }
}

TEST_P(KvCacheWork, RolledBackCacheGivesTheStatelessTokens) {
  for (std::size_t k : {1u, 3u, 8u}) {
    std::vector<token_t> prompt = {1, 2, 3, 4, 5};
    CachedModel draft(0x5eed, 512), target(0, 512);
    StatelessModel draft_ref{0x5eed}, target_ref{0};
    specdec::SpeculativeDecoder cached(draft, target);
    specdec::SpeculativeDecoder stateless(draft_ref, target_ref);
    specdec::GenerationConfig config;
    config.draft_length = k;
    config.max_new_tokens = 200;
    config.sampling.temperature = GetParam();
    config.seed = 5;
    const auto a = cached.generate(prompt, config);
    const auto b = stateless.generate(prompt, config);
    EXPECT_EQ(a.tokens, b.tokens) << "K=" << k;
    EXPECT_GT(a.stats.rejecting_rounds, 0u) << "the draft must be wrong sometimes, or no rollback "
                                               "was exercised";
  }
}

// A cached model shared by two decoders keeps its cache across generate() calls: the second
// decoder reuses the prompt the first one computed (correct prefix caching, and the output is
// the same), which makes it look cheaper in a speedup measurement. ContextCache::clear() (here
// through the model's reset()) starts it fresh, so each measured run pays for its prompt.
TEST_P(KvCacheWork, SharedCacheCarriesOverUntilCleared) {
  std::vector<token_t> prompt(40);
  for (std::size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<token_t>(i * 5 % kVocab);
  CachedModel draft(0x5eed, 1024), target(0, 1024);
  specdec::SpeculativeDecoder speculative(draft, target);
  specdec::AutoregressiveDecoder plain(target);
  specdec::GenerationConfig config;
  config.max_new_tokens = 30;
  config.sampling.temperature = GetParam();
  config.seed = 3;
  (void)speculative.generate(prompt, config);

  std::size_t before = target.positions_computed;
  const auto warm = plain.generate(prompt, config);
  const std::size_t warm_work = target.positions_computed - before;

  target.reset();
  before = target.positions_computed;
  const auto cold = plain.generate(prompt, config);
  const std::size_t cold_work = target.positions_computed - before;

  EXPECT_EQ(warm.tokens, cold.tokens);  // the carried-over cache is correct
  // Cold: the prompt plus one position per generated token but the last.
  EXPECT_EQ(cold_work, prompt.size() + config.max_new_tokens - 1);
  // Warm: the prompt's first 39 positions came from the other decoder's run.
  EXPECT_EQ(warm_work, cold_work - (prompt.size() - 1));
}

INSTANTIATE_TEST_SUITE_P(GreedyAndSampled, KvCacheWork, ::testing::Values(0.0f, 1.0f));

}  // namespace

// Tests for context_cache.hpp: the keep / new_tokens split and ContextCache's rollback.
#include "specdec/context_cache.hpp"

#include <gtest/gtest.h>

#include <stdexcept>
#include <vector>

namespace {

using specdec::token_t;
using Tokens = std::vector<token_t>;

TEST(ContextCacheTest, PlanKeepsLongestCommonPrefix) {
  const Tokens cached{1, 2, 3, 4, 5};
  const Tokens context{1, 2, 3, 9, 9, 9};
  const auto plan = specdec::plan_cache_update(cached, context, 1);
  EXPECT_EQ(plan.keep, 3u);
  EXPECT_EQ(Tokens(plan.new_tokens.begin(), plan.new_tokens.end()), (Tokens{9, 9, 9}));
}

TEST(ContextCacheTest, RowsNeededForceRecomputation) {
  // Everything is cached, but logits of the last 3 positions are requested.
  const Tokens cached{1, 2, 3, 4, 5};
  const Tokens context{1, 2, 3, 4, 5};
  const auto plan = specdec::plan_cache_update(cached, context, 3);
  EXPECT_EQ(plan.keep, 2u);
  EXPECT_EQ(plan.new_tokens.size(), 3u);
  EXPECT_EQ(plan.new_tokens.data(), context.data() + 2);
}

TEST(ContextCacheTest, EmptyCacheComputesEverything) {
  const Tokens context{7, 8};
  const auto plan = specdec::plan_cache_update({}, context, 1);
  EXPECT_EQ(plan.keep, 0u);
  EXPECT_EQ(plan.new_tokens.size(), 2u);
}

TEST(ContextCacheTest, ContextShorterThanCacheRollsBack) {
  const Tokens cached{1, 2, 3, 4, 5, 6};
  const Tokens context{1, 2, 3};
  const auto plan = specdec::plan_cache_update(cached, context, 1);
  EXPECT_EQ(plan.keep, 2u);
  EXPECT_EQ(Tokens(plan.new_tokens.begin(), plan.new_tokens.end()), (Tokens{3}));
}

TEST(ContextCacheTest, InvalidRowsNeededThrows) {
  const Tokens context{1, 2};
  EXPECT_THROW((void)specdec::plan_cache_update({}, context, 0), std::invalid_argument);
  EXPECT_THROW((void)specdec::plan_cache_update({}, context, 3), std::invalid_argument);
  try {
    (void)specdec::plan_cache_update({}, context, 3);
  } catch (const std::invalid_argument& error) {
    EXPECT_EQ(std::string(error.what()).rfind("specdec: ", 0), 0u);
  }
}

TEST(ContextCacheTest, SpeculativeRoundTrip) {
  specdec::ContextCache cache(64);
  // Prompt.
  auto plan = cache.update(Tokens{1, 2, 3}, 1);
  EXPECT_EQ(plan.keep, 0u);
  // Draft adds speculative tokens one by one: only the new one is computed.
  plan = cache.update(Tokens{1, 2, 3, 10}, 1);
  EXPECT_EQ(plan.keep, 3u);
  plan = cache.update(Tokens{1, 2, 3, 10, 11}, 1);
  EXPECT_EQ(plan.keep, 4u);
  // Rejection at 11: the next context replaces it; the cache rolls back to 4.
  plan = cache.update(Tokens{1, 2, 3, 10, 20}, 1);
  EXPECT_EQ(plan.keep, 4u);
  EXPECT_EQ(Tokens(cache.tokens().begin(), cache.tokens().end()), (Tokens{1, 2, 3, 10, 20}));
  cache.clear();
  EXPECT_EQ(cache.size(), 0u);
}

}  // namespace

// Greedy (T = 0) speculative decoding emits exactly the tokens of greedy target decoding:
// SpeculativeDecoder == AutoregressiveDecoder == an independent argmax reference, token for
// token, over 250 random prompts x K = 1..8, with a draft that is deliberately wrong in 30% of
// contexts (and prefers the runner-up of a near-tie or tie in another 20%), a target whose rows
// have near-ties (1 ulp apart) and exact ties (lowest index wins),
// with and without a context-dependent logits processor (repetition penalty).
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "specdec/decoder.hpp"
#include "specdec/rng.hpp"
#include "specdec/sampling.hpp"

namespace {

using specdec::token_t;

constexpr std::size_t kVocab = 24;
using Row = std::array<float, kVocab>;

std::uint64_t mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

std::size_t argmax_lowest(std::span<const float> row) {
  std::size_t best = 0;
  for (std::size_t v = 1; v < row.size(); ++v) {
    if (row[v] > row[best]) best = v;
  }
  return best;
}

// Hash of the last three tokens (fewer at the start of a short prompt).
std::uint64_t context_hash(std::span<const token_t> context) {
  std::uint64_t h = 0x6a09e667f3bcc908ULL;
  const std::size_t n = std::min<std::size_t>(3, context.size());
  for (std::size_t i = context.size() - n; i < context.size(); ++i) {
    h = mix(h ^ static_cast<std::uint64_t>(context[i]));
  }
  return mix(h ^ n);
}

// Target logits with engineered near-ties and ties at the top:
//   kind 0-1: a runner-up exactly 1 ulp below the best;
//   kind 2-3: an exact tie between two tokens (either may have the lower index);
//   kind 4:   a three-way exact tie;
//   kind 5:   a flat row (every logit equal: token 0 must win);
//   kind 6-9: plain random logits.
Row target_row(std::span<const token_t> context) {
  const std::uint64_t h = context_hash(context);
  Row row{};
  for (std::size_t v = 0; v < kVocab; ++v) {
    row[v] = static_cast<float>(static_cast<double>(mix(h + v) >> 11) * 0x1.0p-53 * 6.0 - 3.0);
  }
  const std::size_t best = argmax_lowest(row);
  const float top = row[best];
  const std::size_t other = (best + 1 + (h >> 20) % (kVocab - 1)) % kVocab;  // != best
  const std::size_t third = (other + 1 + (h >> 30) % (kVocab - 2)) % kVocab;
  switch ((h >> 8) % 10) {
    case 0:
    case 1:
      row[other] = std::nextafter(top, -std::numeric_limits<float>::infinity());
      break;
    case 2:
    case 3:
      row[other] = top;
      break;
    case 4:
      row[other] = top;
      if (third != best) row[third] = top;
      break;
    case 5:
      row.fill(0.25f);
      break;
    default:
      break;
  }
  return row;
}

// The draft: the target's row, but in 30% of contexts it prefers a wrong token, and in
// near-tie / tie rows it often prefers the runner-up or the highest-index tied token (by 1 ulp),
// which greedy verification must reject.
Row draft_row(std::span<const token_t> context) {
  Row row = target_row(context);
  const std::uint64_t h = mix(context_hash(context) ^ 0xd1ce);
  const float inf = std::numeric_limits<float>::infinity();
  const std::size_t best = argmax_lowest(row);
  const float top = row[best];
  switch (h % 10) {
    case 0:
    case 1:
    case 2: {  // a clearly wrong token
      const std::size_t wrong = (best + 1 + (h >> 16) % (kVocab - 1)) % kVocab;
      row[wrong] = top + 0.5f;
      break;
    }
    case 3:
    case 4: {  // the highest-index token within 1 ulp of the top, pushed just above it
      std::size_t runner = best;
      for (std::size_t v = 0; v < kVocab; ++v) {
        if (v != best && row[v] >= std::nextafter(top, -inf)) runner = v;
      }
      if (runner != best) row[runner] = std::nextafter(top, inf);
      break;
    }
    default:
      break;
  }
  return row;
}

// A decoder that overshoots its budget (or never terminates) fails at once, not by timeout.
void guard_runaway(std::span<const token_t> context) {
  if (context.size() > 10'000) {
    throw std::runtime_error("test model: runaway context; the decoder is not terminating");
  }
}

// TargetModel: a span over a reused buffer.
struct TieTarget {
  std::vector<float> buffer;
  std::size_t calls = 0;
  std::span<const float> operator()(std::span<const token_t> context, std::size_t n) {
    guard_runaway(context);
    ++calls;
    buffer.resize(n * kVocab);
    for (std::size_t i = 0; i < n; ++i) {
      const Row row = target_row(context.first(context.size() - n + 1 + i));
      std::copy(row.begin(), row.end(), buffer.begin() + static_cast<std::ptrdiff_t>(i * kVocab));
    }
    return buffer;
  }
};

// DraftModel returning an owning vector (the decoder keeps it alive until the next call).
struct TieDraft {
  std::vector<float> operator()(std::span<const token_t> context) const {
    guard_runaway(context);
    const Row row = draft_row(context);
    return {row.begin(), row.end()};
  }
};

// A pure, context-dependent processor: CTRL-style repetition penalty on every token already
// in the context (positive logits divided by 1.3, negative ones multiplied).
void repetition_penalty(std::span<const token_t> context, std::span<float> logits) {
  std::array<bool, kVocab> seen{};
  for (token_t t : context) seen[static_cast<std::size_t>(t)] = true;
  for (std::size_t v = 0; v < kVocab; ++v) {
    if (seen[v]) logits[v] = logits[v] > 0 ? logits[v] / 1.3f : logits[v] * 1.3f;
  }
}

struct ReferenceStep {
  token_t token;
  double logprob;  // log-softmax at T = 1 of the processed row, at the argmax
  bool exact_tie;  // another token had exactly the top logit
  bool near_tie;   // another token was within 1 ulp of the top logit
};

// Independent greedy reference: processor, then argmax with the lowest index on ties.
std::vector<ReferenceStep> reference_greedy(std::vector<token_t> context, std::size_t length,
                                            bool with_processor) {
  std::vector<ReferenceStep> steps;
  for (std::size_t n = 0; n < length; ++n) {
    Row row = target_row(context);
    if (with_processor) repetition_penalty(context, row);
    const std::size_t best = argmax_lowest(row);
    double sum = 0;
    for (float logit : row) sum += std::exp(static_cast<double>(logit) - row[best]);
    ReferenceStep step{static_cast<token_t>(best), -std::log(sum), false, false};
    for (std::size_t v = 0; v < kVocab; ++v) {
      if (v == best) continue;
      step.exact_tie |= row[v] == row[best];
      step.near_tie |= row[v] == std::nextafter(row[best], -std::numeric_limits<float>::infinity());
    }
    steps.push_back(step);
    context.push_back(step.token);
  }
  return steps;
}

std::vector<token_t> random_prompt(specdec::Rng& rng) {
  const std::size_t length = 1 + rng.next() % 8;
  std::vector<token_t> prompt(length);
  for (token_t& t : prompt) t = static_cast<token_t>(rng.next() % kVocab);
  return prompt;
}

struct Coverage {
  std::size_t generations = 0;
  std::size_t tokens = 0;
  std::size_t exact_ties = 0;
  std::size_t near_ties = 0;
  std::size_t drafted = 0;
  std::size_t accepted = 0;
  std::size_t rejecting_rounds = 0;
};

void run_equivalence(bool with_processor, Coverage& coverage) {
  TieDraft draft;
  TieTarget target;
  TieTarget baseline_target;
  specdec::SpeculativeDecoder speculative(draft, target);
  specdec::AutoregressiveDecoder autoregressive(baseline_target);
  specdec::Rng rng(with_processor ? 2024 : 2023);

  for (int p = 0; p < 250; ++p) {
    const std::vector<token_t> prompt = random_prompt(rng);
    specdec::GenerationConfig config;
    config.sampling.temperature = 0.0f;
    if (with_processor) config.sampling.logits_processor = repetition_penalty;
    config.max_new_tokens = 1 + rng.next() % 48;
    config.seed = rng.next();  // greedy must not depend on it
    const auto baseline = autoregressive.generate(prompt, config);
    const std::vector<ReferenceStep> reference =
        reference_greedy(prompt, config.max_new_tokens, with_processor);
    ASSERT_EQ(baseline.tokens.size(), reference.size());
    for (std::size_t i = 0; i < reference.size(); ++i) {
      ASSERT_EQ(baseline.tokens[i], reference[i].token)
          << "AutoregressiveDecoder is not greedy at step " << i << " (prompt " << p << ")";
      coverage.exact_ties += reference[i].exact_tie;
      coverage.near_ties += reference[i].near_tie;
    }
    for (std::size_t k = 1; k <= 8; ++k) {
      config.draft_length = k;
      const auto result = speculative.generate(prompt, config);
      ASSERT_EQ(result.tokens, baseline.tokens)
          << "prompt " << p << " K=" << k << " budget " << config.max_new_tokens
          << (with_processor ? " with repetition penalty" : "");
      ASSERT_EQ(result.logprobs.size(), result.tokens.size());
      for (std::size_t i = 0; i < result.tokens.size(); ++i) {
        // Same float row, same formula: the two decoders agree to the bit; the double
        // reference to float accuracy.
        EXPECT_EQ(result.logprobs[i], baseline.logprobs[i]) << "prompt " << p << " K=" << k;
        EXPECT_NEAR(result.logprobs[i], reference[i].logprob, 1e-5) << "prompt " << p << " K=" << k;
      }
      EXPECT_EQ(result.finish_reason, specdec::FinishReason::length);
      ++coverage.generations;
      coverage.tokens += result.tokens.size();
      coverage.drafted += result.stats.drafted;
      coverage.accepted += result.stats.accepted;
      coverage.rejecting_rounds += result.stats.rejecting_rounds;
    }
  }
}

void expect_meaningful(const Coverage& coverage, const char* label) {
  std::printf(
      "[ greedy ] %s: %zu generations, %zu tokens, %zu exact ties, %zu near ties on the "
      "path, acceptance %.3f, %zu rejecting rounds\n",
      label, coverage.generations, coverage.tokens, coverage.exact_ties, coverage.near_ties,
      static_cast<double>(coverage.accepted) / static_cast<double>(coverage.drafted),
      coverage.rejecting_rounds);
  // The draft must really be imperfect and the tie cases must really be on the decoded path.
  EXPECT_GT(coverage.rejecting_rounds, 1000u) << label;
  EXPECT_GT(coverage.accepted, 1000u) << label;
  EXPECT_GT(coverage.exact_ties, 100u) << label;
  EXPECT_GT(coverage.near_ties, 100u) << label;
}

TEST(GreedyTest, SpeculativeEqualsAutoregressiveTokenForToken) {
  Coverage coverage;
  run_equivalence(false, coverage);
  expect_meaningful(coverage, "plain");
}

TEST(GreedyTest, SpeculativeEqualsAutoregressiveWithRepetitionPenalty) {
  Coverage coverage;
  run_equivalence(true, coverage);
  expect_meaningful(coverage, "repetition penalty");
}

// Exact ties resolve to the lowest index, in both decoders, even when the draft insists on a
// higher tied index.
TEST(GreedyTest, ExactTiesGoToTheLowestIndex) {
  struct FlatTarget {
    std::vector<float> buffer;
    std::span<const float> operator()(std::span<const token_t>, std::size_t n) {
      buffer.assign(n * kVocab, -1.0f);
      for (std::size_t i = 0; i < n; ++i) {
        buffer[i * kVocab + 5] = 2.0f;  // tokens 5, 9 and 17 tie for the top
        buffer[i * kVocab + 9] = 2.0f;
        buffer[i * kVocab + 17] = 2.0f;
      }
      return buffer;
    }
  };
  struct PreferSeventeen {
    std::vector<float> operator()(std::span<const token_t>) const {
      std::vector<float> row(kVocab, -1.0f);
      row[17] = 3.0f;
      return row;
    }
  };
  FlatTarget target;
  PreferSeventeen draft;
  specdec::SpeculativeDecoder speculative(draft, target);
  specdec::AutoregressiveDecoder autoregressive(target);
  specdec::GenerationConfig config;
  config.sampling.temperature = 0.0f;
  config.max_new_tokens = 10;
  for (std::size_t k = 1; k <= 8; ++k) {
    config.draft_length = k;
    const auto result = speculative.generate(std::vector<token_t>{0}, config);
    EXPECT_EQ(result.tokens, std::vector<token_t>(10, 5)) << "K=" << k;
    EXPECT_EQ(result.stats.accepted, 0u) << "K=" << k;
  }
  EXPECT_EQ(autoregressive.generate(std::vector<token_t>{0}, config).tokens,
            std::vector<token_t>(10, 5));
}

// At T = 0 top-k / top-p / min-p cannot remove the argmax and the seed is unused: the tokens
// are the same as with the filters off.
TEST(GreedyTest, FiltersAndSeedDoNotChangeGreedyOutput) {
  TieDraft draft;
  TieTarget target;
  specdec::SpeculativeDecoder speculative(draft, target);
  specdec::Rng rng(99);
  for (int p = 0; p < 50; ++p) {
    const std::vector<token_t> prompt = random_prompt(rng);
    specdec::GenerationConfig plain;
    plain.sampling.temperature = 0.0f;
    plain.max_new_tokens = 32;
    plain.draft_length = 1 + static_cast<std::size_t>(p % 8);
    specdec::GenerationConfig filtered = plain;
    filtered.sampling.top_k = 1;
    filtered.sampling.top_p = 0.05f;
    filtered.sampling.min_p = 0.9f;
    filtered.seed = 12345 + static_cast<std::uint64_t>(p);
    EXPECT_EQ(speculative.generate(prompt, plain).tokens,
              speculative.generate(prompt, filtered).tokens)
        << "prompt " << p;
  }
}

// The two extremes of draft quality: a draft that is always wrong (every round rejects at
// position 0) and the target itself (every draft accepted).
TEST(GreedyTest, AlwaysWrongAndPerfectDraftsGiveTheSameTokens) {
  struct AlwaysWrong {
    std::vector<float> operator()(std::span<const token_t> context) const {
      Row row = target_row(context);
      std::vector<float> out(kVocab, 0.0f);
      out[(argmax_lowest(row) + 1) % kVocab] = 1.0f;
      return out;
    }
  };
  struct Perfect {
    std::vector<float> operator()(std::span<const token_t> context) const {
      const Row row = target_row(context);
      return {row.begin(), row.end()};
    }
  };
  AlwaysWrong wrong;
  Perfect perfect;
  TieTarget target_a;
  TieTarget target_b;
  TieTarget target_c;
  specdec::SpeculativeDecoder with_wrong(wrong, target_a);
  specdec::SpeculativeDecoder with_perfect(perfect, target_b);
  specdec::AutoregressiveDecoder autoregressive(target_c);
  specdec::Rng rng(5);
  for (int p = 0; p < 40; ++p) {
    const std::vector<token_t> prompt = random_prompt(rng);
    specdec::GenerationConfig config;
    config.sampling.temperature = 0.0f;
    config.max_new_tokens = 40;
    config.draft_length = 1 + static_cast<std::size_t>(p % 8);
    const auto expected = autoregressive.generate(prompt, config).tokens;
    const auto a = with_wrong.generate(prompt, config);
    const auto b = with_perfect.generate(prompt, config);
    EXPECT_EQ(a.tokens, expected) << "always-wrong draft, prompt " << p;
    EXPECT_EQ(b.tokens, expected) << "perfect draft, prompt " << p;
    // One token per round; every round rejects except the last (remaining 1 => K_eff = 0).
    EXPECT_EQ(a.stats.accepted, 0u);
    EXPECT_EQ(a.stats.rounds, config.max_new_tokens);
    EXPECT_EQ(a.stats.rejecting_rounds, a.stats.rounds - 1);
    EXPECT_EQ(b.stats.accepted, b.stats.drafted);
    EXPECT_EQ(b.stats.rejecting_rounds, 0u);
  }
}

}  // namespace

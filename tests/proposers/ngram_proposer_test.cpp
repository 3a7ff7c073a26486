// NgramProposer (ngram_proposer.hpp), FallbackProposer (fallback_proposer.hpp) and the decoders
// of ngram_decoder.hpp:
//   - the lookup rule on crafted contexts: repeats, overlaps, several occurrences (the most
//     recent wins), no match (empty, policy not asked), a match right before the end, the
//     longest match first, min/max bounds, the policy and the limit;
//   - the index: incremental == from scratch on every round of real decoding with rejections
//     (rollback), rebuilt on a context that is not an extension, per-round work independent of
//     the context's length (a counter, not a timer);
//   - exactness: exact enumeration (testing.hpp) of the n-gram and the combined proposer
//     against the target's law at T = 1, T = 0.7 with top-k / top-p, and greedy, with both
//     verifiers; a lookup that misreports q is caught (one that picks its token at random and
//     reports a point mass at it is not wrong, and the harness agrees);
//   - the decoders: greedy output equals plain greedy decoding; a chi-square test of the
//     n-gram decoder's first tokens at T = 1, with the same mutant failing it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "specdec/specdec.hpp"
#include "specdec/testing.hpp"

namespace {

using specdec::BasicNgramProposer;
using specdec::DraftRequest;
using specdec::DraftState;
using specdec::NgramOptions;
using specdec::NgramProposer;
using specdec::SamplingParams;
using specdec::StaticDraftLength;
using specdec::token_t;
using specdec::testing::Law;
using specdec::testing::ScriptedPair;
using specdec::testing::Sequence;

constexpr std::size_t kUnlimited = std::numeric_limits<std::size_t>::max();

// A policy that counts how often it is asked and allows `allow` tokens per round.
struct CountingPolicy {
  std::size_t allow = kUnlimited;
  std::size_t asked = 0;
  bool draft_more(const DraftState& state) {
    ++asked;
    EXPECT_LT(state.drafted, state.limit) << "asked beyond the round's limit";
    for (const double q : state.token_probabilities) EXPECT_EQ(q, 1.0);
    return state.drafted < allow;
  }
  void observe(const specdec::RoundReport&) {}
};

// One propose() call outside a decoder; checks the proposal's shape and that the committed
// tokens are untouched.
template <class Proposer = NgramProposer>
std::vector<token_t> propose(Proposer& proposer, const std::vector<token_t>& committed,
                             std::size_t limit, CountingPolicy& policy) {
  std::vector<token_t> context = committed;
  context.reserve(committed.size() + limit + 1);
  std::size_t vocab_size = 0;
  specdec::DecodeStats stats;
  const SamplingParams params;
  DraftRequest request(context, limit, params, vocab_size, stats);
  request.bind_policy(policy);
  specdec::Rng rng(1);
  specdec::DraftCoins coins(rng);
  const auto proposal = proposer.propose(request, coins);
  EXPECT_LE(proposal.size(), limit);
  EXPECT_TRUE(proposal.is_chain());
  for (std::size_t i = 0; i < proposal.size(); ++i) EXPECT_TRUE(proposal.is_point_mass(i));
  EXPECT_TRUE(std::equal(committed.begin(), committed.end(), context.begin()));
  EXPECT_EQ(stats.draft_calls, 0u);
  return {proposal.tokens.begin(), proposal.tokens.end()};
}

std::vector<token_t> propose(const NgramOptions& options, const std::vector<token_t>& committed,
                             std::size_t limit) {
  NgramProposer proposer(options);
  CountingPolicy policy;
  return propose(proposer, committed, limit, policy);
}

using Tokens = std::vector<token_t>;

// ---- the lookup rule ----------------------------------------------------------------------------

TEST(NgramProposerTest, ContinuesARepeatTokenByToken) {
  // "1 2 3" occurred before, followed by "4 9 1 2 3": the draft follows it, and once the drafted
  // tokens end with "1 2 3" again the lookup goes round a second time.
  EXPECT_EQ(propose({.min_ngram = 2, .max_ngram = 4}, {1, 2, 3, 4, 9, 1, 2, 3}, 8),
            (Tokens{4, 9, 1, 2, 3, 4, 9, 1}));
}

TEST(NgramProposerTest, OverlappingOccurrences) {
  // "5 5 5 5": the suffix "5 5 5" occurred at 0..2, overlapping itself; what followed is 5.
  EXPECT_EQ(propose({.min_ngram = 1, .max_ngram = 3}, {5, 5, 5, 5}, 6), (Tokens(6, 5)));
  EXPECT_EQ(propose({.min_ngram = 2, .max_ngram = 2}, {7, 5, 5, 5}, 3), (Tokens{5, 5, 5}));
  // "3 3": the only earlier "3 3" is the suffix itself, so min 2 finds nothing; min 1 does.
  EXPECT_EQ(propose({.min_ngram = 2, .max_ngram = 4}, {1, 3, 3}, 4), Tokens{});
  EXPECT_EQ(propose({.min_ngram = 1, .max_ngram = 4}, {1, 3, 3}, 4), (Tokens{3, 3, 3, 3}));
}

TEST(NgramProposerTest, TheMostRecentOccurrenceWins) {
  // "1 2" was followed by 7, then by 8: the most recent (8) is proposed, then "2 8" -> 3, ...
  const Tokens context{1, 2, 7, 1, 2, 8, 3, 1, 2};
  EXPECT_EQ(propose({.min_ngram = 2, .max_ngram = 2}, context, 1), (Tokens{8}));
  EXPECT_EQ(propose({.min_ngram = 2, .max_ngram = 2}, context, 4), (Tokens{8, 3, 1, 2}));
}

TEST(NgramProposerTest, NoMatchProposesNothingWithoutAskingThePolicy) {
  NgramProposer proposer({.min_ngram = 2, .max_ngram = 4});
  CountingPolicy policy;
  EXPECT_TRUE(propose(proposer, {1, 2, 3, 4, 5}, 4, policy).empty());
  EXPECT_EQ(policy.asked, 0u);
  EXPECT_TRUE(propose(proposer, {1}, 4, policy).empty());  // shorter than min_ngram
  EXPECT_EQ(policy.asked, 0u);
}

TEST(NgramProposerTest, AMatchRightBeforeTheEndContinuesWithCommittedTokensOnly) {
  // The only earlier "1 2" ends right before the suffix: its continuation is the last-but-one
  // committed token, and the draft goes on from there.
  EXPECT_EQ(propose({.min_ngram = 2, .max_ngram = 4}, {1, 2, 1, 2}, 5), (Tokens{1, 2, 1, 2, 1}));
  // "9 5 5" with min 1: "5" at 1 was followed by the last committed token (5); the suffix at 2
  // has no continuation yet and is never a match.
  EXPECT_EQ(propose({.min_ngram = 1, .max_ngram = 4}, {9, 5, 5}, 3), (Tokens{5, 5, 5}));
  // "4" at 0 was followed by 6 (the token before the suffix), then "4 6" by the suffix itself.
  EXPECT_EQ(propose({.min_ngram = 1, .max_ngram = 4}, {4, 6, 4}, 2), (Tokens{6, 4}));
}

TEST(NgramProposerTest, TheLongestMatchWinsAndBoundsAreRespected) {
  // "2 3" was last followed by 8, but "1 2 3" (longer) by 7.
  const Tokens context{1, 2, 3, 7, 9, 2, 3, 8, 5, 1, 2, 3};
  EXPECT_EQ(propose({.min_ngram = 1, .max_ngram = 4}, context, 1), (Tokens{7}));
  EXPECT_EQ(propose({.min_ngram = 1, .max_ngram = 2}, context, 1), (Tokens{8}));  // max bound
  EXPECT_EQ(propose({.min_ngram = 4, .max_ngram = 6}, context, 1), Tokens{});     // min bound
  // Exactly 3: "1 2 3" -> 7, then "2 3 7" (at 1..3) -> 9, then "3 7 9" (at 2..4) -> 2.
  EXPECT_EQ(propose({.min_ngram = 3, .max_ngram = 3}, context, 3), (Tokens{7, 9, 2}));
}

TEST(NgramProposerTest, AsksThePolicyBeforeEveryTokenAndKeepsTheLimit) {
  const Tokens context{1, 2, 3, 4, 5, 1, 2};
  NgramProposer proposer({.min_ngram = 2, .max_ngram = 3});
  CountingPolicy stop_after_two{.allow = 2};
  EXPECT_EQ(propose(proposer, context, 5, stop_after_two), (Tokens{3, 4}));
  EXPECT_EQ(stop_after_two.asked, 3u);  // yes, yes, no
  CountingPolicy always;
  EXPECT_EQ(propose(proposer, context, 3, always), (Tokens{3, 4, 5}));
  EXPECT_EQ(always.asked, 3u);  // never asked at drafted == limit
  CountingPolicy unused;
  EXPECT_TRUE(propose(proposer, context, 0, unused).empty());
  EXPECT_EQ(unused.asked, 0u);
  // The match runs out before the limit: "5 1 2 3 4" then "4 5" -> 1, ... all the way.
  EXPECT_EQ(propose({.min_ngram = 2, .max_ngram = 3}, context, 12).size(), 12u);
}

TEST(NgramProposerTest, RejectsBadOptions) {
  EXPECT_THROW(NgramProposer({.min_ngram = 0, .max_ngram = 3}), std::invalid_argument);
  EXPECT_THROW(NgramProposer({.min_ngram = 4, .max_ngram = 3}), std::invalid_argument);
  EXPECT_THROW(NgramProposer({.min_ngram = 1, .max_ngram = NgramOptions::kMaxNgram + 1}),
               std::invalid_argument);
  EXPECT_NO_THROW(NgramProposer({.min_ngram = 1, .max_ngram = 1}));
}

// ---- the index: incremental, rolled back, rebuilt, bounded work --------------------------------

// Runs an incremental NgramProposer inside a real decoder and, every round, a fresh proposer on
// the committed tokens alone: equal proposals show that rejected drafts left nothing behind.
struct CheckedNgramProposer {
  NgramOptions options;
  NgramProposer incremental{options};
  std::size_t rounds = 0;
  std::size_t nonempty_rounds = 0;
  std::size_t mismatches = 0;

  void begin(const specdec::GenerationConfig& config) { incremental.begin(config); }

  template <class Coins>
  specdec::Proposal<float> propose(DraftRequest& request, Coins& coins) {
    std::vector<token_t> committed(
        request.context.begin(),
        request.context.begin() + static_cast<std::ptrdiff_t>(request.committed));
    committed.reserve(committed.size() + request.limit + 1);
    std::size_t vocab_size = 0;
    specdec::DecodeStats stats;
    DraftRequest fresh_request(committed, request.limit, request.params, vocab_size, stats);
    NgramProposer fresh(options);
    const auto expected = fresh.propose(fresh_request, coins);
    const auto got = incremental.propose(request, coins);
    ++rounds;
    nonempty_rounds += got.empty() ? 0 : 1;
    if (!std::equal(got.tokens.begin(), got.tokens.end(), expected.tokens.begin(),
                    expected.tokens.end())) {
      ++mismatches;
    }
    return got;
  }
};

TEST(NgramIndexTest, RejectedDraftsLeaveNothingBehind) {
  ScriptedPair pair;  // V = 5: the context repeats often, and the target often disagrees
  auto target = pair.target<float>();
  for (const float temperature : {0.0f, 1.0f}) {
    specdec::StrategyDecoder<decltype(target), CheckedNgramProposer, StaticDraftLength,
                             specdec::ConfiguredVerifier>
        decoder(target, CheckedNgramProposer{.options = {.min_ngram = 1, .max_ngram = 3}});
    specdec::GenerationConfig config;
    config.draft_length = 4;
    config.max_new_tokens = 200;
    config.sampling.temperature = temperature;
    std::size_t rejecting_rounds = 0;
    for (std::uint64_t seed = 0; seed < 5; ++seed) {
      config.seed = seed;  // and a prompt per seed: greedy decoding ignores the seed
      const auto result =
          decoder.generate(Tokens{1, 2, 3, 1, 2, static_cast<token_t>(seed)}, config);
      rejecting_rounds += result.stats.rejecting_rounds;
      EXPECT_EQ(decoder.proposer().incremental.work().rebuilds, 0u)
          << "the decoder only ever extends the committed context";
      EXPECT_LT(decoder.proposer().incremental.indexed_tokens(), 6u + 200u);
      EXPECT_GT(decoder.proposer().incremental.indexed_tokens(), 6u + 200u - 2 * 5u);
    }
    EXPECT_GE(rejecting_rounds, 5u) << "T=" << temperature << ": the test needs rejections";
    EXPECT_GT(decoder.proposer().nonempty_rounds, 0u);
    EXPECT_EQ(decoder.proposer().mismatches, 0u) << "T=" << temperature;
  }
}

TEST(NgramIndexTest, AContextThatIsNotAnExtensionIsIndexedAfresh) {
  NgramProposer proposer({.min_ngram = 2, .max_ngram = 3});
  CountingPolicy policy;
  EXPECT_EQ(propose(proposer, {1, 2, 3, 1, 2}, 1, policy), (Tokens{3}));
  EXPECT_EQ(proposer.work().rebuilds, 0u);
  // Shorter: "1 2" must no longer be found (it was followed by 3 in the old context).
  EXPECT_EQ(propose(proposer, {4, 1, 2}, 1, policy), Tokens{});
  EXPECT_EQ(proposer.work().rebuilds, 1u);
  // Same length as indexed plus more, but a different tail: "4 1 2" was "1 2 3 1 2" before.
  EXPECT_EQ(propose(proposer, {4, 1, 2, 6, 1, 2}, 1, policy), (Tokens{6}));
  EXPECT_EQ(proposer.work().rebuilds, 1u) << "{4, 1, 2, ...} extends {4, 1, 2}";
  EXPECT_EQ(propose(proposer, {4, 1, 2, 6, 1, 9, 5}, 1, policy), Tokens{});
  EXPECT_EQ(proposer.work().rebuilds, 2u);
  // begin() forgets the context of the previous generate().
  proposer.begin(specdec::GenerationConfig{});
  EXPECT_EQ(proposer.indexed_tokens(), 0u);
  EXPECT_EQ(propose(proposer, {1, 2, 3, 1, 2}, 1, policy), (Tokens{3}));
}

// A context that grows from 100 to 100k tokens, a few committed tokens per round (half of them
// copied from an earlier stretch, so lookups hit): the work of a round — table probes plus
// tokens indexed — stays bounded by the same constant at every length; table growth moves each
// entry a bounded number of times in all (amortised O(1) per token).
TEST(NgramIndexTest, WorkPerRoundDoesNotGrowWithTheContext) {
  const NgramOptions options{.min_ngram = 2, .max_ngram = 5};
  NgramProposer proposer(options);
  constexpr std::size_t kLimit = 8;
  const std::vector<std::size_t> checkpoints{100, 1'000, 10'000, 100'000};
  specdec::Rng rng(7);
  Tokens context;
  context.reserve(checkpoints.back() + 2 * kLimit);
  while (context.size() < checkpoints.front()) {
    context.push_back(static_cast<token_t>(rng.next() % 50));
  }
  const SamplingParams params;
  std::size_t vocab_size = 0;
  specdec::DecodeStats stats;
  specdec::DraftCoins coins(rng);
  std::vector<double> mean_work(checkpoints.size() - 1, 0);
  std::vector<std::uint64_t> max_work(checkpoints.size() - 1, 0);
  std::size_t nonempty = 0;
  bool first_round = true;  // indexes the initial 100 tokens at once: not a steady-state round
  for (std::size_t window = 0; window + 1 < checkpoints.size(); ++window) {
    std::size_t rounds = 0;
    std::uint64_t total = 0;
    while (context.size() < checkpoints[window + 1]) {
      const specdec::NgramWork before = proposer.work();
      const std::size_t committed = context.size();
      DraftRequest request(context, kLimit, params, vocab_size, stats);
      nonempty += proposer.propose(request, coins).empty() ? 0 : 1;
      context.resize(committed);
      const specdec::NgramWork& after = proposer.work();
      const std::uint64_t work =
          (after.probes - before.probes) + (after.tokens_indexed - before.tokens_indexed);
      if (!first_round) {
        total += work;
        max_work[window] = std::max(max_work[window], work);
        ++rounds;
      }
      first_round = false;
      // Commit 1-4 tokens: a copy of an earlier stretch or fresh random tokens.
      const std::size_t commit = 1 + rng.next() % 4;
      const std::size_t source = rng.next() % (context.size() - 4);
      const bool copy = rng.next() % 2 == 0;
      for (std::size_t i = 0; i < commit; ++i) {
        context.push_back(copy ? context[source + i] : static_cast<token_t>(rng.next() % 50));
      }
    }
    mean_work[window] = static_cast<double>(total) / static_cast<double>(rounds);
  }
  const specdec::NgramWork& work = proposer.work();
  std::printf(
      "[ work ] mean (max) probes + indexed tokens per round: 100-1k %.1f (%llu), "
      "1k-10k %.1f (%llu), 10k-100k %.1f (%llu); rehashed %llu for %llu tokens\n",
      mean_work[0], static_cast<unsigned long long>(max_work[0]), mean_work[1],
      static_cast<unsigned long long>(max_work[1]), mean_work[2],
      static_cast<unsigned long long>(max_work[2]), static_cast<unsigned long long>(work.rehashed),
      static_cast<unsigned long long>(work.tokens_indexed));
  EXPECT_GT(nonempty, 1000u) << "lookups must hit for the test to mean anything";
  EXPECT_EQ(work.rebuilds, 0u);
  // Per round: <= kLimit + 1 lookups of <= 4 tables, <= 4 committed tokens into 4 tables.
  const double per_round_bound = 3.0 * ((kLimit + 1) * 4 + 4 * 5);
  for (std::size_t window = 0; window < mean_work.size(); ++window) {
    EXPECT_LT(mean_work[window], per_round_bound) << "window " << window;
    EXPECT_LT(mean_work[window], 1.5 * mean_work[0] + 5) << "window " << window;
    EXPECT_LT(max_work[window], 8 * per_round_bound) << "window " << window;
  }
  const std::uint64_t tables = options.max_ngram - options.min_ngram + 1;
  EXPECT_LE(work.rehashed, 2 * tables * work.tokens_indexed);
}

// In a decoder, begin() reserves the index for the prompt and the budget: no table ever grows
// during generation (rounds allocate nothing).
TEST(NgramIndexTest, TheDecoderReservesTheIndexUpFront) {
  ScriptedPair pair;
  pair.target_model.vocab = 12;
  auto target = pair.target<float>();
  specdec::NgramDecoder decoder(target, {.min_ngram = 1, .max_ngram = 4});
  Tokens prompt;
  for (std::size_t i = 0; i < 3000; ++i) prompt.push_back(static_cast<token_t>((i * 7) % 11));
  specdec::GenerationConfig config;
  config.max_new_tokens = 1000;
  config.sampling.temperature = 0.0f;
  const auto result = decoder.generate(prompt, config);
  EXPECT_EQ(result.tokens.size(), 1000u);
  EXPECT_EQ(decoder.proposer().work().rehashed, 0u);
  EXPECT_EQ(decoder.proposer().work().rebuilds, 0u);
  EXPECT_GT(result.stats.drafted, 0u);
}

// ---- exactness by enumeration -------------------------------------------------------------------

// Not a mutant: the lookup, then a coin flip that may shift the token, reported as a point mass
// at the token actually proposed. Whatever draft-side randomness picked x, q = δ_x is the law of
// x given that choice, and verification is lossless for every q; so this is exact (checked
// below), and a "point mass that is secretly random" is no lie the output could reveal.
struct CoinFlip {
  [[nodiscard]] std::size_t vocab_size() const { return 2; }
  [[nodiscard]] token_t sample(double coin) const { return coin < 0.5 ? 0 : 1; }
  [[nodiscard]] double mass(token_t) const { return 0.5; }
};

template <class Scalar>
struct ShiftingNgramProposer {
  BasicNgramProposer<Scalar> lookup;
  std::size_t vocab = 5;
  std::vector<token_t> tokens{};

  template <class Coins>
  specdec::Proposal<Scalar> propose(DraftRequest& request, Coins& coins) {
    specdec::Proposal<Scalar> proposal = lookup.propose(request, coins);
    tokens.assign(proposal.tokens.begin(), proposal.tokens.end());
    if (!tokens.empty() && coins.draw(CoinFlip{}) == 1) {
      tokens[0] = static_cast<token_t>((tokens[0] + 1) % static_cast<token_t>(vocab));
    }
    proposal.tokens = tokens;
    return proposal;
  }
};

// The mutant: the lookup's tokens with a q that is not theirs — the uniform law, as a combined
// proposer would report if it mixed the lookup's tokens with another proposer's q rows. The
// verifier then accepts x with min(1, p(x) V) and the output leaves the target's law.
template <class Scalar>
struct MisreportingNgramProposer {
  BasicNgramProposer<Scalar> lookup;
  std::size_t vocab = 5;
  std::vector<Scalar> weights{};
  std::vector<Scalar> normalizers{};

  void begin(const specdec::GenerationConfig& config) { lookup.begin(config); }

  template <class Coins>
  specdec::Proposal<Scalar> propose(DraftRequest& request, Coins& coins) {
    specdec::Proposal<Scalar> proposal = lookup.propose(request, coins);
    if (proposal.empty()) return proposal;
    weights.assign(proposal.size() * vocab, Scalar(1));
    normalizers.assign(proposal.size(), static_cast<Scalar>(vocab));
    proposal.point_mass = {};
    proposal.q_weights = specdec::LogitsRows<Scalar>(weights, vocab);
    proposal.q_normalizers = normalizers;
    return proposal;
  }
};

struct Mode {
  std::string name;
  SamplingParams params;
};

std::vector<Mode> modes() {
  std::vector<Mode> modes;
  modes.push_back({"T=1", {}});
  SamplingParams top_k;
  top_k.temperature = 0.7f;
  top_k.top_k = 3;
  modes.push_back({"T=0.7,top_k=3", top_k});
  SamplingParams top_p;
  top_p.temperature = 0.7f;
  top_p.top_p = 0.8f;
  modes.push_back({"T=0.7,top_p=0.8", top_p});
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  modes.push_back({"greedy", greedy});
  return modes;
}

// Prompts with repeats (the lookup proposes from the first round) and one without (it does not).
const std::vector<Sequence> kPrompts{{1, 2, 3, 1, 2}, {0, 0, 0}, {4, 1, 4, 1, 4}, {2, 3}};
constexpr std::size_t kLength = 5;
constexpr std::size_t kDraftLength = 3;
constexpr double kExact = 1e-12;

template <class ProposerT, class VerifierT>
double law_error(const ProposerT& proposer, const VerifierT& verifier, const ScriptedPair& pair,
                 const Sequence& prompt, std::size_t length = kLength) {
  const Law expected = specdec::testing::target_law(pair.target(), pair.params, prompt, length);
  const Law got =
      specdec::testing::speculative_law(proposer, StaticDraftLength{}, verifier, pair.target(),
                                        pair.params, prompt, length, kDraftLength);
  return specdec::testing::total_variation(got, expected);
}

TEST(NgramExactnessTest, NgramProposerKeepsTheTargetLaw) {
  for (const Mode& mode : modes()) {
    ScriptedPair pair;
    pair.params = mode.params;
    const BasicNgramProposer<double> proposer({.min_ngram = 1, .max_ngram = 3});
    double drafted = 0;
    for (const Sequence& prompt : kPrompts) {
      SCOPED_TRACE(mode.name + " prompt of " + std::to_string(prompt.size()));
      EXPECT_LT(law_error(proposer, specdec::TokenVerifier{}, pair, prompt), kExact);
      EXPECT_LT(law_error(proposer, specdec::BlockVerifier{}, pair, prompt), kExact);
      drafted +=
          specdec::testing::round_law(proposer, StaticDraftLength{}, specdec::TokenVerifier{},
                                      pair.target(), pair.params, prompt, kDraftLength)
              .expected_drafted;
    }
    EXPECT_GT(drafted, 3.0) << mode.name << ": the first rounds must propose something";
  }
}

TEST(NgramExactnessTest, NgramThenModelProposerKeepsTheTargetLaw) {
  using Draft = ScriptedPair::Draft<double>;
  for (const Mode& mode : modes()) {
    ScriptedPair pair;
    pair.params = mode.params;
    Draft draft = pair.draft();
    const specdec::NgramThenModelProposer<Draft> proposer(
        BasicNgramProposer<double>({.min_ngram = 2, .max_ngram = 3}),
        specdec::ModelProposer<Draft>(draft));
    for (const Sequence& prompt : kPrompts) {
      SCOPED_TRACE(mode.name + " prompt of " + std::to_string(prompt.size()));
      EXPECT_LT(law_error(proposer, specdec::TokenVerifier{}, pair, prompt), kExact);
      EXPECT_LT(law_error(proposer, specdec::BlockVerifier{}, pair, prompt), kExact);
    }
  }
}

TEST(NgramExactnessTest, FallbackUsesTheSecondaryOnlyWhenThePrimaryDeclines) {
  using Draft = ScriptedPair::Draft<double>;
  ScriptedPair pair;
  Draft draft = pair.draft();
  specdec::NgramThenModelProposer<Draft> proposer(
      BasicNgramProposer<double>({.min_ngram = 2, .max_ngram = 3}),
      specdec::ModelProposer<Draft>(draft));
  std::vector<token_t> context{2, 3};  // no repeat: the draft model drafts
  context.reserve(16);
  std::size_t vocab_size = 0;
  specdec::DecodeStats stats;
  CountingPolicy stop{.allow = 0};
  {
    DraftRequest request(context, 3, pair.params, vocab_size, stats);
    request.bind_policy(stop);
    specdec::Rng rng(3);
    specdec::DraftCoins coins(rng);
    EXPECT_TRUE(proposer.propose(request, coins).empty());
    EXPECT_EQ(stop.asked, 1u) << "asked once, by the draft model's proposer";
    EXPECT_EQ(proposer.secondary_rounds(), 1u);
  }
  context = {2, 3, 2, 3};  // a match: the lookup asks, is told no, and keeps the round
  stop.asked = 0;
  {
    DraftRequest request(context, 3, pair.params, vocab_size, stats);
    request.bind_policy(stop);
    specdec::Rng rng(3);
    specdec::DraftCoins coins(rng);
    EXPECT_TRUE(proposer.propose(request, coins).empty());
    EXPECT_EQ(stop.asked, 1u);
    EXPECT_EQ(proposer.primary_rounds(), 1u);
    EXPECT_EQ(stats.draft_calls, 0u) << "the draft model was not called";
  }
}

TEST(NgramExactnessTest, ARandomTokenReportedAsItsOwnPointMassIsStillExact) {
  for (const Mode& mode : modes()) {
    ScriptedPair pair;
    pair.params = mode.params;
    const ShiftingNgramProposer<double> shifting{
        .lookup = BasicNgramProposer<double>({.min_ngram = 1, .max_ngram = 3})};
    EXPECT_LT(law_error(shifting, specdec::TokenVerifier{}, pair, kPrompts[0]), kExact)
        << mode.name;
    EXPECT_LT(law_error(shifting, specdec::BlockVerifier{}, pair, kPrompts[0]), kExact)
        << mode.name;
  }
}

TEST(NgramExactnessPowerTest, AProposerThatMisreportsQIsCaught) {
  double smallest = 1;
  for (const Mode& mode : modes()) {
    if (mode.params.greedy()) continue;  // greedy verification reads no q: any draft is exact
    ScriptedPair pair;
    pair.params = mode.params;
    const MisreportingNgramProposer<double> mutant{
        .lookup = BasicNgramProposer<double>({.min_ngram = 1, .max_ngram = 3})};
    for (const Sequence& prompt : {kPrompts[0], kPrompts[2]}) {
      const double token_tv = law_error(mutant, specdec::TokenVerifier{}, pair, prompt);
      const double block_tv = law_error(mutant, specdec::BlockVerifier{}, pair, prompt);
      EXPECT_GT(token_tv, 1e-4) << mode.name;
      EXPECT_GT(block_tv, 1e-4) << mode.name;
      smallest = std::min({smallest, token_tv, block_tv});
    }
  }
  std::printf("[ power ] misreporting mutant: TV at least %.3g\n", smallest);
}

// ---- the decoders
// ---------------------------------------------------------------------------------

TEST(NgramDecoderTest, GreedyOutputEqualsPlainGreedyDecoding) {
  for (const std::size_t vocab : {5u, 12u}) {
    ScriptedPair pair;
    pair.target_model.vocab = vocab;
    pair.perturbation.vocab = vocab;
    auto target = pair.target<float>();
    auto draft = pair.draft<float>();
    specdec::AutoregressiveDecoder plain(target);
    specdec::NgramDecoder ngram(target, {.min_ngram = 1, .max_ngram = 4});
    specdec::NgramThenModelDecoder combined(draft, target, {.min_ngram = 2, .max_ngram = 4});
    specdec::DecodeStats ngram_stats, combined_stats;
    const std::vector<Tokens> prompts{{1}, {1, 2, 3, 1, 2}, {0, 0, 0, 0}, {4, 3, 2, 1, 0, 4, 3}};
    for (const Tokens& prompt : prompts) {
      for (const std::size_t budget : {1u, 2u, 7u, 40u, 150u}) {
        for (const std::size_t draft_length : {1u, 3u, 6u}) {
          specdec::GenerationConfig config;
          config.sampling.temperature = 0.0f;
          config.max_new_tokens = budget;
          config.draft_length = draft_length;
          const auto expected = plain.generate(prompt, config);
          const auto by_ngram = ngram.generate(prompt, config);
          const auto by_combined = combined.generate(prompt, config);
          EXPECT_EQ(by_ngram.tokens, expected.tokens) << "V=" << vocab << " budget " << budget;
          EXPECT_EQ(by_combined.tokens, expected.tokens) << "V=" << vocab << " budget " << budget;
          ngram_stats += by_ngram.stats;
          combined_stats += by_combined.stats;
        }
      }
    }
    EXPECT_GT(ngram_stats.accepted, 100u) << "V=" << vocab;
    EXPECT_GT(ngram_stats.rejecting_rounds, 10u) << "V=" << vocab;
    EXPECT_GT(combined_stats.draft_calls, 0u) << "V=" << vocab;
    EXPECT_LT(ngram_stats.target_calls, ngram_stats.emitted) << "V=" << vocab;
  }
}

// The first three tokens of NgramDecoder at T = 1 against the target's exact law of three tokens
// (125 cells, 100k runs with fixed seeds; p >= 1e-4 to pass, as in distribution_test). The same
// decoder with the q-misreporting mutant as its proposer must fail: its exact TV, and the runs
// needed to see it (testing::samples_to_detect), are checked first.
constexpr std::size_t kRuns = 100'000;
constexpr double kMinPValue = 1e-4;
const Tokens kChiPrompt{1, 2, 3, 1, 2};

template <class Decoder>
std::vector<std::uint64_t> first_tokens_histogram(Decoder& decoder, std::size_t vocab,
                                                  std::uint64_t seed_base) {
  std::vector<std::uint64_t> counts(vocab * vocab * vocab, 0);
  specdec::GenerationConfig config;
  config.max_new_tokens = 3;
  config.draft_length = 3;
  config.logprobs = false;
  for (std::size_t i = 0; i < kRuns; ++i) {
    config.seed = seed_base + i;
    ++counts[specdec::testing::cell_of(decoder.generate(kChiPrompt, config).tokens, vocab, 3)];
  }
  return counts;
}

TEST(NgramDecoderTest, ChiSquareOfTheFirstTokensAtTemperatureOne) {
  ScriptedPair pair;  // T = 1
  const std::size_t vocab = pair.vocab();
  const std::vector<double> probabilities = specdec::testing::law_cells(
      specdec::testing::target_law(pair.target(), pair.params, kChiPrompt, 3), vocab, 3);
  const MisreportingNgramProposer<double> exact_mutant{
      .lookup = BasicNgramProposer<double>({.min_ngram = 1, .max_ngram = 3})};
  const double mutant_tv =
      law_error(exact_mutant, specdec::TokenVerifier{}, pair, kChiPrompt, /*length=*/3);
  const std::size_t needed = specdec::testing::samples_to_detect(mutant_tv, probabilities.size());
  std::printf("[ power ] mutant TV %.4g on three tokens: %zu runs detect it (kRuns = %zu)\n",
              mutant_tv, needed, kRuns);
  ASSERT_GE(kRuns, needed);

  auto target = pair.target<float>();
  specdec::NgramDecoder decoder(target, {.min_ngram = 1, .max_ngram = 3});
  const auto counts = first_tokens_histogram(decoder, vocab, 0x9a11ULL << 20);
  const auto fit = specdec::testing::chi_square_test(counts, probabilities);
  std::printf("[ chi2 ] n-gram decoder: chi2 %.1f over %zu cells, p = %.3g\n", fit.statistic,
              fit.cells, fit.p_value);
  EXPECT_GE(fit.p_value, kMinPValue);
  EXPECT_EQ(fit.impossible, 0u);

  specdec::StrategyDecoder<decltype(target), MisreportingNgramProposer<float>, StaticDraftLength,
                           specdec::TokenVerifier>
      mutant(target, MisreportingNgramProposer<float>{
                         .lookup = NgramProposer({.min_ngram = 1, .max_ngram = 3})});
  const auto mutant_fit = specdec::testing::chi_square_test(
      first_tokens_histogram(mutant, vocab, 0xbadULL << 20), probabilities);
  std::printf("[ chi2 ] mutant: chi2 %.1f, p = %.3g\n", mutant_fit.statistic, mutant_fit.p_value);
  EXPECT_LT(mutant_fit.p_value, kMinPValue) << "the chi-square test cannot see the mutant";
}

// README's n-gram example, compiled and run.
// --- README example begins ---
TEST(NgramReadmeExample, LookupOnlyAndLookupThenDraftModel) {
  specdec::testing::ScriptedPair pair;  // toy V = 5 draft / target pair (float models here)
  auto target = pair.target<float>();
  auto draft = pair.draft<float>();
  const std::vector<specdec::token_t> prompt{1, 2, 3, 4, 1, 2};

  specdec::NgramDecoder lookup(target, {.min_ngram = 2, .max_ngram = 4});  // no draft model
  specdec::NgramThenModelDecoder combined(draft, target);  // lookup, else the draft model
  specdec::AutoregressiveDecoder plain(target);

  specdec::GenerationConfig config;
  config.draft_length = 8;          // a lookup that keeps matching drafts far: a larger K pays
  config.sampling.temperature = 0;  // greedy: exactly the tokens of plain greedy decoding
  const auto expected = plain.generate(prompt, config).tokens;
  EXPECT_EQ(lookup.generate(prompt, config).tokens, expected);
  EXPECT_EQ(combined.generate(prompt, config).tokens, expected);
  EXPECT_GT(lookup.proposer().work().tokens_indexed, 0u);
  EXPECT_GT(combined.proposer().primary_rounds(), 0u);  // rounds the lookup drafted
}
// --- README example ends ---

}  // namespace

// StringLevelProposer (proposers/string_level.hpp) and StringLevelDecoder: a draft of another
// tokenizer drafts text, re-tokenized by the target's tokenizer.
//   - the mechanics on crafted drafts: a draft token of several bytes proposes several target
//     tokens from one call; the seam (the target's tokenization of the committed text's tail
//     and the draft text disagrees: the draft text is tokenized alone); a proposed token that a
//     later re-tokenization changes stops the round; the draft's end-of-text token; the draft
//     context follows the committed text across rollbacks;
//   - exactness: exact enumeration (testing.hpp) of rounds and of whole generations under the
//     decoder's budget, against the target's law, with the token and block verifiers, at
//     several temperatures and filters and greedy (TV < 1e-9);
//   - the decoder: greedy output equals plain greedy decoding token for token; a chi-square test
//     of the first tokens at T = 1 (100k runs, p >= 1e-4), which a proposer misreporting q fails;
//   - rejection sampling (SLRS) for a byte-level target: exact enumeration with both verifiers,
//     with and without healing, with a draft byte the target has no token for; it accepts
//     more than exact match; chi-square through the decoder; greedy identity;
//   - bad input: options, tokenizers that do not spell the text, a draft row of another width,
//     NaN logits, a throwing draft: a clear error, and the next generate() is a fresh one's.
#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "specdec/specdec.hpp"
#include "specdec/testing.hpp"

#include "../sampling_cases.hpp"

namespace {

using specdec::ByteTokenizer;
using specdec::DraftRequest;
using specdec::SamplingParams;
using specdec::StaticDraftLength;
using specdec::StringLevelOptions;
using specdec::StringLevelProposer;
using specdec::token_t;
using specdec::testing::ScriptedModel;
using specdec::testing::ScriptedPair;
using specdec::testing::Sequence;
using specdec_test::processed_case;
using specdec_test::sampling_case;
using specdec_test::SamplingCase;

constexpr double kExactnessBound = 1e-9;

// A vocabulary of fixed strings, tokenized by longest match (the longest token that matches at
// each position); "" is a special token (no text).
struct TableTokenizer {
  std::vector<std::string> tokens;
  bool broken = false;  // encode() appends a token that does not spell the text

  [[nodiscard]] std::string_view bytes(token_t id) const {
    if (id < 0 || static_cast<std::size_t>(id) >= tokens.size()) {
      throw std::out_of_range("TableTokenizer: no token " + std::to_string(id));
    }
    return tokens[static_cast<std::size_t>(id)];
  }
  void encode(std::string_view text, std::vector<token_t>& out) const {
    std::size_t at = 0;
    while (at < text.size()) {
      std::size_t best = tokens.size();
      for (std::size_t id = 0; id < tokens.size(); ++id) {
        const std::string& token = tokens[id];
        if (!token.empty() && text.substr(at, token.size()) == token &&
            (best == tokens.size() || token.size() > tokens[best].size())) {
          best = id;
        }
      }
      if (best == tokens.size()) {
        throw std::invalid_argument("TableTokenizer: byte " + std::to_string(at) + " of \"" +
                                    std::string(text) + "\" has no token");
      }
      out.push_back(broken ? static_cast<token_t>((best + 1) % 3) : static_cast<token_t>(best));
      at += tokens[best].size();
    }
  }
};

// Target: "a", "b", "c", "ab" and an end-of-text token. Draft: "a", "b", "c", "ab", "bc",
// "ca", "abc" and an end-of-text token (also its context's first token).
TableTokenizer target_tokenizer() { return {{"a", "b", "c", "ab", ""}}; }
TableTokenizer draft_tokenizer() { return {{"a", "b", "c", "ab", "bc", "ca", "abc", ""}}; }
constexpr std::size_t kTargetVocab = 5;
constexpr std::size_t kDraftVocab = 8;
constexpr token_t kDraftEos = 7;
constexpr token_t kTargetEos = 4;

// sample_draft: the draft's tokens drawn from its law (its coins enumerated by the exact tests)
// rather than its argmax.
StringLevelOptions foreign_options(bool sample_draft = false) {
  return {.draft_prefix = {kDraftEos},
          .draft_eos = kDraftEos,
          .target_eos = kTargetEos,
          .sample_draft = sample_draft};
}

// The same without token healing: the crafted drafts below see the whole committed text.
StringLevelOptions unhealed(StringLevelOptions options = foreign_options()) {
  options.heal_last_token = false;
  return options;
}

// A context-dependent scripted draft over its own 8 ids.
template <class Scalar>
struct ForeignDraft {
  ScriptedModel model{.salt = 23, .vocab = kDraftVocab, .scale = 2.0};
  std::size_t returned_size = kDraftVocab;  // != kDraftVocab: a broken draft
  bool nan = false;
  bool throws = false;
  std::size_t calls = 0;
  std::vector<Scalar> operator()(std::span<const token_t> context) {
    ++calls;
    if (throws) throw std::runtime_error("draft engine failed");
    const std::vector<double> row = model.logits(context);
    std::vector<Scalar> out(row.begin(), row.end());
    out.resize(returned_size, Scalar(0));
    if (nan) out[1] = std::numeric_limits<Scalar>::quiet_NaN();
    return out;
  }
};

// A draft that drafts the given draft tokens in turn (greedy: a one-hot row), whatever the
// context.
struct ScriptDraft {
  explicit ScriptDraft(std::vector<token_t> tokens) : script(std::move(tokens)) {}
  std::vector<token_t> script;
  std::size_t next = 0;
  std::vector<std::vector<token_t>> contexts;  // what each call saw
  std::vector<float> operator()(std::span<const token_t> context) {
    contexts.emplace_back(context.begin(), context.end());
    std::vector<float> row(kDraftVocab, 0.0f);
    row[static_cast<std::size_t>(script[next % script.size()])] = 5.0f;
    ++next;
    return row;
  }
};

ScriptedPair target_pair(const SamplingParams& params) {
  ScriptedPair pair;
  pair.target_model = {.salt = 11, .vocab = kTargetVocab, .scale = 2.0};
  pair.params = params;
  return pair;
}

// One propose() on `context` (target ids) with a fixed limit.
template <class Proposer>
std::vector<token_t> propose_once(Proposer& proposer, std::vector<token_t> context,
                                  std::size_t limit) {
  SamplingParams greedy;
  greedy.temperature = 0;
  std::size_t vocab = 0;
  specdec::DecodeStats stats;
  context.reserve(context.size() + limit + 1);
  DraftRequest request(context, limit, greedy, vocab, stats);
  specdec::Rng rng(1);
  specdec::DraftCoins coins(rng);
  const auto proposal = proposer.propose(request, coins);
  for (std::size_t i = 0; i < proposal.size(); ++i) EXPECT_TRUE(proposal.is_point_mass(i));
  return {proposal.tokens.begin(), proposal.tokens.end()};
}

// ---- mechanics ---------------------------------------------------------------------------------

TEST(StringLevelProposer, OneDraftCallOfSeveralBytesProposesSeveralTargetTokens) {
  const ByteTokenizer bytes;
  const TableTokenizer draft_vocabulary = draft_tokenizer();
  // "abc", then "ca": the byte-level target's tokens are the bytes.
  ScriptDraft draft{{6, 5}};
  StringLevelProposer proposer(draft, draft_vocabulary, bytes,
                               {.draft_prefix = {kDraftEos}, .heal_last_token = false});
  const std::vector<token_t> got = propose_once(proposer, {'a', 'b'}, 5);
  EXPECT_EQ(got, (std::vector<token_t>{'a', 'b', 'c', 'c', 'a'}));
  EXPECT_EQ(draft.next, 2u);  // 5 bytes from two draft calls
  EXPECT_EQ(proposer.work().proposed_tokens, 5u);
  EXPECT_DOUBLE_EQ(proposer.work().tokens_per_draft_call(), 2.5);
  // The draft saw its prefix and the committed text "ab" as one draft token.
  ASSERT_FALSE(draft.contexts.empty());
  EXPECT_EQ(draft.contexts[0], (std::vector<token_t>{kDraftEos, 3}));
  EXPECT_EQ(proposer.committed_text(), "ab");
}

TEST(StringLevelProposer, SeamThatTheTargetWouldMergeFallsBackToTheDraftTextAlone) {
  const TableTokenizer target_vocabulary = target_tokenizer();
  const TableTokenizer draft_vocabulary = draft_tokenizer();
  // Committed "c a"; the draft continues "bc": the target tokenizes "a" + "bc" as "ab", "c",
  // which does not start with the committed "a", so "bc" is tokenized alone: "b", "c".
  ScriptDraft draft{{4, 2}};
  StringLevelProposer proposer(draft, draft_vocabulary, target_vocabulary, unhealed());
  const std::vector<token_t> got = propose_once(proposer, {2, 0}, 2);
  EXPECT_EQ(got, (std::vector<token_t>{1, 2}));
  EXPECT_GE(proposer.work().seam_fallbacks, 1u);
  // Where the seam agrees it is used: committed "a b", draft "ab" -> "ab" + "ab" = "ab", "ab".
  ScriptDraft joined{{3, 2}};
  StringLevelProposer agreeing(joined, draft_vocabulary, target_vocabulary, unhealed());
  EXPECT_EQ(propose_once(agreeing, {3}, 2), (std::vector<token_t>{3, 2}));
  EXPECT_EQ(agreeing.work().seam_fallbacks, 0u);
}

// A target tokenizer that splits into bytes, except that a text ending in "c" starts with the
// token "ab": the first token changes after it was proposed.
struct ShiftingTokenizer {
  [[nodiscard]] std::string_view bytes(token_t id) const {
    static const std::vector<std::string> table{"a", "b", "c", "ab", ""};
    return table.at(static_cast<std::size_t>(id));
  }
  void encode(std::string_view text, std::vector<token_t>& out) const {
    std::size_t at = 0;
    if (text.size() >= 3 && text.substr(0, 2) == "ab" && text.back() == 'c') {
      out.push_back(3);
      at = 2;
    }
    for (; at < text.size(); ++at) out.push_back(static_cast<token_t>(text[at] - 'a'));
  }
};

TEST(StringLevelProposer, ATokenChangedByALaterRetokenizationStopsTheRound) {
  const ShiftingTokenizer shifting;
  const TableTokenizer draft_vocabulary = draft_tokenizer();
  ScriptDraft draft{{0, 1, 2, 0}};  // "a", "b", "c", ...
  StringLevelProposer proposer(
      draft, draft_vocabulary, shifting,
      {.draft_prefix = {kDraftEos}, .target_look_behind = 0, .heal_last_token = false});
  // "a" is proposed once "ab" shows it final; "abc" re-tokenizes it into "ab": the round stops.
  EXPECT_EQ(propose_once(proposer, {2}, 4), (std::vector<token_t>{0}));
  EXPECT_EQ(proposer.work().retokenization_stops, 1u);
}

TEST(StringLevelProposer, TheDraftsEndOfTextIsProposedAsTheTargetsAndEndsTheRound) {
  const TableTokenizer target_vocabulary = target_tokenizer();
  const TableTokenizer draft_vocabulary = draft_tokenizer();
  ScriptDraft draft{{2, kDraftEos, 0}};
  StringLevelProposer proposer(draft, draft_vocabulary, target_vocabulary, unhealed());
  EXPECT_EQ(propose_once(proposer, {0}, 4), (std::vector<token_t>{2, kTargetEos}));
  // Without a target_eos the drafting just ends.
  ScriptDraft plain{{2, kDraftEos, 0}};
  StringLevelProposer ending(
      plain, draft_vocabulary, target_vocabulary,
      {.draft_prefix = {kDraftEos}, .draft_eos = kDraftEos, .heal_last_token = false});
  EXPECT_EQ(propose_once(ending, {0}, 4), (std::vector<token_t>{2}));
}

TEST(StringLevelProposer, HealingHoldsTheLastDraftTokenBackAndProposesOnlyNewBytes) {
  const ByteTokenizer bytes;
  const TableTokenizer draft_vocabulary = draft_tokenizer();
  // Committed "ca" is the draft token "ca": held back, the draft sees its prefix alone. It
  // writes "ca" again (healed, nothing proposed), then "abc": three new bytes.
  ScriptDraft draft{{5, 6}};
  StringLevelProposer proposer(draft, draft_vocabulary, bytes, {.draft_prefix = {kDraftEos}});
  EXPECT_EQ(propose_once(proposer, {'c', 'a'}, 3), (std::vector<token_t>{'a', 'b', 'c'}));
  ASSERT_EQ(draft.contexts.size(), 2u);
  EXPECT_EQ(draft.contexts[0], (std::vector<token_t>{kDraftEos}));
  EXPECT_EQ(draft.contexts[1], (std::vector<token_t>{kDraftEos, 5}));
  EXPECT_EQ(proposer.work().healed_rounds, 1u);
  // After the round the draft context is the committed text's tokens again.
  EXPECT_EQ(std::vector<token_t>(proposer.draft_context().begin(), proposer.draft_context().end()),
            (std::vector<token_t>{kDraftEos, 5}));

  // Committed "ab" (the draft token "ab"): "a" heals a part, "bc" the rest and writes "c".
  ScriptDraft partial{{0, 4}};
  StringLevelProposer partly(partial, draft_vocabulary, bytes, {.draft_prefix = {kDraftEos}});
  EXPECT_EQ(propose_once(partly, {'a', 'b'}, 1), (std::vector<token_t>{'c'}));

  // A draft token that disagrees with the healed bytes is masked: the draft's "c" after a
  // held-back "ab" cannot be drawn; of the tokens that agree ("a", "ab", "abc", equal logits)
  // the first is.
  ScriptDraft disagreeing{{2}};
  StringLevelProposer masked(disagreeing, draft_vocabulary, bytes, {.draft_prefix = {kDraftEos}});
  EXPECT_EQ(propose_once(masked, {'a', 'b'}, 1), (std::vector<token_t>{'c'}));
}

TEST(StringLevelProposer, TheDraftContextSpellsTheCommittedTextAcrossRollbacks) {
  const TableTokenizer target_vocabulary = target_tokenizer();
  const TableTokenizer draft_vocabulary = draft_tokenizer();
  ForeignDraft<float> draft;
  StringLevelProposer proposer(draft, draft_vocabulary, target_vocabulary, foreign_options());
  const auto spelled = [&] {
    std::string text;
    const auto context = proposer.draft_context();
    EXPECT_EQ(context.front(), kDraftEos);
    for (std::size_t i = 1; i < context.size(); ++i) text += draft_vocabulary.bytes(context[i]);
    return text;
  };
  // Contexts that extend, roll back and diverge, as a decoder's committed tokens do.
  const std::vector<std::vector<token_t>> contexts{
      {0, 1, 2}, {0, 1, 2, 3, 2}, {0, 1, 2, 3, 2, 0, 0}, {0, 1, 2, 1}, {2, 2, 2, 3}, {2}};
  for (const auto& context : contexts) {
    (void)propose_once(proposer, context, 3);
    std::string committed;
    for (const token_t token : context) committed += target_vocabulary.bytes(token);
    EXPECT_EQ(proposer.committed_text(), committed);
    EXPECT_EQ(spelled(), committed);
  }
}

// ---- exactness -----------------------------------------------------------------------------

std::vector<SamplingCase> params_cases() {
  return {sampling_case("T=1", 1.0f),
          sampling_case("T=0.6", 0.6f),
          sampling_case("top_k=2", 1.0f, 2),
          sampling_case("top_p=0.7", 1.0f, 0, 0.7f),
          sampling_case("min_p=0.2", 1.0f, 0, 1.0f, 0.2f),
          sampling_case("greedy", 0.0f),
          processed_case("T=0.9+processor", 0.9f, /*bans=*/false)};
}

const std::vector<Sequence> kContexts{{0, 1}, {2, 0}, {3, 4, 1}};

TEST(StringLevelExactness, RoundsThroughTokenAndBlockVerifiers) {
  const TableTokenizer target_vocabulary = target_tokenizer();
  const TableTokenizer draft_vocabulary = draft_tokenizer();
  ForeignDraft<double> draft;
  for (const bool sample_draft : {false, true}) {
    const StringLevelProposer proposer(draft, draft_vocabulary, target_vocabulary,
                                       foreign_options(sample_draft));
    for (const SamplingCase& params_case : params_cases()) {
      SCOPED_TRACE(sample_draft ? "sampled draft" : "the draft's argmax");
      const ScriptedPair pair = target_pair(params_case.params);
      double accepted = 0;
      for (const Sequence& context : kContexts) {
        for (const std::size_t draft_length : {1u, 3u}) {
          SCOPED_TRACE(params_case.name + " context " + std::to_string(context.size()) +
                       " K=" + std::to_string(draft_length));
          const auto token = specdec::testing::certify_round(
              proposer, StaticDraftLength{}, specdec::TokenVerifier{}, pair.target(), pair.params,
              context, draft_length);
          const auto block = specdec::testing::certify_round(
              proposer, StaticDraftLength{}, specdec::BlockVerifier{}, pair.target(), pair.params,
              context, draft_length);
          EXPECT_LT(token.total_variation, kExactnessBound);
          EXPECT_LT(block.total_variation, kExactnessBound);
          accepted += token.expected_accepted;
        }
      }
      // Not a vacuous pass (greedy drafts on these few contexts happen to miss every time; the
      // greedy decoder test below sees acceptances).
      if (!params_case.params.greedy()) {
        EXPECT_GT(accepted, 0.1) << params_case.name;
      }
    }
  }
}

TEST(StringLevelExactness, GenerationsComposedUnderTheDecodersBudget) {
  const TableTokenizer target_vocabulary = target_tokenizer();
  const TableTokenizer draft_vocabulary = draft_tokenizer();
  ForeignDraft<double> draft;
  const StringLevelProposer proposer(draft, draft_vocabulary, target_vocabulary,
                                     foreign_options(/*sample_draft=*/true));
  for (const SamplingCase& params_case : params_cases()) {
    SCOPED_TRACE(params_case.name);
    const ScriptedPair pair = target_pair(params_case.params);
    const auto law =
        specdec::testing::speculative_law(proposer, StaticDraftLength{}, specdec::TokenVerifier{},
                                          pair.target(), pair.params, {0, 1}, 4, 2);
    const auto target = specdec::testing::target_law(pair.target(), pair.params, {0, 1}, 4);
    EXPECT_LT(specdec::testing::total_variation(law, target), kExactnessBound);
  }
}

// ---- the decoder -----------------------------------------------------------------------------

TEST(StringLevelDecoder, GreedyIsThePlainTargetTokenForToken) {
  const TableTokenizer target_vocabulary = target_tokenizer();
  const TableTokenizer draft_vocabulary = draft_tokenizer();
  ScriptedPair pair = target_pair({});
  ScriptedPair::Target<float> target{&pair};
  ForeignDraft<float> draft;
  specdec::StringLevelDecoder decoder(draft, draft_vocabulary, target, target_vocabulary,
                                      foreign_options());
  specdec::AutoregressiveDecoder plain(target);
  specdec::GenerationConfig config;
  config.sampling.temperature = 0;
  config.max_new_tokens = 64;
  specdec::DecodeStats total;
  for (const Sequence& prompt : kContexts) {
    for (const auto verifier : {specdec::VerifierKind::token, specdec::VerifierKind::block}) {
      for (const std::size_t k : {1u, 4u, 8u}) {
        config.verifier = verifier;
        config.draft_length = k;
        const auto expected = plain.generate(prompt, config);
        const auto got = decoder.generate(prompt, config);
        EXPECT_EQ(got.tokens, expected.tokens) << "K=" << k;
        total += got.stats;
      }
    }
  }
  EXPECT_GT(total.accepted, 20u);
  EXPECT_GT(decoder.proposer().work().seam_fallbacks + decoder.proposer().work().draft_calls, 0u);
}

// Reports the string-level proposal with a uniform q instead of a point mass: wrong.
template <class Scalar>
struct MisreportingStringLevel {
  StringLevelProposer<ForeignDraft<Scalar>, TableTokenizer, TableTokenizer> inner;
  std::vector<Scalar> uniform = std::vector<Scalar>(8 * kTargetVocab, Scalar(1));
  std::vector<Scalar> normalizers = std::vector<Scalar>(8, Scalar(kTargetVocab));

  void begin(const specdec::GenerationConfig& config) { inner.begin(config); }
  template <class Coins>
  specdec::Proposal<Scalar> propose(DraftRequest& request, Coins& coins) {
    specdec::Proposal<Scalar> proposal = inner.propose(request, coins);
    proposal.point_mass = {};
    proposal.q_weights = specdec::LogitsRows<Scalar>(
        std::span<const Scalar>(uniform.data(), proposal.size() * kTargetVocab), kTargetVocab,
        kTargetVocab);
    proposal.q_normalizers = std::span<const Scalar>(normalizers.data(), proposal.size());
    return proposal;
  }
};

constexpr std::size_t kRuns = 100'000;
constexpr double kMinPValue = 1e-4;
const Sequence kChiPrompt{0, 1, 2};

/// The cell of three tokens in a histogram of vocab^3 cells.
std::size_t cell_of(std::span<const token_t> tokens, std::size_t vocab) {
  const auto t = [&](std::size_t k) { return static_cast<std::size_t>(tokens[k]); };
  return (t(0) * vocab + t(1)) * vocab + t(2);
}

/// The target's law of the three tokens after kChiPrompt, as a histogram's probabilities.
std::vector<double> first_tokens_law(const ScriptedPair& pair, std::size_t vocab) {
  std::vector<double> probabilities(vocab * vocab * vocab, 0);
  for (const auto& [sequence, p] :
       specdec::testing::target_law(pair.target(), pair.params, kChiPrompt, 3)) {
    probabilities[cell_of(sequence, vocab)] = p;
  }
  return probabilities;
}

/// The first three tokens of kRuns generations (seeds from seed_base), over a vocabulary of
/// `vocab` tokens.
template <class Decoder>
std::vector<std::uint64_t> first_tokens_histogram(Decoder& decoder, std::size_t vocab,
                                                  std::uint64_t seed_base,
                                                  specdec::GenerationConfig config) {
  std::vector<std::uint64_t> counts(vocab * vocab * vocab, 0);
  config.max_new_tokens = 3;
  config.draft_length = 3;
  for (std::size_t i = 0; i < kRuns; ++i) {
    config.seed = seed_base + i;
    const auto result = decoder.generate(kChiPrompt, config);
    if (result.tokens.size() != 3) {
      ADD_FAILURE() << "seed " << config.seed << ": " << result.tokens.size()
                    << " tokens, expected 3";
      continue;
    }
    ++counts[cell_of(result.tokens, vocab)];
  }
  return counts;
}

TEST(StringLevelDecoder, ChiSquareOfTheFirstTokensAtTemperatureOneAndWithFilters) {
  const TableTokenizer target_vocabulary = target_tokenizer();
  const TableTokenizer draft_vocabulary = draft_tokenizer();
  struct Case {
    std::string name;
    SamplingParams params;
    specdec::VerifierKind verifier;
    bool sample_draft = false;
  };
  SamplingParams filtered;
  filtered.temperature = 0.8f;
  filtered.top_k = 4;
  filtered.top_p = 0.95f;
  for (const Case& c : {Case{"T=1 token", {}, specdec::VerifierKind::token},
                        Case{"T=0.8 top-k 4 top-p 0.95 block, sampled draft", filtered,
                             specdec::VerifierKind::block, true}}) {
    SCOPED_TRACE(c.name);
    const ScriptedPair pair = target_pair(c.params);
    const std::vector<double> probabilities = first_tokens_law(pair, kTargetVocab);
    ScriptedPair::Target<float> target{&pair};
    ForeignDraft<float> draft;
    specdec::StringLevelDecoder decoder(draft, draft_vocabulary, target, target_vocabulary,
                                        foreign_options(c.sample_draft));
    specdec::GenerationConfig config;
    config.sampling = c.params;
    config.verifier = c.verifier;
    const auto fit = specdec::testing::chi_square_test(
        first_tokens_histogram(decoder, kTargetVocab, 0x5e1ULL << 20, config), probabilities);
    std::printf("[ chi2 ] string-level decoder, %s: chi2 %.1f over %zu cells, p = %.3g\n",
                c.name.c_str(), fit.statistic, fit.cells, fit.p_value);
    EXPECT_GE(fit.p_value, kMinPValue);
    EXPECT_EQ(fit.impossible, 0u);
    EXPECT_GT(decoder.proposer().work().proposed_tokens, kRuns);

    if (c.verifier != specdec::VerifierKind::token) continue;
    // The test's power: the same proposals with q misreported as uniform fail it.
    ForeignDraft<float> mutant_draft;
    specdec::StrategyDecoder<decltype(target), MisreportingStringLevel<float>, StaticDraftLength,
                             specdec::TokenVerifier>
        mutant(target,
               MisreportingStringLevel<float>{.inner = {mutant_draft, draft_vocabulary,
                                                        target_vocabulary, foreign_options()}});
    const auto mutant_fit = specdec::testing::chi_square_test(
        first_tokens_histogram(mutant, kTargetVocab, 0xbadULL << 20, config), probabilities);
    std::printf("[ chi2 ] mutant: chi2 %.1f, p = %.3g\n", mutant_fit.statistic, mutant_fit.p_value);
    EXPECT_LT(mutant_fit.p_value, kMinPValue) << "the chi-square test cannot see the mutant";
  }
}

// ---- rejection sampling (SLRS) ------------------------------------------------------------------

// A byte-level target over the bytes "a", "b", "c" (ids 0..2) and an end-of-text token (3):
// one token per byte; other bytes have no token.
struct AbcByteTokenizer {
  static constexpr bool one_token_per_byte = true;
  [[nodiscard]] std::string_view bytes(token_t id) const {
    static const std::vector<std::string> table{"a", "b", "c", ""};
    return table.at(static_cast<std::size_t>(id));
  }
  void encode(std::string_view text, std::vector<token_t>& out) const {
    for (const char c : text) {
      if (c < 'a' || c > 'c') throw std::invalid_argument("AbcByteTokenizer: no token");
      out.push_back(static_cast<token_t>(c - 'a'));
    }
  }
};
constexpr std::size_t kByteTargetVocab = 4;
constexpr token_t kByteTargetEos = 3;

// The draft tokenizer with "cx" for "ca": a byte ("x") the target has no token for.
TableTokenizer draft_tokenizer_with_x() { return {{"a", "b", "c", "ab", "bc", "cx", "abc", ""}}; }

StringLevelOptions rejection_options(bool heal, bool rejection = true) {
  return {.draft_prefix = {kDraftEos},
          .draft_eos = kDraftEos,
          .target_eos = kByteTargetEos,
          .sample_draft = true,
          .heal_last_token = heal,
          .rejection_sampling = rejection,
          .target_vocab_size = kByteTargetVocab};
}

ScriptedPair byte_target_pair(const SamplingParams& params) {
  ScriptedPair pair;
  pair.target_model = {.salt = 11, .vocab = kByteTargetVocab, .scale = 2.0};
  pair.params = params;
  return pair;
}

const std::vector<Sequence> kByteContexts{{0, 1}, {1, 2, 0}};

TEST(StringLevelRejection, RoundsAreExactThroughTokenAndBlockVerifiersAndAcceptMore) {
  const AbcByteTokenizer target_vocabulary;
  // Healed and not; with a draft byte the target has no token for (healed).
  for (const auto& [with_x, heal] :
       {std::pair{false, true}, std::pair{false, false}, std::pair{true, true}}) {
    const TableTokenizer draft_vocabulary = with_x ? draft_tokenizer_with_x() : draft_tokenizer();
    ForeignDraft<double> draft;
    {
      const StringLevelProposer rejection(draft, draft_vocabulary, target_vocabulary,
                                          rejection_options(heal));
      const StringLevelProposer exact(draft, draft_vocabulary, target_vocabulary,
                                      rejection_options(heal, /*rejection=*/false));
      for (const SamplingCase& params_case : params_cases()) {
        if (params_case.name == "T=0.6" || params_case.name == "top_p=0.7") continue;  // time
        const ScriptedPair pair = byte_target_pair(params_case.params);
        double accepted = 0;
        double exact_accepted = 0;
        for (const Sequence& context : kByteContexts) {
          for (const std::size_t draft_length : {1u, 3u}) {
            SCOPED_TRACE(params_case.name + (with_x ? " with x" : "") + (heal ? " healed" : "") +
                         " context " + std::to_string(context.size()) +
                         " K=" + std::to_string(draft_length));
            const auto token = specdec::testing::certify_round(
                rejection, StaticDraftLength{}, specdec::TokenVerifier{}, pair.target(),
                pair.params, context, draft_length);
            const auto block = specdec::testing::certify_round(
                rejection, StaticDraftLength{}, specdec::BlockVerifier{}, pair.target(),
                pair.params, context, draft_length);
            EXPECT_LT(token.total_variation, kExactnessBound);
            EXPECT_LT(block.total_variation, kExactnessBound);
            accepted += token.expected_accepted;
            if (with_x) continue;  // exact match cannot re-tokenize an "x" for this target
            exact_accepted += specdec::testing::certify_round(
                                  exact, StaticDraftLength{}, specdec::TokenVerifier{},
                                  pair.target(), pair.params, context, draft_length)
                                  .expected_accepted;
          }
        }
        if (with_x) {
          if (!params_case.params.greedy()) {
            EXPECT_GT(accepted, 0.1) << params_case.name;
          }
        } else if (params_case.params.greedy()) {
          EXPECT_NEAR(accepted, exact_accepted, 1e-12) << "greedy rounds are exact match";
        } else {
          // min(1, p / q) >= p byte by byte: never fewer, here clearly more.
          EXPECT_GT(accepted, exact_accepted + 0.05) << params_case.name;
        }
      }
    }
  }
}

TEST(StringLevelRejection, GenerationsComposedUnderTheDecodersBudget) {
  const AbcByteTokenizer target_vocabulary;
  const TableTokenizer draft_vocabulary = draft_tokenizer();
  ForeignDraft<double> draft;
  const StringLevelProposer proposer(draft, draft_vocabulary, target_vocabulary,
                                     rejection_options(/*heal=*/true));
  for (const SamplingCase& params_case : params_cases()) {
    SCOPED_TRACE(params_case.name);
    const ScriptedPair pair = byte_target_pair(params_case.params);
    // Both verifiers' rounds are certified above; composed, the token verifier everywhere and
    // the block verifier where a filter cuts the law.
    const bool filtered = params_case.params.top_k != 0 || params_case.params.top_p < 1.0f ||
                          params_case.params.min_p > 0.0f;
    for (const auto& verifier : {specdec::VerifierKind::token, specdec::VerifierKind::block}) {
      if (verifier == specdec::VerifierKind::block && !filtered) continue;
      const auto law = verifier == specdec::VerifierKind::token
                           ? specdec::testing::speculative_law(
                                 proposer, StaticDraftLength{}, specdec::TokenVerifier{},
                                 pair.target(), pair.params, {0, 1}, 4, 3)
                           : specdec::testing::speculative_law(
                                 proposer, StaticDraftLength{}, specdec::BlockVerifier{},
                                 pair.target(), pair.params, {0, 1}, 4, 3);
      const auto target = specdec::testing::target_law(pair.target(), pair.params, {0, 1}, 4);
      EXPECT_LT(specdec::testing::total_variation(law, target), kExactnessBound);
    }
  }
}

TEST(StringLevelRejection, ChiSquareThroughTheDecoderAndGreedyIdentity) {
  const AbcByteTokenizer target_vocabulary;
  const TableTokenizer draft_vocabulary = draft_tokenizer();
  SamplingParams filtered;
  filtered.temperature = 0.8f;
  filtered.top_k = 3;
  filtered.top_p = 0.95f;
  struct Case {
    std::string name;
    SamplingParams params;
    specdec::VerifierKind verifier;
  };
  for (const Case& c :
       {Case{"T=1 token", {}, specdec::VerifierKind::token},
        Case{"T=0.8 top-k 3 top-p 0.95 block", filtered, specdec::VerifierKind::block}}) {
    SCOPED_TRACE(c.name);
    const ScriptedPair pair = byte_target_pair(c.params);
    const std::vector<double> probabilities = first_tokens_law(pair, kByteTargetVocab);
    ScriptedPair::Target<float> target{&pair};
    ForeignDraft<float> draft;
    specdec::StringLevelDecoder decoder(draft, draft_vocabulary, target, target_vocabulary,
                                        rejection_options(/*heal=*/true));
    specdec::GenerationConfig config;
    config.sampling = c.params;
    config.verifier = c.verifier;
    const auto fit = specdec::testing::chi_square_test(
        first_tokens_histogram(decoder, kByteTargetVocab, 0x51a5ULL << 20, config), probabilities);
    std::printf(
        "[ chi2 ] string-level rejection sampling, %s: chi2 %.1f over %zu cells, p = %.3g\n",
        c.name.c_str(), fit.statistic, fit.cells, fit.p_value);
    EXPECT_GE(fit.p_value, kMinPValue);
    EXPECT_EQ(fit.impossible, 0u);
    EXPECT_GT(decoder.proposer().work().rejection_rounds, kRuns / 2);
  }

  ScriptedPair pair = byte_target_pair({});
  ScriptedPair::Target<float> target{&pair};
  ForeignDraft<float> draft;
  specdec::StringLevelDecoder decoder(draft, draft_vocabulary, target, target_vocabulary,
                                      rejection_options(/*heal=*/true));
  specdec::AutoregressiveDecoder plain(target);
  specdec::GenerationConfig config;
  config.sampling.temperature = 0;
  config.max_new_tokens = 48;
  for (const Sequence& prompt : kByteContexts) {
    for (const std::size_t k : {1u, 4u}) {
      config.draft_length = k;
      EXPECT_EQ(decoder.generate(prompt, config).tokens, plain.generate(prompt, config).tokens);
    }
  }
  EXPECT_EQ(decoder.proposer().work().rejection_rounds, 0u) << "greedy rounds are exact match";
}

TEST(StringLevelRejection, NeedsAByteLevelTargetAndItsVocabularySize) {
  const TableTokenizer target_vocabulary = target_tokenizer();
  const TableTokenizer draft_vocabulary = draft_tokenizer();
  ForeignDraft<float> draft;
  try {
    StringLevelProposer proposer(draft, draft_vocabulary, target_vocabulary,
                                 rejection_options(true));
    ADD_FAILURE() << "rejection sampling was accepted for a target that joins bytes";
  } catch (const std::invalid_argument& error) {
    EXPECT_NE(std::string(error.what()).find("one token per byte"), std::string::npos)
        << error.what();
  }
  StringLevelOptions no_size = rejection_options(true);
  no_size.target_vocab_size = 0;
  EXPECT_THROW(no_size.validate(), std::invalid_argument);

  // A wrong target_vocab_size: the round says so, and the decoder is usable afterwards.
  const AbcByteTokenizer bytes;
  ScriptedPair pair = byte_target_pair({});
  ScriptedPair::Target<float> target{&pair};
  StringLevelOptions wrong = rejection_options(true);
  wrong.target_vocab_size = 7;
  specdec::StringLevelDecoder decoder(draft, draft_vocabulary, target, bytes, wrong);
  specdec::GenerationConfig config;
  config.max_new_tokens = 8;
  const Sequence prompt{0, 1};
  try {
    (void)decoder.generate(prompt, config);
    ADD_FAILURE() << "q rows of the wrong width were accepted";
  } catch (const std::invalid_argument& error) {
    EXPECT_NE(std::string(error.what()).find("7"), std::string::npos) << error.what();
  }
  config.sampling.temperature = 0;
  EXPECT_EQ(decoder.generate(prompt, config).tokens.size(), 8u);
}

// ---- bad input -------------------------------------------------------------------------------

TEST(StringLevelOptions, OutOfRangeOptionsAreRejectedByName) {
  const auto rejects = [](const StringLevelOptions& options, const char* field) {
    try {
      options.validate();
      ADD_FAILURE() << "accepted a bad " << field;
    } catch (const std::invalid_argument& error) {
      EXPECT_NE(std::string(error.what()).find(field), std::string::npos) << error.what();
    }
  };
  rejects({.draft_look_behind = 65}, "draft_look_behind");
  rejects({.target_look_behind = 100}, "target_look_behind");
  rejects({.target_eos = 3}, "target_eos");
  rejects({.draft_prefix = {-2}}, "draft_prefix");
  rejects({.max_draft_calls_per_token = 0}, "max_draft_calls_per_token");
  EXPECT_NO_THROW(foreign_options().validate());
  EXPECT_THROW((void)ByteTokenizer{}.bytes(256), std::invalid_argument);
}

TEST(StringLevelDecoder, BadInputIsAClearErrorAndTheNextDecodeIsClean) {
  TableTokenizer target_vocabulary = target_tokenizer();
  TableTokenizer draft_vocabulary = draft_tokenizer();
  ScriptedPair pair = target_pair({});
  ScriptedPair::Target<float> target{&pair};
  ForeignDraft<float> draft;
  specdec::StringLevelDecoder decoder(draft, draft_vocabulary, target, target_vocabulary,
                                      foreign_options());
  specdec::GenerationConfig config;
  config.max_new_tokens = 24;
  config.seed = 7;
  const Sequence prompt{0, 1, 2};
  const auto fresh = [&] {
    ForeignDraft<float> fresh_draft;
    specdec::StringLevelDecoder fresh_decoder(fresh_draft, draft_vocabulary, target,
                                              target_vocabulary, foreign_options());
    return fresh_decoder.generate(prompt, config).tokens;
  };
  const auto expect_error = [&](const char* what, const char* needle, auto&& exception_type) {
    using Exception = std::remove_cvref_t<decltype(exception_type)>;
    try {
      (void)decoder.generate(prompt, config);
      ADD_FAILURE() << what << " was accepted";
    } catch (const Exception& error) {
      EXPECT_NE(std::string(error.what()).find(needle), std::string::npos)
          << what << ": " << error.what();
    }
  };
  draft_vocabulary.broken = true;
  expect_error("a draft tokenizer that does not spell the text", "draft tokenizer",
               std::invalid_argument(""));
  draft_vocabulary.broken = false;
  EXPECT_EQ(decoder.generate(prompt, config).tokens, fresh());

  target_vocabulary.broken = true;
  expect_error("a target tokenizer that does not spell the text", "target tokenizer",
               std::invalid_argument(""));
  target_vocabulary.broken = false;
  EXPECT_EQ(decoder.generate(prompt, config).tokens, fresh());

  // The first call establishes the width; a later call of another width is an error.
  struct Widening {
    ForeignDraft<float>* inner;
    std::vector<float> operator()(std::span<const token_t> context) {
      std::vector<float> row = (*inner)(context);
      if (inner->calls > 1) row.push_back(0.0f);
      return row;
    }
  };
  ForeignDraft<float> widening_inner;
  Widening widening{&widening_inner};
  specdec::StringLevelDecoder widening_decoder(widening, draft_vocabulary, target,
                                               target_vocabulary, foreign_options());
  try {
    (void)widening_decoder.generate(prompt, config);
    ADD_FAILURE() << "a draft row of another width was accepted";
  } catch (const std::domain_error& error) {
    EXPECT_NE(std::string(error.what()).find("string-level draft model"), std::string::npos)
        << error.what();
  }

  draft.nan = true;
  expect_error("NaN draft logits", "string-level draft model logits", std::domain_error(""));
  draft.nan = false;
  EXPECT_EQ(decoder.generate(prompt, config).tokens, fresh());

  draft.throws = true;
  expect_error("a throwing draft", "draft engine failed", std::runtime_error(""));
  draft.throws = false;
  EXPECT_EQ(decoder.generate(prompt, config).tokens, fresh());
}

}  // namespace

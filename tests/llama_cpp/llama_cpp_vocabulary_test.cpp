// The llama.cpp adapter's graded vocabulary check (specdec/llama_cpp/vocabulary.hpp):
//
// - on synthetic vocabularies (VocabularyText by hand, no model): identical; padded by 32
//   (compatible, "padded (32 extra draft ids, all unused)"); padded by 200 (beyond llama.cpp's
//   128: not padded-compatible, intersection); one differing token text at id 7; a different
//   BOS; disjoint. Each verdict's description says why;
// - on the GGUF files the build writes: the shipped draft and its padded re-export
//   (kjv-draft-padded-f16.gguf) grade compatible against the target, the strict
//   check_compatible still refuses anything but one vocabulary, the disjoint pair is refused
//   with either requirement, and MappedDraft over the padded draft returns, row for row and bit
//   for bit, the rows of the unpadded draft (zero padding rows, dropped by the map);
// - VocabularyTokenizer spells text that is not valid UTF-8 (cut characters, stray bytes) with
//   the vocabulary's byte tokens, names the byte a vocabulary without them cannot write, and
//   string-level drafting over llama.cpp decodes from such a prompt (greedy: the plain output).

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include <specdec/llama_cpp.hpp>
#include <specdec/specdec.hpp>

namespace {

namespace fs = std::filesystem;
namespace llama = specdec::llama_cpp;
using specdec::token_t;
using specdec::VocabularyVerdict;

const fs::path kGgufDir = SPECDEC_GGUF_DIR;

/// `prefix` followed by `number` (appended: GCC 12 at -O3 warns falsely on "t" + std::string,
/// bug 105329).
std::string numbered(const char* prefix, std::size_t number, const char* suffix = "") {
  std::string text(prefix);
  text.append(std::to_string(number));
  text.append(suffix);
  return text;
}

/// A byte-level vocabulary of `size` ordinary tokens "t0", "t1", ... (BPE, EOS 0, no BOS
/// added), with `pad` unused tokens "<|pad_i|>" appended.
llama::VocabularyText synthetic(std::size_t size, std::size_t pad = 0) {
  llama::VocabularyText vocabulary;
  for (std::size_t id = 0; id < size; ++id) vocabulary.tokens.push_back(numbered("t", id));
  vocabulary.unused.assign(size, false);
  for (std::size_t i = 0; i < pad; ++i) {
    vocabulary.special_ids.push_back(static_cast<token_t>(vocabulary.tokens.size()));
    vocabulary.tokens.push_back(numbered("<|pad_", i, "|>"));
    vocabulary.unused.push_back(true);
  }
  vocabulary.type = "bpe";
  vocabulary.encoding = specdec::TokenEncoding::plain;
  vocabulary.bos = 1;
  vocabulary.eos = 0;
  return vocabulary;
}

template <class Exception, class F>
void expect_error(F&& f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "expected an exception containing '" << needle << "'";
  } catch (const Exception& error) {
    const std::string message = error.what();
    EXPECT_EQ(message.rfind("specdec: ", 0), 0u) << message;
    EXPECT_NE(message.find(needle), std::string::npos) << message;
  }
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(LlamaVocabularyCheck, Identical) {
  const llama::VocabularyCheck check(synthetic(1000), synthetic(1000));
  EXPECT_EQ(check.verdict(), VocabularyVerdict::identical) << check.description();
  EXPECT_FALSE(check.needs_map());
  EXPECT_EQ(check.summary(), "identical (1000 tokens)");
}

TEST(LlamaVocabularyCheck, PaddedBy32IsCompatibleAfterMapping) {
  const llama::VocabularyCheck check(synthetic(1000, 32), synthetic(1000));
  EXPECT_EQ(check.verdict(), VocabularyVerdict::compatible) << check.description();
  EXPECT_TRUE(check.needs_map());
  EXPECT_EQ(check.extra_ids(), 32u);
  EXPECT_EQ(check.unused_extra_ids(), 32u);
  EXPECT_EQ(check.summary(), "padded (32 extra draft ids, all unused)");
  EXPECT_TRUE(contains(check.description(), "sizes 1032 and 1000")) << check.description();
  // The map is the identity on the shared ids; the padding has no target id.
  EXPECT_TRUE(check.map().identity_on_shared());
  EXPECT_EQ(check.map().draft_to_target()[999], 999);
  EXPECT_EQ(check.map().draft_to_target()[1000], -1);
  // Padding on the target's side (Qwen2.5-0.5B's 151,936 against 7B's 152,064) too.
  const llama::VocabularyCheck target_padded(synthetic(1000), synthetic(1000, 32));
  EXPECT_EQ(target_padded.verdict(), VocabularyVerdict::compatible);
  EXPECT_EQ(target_padded.summary(), "padded (32 extra target ids, all unused)");
  // Extra ids that are ordinary tokens: near-identical, not "padded".
  const llama::VocabularyCheck grown(synthetic(1032), synthetic(1000));
  EXPECT_EQ(grown.verdict(), VocabularyVerdict::compatible);
  EXPECT_EQ(grown.summary(), "near-identical (32 extra draft ids, 0 of them unused)");
}

TEST(LlamaVocabularyCheck, PaddedBy200IsBeyondLlamaCppsRule) {
  const llama::VocabularyCheck check(synthetic(1000, 200), synthetic(1000));
  EXPECT_EQ(check.verdict(), VocabularyVerdict::needs_intersection) << check.description();
  EXPECT_TRUE(check.needs_map());
  EXPECT_TRUE(contains(check.description(), "sizes 1200 and 1000 differ by more than 128"))
      << check.description();
  EXPECT_TRUE(contains(check.summary(), "token-level intersection (1000 shared tokens"))
      << check.summary();
  EXPECT_TRUE(contains(check.description(), "100.0%")) << check.description();
}

TEST(LlamaVocabularyCheck, OneDifferingTokenTextAtId7) {
  llama::VocabularyText draft = synthetic(1000);
  draft.tokens[7] = "seven";
  const llama::VocabularyCheck check(draft, synthetic(1000));
  EXPECT_EQ(check.verdict(), VocabularyVerdict::needs_intersection) << check.description();
  const std::string why = check.description();
  EXPECT_TRUE(contains(why, "token 7 differs (draft \"seven\", target \"t7\")")) << why;
  EXPECT_TRUE(contains(why, "shared 999 of the draft's 1000 (99.9%)")) << why;
}

TEST(LlamaVocabularyCheck, DifferentBos) {
  llama::VocabularyText draft = synthetic(1000);
  draft.bos = 2;
  const llama::VocabularyCheck check(draft, synthetic(1000));
  EXPECT_EQ(check.verdict(), VocabularyVerdict::needs_intersection) << check.description();
  EXPECT_TRUE(contains(check.description(), "BOS/EOS handling differs (draft bos 2"))
      << check.description();
}

TEST(LlamaVocabularyCheck, Disjoint) {
  llama::VocabularyText draft = synthetic(500);
  for (std::string& token : draft.tokens) token.insert(0, "d");
  const llama::VocabularyCheck check(draft, synthetic(1000));
  EXPECT_EQ(check.verdict(), VocabularyVerdict::disjoint) << check.description();
  EXPECT_FALSE(check.needs_map());
  EXPECT_EQ(check.summary(), "disjoint");
  EXPECT_TRUE(contains(check.description(), "share no ordinary token")) << check.description();
  EXPECT_TRUE(contains(check.description(), "first difference: token 5 is \"dt5\""))
      << check.description();
}

TEST(LlamaVocabularyCheck, SpecialTokensThatDifferAreNamed) {
  llama::VocabularyText draft = synthetic(1000);
  draft.tokens[3] = "<|im_start|>";
  draft.special_ids = {3};
  const llama::VocabularyCheck check(draft, synthetic(1000));
  EXPECT_EQ(check.verdict(), VocabularyVerdict::compatible) << check.description();
  EXPECT_TRUE(contains(check.description(), "draft special 3 \"<|im_start|>\""))
      << check.description();
}

// ---- the GGUF files the build writes ----------------------------------------------------------

TEST(LlamaVocabularyCheck, ShippedPaddedDraftIsCompatibleWithTheTarget) {
  auto target = llama::LoadedModel::load(kGgufDir / "kjv-target-f16.gguf");
  auto padded = llama::LoadedModel::load(kGgufDir / "kjv-draft-padded-f16.gguf");
  auto draft = llama::LoadedModel::load(kGgufDir / "kjv-draft-f16.gguf");
  EXPECT_EQ(llama::check_compatible(draft.model(), target.model()).verdict(),
            VocabularyVerdict::identical);
  const llama::VocabularyCheck check = llama::check_compatible(
      padded.model(), target.model(), llama::VocabularyRequirement::mappable);
  EXPECT_EQ(check.verdict(), VocabularyVerdict::compatible) << check.description();
  EXPECT_EQ(check.summary(), "padded (32 extra draft ids, all unused)");
  // The strict requirement (the default, for a draft used as it is) refuses it, saying why.
  expect_error<std::domain_error>(
      [&] { (void)llama::check_compatible(padded.model(), target.model()); },
      "draft and target vocabularies are not identical: padded (32 extra draft ids, all "
      "unused): near-identical: sizes 288 and 256");

  // Through the map, the padded draft's rows are the unpadded draft's, bit for bit: the first
  // 256 rows of its output head are the same weights, and the padding ids have no target id.
  // (Bit for bit given the same calls: llama.cpp's logits depend, in the last bits, on how the
  // tokens were batched.)
  specdec::MappedDraft mapped(padded, check.map());
  const std::vector<std::vector<token_t>> contexts{
      {10, 'I', 'n'}, {10, 'I', 'n', ' ', 't', 'h', 'e'}, {10, 'I', 'n', ' ', 'a'}};
  for (const std::vector<token_t>& context : contexts) {
    // One call each, so both KV caches see the same sequence of batches.
    const std::span<const float> unpadded = draft(context);
    const std::vector<float> expected(unpadded.begin(), unpadded.end());
    const std::span<const float> row = mapped(context);
    ASSERT_EQ(row.size(), expected.size());
    for (std::size_t t = 0; t < row.size(); ++t) {
      ASSERT_EQ(row[t], expected[t]) << "token " << t << " after " << context.size() << " tokens";
    }
  }
}

TEST(LlamaVocabularyCheck, PaddedDraftsTreeRowsAreTheUnpaddedDrafts) {
  // MappedDraft forwards the draft's score_tree (one llama_decode for the whole tree): its rows,
  // gathered into the target's ids, are the unpadded draft's tree rows bit for bit.
  const llama::ContextOptions options{.n_seq_max = 4};
  auto target = llama::LoadedModel::load(kGgufDir / "kjv-target-f16.gguf");
  auto padded = llama::LoadedModel::load(kGgufDir / "kjv-draft-padded-f16.gguf", options);
  auto draft = llama::LoadedModel::load(kGgufDir / "kjv-draft-f16.gguf", options);
  const llama::VocabularyCheck check = llama::check_compatible(
      padded.model(), target.model(), llama::VocabularyRequirement::mappable);
  specdec::MappedDraft mapped(padded, check.map());
  const std::vector<token_t> committed{10, 'I', 'n', ' '};
  const std::vector<token_t> tokens{'t', 'a', 'h', 'n'};
  const std::vector<std::int32_t> parents{-1, -1, 0, 1};  // "th", "an"
  const std::span<const float> unpadded = draft.score_tree(committed, tokens, parents);
  const std::vector<float> expected(unpadded.begin(), unpadded.end());
  const std::span<const float> rows = mapped.score_tree(committed, tokens, parents);
  ASSERT_EQ(rows.size(), expected.size());
  ASSERT_EQ(rows.size(), 5 * 256u);
  for (std::size_t i = 0; i < rows.size(); ++i) {
    ASSERT_EQ(rows[i], expected[i]) << "row " << i / 256 << ", token " << i % 256;
  }
}

TEST(LlamaVocabularyCheck, DisjointPairIsRefusedWithEitherRequirement) {
  auto target = llama::LoadedModel::load(kGgufDir / "kjv-target-f16.gguf");
  auto disjoint = llama::LoadedModel::load(kGgufDir / "tiny-disjoint.gguf");
  for (const auto requirement :
       {llama::VocabularyRequirement::identical, llama::VocabularyRequirement::mappable}) {
    expect_error<std::domain_error>(
        [&] { (void)llama::check_compatible(disjoint.model(), target.model(), requirement); },
        "draft and target vocabularies are disjoint: the draft's 16 tokens and the target's 256 "
        "share no ordinary token");
  }
}

TEST(LlamaVocabularyTokenizer, SpellsTextThatIsNotValidUtf8WithByteTokens) {
  auto target = llama::LoadedModel::load(kGgufDir / "kjv-target-f16.gguf");
  auto bpe = llama::LoadedModel::load(kGgufDir / "kjv-bpe-draft-f16.gguf");
  const std::vector<std::string> texts{
      "\nIN the beginning God",  // valid: one llama_tokenize call
      "the LORD\xE2\x80",        // a character cut short at the end
      "a\x80"
      "b c\xFF\xFE d",                   // stray continuation and invalid bytes
      "\xC3\xA9t\xC3\xA9 \xE0\x80\x80",  // valid "é", then an overlong form
      "\xED\xA0\x80 x",                  // a surrogate
  };
  for (const auto* model : {&target, &bpe}) {
    const llama::VocabularyTokenizer tokenizer(model->vocab());
    for (const std::string& text : texts) {
      std::vector<token_t> tokens;
      tokenizer.encode(text, tokens);
      std::string spelled;
      for (const token_t token : tokens) spelled += tokenizer.bytes(token);
      EXPECT_EQ(spelled, text) << tokens.size() << " tokens";
      EXPECT_TRUE(tokenizer.spells(text));
    }
  }
  // The BPE vocabulary still merges the valid runs: fewer tokens than bytes.
  const llama::VocabularyTokenizer bpe_tokens(bpe.vocab());
  std::vector<token_t> tokens;
  bpe_tokens.encode("and the LORD said\x80 unto Moses", tokens);
  EXPECT_LT(tokens.size(), 20u);

  auto disjoint = llama::LoadedModel::load(kGgufDir / "tiny-disjoint.gguf");
  const llama::VocabularyTokenizer few(disjoint.vocab());
  EXPECT_FALSE(few.spells("\x80"));
  expect_error<std::invalid_argument>(
      [&] {
        std::vector<token_t> out;
        few.encode("\x80", out);
      },
      "byte 128 at 0 is not valid UTF-8");
}

TEST(LlamaVocabularyTokenizer, StringLevelDraftingFromAPromptThatIsNotValidUtf8) {
  auto target = llama::LoadedModel::load(kGgufDir / "kjv-target-f16.gguf");
  auto bpe = llama::LoadedModel::load(kGgufDir / "kjv-bpe-draft-f16.gguf");
  const llama::VocabularyTokenizer target_tokens(target.vocab());
  const llama::VocabularyTokenizer draft_tokens(bpe.vocab());
  std::vector<token_t> prompt;
  for (const unsigned char byte : std::string("\nAnd God said, Let there be \xC3")) {
    prompt.push_back(byte);
  }
  for (const bool rejection : {false, true}) {
    specdec::StringLevelDecoder decoder(
        bpe, draft_tokens, target, target_tokens,
        {.rejection_sampling = rejection, .target_vocab_size = target_tokens.size()});
    specdec::AutoregressiveDecoder plain(target);
    specdec::GenerationConfig config;
    config.max_new_tokens = 40;
    config.sampling.temperature = 0;
    target.reset();
    bpe.reset();
    const auto expected = plain.generate(prompt, config);
    target.reset();
    const auto got = decoder.generate(prompt, config);
    EXPECT_EQ(got.tokens, expected.tokens);
    config.sampling.temperature = 1;
    config.seed = 3;
    target.reset();
    bpe.reset();
    EXPECT_EQ(decoder.generate(prompt, config).tokens.size(), 40u);
    EXPECT_GT(decoder.proposer().work().draft_calls, 0u);
  }
}

}  // namespace

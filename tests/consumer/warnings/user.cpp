// A user's translation unit, built by scripts/consumer-test.sh as an error on -Wall -Wextra
// -Wpedantic and the stricter warnings of CMakeLists.txt, by GCC and by Clang, portable and with
// -march=native (where the AVX-512 kernels are compiled): including specdec must not make a
// user's build warn. It includes only <specdec/specdec.hpp> and instantiates what a program does
// with it: speculative and plain decoding, greedy and sampled (T = 1, top-p, top-k with min-p),
// with a logits processor, token-level and block verification, every built-in draft-length
// policy, n-gram lookup alone and before the draft model, tree drafts (fixed and budgeted
// shapes, every sibling mode, both tree verifiers, a target with score_tree and the pathwise
// adapter), string-level drafting by a draft of another tokenizer; it checks that greedy
// speculative decoding reproduces greedy plain decoding.

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <span>
#include <specdec/specdec.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace {

// Three 1024-token kernel blocks, the last one partial.
constexpr std::size_t kVocab = 2500;

// A deterministic logit in [-4, 4) for a token after a context (its length and last token).
float base_logit(std::size_t length, specdec::token_t last, std::size_t token) {
  std::uint64_t h = (length * 0x9E3779B97F4A7C15ull) ^ (static_cast<std::uint64_t>(last) << 32) ^
                    (token * 0xBF58476D1CE4E5B9ull);
  h ^= h >> 31;
  h *= 0x94D049BB133111EBull;
  h ^= h >> 29;
  return static_cast<float>(h >> 40) / static_cast<float>(1u << 24) * 8.0f - 4.0f;
}

// The target's tokenizer for string-level drafting: token i stands for the byte 'A' + i % 50.
struct LetterTokenizer {
  static constexpr std::size_t kLetters = 50;
  [[nodiscard]] std::string_view bytes(specdec::token_t id) const {
    static const std::string letters = [] {
      std::string all;
      for (std::size_t i = 0; i < kLetters; ++i) all += static_cast<char>('A' + i);
      return all;
    }();
    return std::string_view(letters).substr(static_cast<std::size_t>(id) % kLetters, 1);
  }
  void encode(std::string_view text, std::vector<specdec::token_t>& out) const {
    for (const char c : text) out.push_back(static_cast<specdec::token_t>(c - 'A'));
  }
};

// A byte-level draft that writes only those letters.
struct ByteDraft {
  std::vector<float> row = std::vector<float>(256);
  std::span<const float> operator()(std::span<const specdec::token_t> context) {
    for (std::size_t b = 0; b < row.size(); ++b) {
      row[b] = b >= 'A' && b < 'A' + LetterTokenizer::kLetters
                   ? base_logit(context.size(), context.back(), b)
                   : -std::numeric_limits<float>::infinity();
    }
    return row;
  }
};

struct Target {
  std::vector<float> rows;
  // Row i follows the first context.size() - n + 1 + i tokens.
  std::span<const float> operator()(std::span<const specdec::token_t> context, std::size_t n) {
    rows.resize(n * kVocab);
    for (std::size_t i = 0; i < n; ++i) {
      const std::size_t length = context.size() - n + 1 + i;
      for (std::size_t token = 0; token < kVocab; ++token) {
        rows[i * kVocab + token] = base_logit(length, context[length - 1], token);
      }
    }
    return rows;
  }
};

// The same target with the tree call: row 0 after the committed tokens, row 1 + i after the
// path to node i.
struct TreeTarget : Target {
  std::vector<float> tree_rows;
  std::span<const float> score_tree(std::span<const specdec::token_t> committed,
                                    std::span<const specdec::token_t> tokens,
                                    std::span<const std::int32_t> parents) {
    tree_rows.resize((tokens.size() + 1) * kVocab);
    for (std::size_t i = 0; i <= tokens.size(); ++i) {
      std::size_t length = committed.size();
      specdec::token_t last = committed.back();
      if (i > 0) {
        last = tokens[i - 1];
        for (std::int32_t v = static_cast<std::int32_t>(i) - 1; v >= 0;
             v = parents[static_cast<std::size_t>(v)]) {
          ++length;
        }
      }
      for (std::size_t token = 0; token < kVocab; ++token) {
        tree_rows[i * kVocab + token] = base_logit(length, last, token);
      }
    }
    return tree_rows;
  }
};

// The target's logits, sharpened and shifted a little: close, not equal.
struct Draft {
  std::vector<float> row = std::vector<float>(kVocab);
  std::span<const float> operator()(std::span<const specdec::token_t> context) {
    for (std::size_t token = 0; token < kVocab; ++token) {
      row[token] = 1.1f * base_logit(context.size(), context.back(), token) + 0.1f;
    }
    return row;
  }
};

}  // namespace

int main() {
  Draft draft;
  Target target;
  specdec::SpeculativeDecoder speculative(draft, target);
  specdec::AutoregressiveDecoder plain(target);
  const std::vector<specdec::token_t> prompt = {1, 2, 3};

  specdec::GenerationConfig config;
  config.draft_length = 4;
  config.max_new_tokens = 24;
  config.seed = 7;

  config.sampling.temperature = 0.0f;
  const specdec::GenerationResult greedy = speculative.generate(prompt, config);
  const specdec::GenerationResult greedy_plain = plain.generate(prompt, config);
  if (greedy.tokens != greedy_plain.tokens) {
    std::fprintf(stderr, "consumer warnings test: FAILED, greedy speculative != greedy plain\n");
    return 1;
  }

  std::size_t sampled_tokens = 0;
  auto sample = [&](const specdec::SamplingParams& sampling) {
    config.sampling = sampling;
    sampled_tokens += speculative.generate(prompt, config).tokens.size();
    sampled_tokens += plain.generate(prompt, config).tokens.size();
  };
  specdec::SamplingParams sampling;
  sampling.temperature = 1.0f;
  sample(sampling);
  sampling.top_p = 0.9f;
  sample(sampling);
  sampling.top_p = 1.0f;
  sampling.top_k = 50;
  sampling.min_p = 0.05f;
  sampling.logits_processor = [](std::span<const specdec::token_t> context,
                                 std::span<float> logits) {
    logits[static_cast<std::size_t>(context.back())] -= 1.0f;  // a repetition penalty
  };
  sample(sampling);
  if (sampled_tokens != 6 * config.max_new_tokens) {
    std::fprintf(stderr, "consumer warnings test: FAILED, %zu sampled tokens; expected %zu\n",
                 sampled_tokens, 6 * config.max_new_tokens);
    return 1;
  }
  // Every draft-length policy, both verifiers, n-gram lookup: greedy must still be plain greedy.
  config.sampling = specdec::SamplingParams{};
  config.sampling.temperature = 0.0f;
  config.draft_length = 8;
  specdec::NgramDecoder lookup(target, {.min_ngram = 2, .max_ngram = 4});
  specdec::NgramThenModelDecoder combined(draft, target);
  for (const specdec::DraftLengthKind kind :
       {specdec::DraftLengthKind::schedule, specdec::DraftLengthKind::confidence,
        specdec::DraftLengthKind::goodput}) {
    config.draft_length_policy.kind = kind;
    for (const specdec::VerifierKind verifier :
         {specdec::VerifierKind::token, specdec::VerifierKind::block}) {
      config.verifier = verifier;
      if (speculative.generate(prompt, config).tokens != greedy_plain.tokens ||
          lookup.generate(prompt, config).tokens != greedy_plain.tokens ||
          combined.generate(prompt, config).tokens != greedy_plain.tokens) {
        std::fprintf(stderr,
                     "consumer warnings test: FAILED, a policy or verifier changed greedy\n");
        return 1;
      }
      config.sampling.temperature = 1.0f;  // and sampled, for the verifiers' sampling paths
      sampled_tokens += speculative.generate(prompt, config).tokens.size();
      sampled_tokens += combined.generate(prompt, config).tokens.size();
      config.sampling.temperature = 0.0f;
    }
  }
  // String-level drafting: a byte-level draft's text, re-tokenized by the target's tokenizer.
  const specdec::ByteTokenizer draft_bytes;
  const LetterTokenizer letters;
  ByteDraft byte_draft;
  specdec::StringLevelDecoder string_level(byte_draft, draft_bytes, target, letters);
  for (const specdec::VerifierKind verifier :
       {specdec::VerifierKind::token, specdec::VerifierKind::block}) {
    config.verifier = verifier;
    config.sampling.temperature = 0.0f;
    if (string_level.generate(prompt, config).tokens != greedy_plain.tokens) {
      std::fprintf(stderr,
                   "consumer warnings test: FAILED, string-level drafting changed greedy\n");
      return 1;
    }
    config.sampling.temperature = 1.0f;
    sampled_tokens += string_level.generate(prompt, config).tokens.size();
  }
  // Tree drafts: every sibling mode, fixed and budgeted shapes, both tree verifiers; a target
  // with score_tree and one served by chain calls per path.
  TreeTarget tree_target;
  specdec::PathwiseTreeTarget<Target> pathwise(target);
  config.draft_length_policy.kind = specdec::DraftLengthKind::fixed;
  config.draft_length = 12;
  for (const specdec::SiblingMode mode :
       {specdec::SiblingMode::with_replacement, specdec::SiblingMode::without_replacement,
        specdec::SiblingMode::top_k}) {
    for (const specdec::TreeShape& shape :
         {specdec::TreeShape::parse("3x2x1"), specdec::TreeShape::dynamic(10)}) {
      const specdec::TreeOptions options{shape, mode};
      specdec::StrategyDecoder rrs(tree_target, specdec::TreeProposer(draft, options),
                                   specdec::StaticDraftLength{}, specdec::TreeVerifier{});
      specdec::StrategyDecoder traversal(pathwise, specdec::TreeProposer(draft, options),
                                         specdec::StaticDraftLength{},
                                         specdec::TraversalVerifier{});
      config.sampling.temperature = 0.0f;
      if (rrs.generate(prompt, config).tokens != greedy_plain.tokens ||
          traversal.generate(prompt, config).tokens != greedy_plain.tokens) {
        std::fprintf(stderr, "consumer warnings test: FAILED, a tree draft changed greedy\n");
        return 1;
      }
      config.sampling.temperature = 1.0f;
      sampled_tokens += rrs.generate(prompt, config).tokens.size();
      sampled_tokens += traversal.generate(prompt, config).tokens.size();
    }
  }
  std::printf("consumer warnings test: OK (%zu greedy tokens in %zu rounds, %zu sampled)\n",
              greedy.tokens.size(), static_cast<std::size_t>(greedy.stats.rounds), sampled_tokens);
  return 0;
}

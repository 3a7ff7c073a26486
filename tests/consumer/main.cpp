// A downstream program, built by the consumer projects in find_package/ and add_subdirectory/:
// it only includes <specdec/specdec.hpp>, links specdec::specdec and runs greedy decoding.
//
// Toy models over V = 8 tokens: the target always prefers (last + 1) mod 8; the draft agrees
// except after token 5, where it guesses 0. Greedy speculative decoding must reproduce the
// target's own greedy sequence exactly, with some drafts rejected along the way.

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <span>
#include <specdec/specdec.hpp>
#include <vector>

namespace {

constexpr std::size_t kVocab = 8;

struct CountingDraft {
  std::vector<float> row = std::vector<float>(kVocab);
  std::span<const float> operator()(std::span<const specdec::token_t> context) {
    const auto last = static_cast<std::size_t>(context.back());
    std::fill(row.begin(), row.end(), 0.0f);
    row[last == 5 ? 0 : (last + 1) % kVocab] = 1.0f;
    return row;
  }
};

struct CountingTarget {
  std::vector<float> rows;
  // Row i follows the first context.size() - n + 1 + i tokens.
  std::span<const float> operator()(std::span<const specdec::token_t> context, std::size_t n) {
    rows.assign(n * kVocab, 0.0f);
    for (std::size_t i = 0; i < n; ++i) {
      const auto last = static_cast<std::size_t>(context[context.size() - n + i]);
      rows[i * kVocab + (last + 1) % kVocab] = 1.0f;
    }
    return rows;
  }
};

}  // namespace

int main() {
  CountingDraft draft;
  CountingTarget target;
  specdec::SpeculativeDecoder<CountingDraft, CountingTarget> decoder(draft, target);

  specdec::GenerationConfig config;
  config.draft_length = 4;
  config.max_new_tokens = 20;
  config.sampling.temperature = 0.0f;
  const std::vector<specdec::token_t> prompt = {3};
  const specdec::GenerationResult result = decoder.generate(prompt, config);

  std::vector<specdec::token_t> expected;
  for (std::size_t i = 0; i < config.max_new_tokens; ++i) {
    expected.push_back(static_cast<specdec::token_t>((3 + 1 + i) % kVocab));
  }
  std::printf("specdec consumer: %zu tokens in %zu rounds (%zu drafts rejected):",
              result.tokens.size(), static_cast<std::size_t>(result.stats.rounds),
              static_cast<std::size_t>(result.stats.rejecting_rounds));
  for (const specdec::token_t token : result.tokens) std::printf(" %d", static_cast<int>(token));
  std::printf("\n");

  if (result.tokens != expected) {
    std::fprintf(stderr, "specdec consumer: FAILED, expected (last + 1) mod %zu after prompt 3\n",
                 kVocab);
    return 1;
  }
  if (result.stats.rejecting_rounds == 0 || result.stats.rounds >= config.max_new_tokens) {
    std::fprintf(stderr, "specdec consumer: FAILED, expected both accepted and rejected drafts\n");
    return 1;
  }
  std::printf("specdec consumer: OK\n");
  return 0;
}

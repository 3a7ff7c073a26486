// Must not compile: StringLevelDecoder's target tokenizer has bytes() but no encode().
// Expected diagnostic: "specdec: a string-level tokenizer must provide std::string_view
// bytes(token_t id) const ... and void encode(...)".
#include <span>
#include <string_view>
#include <vector>

#include "specdec/specdec.hpp"

struct Draft {
  std::vector<float> operator()(std::span<const specdec::token_t>) const {
    return std::vector<float>(256, 0.0f);
  }
};
struct Target {
  std::vector<float> operator()(std::span<const specdec::token_t>, std::size_t n) const {
    return std::vector<float>(n * 256, 0.0f);
  }
};
struct BytesOnly {  // no encode()
  [[nodiscard]] std::string_view bytes(specdec::token_t) const { return "a"; }
};

int main() {
  Draft draft;
  Target target;
  const specdec::ByteTokenizer draft_tokens;
  const BytesOnly target_tokens;
  specdec::StringLevelDecoder decoder(draft, draft_tokens, target, target_tokens);
  const std::vector<specdec::token_t> prompt{1};
  return static_cast<int>(decoder.generate(prompt, {}).tokens.size());
}

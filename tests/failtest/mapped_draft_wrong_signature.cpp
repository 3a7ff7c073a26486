// Must not compile: MappedDraft wraps a draft that takes an int instead of the token context.
// Expected diagnostic: "specdec: MappedDraft's draft must be callable as draft(std::span<const
// specdec::token_t> context) ...".
#include <string>
#include <vector>

#include "specdec/specdec.hpp"

struct DraftTakingInt {
  std::vector<float> operator()(int last_token) const {
    return std::vector<float>(2, float(last_token));
  }
};

int main() {
  const std::vector<std::string> tokens{"a", "b"};
  const specdec::VocabularyMap map({.tokens = tokens}, {.tokens = tokens});
  DraftTakingInt draft;
  specdec::MappedDraft<DraftTakingInt> mapped(draft, map);
  return static_cast<int>(mapped.map().draft_size());
}

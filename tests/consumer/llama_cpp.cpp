// A downstream program over specdec's llama.cpp adapter, built by the consumer projects in
// find_package/ and add_subdirectory/ (linking specdec::llama_cpp) and by warnings/ (GCC and
// Clang), always with the strict warnings of strict_warnings.cmake as errors.
//
//   llama_consumer [model.gguf]
//
// Without an argument it checks TextDecoder::complete_prefix, which needs no model. With a GGUF
// file it also loads it twice (draft and target: two contexts over the same weights), runs
// greedy speculative decoding for a few tokens and streams them through TextDecoder.

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <exception>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <specdec/llama_cpp.hpp>
#include <specdec/specdec.hpp>

namespace {

namespace llama = specdec::llama_cpp;

int failures = 0;

void expect_prefix(std::string_view bytes, std::size_t expected) {
  const std::size_t got = llama::TextDecoder::complete_prefix(bytes);
  if (got != expected) {
    std::fprintf(stderr, "llama consumer: complete_prefix of %zu bytes is %zu, expected %zu\n",
                 bytes.size(), got, expected);
    ++failures;
  }
}

int generate(const char* path) {
  const llama::ContextOptions options{.threads = 1};
  auto target = llama::LoadedModel::load(path, options);
  auto draft = llama::LoadedModel::load(path, options);
  llama::check_compatible(draft.model(), target.model());

  specdec::SpeculativeDecoder decoder(draft, target);
  specdec::GenerationConfig config;
  config.max_new_tokens = 8;
  config.draft_length = 3;
  config.sampling.temperature = 0.0f;
  config.max_context = std::min(draft.max_context(), target.max_context());
  const std::vector<specdec::token_t> prompt = {1, 2, 3};
  llama::TextDecoder text(target.vocab());
  std::string streamed;
  const specdec::GenerationResult result =
      decoder.generate(prompt, config, [&](std::span<const specdec::token_t> chunk) {
        streamed += text.push(chunk);
        return true;
      });
  streamed += text.flush();

  std::printf("llama consumer: %s (V = %zu, n_ctx = %zu): %zu tokens in %zu rounds:", path,
              target.vocab_size(), target.max_context(), result.tokens.size(),
              static_cast<std::size_t>(result.stats.rounds));
  for (const specdec::token_t token : result.tokens) std::printf(" %d", static_cast<int>(token));
  std::printf(" (%zu bytes of text)\n", streamed.size());
  if (result.tokens.size() != config.max_new_tokens) {
    std::fprintf(stderr, "llama consumer: FAILED, expected %zu tokens\n", config.max_new_tokens);
    return 1;
  }
  for (const specdec::token_t token : result.tokens) {
    if (token < 0 || static_cast<std::size_t>(token) >= target.vocab_size()) {
      std::fprintf(stderr, "llama consumer: FAILED, token %d outside the vocabulary\n",
                   static_cast<int>(token));
      return 1;
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  expect_prefix("", 0);
  expect_prefix("abc", 3);
  expect_prefix("a\xC3", 1);              // the lead byte of a 2-byte character: held
  expect_prefix("a\xC3\xA9", 3);          // U+00E9, complete
  expect_prefix("\xE2\x82", 0);           // 2 of the 3 bytes of U+20AC
  expect_prefix("\xE2\x82\xAC", 3);       // U+20AC, complete
  expect_prefix("x\xF0\x9F\x98", 1);      // 3 of the 4 bytes of U+1F600
  expect_prefix("x\xF0\x9F\x98\x80", 5);  // U+1F600, complete
  if (failures != 0) return 1;
  std::printf("llama consumer: complete_prefix OK\n");

  if (argc > 1) {
    try {
      if (generate(argv[1]) != 0) return 1;
    } catch (const std::exception& error) {
      std::fprintf(stderr, "llama consumer: FAILED: %s\n", error.what());
      return 1;
    }
  }
  std::printf("llama consumer: OK\n");
  return 0;
}

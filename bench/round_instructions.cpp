// round_instructions: a fixed decoding workload for instruction-count A/B comparisons of the
// library's own cost (valgrind --tool=callgrind counts instructions, which other load on the
// machine does not change, unlike the timings of round_overhead_bench).
//
//   round_instructions T K [static]
//
// Free models over a pool of 64 random rows (V = 32000, draft = target + noise), 6 generate()
// calls of 96 tokens. K = 0 builds the pool and exits: subtract its count to get the decoding
// work. "static" uses StrategyDecoder with TokenVerifier chosen at compile time instead of
// SpeculativeDecoder's run-time verifier choice. Build the same file against two checkouts
// (valgrind does not know AVX-512: compile with -march=x86-64-v3), e.g.
//   g++ -std=c++20 -O3 -march=x86-64-v3 -DNDEBUG -I<checkout>/include
//       -isystem /usr/include/eigen3 bench/round_instructions.cpp -o round_instructions
//   valgrind --tool=callgrind --callgrind-out-file=/dev/null ./round_instructions 1 5
#include <cstdio>
#include <cstdlib>
#include <random>
#include <span>
#include <string_view>
#include <vector>

#include <specdec/specdec.hpp>

namespace {

using specdec::token_t;
constexpr std::size_t kVocab = 32000;
constexpr std::size_t kPoolRows = 64;

struct Pool {
  std::vector<float> target, draft;  // target has kPoolRows + 16 wrapped rows (K + 1 contiguous)
};

Pool make_pool() {
  Pool pool;
  pool.target.resize((kPoolRows + 16) * kVocab);
  pool.draft.resize(kPoolRows * kVocab);
  std::mt19937_64 gen(7);
  std::normal_distribution<float> normal(0.f, 1.f);
  for (float& x : pool.target) x = 3.f * normal(gen);
  for (std::size_t i = 0; i < kPoolRows * kVocab; ++i) {
    pool.draft[i] = pool.target[i] + 0.6f * normal(gen);
  }
  for (std::size_t i = kPoolRows * kVocab; i < pool.target.size(); ++i) {
    pool.target[i] = pool.target[i - kPoolRows * kVocab];
  }
  return pool;
}

struct Draft {
  const Pool* pool;
  std::span<const float> operator()(std::span<const token_t> context) const {
    return {pool->draft.data() + (context.size() % kPoolRows) * kVocab, kVocab};
  }
};

struct Target {
  const Pool* pool;
  std::span<const float> operator()(std::span<const token_t> context, std::size_t n) const {
    return {pool->target.data() + ((context.size() + 1 - n) % kPoolRows) * kVocab, n * kVocab};
  }
};

template <class Decoder>
std::size_t decode(Decoder& decoder, specdec::GenerationConfig config) {
  const std::vector<token_t> prompt{1, 2, 3};
  std::size_t rounds = 0;
  for (int i = 0; i < 6; ++i) {
    config.seed = 100 + static_cast<std::uint64_t>(i);
    rounds += decoder.generate(prompt, config).stats.rounds;
  }
  return rounds;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: round_instructions T K [static]\n");
    return 2;
  }
  const Pool pool = make_pool();
  specdec::GenerationConfig config;
  config.sampling.temperature = static_cast<float>(std::atof(argv[1]));
  config.draft_length = static_cast<std::size_t>(std::atoi(argv[2]));
  config.max_new_tokens = 96;
  if (config.draft_length == 0) return 0;
  Draft draft{&pool};
  Target target{&pool};
  std::size_t rounds = 0;
  if (argc > 3 && std::string_view(argv[3]) == "static") {
    specdec::StrategyDecoder decoder(target, specdec::ModelProposer(draft),
                                     specdec::StaticDraftLength{}, specdec::TokenVerifier{});
    rounds = decode(decoder, config);
  } else {
    specdec::SpeculativeDecoder decoder(draft, target);
    rounds = decode(decoder, config);
  }
  std::printf("rounds %zu\n", rounds);
  return 0;
}

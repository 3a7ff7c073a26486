// GoodputDraftLength on a simulated pair with exact (or occasionally delayed) timings: how close
// its decisions come to the best static K on a verification cost curve, free of timing noise.
//
//   g++ -std=c++20 -O2 -Iinclude -I/usr/include/eigen3 tools/goodput_stepped_sim.cpp -o sim
//   ./sim [delayed share = 0] [generations = 100] [seed = 1] [row cost = 0.04] [step = 1.5]
//
// A round drafting n tokens costs n c + T(n + 1) (c = 0.05, 1 ms per unit), T(n) = 1 + row cost
// (n - 1), times `step` past 6 rows; acceptance is i.i.d. 0.8 and every drafted token's
// probability 0.8; 256 tokens per generation, cap K = 8. A share of the calls (the first
// argument) takes 1 + Exp(mean 2) times as long, as a call preempted on a shared machine does.
// Prints the policy's speedup under the cost model, its drafted-length histogram, its cost
// estimates at the end, and the formula's speedup of every static K (docs/benchmarks.md).

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "specdec/specdec.hpp"

int main(int argc, char** argv) {
  using specdec::DraftState;
  using specdec::RoundReport;
  const double delayed = argc > 1 ? std::atof(argv[1]) : 0.0;
  const int generations = argc > 2 ? std::atoi(argv[2]) : 100;
  const auto seed = static_cast<std::uint64_t>(argc > 3 ? std::atoll(argv[3]) : 1);
  const double row_cost = argc > 4 ? std::atof(argv[4]) : 0.04;
  const double step = argc > 5 ? std::atof(argv[5]) : 1.5;
  constexpr double kAlpha = 0.8, kDraftCost = 0.05, kUnit = 1e-3;
  constexpr std::size_t kCap = 8, kTokens = 256;
  const auto cost = [&](std::size_t rows) {
    const double linear = 1.0 + row_cost * static_cast<double>(rows - 1);
    return rows > 6 ? step * linear : linear;
  };

  specdec::GoodputDraftLength policy;
  specdec::GenerationConfig config;
  config.draft_length = kCap;
  config.max_new_tokens = kTokens;
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<double> uniform(0, 1);
  std::exponential_distribution<double> delay(0.5);
  const auto slowdown = [&] { return uniform(gen) < delayed ? 1.0 + delay(gen) : 1.0; };
  std::vector<std::size_t> histogram(kCap + 1, 0);
  double units = 0;
  std::size_t emitted = 0;
  for (int g = 0; g < generations; ++g) {
    policy.begin(config);
    std::size_t done = 0;
    while (done < kTokens) {
      const std::size_t limit = std::min(kCap, kTokens - done - 1);
      std::vector<double> probabilities;
      std::size_t n = 0;
      while (n < limit && policy.draft_more(DraftState{n, limit, probabilities})) {
        probabilities.push_back(0.8);
        ++n;
      }
      std::size_t accepted = 0;
      while (accepted < n && uniform(gen) < kAlpha) ++accepted;
      done += accepted + 1;
      emitted += accepted + 1;
      ++histogram[n];
      units += static_cast<double>(n) * kDraftCost + cost(n + 1);
      policy.observe(RoundReport{n, accepted, limit,
                                 static_cast<double>(n) * kDraftCost * kUnit * slowdown(),
                                 cost(n + 1) * kUnit * slowdown(), probabilities});
    }
  }
  std::printf("goodput: %.4f (tokens per unit; plain decoding 1)\nhistogram of drafted lengths:",
              static_cast<double>(emitted) / units);
  for (const std::size_t h : histogram) std::printf(" %zu", h);
  const specdec::GoodputEstimates estimates = policy.estimates_for(DraftState{0, kCap, {}});
  std::printf("\nT_v(n) / T_v(1) as estimated:");
  for (const double t : estimates.verify_cost) std::printf(" %.3f", t / estimates.verify_cost[0]);
  std::printf("\nstatic K:");
  for (std::size_t k = 1; k <= kCap; ++k) {
    const double tokens = (1 - std::pow(kAlpha, static_cast<double>(k) + 1)) / (1 - kAlpha);
    std::printf(" %zu: %.4f", k, tokens / (static_cast<double>(k) * kDraftCost + cost(k + 1)));
  }
  std::printf("\n");
}

#pragma once
// Named sampling settings for the exactness tests' sweeps (each test picks its own list): a
// temperature with the filters, and a context-dependent logits processor.

#include <cstddef>
#include <limits>
#include <span>
#include <string>
#include <utility>

#include "specdec/sampling.hpp"
#include "specdec/types.hpp"

namespace specdec_test {

struct SamplingCase {
  std::string name;
  specdec::SamplingParams params;
};

inline SamplingCase sampling_case(std::string name, float temperature, int top_k = 0,
                                  float top_p = 1.0f, float min_p = 0.0f) {
  specdec::SamplingParams params;
  params.temperature = temperature;
  params.top_k = top_k;
  params.top_p = top_p;
  params.min_p = min_p;
  return {std::move(name), params};
}

/// A logits processor that reads the context: the last token's logit lowered by 1.5 and, with
/// `bans`, the token (last + 2) mod V banned after contexts of odd length.
inline SamplingCase processed_case(std::string name, float temperature, bool bans) {
  specdec::SamplingParams params;
  params.temperature = temperature;
  params.logits_processor = [bans](std::span<const specdec::token_t> context,
                                   std::span<float> logits) {
    const auto last = static_cast<std::size_t>(context.back());
    logits[last] -= 1.5f;
    if (bans && context.size() % 2 == 1) {
      logits[(last + 2) % logits.size()] = -std::numeric_limits<float>::infinity();
    }
  };
  return {std::move(name), params};
}

}  // namespace specdec_test

// Helpers shared by the plain benchmark programs over the example GPT pair (gpt_verifiers,
// gpt_draft_length): "--flag value" command lines with comma-separated values, the held-out
// prompts, medians and the load average to print next to every table.
#pragma once

#include <algorithm>
#include <charconv>
#include <cstddef>
#include <fstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <specdec/types.hpp>

namespace specdec_bench {

/// "1,0.7" -> {1, 0.7}; throws std::invalid_argument naming `flag` on anything else.
inline std::vector<double> parse_list(std::string_view flag, std::string_view list) {
  std::vector<double> values;
  while (!list.empty()) {
    const std::size_t comma = list.find(',');
    const std::string_view item = list.substr(0, comma);
    double value = 0;
    const auto [end, error] = std::from_chars(item.data(), item.data() + item.size(), value);
    if (error != std::errc{} || end != item.data() + item.size() || item.empty()) {
      throw std::invalid_argument(std::string(flag) + " expects numbers, got '" +
                                  std::string(item) + "'");
    }
    values.push_back(value);
    if (comma == std::string_view::npos) break;
    list.remove_prefix(comma + 1);
  }
  return values;
}

/// Reads argv as "--flag value" pairs, calling set(flag, value) for each; `set` returns false
/// for a flag it does not know. Throws std::invalid_argument for an unknown flag or a flag
/// without a value.
template <class Set>
void parse_flags(int argc, char** argv, Set set) {
  for (int i = 1; i < argc; ++i) {
    const std::string_view flag = argv[i];
    if (i + 1 >= argc) throw std::invalid_argument(std::string(flag) + " needs a value");
    if (!set(flag, std::string_view(argv[++i]))) {
      throw std::invalid_argument("unknown option '" + std::string(flag) + "'");
    }
  }
}

/// The first number of a flag's value as a count ("--prompts 50").
inline std::size_t parse_count(std::string_view flag, std::string_view value) {
  return static_cast<std::size_t>(parse_list(flag, value).at(0));
}

/// The first `count` non-empty lines of models/prompts.txt (held-out verses), each as "\n" +
/// its bytes: a newline starts every training verse.
inline std::vector<std::vector<specdec::token_t>> read_prompts(std::size_t count) {
  std::ifstream in(SPECDEC_MODELS_DIR "/prompts.txt", std::ios::binary);
  std::vector<std::vector<specdec::token_t>> prompts;
  for (std::string line; std::getline(in, line) && prompts.size() < count;) {
    if (line.empty()) continue;
    std::vector<specdec::token_t>& prompt = prompts.emplace_back(1, specdec::token_t{'\n'});
    for (const unsigned char byte : line) prompt.push_back(byte);
  }
  return prompts;
}

inline double median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

/// "1-minute 5-minute" load averages.
inline std::string load_average() {
  std::ifstream in("/proc/loadavg");
  std::string one, five;
  in >> one >> five;
  return one + " " + five;
}

}  // namespace specdec_bench

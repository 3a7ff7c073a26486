// What the example CLIs (specdec-demo, specdec-llama) share: usage errors, number parsing with
// a message naming the flag, the draft-length policy names, JSON strings of raw bytes, and a
// main() that maps errors to exit codes (0 ok, 1 runtime error, 2 bad usage).
#pragma once

#include <charconv>
#include <cstdio>
#include <exception>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>

#include <specdec/configured_draft_length.hpp>

namespace specdec::examples {

/// A bad command line: exit status 2 and a pointer to --help.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// `text` as a Number, or a UsageError naming `flag` and what it expects.
template <class Number>
Number parse_number(std::string_view flag, std::string_view text) {
  Number value{};
  const char* end = text.data() + text.size();
  const auto [stop, error] = std::from_chars(text.data(), end, value);
  if (error != std::errc{} || stop != end || text.empty()) {
    const char* expected = std::is_floating_point_v<Number> ? "a number"
                           : std::is_signed_v<Number>       ? "an integer"
                                                            : "a non-negative integer";
    throw UsageError(std::string(flag) + " expects " + expected + ", got '" + std::string(text) +
                     "'");
  }
  return value;
}

inline DraftLengthKind parse_draft_policy(std::string_view name) {
  if (name == "fixed") return DraftLengthKind::fixed;
  if (name == "schedule") return DraftLengthKind::schedule;
  if (name == "confidence") return DraftLengthKind::confidence;
  if (name == "goodput") return DraftLengthKind::goodput;
  throw UsageError("--draft-policy expects fixed, schedule, confidence or goodput, got '" +
                   std::string(name) + "'");
}

inline const char* draft_policy_name(DraftLengthKind kind) {
  switch (kind) {
    case DraftLengthKind::fixed: return "fixed";
    case DraftLengthKind::schedule: return "schedule";
    case DraftLengthKind::confidence: return "confidence";
    case DraftLengthKind::goodput: return "goodput";
  }
  return "?";
}

/// A JSON string literal. Bytes >= 0x7f become \u00XX (byte = code point: lossless, since a
/// sampled byte sequence need not be valid UTF-8).
inline std::string json_string(std::string_view bytes) {
  std::string out = "\"";
  for (const unsigned char byte : bytes) {
    if (byte == '"' || byte == '\\') {
      out += {'\\', static_cast<char>(byte)};
    } else if (byte >= 0x20 && byte < 0x7f) {
      out += static_cast<char>(byte);
    } else {
      char escaped[8];
      std::snprintf(escaped, sizeof escaped, "\\u%04x", byte);
      out += escaped;
    }
  }
  return out + "\"";
}

/// Library and model messages start with "specdec: "; a CLI's get the program's name instead.
inline std::string_view without_prefix(std::string_view message) {
  return message.starts_with("specdec: ") ? message.substr(9) : message;
}

/// Runs `body` (returning the exit status) and maps what escapes it: a UsageError to 2, any
/// other exception to 1, each as one line on stderr behind `program`.
template <class Body>
int run_cli(const char* program, Body&& body) {
  try {
    return body();
  } catch (const UsageError& error) {
    std::fprintf(stderr, "%s: %s (see --help)\n", program, without_prefix(error.what()).data());
    return 2;
  } catch (const std::exception& error) {
    std::fprintf(stderr, "%s: error: %s\n", program, without_prefix(error.what()).data());
    return 1;
  }
}

}  // namespace specdec::examples

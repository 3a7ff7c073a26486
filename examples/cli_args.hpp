// What the example CLIs (specdec-demo, specdec-llama) share: usage errors, number parsing with
// a message naming the flag, flags that take one of a library enum's names (enum_names.hpp),
// library parse errors as usage errors, JSON strings of raw bytes, and a main() that maps
// errors to exit codes (0 ok, 1 runtime error, 2 bad usage).
#pragma once

#include <charconv>
#include <cstdio>
#include <exception>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>

#include <specdec/detail/error.hpp>
#include <specdec/enum_names.hpp>
#include <specdec/generation.hpp>

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

/// `text` as one of E's library names, or a UsageError naming `flag` and listing the names:
/// "--verifier expects token or block, got 'tree'".
template <NamedEnum E>
E parse_flag(std::string_view flag, std::string_view text) {
  if (const std::optional<E> value = try_parse<E>(text)) return *value;
  throw UsageError(std::string(flag) + " expects " + accepted_names<E>() + ", got '" +
                   std::string(text) + "'");
}

/// A library enum's name for printf: the names are string literals (NUL-terminated).
template <NamedEnum E>
const char* name_of(E value) {
  const std::string_view name = to_string(value);
  return name.empty() ? "?" : name.data();
}

/// Runs `parse` (a library call that checks a flag's value) and turns its
/// std::invalid_argument into a UsageError naming the flag: "--tree: tree shape ...".
template <class Parse>
decltype(auto) flag_value(std::string_view flag, Parse&& parse) {
  try {
    return parse();
  } catch (const std::invalid_argument& error) {
    throw UsageError(std::string(flag) + ": " + std::string(message_without_prefix(error.what())));
  }
}

/// The library's own checks of a configuration (K >= 1, temperature, top-k, ...), their message
/// as a usage error.
inline void validate_config(const GenerationConfig& config) {
  try {
    config.validate();
  } catch (const std::invalid_argument& error) {
    throw UsageError(std::string(message_without_prefix(error.what())));
  }
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

/// Runs `body` (returning the exit status) and maps what escapes it: a UsageError to 2, any
/// other exception to 1, each as one line on stderr behind `program` (which replaces the
/// "specdec: " of library messages).
template <class Body>
int run_cli(const char* program, Body&& body) {
  try {
    return body();
  } catch (const UsageError& error) {
    std::fprintf(stderr, "%s: %s (see --help)\n", program, error.what());
    return 2;
  } catch (const std::exception& error) {
    std::fprintf(stderr, "%s: error: %s\n", program, message_without_prefix(error.what()).data());
    return 1;
  }
}

}  // namespace specdec::examples

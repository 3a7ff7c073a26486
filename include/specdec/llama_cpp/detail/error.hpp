#pragma once
/// \file
/// \brief The llama.cpp adapter's error helpers (internal): specdec's "specdec: "-prefixed
/// exceptions, and what a llama_decode status means.

#include <cstdint>
#include <stdexcept>
#include <string_view>

#include "specdec/detail/error.hpp"

namespace specdec::llama_cpp {

namespace detail {

using specdec::detail::throw_domain_error;
using specdec::detail::throw_invalid_argument;

/// llama.cpp failed at run time (llama_decode): not the caller's input, not the model's output.
template <class... Parts>
[[noreturn]] void throw_runtime_error(const Parts&... parts) {
  throw std::runtime_error(specdec::detail::error_message(parts...));
}

/// What llama_decode's return code means (llama.h).
[[nodiscard]] inline std::string_view decode_status_meaning(std::int32_t status) noexcept {
  switch (status) {
    case 1:
      return "no KV cache slot for the batch: the context is full";
    case 2:
      return "aborted by the abort callback";
    case -1:
      return "invalid input batch";
    default:
      return status < -1 ? "fatal error inside llama.cpp" : "unknown status";
  }
}

}  // namespace detail

}  // namespace specdec::llama_cpp

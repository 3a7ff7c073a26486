#pragma once
/// \file
/// \brief Error formatting shared by every specdec header (internal).
///
/// Every exception specdec throws carries a message that begins with "specdec: ", names the
/// offending value and says what was expected. GCC 12 has no std::format, so messages are
/// assembled with an ostringstream; this only runs on the error path.

#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>

namespace specdec::detail {

/// \brief Concatenates the streamed parts behind the "specdec: " prefix.
template <class... Parts>
[[nodiscard]] std::string error_message(const Parts&... parts) {
  std::ostringstream stream;
  stream << "specdec: ";
  (stream << ... << parts);
  return stream.str();
}

/// \brief Bad configuration or bad caller input (prompt, parameters).
template <class... Parts>
[[noreturn]] void throw_invalid_argument(const Parts&... parts) {
  throw std::invalid_argument(error_message(parts...));
}

/// \brief Bad model output (wrong vocabulary size, wrong row count, NaN / +inf logits).
template <class... Parts>
[[noreturn]] void throw_domain_error(const Parts&... parts) {
  throw std::domain_error(error_message(parts...));
}

/// \brief Re-throws a std::domain_error raised while processing one row of model output with
/// the row named first: "specdec: <where>: <the original message after its "specdec: ">".
template <class... Where>
[[noreturn]] void throw_domain_error_for_row(const std::domain_error& error,
                                             const Where&... where) {
  std::string_view message = error.what();
  constexpr std::string_view prefix = "specdec: ";
  if (message.starts_with(prefix)) message.remove_prefix(prefix.size());
  throw_domain_error(where..., ": ", message);
}

}  // namespace specdec::detail

#pragma once
/// \file
/// \brief Error formatting shared by every specdec header (internal), and the one public helper
/// for reading specdec's messages: message_without_prefix().
///
/// Every exception specdec throws carries a message that begins with "specdec: " (kErrorPrefix),
/// names the offending value and says what was expected. GCC 12 has no std::format, so messages
/// are assembled with an ostringstream; this only runs on the error path.

#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>

namespace specdec {

/// \brief The prefix of every message specdec throws.
inline constexpr std::string_view kErrorPrefix = "specdec: ";

/// \brief `message` without its leading kErrorPrefix (unchanged if it has none): for a program
/// that puts its own name, or a flag, in front of a library message.
[[nodiscard]] constexpr std::string_view message_without_prefix(std::string_view message) noexcept {
  if (message.starts_with(kErrorPrefix)) message.remove_prefix(kErrorPrefix.size());
  return message;
}

}  // namespace specdec

namespace specdec::detail {

/// \brief Concatenates the streamed parts behind the "specdec: " prefix.
template <class... Parts>
[[nodiscard]] std::string error_message(const Parts&... parts) {
  std::ostringstream stream;
  stream << kErrorPrefix;
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
  throw_domain_error(where..., ": ", message_without_prefix(error.what()));
}

}  // namespace specdec::detail

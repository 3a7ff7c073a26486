#pragma once
/// \file
/// \brief The names of specdec's public enums, one table per enum written next to it, and the
/// functions every named enum gets from that table:
///
///   to_string(VerifierKind::block)          -> "block"
///   specdec::try_parse<VerifierKind>("tree") -> std::nullopt
///   specdec::parse<VerifierKind>("tree")     -> std::invalid_argument
///       "specdec: verifier \"tree\"; expected token or block"
///   specdec::accepted_names<VerifierKind>()  -> "token or block"
///
/// A name is what a command line, a JSON summary or a log would print; to_string and parse
/// are inverses on every enumerator. An enum is named by specialising EnumNames next to it:
///
/// \code
///   template <>
///   struct EnumNames<VerifierKind> {
///     static constexpr std::string_view what = "verifier";  // the error message's noun
///     static constexpr std::array<EnumName<VerifierKind>, 2> names{
///         {{VerifierKind::token, "token"}, {VerifierKind::block, "block"}}};
///   };
/// \endcode

#include <array>
#include <concepts>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>

#include "specdec/detail/error.hpp"

namespace specdec {

/// \brief One enumerator and its name.
template <class E>
struct EnumName {
  E value;
  std::string_view name;
};

/// \brief Specialised next to each named enum: `what` (the noun of parse's error message) and
/// `names` (a std::array of EnumName<E>, one per enumerator, in declaration order).
template <class E>
struct EnumNames;

/// \brief An enum whose names specdec knows (EnumNames<E> is specialised).
template <class E>
concept NamedEnum = std::is_enum_v<E> && requires {
  { EnumNames<E>::what } -> std::convertible_to<std::string_view>;
  EnumNames<E>::names.size();
};

/// \brief The name of `value`; "" for a value that is none of E's enumerators (a cast integer).
template <NamedEnum E>
[[nodiscard]] constexpr std::string_view to_string(E value) noexcept {
  for (const EnumName<E>& entry : EnumNames<E>::names) {
    if (entry.value == value) return entry.name;
  }
  return {};
}

/// \brief The enumerator named `name` (exact, case-sensitive), or std::nullopt.
template <NamedEnum E>
[[nodiscard]] constexpr std::optional<E> try_parse(std::string_view name) noexcept {
  for (const EnumName<E>& entry : EnumNames<E>::names) {
    if (entry.name == name) return entry.value;
  }
  return std::nullopt;
}

/// \brief E's names for a message: "a, b or c" (in declaration order).
template <NamedEnum E>
[[nodiscard]] std::string accepted_names() {
  constexpr auto& names = EnumNames<E>::names;
  std::string out;
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (i > 0) out += i + 1 == names.size() ? " or " : ", ";
    out += names[i].name;
  }
  return out;
}

/// \brief The enumerator named `name`.
/// \throws std::invalid_argument naming the bad name and listing the accepted ones, e.g.
/// "specdec: verifier \"tree\"; expected token or block".
template <NamedEnum E>
[[nodiscard]] E parse(std::string_view name) {
  if (const std::optional<E> value = try_parse<E>(name)) return *value;
  detail::throw_invalid_argument(EnumNames<E>::what, " \"", name, "\"; expected ",
                                 accepted_names<E>());
}

}  // namespace specdec

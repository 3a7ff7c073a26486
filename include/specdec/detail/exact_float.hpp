#pragma once
/// \file
/// \brief exactly_equal and friends: floating-point comparisons that are meant to be exact
/// (internal).
///
/// The library compares floats exactly where exactness is the point: a value against the
/// infinity it was initialised to (no logit seen yet, no threshold set), a temperature of zero
/// (greedy), a value copied unchanged from the one it is tested against (the max of a block).
/// Written as `a == b` these make a user's -Wfloat-equal build warn in our headers; these
/// helpers say what is meant and keep the one comparison they contain out of that warning.

#include <limits>

namespace specdec::detail {

#if defined(__GNUC__)  // GCC and Clang
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wfloat-equal"
#endif

/// a == b, exactly (so +0 == -0, and NaN equals nothing).
template <class T>
[[nodiscard]] constexpr bool exactly_equal(T a, T b) noexcept {
  return a == b;
}

#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif

/// x is -infinity.
template <class T>
[[nodiscard]] constexpr bool is_minus_infinity(T x) noexcept {
  return exactly_equal(x, -std::numeric_limits<T>::infinity());
}

/// x is +infinity.
template <class T>
[[nodiscard]] constexpr bool is_plus_infinity(T x) noexcept {
  return exactly_equal(x, std::numeric_limits<T>::infinity());
}

}  // namespace specdec::detail

#pragma once
/// \file
/// \brief Rng: xoshiro256** seeded through splitmix64, and coins computed from raw bits.
///
/// No <random> distributions are used anywhere: their algorithms are implementation-defined,
/// so the same seed would give different tokens with libstdc++ and libc++. With Rng a seed
/// gives the same coins on every compiler and platform, hence the same tokens wherever the
/// kernels round alike (builds with different SIMD exps can differ in a weight's last bits,
/// which moves a token only for a coin within that rounding of a CDF boundary).
///
/// Kernels never own an Rng: they take coins (doubles in [0, 1)) as arguments. The decoder owns
/// one Rng per generate() call and draws, per round, K_eff draft coins (one per draft sample),
/// then K_eff acceptance coins, then one final coin (residual or bonus sample).

#include <array>
#include <cstdint>

namespace specdec {

/// \brief splitmix64 step (Steele, Lea, Flood 2014); used to expand a 64-bit seed into
/// xoshiro's 256-bit state, as recommended by the xoshiro authors.
[[nodiscard]] constexpr std::uint64_t splitmix64(std::uint64_t& state) noexcept {
  std::uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

/// \brief Converts 64 random bits into a double in [0, 1): the top 53 bits times 2^-53.
///
/// Every result is a multiple of 2^-53, so the value 1.0 is impossible and [0, 1) is covered
/// uniformly on that grid.
[[nodiscard]] constexpr double uniform01_from_bits(std::uint64_t bits) noexcept {
  return static_cast<double>(bits >> 11) * 0x1.0p-53;
}

/// \brief xoshiro256** 1.0 (Blackman, Vigna 2018): a small, fast, well-tested 64-bit generator.
class Rng {
 public:
  using result_type = std::uint64_t;

  /// \brief Seeds the four state words with consecutive splitmix64 outputs (never all zero).
  explicit constexpr Rng(std::uint64_t seed = 0) noexcept {
    std::uint64_t sm = seed;
    for (auto& word : state_) word = splitmix64(sm);
  }

  /// \brief Next 64 random bits.
  constexpr std::uint64_t next() noexcept {
    const std::uint64_t result = rotl(state_[1] * 5, 7) * 9;
    const std::uint64_t t = state_[1] << 17;
    state_[2] ^= state_[0];
    state_[3] ^= state_[1];
    state_[1] ^= state_[2];
    state_[0] ^= state_[3];
    state_[2] ^= t;
    state_[3] = rotl(state_[3], 45);
    return result;
  }

  /// \brief A coin: uniform double in [0, 1) from the top 53 bits of next().
  constexpr double uniform01() noexcept { return uniform01_from_bits(next()); }

  // UniformRandomBitGenerator interface, so Rng also works with std::shuffle and friends.
  static constexpr result_type min() noexcept { return 0; }
  static constexpr result_type max() noexcept { return ~result_type{0}; }
  constexpr result_type operator()() noexcept { return next(); }

  [[nodiscard]] constexpr const std::array<std::uint64_t, 4>& state() const noexcept {
    return state_;
  }

 private:
  static constexpr std::uint64_t rotl(std::uint64_t x, int k) noexcept {
    return (x << k) | (x >> (64 - k));
  }
  std::array<std::uint64_t, 4> state_{};
};

}  // namespace specdec

// IEEE 754 binary16 ("half") -> binary32 conversion, portable C++20 (no _Float16, no F16C).
//
// The .spdc weight files store every tensor as little-endian fp16; the model converts them once at
// load time and computes in float. Every binary16 value is exactly representable as a binary32, so
// the conversion is exact: subnormals are normalised, +-inf stay infinite, NaN payloads are kept.
#pragma once

#include <bit>
#include <cstdint>

namespace specdec::examples {

/// \brief Exact value of the IEEE binary16 number with bit pattern `half_bits`, as a float.
constexpr float half_to_float(std::uint16_t half_bits) noexcept {
  // binary16: 1 sign bit | 5 exponent bits (bias 15)  | 10 mantissa bits
  // binary32: 1 sign bit | 8 exponent bits (bias 127) | 23 mantissa bits
  const std::uint32_t sign = static_cast<std::uint32_t>(half_bits & 0x8000u) << 16;
  std::uint32_t exponent = (half_bits >> 10) & 0x1fu;
  std::uint32_t mantissa = half_bits & 0x3ffu;

  std::uint32_t float_bits = 0;
  if (exponent == 0x1fu) {  // inf (mantissa 0) or NaN (payload moved to the top mantissa bits)
    float_bits = sign | 0x7f800000u | (mantissa << 13);
  } else if (exponent != 0) {  // normal: rebias the exponent 15 -> 127
    float_bits = sign | ((exponent + (127 - 15)) << 23) | (mantissa << 13);
  } else if (mantissa == 0) {  // +-0
    float_bits = sign;
  } else {  // subnormal m * 2^-24: shift the leading 1 into the implicit bit, one exponent step
            // each
    exponent = 127 - 15 + 1;
    while ((mantissa & 0x400u) == 0) {
      mantissa <<= 1;
      --exponent;
    }
    float_bits = sign | (exponent << 23) | ((mantissa & 0x3ffu) << 13);
  }
  return std::bit_cast<float>(float_bits);
}

}  // namespace specdec::examples

// float_convert.hpp - bit-exact conversions between f32 and the 16-bit float formats.
//
// float -> bf16 / f16 round to nearest, ties to even; NaN stays NaN (quiet), overflow
// goes to +-inf (IEEE). The widening conversions are exact. Shared by CPU and CUDA.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "host_device.hpp"

namespace sdm::core {

SDM_HOST_DEVICE std::uint32_t float_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
#endif
}

SDM_HOST_DEVICE float bits_float(std::uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

// f32 -> bf16 bits, round to nearest even.
SDM_HOST_DEVICE std::uint16_t bf16_from_float(float f) {
  const std::uint32_t u = float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x0040u);
  const std::uint32_t rounded = u + 0x7fffu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>(rounded >> 16);
}

SDM_HOST_DEVICE float bf16_to_float(std::uint16_t h) { return bits_float(std::uint32_t{h} << 16); }

// The f32 value of f rounded to bf16.
SDM_HOST_DEVICE float round_to_bf16(float f) { return bf16_to_float(bf16_from_float(f)); }

// f32 -> IEEE binary16 bits, round to nearest even.
SDM_HOST_DEVICE std::uint16_t f16_from_float(float f) {
  const std::uint32_t u = float_bits(f);
  const std::uint32_t sign = (u >> 16) & 0x8000u;
  const std::uint32_t mag = u & 0x7fffffffu;
  if (mag > 0x7f800000u) return static_cast<std::uint16_t>(sign | 0x7e00u);  // NaN
  if (mag >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // >= 65520 -> inf
  if (mag < 0x38800000u) {
    // Below 2^-14: a subnormal half, units of 2^-24. The scaling is exact; rint is RNE.
    const float scaled = bits_float(mag) * 16777216.0f;
    return static_cast<std::uint16_t>(sign | static_cast<std::uint32_t>(rintf(scaled)));
  }
  const std::uint32_t mant = mag & 0x7fffffu;
  std::uint32_t h = ((((mag >> 23) - 127u + 15u)) << 10) | (mant >> 13);
  const std::uint32_t rest = mant & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;  // carries into the exponent
  return static_cast<std::uint16_t>(sign | h);
}

SDM_HOST_DEVICE float f16_to_float(std::uint16_t h) {
  const std::uint32_t sign = std::uint32_t{h & 0x8000u} << 16;
  const std::uint32_t exp = (h >> 10) & 0x1fu;
  const std::uint32_t mant = h & 0x3ffu;
  if (exp == 0) {
    const float mag = static_cast<float>(mant) * 5.9604644775390625e-8f;  // 2^-24
    return bits_float(sign | float_bits(mag));
  }
  if (exp == 31) return bits_float(sign | 0x7f800000u | (mant << 13));
  return bits_float(sign | ((exp + 112u) << 23) | (mant << 13));
}

SDM_HOST_DEVICE float round_to_f16(float f) { return f16_to_float(f16_from_float(f)); }

}  // namespace sdm::core

namespace sdm::core {

// f64 -> f32 rounded to odd (truncate, then set the last bit if inexact). Rounding that
// result to a narrower format (bf16, f16) with RNE equals one direct RNE rounding of the
// double: the host-only helpers below use it to round float64 values exactly once.
inline float f32_round_to_odd(double d) {
  float f = static_cast<float>(d);
  if (static_cast<double>(f) == d || std::isnan(d)) return f;
  if (std::fabs(static_cast<double>(f)) > std::fabs(d)) f = std::nextafter(f, 0.0f);
  return bits_float(float_bits(f) | 1u);
}

inline std::uint16_t bf16_from_double(double d) { return bf16_from_float(f32_round_to_odd(d)); }
inline std::uint16_t f16_from_double(double d) { return f16_from_float(f32_round_to_odd(d)); }

}  // namespace sdm::core

// Bit-exact checks of the 16-bit float conversions (src/core/float_convert.hpp).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>

#include "core/float_convert.hpp"

namespace sdm::core {
namespace {

// Every bf16 / f16 value survives widening then narrowing (NaNs stay NaN).
TEST(FloatConvert, Bf16RoundTripsEveryValue) {
  for (std::uint32_t h = 0; h <= 0xffff; ++h) {
    const float f = bf16_to_float(static_cast<std::uint16_t>(h));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(bf16_to_float(bf16_from_float(f))));
    } else {
      EXPECT_EQ(bf16_from_float(f), h);
    }
  }
}

TEST(FloatConvert, F16RoundTripsEveryValue) {
  for (std::uint32_t h = 0; h <= 0xffff; ++h) {
    const float f = f16_to_float(static_cast<std::uint16_t>(h));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(f16_to_float(f16_from_float(f))));
    } else {
      EXPECT_EQ(f16_from_float(f), h) << "h=" << h;
    }
  }
}

// Midpoints between neighbouring representable values round to the even neighbour, and
// values just off the midpoint round to the nearer one.
TEST(FloatConvert, Bf16TiesToEven) {
  for (std::uint32_t h = 0; h < 0x7f80; h += 7) {
    const std::uint32_t lo = h << 16, mid = lo + 0x8000u;
    const std::uint16_t even = (h & 1u) ? static_cast<std::uint16_t>(h + 1) : static_cast<std::uint16_t>(h);
    EXPECT_EQ(bf16_from_float(bits_float(mid)), even);
    EXPECT_EQ(bf16_from_float(bits_float(mid - 1)), h);
    EXPECT_EQ(bf16_from_float(bits_float(mid + 1)), h + 1);
  }
}

TEST(FloatConvert, F16MatchesDoubleArithmetic) {
  // For every f16 value, the exact midpoint to the next value rounds to the even one.
  for (std::uint32_t h = 0; h < 0x7bff; ++h) {
    const double a = f16_to_float(static_cast<std::uint16_t>(h));
    const double b = f16_to_float(static_cast<std::uint16_t>(h + 1));
    const float mid = static_cast<float>((a + b) / 2);  // exact in f32
    const std::uint16_t even = (h & 1u) ? static_cast<std::uint16_t>(h + 1) : static_cast<std::uint16_t>(h);
    EXPECT_EQ(f16_from_float(mid), even) << "h=" << h;
    EXPECT_EQ(f16_from_float(std::nextafter(mid, 0.0f)), h) << "h=" << h;
    EXPECT_EQ(f16_from_float(std::nextafter(mid, 1e9f)), h + 1) << "h=" << h;
  }
  EXPECT_EQ(f16_from_float(65519.0f), 0x7bffu);
  EXPECT_EQ(f16_from_float(65520.0f), 0x7c00u);
  EXPECT_EQ(f16_from_float(-std::numeric_limits<float>::infinity()), 0xfc00u);
  EXPECT_EQ(f16_from_float(1e-9f), 0u);
}

TEST(FloatConvert, DoubleRoundsOnce) {
  // 1 + 2^-8 + 2^-30: RNE directly to bf16 goes up (above the midpoint); rounding to f32
  // first would land on the midpoint and tie down to 1.
  const double x = 1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -30);
  EXPECT_EQ(bf16_to_float(bf16_from_double(x)), 1.0f + 0.0078125f);
  EXPECT_EQ(bf16_from_float(static_cast<float>(x)), bf16_from_float(1.0f));
  EXPECT_EQ(bf16_from_double(-x), 0x8000u | bf16_from_double(x));
}

}  // namespace
}  // namespace sdm::core

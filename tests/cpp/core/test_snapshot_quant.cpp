// Exhaustive and property tests of the snapshot quantisers (src/core/snapshot_quant.hpp,
// docs/spec.md §5). Expected values come from independent float64 formulas written here
// (nearest-value searches, ldexp), not from the functions under test.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "core/float_convert.hpp"
#include "core/snapshot_quant.hpp"

namespace sdm::core {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

float bf16_value(std::uint32_t bits) { return bf16_to_float(static_cast<std::uint16_t>(bits)); }

// ---- independent references ----------------------------------------------------------------

// f32 -> nearest bf16 value (ties to even), by comparing distances to the two neighbours in
// float64. Values beyond the largest bf16 round to inf from the midpoint 2^128 - 2^119 on.
float reference_round_bf16(float f) {
  if (std::isnan(f) || std::isinf(f)) return f;
  const std::uint32_t bits = float_bits(f);
  const std::uint32_t toward_zero = bits & 0xffff0000u;
  const std::uint32_t away = toward_zero + 0x10000u;
  const double d = std::fabs(static_cast<double>(f));
  const double lo = std::fabs(static_cast<double>(bits_float(toward_zero)));
  const bool away_is_inf = (away & 0x7fffffffu) == 0x7f800000u;
  const double hi = away_is_inf ? std::ldexp(1.0, 128) : std::fabs(static_cast<double>(bits_float(away)));
  const bool take_away = (d - lo > hi - d) || (d - lo == hi - d && ((toward_zero >> 16) & 1u));
  return bits_float(take_away ? away : toward_zero);
}

// The value of an e4m3 code by its definition.
double reference_e4m3_value(unsigned code) {
  const double sign = (code & 0x80u) ? -1.0 : 1.0;
  const int e = static_cast<int>((code >> 3) & 0xfu);
  const int m = static_cast<int>(code & 0x7u);
  if (e == 15 && m == 7) return std::numeric_limits<double>::quiet_NaN();
  if (e == 0) return sign * std::ldexp(m, -9);
  return sign * std::ldexp(1.0 + m / 8.0, e - 7);
}

// The e4m3 code nearest to v (ties to the even code), saturating to +-448; NaN -> 0x7f.
unsigned reference_e4m3_code(double v) {
  if (std::isnan(v)) return 0x7fu;
  const unsigned sign = std::signbit(v) ? 0x80u : 0u;
  const double a = std::fabs(v);
  if (a >= 448.0) return sign | 0x7eu;  // satfinite
  unsigned best = 0;
  for (unsigned code = 1; code <= 0x7eu; ++code) {
    const double d_code = std::fabs(reference_e4m3_value(code) - a);
    const double d_best = std::fabs(reference_e4m3_value(best) - a);
    if (d_code < d_best || (d_code == d_best && (code & 1u) == 0 && (best & 1u) == 1)) best = code;
  }
  return sign | best;
}

// The scale rule in float64: the f32 product (exact in double, then one rounding), the
// clamp, then bf16 rounding by the reference above.
float reference_scale(float amax, float qmax) {
  const float inv_qmax = static_cast<float>(1.0 / static_cast<double>(qmax));
  const float product = static_cast<float>(static_cast<double>(amax) * static_cast<double>(inv_qmax));
  return reference_round_bf16(std::fmax(product, 1e-12f));
}

// The scales the exhaustive division test runs against: every mantissa at a few exponents
// (the smallest reachable, around 1, large) and four mantissas at every reachable exponent.
std::vector<float> quotient_test_scales() {
  const std::uint32_t min_bits = bf16_from_float(kMinQuantScale);
  const std::uint32_t min_exponent = (min_bits >> 7) & 0xffu;
  std::vector<float> scales;
  for (std::uint32_t e = min_exponent; e <= 254; ++e) {
    const bool every_mantissa = e == min_exponent || e == 126 || e == 127 || e == 128 || e == 200 || e == 254;
    for (std::uint32_t m = 0; m < 128; ++m) {
      if (!every_mantissa && m != 0 && m != 1 && m != 0x55 && m != 0x7f) continue;
      const float s = bf16_value((e << 7) | m);
      if (s >= bf16_value(min_bits)) scales.push_back(s);
    }
  }
  return scales;
}

// ---- 1-2. amax and scale ---------------------------------------------------------------------

TEST(SnapshotQuant, AmaxIgnoresNaNAndKeepsInfinities) {
  auto amax_of = [](std::initializer_list<float> row) {
    float a = 0.0f;
    for (float x : row) a = quant_amax_update(a, x);
    return a;
  };
  EXPECT_EQ(amax_of({0.5f, -2.0f, 1.0f}), 2.0f);
  EXPECT_EQ(amax_of({kNaN, -3.0f, kNaN, 1.0f}), 3.0f);
  EXPECT_EQ(amax_of({-kNaN}), 0.0f);
  EXPECT_EQ(amax_of({1.0f, -kInf, 2.0f}), kInf);
  EXPECT_EQ(amax_of({kNaN, kInf}), kInf);
  // From +0: a row of -0 (or nothing but NaN) has amax +0, not -0.
  EXPECT_EQ(float_bits(amax_of({-0.0f, -0.0f})), 0u);
  EXPECT_EQ(float_bits(amax_of({kNaN})), 0u);
  // Subnormals count.
  const float tiny = std::numeric_limits<float>::denorm_min();
  EXPECT_EQ(amax_of({-tiny}), tiny);
}

TEST(SnapshotQuant, ScaleRuleMatchesItsFormulaForEveryBf16Amax) {
  for (float qmax : {kFp8QMax, kInt4QMax}) {
    for (std::uint32_t bits = 0; bits < 0x7f80u; ++bits) {  // every finite non-negative bf16
      const float amax = bf16_value(bits);
      ASSERT_EQ(float_bits(quant_scale(amax, qmax)), float_bits(reference_scale(amax, qmax)))
          << "amax " << amax << " qmax " << qmax;
    }
    std::mt19937 rng(5);
    for (int i = 0; i < 200000; ++i) {  // f32 banks: amax is any f32
      const float amax = bits_float(rng() & 0x7f7fffffu);
      ASSERT_EQ(float_bits(quant_scale(amax, qmax)), float_bits(reference_scale(amax, qmax))) << amax;
    }
  }
}

TEST(SnapshotQuant, ScaleEdgeCases) {
  EXPECT_EQ(quant_scale(448.0f, kFp8QMax), 1.0f);
  EXPECT_EQ(quant_scale(7.0f, kInt4QMax), 1.0f);
  EXPECT_EQ(quant_scale(0.0f, kFp8QMax), round_to_bf16(1e-12f));  // clamped
  EXPECT_EQ(quant_scale(1e-20f, kInt4QMax), round_to_bf16(1e-12f));
  EXPECT_EQ(quant_scale(kInf, kFp8QMax), kInf);
  EXPECT_EQ(quant_qmax(SnapshotQuant::fp8), 448.0f);
  EXPECT_EQ(quant_qmax(SnapshotQuant::int4), 7.0f);
  // Always bf16-exact.
  std::mt19937 rng(9);
  for (int i = 0; i < 10000; ++i) {
    const float s = quant_scale(bits_float(rng() & 0x7f7fffffu), kFp8QMax);
    EXPECT_EQ(round_to_bf16(s), s);
  }
}

// ---- 3. fast quotient == IEEE division through the final byte / nibble ---------------------

TEST(SnapshotQuant, FastQuotientEqualsDivisionThroughTheFinalByteForEveryBf16Value) {
  std::vector<float> scales = quotient_test_scales();
  scales.push_back(kInf);  // amax = inf
  ASSERT_GT(scales.size(), 1000u);
  std::int64_t compared = 0, bf16_differences = 0, byte_mismatches = 0, nibble_mismatches = 0;
  for (float scale : scales) {
    const float reciprocal = quant_reciprocal(scale);
    for (std::uint32_t bits = 0; bits <= 0xffffu; ++bits) {
      const float x = bf16_value(bits);
      const float exact = round_to_bf16(quant_quotient(x, scale));
      const float fast = round_to_bf16(quant_quotient_fast(x, scale, reciprocal));
      ++compared;
      if (float_bits(exact) == float_bits(fast)) continue;
      ++bf16_differences;
      if (e4m3_from_float(exact) != e4m3_from_float(fast)) ++byte_mismatches;
      if (int4_from_float(exact) != int4_from_float(fast)) ++nibble_mismatches;
    }
  }
  EXPECT_EQ(compared, static_cast<std::int64_t>(scales.size()) * 65536);
  EXPECT_EQ(byte_mismatches, 0) << "of " << bf16_differences << " differing bf16 quotients";
  EXPECT_EQ(nibble_mismatches, 0) << "of " << bf16_differences << " differing bf16 quotients";
}

TEST(SnapshotQuant, FastQuotientSpecialValues) {
  const float s = 0.5f, r = quant_reciprocal(s);
  EXPECT_EQ(quant_quotient_fast(kInf, s, r), kInf);
  EXPECT_EQ(quant_quotient_fast(-kInf, s, r), -kInf);
  EXPECT_TRUE(std::isnan(quant_quotient_fast(kNaN, s, r)));
  EXPECT_EQ(quant_quotient_fast(3.0e38f, 1e-12f, quant_reciprocal(1e-12f)), kInf);  // overflow
  EXPECT_EQ(float_bits(quant_quotient_fast(-2.0f, kInf, quant_reciprocal(kInf))), float_bits(-0.0f));
  EXPECT_TRUE(std::isnan(quant_quotient_fast(kInf, kInf, quant_reciprocal(kInf))));
}

// ---- 4-5. e4m3 -------------------------------------------------------------------------------

TEST(SnapshotQuant, DecodesAll256E4m3Codes) {
  for (unsigned code = 0; code < 256; ++code) {
    const double expected = reference_e4m3_value(code);
    const float got = e4m3_to_float(static_cast<std::uint8_t>(code));
    if (std::isnan(expected)) {
      EXPECT_TRUE(std::isnan(got)) << code;
      EXPECT_EQ(code & 0x7fu, 0x7fu);
    } else {
      EXPECT_EQ(static_cast<double>(got), expected) << "code " << code;
      EXPECT_EQ(std::signbit(got), (code & 0x80u) != 0) << code;  // -0 for 0x80
    }
  }
  EXPECT_EQ(e4m3_to_float(0x7e), 448.0f);
  EXPECT_EQ(e4m3_to_float(0x01), std::ldexp(1.0f, -9));
  EXPECT_EQ(e4m3_to_float(0x08), std::ldexp(1.0f, -6));
}

TEST(SnapshotQuant, E4m3EncodeOfDecodeIsTheIdentityOnFiniteCodes) {
  int finite = 0;
  for (unsigned code = 0; code < 256; ++code) {
    if ((code & 0x7fu) == 0x7fu) continue;
    ++finite;
    EXPECT_EQ(e4m3_from_float(e4m3_to_float(static_cast<std::uint8_t>(code))), code);
  }
  EXPECT_EQ(finite, 254);
}

TEST(SnapshotQuant, E4m3EncodeRoundsEveryBf16ValueToNearestEven) {
  for (std::uint32_t bits = 0; bits <= 0xffffu; ++bits) {
    const float x = bf16_value(bits);
    ASSERT_EQ(e4m3_from_float(x), reference_e4m3_code(x)) << "x = " << x;
  }
}

TEST(SnapshotQuant, E4m3EncodeRoundsF32MidpointsAndNeighbours) {
  // Midpoints between neighbouring codes and the f32 values next to them.
  for (unsigned code = 0; code < 0x7eu; ++code) {
    const float lo = e4m3_to_float(static_cast<std::uint8_t>(code));
    const float hi = e4m3_to_float(static_cast<std::uint8_t>(code + 1));
    const float mid = static_cast<float>((static_cast<double>(lo) + hi) / 2);  // exact
    for (float x : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, kInf)}) {
      EXPECT_EQ(e4m3_from_float(x), reference_e4m3_code(x)) << x;
      EXPECT_EQ(e4m3_from_float(-x), reference_e4m3_code(-x)) << -x;
    }
  }
  std::mt19937 rng(3);
  for (int i = 0; i < 100000; ++i) {
    const float x = bits_float((rng() & 0x83ffffffu) | 0x38000000u);  // |x| in [2^-15, 2^16)
    ASSERT_EQ(e4m3_from_float(x), reference_e4m3_code(x)) << x;
  }
}

TEST(SnapshotQuant, E4m3SaturatesAndKeepsNaN) {
  EXPECT_EQ(e4m3_from_float(448.0f), 0x7e);
  EXPECT_EQ(e4m3_from_float(463.9f), 0x7e);
  EXPECT_EQ(e4m3_from_float(464.0f), 0x7e);  // would round to 480, which e4m3 lacks
  EXPECT_EQ(e4m3_from_float(1.0e30f), 0x7e);
  EXPECT_EQ(e4m3_from_float(kInf), 0x7e);
  EXPECT_EQ(e4m3_from_float(-kInf), 0xfe);
  EXPECT_EQ(e4m3_from_float(-500.0f), 0xfe);
  EXPECT_EQ(e4m3_from_float(kNaN), 0x7f);
  EXPECT_EQ(e4m3_from_float(-kNaN), 0x7f);  // one NaN code, whatever the NaN's sign
  EXPECT_EQ(e4m3_from_float(std::ldexp(1.0f, -10)), 0x00);  // tie between 0 and 2^-9 -> 0
  EXPECT_EQ(e4m3_from_float(std::ldexp(3.0f, -10)), 0x02);  // tie between 1 and 2 (x 2^-9) -> 2
  EXPECT_EQ(e4m3_from_float(-0.0f), 0x80);
}

// ---- 4-5. int4 -------------------------------------------------------------------------------

TEST(SnapshotQuant, DecodesAll16Nibbles) {
  const float expected[16] = {0, 1, 2, 3, 4, 5, 6, 7, -8, -7, -6, -5, -4, -3, -2, -1};
  for (unsigned n = 0; n < 16; ++n) {
    EXPECT_EQ(int4_to_float(static_cast<std::uint8_t>(n)), expected[n]) << n;
    EXPECT_EQ(int4_from_float(expected[n]), n) << n;
  }
}

TEST(SnapshotQuant, Int4RoundsHalfToEvenAndClamps) {
  const struct {
    float q;
    float value;
  } cases[] = {{0.5f, 0}, {1.5f, 2}, {2.5f, 2}, {-0.5f, 0}, {-1.5f, -2}, {-2.5f, -2}, {0.49f, 0},
               {6.5f, 6}, {6.51f, 7}, {7.5f, 7}, {8.0f, 7},  {-8.5f, -8}, {-9.0f, -8}, {1e30f, 7},
               {kInf, 7}, {-kInf, -8}, {kNaN, 0}, {-0.0f, 0}};
  for (const auto& c : cases) {
    EXPECT_EQ(int4_to_float(int4_from_float(c.q)), c.value) << "q = " << c.q;
  }
}

// ---- restore and sizes ----------------------------------------------------------------------

TEST(SnapshotQuant, RestoreRoundsTheProductOnceToTheBankDType) {
  std::mt19937 rng(11);
  for (int i = 0; i < 100000; ++i) {
    const float q = e4m3_to_float(static_cast<std::uint8_t>(rng() & 0xffu));
    if (std::isnan(q)) continue;
    const float scale = bf16_value((rng() & 0x3fffu) + 0x2000u);  // bf16 scales 2^-64 .. 2^63
    const double product = static_cast<double>(q) * scale;       // exact in double
    EXPECT_EQ(quant_restore(q, scale, DType::f32), static_cast<float>(product));
    EXPECT_EQ(quant_restore(q, scale, DType::bf16), reference_round_bf16(static_cast<float>(product)));
  }
}

TEST(SnapshotQuant, PayloadBytesPerRow) {
  for (std::int64_t hd : {1, 4, 5, 128, 129}) {
    const auto n = static_cast<std::size_t>(hd);
    EXPECT_EQ(snapshot_payload_bytes(SnapshotQuant::none, DType::f32, hd), 4 * n);
    EXPECT_EQ(snapshot_payload_bytes(SnapshotQuant::none, DType::bf16, hd), 2 * n);
    EXPECT_EQ(snapshot_payload_bytes(SnapshotQuant::bf16, DType::f32, hd), 2 * n);
    EXPECT_EQ(snapshot_payload_bytes(SnapshotQuant::fp8, DType::bf16, hd), n);
    EXPECT_EQ(snapshot_payload_bytes(SnapshotQuant::int4, DType::f32, hd), (n + 1) / 2);
  }
  EXPECT_EQ(snapshot_scale_bytes(SnapshotQuant::none), 0u);
  EXPECT_EQ(snapshot_scale_bytes(SnapshotQuant::bf16), 0u);
  EXPECT_EQ(snapshot_scale_bytes(SnapshotQuant::fp8), 4u);
  EXPECT_EQ(snapshot_scale_bytes(SnapshotQuant::int4), 4u);
}

// ---- whole rows ------------------------------------------------------------------------------

// A bank row of `bank` holding `values` (rounded to bf16 for a bf16 bank).
struct BankRow {
  DType bank;
  std::vector<float> f32;
  std::vector<std::uint16_t> bf16;
  BankRow(DType b, const std::vector<float>& values) : bank(b), f32(values) {
    for (float v : values) bf16.push_back(bf16_from_float(v));
    if (bank == DType::bf16) {
      for (std::size_t i = 0; i < f32.size(); ++i) f32[i] = bf16_to_float(bf16[i]);
    }
  }
  const void* data() const { return bank == DType::bf16 ? static_cast<const void*>(bf16.data()) : f32.data(); }
  std::int64_t hd() const { return static_cast<std::int64_t>(f32.size()); }
};

struct RoundTrip {
  float scale;
  std::vector<std::uint8_t> payload;
  std::vector<float> restored;
};

RoundTrip round_trip(SnapshotQuant mode, const BankRow& row) {
  RoundTrip rt;
  rt.payload.assign(snapshot_payload_bytes(mode, row.bank, row.hd()) + 1, 0xaa);  // one guard byte
  rt.scale = quantize_row(mode, row.bank, row.data(), row.hd(), rt.payload.data());
  EXPECT_EQ(rt.payload.back(), 0xaa) << "wrote past the payload";
  rt.payload.pop_back();
  rt.restored.assign(static_cast<std::size_t>(row.hd()), 0.0f);
  dequantize_row(mode, row.bank, rt.payload.data(), rt.scale, row.hd(), rt.restored.data());
  return rt;
}

TEST(SnapshotQuant, Int4PacksEvenHighOddLowAndZeroesTheLastLowNibbleOfOddRows) {
  const float s = 0.25f;  // amax 7 s = 1.75 -> scale exactly 0.25
  const BankRow row5(DType::f32, {1 * s, -2 * s, 7 * s, -7 * s, 3 * s});
  const RoundTrip rt = round_trip(SnapshotQuant::int4, row5);
  EXPECT_EQ(rt.scale, s);
  ASSERT_EQ(rt.payload.size(), 3u);
  EXPECT_EQ(rt.payload[0], 0x1e);  // 1 high, -2 = 0xe low
  EXPECT_EQ(rt.payload[1], 0x79);  // 7 high, -7 = 0x9 low
  EXPECT_EQ(rt.payload[2], 0x30);  // 3 high, low nibble 0
  for (std::size_t c = 0; c < 5; ++c) EXPECT_EQ(rt.restored[c], row5.f32[c]) << c;
}

TEST(SnapshotQuant, RowsOfRepresentableValuesRoundTripExactly) {
  std::mt19937 rng(21);
  for (DType bank : {DType::f32, DType::bf16}) {
    for (std::int64_t hd : {1, 2, 7, 33}) {
      const float s = bf16_value(0x3c00u + (rng() & 0x7fu));  // a bf16 scale near 2^-7
      // int4: integers -7..7 times s with one element at 7 s (the amax).
      std::vector<float> ints(static_cast<std::size_t>(hd));
      for (auto& v : ints) v = static_cast<float>(static_cast<int>(rng() % 15) - 7) * s;
      ints[0] = 7 * s;
      const BankRow int_row(bank, ints);
      const RoundTrip ri = round_trip(SnapshotQuant::int4, int_row);
      EXPECT_EQ(ri.scale, s);
      EXPECT_EQ(ri.restored, int_row.f32);
      // fp8: e4m3 values times s with one element at 448 s.
      std::vector<float> codes(static_cast<std::size_t>(hd));
      for (auto& v : codes) {
        std::uint8_t code = static_cast<std::uint8_t>(rng() & 0xffu);
        if ((code & 0x7fu) == 0x7fu) code = 0x10;
        v = e4m3_to_float(code) * s;
      }
      codes[0] = -448 * s;
      const BankRow fp8_row(bank, codes);
      const RoundTrip rf = round_trip(SnapshotQuant::fp8, fp8_row);
      EXPECT_EQ(rf.scale, s);
      EXPECT_EQ(rf.restored, fp8_row.f32);
    }
  }
}

// Random rows: the restored values are within the quantiser's error of the originals and
// representable in the bank dtype; bf16 rows (fast quotient) give the same payload as the
// IEEE division.
TEST(SnapshotQuant, RoundTripErrorBounds) {
  std::mt19937 rng(17);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (DType bank : {DType::f32, DType::bf16}) {
    for (std::int64_t hd : {1, 5, 8, 63, 129}) {
      for (float magnitude : {1e-30f, 1e-3f, 1.0f, 1e4f, 1e30f}) {
        std::vector<float> values(static_cast<std::size_t>(hd));
        for (auto& v : values) v = normal(rng) * magnitude;
        const BankRow row(bank, values);
        for (SnapshotQuant mode : {SnapshotQuant::fp8, SnapshotQuant::int4}) {
          SCOPED_TRACE(::testing::Message() << dtype_name(bank) << " hd " << hd << " magnitude " << magnitude
                                            << " mode " << snapshot_quant_name(mode));
          const RoundTrip rt = round_trip(mode, row);
          const float reciprocal = quant_reciprocal(rt.scale);
          for (std::int64_t c = 0; c < hd; ++c) {
            const auto i = static_cast<std::size_t>(c);
            const double x = row.f32[i], restored = rt.restored[i];
            if (bank == DType::bf16) {
              EXPECT_EQ(round_to_bf16(rt.restored[i]), rt.restored[i]);
            }
            // fp8: 3 mantissa bits (2^-4 relative) + bf16 roundings, or the subnormal step;
            // int4: half a step of the scale plus the bf16 roundings.
            const double bound = mode == SnapshotQuant::fp8 ? 0.075 * std::fabs(x) + 0.002 * rt.scale
                                                            : 0.55 * rt.scale;
            EXPECT_LE(std::fabs(restored - x), bound) << "element " << c << " x " << x;
            EXPECT_EQ(quantized_code(mode, rt.payload.data(), c),
                      quant_encode(mode, row.f32[i], rt.scale, reciprocal, false));
          }
        }
      }
    }
  }
}

TEST(SnapshotQuant, RowsWithNaNAndInfinity) {
  // NaN is ignored by amax; the NaN element itself encodes to the NaN code (fp8) or 0 (int4).
  const BankRow row(DType::f32, {kNaN, 2.0f, -1.0f});
  const RoundTrip fp8 = round_trip(SnapshotQuant::fp8, row);
  EXPECT_EQ(fp8.scale, quant_scale(2.0f, kFp8QMax));
  EXPECT_EQ(fp8.payload[0], 0x7f);
  EXPECT_TRUE(std::isnan(fp8.restored[0]));
  EXPECT_NEAR(fp8.restored[1], 2.0f, 2.0f / 16);
  const RoundTrip int4 = round_trip(SnapshotQuant::int4, row);
  EXPECT_EQ(int4.payload[0] >> 4, 0);
  EXPECT_EQ(int4.restored[0], 0.0f);
  // An infinite element makes the scale infinite: finite elements quantise to 0.
  for (DType bank : {DType::f32, DType::bf16}) {
    const BankRow inf_row(bank, {1.0f, -kInf, 3.0f});
    const RoundTrip rt = round_trip(SnapshotQuant::fp8, inf_row);
    EXPECT_EQ(rt.scale, kInf);
    EXPECT_EQ(rt.payload[0], 0x00);
    EXPECT_EQ(rt.payload[1], 0x7f);  // -inf / inf = NaN
    EXPECT_EQ(rt.payload[2], 0x00);
  }
}

TEST(SnapshotQuant, SaturatesWhenTheScaleRoundsDown) {
  // amax = 449: 449 / 448 rounds down to the bf16 scale 1.0, so 449 / 1 saturates to 448.
  const BankRow row(DType::f32, {449.0f, -449.0f, 1.0f});
  const RoundTrip rt = round_trip(SnapshotQuant::fp8, row);
  EXPECT_EQ(rt.scale, 1.0f);
  EXPECT_EQ(rt.payload[0], 0x7e);
  EXPECT_EQ(rt.payload[1], 0xfe);
  EXPECT_EQ(rt.restored[0], 448.0f);
  // int4: amax 7.02 -> scale 1.0 (7.02 / 7 rounds to bf16 1.0); 7.02 -> 7, -7.02 -> -7.
  const BankRow row4(DType::f32, {7.02f, -7.02f});
  const RoundTrip r4 = round_trip(SnapshotQuant::int4, row4);
  EXPECT_EQ(r4.scale, 1.0f);
  EXPECT_EQ(r4.payload[0], 0x79);
}

}  // namespace
}  // namespace sdm::core

// The register-blocked row kernels (src/cpu/engine/row_kernels.hpp): every kernel must give
// the bits of the plain scalar loop in its documented order, for any width (vector strips
// plus scalar tails) and any row count (4-row blocks plus leftover rows); the bf16 vector
// rounding must equal core::bf16_from_float bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <limits>
#include <random>
#include <vector>

#include "core/float_convert.hpp"
#include "cpu/engine/bf16_store.hpp"
#include "cpu/engine/row_kernels.hpp"
#include "cpu/engine/row_kernels_avx512.hpp"
#include "cpu/engine/row_math.hpp"
#include "sdm/error.hpp"

namespace sdm::cpu {
namespace {

// Values over a wide exponent range, so that a changed summation order changes the bits.
std::vector<float> wide_values(std::size_t count, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> mantissa(-1.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-12, 12);
  std::vector<float> v(count);
  for (auto& x : v) x = std::ldexp(mantissa(rng), exponent(rng));
  return v;
}

std::vector<std::uint16_t> to_bf16(const std::vector<float>& v) {
  std::vector<std::uint16_t> out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) out[i] = core::bf16_from_float(v[i]);
  return out;
}

void expect_same_bits(const std::vector<float>& got, const std::vector<float>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(core::float_bits(got[i]), core::float_bits(want[i])) << "element " << i;
  }
}

// Every bf16 pattern as the high half, with low halves at the rounding boundaries (ties,
// just below / above), so the round-to-even, overflow to inf and NaN paths all run; checked
// against core::bf16_from_float on the bf16 store path `path`, alone and as a sum.
// Forces a bf16 store path for its lifetime (also when an assertion returns early).
struct ForcedBf16Path {
  explicit ForcedBf16Path(Bf16StorePath path) { set_bf16_store_path(path); }
  ~ForcedBf16Path() { set_bf16_store_path(Bf16StorePath::automatic); }
  ForcedBf16Path(const ForcedBf16Path&) = delete;
  ForcedBf16Path& operator=(const ForcedBf16Path&) = delete;
};

void check_bf16_store_path(Bf16StorePath path) {
  const ForcedBf16Path forced(path);
  const std::uint32_t lows[] = {0x0000u, 0x0001u, 0x7fffu, 0x8000u, 0x8001u, 0xc000u, 0xffffu};
  std::vector<float> in;
  for (std::uint32_t high = 0; high < 0x10000u; ++high) {
    for (std::uint32_t low : lows) in.push_back(core::bits_float((high << 16) | low));
  }
  for (const std::int64_t width : {static_cast<std::int64_t>(in.size()), std::int64_t{8 * 1001 + 5}}) {
    std::vector<std::uint16_t> got(static_cast<std::size_t>(width));
    store_row(got.data(), in.data(), nullptr, width);
    for (std::int64_t c = 0; c < width; ++c) {
      const std::uint16_t want = core::bf16_from_float(in[static_cast<std::size_t>(c)]);
      ASSERT_EQ(got[static_cast<std::size_t>(c)], want) << "input bits " << std::hex
                                                        << core::float_bits(in[static_cast<std::size_t>(c)]);
    }
  }
  for (const std::int64_t width : {1, 7, 8, 15, 16, 17, 37, 131}) {
    const auto a = wide_values(static_cast<std::size_t>(width), 1), b = wide_values(static_cast<std::size_t>(width), 2);
    std::vector<std::uint16_t> sum(static_cast<std::size_t>(width));
    store_row(sum.data(), a.data(), b.data(), width);
    for (std::size_t c = 0; c < sum.size(); ++c) EXPECT_EQ(sum[c], core::bf16_from_float(a[c] + b[c])) << c;
  }
}

TEST(RowKernels, Bf16StoreBaselinePathMatchesScalarRounding) { check_bf16_store_path(Bf16StorePath::baseline); }

TEST(RowKernels, Bf16StoreAvx2PathMatchesScalarRounding) {
  if (!bf16_store_path_available(Bf16StorePath::avx2)) {
    try {
      set_bf16_store_path(Bf16StorePath::avx2);
      ADD_FAILURE() << "forcing AVX2 on a CPU without it must throw";
    } catch (const ValueError& e) {
      EXPECT_EQ(e.argument(), "path");
      EXPECT_STREQ(e.what(), "AVX2 is not available on this CPU");
    }
    GTEST_SKIP() << "this CPU has no AVX2: only the refusal was checked";
  }
  check_bf16_store_path(Bf16StorePath::avx2);
}

TEST(RowKernels, Bf16StoreAvx512PathMatchesScalarRounding) {
  if (!bf16_store_path_available(Bf16StorePath::avx512)) {
    try {
      set_bf16_store_path(Bf16StorePath::avx512);
      ADD_FAILURE() << "forcing AVX-512 on a CPU without it must throw";
    } catch (const ValueError& e) {
      EXPECT_EQ(e.argument(), "path");
      EXPECT_STREQ(e.what(), "AVX-512 F/BW/VL is not available on this CPU");
    }
    GTEST_SKIP() << "this CPU has no AVX-512 F/BW/VL: only the refusal was checked";
  }
  check_bf16_store_path(Bf16StorePath::avx512);
}

// round_row_to_bank: f32(bf16(x)) in vector lanes and scalar tails, on every bf16 high half
// with the rounding-boundary low halves (ties, NaN payloads, overflow to inf).
TEST(RowKernels, RoundRowToBf16MatchesScalarRounding) {
  const std::uint32_t lows[] = {0x0000u, 0x0001u, 0x7fffu, 0x8000u, 0x8001u, 0xc000u, 0xffffu};
  std::vector<float> in;
  for (std::uint32_t high = 0; high < 0x10000u; ++high) {
    for (std::uint32_t low : lows) in.push_back(core::bits_float((high << 16) | low));
  }
  in.push_back(1.0f + 0x1p-9f);  // a scalar tail: the count is 7 * 65536 + 3, not a multiple of 4
  in.push_back(-3.0f);
  in.push_back(0x1.ffffp127f);
  std::vector<float> got = in;
  round_row_to_bank(got.data(), static_cast<std::int64_t>(got.size()), static_cast<const std::uint16_t*>(nullptr));
  for (std::size_t i = 0; i < in.size(); ++i) {
    ASSERT_EQ(core::float_bits(got[i]), core::float_bits(core::bf16_to_float(core::bf16_from_float(in[i]))))
        << "input bits " << std::hex << core::float_bits(in[i]);
  }
  std::vector<float> same = in;
  round_row_to_bank(same.data(), static_cast<std::int64_t>(same.size()), static_cast<const float*>(nullptr));
  for (std::size_t i = 0; i < in.size(); ++i) ASSERT_EQ(core::float_bits(same[i]), core::float_bits(in[i]));
}

TEST(RowKernels, Bf16LoadMatchesScalar) {
  std::vector<std::uint16_t> all(0x10000u + 3);
  for (std::size_t i = 0; i < all.size(); ++i) all[i] = static_cast<std::uint16_t>(i * 40503u);
  std::vector<float> got(all.size());
  load_row(all.data(), got.data(), static_cast<std::int64_t>(all.size()));
  for (std::size_t i = 0; i < all.size(); ++i) {
    ASSERT_EQ(core::float_bits(got[i]), core::float_bits(core::bf16_to_float(all[i]))) << i;
  }
}

// Forces a row-kernel path (row_kernels_avx512.hpp) for its lifetime.
struct ForcedRowPath {
  explicit ForcedRowPath(RowKernelPath path) { set_row_kernel_path(path); }
  ~ForcedRowPath() { set_row_kernel_path(RowKernelPath::automatic); }
  ForcedRowPath(const ForcedRowPath&) = delete;
  ForcedRowPath& operator=(const ForcedRowPath&) = delete;
};

// The row-kernel paths this CPU can run (baseline always).
std::vector<RowKernelPath> row_paths() {
  std::vector<RowKernelPath> paths{RowKernelPath::baseline};
  if (row_kernel_path_available(RowKernelPath::avx512)) paths.push_back(RowKernelPath::avx512);
  return paths;
}

// The documented orders, one element at a time.
template <bool Lower>
std::vector<float> triangular_reference(const std::vector<float>& coef, std::int64_t ldc, const std::vector<float>& in,
                                        std::int64_t n, std::int64_t width) {
  std::vector<float> out(static_cast<std::size_t>(n * width));
  for (std::int64_t r = 0; r < n; ++r) {
    for (std::int64_t c = 0; c < width; ++c) {
      float acc = 0.0f;
      const std::int64_t first = Lower ? 0 : r, last = Lower ? r : n - 1;
      for (std::int64_t k = first; k <= last; ++k) {
        const std::int64_t at = Lower ? r * ldc + k : k * ldc + r;
        const float w = coef[static_cast<std::size_t>(at)];
        acc += w * in[static_cast<std::size_t>(k * width + c)];
      }
      out[static_cast<std::size_t>(r * width + c)] = acc;
    }
  }
  return out;
}

template <bool Lower>
void check_triangular(std::int64_t n, std::int64_t width) {
  const std::int64_t ldc = n + 3;
  auto coef = wide_values(static_cast<std::size_t>(n * ldc), 7);
  // Entries outside the triangle must never be read: poison them.
  for (std::int64_t r = 0; r < n; ++r) {
    for (std::int64_t k = 0; k < ldc; ++k) {
      if (Lower ? k > r : k < r) coef[static_cast<std::size_t>(r * ldc + k)] = std::numeric_limits<float>::quiet_NaN();
    }
  }
  // Structural zeros (skipped by the kernel, added by the reference): every third term.
  for (std::int64_t r = 0; r < n; ++r) {
    for (std::int64_t k = 0; k < n; ++k) {
      if ((r + 2 * k) % 3 == 0 && r != k) coef[static_cast<std::size_t>(r * ldc + k)] = 0.0f;
    }
  }
  const auto in = wide_values(static_cast<std::size_t>(n * width), 11);
  std::vector<float> out(static_cast<std::size_t>(n * width), -1.0f);
  triangular_product<Lower>(coef.data(), ldc, in.data(), out.data(), n, width);
  SCOPED_TRACE(::testing::Message() << "lower " << Lower << " n " << n << " width " << width);
  expect_same_bits(out, triangular_reference<Lower>(coef, ldc, in, n, width));
}

// With inf and NaN inputs and zero coefficients, column c gives the same values whether it
// runs in a vector strip (the whole matrix) or alone (width 1, the scalar code): the same
// bits, and NaN exactly where the other has NaN.
template <bool Lower>
void check_column_split(std::int64_t n) {
  const std::int64_t width = 19, ldc = n;
  auto coef = wide_values(static_cast<std::size_t>(n * n), 3);
  for (std::size_t i = 0; i < coef.size(); i += 2) coef[i] = 0.0f;
  auto in = wide_values(static_cast<std::size_t>(n * width), 4);
  for (std::size_t i = 0; i < in.size(); i += 7) in[i] = std::numeric_limits<float>::infinity();
  in[5] = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> whole(in.size());
  triangular_product<Lower>(coef.data(), ldc, in.data(), whole.data(), n, width);
  for (std::int64_t c = 0; c < width; ++c) {
    std::vector<float> column_in(static_cast<std::size_t>(n)), column_out(static_cast<std::size_t>(n));
    for (std::int64_t k = 0; k < n; ++k) {
      column_in[static_cast<std::size_t>(k)] = in[static_cast<std::size_t>(k * width + c)];
    }
    triangular_product<Lower>(coef.data(), ldc, column_in.data(), column_out.data(), n, 1);
    for (std::int64_t r = 0; r < n; ++r) {
      const float alone = column_out[static_cast<std::size_t>(r)];
      const float strip = whole[static_cast<std::size_t>(r * width + c)];
      SCOPED_TRACE(::testing::Message() << "lower " << Lower << " n " << n << " row " << r << " column " << c);
      // A NaN's sign and payload are not specified (row_kernels.hpp); NaN-ness and all other
      // bits are.
      if (std::isnan(strip)) {
        EXPECT_TRUE(std::isnan(alone));
      } else {
        EXPECT_EQ(core::float_bits(alone), core::float_bits(strip));
      }
    }
  }
}

TEST(RowKernels, TriangularProductBitsDoNotDependOnTheColumnSplit) {
  for (RowKernelPath path : row_paths()) {
    const ForcedRowPath forced(path);
    SCOPED_TRACE(::testing::Message() << "path " << static_cast<int>(path));
    for (std::int64_t n : {3, 4, 9, 14}) {
      check_column_split<true>(n);
      check_column_split<false>(n);
    }
  }
}

TEST(RowKernels, TriangularProductsFollowTheDocumentedOrderBitwise) {
  for (RowKernelPath path : row_paths()) {
    const ForcedRowPath forced(path);
    SCOPED_TRACE(::testing::Message() << "path " << static_cast<int>(path));
    for (std::int64_t n : {1, 2, 3, 4, 5, 7, 8, 9, 13}) {
      for (std::int64_t width : {1, 3, 8, 9, 16, 19, 64, 67, 130}) {
        check_triangular<true>(n, width);
        check_triangular<false>(n, width);
      }
    }
  }
}

// Rows of Src, the base row (when used) of Elem: the forward's gathers (Elem rows, no base),
// its writer (f32 rows, a bank base) and the backward's sums (f32 throughout).
template <typename Elem, typename Src = Elem>
void check_weighted_rows(std::int64_t count, std::int64_t width, bool with_base) {
  const auto values = wide_values(static_cast<std::size_t>((count + 1) * width), 5);
  std::vector<Src> store(values.size());
  std::vector<Elem> base_row(static_cast<std::size_t>(width));
  if constexpr (sizeof(Src) == 2) {
    store = to_bf16(values);
  } else {
    store = values;
  }
  const auto base_values = wide_values(static_cast<std::size_t>(width), 6);
  if constexpr (sizeof(Elem) == 2) {
    base_row = to_bf16(base_values);
  } else {
    base_row = base_values;
  }
  std::vector<const Src*> rows;
  for (std::int64_t k = 0; k < count; ++k) rows.push_back(store.data() + (k + 1) * width);
  const auto weight = wide_values(static_cast<std::size_t>(count) + 1, 9);
  const Elem* base = with_base ? base_row.data() : nullptr;
  std::vector<float> out(static_cast<std::size_t>(width)), hinted(out.size());
  weighted_rows<Elem>(rows.data(), weight.data(), count, base, weight[static_cast<std::size_t>(count)], out.data(),
                      width);
  // Prefetch hints (here the same rows in reverse order) must change no bit.
  const std::vector<const Src*> ahead(rows.rbegin(), rows.rend());
  weighted_rows<Elem>(rows.data(), weight.data(), count, base, weight[static_cast<std::size_t>(count)],
                      hinted.data(), width, ahead.data(), count);
  std::vector<float> want(static_cast<std::size_t>(width));
  for (std::int64_t c = 0; c < width; ++c) {
    float acc = with_base ? weight[static_cast<std::size_t>(count)] * load_bank(base[c]) : 0.0f;
    for (std::int64_t k = 0; k < count; ++k) {
      acc += weight[static_cast<std::size_t>(k)] * load_bank(rows[static_cast<std::size_t>(k)][c]);
    }
    want[static_cast<std::size_t>(c)] = acc;
  }
  SCOPED_TRACE(::testing::Message() << "count " << count << " width " << width << " base " << with_base);
  expect_same_bits(out, want);
  expect_same_bits(hinted, want);
}

TEST(RowKernels, WeightedRowsFollowTheDocumentedOrderBitwise) {
  for (RowKernelPath path : row_paths()) {
    const ForcedRowPath forced(path);
    SCOPED_TRACE(::testing::Message() << "path " << static_cast<int>(path));
    for (std::int64_t count : {0, 1, 3, 5, 33}) {
      for (std::int64_t width : {1, 7, 16, 17, 33, 128, 131, 200, 256, 300}) {
        for (bool with_base : {false, true}) {
          check_weighted_rows<float>(count, width, with_base);
          check_weighted_rows<std::uint16_t>(count, width, with_base);
          check_weighted_rows<std::uint16_t, float>(count, width, with_base);
        }
      }
    }
  }
}

// weighted_rows_into_row (the group writer's update, in place): the documented sum with the row
// as its base, rounded once to the row's dtype, on each row-kernel path (the AVX-512 one rounds
// bf16 rows in registers). The row holds some special bf16 patterns (NaN quiet and signalling,
// +-inf, a subnormal, -0) so the rounding's NaN and edge lanes run in the fused store too.
template <typename Elem>
void check_weighted_rows_into_row(std::int64_t count, std::int64_t width) {
  const auto values = wide_values(static_cast<std::size_t>(count * width), 7);
  std::vector<float> store = values;
  std::vector<const float*> rows;
  for (std::int64_t k = 0; k < count; ++k) rows.push_back(store.data() + k * width);
  const auto base_values = wide_values(static_cast<std::size_t>(width), 8);
  std::vector<Elem> row(static_cast<std::size_t>(width));
  if constexpr (sizeof(Elem) == 2) {
    row = to_bf16(base_values);
    const std::uint16_t specials[] = {0x7fc1u, 0x7f81u, 0x7f80u, 0xff80u, 0x0001u, 0x8000u};
    for (std::size_t c = 0; c < std::size(specials) && c < row.size(); ++c) row[(c * 5) % row.size()] = specials[c];
  } else {
    row = base_values;
  }
  const auto weight = wide_values(static_cast<std::size_t>(count) + 1, 10);
  const float base_weight = count == 0 ? 1.0f : weight[static_cast<std::size_t>(count)];
  std::vector<Elem> want(row.size());
  for (std::int64_t c = 0; c < width; ++c) {
    float acc = base_weight * load_bank(row[static_cast<std::size_t>(c)]);
    for (std::int64_t k = 0; k < count; ++k) acc += weight[static_cast<std::size_t>(k)] * rows[static_cast<std::size_t>(k)][c];
    store_bank(want[static_cast<std::size_t>(c)], acc);
  }
  std::vector<float> scratch(static_cast<std::size_t>(width));
  weighted_rows_into_row<Elem>(rows.data(), weight.data(), count, row.data(), base_weight, scratch.data(), width);
  SCOPED_TRACE(::testing::Message() << "count " << count << " width " << width);
  for (std::size_t c = 0; c < row.size(); ++c) {
    std::uint32_t got_bits = 0, want_bits = 0;
    std::memcpy(&got_bits, &row[c], sizeof(Elem));
    std::memcpy(&want_bits, &want[c], sizeof(Elem));
    EXPECT_EQ(got_bits, want_bits) << "column " << c;
  }
}

TEST(RowKernels, WeightedRowsIntoRowRoundOnceInPlaceBitwise) {
  for (RowKernelPath path : row_paths()) {
    const ForcedRowPath forced(path);
    SCOPED_TRACE(::testing::Message() << "path " << static_cast<int>(path));
    for (std::int64_t count : {0, 1, 3, 33}) {
      for (std::int64_t width : {1, 7, 16, 17, 128, 131, 256, 300}) {
        check_weighted_rows_into_row<float>(count, width);
        check_weighted_rows_into_row<std::uint16_t>(count, width);
      }
    }
  }
}

// row_math.hpp's order written out: lane l sums the columns c = l (mod 8) in ascending c,
// then the fixed pairwise tree.
float dot_in_lane_order(const float* x, const float* y, std::int64_t n) {
  float lane[8] = {};
  for (std::int64_t c = 0; c < n; ++c) lane[c % 8] += x[c] * y[c];
  return ((lane[0] + lane[4]) + (lane[2] + lane[6])) + ((lane[1] + lane[5]) + (lane[3] + lane[7]));
}

TEST(RowKernels, DotRowHasTheBitsOfDotOnTheWidenedRow) {
  for (std::int64_t n : {1, 5, 8, 13, 16, 29, 64, 131}) {
    const auto x = wide_values(static_cast<std::size_t>(n), 21);
    const auto y = wide_values(static_cast<std::size_t>(n), 22);
    const auto y16 = to_bf16(y);
    std::vector<float> y16_wide(y16.size());
    for (std::size_t c = 0; c < y16.size(); ++c) y16_wide[c] = core::bf16_to_float(y16[c]);
    SCOPED_TRACE(::testing::Message() << "n " << n);
    EXPECT_EQ(core::float_bits(dot(x.data(), y.data(), n)), core::float_bits(dot_in_lane_order(x.data(), y.data(), n)));
    EXPECT_EQ(core::float_bits(dot_row(x.data(), y.data(), n)), core::float_bits(dot(x.data(), y.data(), n)));
    EXPECT_EQ(core::float_bits(dot_row(x.data(), y16.data(), n)),
              core::float_bits(dot(x.data(), y16_wide.data(), n)));
  }
}

TEST(RowKernels, Avx512PathIsRefusedWhereTheCpuLacksIt) {
  if (row_kernel_path_available(RowKernelPath::avx512)) GTEST_SKIP() << "this CPU has AVX-512 F/BW/VL";
  try {
    set_row_kernel_path(RowKernelPath::avx512);
    ADD_FAILURE() << "forcing AVX-512 on a CPU without it must throw";
  } catch (const ValueError& e) {
    EXPECT_EQ(e.argument(), "path");
    EXPECT_STREQ(e.what(), "AVX-512 is not available on this CPU");
  }
}

}  // namespace
}  // namespace sdm::cpu

// row_kernels.hpp - the register-blocked row kernels of the chunked engine.
//
// Every kernel is elementwise in the column index c: element c of an output is one fixed
// sequence of f32 operations on element c of the inputs (the orders are stated per kernel),
// whatever the blocking, the column strip or the column count. The kernels keep strips of
// columns in 4-wide vectors (GCC/Clang vector extensions: SSE2 on baseline x86-64, scalar
// code elsewhere; row_vectors.hpp) and finish the columns past the last whole strip with scalar code running
// the same sequence, so results are bitwise identical for any width and any column split.
// Products and sums are separate roundings (no fused multiply-add: the baseline x86-64 ISA
// has none, and the scalar tails would not contract the same way if it had). One exception
// to "bitwise": the sign and payload of a NaN result are not specified (x86 keeps the first
// operand's NaN when both are NaN, and the compiler may commute an addition).
//
// Bank rows are bf16 (uint16 bits) or f32. bf16 -> f32 is exact; f32 -> bf16 rounds to
// nearest even with NaN kept quiet, bit-identical to core::bf16_from_float (tested).
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "bf16_store.hpp"
#include "core/float_convert.hpp"
#include "row_kernels_avx512.hpp"
#include "row_vectors.hpp"

namespace sdm::cpu {

// A prefetch hint for the cache lines of [p, p + bytes); changes no value.
inline void prefetch_row(const void* p, std::size_t bytes) {
  const char* bytes_at = static_cast<const char*>(p);
  for (std::size_t offset = 0; offset < bytes; offset += 64) __builtin_prefetch(bytes_at + offset);
}

// One bank element as f32 and back (scalar tails of the kernels).
inline float load_bank(float x) { return x; }
inline float load_bank(std::uint16_t x) { return core::bf16_to_float(x); }
inline void store_bank(float& out, float x) { out = x; }
inline void store_bank(std::uint16_t& out, float x) { out = core::bf16_from_float(x); }

// out[c] = f32(in[c]) for c < width (a bank row widened).
template <typename Elem>
void load_row(const Elem* in, float* out, std::int64_t width) {
  std::int64_t c = 0;
  for (; c + kStrip <= width; c += kStrip) {
    vec::f32x4 lo, hi;
    vec::load8(in + c, lo, hi);
    vec::store8(out + c, lo, hi);
  }
  for (; c < width; ++c) out[c] = load_bank(in[c]);
}

// out[c] = rnd_Elem(a[c]) (b == nullptr) or rnd_Elem(a[c] + b[c]), c < width. bf16 rows go
// through store_bf16_row (bf16_store.hpp: the same bits on its baseline and AVX2 paths).
inline void store_row(float* out, const float* a, const float* b, std::int64_t width) {
  std::int64_t c = 0;
  for (; c + kStrip <= width; c += kStrip) {
    vec::f32x4 lo = vec::load4(a + c), hi = vec::load4(a + c + 4);
    if (b) {
      lo += vec::load4(b + c);
      hi += vec::load4(b + c + 4);
    }
    vec::store8(out + c, lo, hi);
  }
  for (; c < width; ++c) out[c] = b ? a[c] + b[c] : a[c];
}

inline void store_row(std::uint16_t* out, const float* a, const float* b, std::int64_t width) {
  store_bf16_row(out, a, b, width);
}

// row[c] = f32(rnd_Elem(row[c])), c < width, in place: the bits of load_bank(store_bank(x))
// (bf16: core::bf16_from_float's rounding in vector lanes, row_vectors.hpp; f32: unchanged).
inline void round_row_to_bank(float*, std::int64_t, const float*) {}
inline void round_row_to_bank(float* row, std::int64_t width, const std::uint16_t*) {
  std::int64_t c = 0;
  const vec::u32x4 high{0xffff0000u, 0xffff0000u, 0xffff0000u, 0xffff0000u};
  for (; c + 4 <= width; c += 4) {
    vec::store4(row + c, reinterpret_cast<vec::f32x4>(vec::bf16_round_high(vec::load4(row + c)) & high));
  }
  for (; c < width; ++c) row[c] = core::bf16_to_float(core::bf16_from_float(row[c]));
}

// out[c] = init(c) + sum_{k < count} weight[k] * f32(rows[k][c]), k ascending, each
// product and each sum rounded to f32; init(c) = +0 (base == nullptr) or
// base_weight * f32(base[c]). Rows are read, out is written, once per element; out may be
// base itself (Elem = float). Runs on row_kernels_avx512.hpp's path when that is active
// (the same bits). Prefetch hints only: term k also hints row ahead[k]'s columns [0, width)
// into the cache for k < ahead_count (the rows of a later sum, a fixed distance ahead).
template <typename Elem, typename Src>
void weighted_rows(const Src* const* rows, const float* weight, std::int64_t count, const Elem* base,
                   float base_weight, float* out, std::int64_t width, const Src* const* ahead = nullptr,
                   std::int64_t ahead_count = 0) {
  using vec::f32x4;
  if constexpr (!(std::is_same_v<Elem, float> && std::is_same_v<Src, std::uint16_t>)) {
    if (row_kernels_avx512_active()) {
      return weighted_rows_avx512(rows, weight, count, base, base_weight, out, width, ahead, ahead_count);
    }
  }
  std::int64_t c = 0;
  for (; c + 2 * kStrip <= width; c += 2 * kStrip) {
    f32x4 a0{}, a1{}, a2{}, a3{};
    if (base) {
      const f32x4 d = vec::splat(base_weight);
      vec::load8(base + c, a0, a1);
      vec::load8(base + c + kStrip, a2, a3);
      a0 = d * a0, a1 = d * a1, a2 = d * a2, a3 = d * a3;
    }
    for (std::int64_t k = 0; k < count; ++k) {
      if (c == 0 && k < ahead_count) prefetch_row(ahead[k], static_cast<std::size_t>(width) * sizeof(Src));
      const f32x4 w = vec::splat(weight[k]);
      f32x4 x0, x1, x2, x3;
      vec::load8(rows[k] + c, x0, x1);
      vec::load8(rows[k] + c + kStrip, x2, x3);
      a0 += w * x0, a1 += w * x1, a2 += w * x2, a3 += w * x3;
    }
    vec::store8(out + c, a0, a1);
    vec::store8(out + c + kStrip, a2, a3);
  }
  for (; c < width; ++c) {
    float acc = base ? base_weight * load_bank(base[c]) : 0.0f;
    for (std::int64_t k = 0; k < count; ++k) acc += weight[k] * load_bank(rows[k][c]);
    out[c] = acc;
  }
}

// row[c] = rnd_Elem(base_weight * f32(row[c]) + sum_{k < count} weight[k] * rows[k][c]): the
// weighted_rows sum with `row` as its base, rounded once and stored back into `row` (the
// group writer's update). scratch: width f32. With a bf16 row and the AVX-512 path active,
// the rounding runs in registers (weighted_rows_to_bf16_avx512); otherwise weighted_rows into
// scratch, then store_row: the same sum, the same rounding, the same bits.
template <typename Elem>
void weighted_rows_into_row(const float* const* rows, const float* weight, std::int64_t count, Elem* row,
                            float base_weight, float* scratch, std::int64_t width) {
  if constexpr (std::is_same_v<Elem, std::uint16_t>) {
    if (row_kernels_avx512_active()) return weighted_rows_to_bf16_avx512(rows, weight, count, row, base_weight, row, width);
  }
  weighted_rows<Elem>(rows, weight, count, row, base_weight, scratch, width);
  store_row(row, scratch, nullptr, width);
}

// sum_c x[c] * f32(y[c]) in row_math.hpp's dot order (8 lanes, lane l taking the columns
// c = l mod 8 in ascending c, then the fixed pairwise tree): the bits of dot(x, f32(y), n),
// without widening y into a scratch row first.
template <typename Elem>
float dot_row(const float* x, const Elem* y, std::int64_t n) {
  vec::f32x4 lo{}, hi{};
  std::int64_t c = 0;
  for (; c + kStrip <= n; c += kStrip) {
    vec::f32x4 yl, yh;
    vec::load8(y + c, yl, yh);
    lo += vec::load4(x + c) * yl;
    hi += vec::load4(x + c + 4) * yh;
  }
  float lane[8];
  vec::store8(lane, lo, hi);
  for (int l = 0; c < n; ++c, ++l) lane[l] += x[c] * load_bank(y[c]);
  return ((lane[0] + lane[4]) + (lane[2] + lane[6])) + ((lane[1] + lane[5]) + (lane[3] + lane[7]));
}

// The triangular products of the chunk, on [n, width] row-major f32 matrices in and out,
// with coef a row-major matrix of leading dimension ldc and n <= kMaxChunkRows:
//   Lower = true:  out_i = sum_{j = 0 .. i}     coef[i][j] * in_j   (j ascending)
//   Lower = false: out_j = sum_{i = j .. n - 1} coef[i][j] * in_i   (i ascending)
// Each sum starts from +0 and rounds every product and every sum to f32. Blocked as 4 output
// rows x 8 columns held in registers over the whole sum (one load of in per term for 4 rows,
// no reload or store of the accumulators); leftover rows and columns run the same order.
// Structural zeros: a term outside a block's diagonal triangle whose coefficients are +-0
// for all 4 rows of the block is skipped (for a leftover row: whose coefficient is +-0).
// This never changes a bit when in_k is finite: such a term adds +-0, and a sum that starts
// at +0 is never -0, so adding +-0 leaves it unchanged (with in_k inf or NaN the skipped term
// would have made the sum NaN). The rule depends on the rows only, never on the column, so
// the column split still changes no bit. A and QK are sparse (tokens of a chunk rarely share
// a row), so X and QK mostly are too; the kept terms are listed once per row block. With
// row_kernels_avx512.hpp's path active, each block's (and leftover row's) column sweep runs
// there (16-lane vectors, the same terms in the same order: the same bits).
inline constexpr std::int64_t kMaxChunkRows = 256;

template <bool Lower>
void triangular_product(const float* coef, std::int64_t ldc, const float* in, float* out, std::int64_t n,
                        std::int64_t width) {
  using vec::f32x4;
  constexpr std::int64_t kRows = 4;
  // Coefficient of term k in output row r.
  auto cf = [&](std::int64_t r, std::int64_t k) { return Lower ? coef[r * ldc + k] : coef[k * ldc + r]; };
  std::int32_t kept[kMaxChunkRows];  // the block's terms, ascending
  for (std::int64_t r0 = 0; r0 < n; r0 += kRows) {
    const std::int64_t rows = n - r0 < kRows ? n - r0 : kRows;
    if (rows < kRows) {
      // Leftover rows, one at a time: the terms with a nonzero coefficient.
      for (std::int64_t r = r0; r < n; ++r) {
        std::int64_t count = 0;
        for (std::int64_t k = Lower ? 0 : r; k <= (Lower ? r : n - 1); ++k) {
          if (cf(r, k) != 0.0f) kept[count++] = static_cast<std::int32_t>(k);
        }
        if (row_kernels_avx512_active()) {
          triangular_rows_avx512(Lower, coef, ldc, in, out, r, 1, kept, count, width);
          continue;
        }
        std::int64_t c = 0;
        for (; c + kStrip <= width; c += kStrip) {
          f32x4 lo{}, hi{};
          for (std::int64_t t = 0; t < count; ++t) {
            f32x4 xl, xh;
            vec::load8(in + kept[t] * width + c, xl, xh);
            const f32x4 w = vec::splat(cf(r, kept[t]));
            lo += w * xl;
            hi += w * xh;
          }
          vec::store8(out + r * width + c, lo, hi);
        }
        for (; c < width; ++c) {
          float acc = 0.0f;
          for (std::int64_t t = 0; t < count; ++t) acc += cf(r, kept[t]) * in[kept[t] * width + c];
          out[r * width + c] = acc;
        }
      }
      continue;
    }
    // A whole block: the shared terms (in every row's range) unless all 4 coefficients are
    // zero, and the 4 terms of the block's diagonal triangle, in ascending order.
    std::int64_t count = 0;
    auto keep_shared = [&](std::int64_t k) {
      if (cf(r0, k) != 0.0f || cf(r0 + 1, k) != 0.0f || cf(r0 + 2, k) != 0.0f || cf(r0 + 3, k) != 0.0f) {
        kept[count++] = static_cast<std::int32_t>(k);
      }
    };
    if (Lower) {
      for (std::int64_t k = 0; k < r0; ++k) keep_shared(k);
    } else {
      for (std::int64_t k = r0 + kRows; k < n; ++k) keep_shared(k);
    }
    if (row_kernels_avx512_active()) {
      triangular_rows_avx512(Lower, coef, ldc, in, out, r0, kRows, kept, count, width);
      continue;
    }
    // Row r of the block takes triangle term r0 + t when t <= r (Lower) or t >= r (upper).
    auto in_triangle = [](std::int64_t r, std::int64_t t) { return Lower ? t <= r : t >= r; };
    std::int64_t c = 0;
    for (; c + kStrip <= width; c += kStrip) {
      f32x4 lo[kRows] = {}, hi[kRows] = {};
      auto shared_terms = [&] {
        for (std::int64_t t = 0; t < count; ++t) {
          f32x4 xl, xh;
          vec::load8(in + kept[t] * width + c, xl, xh);
          for (std::int64_t r = 0; r < kRows; ++r) {
            const f32x4 w = vec::splat(cf(r0 + r, kept[t]));
            lo[r] += w * xl;
            hi[r] += w * xh;
          }
        }
      };
      auto triangle_terms = [&] {
        for (std::int64_t t = 0; t < kRows; ++t) {
          f32x4 xl, xh;
          vec::load8(in + (r0 + t) * width + c, xl, xh);
          for (std::int64_t r = 0; r < kRows; ++r) {
            if (!in_triangle(r, t)) continue;
            const f32x4 w = vec::splat(cf(r0 + r, r0 + t));
            lo[r] += w * xl;
            hi[r] += w * xh;
          }
        }
      };
      if (Lower) {
        shared_terms();
        triangle_terms();
      } else {
        triangle_terms();
        shared_terms();
      }
      for (std::int64_t r = 0; r < kRows; ++r) vec::store8(out + (r0 + r) * width + c, lo[r], hi[r]);
    }
    for (; c < width; ++c) {
      for (std::int64_t r = 0; r < kRows; ++r) {
        float acc = 0.0f;
        auto shared_terms = [&] {
          for (std::int64_t t = 0; t < count; ++t) acc += cf(r0 + r, kept[t]) * in[kept[t] * width + c];
        };
        auto triangle_terms = [&] {
          for (std::int64_t t = 0; t < kRows; ++t) {
            if (in_triangle(r, t)) acc += cf(r0 + r, r0 + t) * in[(r0 + t) * width + c];
          }
        };
        if (Lower) {
          shared_terms();
          triangle_terms();
        } else {
          triangle_terms();
          shared_terms();
        }
        out[(r0 + r) * width + c] = acc;
      }
    }
  }
}

}  // namespace sdm::cpu

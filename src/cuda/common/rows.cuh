// rows.cuh - row pieces, fixed-order warp dot products and any-dtype element access of
// the CUDA backward.
//
// Column ownership (every backward kernel that walks a row with one warp): lane l owns the
// columns c = 256 s + 8 l + k (k < 8, c < hd) of column step s. With kVec (hd % 8 == 0 and
// 16-byte aligned rows) a piece of 8 is one or two 16-byte accesses; without it the same columns
// are accessed one element at a time. The ownership, hence every reduction order below, depends
// on hd only, never on the access path or on pointer alignment.
//
// The warp dot order (every row dot of the backward's slot kernels): lane partial = fmaf chain over
// the lane's columns in ascending c (f32, RN), then warp_sum's butterfly over the 32 lanes combining
// lanes that differ in bit 4 first, then 3, 2, 1, 0. Every lane ends with the same value. warp_sums
// runs that butterfly on several values at once (bitwise the same per value), for kernels that
// accumulate many dots' lane partials in one walk over a row; warp_sum8_to_lanes, warp_sum4_to_lanes
// and warp_sum2_to_lanes run it transposed (the same totals, fewer shuffles, each in some lanes).
#pragma once

#include <cstdint>

#include "core/float_convert.hpp"
#include "cuda/common/values.cuh"
#include "sdm/types.hpp"

namespace sdm::cuda {

constexpr int kLaneCols = 8;
constexpr int kWarpCols = 32 * kLaneCols;

// Loads the piece of `row` at column c0 (c0 < hd) as f32; returns how many columns are real.
template <bool kVec, typename E>
__device__ __forceinline__ int load_piece(const E* row, std::int64_t c0, std::int64_t hd, float (&x)[kLaneCols]) {
  if constexpr (kVec) {
    load_row<kLaneCols>(row + c0, x);
    return kLaneCols;
  } else {
    const int valid = hd - c0 < kLaneCols ? static_cast<int>(hd - c0) : kLaneCols;
#pragma unroll
    for (int k = 0; k < kLaneCols; ++k) x[k] = k < valid ? to_f32(row[c0 + k]) : 0.0f;
    return valid;
  }
}

// Stores the real columns of a piece, rounded once to E.
template <bool kVec, typename E>
__device__ __forceinline__ void store_piece(E* row, std::int64_t c0, std::int64_t hd, const float (&x)[kLaneCols]) {
  if constexpr (kVec) {
    store_row<kLaneCols>(row + c0, x);
  } else {
    const int valid = hd - c0 < kLaneCols ? static_cast<int>(hd - c0) : kLaneCols;
#pragma unroll
    for (int k = 0; k < kLaneCols; ++k) {
      if (k < valid) row[c0 + k] = from_f32<E>(x[k]);
    }
  }
}

// Two f32 values as packed bf16 bits (lo in bits 0-15) by the hardware's round-to-nearest-even
// conversion: bitwise core::bf16_from_float for every non-NaN value (subnormals kept, overflow to
// inf); NaN inputs come out differently, so callers check for them (store_piece_cvt).
__device__ __forceinline__ std::uint32_t bf16x2_rn(float lo, float hi) {
  std::uint32_t packed;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(packed) : "f"(hi), "f"(lo));
  return packed;
}

// store_piece with bitwise the same result and fewer instructions: a vector bf16 piece without
// NaN is rounded by bf16x2_rn (4 conversions instead of 8 integer roundings); a piece holding a
// NaN, f32 rows and the element path take store_piece.
template <bool kVec, typename E>
__device__ __forceinline__ void store_piece_cvt(E* row, std::int64_t c0, std::int64_t hd, const float (&x)[kLaneCols]) {
  if constexpr (kVec && sizeof(E) == 2) {
    // setp.nan tests two values at once: 4 compares for the piece.
    std::uint32_t nan;
    asm("{\n\t.reg .pred p;\n\t"
        "setp.nan.f32 p, %1, %2;\n\t"
        "setp.nan.or.f32 p, %3, %4, p;\n\t"
        "setp.nan.or.f32 p, %5, %6, p;\n\t"
        "setp.nan.or.f32 p, %7, %8, p;\n\t"
        "selp.u32 %0, 1, 0, p;\n\t}"
        : "=r"(nan)
        : "f"(x[0]), "f"(x[1]), "f"(x[2]), "f"(x[3]), "f"(x[4]), "f"(x[5]), "f"(x[6]), "f"(x[7]));
    if (nan == 0) {
      *reinterpret_cast<uint4*>(row + c0) =
          make_uint4(bf16x2_rn(x[0], x[1]), bf16x2_rn(x[2], x[3]), bf16x2_rn(x[4], x[5]), bf16x2_rn(x[6], x[7]));
      return;
    }
  }
  store_piece<kVec>(row, c0, hd, x);
}

// Copies the real columns of a piece bit for bit (no conversion).
template <bool kVec, typename E>
__device__ __forceinline__ void copy_piece(const E* src, E* dst, std::int64_t c0, std::int64_t hd) {
  if constexpr (kVec) {
    constexpr int kWords = kLaneCols * static_cast<int>(sizeof(E)) / 16;
#pragma unroll
    for (int k = 0; k < kWords; ++k) reinterpret_cast<uint4*>(dst + c0)[k] = reinterpret_cast<const uint4*>(src + c0)[k];
  } else {
    const int valid = hd - c0 < kLaneCols ? static_cast<int>(hd - c0) : kLaneCols;
    for (int k = 0; k < valid; ++k) dst[c0 + k] = src[c0 + k];
  }
}

__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) x += __shfl_xor_sync(0xffffffffu, x, offset);
  return x;
}

// warp_sum of every x[j] at once: the same butterfly per value, so each result is bitwise
// warp_sum's; the values' shuffles interleave.
template <int kCount>
__device__ __forceinline__ void warp_sums(float (&x)[kCount]) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) {
#pragma unroll
    for (int j = 0; j < kCount; ++j) x[j] += __shfl_xor_sync(0xffffffffu, x[j], offset);
  }
}

// warp_sum of four values at once, transposed: in the round of offset 16 a lane keeps two of the
// values and sends its partner the other two, in the round of 8 it keeps one, then the rounds of
// 4, 2, 1 as warp_sum. Every partial is the sum of the same two partials as in warp_sum (fp32
// addition commutes), so each total is bitwise warp_sum's, in 6 shuffles instead of 20. Lane l
// returns the total of value (l >> 3) & 3: lanes 0, 8, 16, 24 hold v0, v1, v2, v3's (other
// lanes hold the same totals). Called by all 32 lanes.
__device__ __forceinline__ float warp_sum4_to_lanes(float v0, float v1, float v2, float v3, int lane) {
  const bool hi16 = (lane & 16) != 0, hi8 = (lane & 8) != 0;
  const float a = (hi16 ? v2 : v0) + __shfl_xor_sync(0xffffffffu, hi16 ? v0 : v2, 16);
  const float b = (hi16 ? v3 : v1) + __shfl_xor_sync(0xffffffffu, hi16 ? v1 : v3, 16);
  float x = (hi8 ? b : a) + __shfl_xor_sync(0xffffffffu, hi8 ? a : b, 8);
#pragma unroll
  for (int offset = 4; offset > 0; offset /= 2) x += __shfl_xor_sync(0xffffffffu, x, offset);
  return x;
}

// The same for eight values (rounds 16, 8, 4 keep four, two, one of them): lane l returns the
// total of value (l >> 2) & 7 (lanes 0, 4, 8, .., 28 hold v[0] .. v[7]'s), bitwise warp_sum's, in
// 9 shuffles instead of 40.
__device__ __forceinline__ float warp_sum8_to_lanes(const float (&v)[8], int lane) {
  const bool hi16 = (lane & 16) != 0, hi8 = (lane & 8) != 0, hi4 = (lane & 4) != 0;
  float a[4], b[2];
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    a[j] = (hi16 ? v[4 + j] : v[j]) + __shfl_xor_sync(0xffffffffu, hi16 ? v[j] : v[4 + j], 16);
  }
#pragma unroll
  for (int j = 0; j < 2; ++j) b[j] = (hi8 ? a[2 + j] : a[j]) + __shfl_xor_sync(0xffffffffu, hi8 ? a[j] : a[2 + j], 8);
  float x = (hi4 ? b[1] : b[0]) + __shfl_xor_sync(0xffffffffu, hi4 ? b[0] : b[1], 4);
  x += __shfl_xor_sync(0xffffffffu, x, 2);
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x;
}

// The same for two values: lane l returns the total of value (l >> 4) & 1 (lanes 0 and 16 hold
// v0's and v1's), bitwise warp_sum's, in 5 shuffles instead of 10.
__device__ __forceinline__ float warp_sum2_to_lanes(float v0, float v1, int lane) {
  const bool hi16 = (lane & 16) != 0;
  float x = (hi16 ? v1 : v0) + __shfl_xor_sync(0xffffffffu, hi16 ? v0 : v1, 16);
#pragma unroll
  for (int offset = 8; offset > 0; offset /= 2) x += __shfl_xor_sync(0xffffffffu, x, offset);
  return x;
}

// One element of a float tensor of any dtype (f64 / f32 / bf16 / f16) as f32 (f64: rounded once).
__device__ __forceinline__ float load_any(const void* data, DType dtype, std::int64_t i) {
  switch (dtype) {
    case DType::f64: return static_cast<float>(static_cast<const double*>(data)[i]);
    case DType::bf16: return core::bf16_to_float(static_cast<const std::uint16_t*>(data)[i]);
    case DType::f16: return core::f16_to_float(static_cast<const std::uint16_t*>(data)[i]);
    default: return static_cast<const float*>(data)[i];
  }
}

// Stores x into element i of a float tensor of any dtype (rounded once to it).
__device__ __forceinline__ void store_any(void* data, DType dtype, std::int64_t i, float x) {
  switch (dtype) {
    case DType::f64: static_cast<double*>(data)[i] = x; break;
    case DType::bf16: static_cast<std::uint16_t*>(data)[i] = core::bf16_from_float(x); break;
    case DType::f16: static_cast<std::uint16_t*>(data)[i] = core::f16_from_float(x); break;
    default: static_cast<float*>(data)[i] = x; break;
  }
}

}  // namespace sdm::cuda

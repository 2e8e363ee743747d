// row_vectors.hpp - the 4-wide f32 vectors of the CPU row kernels (GCC/Clang vector
// extensions: SSE2 on baseline x86-64, scalar code elsewhere) and the 8-column strip they work in.
//
// load8 / store8 move eight row elements (f32, or bf16 bits) to and from two f32x4; the bf16
// store rounds to nearest even with NaN kept quiet, bit-identical to core::bf16_from_float.
// Shared by row_kernels.hpp and bf16_store.cpp (its baseline path).
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace sdm::cpu {

// Columns per strip of the row kernels: two f32x4.
inline constexpr std::int64_t kStrip = 8;

namespace vec {

typedef float f32x4 __attribute__((vector_size(16)));
typedef std::uint32_t u32x4 __attribute__((vector_size(16)));
typedef std::int32_t i32x4 __attribute__((vector_size(16)));
typedef std::uint16_t u16x8 __attribute__((vector_size(16)));

inline f32x4 load4(const float* p) {
  f32x4 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

inline void store4(float* p, f32x4 v) { std::memcpy(p, &v, sizeof v); }

inline f32x4 splat(float x) { return f32x4{x, x, x, x}; }

// Eight consecutive row elements as f32 (lo = elements 0..3, hi = 4..7).
inline void load8(const float* p, f32x4& lo, f32x4& hi) {
  lo = load4(p);
  hi = load4(p + 4);
}

inline void load8(const std::uint16_t* p, f32x4& lo, f32x4& hi) {
  u16x8 h;
  std::memcpy(&h, p, sizeof h);
  const u16x8 zero{};
  // bf16 bits in the high half of each 32-bit lane, zeros in the low half (little endian).
  lo = reinterpret_cast<f32x4>(__builtin_shufflevector(zero, h, 0, 8, 1, 9, 2, 10, 3, 11));
  hi = reinterpret_cast<f32x4>(__builtin_shufflevector(zero, h, 4, 12, 5, 13, 6, 14, 7, 15));
}

// Four f32 values rounded to bf16, the bf16 bits in the high half of each lane: the lane
// arithmetic of core::bf16_from_float (NaN -> quiet NaN, else round to nearest even).
inline u32x4 bf16_round_high(f32x4 x) {
  const u32x4 u = reinterpret_cast<u32x4>(x);
  const u32x4 one{1u, 1u, 1u, 1u};
  const u32x4 rounded = u + u32x4{0x7fffu, 0x7fffu, 0x7fffu, 0x7fffu} + ((u >> 16) & one);
  const i32x4 magnitude = reinterpret_cast<i32x4>(u & u32x4{0x7fffffffu, 0x7fffffffu, 0x7fffffffu, 0x7fffffffu});
  const u32x4 is_nan = reinterpret_cast<u32x4>(magnitude > i32x4{0x7f800000, 0x7f800000, 0x7f800000, 0x7f800000});
  const u32x4 quiet = u | u32x4{0x00400000u, 0x00400000u, 0x00400000u, 0x00400000u};
  return (is_nan & quiet) | (~is_nan & rounded);
}

inline void store8(float* p, f32x4 lo, f32x4 hi) {
  store4(p, lo);
  store4(p + 4, hi);
}

inline void store8(std::uint16_t* p, f32x4 lo, f32x4 hi) {
  const u32x4 a = bf16_round_high(lo), b = bf16_round_high(hi);
#if defined(__SSE2__)
  // Arithmetic shift: each high half sign-extended, so the signed saturating pack is exact.
  const __m128i packed = _mm_packs_epi32(_mm_srai_epi32(reinterpret_cast<__m128i>(a), 16),
                                         _mm_srai_epi32(reinterpret_cast<__m128i>(b), 16));
  std::memcpy(p, &packed, sizeof packed);
#else
  for (int l = 0; l < 4; ++l) {
    p[l] = static_cast<std::uint16_t>(a[l] >> 16);
    p[l + 4] = static_cast<std::uint16_t>(b[l] >> 16);
  }
#endif
}

}  // namespace vec

}  // namespace sdm::cpu

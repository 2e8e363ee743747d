// bf16_round_avx512.hpp - core::bf16_from_float on sixteen f32 lanes with AVX-512 F/BW/VL
// (x86-64 only; include inside a translation unit's AVX-512 code, called from functions
// compiled for those features).
//
// Per lane, the integer steps of core::bf16_from_float: u = bits(x); rounded = u + 0x7fff +
// ((u >> 16) & 1) (round to nearest even); a NaN (|u| > 0x7f800000) takes u | 0x00400000
// (quiet) instead; the result is the high 16 bits, narrowed by vpmovdw (each lane's low 16
// bits after the shift). Integer arithmetic only: the bits of the scalar function exactly
// (tested on every bf16 pattern, test_row_kernels.cpp).
#pragma once

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

namespace sdm::cpu {

__attribute__((target("avx512f,avx512bw,avx512vl"))) inline __m256i bf16_round16(__m512 x) {
  const __m512i u = _mm512_castps_si512(x);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  const __m512i rounded = _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), lsb);
  const __m512i magnitude = _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff));
  const __mmask16 is_nan = _mm512_cmpgt_epi32_mask(magnitude, _mm512_set1_epi32(0x7f800000));
  const __m512i quiet = _mm512_or_si512(u, _mm512_set1_epi32(0x00400000));
  return _mm512_cvtepi32_epi16(_mm512_srli_epi32(_mm512_mask_blend_epi32(is_nan, rounded, quiet), 16));
}

}  // namespace sdm::cpu
#endif

// bf16_store.cpp - the paths of store_bf16_row; the contract is in bf16_store.hpp.
#include "bf16_store.hpp"

#include <atomic>

#include "core/float_convert.hpp"
#include "row_vectors.hpp"
#include "sdm/error.hpp"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define SDM_BF16_STORE_AVX2 1
// GCC 12's AVX-512 intrinsics pass a deliberately undefined source operand
// (_mm512_undefined_*), which -Wmaybe-uninitialized reports at every inlined use.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include "bf16_round_avx512.hpp"
#endif

namespace sdm::cpu {
namespace {

void store_baseline(std::uint16_t* out, const float* a, const float* b, std::int64_t width) {
  std::int64_t c = 0;
  for (; c + kStrip <= width; c += kStrip) {
    vec::f32x4 lo = vec::load4(a + c), hi = vec::load4(a + c + 4);
    if (b) {
      lo += vec::load4(b + c);
      hi += vec::load4(b + c + 4);
    }
    vec::store8(out + c, lo, hi);
  }
  for (; c < width; ++c) out[c] = core::bf16_from_float(b ? a[c] + b[c] : a[c]);
}

#if SDM_BF16_STORE_AVX2
// Eight lanes of core::bf16_from_float, the bf16 bits in the low half of each 32-bit lane.
__attribute__((target("avx2"))) inline __m256i round_avx2(__m256 x) {
  const __m256i u = _mm256_castps_si256(x);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  const __m256i rounded = _mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), lsb);
  const __m256i magnitude = _mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff));
  const __m256i is_nan = _mm256_cmpgt_epi32(magnitude, _mm256_set1_epi32(0x7f800000));
  const __m256i quiet = _mm256_or_si256(u, _mm256_set1_epi32(0x00400000));
  return _mm256_srli_epi32(_mm256_blendv_epi8(rounded, quiet, is_nan), 16);
}

__attribute__((target("avx2"))) void store_avx2(std::uint16_t* out, const float* a, const float* b,
                                                std::int64_t width) {
  std::int64_t c = 0;
  for (; c + 16 <= width; c += 16) {
    __m256 x0 = _mm256_loadu_ps(a + c), x1 = _mm256_loadu_ps(a + c + 8);
    if (b) {
      x0 = _mm256_add_ps(x0, _mm256_loadu_ps(b + c));
      x1 = _mm256_add_ps(x1, _mm256_loadu_ps(b + c + 8));
    }
    // packus works per 128-bit half: [x0 0-3, x1 0-3, x0 4-7, x1 4-7]; the permute restores
    // the column order. Every lane is <= 0xffff, so the unsigned saturation never acts.
    const __m256i packed = _mm256_packus_epi32(round_avx2(x0), round_avx2(x1));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + c), _mm256_permute4x64_epi64(packed, 0xd8));
  }
  // Clear the upper register halves before any SSE code runs again (GCC 12 omits this before
  // the tail call below; left dirty, they slowed every later SSE instruction: measured as a
  // 1.5x slower decode after a forward).
  _mm256_zeroupper();
  store_baseline(out + c, a + c, b ? b + c : nullptr, width - c);
}

#define SDM_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl")))
SDM_AVX512 void store_avx512(std::uint16_t* out, const float* a, const float* b, std::int64_t width) {
  std::int64_t c = 0;
  for (; c + 16 <= width; c += 16) {
    __m512 x = _mm512_loadu_ps(a + c);
    if (b) x = _mm512_add_ps(x, _mm512_loadu_ps(b + c));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + c), bf16_round16(x));
  }
  if (c < width) {
    const auto m = static_cast<__mmask16>((1u << (width - c)) - 1u);
    __m512 x = _mm512_maskz_loadu_ps(m, a + c);
    if (b) x = _mm512_add_ps(x, _mm512_maskz_loadu_ps(m, b + c));
    _mm256_mask_storeu_epi16(out + c, m, bf16_round16(x));
  }
}
#undef SDM_AVX512
#endif

bool cpu_has_avx512() {
#if SDM_BF16_STORE_AVX2
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl");
#else
  return false;
#endif
}

bool cpu_has_avx2() {
#if SDM_BF16_STORE_AVX2
  return __builtin_cpu_supports("avx2");
#else
  return false;
#endif
}

Bf16StorePath resolve(Bf16StorePath path) {
  if (path == Bf16StorePath::automatic) {
    if (cpu_has_avx512()) return Bf16StorePath::avx512;
    return cpu_has_avx2() ? Bf16StorePath::avx2 : Bf16StorePath::baseline;
  }
  return path;
}

std::atomic<Bf16StorePath>& active_path() {
  static std::atomic<Bf16StorePath> path{resolve(Bf16StorePath::automatic)};
  return path;
}

}  // namespace

void store_bf16_row(std::uint16_t* out, const float* a, const float* b, std::int64_t width) {
#if SDM_BF16_STORE_AVX2
  const Bf16StorePath path = active_path().load(std::memory_order_relaxed);
  if (path == Bf16StorePath::avx512) return store_avx512(out, a, b, width);
  if (path == Bf16StorePath::avx2) return store_avx2(out, a, b, width);
#endif
  store_baseline(out, a, b, width);
}

bool bf16_store_path_available(Bf16StorePath path) {
  if (path == Bf16StorePath::avx512) return cpu_has_avx512();
  return path != Bf16StorePath::avx2 || cpu_has_avx2();
}

void set_bf16_store_path(Bf16StorePath path) {
  if (!bf16_store_path_available(path)) {
    throw ValueError("path", path == Bf16StorePath::avx512 ? "AVX-512 F/BW/VL is not available on this CPU"
                                                           : "AVX2 is not available on this CPU");
  }
  active_path().store(resolve(path), std::memory_order_relaxed);
}

}  // namespace sdm::cpu

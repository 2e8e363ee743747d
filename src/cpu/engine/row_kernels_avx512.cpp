// row_kernels_avx512.cpp - the AVX-512 row kernels; the contract is in row_kernels_avx512.hpp.
// Compiled with -ffp-contract=off (CMakeLists.txt): every product and sum rounds separately,
// as on the baseline path.
#include "row_kernels_avx512.hpp"

#include <atomic>

#include "core/float_convert.hpp"
#include "sdm/error.hpp"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define SDM_ROWS_AVX512 1
// GCC 12's AVX-512 intrinsics pass a deliberately undefined source operand
// (_mm512_undefined_*), which -Wmaybe-uninitialized reports at every inlined use (and, for
// the shifts of bf16_round16 inlined here, -Wuninitialized).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include "bf16_round_avx512.hpp"
#endif

namespace sdm::cpu {
namespace {

#if SDM_ROWS_AVX512
#define SDM_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl")))

// Sixteen row elements as f32 (masked lanes read nothing and hold +0).
SDM_AVX512 inline __m512 load16(const float* p, __mmask16 m) { return _mm512_maskz_loadu_ps(m, p); }
SDM_AVX512 inline __m512 load16(const std::uint16_t* p, __mmask16 m) {
  const __m256i h = _mm256_maskz_loadu_epi16(m, p);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

// The sums' results: f32 as they are, or rounded to bf16 (bf16_round_avx512.hpp).
SDM_AVX512 inline void store16(float* p, __mmask16 m, __m512 x) { _mm512_mask_storeu_ps(p, m, x); }
SDM_AVX512 inline void store16(std::uint16_t* p, __mmask16 m, __m512 x) {
  _mm256_mask_storeu_epi16(p, m, bf16_round16(x));
}

// Columns [0, 16 * (V - 1) + lanes of the last mask) of one column block. `out` may be
// `base`: the block reads its base columns before it stores them.
// With `ahead`, term k first hints the block's columns of row ahead[k] (k < ahead_count) into
// the cache: one row's lines per term, a fixed distance ahead of the loads (no value changes).
template <int V, typename Src, typename Base, typename Out>
SDM_AVX512 void block(const Src* const* rows, const float* weight, std::int64_t count, const Base* base,
                      float base_weight, Out* out, std::int64_t c0, __mmask16 last, const Src* const* ahead,
                      std::int64_t ahead_count) {
  __m512 acc[V];
  auto mask = [&](int v) { return v == V - 1 ? last : static_cast<__mmask16>(0xffff); };
  if (base) {
    const __m512 d = _mm512_set1_ps(base_weight);
#pragma GCC unroll 8
    for (int v = 0; v < V; ++v) acc[v] = _mm512_mul_ps(d, load16(base + c0 + 16 * v, mask(v)));
  } else {
#pragma GCC unroll 8
    for (int v = 0; v < V; ++v) acc[v] = _mm512_setzero_ps();
  }
  constexpr int kLineVectors = 64 / (16 * static_cast<int>(sizeof(Src)));  // vectors per cache line
  for (std::int64_t k = 0; k < count; ++k) {
    if (k < ahead_count) {
#pragma GCC unroll 8
      for (int v = 0; v < V; v += kLineVectors) {
        _mm_prefetch(reinterpret_cast<const char*>(ahead[k] + c0 + 16 * v), _MM_HINT_T0);
      }
    }
    const __m512 w = _mm512_set1_ps(weight[k]);
    const Src* row = rows[k] + c0;
#pragma GCC unroll 8
    for (int v = 0; v < V; ++v) acc[v] = _mm512_add_ps(acc[v], _mm512_mul_ps(w, load16(row + 16 * v, mask(v))));
  }
#pragma GCC unroll 8
  for (int v = 0; v < V; ++v) store16(out + c0 + 16 * v, mask(v), acc[v]);
}
// (No explicit _mm256_zeroupper: GCC places a vzeroupper after the last wide instruction of
// each function; an explicit one can be scheduled before wide register uses, which then leave
// the upper state dirty and slow every later SSE instruction of the baseline code.)

template <typename Src, typename Base, typename Out>
SDM_AVX512 void weighted(const Src* const* rows, const float* weight, std::int64_t count, const Base* base,
                         float base_weight, Out* out, std::int64_t width, const Src* const* ahead = nullptr,
                         std::int64_t ahead_count = 0) {
  constexpr std::int64_t kBlock = 128;  // 8 zmm accumulators
  for (std::int64_t c0 = 0; c0 < width; c0 += kBlock) {
    const std::int64_t cols = width - c0 < kBlock ? width - c0 : kBlock;
    const int vectors = static_cast<int>((cols + 15) / 16);
    const int tail = static_cast<int>(cols - 16 * (vectors - 1));
    const __mmask16 last = static_cast<__mmask16>((1u << tail) - 1u);
    switch (vectors) {
      case 1: block<1>(rows, weight, count, base, base_weight, out, c0, last, ahead, ahead_count); break;
      case 2: block<2>(rows, weight, count, base, base_weight, out, c0, last, ahead, ahead_count); break;
      case 3: block<3>(rows, weight, count, base, base_weight, out, c0, last, ahead, ahead_count); break;
      case 4: block<4>(rows, weight, count, base, base_weight, out, c0, last, ahead, ahead_count); break;
      case 5: block<5>(rows, weight, count, base, base_weight, out, c0, last, ahead, ahead_count); break;
      case 6: block<6>(rows, weight, count, base, base_weight, out, c0, last, ahead, ahead_count); break;
      case 7: block<7>(rows, weight, count, base, base_weight, out, c0, last, ahead, ahead_count); break;
      default: block<8>(rows, weight, count, base, base_weight, out, c0, last, ahead, ahead_count); break;
    }
  }
}


// acc[r] += w[r] * x_row (separately rounded product and sum, 16 lanes per vector) for the
// rows r whose bit is set in `use`; x_row is read once for all of them.
template <int V, int Rows>
SDM_AVX512 inline void add_term(__m512 (&acc)[Rows][V], const float* x_row, const float* w, unsigned use,
                                __mmask16 last) {
  __m512 x[V];
#pragma GCC unroll 4
  for (int v = 0; v < V; ++v) x[v] = _mm512_maskz_loadu_ps(v == V - 1 ? last : static_cast<__mmask16>(0xffff), x_row + 16 * v);
#pragma GCC unroll 4
  for (int r = 0; r < Rows; ++r) {
    if (!(use >> r & 1u)) continue;
    const __m512 wr = _mm512_set1_ps(w[r]);
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) acc[r][v] = _mm512_add_ps(acc[r][v], _mm512_mul_ps(wr, x[v]));
  }
}

// Coefficient of term k in output row r of the lower (coef[r][k]) or upper (coef[k][r]) product.
inline float tri_coef(bool lower, const float* coef, std::int64_t ldc, std::int64_t r, std::int64_t k) {
  return lower ? coef[r * ldc + k] : coef[k * ldc + r];
}

// The shared terms kept[0, count), ascending, in every row.
template <int V, int Rows>
SDM_AVX512 inline void shared_terms(__m512 (&acc)[Rows][V], bool lower, const float* coef, std::int64_t ldc,
                                    const float* in, std::int64_t r0, const std::int32_t* kept, std::int64_t count,
                                    std::int64_t width, std::int64_t c0, __mmask16 last) {
  float w[Rows];
  for (std::int64_t t = 0; t < count; ++t) {
    for (int r = 0; r < Rows; ++r) w[r] = tri_coef(lower, coef, ldc, r0 + r, kept[t]);
    add_term<V, Rows>(acc, in + kept[t] * width + c0, w, (1u << Rows) - 1u, last);
  }
}

// The block's triangle, t ascending: term r0 + t in row r when t <= r (lower) or t >= r (upper).
template <int V, int Rows>
SDM_AVX512 inline void triangle_terms(__m512 (&acc)[Rows][V], bool lower, const float* coef, std::int64_t ldc,
                                      const float* in, std::int64_t r0, std::int64_t width, std::int64_t c0,
                                      __mmask16 last) {
  float w[Rows] = {};
  for (int t = 0; t < Rows; ++t) {
    unsigned use = 0;
    for (int r = 0; r < Rows; ++r) {
      if (lower ? t > r : t < r) continue;
      use |= 1u << r;
      w[r] = tri_coef(lower, coef, ldc, r0 + r, r0 + t);
    }
    add_term<V, Rows>(acc, in + (r0 + t) * width + c0, w, use, last);
  }
}

// Columns [c0, c0 + 16 * (V - 1) + lanes of `last`) of output rows r0 .. r0 + Rows - 1 of a
// triangular product (row_kernels.hpp): every row sums the shared terms kept[0, count) and,
// for a whole block (Rows == 4), the block's triangle (term r0 + t in row r when t <= r for
// the lower product, t >= r for the upper one), the triangle after the shared terms (lower)
// or before them (upper): the order of the baseline kernel, one separately rounded product
// and sum per term, from +0.
template <int V, int Rows>
SDM_AVX512 void triangular_columns(bool lower, const float* coef, std::int64_t ldc, const float* in, float* out,
                                   std::int64_t r0, const std::int32_t* kept, std::int64_t count, std::int64_t width,
                                   std::int64_t c0, __mmask16 last) {
  __m512 acc[Rows][V];
#pragma GCC unroll 4
  for (int r = 0; r < Rows; ++r) {
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) acc[r][v] = _mm512_setzero_ps();
  }
  if (Rows == 4 && !lower) triangle_terms<V, Rows>(acc, false, coef, ldc, in, r0, width, c0, last);
  shared_terms<V, Rows>(acc, lower, coef, ldc, in, r0, kept, count, width, c0, last);
  if (Rows == 4 && lower) triangle_terms<V, Rows>(acc, true, coef, ldc, in, r0, width, c0, last);
#pragma GCC unroll 4
  for (int r = 0; r < Rows; ++r) {
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) {
      _mm512_mask_storeu_ps(out + (r0 + r) * width + c0 + 16 * v, v == V - 1 ? last : static_cast<__mmask16>(0xffff),
                            acc[r][v]);
    }
  }
}

template <int Rows>
SDM_AVX512 void triangular_rows(bool lower, const float* coef, std::int64_t ldc, const float* in, float* out,
                                std::int64_t r0, const std::int32_t* kept, std::int64_t count, std::int64_t width) {
  constexpr std::int64_t kBlock = 64;  // 4 zmm per row: 16 accumulators for a whole block
  for (std::int64_t c0 = 0; c0 < width; c0 += kBlock) {
    const std::int64_t cols = width - c0 < kBlock ? width - c0 : kBlock;
    const int vectors = static_cast<int>((cols + 15) / 16);
    const int tail = static_cast<int>(cols - 16 * (vectors - 1));
    const __mmask16 last = static_cast<__mmask16>((1u << tail) - 1u);
    switch (vectors) {
      case 1: triangular_columns<1, Rows>(lower, coef, ldc, in, out, r0, kept, count, width, c0, last); break;
      case 2: triangular_columns<2, Rows>(lower, coef, ldc, in, out, r0, kept, count, width, c0, last); break;
      case 3: triangular_columns<3, Rows>(lower, coef, ldc, in, out, r0, kept, count, width, c0, last); break;
      default: triangular_columns<4, Rows>(lower, coef, ldc, in, out, r0, kept, count, width, c0, last); break;
    }
  }
}
#endif

bool cpu_has_avx512() {
#if SDM_ROWS_AVX512
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl");
#else
  return false;
#endif
}

RowKernelPath resolve(RowKernelPath path) {
  if (path == RowKernelPath::automatic) return cpu_has_avx512() ? RowKernelPath::avx512 : RowKernelPath::baseline;
  return path;
}

std::atomic<bool>& avx512_flag() {
  static std::atomic<bool> flag{resolve(RowKernelPath::automatic) == RowKernelPath::avx512};
  return flag;
}

}  // namespace

bool row_kernel_path_available(RowKernelPath path) { return path != RowKernelPath::avx512 || cpu_has_avx512(); }

void set_row_kernel_path(RowKernelPath path) {
  if (!row_kernel_path_available(path)) throw ValueError("path", "AVX-512 is not available on this CPU");
  avx512_flag().store(resolve(path) == RowKernelPath::avx512, std::memory_order_relaxed);
}

bool row_kernels_avx512_active() { return avx512_flag().load(std::memory_order_relaxed); }

#if SDM_ROWS_AVX512
void weighted_rows_avx512(const std::uint16_t* const* rows, const float* weight, std::int64_t count,
                          const std::uint16_t* base, float base_weight, float* out, std::int64_t width,
                          const std::uint16_t* const* ahead, std::int64_t ahead_count) {
  weighted(rows, weight, count, base, base_weight, out, width, ahead, ahead_count);
}
void weighted_rows_avx512(const float* const* rows, const float* weight, std::int64_t count,
                          const std::uint16_t* base, float base_weight, float* out, std::int64_t width,
                          const float* const* ahead, std::int64_t ahead_count) {
  weighted(rows, weight, count, base, base_weight, out, width, ahead, ahead_count);
}
void weighted_rows_avx512(const float* const* rows, const float* weight, std::int64_t count, const float* base,
                          float base_weight, float* out, std::int64_t width, const float* const* ahead,
                          std::int64_t ahead_count) {
  weighted(rows, weight, count, base, base_weight, out, width, ahead, ahead_count);
}
void weighted_rows_to_bf16_avx512(const float* const* rows, const float* weight, std::int64_t count,
                                  const std::uint16_t* base, float base_weight, std::uint16_t* out,
                                  std::int64_t width) {
  weighted(rows, weight, count, base, base_weight, out, width);
}
void triangular_rows_avx512(bool lower, const float* coef, std::int64_t ldc, const float* in, float* out,
                            std::int64_t r0, std::int64_t rows, const std::int32_t* kept, std::int64_t count,
                            std::int64_t width) {
  if (rows == 4) return triangular_rows<4>(lower, coef, ldc, in, out, r0, kept, count, width);
  triangular_rows<1>(lower, coef, ldc, in, out, r0, kept, count, width);
}
#else
void weighted_rows_avx512(const std::uint16_t* const*, const float*, std::int64_t, const std::uint16_t*, float,
                          float*, std::int64_t, const std::uint16_t* const*, std::int64_t) {
  throw ValueError("path", "AVX-512 is not available on this CPU");
}
void weighted_rows_avx512(const float* const*, const float*, std::int64_t, const std::uint16_t*, float, float*,
                          std::int64_t, const float* const*, std::int64_t) {
  throw ValueError("path", "AVX-512 is not available on this CPU");
}
void weighted_rows_avx512(const float* const*, const float*, std::int64_t, const float*, float, float*,
                          std::int64_t, const float* const*, std::int64_t) {
  throw ValueError("path", "AVX-512 is not available on this CPU");
}
void weighted_rows_to_bf16_avx512(const float* const*, const float*, std::int64_t, const std::uint16_t*, float,
                                  std::uint16_t*, std::int64_t) {
  throw ValueError("path", "AVX-512 is not available on this CPU");
}
void triangular_rows_avx512(bool, const float*, std::int64_t, const float*, float*, std::int64_t, std::int64_t,
                            const std::int32_t*, std::int64_t, std::int64_t) {
  throw ValueError("path", "AVX-512 is not available on this CPU");
}
#endif

}  // namespace sdm::cpu

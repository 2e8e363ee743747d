// row_kernels_avx512.hpp - a runtime-dispatched AVX-512 path of the weighted row sum
// (row_kernels.hpp's weighted_rows).
//
// (The triangular products' 4-row blocks run here too: triangular_rows_avx512 below.)
// weighted_rows_avx512: out[c] = init(c) + sum_{k < count} weight[k] * f32(rows[k][c]),
// k ascending, init(c) = +0 or base_weight * f32(base[c]): the same sequence of separately
// rounded f32 products and sums per element as weighted_rows (no fused multiply-add: this
// file is compiled with -ffp-contract=off), so the same bits (tested, test_row_kernels and
// test_engine_isa_paths). Row-blocked: up to 128 columns (8 zmm accumulators) stay in
// registers while every row of the sum is read once, whole, so a 256-byte bf16 row is one
// burst of independent loads instead of eight 32-byte visits; columns past the last whole
// 16-lane vector run in masked lanes (the same per-lane operations).
// The dot products stay on the baseline path: their fixed 8-lane order is one dependent
// chain per lane whatever the vector width (measured: an 8-lane ymm version, called out of
// line, was slower than the inlined 4-wide one at hd 128).
//
// Paths: `baseline` (row_kernels.hpp's 4-wide vectors) and `avx512` (taken when the CPU has
// AVX-512 F, BW and VL); `automatic` picks the fastest available one.
#pragma once

#include <cstdint>

namespace sdm::cpu {

enum class RowKernelPath { automatic, baseline, avx512 };

// Whether `path` can run on this CPU (automatic and baseline always can).
bool row_kernel_path_available(RowKernelPath path);

// Forces a path for every later call (tests); automatic = the fastest available one.
// Throws sdm::ValueError for a path this CPU cannot run.
void set_row_kernel_path(RowKernelPath path);

// Whether the AVX-512 path is the active one.
bool row_kernels_avx512_active();

// weighted_rows (row_kernels.hpp), prefetch hints `ahead` included.
void weighted_rows_avx512(const std::uint16_t* const* rows, const float* weight, std::int64_t count,
                          const std::uint16_t* base, float base_weight, float* out, std::int64_t width,
                          const std::uint16_t* const* ahead, std::int64_t ahead_count);
void weighted_rows_avx512(const float* const* rows, const float* weight, std::int64_t count,
                          const std::uint16_t* base, float base_weight, float* out, std::int64_t width,
                          const float* const* ahead, std::int64_t ahead_count);
void weighted_rows_avx512(const float* const* rows, const float* weight, std::int64_t count, const float* base,
                          float base_weight, float* out, std::int64_t width, const float* const* ahead,
                          std::int64_t ahead_count);

// The same sum rounded once to bf16 in registers (bf16_round_avx512.hpp: core::bf16_from_float's
// bits) and stored into `out`, which may be `base` (each column block reads its base columns
// before storing them): the bits of weighted_rows_avx512 then store_bf16_row, without the f32 row.
void weighted_rows_to_bf16_avx512(const float* const* rows, const float* weight, std::int64_t count,
                                  const std::uint16_t* base, float base_weight, std::uint16_t* out,
                                  std::int64_t width);

// Output rows [r0, r0 + rows) of triangular_product<lower> (row_kernels.hpp), all columns, in
// 16-lane vectors (64 columns of 4 rows in registers, masked tails): rows == 4, a whole block
// (the shared terms kept[0, count), then or before the block's triangle); rows == 1, one
// leftover row r0 summing kept[0, count) alone. The baseline kernel's terms in its order,
// each product and sum rounded separately from +0: the same bits (test_row_kernels).
void triangular_rows_avx512(bool lower, const float* coef, std::int64_t ldc, const float* in, float* out,
                            std::int64_t r0, std::int64_t rows, const std::int32_t* kept, std::int64_t count,
                            std::int64_t width);

}  // namespace sdm::cpu

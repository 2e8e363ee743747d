// bf16_store.hpp - rounding f32 rows to bf16, with runtime-dispatched AVX2 and AVX-512 paths.
//
// store_bf16_row(out, a, b, width): out[c] = bf16(a[c]) (b == nullptr) or bf16(a[c] + b[c])
// (one f32 sum, then one rounding), c < width: round to nearest even, NaN kept quiet, the
// bits of core::bf16_from_float on every path. Paths: `baseline` (row_kernels.hpp's 4-wide
// vectors, SSE2 on baseline x86-64), `avx2` (8-wide integer lanes) and `avx512` (16-wide
// lanes, the NaN choice by mask, masked tail; taken when the CPU has AVX-512 F/BW/VL, else
// avx2 when it has AVX2); all run the same integer arithmetic per lane and the same IEEE f32
// addition, so they give the same bits (tested on every bf16 high half, test_row_kernels.cpp).
#pragma once

#include <cstdint>

namespace sdm::cpu {

enum class Bf16StorePath { automatic, baseline, avx2, avx512 };

void store_bf16_row(std::uint16_t* out, const float* a, const float* b, std::int64_t width);

// Whether `path` can run on this CPU (automatic and baseline always can).
bool bf16_store_path_available(Bf16StorePath path);

// Forces a path for every later call (tests); automatic = the fastest available one.
// Throws sdm::ValueError for a path this CPU cannot run.
void set_bf16_store_path(Bf16StorePath path);

}  // namespace sdm::cpu

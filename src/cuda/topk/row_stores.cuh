// row_stores.cuh - writing one gradient row of the product-key top-k backward by one warp (the
// device code of register_scatter.cuh and column_sums.cuh): zeroing it in global memory, zeroing
// a warp's shared float row, and rounding a shared float row to the score dtype with one
// coalesced store. Pure stores: no arithmetic beyond the one rounding of each sum.
#pragma once

#include <cstdint>
#include <type_traits>

#include "cuda/common/rows.cuh"
#include "cuda/topk/score_types.cuh"

namespace sdm::cuda::topk {

// Zeroes x[0..count) (16-byte stores where x is aligned). Index: the loops' integer type (int where
// the row's bytes are known to fit one: fewer instructions a step).
template <typename S, typename Index = std::int64_t>
__device__ void zero_row(typename S::Storage* x, Index count, int lane) {
  const Index bytes = count * static_cast<Index>(sizeof(typename S::Storage));
  if ((reinterpret_cast<std::uintptr_t>(x) & 15u) == 0 && bytes % 16 == 0) {
    auto* v = reinterpret_cast<uint4*>(x);
    for (Index q = lane; q < bytes / 16; q += 32) v[q] = make_uint4(0u, 0u, 0u, 0u);
  } else {
    for (Index c = lane; c < count; c += 32) x[c] = S::store(0.0f);
  }
}

// Sets the 16-byte aligned shared row sums[0..count) to +0 (up to 3 floats past count too: the
// row's room is count rounded up to 4, never read).
__device__ __forceinline__ void zero_shared_row(float* sums, std::int64_t count, int lane) {
  for (std::int64_t c = 4 * lane; c < count; c += 4 * 32) {
    *reinterpret_cast<float4*>(sums + c) = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  }
}

// Rounds sums[0..count) to S and stores them at x: 16 bytes a lane where x is aligned and the row
// a whole number of 16-byte words (bf16 pieces without a NaN by the hardware's pair conversion,
// bitwise core::bf16_from_float there: common/rows.cuh bf16x2_rn), else one element a lane.
template <typename S>
__device__ void store_row(const float* sums, typename S::Storage* x, std::int64_t count, int lane) {
  using Storage = typename S::Storage;
  constexpr int kPer = 16 / sizeof(Storage);
  if ((reinterpret_cast<std::uintptr_t>(x) & 15u) == 0 && count % kPer == 0) {
    for (std::int64_t c = static_cast<std::int64_t>(lane) * kPer; c < count; c += 32 * kPer) {
      float v[kPer];
#pragma unroll
      for (int q = 0; q < kPer; q += 4) {
        const float4 f = *reinterpret_cast<const float4*>(sums + c + q);
        v[q] = f.x, v[q + 1] = f.y, v[q + 2] = f.z, v[q + 3] = f.w;
      }
      bool nan = false;
      if constexpr (std::is_same_v<S, BF16Scores>) {
#pragma unroll
        for (int j = 0; j < kPer; ++j) nan |= v[j] != v[j];
        if (!nan) {
          *reinterpret_cast<uint4*>(x + c) =
              make_uint4(bf16x2_rn(v[0], v[1]), bf16x2_rn(v[2], v[3]), bf16x2_rn(v[4], v[5]), bf16x2_rn(v[6], v[7]));
          continue;
        }
      }
      alignas(16) Storage out[kPer];
#pragma unroll
      for (int j = 0; j < kPer; ++j) out[j] = S::store(v[j]);
      *reinterpret_cast<uint4*>(x + c) = *reinterpret_cast<const uint4*>(out);
    }
  } else {
    for (std::int64_t c = lane; c < count; c += 32) x[c] = S::store(sums[c]);
  }
}

}  // namespace sdm::cuda::topk

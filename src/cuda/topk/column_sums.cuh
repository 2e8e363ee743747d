// column_sums.cuh - one row of the product-key top-k backward, by one warp, the row's columns summed
// in shared memory (the device code of register_backward.cu for rows of 65..128 entries and width
// <= kColumnSumsWidth; the others take register_scatter.cuh; the rule:
// include/sdm/product_key_topk.hpp).
//
// Math, per row: grad_raw[offset_f + col] = sum of grad_values[e] over the selected entries e whose
//   slot has digit col in factor f, in increasing e (float32, from +0, __fadd_rn), stored once;
//   every other column +0. Entries whose slot lies outside [0, prod(dims)) contribute nothing.
// Decomposition: one warp per row; a shared float row of the row's width starts at +0. The entries
//   go 32 at a time (entry 32 b + l on lane l, batch b). Per batch and factor, the lanes whose
//   entries fall in one column find each other (__match_any_sync); the lowest of them adds their
//   gradients to the column in lane order, that is in entry order. Columns of one batch and factor
//   are disjoint, factors own disjoint columns, and batches follow each other (__syncwarp), so
//   each column's chain runs over its entries in increasing e. Then the row is rounded to the score
//   dtype and stored once (16 bytes a lane where the row is aligned): no zeroing pass, no sort.
// Numerics: the sorted path's and the CPU kernel's chains, so the same bits. No atomics.
#pragma once

#include <cstdint>
#include <type_traits>

#include "cuda/common/rows.cuh"
#include "cuda/topk/register_scatter.cuh"
#include "cuda/topk/score_types.cuh"

namespace sdm::cuda::topk {

constexpr std::int64_t kColumnSumsWidth = 1024;  // a warp's shared row: 4 KiB

// The warp's shared memory: the row's column sums and the current batch's gradients.
struct alignas(16) ColumnSums {
  float column[kColumnSumsWidth];
  float batch_grad[32];
};

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

template <typename S, int KMAX>
__device__ void column_sums_row(const ScatterRow& p, const std::int64_t* ids, const typename S::Storage* grad_values,
                                typename S::Storage* out, ColumnSums& s, int lane) {
  constexpr int M = KMAX / 32;
  for (std::int64_t c = 4 * lane; c < p.width; c += 4 * 32) {  // up to 3 columns past the row: never read
    *reinterpret_cast<float4*>(s.column + c) = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  }
  std::int64_t id[M];
  float grad[M];
#pragma unroll
  for (int b = 0; b < M; ++b) {
    const int e = 32 * b + lane;
    id[b] = e < p.selected ? ids[e] : -1;
    grad[b] = e < p.selected ? S::load(grad_values[e]) : 0.0f;
  }
#pragma unroll
  for (int b = 0; b < M; ++b) {
    if (32 * b >= p.selected) break;  // the same for every lane
    const bool valid = id[b] >= 0 && id[b] < p.slots;
    s.batch_grad[lane] = grad[b];
    __syncwarp();  // the zeroing or the previous batch's sums, and this batch's gradients
    std::uint32_t rest = valid ? static_cast<std::uint32_t>(id[b]) : 0u;  // slots < 2^32
    std::uint32_t offset = static_cast<std::uint32_t>(p.width);
    for (int f = p.factors - 1; f >= 0; --f) {  // the last factor's digit is id % its width
      const std::uint32_t w = p.dims[f];
      offset -= w;
      const std::uint32_t q = f == 0 ? 0u : divide(rest, p.magic[f]);  // the first factor's digit is what is left
      const std::uint32_t digit = rest - q * w;
      rest = q;
      const std::uint32_t column = valid ? offset + digit : 0xffffffffu;
      const unsigned peers = __match_any_sync(kFullMask, column);
      if (valid && (peers & ((1u << lane) - 1u)) == 0u) {  // the column's lowest lane
        float sum = s.column[column];
        for (unsigned t = peers; t != 0u; t &= t - 1u) sum = __fadd_rn(sum, s.batch_grad[__ffs(static_cast<int>(t)) - 1]);
        s.column[column] = sum;
      }
    }
    __syncwarp();  // the sums before the next batch's gradients overwrite batch_grad
  }
  store_row<S>(s.column, out, p.width, lane);
}

}  // namespace sdm::cuda::topk

// column_sums.cuh - one row of the product-key top-k backward, by one warp, the row's columns summed
// in shared memory (the device code of register_backward.cu for rows of width <= kSharedRowWidth;
// the rule: include/sdm/product_key_topk.hpp).
//
// Math, per row: grad_raw[offset_f + col] = sum of grad_values[e] over the selected entries e whose
//   slot has digit col in factor f, in increasing e (float32, from +0, __fadd_rn), stored once;
//   every other column +0. Entries whose slot lies outside [0, prod(dims)) contribute nothing.
// Decomposition: one warp per row; a shared float row of the row's width starts at +0. The entries
//   go 32 at a time (entry 32 b + l on lane l, batch b: row_entries.cuh, by batch). Per batch and factor, the lanes whose
//   entries fall in one column find each other (__match_any_sync); the lowest of them adds their
//   gradients to the column in lane order, that is in entry order. Columns of one batch and factor
//   are disjoint, factors own disjoint columns, and batches follow each other (__syncwarp), so
//   each column's chain runs over its entries in increasing e. Then the row is rounded to the score
//   dtype and stored once (16 bytes a lane where the row is aligned, row_stores.cuh): no zeroing
//   pass, no sort.
// Numerics: the sorted path's and the CPU kernel's chains, so the same bits. No atomics.
#pragma once

#include <cstdint>

#include "cuda/topk/register_scatter.cuh"
#include "cuda/topk/row_entries.cuh"
#include "cuda/topk/row_stores.cuh"
#include "cuda/topk/score_types.cuh"

namespace sdm::cuda::topk {

// A warp's shared floats for column_sums_row: the row's sums (room for the width rounded up to 4,
// so that every warp's part stays 16-byte aligned), then the current batch's gradients (32).
__host__ __device__ constexpr std::int64_t column_floats(std::int64_t width) { return (width + 3) / 4 * 4 + 32; }

// `in`: the row's entries by batch (row_entries.cuh); `shared`: the warp's column_floats.
template <typename S, int KMAX>
__device__ void column_sums_row(const ScatterRow& p, const RowEntries<KMAX / 32>& in, typename S::Storage* out,
                                float* shared, int lane) {
  constexpr int M = KMAX / 32;
  float* const column_sum = shared;
  float* const batch_grad = shared + column_floats(p.width) - 32;
  zero_shared_row(column_sum, p.width, lane);
#pragma unroll
  for (int b = 0; b < M; ++b) {
    if (32 * b >= p.selected) break;  // the same for every lane
    const bool valid = in.id[b] >= 0 && in.id[b] < p.slots;  // entries past kk hold -1
    batch_grad[lane] = in.grad[b];
    __syncwarp();  // the zeroing or the previous batch's sums, and this batch's gradients
    std::uint32_t rest = valid ? static_cast<std::uint32_t>(in.id[b]) : 0u;  // slots < 2^32
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
        float sum = column_sum[column];
        for (unsigned t = peers; t != 0u; t &= t - 1u) sum = __fadd_rn(sum, batch_grad[__ffs(static_cast<int>(t)) - 1]);
        column_sum[column] = sum;
      }
    }
    __syncwarp();  // the sums before the next batch's gradients overwrite batch_grad
  }
  store_row<S>(column_sum, out, p.width, lane);
}

}  // namespace sdm::cuda::topk

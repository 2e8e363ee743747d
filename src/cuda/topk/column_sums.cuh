// column_sums.cuh - one row of the product-key top-k backward, by one warp, the row's columns summed
// in shared memory (the device code of register_backward.cu for rows of width <= kColumnSumsWidth,
// every kk <= 128; the rule: include/sdm/product_key_topk.hpp).
//
// Math, per row: grad_raw[offset_f + col] = sum of grad_values[e] over the selected entries e whose
//   slot has digit col in factor f, in increasing e (float32, from +0, __fadd_rn), stored once;
//   every other column +0. Entries whose slot lies outside [0, prod(dims)) contribute nothing.
// Decomposition: one warp per row; a shared float row of the row's width starts at +0. The entries
//   go 32 at a time (entry 32 b + l on lane l, batch b: row_entries.cuh, by batch). Per batch and
//   factor, the lanes whose entries fall in one column find each other (__match_any_sync); the
//   lowest of them adds their gradients to the column in lane order, that is in entry order (a
//   loop over consecutive lanes where they are consecutive, as the first factor's are in the
//   forward's ascending slots, else over the set bits). Columns of one batch and factor are
//   disjoint, factors own disjoint columns, and batches follow each other (__syncwarp), so each
//   column's chain runs over its entries in increasing e. Then the row is rounded to the score
//   dtype and stored once (16 bytes a lane where the row is aligned, row_stores.cuh): no zeroing
//   pass, no sort.
// Limits: width <= kColumnSumsWidth (the shared row), any kk <= 128 (KMAX 32 / 64 / 128: 1, 2 or 4
//   batches); wider rows take register_scatter.cuh.
// Numerics: the sort path's and the CPU kernel's chains, so the same bits. No atomics.
#pragma once

#include <cstdint>

#include "cuda/topk/register_scatter.cuh"
#include "cuda/topk/row_entries.cuh"
#include "cuda/topk/row_stores.cuh"
#include "cuda/topk/score_types.cuh"

namespace sdm::cuda::topk {

// The widest row summed in shared memory: a warp's row then takes 4 KiB, 8 warps' 33.8 KB a CTA
// with the batch gradients (column_floats), under the 48 KiB a launch takes without opting in
// (which would allow widths up to 1504; 1025..1504 are not measured, and keep the sort).
constexpr std::int64_t kColumnSumsWidth = 1024;

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
      offset -= p.dims[f];
      const std::uint32_t column = valid ? offset + take_digit(rest, p, f) : 0xffffffffu;
      const unsigned peers = __match_any_sync(kFullMask, column);
      const bool head = valid && (peers & ((1u << lane) - 1u)) == 0u;  // the column's lowest lane
      if (head) {
        float sum = column_sum[column];
        const unsigned run = peers >> lane;  // bit 0 set: this lane
        if ((run & (run + 1u)) == 0u) {  // lanes lane .. lane + n - 1 (the first factor's columns, or one lane)
          const int end = lane + __popc(run);
          for (int t = lane; t < end; ++t) sum = __fadd_rn(sum, batch_grad[t]);
        } else {
          for (unsigned t = peers; t != 0u; t &= t - 1u) sum = __fadd_rn(sum, batch_grad[__ffs(static_cast<int>(t)) - 1]);
        }
        column_sum[column] = sum;
      }
    }
    __syncwarp();  // the sums before the next batch's gradients overwrite batch_grad
  }
  store_row<S>(column_sum, out, p.width, lane);
}

}  // namespace sdm::cuda::topk

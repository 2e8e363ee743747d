// column_sums.cuh - one row of the product-key top-k backward, by one warp, the row's columns summed
// in shared memory (the device code of register_backward.cu for rows of width <= kSharedRowWidth;
// the rule: include/sdm/product_key_topk.hpp).
//
// Math, per row: grad_raw[offset_f + col] = sum of grad_values[e] over the selected entries e whose
//   slot has digit col in factor f, in increasing e (float32, from +0, __fadd_rn), stored once;
//   every other column +0. Entries whose slot lies outside [0, prod(dims)) contribute nothing.
// Decomposition: one warp per row; a shared float row of the row's width starts at +0. The entries
//   go 32 at a time (entry 32 b + l on lane l, batch b: row_entries.cuh, by batch). Per batch and
//   factor, the lanes whose entries fall in one column find each other: by __match_any_sync, or
//   (kClaims, claims_fit) each sets its bit in the shared word of its digit (an integer atomicOr;
//   as many words as the widest factor has columns, reused by every factor), reads the word back
//   after a __syncwarp, and the column's lowest lane clears it after use (every word is 0 between
//   factors and rows: zeroed once a kernel, cleared before the next factor's bits, __syncwarp
//   between). The lowest of them adds their gradients to the column in lane order, that is in
//   entry order (a loop over consecutive lanes where they are consecutive, as the first factor's
//   are in the forward's ascending slots, else over the set bits). Columns of one batch and factor
//   are disjoint, factors own disjoint columns, and batches follow each other (__syncwarp), so
//   each column's chain runs over its entries in increasing e. Then the row is rounded to the score
//   dtype and stored once (16 bytes a lane where the row is aligned, row_stores.cuh): no zeroing
//   pass, no sort.
// Numerics: the sorted path's and the CPU kernel's chains, so the same bits. No float atomics
//   (kClaims: integer atomicOr on lane masks only).
#pragma once

#include <cstdint>

#include "cuda/topk/register_scatter.cuh"
#include "cuda/topk/row_entries.cuh"
#include "cuda/topk/row_stores.cuh"
#include "cuda/topk/score_types.cuh"

namespace sdm::cuda::topk {

// A warp's shared 4-byte words for column_sums_row: the row's sums (room for the width rounded up
// to 4, so that every warp's part stays 16-byte aligned), kClaims: the digits' lane words (room for
// the widest factor's width rounded up to 4), then the current batch's gradients (32).
template <bool kClaims>
__host__ __device__ constexpr std::int64_t column_floats(std::int64_t width, std::int64_t widest) {
  return (width + 3) / 4 * 4 + (kClaims ? (widest + 3) / 4 * 4 : 0) + 32;
}

// kClaims where 8 warps' words fit the 48 KiB a CTA takes without opting in (2x256: 25.6 KB).
constexpr bool claims_fit(std::int64_t width, std::int64_t widest) {
  return column_floats<true>(width, widest) * 4 * 8 <= 48 * 1024;
}

// kClaims: sets the warp's lane words to 0, once a kernel (column_sums_row leaves them 0).
__device__ __forceinline__ void clear_claims(float* shared, std::int64_t width, std::int64_t widest, int lane) {
  auto* const claims = reinterpret_cast<unsigned*>(shared + (width + 3) / 4 * 4);
  for (std::int64_t c = 4 * lane; c < widest; c += 4 * 32) *reinterpret_cast<uint4*>(claims + c) = make_uint4(0u, 0u, 0u, 0u);
}

// `in`: the row's entries by batch (row_entries.cuh); `shared`: the warp's column_floats.
template <typename S, int KMAX, bool kClaims>
__device__ void column_sums_row(const ScatterRow& p, const RowEntries<KMAX / 32>& in, typename S::Storage* out,
                                float* shared, int lane) {
  constexpr int M = KMAX / 32;
  float* const column_sum = shared;
  auto* const claims = reinterpret_cast<unsigned*>(shared + (p.width + 3) / 4 * 4);  // kClaims: by digit
  float* const batch_grad = shared + column_floats<kClaims>(p.width, p.widest) - 32;
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
      unsigned peers;
      if constexpr (kClaims) {
        if (valid) atomicOr(claims + digit, 1u << lane);
        __syncwarp();  // every bit of this batch and factor set
        peers = valid ? claims[digit] : 0u;
      } else {
        peers = __match_any_sync(kFullMask, column);
      }
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
      if constexpr (kClaims) {
        __syncwarp();  // every lane has read its word
        if (head) claims[digit] = 0u;
        __syncwarp();  // every word 0 again before the next factor's bits
      }
    }
    __syncwarp();  // the sums before the next batch's gradients overwrite batch_grad
  }
  store_row<S>(column_sum, out, p.width, lane);
}

}  // namespace sdm::cuda::topk

// column_walk.cuh - one row of the product-key top-k backward, by one warp, each column's entries
// linked into a list in shared memory and walked by one lane (the device code of
// register_backward.cu for rows of width <= kColumnWalkWidth and at most 2 KiB of gradients; the rule:
// include/sdm/product_key_topk.hpp).
//
// Math, per row: grad_raw[offset_f + col] = sum of grad_values[e] over the selected entries e whose
//   slot has digit col in factor f, in increasing e (float32, from +0, __fadd_rn), stored once;
//   every other column +0. Entries whose slot lies outside [0, prod(dims)) contribute nothing.
// Decomposition: one warp per row; entry e = 32 b + l sits on lane l in batch b (row_entries.cuh,
//   by batch). Factor by factor (the last first: its digit is id % its width), every valid entry
//   writes its node (its gradient and the next entry of its column, or none) and each column's
//   first entry (its head) goes into the factor's queue (ballot + popc):
//   - the first factor of a row whose slots are valid and ascending (the forward's output, one
//     vote): its columns never decrease, so an entry's next is e + 1 where that entry has its
//     column (shuffles), and a head is an entry whose predecessor has another column;
//   - any other factor: the lanes of a batch with one column find each other (__match_any_sync);
//     each links to the next of them, the lowest links the column's last entry of the earlier
//     batches to itself (a byte table of each column's last entry so far, read, then after a
//     __syncwarp rewritten by the highest), or is the head where there is none.
//   Then lane i walks the queue's heads i, i + 32, ...: along its column's list, adding each
//   entry's gradient, and stores the sum into the row, zeroed by the warp before the first
//   factor's walks (so its lines are fresh in L2 when the sums arrive).
// Limits: width <= kColumnWalkWidth (the byte table), kk <= KMAX <= 128 (entry indices in a byte,
//   KMAX / 32 batches); wider rows take register_scatter.cuh.
// Numerics: each column's chain is the CPU kernel's (and column_sums.cuh's), so the same bits. No
//   atomics.
#pragma once

#include <cstdint>

#include "cuda/topk/register_scatter.cuh"
#include "cuda/topk/row_entries.cuh"
#include "cuda/topk/row_stores.cuh"
#include "cuda/topk/score_types.cuh"

namespace sdm::cuda::topk {

// The widest row the walk takes (its byte table: 1 KiB a warp), as column_sums.cuh's.
constexpr std::int64_t kColumnWalkWidth = 1024;

__host__ __device__ constexpr std::int64_t round_up_16(std::int64_t bytes) { return (bytes + 15) / 16 * 16; }

// A warp's shared bytes: the byte table of the columns' last entries (width, rounded up to 16),
// the entries' nodes (8 bytes each) and the factor's queue of heads (4 bytes each).
__host__ __device__ constexpr std::int64_t column_walk_bytes(std::int64_t width, int kmax) {
  return round_up_16(width) + std::int64_t{kmax} * 12;
}

// `in`: the row's entries by batch (row_entries.cuh); `shared`: the warp's column_walk_bytes, 16-byte
// aligned.
template <typename S, int KMAX>
__device__ void column_walk_row(const ScatterRow& p, const RowEntries<KMAX / 32>& in, typename S::Storage* out,
                                unsigned char* shared, int lane) {
  constexpr int M = KMAX / 32;
  constexpr std::uint32_t kNone = 0xffu;  // no entry (entries < 128)
  const int width = static_cast<int>(p.width);  // <= kColumnWalkWidth
  std::uint8_t* const last = shared;            // per column: its last entry in the batches so far
  uint2* const nodes = reinterpret_cast<uint2*>(shared + round_up_16(width));  // entry: gradient bits, next
  std::uint32_t* const queue = reinterpret_cast<std::uint32_t*>(nodes + KMAX);   // column << 8 | head entry
  if constexpr (M > 1) {
    const int words = static_cast<int>(round_up_16(width) / 16);
    for (int q = lane; q < words; q += 32) reinterpret_cast<uint4*>(last)[q] = make_uint4(~0u, ~0u, ~0u, ~0u);
    __syncwarp();  // the table's reset before any lane reads it
  }
  std::uint32_t rest[M];
  bool valid[M];
  bool ordered = true;  // this lane's entries valid and ascending
#pragma unroll
  for (int b = 0; b < M; ++b) {
    valid[b] = in.id[b] >= 0 && in.id[b] < p.slots;  // entries past kk hold -1
    rest[b] = valid[b] ? static_cast<std::uint32_t>(in.id[b]) : 0u;  // slots < 2^32
    const std::uint32_t up = __shfl_up_sync(kFullMask, rest[b], 1);
    const std::uint32_t batch_before = b > 0 ? __shfl_sync(kFullMask, rest[b > 0 ? b - 1 : 0], 31) : 0u;
    const std::uint32_t before = lane > 0 ? up : batch_before;
    const int e = 32 * b + lane;
    if (e < p.selected && (!valid[b] || before > rest[b])) ordered = false;
  }
  const bool ascending = __all_sync(kFullMask, ordered);
  std::uint32_t offset = static_cast<std::uint32_t>(width);
  for (int f = p.factors - 1; f >= 0; --f) {
    offset -= p.dims[f];
    std::uint32_t column[M];
#pragma unroll
    for (int b = 0; b < M; ++b) column[b] = offset + take_digit(rest[b], p, f);
    int count = 0;  // heads in the queue
    if (f == 0 && ascending) {
#pragma unroll
      for (int b = 0; b < M; ++b) {
        const int e = 32 * b + lane;
        const std::uint32_t c = column[b];
        const std::uint32_t up = __shfl_up_sync(kFullMask, c, 1), down = __shfl_down_sync(kFullMask, c, 1);
        // The neighbours across the batch boundary (b is a constant: every lane takes the shuffles).
        const std::uint32_t batch_before = b > 0 ? __shfl_sync(kFullMask, column[b > 0 ? b - 1 : 0], 31) : ~0u;
        const std::uint32_t batch_after = b + 1 < M ? __shfl_sync(kFullMask, column[b + 1 < M ? b + 1 : b], 0) : ~0u;
        const std::uint32_t prev = lane > 0 ? up : batch_before;
        const std::uint32_t next = lane < 31 ? down : batch_after;
        const bool in_row = e < p.selected;
        const bool head = in_row && (e == 0 || prev != c);
        if (in_row) nodes[e] = make_uint2(__float_as_uint(in.grad[b]), e + 1 < p.selected && next == c ? e + 1 : kNone);
        const unsigned heads = __ballot_sync(kFullMask, head);
        if (head) queue[count + __popc(heads & ((1u << lane) - 1u))] = c << 8 | static_cast<std::uint32_t>(e);
        count += __popc(heads);
      }
    } else {
#pragma unroll
      for (int b = 0; b < M; ++b) {
        const std::uint32_t e = static_cast<std::uint32_t>(32 * b + lane);
        const std::uint32_t c = valid[b] ? column[b] : ~0u;
        const unsigned peers = __match_any_sync(kFullMask, c);
        const unsigned above = peers & ~((2u << lane) - 1u);  // lane 31: 2u << 31 wraps to 0, none above
        const bool lowest = (peers & ((1u << lane) - 1u)) == 0u;
        std::uint32_t prev = kNone;
        if constexpr (M > 1) {
          if (valid[b] && lowest) prev = last[c];
          __syncwarp();  // every read of the table before this batch rewrites it
        }
        if (valid[b]) {
          nodes[e] = make_uint2(__float_as_uint(in.grad[b]), above != 0u ? 32u * b + __ffs(static_cast<int>(above)) - 1u : kNone);
          if constexpr (M > 1) {
            if (prev != kNone) nodes[prev].y = e;  // the column's entry in an earlier batch: written before the last __syncwarp
            if (above == 0u) last[c] = static_cast<std::uint8_t>(e);
          }
        }
        const bool head = valid[b] && lowest && prev == kNone;
        const unsigned heads = __ballot_sync(kFullMask, head);
        if (head) queue[count + __popc(heads & ((1u << lane) - 1u))] = c << 8 | e;
        count += __popc(heads);
        if constexpr (M > 1) __syncwarp();  // the table's new entries before the next batch reads them
      }
    }
    if (f == p.factors - 1) zero_row<S, int>(out, width, lane);
    __syncwarp();  // the nodes and the queue, and the zeroed row before the sums stored over it
    for (int i = lane; i < count; i += 32) {
      const std::uint32_t item = queue[i];
      std::uint32_t e = item & 0xffu;
      float sum = 0.0f;
      do {
        const uint2 node = nodes[e];
        sum = __fadd_rn(sum, __uint_as_float(node.x));
        e = node.y;
      } while (e != kNone);
      out[item >> 8] = S::store(sum);
    }
    __syncwarp();  // the walks before the next factor rewrites the nodes and the queue
  }
}

}  // namespace sdm::cuda::topk

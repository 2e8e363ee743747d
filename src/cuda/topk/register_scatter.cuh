// register_scatter.cuh - one row of the product-key top-k backward, by one warp, keys in registers
// (the device code of register_backward.cu for rows wider than column_sums.cuh's kColumnSumsWidth;
// the rule: include/sdm/product_key_topk.hpp).
//
// Math, per row: grad_raw[offset_f + col] = sum of grad_values[e] over the selected entries e whose
//   slot has digit col in factor f, in increasing e (float32, from 0, __fadd_rn), stored once;
//   every other column 0. Entries whose slot lies outside [0, prod(dims)) contribute nothing.
// Decomposition: one warp per row; the kk <= KMAX entries sit KMAX / 32 per lane (row_entries.cuh,
//   by lane). Per factor (last first: its digit is id % width, the quotient by a multiply-high:
//   take_digit()), the keys digit << 8 | e are sorted ascending by one register network
//   (register_sort.cuh; skipped for the first factor when the row's slots are valid and ascending,
//   as the forward stores them: its keys are in order already); the gradients are laid out in that
//   order in shared memory; the first entry of each run (a column) finds where the run ends from
//   the run starts of its lane and of the lanes after it (ballot + a suffix-min scan), sums its run
//   from shared memory in order (a serial chain per column, the columns in parallel) and writes the
//   column into the global row, zeroed first (ordered after the zeroing by __syncwarp). Runs are
//   disjoint: each column is written by one lane.
// Limits: any width (every factor <= 2^24, prod(dims) < 2^32), any kk <= 128 (KMAX / 32 keys a lane).
// Numerics: the CPU kernel's sums in its order, so the same bits. No atomics.
#pragma once

#include <cstdint>

#include "cuda/topk/register_sort.cuh"
#include "cuda/topk/row_entries.cuh"
#include "cuda/topk/row_stores.cuh"
#include "cuda/topk/score_types.cuh"

namespace sdm::cuda::topk {

// A warp's shared floats for scatter_row: the gradients by entry and by sorted position.
template <int KMAX>
inline constexpr std::int64_t kScatterFloats = 2 * KMAX;

struct ScatterRow {
  const std::uint32_t* dims;
  const std::uint64_t* magic;  // per factor: division_magic(dims[f])
  int factors;
  int selected;         // kk
  std::int64_t width;   // sum of dims
  std::int64_t slots;   // prod of dims
};

// x / d for x < 2^32 by one 64-bit high multiply: magic = ceil(2^64 / d) for d >= 2 (0 for d = 1).
// Exact: x * magic / 2^64 = x / d + x * err / 2^64 with 0 <= err < 1, and x * err / 2^64 < 2^-32
// <= 1 / d never lifts x / d (fraction at most 1 - 1 / d) past the next integer.
__host__ __device__ inline std::uint64_t division_magic(std::uint32_t d) {
  return d <= 1u ? 0u : ~std::uint64_t{0} / d + 1u;
}
__device__ __forceinline__ std::uint32_t divide(std::uint32_t x, std::uint64_t magic) {
  return magic == 0u ? x : static_cast<std::uint32_t>(__umul64hi(x, magic));
}

// Factor f's digit of `rest` (a slot whose later factors' digits are taken: the last factor's digit
// is id % its width), leaving rest / dims[f] in `rest`; the first factor's digit is what is left (no
// division).
__device__ __forceinline__ std::uint32_t take_digit(std::uint32_t& rest, const ScatterRow& p, int f) {
  const std::uint32_t q = f == 0 ? 0u : divide(rest, p.magic[f]);
  const std::uint32_t digit = rest - q * p.dims[f];
  rest = q;
  return digit;
}

// `in`: the row's entries by lane (row_entries.cuh); `shared`: the warp's kScatterFloats.
template <typename S, int KMAX>
__device__ void scatter_row(const ScatterRow& p, const RowEntries<KMAX / 32>& in, typename S::Storage* out, float* shared,
                            int lane) {
  constexpr int M = KMAX / 32;
  constexpr std::uint32_t kNone = 0xffffffffu;
  float* const grad_by_entry = shared;
  float* const sorted = grad_by_entry + KMAX;
  zero_row<S>(out, p.width, lane);
  std::uint32_t rest[M];
  bool valid[M];
  unsigned local_valid = 0;
#pragma unroll
  for (int r = 0; r < M; ++r) {
    valid[r] = in.id[r] >= 0 && in.id[r] < p.slots;  // entries past kk hold -1
    rest[r] = valid[r] ? static_cast<std::uint32_t>(in.id[r]) : 0u;
    grad_by_entry[lane * M + r] = in.grad[r];
    local_valid += valid[r] ? 1u : 0u;
  }
  const int real = static_cast<int>(__reduce_add_sync(kFullMask, local_valid));  // sorted keys [0, real) are real
  // Every slot valid and ascending (the forward's output): the first factor's keys digit << 8 | e
  // are sorted already, so its sort is skipped.
  const std::uint32_t before_first = __shfl_up_sync(kFullMask, rest[M - 1], 1);
  bool ordered = true;
#pragma unroll
  for (int r = 0; r < M; ++r) {
    const int e = lane * M + r;
    const std::uint32_t prev = r > 0 ? rest[r - 1] : before_first;
    if (e < p.selected && (!valid[r] || (e > 0 && prev > rest[r]))) ordered = false;
  }
  const bool ascending = __all_sync(kFullMask, ordered);
  __syncwarp();
  std::int64_t offset = p.width;
  for (int f = p.factors - 1; f >= 0; --f) {
    offset -= p.dims[f];
    std::uint32_t key[M];
#pragma unroll
    for (int r = 0; r < M; ++r) {
      key[r] = valid[r] ? take_digit(rest[r], p, f) << 8 | static_cast<std::uint32_t>(lane * M + r) : kNone;
    }
    if (f > 0 || !ascending) sort_runs(key, KMAX, false, lane);
    const std::uint32_t before = __shfl_up_sync(kFullMask, key[M - 1], 1);
    unsigned starts = 0;  // bit r: element lane * M + r begins a run
#pragma unroll
    for (int r = 0; r < M; ++r) {
      const int g = lane * M + r;
      const std::uint32_t prev = r > 0 ? key[r - 1] : before;
      if (g < real) {
        sorted[g] = grad_by_entry[key[r] & 0xffu];
        if (g == 0 || (prev >> 8) != (key[r] >> 8)) starts |= 1u << r;
      }
    }
    // after: the first run start in a later lane (or `real`).
    int after = starts != 0 ? lane * M + __ffs(static_cast<int>(starts)) - 1 : real;
#pragma unroll
    for (int d = 1; d < 32; d *= 2) {
      const int y = __shfl_down_sync(kFullMask, after, d);
      if (lane + d < 32) after = min(after, y);
    }
    after = __shfl_down_sync(kFullMask, after, 1);
    if (lane == 31) after = real;
    __syncwarp();
#pragma unroll
    for (int r = 0; r < M; ++r) {
      if ((starts >> r) & 1u) {
        const unsigned later = starts >> (r + 1);
        const int end = later != 0 ? lane * M + r + __ffs(static_cast<int>(later)) : after;
        float sum = 0.0f;
        for (int t = lane * M + r; t < end; ++t) sum = __fadd_rn(sum, sorted[t]);
        const std::int64_t c = offset + static_cast<std::int64_t>(key[r] >> 8);
        out[c] = S::store(sum);
      }
    }
    __syncwarp();
  }
}

}  // namespace sdm::cuda::topk

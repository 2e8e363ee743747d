// register_scatter.cuh - one row of the product-key top-k backward, by one warp, keys in registers
// (the device code of register_backward.cu; the rule: include/sdm/product_key_topk.hpp).
//
// Math, per row: grad_raw[offset_f + col] = sum of grad_values[e] over the selected entries e whose
//   slot has digit col in factor f, in increasing e (float32, from 0, __fadd_rn), stored once;
//   every other column 0. Entries whose slot lies outside [0, prod(dims)) contribute nothing.
// Decomposition: one warp per row; the kk <= KMAX entries sit KMAX / 32 per lane. Per factor (last
//   first: its digit is id % width, the quotient by a multiply-high: divide()), the keys digit << 8 | e are sorted ascending by one register
//   network (register_sort.cuh; skipped for the first factor when the row's slots are valid and
//   ascending, as the forward stores them: its keys are in order already); the gradients are laid out in that order in shared memory; the
//   first entry of each run (a column) finds where the run ends from the run starts of its lane and
//   of the lanes after it (ballot + a suffix-min scan), sums its run from shared memory in order and
//   stores the column. Runs are disjoint: each column is written by one lane, after the zeroing
//   (ordered by __syncwarp).
// Numerics: the CPU kernel's sums in its order, so the same bits. Deterministic: no atomics.
#pragma once

#include <cstdint>

#include "cuda/topk/register_sort.cuh"
#include "cuda/topk/score_types.cuh"

namespace sdm::cuda::topk {

template <int KMAX>
struct ScatterLists {
  float grad[KMAX];    // by entry
  float sorted[KMAX];  // by sorted position
};

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

// Zeroes x[0..count) (16-byte stores where x is aligned).
template <typename S>
__device__ void zero_row(typename S::Storage* x, std::int64_t count, int lane) {
  const std::int64_t bytes = count * static_cast<std::int64_t>(sizeof(typename S::Storage));
  if ((reinterpret_cast<std::uintptr_t>(x) & 15u) == 0 && bytes % 16 == 0) {
    auto* v = reinterpret_cast<uint4*>(x);
    for (std::int64_t q = lane; q < bytes / 16; q += 32) v[q] = make_uint4(0u, 0u, 0u, 0u);
  } else {
    for (std::int64_t c = lane; c < count; c += 32) x[c] = S::store(0.0f);
  }
}

template <typename S, int KMAX>
__device__ void scatter_row(const ScatterRow& p, const std::int64_t* ids, const typename S::Storage* grad_values,
                            typename S::Storage* out, ScatterLists<KMAX>& s, int lane) {
  constexpr int M = KMAX / 32;
  constexpr std::uint32_t kNone = 0xffffffffu;
  zero_row<S>(out, p.width, lane);
  std::uint32_t rest[M];
  bool valid[M];
  unsigned local_valid = 0;
#pragma unroll
  for (int r = 0; r < M; ++r) {
    const int e = lane * M + r;
    valid[r] = false;
    rest[r] = 0;
    if (e < p.selected) {
      const std::int64_t id = ids[e];
      valid[r] = id >= 0 && id < p.slots;
      rest[r] = valid[r] ? static_cast<std::uint32_t>(id) : 0u;
      s.grad[e] = S::load(grad_values[e]);
    }
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
    const std::uint32_t w = p.dims[f];
    offset -= w;
    std::uint32_t key[M];
#pragma unroll
    for (int r = 0; r < M; ++r) {
      key[r] = kNone;
      if (valid[r]) {
        const std::uint32_t q = divide(rest[r], p.magic[f]);
        key[r] = (rest[r] - q * w) << 8 | static_cast<std::uint32_t>(lane * M + r);
        rest[r] = q;
      }
    }
    if (f > 0 || !ascending) sort_runs(key, KMAX, false, lane);
    const std::uint32_t before = __shfl_up_sync(kFullMask, key[M - 1], 1);
    unsigned starts = 0;  // bit r: element lane * M + r begins a run
#pragma unroll
    for (int r = 0; r < M; ++r) {
      const int g = lane * M + r;
      const std::uint32_t prev = r > 0 ? key[r - 1] : before;
      if (g < real) {
        s.sorted[g] = s.grad[key[r] & 0xffu];
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
        for (int t = lane * M + r; t < end; ++t) sum = __fadd_rn(sum, s.sorted[t]);
        out[offset + static_cast<std::int64_t>(key[r] >> 8)] = S::store(sum);
      }
    }
    __syncwarp();
  }
}

}  // namespace sdm::cuda::topk

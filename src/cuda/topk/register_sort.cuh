// register_sort.cuh - bitonic networks over keys held in registers by one warp, for the
// product-key top-k forward (register_forward.cu).
//
// Layout: a warp holds 32 * M keys, lane l's x[r] being element g = l * M + r (M a power of two).
// Steps of distance d < M stay inside a lane (compile-time register indices); steps of distance
// d >= M exchange x[r] with lane l ^ (d / M) by one shuffle per key.
//   sort_runs(x, run, descending)   sorts every run of `run` consecutive elements (a power of two,
//                                   M <= run <= 32 M) in one direction
//   keep_top_half<M, LANES>(x, run) runs sorted descending -> every run holds the `run` largest keys
//                                   of its group of LANES lanes (32: the whole warp; 16: each
//                                   half-warp on its own), sorted descending (log2(LANES M / run) rounds
//                                   of "max against the reversed neighbour run, then a bitonic
//                                   clean"; the runs end up identical)
//   fold_halve<B>, halve_top64      keep_top_half for 16 keys a lane that drops the duplicate
//                                   copies: 8, then 4 keys a lane (the half-warp ranks, runs of 64)
//   merge_top64                     the top 64 of two such runs of 4 keys a lane (streamed tiles)
// Both are inlined: called with a constant `run`, every loop unrolls and every direction folds.
// Keys are unsigned integers compared as such; equal keys are interchangeable, so the networks
// need no stability. Every lane of the warp must take part (full-mask shuffles).
#pragma once

#include <cstdint>

namespace sdm::cuda::topk {

inline constexpr unsigned kFullMask = 0xffffffffu;

// The sum of `local` over the lanes below this one (a 5-step shuffle scan; every lane takes part).
__device__ __forceinline__ unsigned warp_exclusive_sum(unsigned local, int lane) {
  unsigned inclusive = local;
#pragma unroll
  for (int d = 1; d < 32; d *= 2) {
    const unsigned y = __shfl_up_sync(kFullMask, inclusive, d);
    if (lane >= d) inclusive += y;
  }
  return inclusive - local;
}

template <typename K>
__device__ __forceinline__ void order_in_lane(K& lo, K& hi, bool descending) {
  const K a = lo, b = hi;
  const K big = a > b ? a : b, small = a > b ? b : a;
  lo = descending ? big : small;
  hi = descending ? small : big;
}

// One compare-exchange step at distance d >= M: lane ^ lanes is the partner, the lower lane of the
// pair keeps the larger key when descending.
template <int M, typename K>
__device__ __forceinline__ void step_across_lanes(K (&x)[M], int lanes, bool descending, int lane) {
  const bool keep_big = ((lane & lanes) == 0) == descending;
#pragma unroll
  for (int r = 0; r < M; ++r) {
    const K y = __shfl_xor_sync(kFullMask, x[r], lanes);
    x[r] = keep_big ? (x[r] > y ? x[r] : y) : (x[r] < y ? x[r] : y);
  }
}

// The steps of distance M/2 .. 1 of one merge, all pairs in `descending` direction.
template <int M, typename K>
__device__ __forceinline__ void steps_in_lane(K (&x)[M], bool descending) {
#pragma unroll
  for (int d = M / 2; d >= 1; d /= 2) {
#pragma unroll
    for (int r = 0; r < M; ++r) {
      if ((r & d) == 0) order_in_lane(x[r], x[r + d], descending);
    }
  }
}

// Sorting networks of fewer comparators than the bitonic sort for a lane's own 8 or 16 keys:
// 19 comparators in 6 layers for 8 keys (bitonic: 24), 60 in 10 layers for 16 (bitonic: 80), each
// pair (a, b) with a < b; checked over every 0-1 input (the 0-1 principle).
struct InLanePair {
  int a, b;
};
__device__ constexpr InLanePair kSort8[19] = {{0, 2}, {1, 3}, {4, 6}, {5, 7}, {0, 4}, {1, 5}, {2, 6}, {3, 7}, {0, 1}, {2, 3},
                                          {4, 5}, {6, 7}, {2, 4}, {3, 5}, {1, 4}, {3, 6}, {1, 2}, {3, 4}, {5, 6}};
__device__ constexpr InLanePair kSort16[60] = {
    {0, 13}, {1, 12}, {2, 15}, {3, 14}, {4, 8},  {5, 6},   {7, 11},  {9, 10},  {0, 5},   {1, 7},   {2, 9},   {3, 4},
    {6, 13}, {8, 14}, {10, 15}, {11, 12}, {0, 1}, {2, 3},  {4, 5},   {6, 8},   {7, 9},   {10, 11}, {12, 13}, {14, 15},
    {0, 2},  {1, 3},  {4, 10},  {5, 11},  {6, 7}, {8, 9},  {12, 14}, {13, 15}, {1, 2},   {3, 12},  {4, 6},   {5, 7},
    {8, 10}, {9, 11}, {13, 14}, {1, 4},   {2, 6}, {5, 8},  {7, 10},  {9, 13},  {11, 14}, {2, 4},   {3, 6},   {9, 12},
    {11, 13}, {3, 5}, {6, 8},   {7, 9},   {10, 12}, {3, 4}, {5, 6},  {7, 8},   {9, 10},  {11, 12}, {6, 7},   {8, 9}};

// A lane's M keys sorted by the network `net` (N pairs).
template <int M, int N, typename K>
__device__ __forceinline__ void sort_in_lane(K (&x)[M], const InLanePair (&net)[N], bool descending) {
#pragma unroll
  for (int q = 0; q < N; ++q) order_in_lane(x[net[q].a], x[net[q].b], descending);
}

// Merging the sorted runs of s / 2 elements into runs of s (s >= 2 M): the first step of the merge
// across lanes, against the mirrored element.
template <int M, typename K>
__device__ __forceinline__ void merge_mirror(K (&x)[M], int s, bool descending, int lane) {
  const int mirror = s / M - 1;
  const bool keep_big = ((lane & (s / (2 * M))) == 0) == descending;
  K y[M];
#pragma unroll
  for (int r = 0; r < M; ++r) y[r] = __shfl_xor_sync(kFullMask, x[M - 1 - r], mirror);
#pragma unroll
  for (int r = 0; r < M; ++r) x[r] = keep_big ? (x[r] > y[r] ? x[r] : y[r]) : (x[r] < y[r] ? x[r] : y[r]);
}

// The merges of sort_runs from runs of S / 2 up to RUN, every loop unrolled (S and RUN constants).
template <int M, int S, int RUN, typename K>
__device__ __forceinline__ void merge_up_to(K (&x)[M], bool descending, int lane) {
  if constexpr (S <= RUN) {
    merge_mirror(x, S, descending, lane);
#pragma unroll
    for (int d = S / 4; d >= M; d /= 2) step_across_lanes(x, d / M, descending, lane);
    steps_in_lane(x, descending);
    merge_up_to<M, 2 * S, RUN>(x, descending, lane);
  }
}

// RUN > 0: run is the constant RUN and the templates unroll every merge; 0: the merges are a loop over
// `run`, which the compiler unrolls where `run` is a constant after inlining.
template <int M, int RUN = 0, typename K>
__device__ __forceinline__ void sort_runs(K (&x)[M], int run, bool descending, int lane) {
  // The direction-free bitonic sort: merging two sorted halves of a block of s compares element g
  // of the lower half with its mirror s - 1 - g (the upper half reversed), then half-cleaners; the
  // lower position of every pair keeps the better key, so no step depends on a block's parity.
  // A lane's own 8 or 16 keys (run >= M) are sorted by the smaller networks above instead.
  if constexpr (M == 8) {
    sort_in_lane(x, kSort8, descending);
  } else if constexpr (M == 16) {
    sort_in_lane(x, kSort16, descending);
  } else {
#pragma unroll
    for (int s = 2; s <= M; s *= 2) {
      if (s > run) break;
#pragma unroll
      for (int r = 0; r < M; ++r) {
        if ((r & (s / 2)) == 0) order_in_lane(x[r], x[r ^ (s - 1)], descending);
      }
#pragma unroll
      for (int d = s / 4; d >= 1; d /= 2) {
#pragma unroll
        for (int r = 0; r < M; ++r) {
          if ((r & d) == 0) order_in_lane(x[r], x[r + d], descending);
        }
      }
    }
  }
  if constexpr (RUN > 0) {
    merge_up_to<M, 2 * M, RUN>(x, descending, lane);
  } else {
    // The mirror step written out, not merge_mirror: with that call in the loop, NVVM stopped
    // unrolling it where `run` is a constant (next_running, store_by_id, rank_columns at 64-bit keys;
    // f32 KMAX 64 forward: 2250 -> 1886 SASS shuffles; 3x64 k64 f32 11 % slower on the H100).
    // Written out, every forward kernel but bf16 KMAX 64 (the halving path's) is 3c1c8e4's SASS.
    for (int s = 2 * M; s <= run; s *= 2) {
      const int mirror = s / M - 1;
      const bool keep_big = ((lane & (s / (2 * M))) == 0) == descending;
      K y[M];
#pragma unroll
      for (int r = 0; r < M; ++r) y[r] = __shfl_xor_sync(kFullMask, x[M - 1 - r], mirror);
#pragma unroll
      for (int r = 0; r < M; ++r) x[r] = keep_big ? (x[r] > y[r] ? x[r] : y[r]) : (x[r] < y[r] ? x[r] : y[r]);
      for (int d = s / 4; d >= M; d /= 2) step_across_lanes(x, d / M, descending, lane);
      steps_in_lane(x, descending);
    }
  }
}

template <int M, int LANES = 32, typename K>
__device__ __forceinline__ void keep_top_half(K (&x)[M], int run, int lane) {
  for (int block = 2 * run; block <= LANES * M; block *= 2) {
    // Lane l's partner is the mirror lane of the block: element g meets element block - 1 - g,
    // that is, the mirror run reversed; the max of a descending and an ascending run is bitonic.
    const int mirror = block / M - 1;
    K y[M];
#pragma unroll
    for (int r = 0; r < M; ++r) y[r] = __shfl_xor_sync(kFullMask, x[M - 1 - r], mirror);
#pragma unroll
    for (int r = 0; r < M; ++r) x[r] = x[r] > y[r] ? x[r] : y[r];
    for (int d = run / 2; d >= M; d /= 2) step_across_lanes(x, d / M, true, lane);
    steps_in_lane(x, true);
  }
}

// The top half of a block of B lanes (8 or 16) x 16 keys holding two runs of 8 B keys, each sorted
// descending in the usual layout (element b * 16 + r at lane b, register r; b the lane's index in
// the block), kept as 8 keys a lane instead of 16 (keep_top_half's groups would hold the same run
// twice). The fold compares element e with 16 B - 1 - e (the mirror lane's reversed register), so
// each lane keeps registers 0..7 of its fold, and the top run's elements sit as:
//   lower lanes (b < B / 2):  z[r] = element b * 16 + r
//   upper lanes (b >= B / 2): z[r] = element (B - 1 - b) * 16 + 15 - r  (reversed)
// then the bitonic merge sorts them in that layout: a distance of 16 lanes' worth or more is lane
// b ^ (distance / 16) in both halves, distance 8 the mirror lane's mirrored register, shorter ones
// in the lane (ascending where reversed). Every lane of the warp takes part; b < 16.
template <int B, typename K>
__device__ __forceinline__ void fold_halve(const K (&x)[16], K (&z)[8], int b) {
  static_assert(B == 8 || B == 16);
  K y[8];
#pragma unroll
  for (int r = 0; r < 8; ++r) y[r] = __shfl_xor_sync(kFullMask, x[15 - r], B - 1);
#pragma unroll
  for (int r = 0; r < 8; ++r) z[r] = x[r] > y[r] ? x[r] : y[r];
  const bool upper = (b & (B / 2)) != 0;
#pragma unroll
  for (int lanes = B / 4; lanes >= 1; lanes /= 2) {
    const bool keep_big = ((b & lanes) == 0) != upper;
#pragma unroll
    for (int r = 0; r < 8; ++r) {
      const K o = __shfl_xor_sync(kFullMask, z[r], lanes);
      z[r] = keep_big ? (z[r] > o ? z[r] : o) : (z[r] < o ? z[r] : o);
    }
  }
#pragma unroll
  for (int r = 0; r < 8; ++r) y[r] = __shfl_xor_sync(kFullMask, z[7 - r], B - 1);
#pragma unroll
  for (int r = 0; r < 8; ++r) z[r] = upper ? (z[r] < y[r] ? z[r] : y[r]) : (z[r] > y[r] ? z[r] : y[r]);
  steps_in_lane(z, !upper);
}

// A run of 64 keys held by 16 lanes x 4 as halve_top64 leaves it (lane b, register r: element
// 16 g + 4 q + (rev ? 3 - r : r), q = (4 - b / 4) % 4, rev = (q == 2 || q == 3), g = b % 4, or
// 3 - b % 4 where rev), bitonic -> sorted descending in that layout: the half-cleaners of
// distance 32, 16 (lane b ^ 2, b ^ 1), 8 (lane b ^ 11, mirrored register: q ^ 2 flips rev), 4
// (lane b ^ 12) and 2, 1 in the lane (ascending where rev).
template <typename K>
__device__ __forceinline__ void clean_top64(K (&w)[4], int b) {
  const bool rev = ((b >> 2 ^ b >> 3) & 1) != 0;
#pragma unroll
  for (int lanes = 2; lanes >= 1; lanes /= 2) {
    const bool keep_big = ((b & lanes) == 0) != rev;
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const K o = __shfl_xor_sync(kFullMask, w[r], lanes);
      w[r] = keep_big ? (w[r] > o ? w[r] : o) : (w[r] < o ? w[r] : o);
    }
  }
  K y[4];
#pragma unroll
  for (int r = 0; r < 4; ++r) y[r] = __shfl_xor_sync(kFullMask, w[3 - r], 11);
#pragma unroll
  for (int r = 0; r < 4; ++r) w[r] = rev ? (w[r] < y[r] ? w[r] : y[r]) : (w[r] > y[r] ? w[r] : y[r]);
  const bool keep_big = (b & 4) == 0;
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    const K o = __shfl_xor_sync(kFullMask, w[r], 12);
    w[r] = keep_big ? (w[r] > o ? w[r] : o) : (w[r] < o ? w[r] : o);
  }
  steps_in_lane(w, !rev);
}

// The top 64 of 16 lanes x 8 keys holding two sorted runs of 64 in fold_halve<8>'s layout (lanes
// 0..7 and 8..15), as 4 keys a lane. Lane b and b ^ 12 hold the elements that meet in the fold at
// the same registers, so lane b keeps registers 0..3 of the fold (b < 8) or 4..7 (b >= 8), and
// clean_top64 sorts the bitonic result in its layout.
template <typename K>
__device__ __forceinline__ void halve_top64(const K (&z)[8], K (&w)[4], int b) {
  const bool high = (b & 8) != 0;
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    const K send = high ? z[r] : z[4 + r];
    const K own = high ? z[4 + r] : z[r];
    const K o = __shfl_xor_sync(kFullMask, send, 12);
    w[r] = own > o ? own : o;
  }
  clean_top64(w, b);
}

// w <- the top 64 of the two runs w and v, both sorted descending in clean_top64's layout. Element
// e of w meets element 63 - e of v, which lane b ^ 4 holds in the same register (q -> 3 - q
// flips b / 4's low bit and rev; g -> 3 - g then keeps b % 4); their max is bitonic.
template <typename K>
__device__ __forceinline__ void merge_top64(K (&w)[4], const K (&v)[4], int b) {
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    const K o = __shfl_xor_sync(kFullMask, v[r], 4);
    w[r] = w[r] > o ? w[r] : o;
  }
  clean_top64(w, b);
}

}  // namespace sdm::cuda::topk

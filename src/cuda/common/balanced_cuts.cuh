// balanced_cuts.cuh - cuts a chunk's sorted positions into the shares of a walk's CTAs at about
// equal work (the backward's staged slot walk: backward/walk_cuts.cu).
//
// Math: given an integer cost per position (the work a walk does for it), share j of S gets
// positions [cut j, cut j+1): cut 0 = 0, cut S = positions, and cut j (0 < j < S) sits after the
// first position at which the running cost reaches ceil(j * total / S); when every cost is 0 the
// positions are cut at equal counts. Integers only, no division in the loop: cut j's target is at
// most a running cost c exactly when j * total <= c * S.
// Decomposition: the CTA's kThreads threads take contiguous runs of positions; each sums its run's
// costs, a block scan gives every run its starting cost, and each thread places the cuts whose
// targets its run reaches (the first by a binary search over j). Each cut has one writer.
#pragma once

#include <cub/block/block_scan.cuh>

#include <cstdint>

namespace sdm::cuda {

__device__ __forceinline__ bool cut_reached(std::int64_t j, std::int64_t running, std::int64_t total,
                                            std::int64_t shares) {
  return j * total <= running * shares;
}

// Writes cuts[0 .. shares] for positions [0, positions); `cost(q)` is the int cost of position q.
// Every thread of the CTA calls it; it uses the CTA's shared memory once (no barrier before it is
// needed, none after it is given).
template <int kThreads, typename Cost>
__device__ void balanced_cuts(int positions, int shares, const Cost& cost, std::int32_t* cuts) {
  using Scan = cub::BlockScan<int, kThreads, cub::BLOCK_SCAN_WARP_SCANS>;
  __shared__ typename Scan::TempStorage scan;
  const int t = static_cast<int>(threadIdx.x), run = (positions + kThreads - 1) / kThreads;
  const int begin = t * run < positions ? t * run : positions;
  const int end = begin + run < positions ? begin + run : positions;
  int mine = 0;
  for (int q = begin; q < end; ++q) mine += cost(q);
  int before = 0, total = 0;
  Scan(scan).ExclusiveSum(mine, before, total);
  if (t == 0) {
    cuts[0] = 0;
    cuts[shares] = positions;
  }
  if (total == 0) {
    for (int j = t + 1; j < shares; j += kThreads) {
      cuts[j] = static_cast<std::int32_t>(static_cast<std::int64_t>(positions) * j / shares);
    }
    return;
  }
  // j: the first cut whose target lies above the running cost `sum` (binary search over [1, shares]).
  std::int64_t sum = before;
  int j = 1, len = shares - 1;
  while (len > 0) {
    const int half = len / 2;
    if (cut_reached(j + half, sum, total, shares)) {
      j += half + 1;
      len -= half + 1;
    } else {
      len = half;
    }
  }
  for (int q = begin; q < end && j < shares; ++q) {
    sum += cost(q);
    for (; j < shares && cut_reached(j, sum, total, shares); ++j) cuts[j] = q + 1;
  }
}

}  // namespace sdm::cuda

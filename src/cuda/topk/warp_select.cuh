// warp_select.cuh - warp-cooperative selection and sorting over shared memory, for the
// product-key top-k kernels (one warp per row).
//
//   warp_kth_largest   radix select: the need-th largest of `count` distinct 64-bit values,
//                      8 bits per pass, integer histograms in shared memory (counts only, so
//                      the result does not depend on the order of the atomic increments)
//   warp_compact       the values >= a threshold, in index order (ballot + popc)
//   warp_bitonic_sort  in-place bitonic sort of a power-of-two array in shared memory
#pragma once

#include <cstdint>

#include "cuda/topk/register_sort.cuh"  // kFullMask

namespace sdm::cuda::topk {

// The need-th largest of the distinct values get(t), t in [0, count), each below 2^bits
// (1 <= need <= count). `hist` is 256 words of the warp's shared memory.
template <typename Get>
__device__ std::uint64_t warp_kth_largest(const Get& get, std::int64_t count, int need, int bits, unsigned* hist,
                                          int lane) {
  std::uint64_t prefix = 0, fixed = 0;
  for (int shift = ((bits + 7) / 8 - 1) * 8; shift >= 0; shift -= 8) {
    for (int b = lane; b < 256; b += 32) hist[b] = 0;
    __syncwarp();
    for (std::int64_t t = lane; t < count; t += 32) {
      const std::uint64_t v = get(t);
      if ((v & fixed) == prefix) atomicAdd(&hist[(v >> shift) & 0xffu], 1u);
    }
    __syncwarp();
    // Lane l holds bins 255 - 8l down to 248 - 8l; counts accumulate from the top bin.
    unsigned bin[8], local = 0;
#pragma unroll
    for (int r = 0; r < 8; ++r) {
      bin[r] = hist[255 - 8 * lane - r];
      local += bin[r];
    }
    unsigned above = warp_exclusive_sum(local, lane);
    int digit = -1;
    unsigned above_digit = 0;
#pragma unroll
    for (int r = 0; r < 8; ++r) {
      if (digit < 0 && above < static_cast<unsigned>(need) && above + bin[r] >= static_cast<unsigned>(need)) {
        digit = 255 - 8 * lane - r;
        above_digit = above;
      }
      above += bin[r];
    }
    const int owner = __ffs(__ballot_sync(kFullMask, digit >= 0)) - 1;
    digit = __shfl_sync(kFullMask, digit, owner);
    need -= static_cast<int>(__shfl_sync(kFullMask, above_digit, owner));
    prefix |= static_cast<std::uint64_t>(digit) << shift;
    fixed |= std::uint64_t{0xff} << shift;
    __syncwarp();
  }
  return prefix;
}

// Writes the values get(t) >= threshold to out[0..), in increasing t; returns their number.
template <typename Get>
__device__ int warp_compact(const Get& get, std::int64_t count, std::uint64_t threshold, std::uint64_t* out,
                            int lane) {
  int written = 0;
  for (std::int64_t base = 0; base < count; base += 32) {
    const std::int64_t t = base + lane;
    const std::uint64_t v = t < count ? get(t) : 0;
    const bool keep = t < count && v >= threshold;
    const unsigned ballot = __ballot_sync(kFullMask, keep);
    if (keep) out[written + __popc(ballot & ((1u << lane) - 1u))] = v;
    written += __popc(ballot);
  }
  __syncwarp();
  return written;
}

// Sorts x[0..n) (n a power of two) ascending, or descending with kDescending.
template <bool kDescending>
__device__ void warp_bitonic_sort(std::uint64_t* x, int n, int lane) {
  for (int size = 2; size <= n; size *= 2) {
    for (int stride = size / 2; stride > 0; stride /= 2) {
      for (int t = lane; t < n / 2; t += 32) {
        const int i = 2 * stride * (t / stride) + t % stride;
        const int j = i + stride;
        const std::uint64_t a = x[i], b = x[j];
        const bool ascending_block = ((i & size) == 0) != kDescending;
        if (ascending_block ? a > b : a < b) {
          x[i] = b;
          x[j] = a;
        }
      }
      __syncwarp();
    }
  }
}

}  // namespace sdm::cuda::topk

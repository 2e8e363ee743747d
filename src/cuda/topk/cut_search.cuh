// cut_search.cuh - where the c-th largest of a warp's candidate keys lies, for the pair stage of
// the product-key top-k forward (register_select.cuh): warp-wide counts of the keys at or above a
// probe (__reduce_add_sync), a search between bounds whose counts bracket c, and the split of the
// candidates tied at the c-th key by their payloads.
#pragma once

#include <cstdint>

#include "cuda/topk/pair_table.cuh"
#include "cuda/topk/register_sort.cuh"

namespace sdm::cuda::topk {

// The number of keys >= t over the warp. The predicated add keeps it at two instructions a key
// (a compare and an add; `local += key >= t` compiles to three).
template <int C>
__device__ __forceinline__ unsigned count_at_least(const std::uint32_t (&key)[C], std::uint32_t t) {
  unsigned local = 0;
#pragma unroll
  for (int q = 0; q < C; ++q) {
    asm("{\n .reg .pred p;\n setp.ge.u32 p, %1, %2;\n @p add.u32 %0, %0, 1;\n}" : "+r"(local) : "r"(key[q]), "r"(t));
  }
  return __reduce_add_sync(kFullMask, local);
}

// Where the c-th largest of the warp's keys lies: exact (exactly c keys are > key), or key is
// the c-th largest and `above` (< c) keys are > it, the rest of the c tied with it.
struct Cut {
  std::uint32_t key;
  unsigned above;
  bool exact;
};

// Bisection over [lo, hi) with count(lo) >= c > count(hi) (count(hi) = 0), stopping at an exact
// count; once count(lo) - c <= kExtract, the keys >= lo are walked up from the smallest instead
// (at most kExtract + 1 rounds of a warp min and a count). The sums of 16-bit inputs leave wide
// gaps between distinct keys, which the bisection otherwise halves one probe at a time
// (kExtract 4; simulated at 2x256 k 64 bf16: 13.2 probes a row; with the walk, about 40 % fewer
// instructions in this search). f32 sums walk from 2 extra keys (simulated over normal, uniform
// and heavy-tailed rows at k 64 / 128: 3-9 % fewer instructions than none; 4 costs as much as
// none; measured on the H100: the mean of the f32 rows 0.3 % faster than by bisection alone,
// 2x256 k 64 f32 1.5 %; docs/performance.md "Product-key top-k, stop 48").
template <unsigned kExtract, int C>
__device__ __forceinline__ Cut find_cut(const std::uint32_t (&key)[C], unsigned c, std::uint32_t lo, std::uint32_t hi) {
  static_assert(kExtract > 0);
  unsigned lo_count = 0xffffffffu, hi_count = 0;
  while (hi - lo > 1u) {
    if (lo_count - c <= kExtract) {
      for (;;) {
        std::uint32_t local = 0xffffffffu;
#pragma unroll
        for (int q = 0; q < C; ++q) local = min(local, key[q] >= lo ? key[q] : 0xffffffffu);
        const std::uint32_t v = __reduce_min_sync(kFullMask, local);
        const unsigned above = count_at_least(key, v + 1u);
        if (above <= c) return {v, above, above == c};
        lo = v + 1u;
      }
    }
    const std::uint32_t mid = lo + (hi - lo) / 2u;
    const unsigned count = count_at_least(key, mid);
    if (count == c) return {mid - 1u, c, true};
    if (count > c) {
      lo = mid;
      lo_count = count;
    } else {
      hi = mid;
      hi_count = count;
    }
  }
  return {lo, hi_count, false};
}

// The need-th largest of the warp's tie codes (distinct where nonzero; 0 = not tied; at least
// `need` nonzero): a few rounds of "largest below the last one" when need is small (ties at the
// c-th key are mostly 2-4 candidates), else a bisection over the codes (< kPairCodes).
inline constexpr int kTieRounds = 4;
template <int C>
__device__ __forceinline__ std::uint32_t nth_largest_tie(const std::uint32_t (&tie)[C], unsigned need) {
  if (need <= static_cast<unsigned>(kTieRounds)) {
    std::uint32_t last = kPairCodes;
    for (unsigned round = 0; round < need; ++round) {
      std::uint32_t local = 0;
#pragma unroll
      for (int q = 0; q < C; ++q) local = max(local, tie[q] < last ? tie[q] : 0u);
      last = __reduce_max_sync(kFullMask, local);
    }
    return last;
  }
  std::uint32_t lo = 1, hi = kPairCodes;  // count(lo) >= need > count(hi)
  while (hi - lo > 1u) {
    const std::uint32_t mid = lo + (hi - lo) / 2u;
    const unsigned count = count_at_least(tie, mid);
    if (count == need) return mid;
    if (count > need) lo = mid;
    else hi = mid;
  }
  return lo;
}

}  // namespace sdm::cuda::topk

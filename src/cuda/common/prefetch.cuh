// prefetch.cuh - asking L2 (prefetch.global.L2) or L1 (prefetch.global.L1) for data ahead of its
// use: hints that hold no register and change no value, so a warp can start a row's DRAM trip
// before the dependent loads (its metadata, or the work before it) that precede the row's first
// real load.
#pragma once

#include <cstdint>

namespace sdm::cuda {

// Asks L2 for the 32-byte sector holding `at` (a hint: no register, no fault on any address).
__device__ __forceinline__ void prefetch_l2(const void* at) { asm volatile("prefetch.global.L2 [%0];" ::"l"(at)); }

// Fetches the 32-byte sector holding `at` into L1 (a hint: no register, no fault on any address).
__device__ __forceinline__ void prefetch_l1(const void* at) { asm volatile("prefetch.global.L1 [%0];" ::"l"(at)); }

// Bytes of a row prefetch_row_l2 asks for: whole rows up to 2 KB (hd 1024 in bf16), the first 2 KB
// of longer ones: asking for whole longer rows slows the slot kernel down (docs/performance.md).
constexpr std::int64_t kPrefetchRowBytes = 2048;

// Asks L2 for the first min(bytes, kPrefetchRowBytes) bytes of a row, one 32-byte sector per lane
// and instruction (all 32 lanes call it). No register holds anything and no value changes: a later
// load of the row finds it in L2 instead of waiting on DRAM, so a worker can start its rows' DRAM
// trips before the dependent loads (keys, entry scalars) that precede its first row access.
__device__ __forceinline__ void prefetch_row_l2(const void* row, std::int64_t bytes, int lane) {
  const char* at = static_cast<const char*>(row);
  const std::int64_t end = bytes < kPrefetchRowBytes ? bytes : kPrefetchRowBytes;
  for (std::int64_t offset = 32 * lane; offset < end; offset += 32 * 32) prefetch_l2(at + offset);
}

}  // namespace sdm::cuda

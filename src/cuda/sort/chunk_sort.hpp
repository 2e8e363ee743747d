// chunk_sort.hpp - the stable sort of the engine's 64-bit keys (chunk | slot | token | lane,
// common/geometry.hpp's KeyLayout), chunk by chunk (chunk_sort.cu has the kernel and the argument).
//
// Input:  in  u64 [chunks * per_chunk], chunk n's keys at [n*per_chunk, (n+1)*per_chunk), every key
//         of chunk n holding n in its chunk bits, chunks ascending (keys generated in entry order).
// Output: out u64 [chunks * per_chunk] = the stable sort of `in` on the key bits [begin_bit,
//         total_bits) (chunk and slot bits), bitwise; in and out must not overlap.
// Usage:  plan first (before Workspace::allocate(): it only computes), give the plan's temp_bytes
//         to the workspace, then sort with the same plan on any stream.
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime.h>

namespace sdm::cuda {

struct ChunkSort {
  std::int64_t chunks = 0, per_chunk = 0;
  int begin_bit = 0, slot_end_bit = 0, total_bits = 0;  // slot bits [begin_bit, slot_end_bit)
  int tile = 0;                 // keys per CTA of the per-chunk block sort; 0: device-wide sort
  std::size_t temp_bytes = 0;   // device temporary storage sort_chunk_keys needs (0 for block sorts)
};

// Picks the per-chunk block sort when a chunk fits one CTA's tile (per_chunk <= kMaxChunkSortTile)
// and the current device lets a CTA hold the tile's shared memory (only the 64-bit sort of the
// 16384-key tile, 132 KiB, exceeds some devices' opt-in limit), otherwise cub's device-wide radix
// sort on [begin_bit, total_bits). Plan on the device that sorts. Requires 0 <= begin_bit <=
// slot_end_bit <= total_bits <= 64 (throws sdm::RuntimeError otherwise).
ChunkSort plan_chunk_sort(std::int64_t chunks, std::int64_t per_chunk, int begin_bit, int slot_end_bit,
                          int total_bits);

// Sorts in -> out as planned; `temp` holds plan.temp_bytes bytes of device memory (may be null when
// 0). Asynchronous on `stream`; deterministic (integer keys, no atomics).
void sort_chunk_keys(const ChunkSort& plan, const std::uint64_t* in, std::uint64_t* out, void* temp,
                     cudaStream_t stream);

constexpr std::int64_t kMaxChunkSortTile = 16384;

}  // namespace sdm::cuda

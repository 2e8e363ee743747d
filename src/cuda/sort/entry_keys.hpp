// entry_keys.hpp - the sort keys of the write and read entries, sorted chunk by chunk
// (docs/spec.md §2, §4, §8); one kernel builds both kinds (entry_keys.cu).
//
// Entry (n, i, x): token i of chunk n, lane x < X (X = W for writes, R for reads). Key, most
// significant first (KeyLayout of common/geometry.hpp; entry_key_layout in entry_key_rules.hpp):
//   chunk n | local slot | token i | lane x
// local slot = bank row - p*sps, or sps (after every real slot) for a padding token, an index
// outside stream p's rows, and a write lane naming the slot of an earlier lane of its token
// (unless Inputs::distinct_writes: the index check ran). Writes read k_idx (and store k_slot
// [N, C, W]: the absolute row, -1 masked); reads read Phase 1's q_slot [N, C, R] (-1: masked).
// The unsorted keys sit in entry order at (n*C + i)*X + x, so they arrive chunk-major in (token,
// lane) order and chunk_sort.hpp's stable sort of each chunk on its slot bits alone leaves them
// fully sorted: per chunk, slot groups in token order, masked entries last. Integer work only:
// the same bits on every run.
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime.h>

#include "cuda/common/geometry.hpp"
#include "cuda/sort/entry_key_rules.hpp"

namespace sdm::cuda {

// Device temporary bytes the sort of entries with `lanes` lanes needs (0 when one CTA sorts a
// chunk); plan it in the workspace before Workspace::allocate().
std::size_t entry_key_sort_bytes(const Geometry& geo, const KeyLayout& layout, std::int64_t lanes);

// Write keys (layout geo.keys) into `unsorted`, k_slot, then `sorted`. `temp`: the planned bytes.
void sort_write_keys(const Geometry& geo, const Inputs& in, std::uint64_t* unsorted, std::uint64_t* sorted,
                     std::int32_t* k_slot, void* temp, cudaStream_t stream);

// Read keys (layout entry_key_layout(geo, geo.R)) from q_slot into `unsorted`, then `sorted`.
void sort_read_keys(const Geometry& geo, const KeyLayout& layout, const std::int32_t* q_slot, std::uint64_t* unsorted,
                    std::uint64_t* sorted, void* temp, cudaStream_t stream);

}  // namespace sdm::cuda

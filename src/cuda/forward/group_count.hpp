// group_count.hpp - the call's write groups counted on the device (docs/spec.md §4): Phase 1's
// write-key sort (sort/entry_keys.hpp) and group numbering (group_rows.cu, counts and their scan
// only) into scratch of the caller's workspace; no host sync, no allocation of its own. Used by
// write_groups_count (engine.cu) and by the validated saving forward, which compares the count
// with the buffer's rows in its index check's one sync before writing anything (write_read.cu).
// The count follows core/snapshot_row_rule.hpp: the same number the CPU engine gives.
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime.h>

#include "cuda/common/geometry.hpp"
#include "cuda/common/workspace.hpp"

namespace sdm::cuda {

struct GroupCount {
  std::uint64_t* keys_unsorted = nullptr;  // u64 [N, C, W] scratch
  std::uint64_t* keys = nullptr;           // u64 [N*C*W] sorted scratch
  std::int32_t* k_slot = nullptr;          // i32 [N, C, W] scratch (the sort writes it)
  std::int64_t* group_first = nullptr;     // i64 [N + 1]: the chunks' first rows; [N]: the call's write groups
  void* sort_temp = nullptr;               // the write-key sort's device storage
};

// Plans the count's pieces in `ws` (before ws.allocate()).
void plan_group_count(const Geometry& geo, Workspace& ws, GroupCount& count);

// Launches the count on `stream`; afterwards count.group_first[geo.N] holds the call's write groups.
void run_group_count(const Geometry& geo, const Inputs& in, const GroupCount& count, cudaStream_t stream);

}  // namespace sdm::cuda

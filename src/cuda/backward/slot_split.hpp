// slot_split.hpp - the test knob of the backward slot kernel's row split (slot_split.cuh): the
// most warps that may share one slot group's row. 0 (the default): every position of the group up
// to one warp per 256-column step. The split never changes a result (each step's dots and G
// columns are computed the same way whichever warp owns the step), so tests force 1, 2, ... and
// compare bits. SDM_CUDA_SLOT_WARPS=n in the environment sets the default (read once per process;
// for A/B runs); set_slot_split_warps overrides it.
#pragma once

namespace sdm::cuda {

// The cap the next backward calls use (0: none).
int slot_split_warps();
// Sets the cap (n <= 0: none); not thread-safe against concurrent backward calls.
void set_slot_split_warps(int n);

}  // namespace sdm::cuda

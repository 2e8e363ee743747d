// slots_staged.hpp - which kernel runs the backward's slot side (backward.hpp launch_slot_side):
// the staged walk (slots_staged.cu, the chunk's token rows of a column step and every member's
// operands on chip) on the vector path where its rows fit one CTA, else the per-position kernel
// (slots.cu). Both give the same bits.
// dispatch_slot_kernel: the template arguments both launchers are instantiated over.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include "cuda/backward/backward.hpp"
#include "cuda/backward/slot_split.hpp"
#include "cuda/common/dispatch.hpp"

namespace sdm::cuda {

// Whether launch_slot_side takes the staged walk: the vector path (bb.vec8), hd a multiple of 256,
// it fits, and slot_walk() does not forbid it.
bool use_staged_slot_walk(const Geometry& geo, const BackwardBuffers& bb);
void launch_staged_slot_side(const Geometry& geo, const BackwardBuffers& bb, std::int64_t ti, cudaStream_t stream);

// The CTAs that share a chunk's positions in each (stream, column step) of the staged walk: about one
// CTA an SM over a step's launches, or slot_split.hpp's walk_shares where set.
std::int64_t staged_walk_shares(const Geometry& geo, std::int64_t steps);
// A chunk's sorted positions: C*W writes, then C*R reads.
std::int64_t chunk_positions(const Geometry& geo);
// Plans bb.walk_cuts and sets bb.walk_shares (before ws.allocate(); after bb.dot_steps is known);
// finds every chunk's cuts at about equal work (walk_cuts.cu; after find_slot_tasks).
void plan_walk_cuts(const Geometry& geo, Workspace& ws, BackwardBuffers& bb);
void launch_walk_cuts(const Geometry& geo, const BackwardBuffers& bb, cudaStream_t stream);

// Calls launch.template operator()<E, Gt, kVec, kMode>() once with bb's bank row type E, G row
// type Gt, vector access (16-byte pieces) and snapshot mode: the host knows them, so each slot
// kernel is compiled per combination and holds no mode switch in its loops.
template <typename Launch>
void dispatch_slot_kernel(const BackwardBuffers& bb, Launch&& launch) {
  dispatch(
      [&](auto row, auto grad_row, auto vec, auto mode) {
        launch.template operator()<typename decltype(row)::type, typename decltype(grad_row)::type,
                                   decltype(vec)::value == 8, decltype(mode)::value>();
      },
      BankRows{bb.bf16_bank, bb.bf16_grad_rows}, VecWidth{bb.vec8}, Snapshot{bb.snapshot.mode});
}

}  // namespace sdm::cuda

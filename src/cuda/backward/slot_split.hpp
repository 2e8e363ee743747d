// slot_split.hpp - the test knobs of the backward slot kernels, none of which changes a bit:
//   slot_split_warps  the most warps that may share one slot group's row in the per-position
//                     kernel (slot_split.cuh). 0 (the default): every position of the group up
//                     to one warp per 256-column step. Tests force 1, 2, ... and compare bits.
//                     SDM_CUDA_SLOT_WARPS=n (1..kMaxSlotSplitWarps) in the environment sets the default.
//   slot_walk         which kernel walks the groups: staged (the staged walk of slots_staged.cu
//                     on the vector path where it fits, else the per-position kernel of
//                     slots.cu), per_position, or automatic (staged where it also pays,
//                     slots_staged.cu staged_walk_pays). SDM_CUDA_SLOT_WALK=automatic, positions,
//                     staged or staged_du_only in the environment sets the default.
//   walk_shares       how many CTAs share one chunk's sorted positions in each (stream, column
//                     step) of the staged walk: 0 (the default) about one CTA an SM over the
//                     step's launches (slots_staged.cu staged_walk_shares); tests force 1, 3, 7 and
//                     compare bits, A/Bs sweep it. SDM_CUDA_WALK_SHARES=n (1..kMaxWalkShares) sets the default.
//   walk_cut          where those CTAs cut a chunk's positions: balanced (the default: about equal
//                     work, walk_cuts.cu) or positions (equal position counts, the cut before stop
//                     52). SDM_CUDA_WALK_CUT=balanced or positions sets the default.
// The environment is read once per process (for A/B runs; core/env_knobs.hpp: any other value is
// refused with sdm::ValueError); the setters override it; neither is thread-safe against
// concurrent backward calls.
#pragma once

#include <cstdint>

namespace sdm::cuda {

// The largest values the environment may set (a setter takes any count).
constexpr std::int64_t kMaxSlotSplitWarps = 1024;
constexpr std::int64_t kMaxWalkShares = 4096;

// The cap the next backward calls use (0: none).
int slot_split_warps();
// Sets the cap (n <= 0: none).
void set_slot_split_warps(int n);

// staged_du_only: the staged walk with dU alone on chip (dy from global memory), as it runs where
// both do not fit (C = 128); for tests at smaller C.
enum class SlotWalk { automatic, per_position, staged, staged_du_only };
SlotWalk slot_walk();
void set_slot_walk(SlotWalk walk);
// The shares the next backward calls' staged walks use (0: the automatic count).
std::int64_t walk_shares();
// Sets them (n <= 0: the automatic count; at most one a batch of positions is kept).
void set_walk_shares(std::int64_t n);
enum class WalkCut { balanced, positions };
WalkCut walk_cut();
void set_walk_cut(WalkCut cut);
// Reads every knob above (SDM_CUDA_SLOT_WARPS, _SLOT_WALK, _WALK_SHARES, _WALK_CUT) on every
// backward call, whatever the shape, so that a misspelt one is refused there and not only on the
// first shape whose kernels would use it.
void read_slot_side_knobs();
// Whether the staged walk's shared memory for chunk size C (C x 256 f32 of dU rows, and of dy rows
// where they fit too, and the warps' rings and dot rows) fits one CTA on the current device.
bool staged_slot_walk_fits(std::int64_t chunk_size);

}  // namespace sdm::cuda

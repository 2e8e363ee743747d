// step_kernels.hpp - the three per-time-step kernels of the chunked forward (docs/spec.md §2).
// A launch for step ti processes the chunks n = ti*P + p of the streams p in [geo.p_first,
// geo.p_first + geo.p_count) (all P, or half of them: step_streams.hpp); chunk-token rows of the
// step are p*C + i ("step rows", [P*C, hd]).
//
//   gather        retrieved[p*C+i] = sum_w k_eff * M0[k_slot], inter[...] = sum_r q_w * M0[q_slot];
//                 in a saving call with an fp8 / int4 snapshot also each write entry's row amax over
//                 M0 per column tile (row_amax_parts below), for the writer's snapshot scales
//   dual          U = beta (v - retrieved); delta = X U; readings = inter + QX U (rounded to E)
//   group_writer  each slot group: M[s] = exp(Lambda_s) M0[s] + sum_e wcoef_e delta[i_e], rounded
//                 to E once; in a saving call also the pre-write row into the snapshot, encoded
//                 in the snapshot mode (none / bf16 / fp8 / int4, snapshot_rows.cuh)
// All three are graph-capturable, sync-free and deterministic (fixed per-element reduction
// orders that depend only on the shape, never on the SM count).
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include "cuda/common/geometry.hpp"
#include "cuda/forward/phase1.hpp"
#include "sdm/options.hpp"

namespace sdm::cuda {

// Device pointers of one call's Phase 2.
struct StepBuffers {
  void* bank = nullptr;          // [S, hd] E, updated in place
  void* readings = nullptr;      // [P, T, hd] E
  float* retrieved = nullptr;    // [P*C, hd] step rows
  float* inter = nullptr;        // [P*C, hd] step rows
  float* delta = nullptr;        // [P*C, hd] per step (no-grad) or [N*C, hd] (saving)
  float* residual = nullptr;     // [N*C, hd] (saving) or null
  void* snapshot = nullptr;      // [snapshot_rows, row_bytes] snapshot payload rows (saving) or null
  float* snapshot_scales = nullptr;                   // [N*C*W] f32 (saving, fp8 / int4) or null
  // Saving with an fp8 / int4 snapshot, else null: f32 [P*C, W, row_tiles(hd, vec8)], the step's
  // scratch (workspace): at [p*C + i][w][s] max |M0| (NaN ignored, from +0) over column tile s of
  // the row of write entry (token i, lane w) of stream p's chunk (entries with a row only), stored
  // by the step's gather, read by the step's group writer.
  float* row_amax_parts = nullptr;
  std::int64_t snapshot_rows = 0;                     // rows the payload holds (saving)
  SnapshotQuant snapshot_mode = SnapshotQuant::none;  // effective mode (saved/layout.hpp)
  bool delta_per_chunk = false;  // delta holds every chunk's rows (saving call)
  bool bf16_bank = false;
  bool vec8 = false;             // hd % 8 == 0 and a 16-byte aligned bank: vector path
};

// Column tiles of a row of hd columns in the gather, which are the group writer's row pieces:
// 32*kVec columns each, kVec = 8 on the vector path (vec8), else 1.
inline std::int64_t row_tiles(std::int64_t hd, bool vec8) {
  const std::int64_t cols = vec8 ? 256 : 32;
  return (hd + cols - 1) / cols;
}

void launch_gather(const Geometry& geo, const Phase1Buffers& p1, const StepBuffers& sb, std::int64_t ti,
                   cudaStream_t stream);

// One side of a weighted gather (gather.cu): `count` entries per chunk token, at chunk-token
// n*C + i times count: the absolute row (-1: no row, adds nothing) and its weight.
struct GatherSide {
  const std::int32_t* slot = nullptr;
  const float* weight = nullptr;
  std::int64_t count = 0;
};

// Row amaxes the forward's gather takes along for its k side (StepBuffers::row_amax_parts): for
// each write entry (step row p*C + i, lane w) with a row, max |row| over each column tile s, at
//   parts[((p*C + i) * W + w) * tiles + s].
struct GatherAmax {
  float* parts = nullptr;  // null: no amaxes
};

// Row dots a weighted gather can take along for its k side (the backward's dc = <delta_i, G[s]>,
// docs/spec.md §4): for each k entry (chunk-token t, lane w) with a row, per 256-column step s of
// the row, the slot kernels' dot order (common/rows.cuh: the lane's fmaf chain over its 8 columns
// of the step, then warp_sum's butterfly), stored at
//   planes[s * stride + (t / C) * C*W + sorted[t*W + w]]   (the entry's sorted position).
// Only on the vector path (vec8), where the gather's column tile is the dot's column step.
struct GatherDots {
  const float* x = nullptr;              // chunk-token rows [N*C, hd] f32 (delta)
  const std::int32_t* sorted = nullptr;  // per write entry: its sorted position in its chunk
  float* planes = nullptr;               // null: no dots
  std::int64_t stride = 0;
};

// k_sums[p*C + i] = sum over the k side of weight * rows[slot] for step ti, and likewise q_sums
// (null when q.count == 0); rows [S, hd] bf16 (bf16_rows) or f32; vec8: hd % 8 == 0 and 16-byte
// aligned rows; dots (vec8 only): the k side's row dots. launch_gather is this on the bank with
// (k_slot, k_eff) and (q_slot, q_w).
void launch_weighted_gather(const Geometry& geo, const void* rows, bool bf16_rows, bool vec8, GatherSide k,
                            GatherSide q, std::int64_t ti, float* k_sums, float* q_sums, cudaStream_t stream,
                            GatherDots dots = {});
void launch_dual(const Geometry& geo, const Inputs& in, const Phase1Buffers& p1, const StepBuffers& sb,
                 std::int64_t ti, cudaStream_t stream);
void launch_group_writer(const Geometry& geo, const Phase1Buffers& p1, const StepBuffers& sb, std::int64_t ti,
                         cudaStream_t stream);

// The most warps that share one write group's row in the group writer (clamped to 1 ..
// kMaxGroupWriterSplit, the default; 1: the group's first warp alone). Every value gives the same
// bits; tests set it to show that. Process-wide, read at each launch.
constexpr int kMaxGroupWriterSplit = 32;
void set_group_writer_split(int warps);

}  // namespace sdm::cuda

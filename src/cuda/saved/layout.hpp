// layout.hpp - what the CUDA saving forward stores in the caller's `saved` buffer (docs/spec.md
// §4, §5), for the backward (backward.cu), which runs none of Phase 1: it reads the forward's
// Phase 1 arrays from here. SavedLayout gives each region's offset in bytes from the buffer start
// (each region 256-byte aligned) and, at its field, its contents; N = Nt*P chunks (time-major
// n = ti*P + p), rows = plan.snapshot_rows snapshot rows (N*C*W in the worst case); the snapshot
// region is last.
// The saving forward writes the delta, residual and Phase 1 regions whole (L / kappa at padding /
// masked positions hold 0) and, in the snapshot and scales regions, the row and scale of each write
// group; the backward reads only those. The rows and scales past the call's write groups and the
// gaps between regions are never written nor read: they keep the caller's bytes.
// Alignment: with hd % 8 == 0 a row's lane pieces (8 columns at c0 % 8 == 0) sit at multiples of
// 16 (none, bf16), 8 (fp8) or 4 (int4) bytes from the region start, so a 16-byte aligned buffer
// allows the vector accesses; the u64 keys and f64 L need an 8-byte aligned buffer.
#pragma once

#include <cstddef>

#include "core/validate.hpp"
#include "cuda/forward/phase1.hpp"
#include "sdm/options.hpp"
#include "sdm/plan.hpp"

namespace sdm::cuda {

// Byte offsets of the Phase 1 regions: the arrays phase1.hpp lists as read by the backward, in this
// order: keys u64, L f64, kappa, wcoef, gdecay f32, group_ordinal i32 (sorted, [N*C*W]); inv_pos,
// k_slot i32, k_eff f32 [N, C, W]; q_slot, q_pos i32, q_rho, q_w f32 [N, C, R]; A, QK, X f32
// [N, C, C]; group_first i64 [N + 1]. 44 bytes per write entry, 16 per read entry and 12 C^2 + 8 per
// chunk (the sizes for the benchmark configurations: docs/performance.md).
struct SavedPhase1 {
  std::size_t keys = 0, L = 0, kappa = 0, wcoef = 0, gdecay = 0, group_ordinal = 0, inv_pos = 0, k_slot = 0,
              k_eff = 0;
  std::size_t q_slot = 0, q_pos = 0, q_rho = 0, q_w = 0;
  std::size_t A = 0, QK = 0, X = 0, group_first = 0;
};

struct SavedLayout {
  std::size_t delta = 0;     // f32 [N*C, hd]: delta of chunk-token row n*C + i; rows of padding tokens are 0
  std::size_t residual = 0;  // f32 [N*C, hd]: v - retrieved, same rows; padding rows are 0
  std::size_t snapshot = 0;  // u8 [rows, row_bytes]: the pre-write bank row of each write group, at row
                             // group_first[n] + group_ordinal[n*C*W + q] (q: the group's first sorted
                             // position; core/snapshot_row_rule.hpp), encoded in the effective snapshot
                             // mode (snapshot_rows.cuh)
  std::size_t scales = 0;    // f32 [N*C*W] (the worst case's rows): the row's quantiser scale at the row's
                             // index (fp8 / int4 only; else an empty region)
  std::size_t total = 0;
  SavedPhase1 phase1;
  SnapshotQuant mode = SnapshotQuant::none;  // effective mode ("bf16" on a bf16 bank is "none")
  std::size_t rows = 0;                      // snapshot rows the region holds (plan.snapshot_rows)
  std::size_t row_bytes = 0;                 // payload bytes per snapshot row: core::snapshot_payload_bytes
                                             // (none hd * sizeof(E), bf16 (f32 bank) 2 hd, fp8 hd, int4 ceil(hd/2))
  bool has_scales = false;                   // fp8 / int4
};

// Of the plan's shape and effective snapshot mode.
SavedLayout saved_layout(const WriteReadPlan& plan);

// Points the Phase 1 arrays kept in the saved buffer (keys .. group_first above) at their regions of the
// buffer at `base`; buf's other fields are left as they are. The saving forward's Phase 1 writes
// them; the backward only reads them (it passes its const buffer through a const_cast).
void bind_saved_phase1(const SavedLayout& layout, unsigned char* base, Phase1Buffers& buf);

}  // namespace sdm::cuda

// layout.hpp - what the CUDA saving forward stores in the caller's `saved` buffer (docs/spec.md
// §4, §5), for the backward (backward.cu), which runs none of Phase 1: it reads the forward's
// Phase 1 arrays from here. SavedLayout gives each region's offset in bytes from the buffer start
// (each region 256-byte aligned) and, at its field, its contents; N = Nt*P chunks (time-major
// n = ti*P + p), rows = N*C*W snapshot rows.
// Every byte is written by a saving forward (an op output: the same bytes for the same inputs):
// rows that start no group (and their scales) and L / kappa at padding / masked positions hold 0,
// and so do the gaps between regions (zero_unwritten_saved).
// Alignment: with hd % 8 == 0 a row's lane pieces (8 columns at c0 % 8 == 0) sit at multiples of
// 16 (none, bf16), 8 (fp8) or 4 (int4) bytes from the region start, so a 16-byte aligned buffer
// allows the vector accesses; the u64 keys and f64 L need an 8-byte aligned buffer.
#pragma once

#include <cstddef>

#include <cuda_runtime.h>

#include "core/validate.hpp"
#include "cuda/common/geometry.hpp"
#include "cuda/forward/phase1.hpp"
#include "sdm/options.hpp"
#include "sdm/plan.hpp"

namespace sdm::cuda {

// Byte offsets of the Phase 1 regions: the arrays phase1.hpp lists as read by the backward, in this
// order: keys u64, L f64, kappa, wcoef, gdecay f32 (sorted, [N*C*W]); inv_pos, k_slot i32, k_eff f32
// [N, C, W]; q_slot, q_pos i32, q_rho, q_w f32 [N, C, R]; A, QK, X f32 [N, C, C]. 40 bytes per write
// entry, 16 per read entry and 12 C^2 per chunk (the sizes for the benchmark configurations:
// docs/performance.md).
struct SavedPhase1 {
  std::size_t keys = 0, L = 0, kappa = 0, wcoef = 0, gdecay = 0, inv_pos = 0, k_slot = 0, k_eff = 0;
  std::size_t q_slot = 0, q_pos = 0, q_rho = 0, q_w = 0;
  std::size_t A = 0, QK = 0, X = 0;
};

// The bytes between one region's end and the next one's 256-byte aligned start, [begin, end).
struct SavedGap {
  std::size_t begin = 0, end = 0;
};
constexpr int kMaxSavedGaps = 20;  // one before each region after the first (18 regions)

struct SavedLayout {
  std::size_t delta = 0;     // f32 [N*C, hd]: delta of chunk-token row n*C + i; rows of padding tokens are 0
  std::size_t residual = 0;  // f32 [N*C, hd]: v - retrieved, same rows; padding rows are 0
  std::size_t snapshot = 0;  // u8 [rows, row_bytes]: the pre-write bank row of each write group, at row
                             // n*C*W + q, q = the sorted position (within chunk n) of the group's first
                             // entry, encoded in the effective snapshot mode (snapshot_rows.cuh)
  std::size_t scales = 0;    // f32 [rows]: the row's quantiser scale (fp8 / int4 only; else an empty region)
  std::size_t total = 0;
  SavedGap gaps[kMaxSavedGaps];
  int gap_count = 0;
  SavedPhase1 phase1;
  SnapshotQuant mode = SnapshotQuant::none;  // effective mode ("bf16" on a bf16 bank is "none")
  std::size_t row_bytes = 0;                 // payload bytes per snapshot row: core::snapshot_payload_bytes
                                             // (none hd * sizeof(E), bf16 (f32 bank) 2 hd, fp8 hd, int4 ceil(hd/2))
  bool has_scales = false;                   // fp8 / int4
};

// Of the plan's shape and effective snapshot mode.
SavedLayout saved_layout(const WriteReadPlan& plan);

// The bytes of the saved buffer at `base` that no kernel of the saving forward writes, zeroed on
// `stream`: the gaps between regions, and the snapshot rows (with their scales) of the sorted write
// positions that start no group (inside a group, padding, masked), found from Phase 1's sorted keys
// (`keys`, in the buffer: call after Phase 1). Two launches.
void zero_unwritten_saved(const Geometry& geo, const SavedLayout& layout, const std::uint64_t* keys,
                          unsigned char* base, cudaStream_t stream);

// Points the Phase 1 arrays kept in the saved buffer (keys .. X above) at their regions of the
// buffer at `base`; buf's other fields are left as they are. The saving forward's Phase 1 writes
// them; the backward only reads them (it passes its const buffer through a const_cast).
void bind_saved_phase1(const SavedLayout& layout, unsigned char* base, Phase1Buffers& buf);

}  // namespace sdm::cuda

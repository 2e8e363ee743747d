// saved_layout.hpp - what the CUDA saving forward stores in the caller's `saved` buffer
// (SPEC B.6, D, Z.7), for the backward (backward.cu, which recomputes Phase 1). Offsets in bytes
// from the buffer start, each region 256-byte aligned; rows = N*C*W snapshot rows.
//
//   delta     f32 [N*C, hd]         delta of chunk-token row n*C + i (time-major chunk n = ti*P + p);
//                                   rows of padding tokens are 0
//   residual  f32 [N*C, hd]         v - retrieved, same rows; padding rows are 0
//   snapshot  u8  [rows, row_bytes] the pre-write bank row of each write group, at row n*C*W + q,
//                                   q = the sorted position (within chunk n) of the group's first
//                                   entry, encoded in the effective snapshot mode (snapshot_rows.cuh):
//                                   row_bytes = core::snapshot_payload_bytes(mode, bank, hd):
//                                   none hd * sizeof(E), bf16 (f32 bank) 2 hd, fp8 hd, int4 ceil(hd/2)
//   scales    f32 [rows]            the row's quantiser scale (fp8 / int4 only; else an empty region)
// Rows that start no group (and their scales) are not written. Alignment: with hd % 8 == 0 a
// row's lane pieces (8 columns at c0 % 8 == 0) sit at multiples of 16 (none, bf16), 8 (fp8) or
// 4 (int4) bytes from the region start, so a 16-byte aligned buffer allows the vector accesses.
#pragma once

#include <cstddef>

#include "core/validate.hpp"
#include "sdm/options.hpp"

namespace sdm::cuda {

struct SavedLayout {
  std::size_t delta = 0, residual = 0, snapshot = 0, scales = 0, total = 0;
  SnapshotQuant mode = SnapshotQuant::none;  // effective mode ("bf16" on a bf16 bank is "none")
  std::size_t row_bytes = 0;                 // payload bytes per snapshot row
  bool has_scales = false;                   // fp8 / int4
};

SavedLayout saved_layout(const core::WriteReadShape& shape, const WriteReadOptions& options);

}  // namespace sdm::cuda

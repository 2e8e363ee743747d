// saved_layout.hpp - what the CUDA saving forward stores in the caller's `saved` buffer
// (SPEC B.6), for the backward (backward.cu, which recomputes Phase 1). Offsets in bytes, each 256-byte aligned.
//
//   delta     f32 [N*C, hd]    delta of chunk-token row n*C + i (time-major chunk n = ti*P + p);
//                              rows of padding tokens are 0
//   residual  f32 [N*C, hd]    v - retrieved, same rows; padding rows are 0
//   snapshot  E   [N*C*W, hd]  snapshot_quant "none" (and "bf16" on a bf16 bank): the pre-write
//                              bank row of each write group, at row n*C*W + q, q = the sorted
//                              position (within chunk n) of the group's first entry; rows that
//                              start no group are not written
// Quantised snapshots (fp8, int4, and bf16 on an f32 bank) are not implemented on CUDA yet:
// saved_layout throws sdm::RuntimeError for them.
#pragma once

#include <cstddef>

#include "core/validate.hpp"
#include "sdm/options.hpp"

namespace sdm::cuda {

struct SavedLayout {
  std::size_t delta = 0, residual = 0, snapshot = 0, total = 0;
};

SavedLayout saved_layout(const core::WriteReadShape& shape, const WriteReadOptions& options);

}  // namespace sdm::cuda

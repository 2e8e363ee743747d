// sdm/plan.hpp - what one chunked call will do, decided once from its arguments.
//
// plan_write_read validates every argument except index values (the rules of docs/spec.md §7
// and §8; it throws sdm::Error as the entry points do) and fixes, from shapes, dtypes, the
// bank's device and the options only: the geometry, the effective snapshot mode, the size of the
// saving forward's `saved` buffer and whether the caller must zero it, and the dtype of the
// backward's bank gradient. The entry points, both engines, the PyTorch binding and its fake
// kernels all read these from the plan, so each rule is written once.
#pragma once

#include <cstddef>
#include <cstdint>

#include "sdm/ops.hpp"

namespace sdm {

// The validated geometry of one chunked call.
struct WriteReadShape {
  std::int64_t P = 0, T = 0, W = 0, R = 0, G = 1, hd = 0;
  std::int64_t S = 0;                 // bank rows
  std::int64_t slots_per_stream = 0;
  std::int64_t C = 0;                 // chunk size, clamped to T
  DType bank = DType::f32;
  std::int64_t num_time_chunks() const { return (T + C - 1) / C; }  // Nt
};

struct WriteReadPlan {
  WriteReadShape shape;
  SnapshotQuant snapshot = SnapshotQuant::none;  // effective mode: "bf16" on a bf16 bank is "none"
  std::size_t saved_bytes = 0;  // of `saved` (kSavedAlignment-aligned start) on the bank's device
  bool saved_needs_zeroing = false;  // the engine leaves some bytes of `saved` unwritten (CPU):
                                     // zero the buffer so that the op's outputs are deterministic
  DType bank_grad = DType::f32;  // the backward's bank gradient: bf16 for a bf16 bank without
                                 // grad_bank_fp32, else f32 (docs/spec.md §4)
};

// The plan of a call on `args` (a meta bank is planned as a CPU one). Tensors may be
// data-less (shape-only) views.
WriteReadPlan plan_write_read(const WriteReadArgs& args, const WriteReadOptions& options);

}  // namespace sdm

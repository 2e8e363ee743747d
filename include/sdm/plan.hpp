// sdm/plan.hpp - what one chunked call will do, decided once from its arguments.
//
// plan_write_read validates every argument except index values (the rules of docs/spec.md §7
// and §8; it throws sdm::Error as the entry points do) and fixes, from shapes, dtypes, the
// bank's device and the options only: the geometry, the effective snapshot mode, the size of the
// saving forward's `saved` buffer, and the dtype of the backward's bank gradient. The entry
// points, both engines, the PyTorch binding and its fake kernels all read these from the plan, so
// each rule is written once. A caller that plans a call
// (to size `saved` or the gradients) hands the plan to the entry point, which then plans no more.
#pragma once

#include <array>
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

// What a plan was made from: each tensor's dtype, device, sizes and strides, and the options that
// shape the plan. An entry point given a plan refuses arguments it was not made for.
struct PlannedTensor {
  bool defined = false;
  DType dtype = DType::f32;
  Device device;
  int ndim = 0;
  std::array<std::int64_t, TensorRef::kMaxDims> sizes{}, strides{};
};
struct PlanSource {
  PlannedTensor memory, k_idx, k_val, v, beta, g, q_idx, q_val, readings;
  std::int64_t slots_per_stream = 0, chunk_size = 0;
  SnapshotQuant snapshot_quant = SnapshotQuant::none;
  bool grad_bank_fp32 = false;
  std::int64_t snapshot_rows = 0;
};

struct WriteReadPlan {
  WriteReadShape shape;
  SnapshotQuant snapshot = SnapshotQuant::none;  // effective mode: "bf16" on a bf16 bank is "none"
  std::int64_t snapshot_rows = 0;  // rows of the snapshot region: options.snapshot_rows, or for 0 the
                                   // worst case N*C*W (one per write entry, no count needed)
  std::size_t saved_bytes = 0;  // of `saved` (kSavedAlignment-aligned start) on the bank's device
  DType bank_grad = DType::f32;  // the backward's bank gradient: bf16 for a bf16 bank without
                                 // grad_bank_fp32, else f32 (docs/spec.md §4)
  PlanSource source;
};

// The plan of a call on `args` (a meta bank is planned as a CPU one). Tensors may be
// data-less (shape-only) views.
WriteReadPlan plan_write_read(const WriteReadArgs& args, const WriteReadOptions& options);
// The same, `readings` validated and recorded too: the plan a saving forward takes.
WriteReadPlan plan_write_read(const WriteReadArgs& args, const TensorRef& readings, const WriteReadOptions& options);

// The saving forward and the backward of ops.hpp with the call's plan, which they check against
// their arguments instead of planning again: `plan` must be plan_write_read's for these tensors'
// dtypes, devices, sizes and strides (the saving forward's with these readings) and these
// options' slots_per_stream, chunk_size, snapshot_quant and grad_bank_fp32; otherwise
// sdm::ValueError naming "plan" and the first argument that differs. The backward's working bank
// stands where the forward's bank stood (same dtype, device and shape), so one plan serves both.
void write_read_forward_saving(const WriteReadPlan& plan, const WriteReadArgs& args, const TensorRef& readings,
                               const TensorRef& saved, const WriteReadOptions& options);
void write_read_backward(const WriteReadPlan& plan, const WriteReadArgs& args, const TensorRef& saved,
                         const TensorRef& grad_readings, const TensorRef& grad_final_bank,
                         const WriteReadGrads& grads, const WriteReadOptions& options);

}  // namespace sdm

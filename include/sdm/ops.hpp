// sdm/ops.hpp - the SDM op: argument bundles and the public entry points.
//
// The chunked op (docs/spec.md §1, §2, §11) over P streams sharing one bank:
//   memory  [S, hd]     bf16 or f32, contiguous; stream p owns rows [p*sps, (p+1)*sps)
//   k_idx   [P, T, W]   int32 / int64, absolute rows, distinct within a token
//   k_val   [P, T, W]   f32 / bf16 / f16 (rounded to the bank dtype on entry)
//   v       [P, T, hd]  float (rounded to the bank dtype)
//   beta    [P, T] or [P, T, 1]   float (used in f32)
//   g       [P, T, 1] or [P, T, W] float (used in f32), log-decay per token or per write
//   q_idx   [P, T, R]   int32 / int64
//   q_val   [P, T, R]   float (rounded to the bank dtype)
//   readings [P, T, hd] bank dtype (output)
// All tensors are contiguous and on the bank's device. Entry points dispatch on the
// device of the bank. Every entry point validates its arguments before any work; on error
// it throws sdm::Error and nothing has been written.
#pragma once

#include <cstddef>

#include "sdm/options.hpp"
#include "sdm/types.hpp"

namespace sdm {

// Inputs of the chunked op and of the decode step. `memory` is the bank.
struct WriteReadArgs {
  TensorRef memory;
  TensorRef k_idx, k_val, v, beta, g, q_idx, q_val;
};

// Gradient outputs of the backward, each shaped like its input, of any float dtype (each
// value rounded once to it). `memory` is the gradient of the initial bank; the PyTorch binding
// gives it the plan's bank_grad dtype (sdm/plan.hpp).
struct WriteReadGrads {
  TensorRef memory, k_val, v, beta, g, q_val;
};

// ---- The production engines (CPU and CUDA) ---------------------------------------------

// No-grad forward: runs the recurrence, writes `readings`, leaves `memory` at the final
// state. Saves nothing.
void write_read_forward(const WriteReadArgs& args, const TensorRef& readings,
                        const WriteReadOptions& options);

// Bytes of the saved-state buffer the saving forward fills (a function of shapes, dtypes
// and options only, options.snapshot_rows included: plan_write_read(args, options).saved_bytes,
// sdm/plan.hpp), and the alignment its start address needs (every fresh allocation of malloc,
// new, cudaMalloc or torch has it). The buffer needs no zeroing: see write_read_forward_saving.
inline constexpr std::size_t kSavedAlignment = 16;
std::size_t write_read_saved_bytes(const WriteReadArgs& args, const WriteReadOptions& options);

// The call's write groups (distinct in-range write rows of each chunk, summed over the chunks):
// the snapshot rows an exact `saved` needs, to pass as options.snapshot_rows to the saving forward
// and the backward (docs/spec.md §4). `count`: a 1-element int64 tensor on the bank's device, which
// receives it; `memory` only gives the device and shape. Without it (snapshot_rows 0) `saved` holds
// the worst case, one row per write entry. CPU: counted on the host. A CUDA bank: counted on
// options.cuda_stream with no host sync (read `count` after the stream's work).
void write_groups_count(const WriteReadArgs& args, const TensorRef& count, const WriteReadOptions& options);

// Saving forward: as write_read_forward (readings bitwise equal) and also fills `saved`
// (u8, write_read_saved_bytes(args, options) bytes, on the bank's device, starting at a
// kSavedAlignment-byte aligned address) with what the backward needs (snapshot of pre-write
// rows in options.snapshot_quant, delta, residual, solve, records). It writes the 256-byte
// stamp and every byte the backward reads, and no other: the rest (padding between regions,
// snapshot rows no write group uses) keeps what the caller put there, and the backward never
// reads it, so the caller allocates the buffer without zeroing it (docs/spec.md §11).
void write_read_forward_saving(const WriteReadArgs& args, const TensorRef& readings,
                               const TensorRef& saved, const WriteReadOptions& options);

// Backward of a saving forward with the same args and options. On entry `args.memory`
// holds the final bank (as the forward left it); it is used as the working bank and is
// restored in place, chunk by chunk, to the initial bank (exactly for snapshot "none",
// approximately for quantised snapshots). `grad_readings` [P, T, hd] (any float dtype);
// `grad_final_bank` [S, hd] optional (absent = zero). Writes every defined tensor of
// `grads`; absent ones are skipped. `saved` and the other inputs are not modified.
void write_read_backward(const WriteReadArgs& args, const TensorRef& saved,
                         const TensorRef& grad_readings, const TensorRef& grad_final_bank,
                         const WriteReadGrads& grads, const WriteReadOptions& options);

// Shape-only checks: every rule of write_read_forward (or decode_step) that does not read
// tensor data (dtypes, shapes, devices, sizes, options, overlap with the bank), with the same
// errors. Tensors may be meta (DeviceType::meta, no data): this is what fake (meta) kernels
// call so that a traced program fails the way an eager one does.
void check_write_read(const WriteReadArgs& args, const TensorRef& readings, const WriteReadOptions& options);
void check_decode_step(const WriteReadArgs& args, const TensorRef& readings, const DecodeOptions& options);

// One token per stream, in place (docs/spec.md §9). Leading dims of k_idx are the streams:
// k_idx, k_val [..., W]; v [..., hd]; beta [..., 1]; g [..., 1 or W]; q_idx, q_val [..., R];
// readings shaped like v, bank dtype. A written row is rounded to the bank dtype once.
void decode_step(const WriteReadArgs& args, const TensorRef& readings, const DecodeOptions& options);

}  // namespace sdm

// backward.cu - the CUDA backward of the chunked op: cuda::write_read_backward (engine.hpp; the
// contract is sdm::write_read_backward's in include/sdm/ops.hpp, the math docs/spec.md §4).
//
// On entry args.memory holds the FINAL bank; it is the working bank, restored in place chunk by
// chunk to the initial bank (exactly for snapshot "none", a bit copy; for bf16 / fp8 / int4 to
// the decoded snapshot rows, snapshot_rows.cuh, so gradients see an approximate past, docs/spec.md §5).
// `saved` comes from the CUDA saving forward with the same args and options (saved/layout.hpp);
// it and every other input are only read. The backward relies on that precondition (ops.hpp): it
// runs no Phase 1 of its own; the Phase 1 arrays it reads (sorted keys, slots, positions, L,
// kappa, k_eff, wcoef, gdecay, rho, q_w, A, QK, X; phase1.hpp) are the saving forward's, in
// `saved`. Their slots and positions drive the bank and G addressing, so a `saved` not made by the
// forward of these args (other indices, or garbage) can address rows outside the streams' rows:
// the index check below checks the args, not `saved`. One call:
//   [device index check + one host sync, if options.validate and the stream is not capturing]
//   the read records (backward/reads.cu), the slot kernel's warp tasks (backward/slot_tasks.cu)
//     and the GWR weights in entry order (backward/tokens.cu), from the saved Phase 1 arrays
//   G = grad_final_bank or 0 (backward/grad_bank.cu)
//   for ti = Nt-1 .. 0: token side (backward/tokens.cu), then slot side (backward/slots.cu: one
//     kernel; a slot written and read in the chunk is finished by one warp, G' kept in registers),
//     for a large call, half of the P streams on a side stream (step_streams.hpp)
//   the C x C dots of all chunks (pair_dots: off the loop's dependency chain, so one launch), then
//   the per-entry gradients of all chunks (backward/entries.cu); grad_memory from G
// Every launch goes to options.cuda_stream (or, for the steps of a large call, to the side stream
// forked from it and joined back) with no host sync after the optional check, so the call can be
// captured in a CUDA graph (then on one stream). Deterministic by construction: one writer per gradient
// element and per G / bank row, every f32 sum in an order fixed by the shape (the kernel headers
// state them), no atomics; results do not depend on the SM count or on pointer alignment.
#include <cstdint>

#include "cuda/common/alignment.hpp"
#include "cuda/backward/backward.hpp"
#include "cuda/engine.hpp"
#include "cuda/common/cuda_check.hpp"
#include "cuda/common/index_check.hpp"
#include "cuda/saved/layout.hpp"
#include "cuda/common/step_streams.hpp"

namespace sdm::cuda {
namespace {

AnyFloat any_float(const TensorRef& t) { return t.defined() ? AnyFloat{t.data, t.dtype} : AnyFloat{}; }

// Memory: the workspace holds the read records (two 8-byte keys per read entry), a 32-byte
// slot-kernel task per write and read entry, per-chunk C x C dMs and dQK, per-entry scalars (7
// floats per write entry: the GWR weight and six gradients; 2 per read entry), dy and dU of every chunk (f32 [N*C, hd] each), two
// step-sized f32 buffers (D_w [P*C, hd] and the [P*C*W, hd] scratch rows that carry G' between the
// passes of write groups of two or more entries), and, unless grad_memory has the row dtype (then G
// lives in it), an owned G of P*sps rows; nothing of Phase 1 (its arrays are in `saved`).
void plan_step_and_entry_buffers(const Geometry& geo, Workspace& ws, BackwardBuffers& bb) {
  const std::int64_t step_rows = geo.P * geo.C * geo.hd, chunk_rows = geo.N * geo.C * geo.hd;
  ws.plan(&bb.dy, chunk_rows);
  ws.plan(&bb.du, chunk_rows);
  ws.plan(&bb.dw, step_rows);
  ws.plan(&bb.stash, step_rows * geo.W);
  const std::int64_t cc = geo.N * geo.C * geo.C, ew = geo.write_entries(), er = geo.read_entries();
  ws.plan(&bb.dms, cc);
  ws.plan(&bb.dqk, cc);
  ws.plan(&bb.rdot, geo.N * geo.C);
  ws.plan(&bb.entry_coef, ew);
  for (float** entry : {&bb.dk_eff, &bb.dc, &bb.dL, &bb.dP, &bb.dlambda, &bb.dgamma}) ws.plan(entry, ew);
  ws.plan(&bb.dq_w, er);
  ws.plan(&bb.dLq, er);
}

}  // namespace

void write_read_backward(const WriteReadArgs& args, const TensorRef& saved, const TensorRef& grad_readings,
                         const TensorRef& grad_final_bank, const WriteReadGrads& grads,
                         const core::WriteReadShape& shape, const WriteReadOptions& options) {
  const DeviceGuard guard(args.memory.device.index);
  const cudaStream_t stream = stream_of(options.cuda_stream);
  const Geometry geo = make_geometry(shape);
  const Inputs in = make_inputs(args);
  const SavedLayout layout = saved_layout(shape, options);
  const bool capturing = is_capturing(stream);
  const bool check = options.validate && !capturing;

  BackwardBuffers bb;
  bb.bank = args.memory.data;
  bb.bf16_bank = shape.bank == DType::bf16;
  const DType row_dtype = core::bank_grad_dtype(shape.bank, options.grad_bank_fp32);
  bb.bf16_grad_rows = row_dtype == DType::bf16;
  // G lives in grad_memory when that has the row dtype (all S rows), else in the workspace
  // (the P*sps stream rows; finish_grad_bank converts them).
  const bool direct = grads.memory.defined() && grads.memory.dtype == row_dtype;
  const std::int64_t grad_rows = direct ? shape.S : geo.P * geo.sps;

  Workspace ws(stream);
  unsigned long long* check_word = nullptr;
  if (check) ws.plan(&check_word, 1);
  plan_read_records(geo, ws, bb);
  plan_slot_tasks(geo, ws, bb);
  plan_step_and_entry_buffers(geo, ws, bb);
  if (direct) {
    bb.grad_rows = grads.memory.data;
  } else {
    ws.plan_bytes(&bb.grad_rows, static_cast<std::size_t>(grad_rows * geo.hd) * dtype_size(row_dtype));
  }
  ws.allocate();

  if (check) {
    const IndexCheck ic{geo.P, geo.T, geo.W, geo.R, geo.sps, shape.S, true};
    check_indices_on_device(in, ic, check_word, stream);
  }

  const auto* base = static_cast<const unsigned char*>(saved.data);
  // The saved Phase 1 arrays; the forward-only fields (keys_unsorted, prev_pos, QX, sort temp)
  // stay null. Phase1Buffers' pointers are mutable for Phase 1's kernels, which do not run here;
  // the backward's kernels only read them.
  Phase1Buffers p1;
  bind_saved_phase1(layout, const_cast<unsigned char*>(base), p1);
  bb.delta = reinterpret_cast<const float*>(base + layout.delta);
  bb.residual = reinterpret_cast<const float*>(base + layout.residual);
  bb.snapshot.payload = const_cast<unsigned char*>(base + layout.snapshot);
  bb.snapshot.scales = layout.has_scales ? reinterpret_cast<float*>(const_cast<unsigned char*>(base + layout.scales))
                                         : nullptr;
  bb.snapshot.mode = layout.mode;
  bb.snapshot.row_bytes = static_cast<std::int64_t>(layout.row_bytes);
  bb.grad_readings = any_float(grad_readings);
  // Vector accesses need aligned rows: bank and G 16 bytes (workspace pieces are 256-byte
  // aligned); the saved regions start at multiples of 256 bytes and, with hd % 8 == 0, every
  // snapshot piece sits at a multiple of its access size (16 / 8 / 4 bytes, saved/layout.hpp), so
  // a 16-byte aligned saved buffer suffices in every mode. The access path never changes a result
  // (common/rows.cuh).
  bb.vec8 = geo.hd % 8 == 0 && aligned16(args.memory.data) && aligned16(saved.data) && aligned16(bb.grad_rows);

  sort_reads(geo, p1, bb, stream);
  find_slot_tasks(geo, in, p1, bb, stream);
  launch_entry_coefs(geo, p1, bb, stream);
  init_grad_bank(geo, bb, grad_rows, any_float(grad_final_bank), stream);
  const AnyFloat grad_v = any_float(grads.v);
  StepStreams steps(geo, stream, !capturing && split_steps(geo, shape.bank));
  for (std::int64_t ti = geo.Nt - 1; ti >= 0; --ti) {
    for (int h = 0; h < steps.count(); ++h) {
      launch_token_side(steps.geometry(h), in, p1, bb, grad_v, ti, steps.stream(h));
      launch_slot_side(steps.geometry(h), in, p1, bb, ti, steps.stream(h));
    }
  }
  steps.join();
  launch_pair_dots(geo, bb, stream);
  const TokenGrads token_grads{any_float(grads.k_val), grad_v, any_float(grads.beta), any_float(grads.g),
                               any_float(grads.q_val)};
  launch_entry_grads(geo, in, p1, bb, token_grads, stream);
  if (!direct && grads.memory.defined()) {
    finish_grad_bank(geo, bb, shape.S, any_float(grad_final_bank), any_float(grads.memory), stream);
  }
}

}  // namespace sdm::cuda

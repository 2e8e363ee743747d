// backward.cu - the CUDA backward of the chunked op: cuda::write_read_backward (engine.hpp; the
// contract is sdm::write_read_backward's in include/sdm/ops.hpp, the math docs/spec.md §4).
// args.memory holds the FINAL bank on entry; the walk only reads it: the bank row at a chunk's
// start is the final row or a later chunk's snapshot row (bank_at_chunk.cuh: a row source per bank
// row). With options.restore_bank one kernel after the walk writes the initial bank into it (the
// saved bits for snapshot "none", else the decoded snapshot rows; restore.cu).
// `saved` (the saving forward's, saved/layout.hpp) and the other inputs are only read; no Phase 1
// runs here: its arrays come from `saved`, whose slots and positions drive the addressing, so the
// engine relies on the stamp check (engine.cu) for a `saved` of other args. One call:
//   [index check + one host sync, if checking (common/call.hpp)]
//   read records (reads.cu), slot-kernel tasks (slot_tasks.cu), the staged walk's cuts of each
//   chunk at about equal work (walk_cuts.cu), GWR weights (tokens.cu)
//   G = grad_final_bank or 0 (grad_bank.cu); every row source -1 (the final bank)
//   for ti = Nt-1 .. 0: token side (tokens.cu), then slot side (slots_staged.cu or slots.cu), half of the P streams
//     on a side stream for a large call (step_streams.hpp)
//   pair_dots of all chunks, then the per-entry gradients (entries.cu); grad_memory from G;
//   restore_bank: the initial bank from the row sources (restore.cu)
// No host sync after the check, so the call can be captured in a CUDA graph (on one stream).
// Deterministic: one writer per gradient element and per G / bank row, every f32 sum in an order
// fixed by the shape, no atomics; nothing depends on the SM count or pointer alignment.
#include <cstdint>

#include "cuda/common/alignment.hpp"
#include "cuda/backward/backward.hpp"
#include "cuda/backward/slot_split.hpp"
#include "cuda/backward/slots_staged.hpp"
#include "cuda/engine.hpp"
#include "cuda/common/call.hpp"
#include "cuda/common/cuda_check.hpp"
#include "cuda/saved/layout.hpp"
#include "cuda/common/step_streams.hpp"

namespace sdm::cuda {
namespace {

AnyFloat any_float(const TensorRef& t) { return t.defined() ? AnyFloat{t.data, t.dtype} : AnyFloat{}; }

// Memory: the workspace holds the read records (two 8-byte keys per read entry), a 32-byte
// slot-kernel task per write and read entry, per-chunk C x C dMs and dQK, per-entry scalars (7
// floats per write entry: the GWR weight, dL, dP, dgamma, and the slot kernel's dk_eff, dc, dlambda
// per 256-column step: 4 + 3 ceil(hd / 256); per read entry dLq and dq_w per step), dy and dU of
// every chunk (f32 [N*C, hd] each), D_w (f32 step rows [P*C, hd]), and, unless grad_memory has the
// row dtype (then G lives in it), an owned G of P*sps rows; nothing of Phase 1 (its arrays are in
// `saved`).
void plan_step_and_entry_buffers(const Geometry& geo, Workspace& ws, BackwardBuffers& bb) {
  const std::int64_t step_rows = geo.P * geo.C * geo.hd, chunk_rows = geo.N * geo.C * geo.hd;
  ws.plan(&bb.dy, chunk_rows);
  ws.plan(&bb.du, chunk_rows);
  ws.plan(&bb.dw, step_rows);
  const std::int64_t cc = geo.N * geo.C * geo.C, ew = geo.write_entries(), er = geo.read_entries();
  ws.plan(&bb.dms, cc);
  ws.plan(&bb.dqk, cc);
  ws.plan(&bb.rdot, geo.N * geo.C);
  ws.plan(&bb.entry_coef, ew);
  for (float** entry : {&bb.dL, &bb.dP, &bb.dgamma}) ws.plan(entry, ew);
  ws.plan(&bb.dLq, er);
  bb.dot_steps = dot_steps_of(geo.hd);
  for (DotPlanes* planes : {&bb.dk_eff, &bb.dc, &bb.dlambda}) {
    planes->stride = ew;
    ws.plan(&planes->base, bb.dot_steps * ew);
  }
  bb.dq_w.stride = er;
  ws.plan(&bb.dq_w.base, bb.dot_steps * er);
  bb.split_warps = slot_split_warps();
}

}  // namespace

void write_read_backward(const WriteReadArgs& args, const TensorRef& saved, const TensorRef& grad_readings,
                         const TensorRef& grad_final_bank, const WriteReadGrads& grads, const WriteReadPlan& plan,
                         const WriteReadOptions& options) {
  const core::WriteReadShape& shape = plan.shape;
  Call call(args.memory, options.cuda_stream, options.validate);
  const cudaStream_t stream = call.stream();
  const Geometry geo = make_geometry(shape);
  const Inputs in = call.inputs(args);
  const SavedLayout layout = saved_layout(plan);

  BackwardBuffers bb;
  bb.bank = args.memory.data;
  bb.bf16_bank = shape.bank == DType::bf16;
  const DType row_dtype = plan.bank_grad;
  bb.bf16_grad_rows = row_dtype == DType::bf16;
  // G lives in grad_memory when that has the row dtype (all S rows), else in the workspace
  // (the P*sps stream rows; finish_grad_bank converts them).
  const bool direct = grads.memory.defined() && grads.memory.dtype == row_dtype;
  const std::int64_t grad_rows = direct ? shape.S : geo.P * geo.sps;

  read_slot_side_knobs();
  Workspace& ws = call.workspace();
  plan_read_records(geo, ws, bb);
  plan_slot_tasks(geo, ws, bb);
  plan_step_and_entry_buffers(geo, ws, bb);
  plan_walk_cuts(geo, ws, bb);
  ws.plan(&bb.row_source, geo.P * geo.sps);
  if (direct) {
    bb.grad_rows = grads.memory.data;
  } else {
    ws.plan_bytes(&bb.grad_rows, static_cast<std::size_t>(grad_rows * geo.hd) * dtype_size(row_dtype));
  }
  ws.allocate();
  call.check_indices(in, IndexCheck{geo.P, geo.T, geo.W, geo.R, geo.sps, shape.S, true});

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
  bb.snapshot.rows = static_cast<std::int64_t>(layout.rows);
  bb.group_first = p1.group_first;
  bb.group_ordinal = p1.group_ordinal;
  bb.grad_readings = any_float(grad_readings);
  // Vector accesses need aligned rows: bank and G 16 bytes (workspace pieces are 256-byte
  // aligned); the saved regions start at multiples of 256 bytes and, with hd % 8 == 0, every
  // snapshot piece sits at a multiple of its access size (16 / 8 / 4 bytes, saved/layout.hpp), so
  // a 16-byte aligned saved buffer suffices in every mode. The access path never changes a result
  // (common/rows.cuh).
  bb.vec8 = geo.hd % 8 == 0 && aligned16(args.memory.data) && aligned16(saved.data) && aligned16(bb.grad_rows);

  sort_reads(geo, p1, bb, stream);
  find_slot_tasks(geo, in, p1, bb, stream);
  if (use_staged_slot_walk(geo, bb) && walk_cut() == WalkCut::balanced) {
    launch_walk_cuts(geo, bb, stream);
  } else {
    bb.walk_cuts = nullptr;  // the staged walk, if it runs, cuts at equal position counts
  }
  launch_entry_coefs(geo, p1, bb, stream);
  init_grad_bank(geo, bb, grad_rows, any_float(grad_final_bank), stream);
  // All-one bytes: every row source kFinalBankRow (-1).
  check_cuda(cudaMemsetAsync(bb.row_source, 0xff, static_cast<std::size_t>(geo.P * geo.sps) * sizeof(std::int64_t),
                             stream),
             "cudaMemsetAsync (row sources)");
  const AnyFloat grad_v = any_float(grads.v);
  StepStreams steps(geo, stream, split_steps(geo, shape.bank, call.capturing()));
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
  if (options.restore_bank) restore_initial_bank(geo, bb, stream);
}

}  // namespace sdm::cuda

// write_read.cu - the CUDA chunked op: entry points of engine.hpp for the forward (no-grad and
// saving) and the saved-buffer size; the backward is in backward.cu.
//
// One call: [device index check + one sync, if options.validate and not capturing; a saving call
// with fewer snapshot rows than the worst case also counts its write groups (group_count.hpp) and
// reads the count back in that sync, refusing a too-small `saved` before any write] ->
// Phase 1 for all chunks (phase1.cu) -> for each time step ti: gather -> dual -> group_writer
// (step_kernels.hpp). In a saving call Phase 1 writes the arrays the backward reads straight into
// `saved`, and the steps add delta, residual and the snapshot rows; the bytes no kernel writes keep
// the caller's, and the backward never reads them (saved/layout.hpp). Every launch goes to the
// call's stream (options.cuda_stream: the PyTorch binding passes torch's current stream), except
// that the steps of a large call run half of the P streams on a side stream forked from it and
// joined back (step_streams.hpp). No host sync follows the optional check, so the whole call can
// be captured in a CUDA graph (then on one stream); while the stream is capturing, the device
// index check is skipped (docs/spec.md §8) and out-of-range entries are masked.
// Scratch comes from one stream-ordered allocation (workspace.hpp); a saving call with an fp8 /
// int4 snapshot adds the gather's row amaxes, 4 bytes per write entry of one step and column tile
// of 32*kVec columns (StepBuffers::row_amax_parts).
#include <cstdint>

#include "core/snapshot_row_rule.hpp"
#include "cuda/common/alignment.hpp"
#include "cuda/engine.hpp"
#include "cuda/common/call.hpp"
#include "cuda/forward/group_count.hpp"
#include "cuda/forward/phase1.hpp"
#include "cuda/saved/layout.hpp"
#include "cuda/saved/snapshot_rows.cuh"
#include "cuda/sort/entry_key_rules.hpp"
#include "cuda/common/step_kernels.hpp"
#include "cuda/common/step_streams.hpp"

namespace sdm::cuda {

Geometry make_geometry(const core::WriteReadShape& s) {
  Geometry g;
  g.P = s.P, g.T = s.T, g.W = s.W, g.R = s.R, g.G = s.G, g.hd = s.hd, g.C = s.C, g.sps = s.slots_per_stream;
  g.Nt = s.num_time_chunks();
  g.N = g.Nt * g.P;
  g.p_count = g.P;
  g.keys = entry_key_layout(g, g.W);
  return g;
}

Inputs make_inputs(const WriteReadArgs& args) {
  Inputs in;
  in.k_idx = args.k_idx.data;
  in.q_idx = args.q_idx.data;
  in.k_index64 = args.k_idx.dtype == DType::i64;
  in.q_index64 = args.q_idx.dtype == DType::i64;
  in.k_val = args.k_val.data, in.k_val_dtype = args.k_val.dtype;
  in.v = args.v.data, in.v_dtype = args.v.dtype;
  in.beta = args.beta.data, in.beta_dtype = args.beta.dtype;
  in.g = args.g.data, in.g_dtype = args.g.dtype;
  in.q_val = args.q_val.data, in.q_val_dtype = args.q_val.dtype;
  return in;
}

namespace {

// `saved` == nullptr: the no-grad forward; else the saving forward into *saved.
void forward(const WriteReadArgs& args, const TensorRef& readings, const TensorRef* saved, const WriteReadPlan& plan,
             const WriteReadOptions& options) {
  const core::WriteReadShape& shape = plan.shape;
  Call call(args.memory, options.cuda_stream, options.validate);
  const cudaStream_t stream = call.stream();
  const Geometry geo = make_geometry(shape);
  const Inputs in = call.inputs(args);
  Workspace& ws = call.workspace();
  // Phase 1's arrays the backward reads go to `saved` in a saving call, else to the workspace.
  Phase1Buffers p1;
  SavedLayout layout;
  unsigned char* saved_base = nullptr;
  if (saved != nullptr) {
    layout = saved_layout(plan);
    saved_base = static_cast<unsigned char*>(saved->data);
    bind_saved_phase1(layout, saved_base, p1);
  } else {
    plan_phase1_kept(geo, ws, p1);
  }
  plan_phase1_forward_only(geo, ws, p1);
  StepBuffers sb;
  // Vector access to the bank rows, and in a saving call to the snapshot and delta rows, needs a
  // 16-byte aligned bank and saved buffer (saved/layout.hpp).
  sb.vec8 = geo.hd % 8 == 0 && aligned16(args.memory.data) && (saved == nullptr || aligned16(saved->data));
  const std::int64_t step_elems = geo.P * geo.C * geo.hd;
  ws.plan(&sb.retrieved, step_elems);
  ws.plan(&sb.inter, step_elems);
  if (saved == nullptr) ws.plan(&sb.delta, step_elems);
  // fp8 / int4 snapshot: the gather's row amaxes for the writer's scales, one step's worth.
  if (saved != nullptr && layout.has_scales) {
    ws.plan(&sb.row_amax_parts, geo.P * geo.C * geo.W * row_tiles(geo.hd, sb.vec8));
  }
  // A validated saving call with fewer rows than the worst case counts its write groups first and
  // refuses a too-small `saved` in the index check's sync, before any write (group_count.hpp).
  const bool count_first = saved != nullptr && call.checking() && plan.snapshot_rows < geo.write_entries();
  GroupCount count;
  if (count_first) plan_group_count(geo, ws, count);
  ws.allocate();
  if (count_first) run_group_count(geo, in, count, stream);
  std::int64_t write_groups = 0;
  call.check_indices(in, IndexCheck{geo.P, geo.T, geo.W, geo.R, geo.sps, shape.S, true},
                     count_first ? count.group_first + geo.N : nullptr, &write_groups);
  if (count_first) core::check_write_groups_fit(write_groups, plan.snapshot_rows);

  sb.bank = args.memory.data;
  sb.readings = readings.data;
  sb.bf16_bank = shape.bank == DType::bf16;
  if (saved != nullptr) {
    sb.delta = reinterpret_cast<float*>(saved_base + layout.delta);
    sb.residual = reinterpret_cast<float*>(saved_base + layout.residual);
    sb.snapshot = saved_base + layout.snapshot;
    sb.snapshot_scales = layout.has_scales ? reinterpret_cast<float*>(saved_base + layout.scales) : nullptr;
    sb.snapshot_mode = layout.mode;
    sb.snapshot_rows = static_cast<std::int64_t>(layout.rows);
    sb.delta_per_chunk = true;
  }

  run_phase1(geo, in, sb.bf16_bank, p1, stream);
  StepStreams steps(geo, stream, split_steps(geo, shape.bank, call.capturing()));
  for (std::int64_t ti = 0; ti < geo.Nt; ++ti) {
    for (int h = 0; h < steps.count(); ++h) {
      launch_gather(steps.geometry(h), p1, sb, ti, steps.stream(h));
      launch_dual(steps.geometry(h), in, p1, sb, ti, steps.stream(h));
      launch_group_writer(steps.geometry(h), p1, sb, ti, steps.stream(h));
    }
  }
  steps.join();
}

}  // namespace

void write_read_forward(const WriteReadArgs& args, const TensorRef& readings, const WriteReadPlan& plan,
                        const WriteReadOptions& options) {
  forward(args, readings, nullptr, plan, options);
}

void write_read_forward_saving(const WriteReadArgs& args, const TensorRef& readings, const TensorRef& saved,
                               const WriteReadPlan& plan, const WriteReadOptions& options) {
  forward(args, readings, &saved, plan, options);
}

}  // namespace sdm::cuda

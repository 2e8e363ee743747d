// backward.cpp - the backward of the chunked op (docs/spec.md §4, §11).
//
// Inputs: the forward's args with args.memory holding the FINAL bank (only read during the walk:
// a row's value at a chunk is the final row or the snapshot row its row source names,
// backward_chunk.hpp; with options.restore_bank each stream then writes the initial bank into
// its rows, exactly for snapshot "none"); `saved` from write_read_forward_saving with the same args and options;
// grad_readings [P, T, hd] (any float dtype, used as f32); grad_final_bank [S, hd] or
// absent (zero). Outputs: every defined tensor of `grads` (grad_memory [S, hd]: bank dtype
// or f32; the others shaped like their inputs). `saved` and every other input are only read.
//
// Streams run in parallel, each on one worker through its time steps ti = Nt-1 .. 0 (streams
// own disjoint bank and gradient rows, and disjoint token gradients); per chunk:
// rebuild its Phase-1 plan (bit-identical to the forward's, chunk_plan.hpp), then
// backward_chunk (backward_chunk.hpp). The gradient bank G (grad_bank.hpp) starts at
// grad_final_bank and ends as the gradient of the initial bank. Single writer per gradient
// row, fixed orders, no atomics: bitwise identical for any thread count and run to run.
#include <vector>

#include "backward_chunk.hpp"
#include "chunk_plan.hpp"
#include "engine.hpp"
#include "grad_bank.hpp"
#include "saved_layout.hpp"
#include "worker_split.hpp"

namespace sdm::cpu {

void write_read_backward(const WriteReadArgs& args, const TensorRef& saved, const TensorRef& grad_readings,
                         const TensorRef& grad_final_bank, const WriteReadGrads& grads, const WriteReadPlan& plan,
                         const WriteReadOptions& options) {
  const core::WriteReadShape& shape = plan.shape;
  const int threads = resolve_num_threads(options.num_threads);
  const SavedLayout layout = saved_layout(plan);
  const SnapshotRowStarts starts = snapshot_row_starts(args, shape, threads);
  check_snapshot_rows(starts, plan.snapshot_rows);  // before any write
  const GradBank grad_bank(shape, plan.bank_grad, grad_final_bank, grads.memory, threads);
  std::vector<std::int64_t> row_source(static_cast<std::size_t>(shape.P * shape.slots_per_stream), kFinalBankRow);
  const BackwardJob job{args,
                        grad_readings,
                        grads,
                        shape,
                        layout,
                        starts,
                        saved.data_as<const unsigned char>(),
                        RowMatrix{args.memory.data, shape.bank, shape.hd},
                        grad_bank.rows(),
                        row_source.data()};

  const std::int64_t workers = worker_count(shape.P, threads);
  std::vector<BackwardScratch> scratch(static_cast<std::size_t>(workers));
  // One parallel pass: each stream runs its chunks in reverse time order on one worker (no
  // barrier per time step; a chunk's work does not depend on the other streams').
  for_each_item(shape.P, workers, threads, [&](std::int64_t p, std::int64_t worker) {
    BackwardScratch& ws = scratch[static_cast<std::size_t>(worker)];
    for (std::int64_t ti = shape.num_time_chunks() - 1; ti >= 0; --ti) {
      build_chunk_plan(args, shape, p, ti, ws.plan);
      backward_chunk(job, ti, ws);
    }
    if (options.restore_bank) restore_initial_rows(job, p);
  });
  grad_bank.finish(grad_final_bank, grads.memory, threads);
}

}  // namespace sdm::cpu

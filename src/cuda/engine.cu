// engine.cu - cuda::engine (engine.hpp): the CUDA passes, the saving forward's stamp written
// before it and, with options.validate, the backward's stamp checked before it.
#include "cuda/engine.hpp"

#include <string>

#include "sdm/error.hpp"

namespace sdm::cuda {
namespace {

// The CUDA group writer and slot walks still place a group's snapshot row by its first sorted
// entry (n*C*W + q, saved/layout.hpp), which needs the worst case's rows.
void require_worst_case_rows(const WriteReadPlan& plan) {
  const core::WriteReadShape& s = plan.shape;
  const std::int64_t worst = s.num_time_chunks() * s.P * s.C * s.W;
  if (plan.snapshot_rows != worst) {
    throw ValueError("snapshot_rows", "snapshot_rows must be 0 (the worst case, " + std::to_string(worst) +
                                          " rows) on a CUDA bank in this build, got " +
                                          std::to_string(plan.snapshot_rows));
  }
}

void stamped_forward_saving(const WriteReadArgs& args, const TensorRef& readings, const TensorRef& saved,
                            const WriteReadPlan& plan, const WriteReadOptions& options) {
  require_worst_case_rows(plan);
  stamp_saved(core::make_saved_header(plan, core::SavedEngine::cuda), args, saved, options);
  write_read_forward_saving(args, readings, core::saved_body(saved), plan, options);
}

void checked_backward(const WriteReadArgs& args, const TensorRef& saved, const TensorRef& grad_readings,
                      const TensorRef& grad_final_bank, const WriteReadGrads& grads, const WriteReadPlan& plan,
                      const WriteReadOptions& options) {
  require_worst_case_rows(plan);
  if (options.validate) check_saved_stamp(core::make_saved_header(plan, core::SavedEngine::cuda), args, saved, options);
  write_read_backward(args, core::saved_body(saved), grad_readings, grad_final_bank, grads, plan, options);
}

void uncounted_write_groups(const WriteReadArgs&, const TensorRef&, const WriteReadPlan&, const WriteReadOptions&) {
  throw ValueError("memory", "write_groups_count: memory is a CUDA bank, whose write groups this build does not count "
                             "(its saving forward takes snapshot_rows 0, the worst case)");
}

}  // namespace

// The saving forward leaves the gaps between regions and the snapshot rows of positions that start
// no write group unwritten (saved/layout.hpp); the backward reads none of them.
const core::Engine engine{write_read_saved_bytes, write_read_forward, stamped_forward_saving, checked_backward,
                          decode_step, uncounted_write_groups};

}  // namespace sdm::cuda

// engine.cu - cuda::engine (engine.hpp): the CUDA passes, the saving forward's stamp written
// after it (a refused call leaves `saved` as it was) and, with options.validate, the backward's
// stamp and the forward's write groups (against plan.snapshot_rows) checked before it.
#include "cuda/engine.hpp"

#include <cstddef>
#include <cstdint>

#include "cuda/saved/layout.hpp"

namespace sdm::cuda {
namespace {

void stamped_forward_saving(const WriteReadArgs& args, const TensorRef& readings, const TensorRef& saved,
                            const WriteReadPlan& plan, const WriteReadOptions& options) {
  write_read_forward_saving(args, readings, core::saved_body(saved), plan, options);
  stamp_saved(core::make_saved_header(plan, core::SavedEngine::cuda), args, saved, options);
}

void checked_backward(const WriteReadArgs& args, const TensorRef& saved, const TensorRef& grad_readings,
                      const TensorRef& grad_final_bank, const WriteReadGrads& grads, const WriteReadPlan& plan,
                      const WriteReadOptions& options) {
  if (options.validate) {
    // group_first[N] of the body's Phase 1 region: the write groups the saving forward numbered.
    const std::size_t chunks = static_cast<std::size_t>(plan.shape.num_time_chunks() * plan.shape.P);
    const std::size_t write_groups_at =
        core::kSavedHeaderBytes + saved_layout(plan).phase1.group_first + chunks * sizeof(std::int64_t);
    check_saved_stamp(core::make_saved_header(plan, core::SavedEngine::cuda), args, saved, write_groups_at,
                      plan.snapshot_rows, options);
  }
  write_read_backward(args, core::saved_body(saved), grad_readings, grad_final_bank, grads, plan, options);
}

}  // namespace

// The saving forward leaves the gaps between regions and the snapshot rows past the call's write
// groups unwritten (saved/layout.hpp); the backward reads none of them.
const core::Engine engine{write_read_saved_bytes, write_read_forward, stamped_forward_saving, checked_backward,
                          decode_step, write_groups_count};

}  // namespace sdm::cuda

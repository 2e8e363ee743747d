// engine.cu - cuda::engine (engine.hpp): the CUDA passes, the saving forward's stamp written
// after it (a refused call leaves `saved` as it was) and, with options.validate, the backward's
// stamp checked before it.
#include "cuda/engine.hpp"

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
  if (options.validate) check_saved_stamp(core::make_saved_header(plan, core::SavedEngine::cuda), args, saved, options);
  write_read_backward(args, core::saved_body(saved), grad_readings, grad_final_bank, grads, plan, options);
}

}  // namespace

// The saving forward leaves the gaps between regions and the snapshot rows past the call's write
// groups unwritten (saved/layout.hpp); the backward reads none of them.
const core::Engine engine{write_read_saved_bytes, write_read_forward, stamped_forward_saving, checked_backward,
                          decode_step, write_groups_count};

}  // namespace sdm::cuda

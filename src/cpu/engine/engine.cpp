// engine.cpp - cpu::engine (engine.hpp): the CPU passes with the host index check and the stamp
// of `saved` around them, in the order that writes nothing before every check has passed.
#include "engine.hpp"

#include <cstdint>
#include <exception>
#include <vector>

#include "core/saved_header.hpp"
#include "core/validate.hpp"
#include "snapshot_rows.hpp"
#include "thread_pool.hpp"

namespace sdm::cpu {
namespace {

// core::check_write_read_indices with the streams split over the engine's threads: every stream
// is checked, and the error of the lowest failing stream is thrown, the one the sequential check
// reports (it stops at the first failing stream, in stream order).
void check_indices(const WriteReadArgs& args, const WriteReadPlan& plan, const WriteReadOptions& options) {
  if (!options.validate) return;
  const core::WriteReadShape& shape = plan.shape;
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(shape.P));
  parallel_for(shape.P, resolve_num_threads(options.num_threads), [&](std::int64_t p) {
    try {
      core::check_write_read_indices_of_stream(args, shape, p);
    } catch (...) {
      errors[static_cast<std::size_t>(p)] = std::current_exception();
    }
  });
  for (const std::exception_ptr& error : errors) {
    if (error) std::rethrow_exception(error);
  }
}

void checked_forward(const WriteReadArgs& args, const TensorRef& readings, const WriteReadPlan& plan,
                     const WriteReadOptions& options) {
  check_indices(args, plan, options);
  write_read_forward(args, readings, plan, options);
}

void checked_forward_saving(const WriteReadArgs& args, const TensorRef& readings, const TensorRef& saved,
                            const WriteReadPlan& plan, const WriteReadOptions& options) {
  check_indices(args, plan, options);
  // The forward checks the call's write groups against the planned snapshot rows before any write;
  // the stamp follows, so a refused buffer keeps every byte.
  write_read_forward_saving(args, readings, core::saved_body(saved), plan, options);
  core::stamp_saved_on_host(core::make_saved_header(plan, core::SavedEngine::cpu), args, saved);
}

// With validate, `saved` must carry the stamp of this call.
void checked_backward(const WriteReadArgs& args, const TensorRef& saved, const TensorRef& grad_readings,
                      const TensorRef& grad_final_bank, const WriteReadGrads& grads, const WriteReadPlan& plan,
                      const WriteReadOptions& options) {
  if (options.validate) {
    check_indices(args, plan, options);
    core::check_saved_on_host(core::make_saved_header(plan, core::SavedEngine::cpu), args, saved);
  }
  write_read_backward(args, core::saved_body(saved), grad_readings, grad_final_bank, grads, plan, options);
}

void count_write_groups(const WriteReadArgs& args, const TensorRef& count, const WriteReadPlan& plan,
                        const WriteReadOptions& options) {
  *count.data_as<std::int64_t>() = snapshot_row_starts(args, plan.shape, resolve_num_threads(options.num_threads)).total;
}

void checked_decode_step(const WriteReadArgs& args, const TensorRef& readings, const core::DecodeShape& shape,
                         const DecodeOptions& options) {
  if (options.validate) core::check_decode_indices(args, shape, options);
  decode_step(args, readings, shape, options);
}

}  // namespace

// The saving forward leaves the layout's padding and the snapshot rows past the call's groups
// unwritten (saved_layout.hpp); the backward reads none of them.
const core::Engine engine{write_read_saved_bytes, checked_forward, checked_forward_saving, checked_backward,
                          checked_decode_step, count_write_groups};

}  // namespace sdm::cpu

// dispatch.cpp - the public entry points of include/sdm/ops.hpp: validate every argument
// before any work, then route to the engine of the bank's device.
//
// CPU banks: shapes, dtypes and devices are checked here, index values too when
// options.validate is set, then the CPU engine runs. CUDA banks: the same host checks, then
// the CUDA engine, which checks index values on the device (docs/spec.md §8).
#include <cstdint>
#include <exception>
#include <string>
#include <vector>

#include "core/saved_header.hpp"
#include "core/snapshot_quant.hpp"
#include "core/validate.hpp"
#include "cpu/engine/engine.hpp"
#include "cpu/engine/thread_pool.hpp"
#include "sdm/error.hpp"
#include "sdm/ops.hpp"
#include "sdm/plan.hpp"
#if defined(SDM_WITH_CUDA)
#include "cuda/engine.hpp"
#endif

namespace sdm {
namespace {

bool on_cpu(const TensorRef& memory) { return memory.device.type == DeviceType::cpu; }

// Engines run on data; a meta bank (shapes only) reaches only the shape-only entry points, and
// so does a data-less view (core::check_engine_data): the inputs and `required`, and the defined
// tensors of `optional`, must have data.
void check_runnable(const WriteReadArgs& args, core::NamedTensors required, const core::NamedTensors& optional = {}) {
  if (args.memory.device.type == DeviceType::meta) {
    throw ValueError("memory", "memory is a meta tensor (shapes only, no data): the op needs a cpu or cuda bank");
  }
  for (const core::NamedTensor& t : core::named_args(args)) required.push_back(t);
  core::check_engine_data(required, optional);
}

#if !defined(SDM_WITH_CUDA)
[[noreturn]] void no_cuda(const TensorRef& memory) {
  throw ValueError("memory", "memory is on " + device_name(memory.device) +
                                 " but this build of sdm has no CUDA support (SDM_ENABLE_CUDA=OFF)");
}
#endif

void check_saved(const TensorRef& saved, std::size_t expected, const TensorRef& memory) {
  if (saved.dtype != DType::u8) {
    throw TypeError("saved", std::string("saved must be uint8, got ") + dtype_name(saved.dtype));
  }
  if (saved.ndim != 1 || !saved.is_contiguous() || saved.numel() != static_cast<std::int64_t>(expected)) {
    throw ValueError("saved", "saved must be a contiguous 1-D uint8 buffer of " + std::to_string(expected) +
                                  " bytes (write_read_saved_bytes), got shape " + saved.shape_string());
  }
  if (!(saved.device == memory.device)) {
    throw ValueError("saved", "saved must be on " + device_name(memory.device) + ", got " +
                                  device_name(saved.device));
  }
  // The engines store typed arrays (f32, i32, u64) in it at 16-byte aligned offsets.
  const std::uintptr_t misalignment = reinterpret_cast<std::uintptr_t>(saved.data) % kSavedAlignment;
  if (misalignment != 0) {
    throw ValueError("saved", "saved must start at a " + std::to_string(kSavedAlignment) +
                                  "-byte aligned address (a fresh allocation does; a view at an offset "
                                  "may not), got an address " + std::to_string(misalignment) +
                                  " bytes past a multiple of " + std::to_string(kSavedAlignment));
  }
}

// The plan of a call (plan.hpp): validation, then the saved layout of the bank's device (a meta
// bank is planned as a CPU one) and the dtype rules.
WriteReadPlan plan_for(const WriteReadArgs& args, const TensorRef& readings, const WriteReadOptions& options) {
  WriteReadPlan plan;
  plan.shape = core::validate_write_read(args, readings, options, core::BankDTypes::engine);
  plan.snapshot = core::effective_snapshot_mode(options.snapshot_quant, plan.shape.bank);
  plan.bank_grad = core::bank_grad_dtype(plan.shape.bank, options.grad_bank_fp32);
  if (args.memory.device.type != DeviceType::cuda) {
    plan.saved_bytes = core::kSavedHeaderBytes + cpu::write_read_saved_bytes(plan.shape, options);
    plan.saved_needs_zeroing = true;  // the CPU layout's padding bytes are never written
    return plan;
  }
#if defined(SDM_WITH_CUDA)
  plan.saved_bytes = core::kSavedHeaderBytes + cuda::write_read_saved_bytes(plan.shape, options);
  plan.saved_needs_zeroing = false;  // the CUDA saving forward writes every byte (saved/layout.hpp)
  return plan;
#else
  no_cuda(args.memory);
#endif
}

// core::check_write_read_indices with the streams split over the engine's threads: every
// stream is checked, and the error of the lowest failing stream is thrown, the one the
// sequential check reports (it stops at the first failing stream, in stream order).
void check_indices_on_threads(const WriteReadArgs& args, const WriteReadShape& shape, const WriteReadOptions& options) {
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(shape.P));
  cpu::parallel_for(shape.P, cpu::resolve_num_threads(options.num_threads), [&](std::int64_t p) {
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

}  // namespace

void write_read_forward(const WriteReadArgs& args, const TensorRef& readings,
                        const WriteReadOptions& options) {
  const auto shape = core::validate_write_read(args, readings, options, core::BankDTypes::engine);
  check_runnable(args, {{readings, "readings"}});
  if (on_cpu(args.memory)) {
    if (options.validate) check_indices_on_threads(args, shape, options);
    return cpu::write_read_forward(args, readings, shape, options);
  }
#if defined(SDM_WITH_CUDA)
  return cuda::write_read_forward(args, readings, shape, options);
#else
  no_cuda(args.memory);
#endif
}

WriteReadPlan plan_write_read(const WriteReadArgs& args, const WriteReadOptions& options) {
  return plan_for(args, TensorRef{}, options);
}

std::size_t write_read_saved_bytes(const WriteReadArgs& args, const WriteReadOptions& options) {
  return plan_for(args, TensorRef{}, options).saved_bytes;
}

void write_read_forward_saving(const WriteReadArgs& args, const TensorRef& readings,
                               const TensorRef& saved, const WriteReadOptions& options) {
  const WriteReadPlan plan = plan_for(args, readings, options);
  const WriteReadShape& shape = plan.shape;
  check_runnable(args, {{readings, "readings"}, {saved, "saved"}});
  check_saved(saved, plan.saved_bytes, args.memory);
  core::NamedTensors others = core::named_args(args);
  others.push_back({readings, "readings"});
  core::check_disjoint({{saved, "saved"}}, others);
  // The stamp first (saved_header.hpp), then the engine's regions after it.
  if (on_cpu(args.memory)) {
    if (options.validate) check_indices_on_threads(args, shape, options);
    core::stamp_saved_on_host(core::make_saved_header(plan, core::SavedEngine::cpu), args, saved);
    return cpu::write_read_forward_saving(args, readings, core::saved_body(saved), shape, options);
  }
#if defined(SDM_WITH_CUDA)
  cuda::stamp_saved(core::make_saved_header(plan, core::SavedEngine::cuda), args, saved, options);
  return cuda::write_read_forward_saving(args, readings, core::saved_body(saved), shape, options);
#else
  no_cuda(args.memory);
#endif
}

void write_read_backward(const WriteReadArgs& args, const TensorRef& saved,
                         const TensorRef& grad_readings, const TensorRef& grad_final_bank,
                         const WriteReadGrads& grads, const WriteReadOptions& options) {
  const WriteReadPlan plan = plan_for(args, TensorRef{}, options);
  const WriteReadShape& shape = plan.shape;
  core::validate_write_read_backward(args, shape, grad_readings, grad_final_bank, grads);
  check_runnable(args, {{grad_readings, "grad_readings"}, {saved, "saved"}},
                 {{grad_final_bank, "grad_final_bank"}, {grads.memory, "grad_memory"}, {grads.k_val, "grad_k_val"},
                  {grads.v, "grad_v"}, {grads.beta, "grad_beta"}, {grads.g, "grad_g"}, {grads.q_val, "grad_q_val"}});
  check_saved(saved, plan.saved_bytes, args.memory);
  core::NamedTensors written = {{args.memory, "memory"}};
  for (const core::NamedTensor& grad : core::named_grads(grads)) written.push_back(grad);
  core::check_disjoint(written, {{saved, "saved"}});
  // With validate, `saved` must carry the stamp of this call (saved_header.hpp).
  if (on_cpu(args.memory)) {
    if (options.validate) {
      check_indices_on_threads(args, shape, options);
      core::check_saved_on_host(core::make_saved_header(plan, core::SavedEngine::cpu), args, saved);
    }
    return cpu::write_read_backward(args, core::saved_body(saved), grad_readings, grad_final_bank, grads, shape,
                                    options);
  }
#if defined(SDM_WITH_CUDA)
  if (options.validate) cuda::check_saved_stamp(core::make_saved_header(plan, core::SavedEngine::cuda), args, saved, options);
  return cuda::write_read_backward(args, core::saved_body(saved), grad_readings, grad_final_bank, grads, shape,
                                   options);
#else
  no_cuda(args.memory);
#endif
}

void decode_step(const WriteReadArgs& args, const TensorRef& readings, const DecodeOptions& options) {
  const auto shape = core::validate_decode(args, readings, options, core::BankDTypes::engine);
  check_runnable(args, {{readings, "readings"}});
  if (on_cpu(args.memory)) {
    if (options.validate) core::check_decode_indices(args, shape, options);
    return cpu::decode_step(args, readings, shape, options);
  }
#if defined(SDM_WITH_CUDA)
  return cuda::decode_step(args, readings, shape, options);
#else
  no_cuda(args.memory);
#endif
}

void check_write_read(const WriteReadArgs& args, const TensorRef& readings, const WriteReadOptions& options) {
  core::validate_write_read(args, readings, options, core::BankDTypes::engine);
}

void check_decode_step(const WriteReadArgs& args, const TensorRef& readings, const DecodeOptions& options) {
  core::validate_decode(args, readings, options, core::BankDTypes::engine);
}

}  // namespace sdm

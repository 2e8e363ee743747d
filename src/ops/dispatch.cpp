// dispatch.cpp - the public entry points of include/sdm/ops.hpp and sdm/plan.hpp: validate every
// argument and plan the call once (or check the plan the caller made), then run it on the engine
// of the bank's device (core/engine.hpp: cpu::engine, cuda::engine), which checks index values
// (options.validate; CPU on the host, CUDA on the device, docs/spec.md §8) and stamps `saved`.
#include <cstdint>
#include <string>

#include "core/engine.hpp"
#include "core/saved_header.hpp"
#include "core/snapshot_quant.hpp"
#include "core/validate.hpp"
#include "cpu/engine/engine.hpp"
#include "plan_source.hpp"
#include "sdm/error.hpp"
#include "sdm/ops.hpp"
#include "sdm/plan.hpp"
#if defined(SDM_WITH_CUDA)
#include "cuda/engine.hpp"
#endif

namespace sdm {
namespace {

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

// The engine of the bank's device; a meta bank (shape-only planning) is planned as a CPU one.
const core::Engine& engine_of(const TensorRef& memory) {
  if (memory.device.type != DeviceType::cuda) return cpu::engine;
#if defined(SDM_WITH_CUDA)
  return cuda::engine;
#else
  throw ValueError("memory", "memory is on " + device_name(memory.device) +
                                 " but this build of sdm has no CUDA support (SDM_ENABLE_CUDA=OFF)");
#endif
}

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

// The snapshot rows of `saved` (plan.hpp): options.snapshot_rows, 0 for the worst case of one row per
// write entry (N*C*W, which no call exceeds: a chunk has at most C*W write groups).
std::int64_t planned_snapshot_rows(const core::WriteReadShape& shape, const WriteReadOptions& options) {
  const std::int64_t worst = shape.num_time_chunks() * shape.P * shape.C * shape.W;
  if (options.snapshot_rows < 0 || options.snapshot_rows > worst) {
    throw ValueError("snapshot_rows", "snapshot_rows must lie in 0..N*C*W = " + std::to_string(worst) +
                                          " (0: the worst case; else the call's write-group count, "
                                          "write_groups_count), got " + std::to_string(options.snapshot_rows));
  }
  return options.snapshot_rows == 0 ? worst : options.snapshot_rows;
}

// The plan of a call (plan.hpp): validation, then the saved layout of the bank's engine and the
// dtype rules.
WriteReadPlan plan_for(const WriteReadArgs& args, const TensorRef& readings, const WriteReadOptions& options) {
  WriteReadPlan plan;
  plan.shape = core::validate_write_read(args, readings, options, core::BankDTypes::engine);
  plan.snapshot = core::effective_snapshot_mode(options.snapshot_quant, plan.shape.bank);
  plan.bank_grad = core::bank_grad_dtype(plan.shape.bank, options.grad_bank_fp32);
  plan.snapshot_rows = planned_snapshot_rows(plan.shape, options);
  const core::Engine& engine = engine_of(args.memory);
  plan.saved_bytes = core::kSavedHeaderBytes + engine.saved_body_bytes(plan);
  plan.source = plan_source(args, readings, options);
  return plan;
}

void forward_saving(const WriteReadPlan& plan, const WriteReadArgs& args, const TensorRef& readings,
                    const TensorRef& saved, const WriteReadOptions& options) {
  check_runnable(args, {{readings, "readings"}, {saved, "saved"}});
  check_saved(saved, plan.saved_bytes, args.memory);
  core::NamedTensors others = core::named_args(args);
  others.push_back({readings, "readings"});
  core::check_disjoint({{saved, "saved"}}, others);
  engine_of(args.memory).write_read_forward_saving(args, readings, saved, plan, options);
}

void backward(const WriteReadPlan& plan, const WriteReadArgs& args, const TensorRef& saved,
              const TensorRef& grad_readings, const TensorRef& grad_final_bank, const WriteReadGrads& grads,
              const WriteReadOptions& options) {
  core::validate_write_read_backward(args, plan.shape, grad_readings, grad_final_bank, grads);
  check_runnable(args, {{grad_readings, "grad_readings"}, {saved, "saved"}},
                 {{grad_final_bank, "grad_final_bank"}, {grads.memory, "grad_memory"}, {grads.k_val, "grad_k_val"},
                  {grads.v, "grad_v"}, {grads.beta, "grad_beta"}, {grads.g, "grad_g"}, {grads.q_val, "grad_q_val"}});
  check_saved(saved, plan.saved_bytes, args.memory);
  core::NamedTensors written = {{args.memory, "memory"}};
  for (const core::NamedTensor& grad : core::named_grads(grads)) written.push_back(grad);
  core::check_disjoint(written, {{saved, "saved"}});
  engine_of(args.memory).write_read_backward(args, saved, grad_readings, grad_final_bank, grads, plan, options);
}

}  // namespace

void write_read_forward(const WriteReadArgs& args, const TensorRef& readings,
                        const WriteReadOptions& options) {
  const WriteReadPlan plan = plan_for(args, readings, options);
  check_runnable(args, {{readings, "readings"}});
  engine_of(args.memory).write_read_forward(args, readings, plan, options);
}

WriteReadPlan plan_write_read(const WriteReadArgs& args, const WriteReadOptions& options) {
  return plan_for(args, TensorRef{}, options);
}

WriteReadPlan plan_write_read(const WriteReadArgs& args, const TensorRef& readings, const WriteReadOptions& options) {
  return plan_for(args, readings, options);
}

std::size_t write_read_saved_bytes(const WriteReadArgs& args, const WriteReadOptions& options) {
  return plan_for(args, TensorRef{}, options).saved_bytes;
}

void write_read_forward_saving(const WriteReadArgs& args, const TensorRef& readings,
                               const TensorRef& saved, const WriteReadOptions& options) {
  forward_saving(plan_for(args, readings, options), args, readings, saved, options);
}

void write_read_forward_saving(const WriteReadPlan& plan, const WriteReadArgs& args, const TensorRef& readings,
                               const TensorRef& saved, const WriteReadOptions& options) {
  check_plan_source(plan, args, &readings, options);
  forward_saving(plan, args, readings, saved, options);
}

void write_read_backward(const WriteReadArgs& args, const TensorRef& saved,
                         const TensorRef& grad_readings, const TensorRef& grad_final_bank,
                         const WriteReadGrads& grads, const WriteReadOptions& options) {
  backward(plan_for(args, TensorRef{}, options), args, saved, grad_readings, grad_final_bank, grads, options);
}

void write_read_backward(const WriteReadPlan& plan, const WriteReadArgs& args, const TensorRef& saved,
                         const TensorRef& grad_readings, const TensorRef& grad_final_bank,
                         const WriteReadGrads& grads, const WriteReadOptions& options) {
  check_plan_source(plan, args, nullptr, options);
  backward(plan, args, saved, grad_readings, grad_final_bank, grads, options);
}

void write_groups_count(const WriteReadArgs& args, const TensorRef& count, const WriteReadOptions& options) {
  const WriteReadPlan plan = plan_for(args, TensorRef{}, options);
  check_runnable(args, {{count, "count"}});
  if (count.dtype != DType::i64) {
    throw TypeError("count", std::string("count must be int64, got ") + dtype_name(count.dtype));
  }
  if (count.numel() != 1 || !(count.device == args.memory.device)) {
    throw ValueError("count", "count must be one int64 element on " + device_name(args.memory.device) + ", got shape " +
                                  count.shape_string() + " on " + device_name(count.device));
  }
  core::check_disjoint({{count, "count"}}, core::named_args(args));
  engine_of(args.memory).write_groups_count(args, count, plan, options);
}

void decode_step(const WriteReadArgs& args, const TensorRef& readings, const DecodeOptions& options) {
  const auto shape = core::validate_decode(args, readings, options, core::BankDTypes::engine);
  check_runnable(args, {{readings, "readings"}});
  engine_of(args.memory).decode_step(args, readings, shape, options);
}

void check_write_read(const WriteReadArgs& args, const TensorRef& readings, const WriteReadOptions& options) {
  core::validate_write_read(args, readings, options, core::BankDTypes::engine);
}

void check_decode_step(const WriteReadArgs& args, const TensorRef& readings, const DecodeOptions& options) {
  core::validate_decode(args, readings, options, core::BankDTypes::engine);
}

}  // namespace sdm

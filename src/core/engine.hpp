// engine.hpp - the contract of an engine (src/cpu/engine: cpu::engine; src/cuda: cuda::engine),
// declared once: the function types below, and Engine, the table dispatch.cpp runs a call through.
// src/ops/dispatch.cpp validates and plans a call (sdm/plan.hpp), then calls the engine of the
// bank's device; the engine reads the plan (shape, effective snapshot mode, bank gradient dtype)
// and derives none of it again. Contracts are those of the public entry points of the same names
// (include/sdm/ops.hpp), on validated arguments: the engine checks index values itself
// (options.validate: CPU on the host before any write, CUDA on the device, docs/spec.md §8) and
// stamps / checks `saved` (core/saved_header.hpp); `saved` is the whole buffer, stamp included.
// An engine declares its passes with these types (`core::engine_fn::Forward write_read_forward;`),
// so a definition that strays from the contract does not compile.
#pragma once

#include <cstddef>

#include "core/validate.hpp"
#include "sdm/ops.hpp"
#include "sdm/plan.hpp"

namespace sdm::core {

namespace engine_fn {
// Bytes of the engine's regions of `saved`, after the stamp.
using SavedBodyBytes = std::size_t(const WriteReadPlan& plan);
using Forward = void(const WriteReadArgs& args, const TensorRef& readings, const WriteReadPlan& plan,
                     const WriteReadOptions& options);
using ForwardSaving = void(const WriteReadArgs& args, const TensorRef& readings, const TensorRef& saved,
                           const WriteReadPlan& plan, const WriteReadOptions& options);
using Backward = void(const WriteReadArgs& args, const TensorRef& saved, const TensorRef& grad_readings,
                      const TensorRef& grad_final_bank, const WriteReadGrads& grads, const WriteReadPlan& plan,
                      const WriteReadOptions& options);
using CountWriteGroups = void(const WriteReadArgs& args, const TensorRef& count, const WriteReadPlan& plan,
                              const WriteReadOptions& options);
using DecodeStep = void(const WriteReadArgs& args, const TensorRef& readings, const DecodeShape& shape,
                        const DecodeOptions& options);
}  // namespace engine_fn

struct Engine {
  engine_fn::SavedBodyBytes* saved_body_bytes;
  engine_fn::Forward* write_read_forward;
  engine_fn::ForwardSaving* write_read_forward_saving;
  engine_fn::Backward* write_read_backward;
  engine_fn::DecodeStep* decode_step;
  engine_fn::CountWriteGroups* write_groups_count;
};

}  // namespace sdm::core

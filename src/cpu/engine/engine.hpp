// engine.hpp - the CPU engine's entry points, called by src/ops/dispatch.cpp after
// validation (shapes, dtypes, devices and, with options.validate, index values).
// Contracts are those of the public functions of the same names in include/sdm/ops.hpp.
#pragma once

#include <cstddef>

#include "core/validate.hpp"
#include "sdm/ops.hpp"

namespace sdm::cpu {

void write_read_forward(const WriteReadArgs& args, const TensorRef& readings,
                        const core::WriteReadShape& shape, const WriteReadOptions& options);

std::size_t write_read_saved_bytes(const core::WriteReadShape& shape, const WriteReadOptions& options);

void write_read_forward_saving(const WriteReadArgs& args, const TensorRef& readings,
                               const TensorRef& saved, const core::WriteReadShape& shape,
                               const WriteReadOptions& options);

void write_read_backward(const WriteReadArgs& args, const TensorRef& saved,
                         const TensorRef& grad_readings, const TensorRef& grad_final_bank,
                         const WriteReadGrads& grads, const core::WriteReadShape& shape,
                         const WriteReadOptions& options);

void decode_step(const WriteReadArgs& args, const TensorRef& readings,
                 const core::DecodeShape& shape, const DecodeOptions& options);

}  // namespace sdm::cpu

// engine.hpp - the CUDA engine's entry points (built with SDM_ENABLE_CUDA), called by src/ops/dispatch.cpp after
// host validation (shapes, dtypes, devices); index values are checked on the device (docs/spec.md §8).
// Contracts are those of the public functions of the same names in include/sdm/ops.hpp. Each call
// runs on options.cuda_stream (nullptr: the legacy default stream) on the bank's device, with no
// host sync except the validate=True index check, which is skipped while that stream is being
// captured into a CUDA graph (out-of-range entries are then masked).
#pragma once

#include <cstddef>

#include "core/saved_header.hpp"
#include "core/validate.hpp"
#include "sdm/ops.hpp"

namespace sdm::cuda {

void write_read_forward(const WriteReadArgs& args, const TensorRef& readings,
                        const core::WriteReadShape& shape, const WriteReadOptions& options);

std::size_t write_read_saved_bytes(const core::WriteReadShape& shape, const WriteReadOptions& options);

void write_read_forward_saving(const WriteReadArgs& args, const TensorRef& readings,
                               const TensorRef& saved, const core::WriteReadShape& shape,
                               const WriteReadOptions& options);

// The stamp at the start of a saving forward's `saved` (core/saved_header.hpp; saved/stamp.cu):
// written by stamp_saved without a sync; checked by check_saved_stamp with one host sync (none,
// and no check, while the stream is being captured). The engine calls get saved_body(saved).
void stamp_saved(const core::SavedHeader& header, const WriteReadArgs& args, const TensorRef& saved,
                 const WriteReadOptions& options);
void check_saved_stamp(const core::SavedHeader& expected, const WriteReadArgs& args, const TensorRef& saved,
                       const WriteReadOptions& options);

void write_read_backward(const WriteReadArgs& args, const TensorRef& saved,
                         const TensorRef& grad_readings, const TensorRef& grad_final_bank,
                         const WriteReadGrads& grads, const core::WriteReadShape& shape,
                         const WriteReadOptions& options);

void decode_step(const WriteReadArgs& args, const TensorRef& readings,
                 const core::DecodeShape& shape, const DecodeOptions& options);

}  // namespace sdm::cuda

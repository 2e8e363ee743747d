// stream_api.hpp - the CUDA engine's entry points with an explicit stream (engine.hpp's functions
// run on the legacy default stream). The PyTorch binding passes its current stream here; the
// GPU tests use it to capture a call into a CUDA graph. Same contracts as engine.hpp; while
// `stream` is being captured the device index check is skipped (SPEC Z.3) and out-of-range
// entries are masked.
#pragma once

#include <cuda_runtime.h>

#include "core/validate.hpp"
#include "sdm/ops.hpp"

namespace sdm::cuda {

// `saved` == nullptr: the no-grad forward; else the saving forward into *saved.
void write_read_forward_on_stream(const WriteReadArgs& args, const TensorRef& readings, const TensorRef* saved,
                                  const core::WriteReadShape& shape, const WriteReadOptions& options,
                                  cudaStream_t stream);

void decode_step_on_stream(const WriteReadArgs& args, const TensorRef& readings, const core::DecodeShape& shape,
                           const DecodeOptions& options, cudaStream_t stream);

}  // namespace sdm::cuda

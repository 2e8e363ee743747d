// register_cuda.cpp - CUDA registrations of the torch.ops.sdm kernels (compiled only when the
// library is built with SDM_ENABLE_CUDA=ON). The kernels are those of the CPU registration: the
// C++ API dispatches on the bank's device, and each kernel hands it torch's current CUDA stream
// (device_context.hpp), so the ops run in stream order and can be captured into a CUDA graph.
// The reference ops stay CPU-only.
#include <torch/library.h>

#include "kernels.hpp"

namespace sdm::torch_bindings {

TORCH_LIBRARY_IMPL(sdm, CUDA, m) {
  m.impl("write_read_", &write_read_inplace);
  m.impl("write_read_saving", &write_read_saving);
  m.impl("write_read_backward", &write_read_backward);
  m.impl("write_groups_count", &write_groups_count);
  m.impl("decode_step", &decode_step);
}

}  // namespace sdm::torch_bindings

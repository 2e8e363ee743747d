// register_cpu.cpp - CPU registrations of the torch.ops.sdm kernels. The kernels are
// device-agnostic (the C++ API dispatches on the bank's device); a CUDA build registers the
// same functions under the CUDA key. The reference ops are CPU-only by design.
#include <torch/library.h>

#include "kernels.hpp"

namespace sdm::torch_bindings {

TORCH_LIBRARY_IMPL(sdm, CPU, m) {
  m.impl("write_read_", &write_read_inplace);
  m.impl("write_read_saving", &write_read_saving);
  m.impl("write_read_backward", &write_read_backward);
  m.impl("write_groups_count", &write_groups_count);
  m.impl("decode_step", &decode_step);
  m.impl("reference_write_read", &reference_write_read);
  m.impl("reference_write_read_backward", &reference_write_read_backward);
}

// Shape-only: the same kernel serves real, meta and fake tensors on every device.
TORCH_LIBRARY_IMPL(sdm, CompositeExplicitAutograd, m) {
  m.impl("write_read_plan", &write_read_plan);
  m.impl("check_write_read", &check_write_read);
  m.impl("check_decode_step", &check_decode_step);
}

}  // namespace sdm::torch_bindings

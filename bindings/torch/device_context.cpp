// device_context.cpp - device guard and current stream of a torch.ops.sdm kernel.
#include "device_context.hpp"

#include <c10/core/impl/VirtualGuardImpl.h>

namespace sdm::torch_bindings {

DeviceContext::DeviceContext(const at::Tensor& bank) {
  if (!bank.is_cuda()) return;
  guard_.reset_device(bank.device());
  cuda_stream_ = c10::impl::VirtualGuardImpl(c10::DeviceType::CUDA).getStream(bank.device()).native_handle();
}

}  // namespace sdm::torch_bindings

// device_context.hpp - where a torch.ops.sdm kernel runs: the bank's device made current, and
// torch's current stream on that device handed to the C++ API (options.cuda_stream).
//
// Device-generic (c10's virtual guard and stream interface): this file needs no CUDA header,
// so the kernels stay the same functions for the CPU and the CUDA registrations.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/DeviceGuard.h>

namespace sdm::torch_bindings {

class DeviceContext {
 public:
  // For a CUDA `bank`: guards its device and looks up the current stream there (the stream
  // torch enqueues this thread's work on, or the stream being captured into a CUDA graph).
  explicit DeviceContext(const at::Tensor& bank);

  // The cudaStream_t of the current stream, or nullptr for a CPU bank.
  void* cuda_stream() const { return cuda_stream_; }

 private:
  c10::OptionalDeviceGuard guard_;
  void* cuda_stream_ = nullptr;
};

}  // namespace sdm::torch_bindings

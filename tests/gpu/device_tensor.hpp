// device_tensor.hpp - owning device copies of host tensors, for the GPU tests and benchmark.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "host_tensor.hpp"
#include "problem.hpp"
#include "sdm/ops.hpp"

namespace sdm::testing {

// Throws std::runtime_error naming `what` unless status is cudaSuccess.
void cuda_ok(cudaError_t status, const char* what);

// True when a CUDA device is usable; otherwise prints why to stdout.
bool cuda_device_available();

// A contiguous tensor in device memory (cudaMalloc), move-only.
class DeviceTensor {
 public:
  DeviceTensor() = default;
  DeviceTensor(DType dtype, std::vector<std::int64_t> sizes);
  explicit DeviceTensor(const HostTensor& host);  // a copy of `host`
  ~DeviceTensor();
  DeviceTensor(DeviceTensor&& other) noexcept;
  DeviceTensor& operator=(DeviceTensor&& other) noexcept;
  DeviceTensor(const DeviceTensor&) = delete;
  DeviceTensor& operator=(const DeviceTensor&) = delete;

  TensorRef ref() const;
  HostTensor to_host() const;
  void copy_from(const HostTensor& host);  // same dtype and element count
  std::size_t bytes() const;
  void* data() const { return data_; }

 private:
  DType dtype_ = DType::f32;
  std::vector<std::int64_t> sizes_;
  void* data_ = nullptr;
};

// Device copies of every input of a Problem.
struct DeviceProblem {
  DeviceTensor memory, k_idx, k_val, v, beta, g, q_idx, q_val;
  explicit DeviceProblem(const Problem& pb);
  WriteReadArgs args() const { return args_of(*this); }
};


}  // namespace sdm::testing

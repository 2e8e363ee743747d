// device_array.hpp - a device array of trivially copyable T and a CUDA stream, each released on
// scope exit, for the GPU tests of the engine's internal kernels (test_chunk_sort.cu,
// test_entry_keys.cu). CUDA errors throw std::runtime_error (device_tensor.hpp's cuda_ok).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <vector>

#include "device_tensor.hpp"

namespace sdm::testing {

template <typename T>
class DeviceArray {
 public:
  explicit DeviceArray(std::size_t count) : count_(count) {
    cuda_ok(cudaMalloc(&data_, count == 0 ? 1 : count * sizeof(T)), "cudaMalloc");
  }
  explicit DeviceArray(const std::vector<T>& host) : DeviceArray(host.size()) {
    cuda_ok(cudaMemcpy(data_, host.data(), count_ * sizeof(T), cudaMemcpyHostToDevice), "cudaMemcpy (to device)");
  }
  ~DeviceArray() { cudaFree(data_); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;

  T* get() const { return static_cast<T*>(data_); }
  // Every byte set to `byte` (unwritten elements then show up).
  void fill_bytes(int byte) { cuda_ok(cudaMemset(data_, byte, count_ * sizeof(T)), "cudaMemset"); }
  std::vector<T> to_host() const {
    std::vector<T> host(count_);
    cuda_ok(cudaMemcpy(host.data(), data_, count_ * sizeof(T), cudaMemcpyDeviceToHost), "cudaMemcpy (to host)");
    return host;
  }

 private:
  std::size_t count_;
  void* data_ = nullptr;
};

class CudaStream {
 public:
  CudaStream() { cuda_ok(cudaStreamCreate(&stream_), "cudaStreamCreate"); }
  ~CudaStream() { cudaStreamDestroy(stream_); }
  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;
  cudaStream_t get() const { return stream_; }

 private:
  cudaStream_t stream_ = nullptr;
};

}  // namespace sdm::testing

// device_tensor.cpp - DeviceTensor: device copies of host tensors and back (device_tensor.hpp).
#include "device_tensor.hpp"

#include <cstdio>
#include <stdexcept>
#include <string>
#include <utility>

namespace sdm::testing {

void cuda_ok(cudaError_t status, const char* what) {
  if (status != cudaSuccess) {
    throw std::runtime_error(std::string(what) + ": " + cudaGetErrorName(status) + " " + cudaGetErrorString(status));
  }
}

bool cuda_device_available() {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess || count == 0) {
    std::printf("no CUDA device (%s)\n", status == cudaSuccess ? "count 0" : cudaGetErrorString(status));
    return false;
  }
  return true;
}


DeviceTensor::DeviceTensor(DType dtype, std::vector<std::int64_t> sizes) : dtype_(dtype), sizes_(std::move(sizes)) {
  cuda_ok(cudaMalloc(&data_, bytes() == 0 ? 1 : bytes()), "cudaMalloc");
}

DeviceTensor::DeviceTensor(const HostTensor& host) : DeviceTensor(host.dtype(), host.sizes()) { copy_from(host); }

DeviceTensor::~DeviceTensor() {
  if (data_ != nullptr) cudaFree(data_);
}

DeviceTensor::DeviceTensor(DeviceTensor&& other) noexcept
    : dtype_(other.dtype_), sizes_(std::move(other.sizes_)), data_(std::exchange(other.data_, nullptr)) {}

DeviceTensor& DeviceTensor::operator=(DeviceTensor&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) cudaFree(data_);
    dtype_ = other.dtype_;
    sizes_ = std::move(other.sizes_);
    data_ = std::exchange(other.data_, nullptr);
  }
  return *this;
}

std::size_t DeviceTensor::bytes() const {
  std::int64_t n = 1;
  for (std::int64_t s : sizes_) n *= s;
  return static_cast<std::size_t>(n) * dtype_size(dtype_);
}

TensorRef DeviceTensor::ref() const {
  TensorRef t;
  t.data = data_;
  t.dtype = dtype_;
  t.device = Device{DeviceType::cuda, 0};
  t.ndim = static_cast<int>(sizes_.size());
  std::int64_t stride = 1;
  for (int d = t.ndim - 1; d >= 0; --d) {
    t.sizes[static_cast<std::size_t>(d)] = sizes_[static_cast<std::size_t>(d)];
    t.strides[static_cast<std::size_t>(d)] = stride;
    stride *= sizes_[static_cast<std::size_t>(d)];
  }
  return t;
}

HostTensor DeviceTensor::to_host() const {
  HostTensor host(dtype_, sizes_);
  cuda_ok(cudaMemcpy(host.ref().data, data_, bytes(), cudaMemcpyDeviceToHost), "cudaMemcpy D2H");
  return host;
}

void DeviceTensor::copy_from(const HostTensor& host) {
  if (host.dtype() != dtype_ || static_cast<std::size_t>(host.numel()) * dtype_size(dtype_) != bytes()) {
    throw std::runtime_error("DeviceTensor::copy_from: dtype or size mismatch");
  }
  cuda_ok(cudaMemcpy(data_, host.ref().data, bytes(), cudaMemcpyHostToDevice), "cudaMemcpy H2D");
}

DeviceProblem::DeviceProblem(const Problem& pb)
    : memory(pb.memory), k_idx(pb.k_idx), k_val(pb.k_val), v(pb.v), beta(pb.beta), g(pb.g), q_idx(pb.q_idx),
      q_val(pb.q_val) {}

}  // namespace sdm::testing

// cuda_check.hpp - CUDA runtime errors as sdm::RuntimeError, the device guard and the stream of a call.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "sdm/error.hpp"

namespace sdm::cuda {

inline void check_cuda(cudaError_t status, const char* what) {
  if (status != cudaSuccess) {
    throw RuntimeError(std::string("sdm CUDA engine: ") + what + " failed: " + cudaGetErrorName(status) + " (" +
                       cudaGetErrorString(status) + ")");
  }
}

// After a kernel launch: reports a bad launch configuration (not asynchronous faults).
inline void check_launch(const char* kernel) { check_cuda(cudaGetLastError(), kernel); }

// Makes `device` current for the lifetime of the guard.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    check_cuda(cudaGetDevice(&previous_), "cudaGetDevice");
    if (previous_ != device) check_cuda(cudaSetDevice(device), "cudaSetDevice");
  }
  ~DeviceGuard() { cudaSetDevice(previous_); }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0;
};

// The stream of a call: options.cuda_stream, nullptr meaning the legacy default stream.
inline cudaStream_t stream_of(void* cuda_stream) {
  return cuda_stream != nullptr ? static_cast<cudaStream_t>(cuda_stream) : cudaStreamLegacy;
}

// True while `stream` is being captured into a CUDA graph (no host syncs allowed then).
inline bool is_capturing(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  check_cuda(cudaStreamIsCapturing(stream, &status), "cudaStreamIsCapturing");
  return status != cudaStreamCaptureStatusNone;
}

}  // namespace sdm::cuda

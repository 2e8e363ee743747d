// device_timing.hpp - the GPU benchmarks' clocks (bench_cuda.cu, walk_floor.cu, gather_floor.cu): the
// median of CUDA-event timings of a body on the legacy default stream after one warm-up, the
// device-to-device copy bandwidth their rates are compared with, and the floor benchmarks' device line.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <vector>

#include "device_tensor.hpp"

namespace sdm::bench {

// Median ms of `reps` timed runs of body() (it enqueues on, or synchronizes with, the legacy
// default stream).
template <typename F>
double median_ms(int reps, F&& body) {
  using sdm::testing::cuda_ok;
  cudaEvent_t start, stop;
  cuda_ok(cudaEventCreate(&start), "cudaEventCreate");
  cuda_ok(cudaEventCreate(&stop), "cudaEventCreate");
  body();  // warm-up
  cuda_ok(cudaDeviceSynchronize(), "warm-up");
  std::vector<float> ms;
  for (int r = 0; r < reps; ++r) {
    cuda_ok(cudaEventRecord(start, cudaStreamLegacy), "cudaEventRecord");
    body();
    cuda_ok(cudaEventRecord(stop, cudaStreamLegacy), "cudaEventRecord");
    cuda_ok(cudaEventSynchronize(stop), "cudaEventSynchronize");
    float t = 0;
    cuda_ok(cudaEventElapsedTime(&t, start, stop), "cudaEventElapsedTime");
    ms.push_back(t);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

// Device-to-device copy bandwidth, bytes read + written per second (a 2 GiB copy, median of 7).
inline double copy_bandwidth() {
  using sdm::testing::cuda_ok;
  const std::size_t bytes = std::size_t{2} << 30;
  void *a = nullptr, *b = nullptr;
  cuda_ok(cudaMalloc(&a, bytes), "cudaMalloc");
  cuda_ok(cudaMalloc(&b, bytes), "cudaMalloc");
  cuda_ok(cudaMemset(a, 1, bytes), "cudaMemset");
  const double ms = median_ms(7, [&] { cuda_ok(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, cudaStreamLegacy), "copy"); });
  cudaFree(a);
  cudaFree(b);
  return 2.0 * static_cast<double>(bytes) / (ms * 1e-3);
}

// The floor benchmarks' device line: false (after "<program>: skipped (no CUDA device)") without a
// GPU; else prints the device, its SM count and copy bandwidth, sets *sms and *copy_bw, and is true.
inline bool print_device(const char* program, int* sms, double* copy_bw) {
  using sdm::testing::cuda_ok;
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("%s: skipped (no CUDA device)\n", program);
    return false;
  }
  cudaDeviceProp prop{};
  cuda_ok(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  *sms = prop.multiProcessorCount;
  *copy_bw = copy_bandwidth();
  std::printf("device: %s, %d SMs; copy bandwidth %.0f GB/s (read + write)\n", prop.name, *sms, *copy_bw * 1e-9);
  return true;
}

}  // namespace sdm::bench

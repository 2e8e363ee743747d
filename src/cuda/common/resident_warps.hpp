// resident_warps.hpp - how many warps of a kernel the current device holds at once: one wave. The
// group writer asks L2 for the row its successor one wave later will write (group_writer.cu).
//
// Only hints depend on it (which rows are asked for early), never what a kernel computes, so no
// result depends on the SM count or the occupancy.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common/cuda_check.hpp"
#include "cuda/common/device_limits.hpp"

namespace sdm::cuda {

// Warps of kKernel (a __global__ function) launched with `threads` threads a block and no dynamic
// shared memory that the current device holds at once: SMs x blocks per SM x warps per block (at
// least 1). The blocks per SM are asked once per kernel (each kernel is its own template argument);
// they depend on the kernel and the architecture only, so a process whose GPUs differ in
// architecture could get a less even launch shape on some, never another result.
template <auto kKernel>
std::int64_t resident_warps(int threads, const char* name) {
  static const int blocks = [&] {
    int count = 0;
    check_cuda(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&count, kKernel, threads, 0), name);
    return count;
  }();
  const std::int64_t warps = static_cast<std::int64_t>(multiprocessor_count()) * blocks * (threads / 32);
  return warps > 0 ? warps : 1;
}

}  // namespace sdm::cuda

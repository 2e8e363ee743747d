// dependent_launch.cuh - programmatic dependent launch (PDL, sm_90) of the per-step kernels.
//
// A chunked call runs 3 kernels per time step on one stream, each depending on the one before.
// Launched with PDL, a kernel's launch is processed while its predecessor is still running (its
// CTAs start as the predecessor's CTAs exit), and they wait in wait_for_predecessor() until the
// predecessor has completed and its memory is visible. That hides part of the launch latency
// between dependent kernels without changing what any kernel computes: every memory access of
// a PDL kernel comes after the wait. The predecessors trigger nothing early: an early trigger
// (griddepcontrol.launch_dependents at kernel start) is slower than no PDL at all
// (docs/performance.md).
//
// SDM_CUDA_PDL=0 in the environment launches them normally instead (read once per process; for
// A/B measurements: PDL only changes when a kernel is scheduled, never what it computes).
//
// PDL is safe only where the kernels hold that wait: code generated for sm_90 or later. A build
// for older GPUs that the driver JIT-compiles from its PTX on a Hopper (SDM_CUDA_ARCHS=80, say)
// has none (the wait is compiled in for __CUDA_ARCH__ >= 900 only), and a kernel launched with PDL
// could then read its predecessor's results before they are visible; such kernels, and every
// kernel on a device before sm_90, launch normally (device_limits.hpp dependent_launch_safe).
#pragma once

#include <cuda_runtime.h>

#include <utility>

#include "core/env_knobs.hpp"
#include "cuda/common/cuda_check.hpp"
#include "cuda/common/device_limits.hpp"

namespace sdm::cuda {

// First statement of a kernel launched by launch_dependent: before any global memory access.
__device__ __forceinline__ void wait_for_predecessor() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

inline bool dependent_launch_enabled() {
  static const bool enabled = core::env_choice("SDM_CUDA_PDL", {"0", "1"}) != 0;
  return enabled;
}

// kernel<<<grid, block, smem, stream>>>(args...), with PDL when `pdl` (benchmarks compare both in
// one process).
template <typename... Params, typename... Args>
void launch_with_pdl(bool pdl, void (*kernel)(Params...), dim3 grid, dim3 block, std::size_t smem,
                     cudaStream_t stream, const char* name, Args&&... args) {
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  config.attrs = &attribute;
  config.numAttrs = pdl ? 1 : 0;
  check_cuda(cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...), name);
}

// kernel<<<grid, block, smem, stream>>>(args...), with PDL unless SDM_CUDA_PDL=0 or the kernels
// lack the wait on this device.
template <typename... Params, typename... Args>
void launch_dependent(void (*kernel)(Params...), dim3 grid, dim3 block, std::size_t smem, cudaStream_t stream,
                      const char* name, Args&&... args) {
  launch_with_pdl(dependent_launch_enabled() && dependent_launch_safe(), kernel, grid, block, smem, stream, name,
                  std::forward<Args>(args)...);
}

}  // namespace sdm::cuda

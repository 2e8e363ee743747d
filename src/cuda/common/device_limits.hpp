// device_limits.hpp - what the current device allows, asked once per device: its SM count, the
// shared memory a block may opt in to, the per-kernel opt-in for more than 48 KiB of shared
// memory, and whether the library's kernels may take programmatic dependent launch. Launch shapes
// and path choices read them; no kernel's result depends on them.
#pragma once

#include <cstddef>

namespace sdm::cuda {

// The current device's multiprocessor count (cudaDevAttrMultiProcessorCount), cached per device.
int multiprocessor_count();

// The most shared memory one block may use on the current device once it opts in
// (cudaDevAttrMaxSharedMemoryPerBlockOptin), cached per device.
std::size_t shared_memory_optin();

// Whether this library's kernels, as the current device loads them, begin with
// wait_for_predecessor's griddepcontrol.wait (dependent_launch.cuh), so that a launch with
// programmatic dependent launch (PDL) is safe: their PTX is of sm_90 or later
// (cudaFuncAttributes::ptxVersion of a probe kernel compiled with them; the library's kernels are
// all compiled for the same architectures). False on devices before sm_90, and on a Hopper that
// JIT-compiles a build for older GPUs (SDM_CUDA_ARCHS=80). Cached per device.
bool dependent_launch_safe();

// Lets `kernel` launch on the current device with `bytes` of dynamic shared memory. CUDA needs the
// function's limit raised (cudaFuncAttributeMaxDynamicSharedMemorySize) once its static and
// dynamic shared memory pass 48 KiB together; the limit is raised to the most any call asked and
// never lowered, so launches of the same kernel with smaller sizes, from any host thread, stay
// valid. Cached per (kernel, device): a launch that asks no more than before costs a lookup.
// `what` names the call in the error ("cudaFuncSetAttribute (solve shared memory)").
void allow_dynamic_shared_memory(const void* kernel, std::size_t bytes, const char* what);

template <typename... Params>
void allow_dynamic_shared_memory(void (*kernel)(Params...), std::size_t bytes, const char* what) {
  allow_dynamic_shared_memory(reinterpret_cast<const void*>(kernel), bytes, what);
}

}  // namespace sdm::cuda

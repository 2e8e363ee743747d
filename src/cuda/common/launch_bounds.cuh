// launch_bounds.cuh - the min-blocks argument of __launch_bounds__ for every architecture built.
//
// A kernel asks for `wanted` resident CTAs of `threads` threads per SM; sm_86, sm_87 and sm_89
// hold 1536 threads per SM (sm_80 and sm_90: 2048), and ptxas refuses a request beyond that.
// min_blocks keeps `wanted` where it fits and otherwise asks for as many CTAs as fit, so the
// sm_80 / sm_90 code is exactly what `wanted` gives.
#pragma once

namespace sdm::cuda {

#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ == 860 || __CUDA_ARCH__ == 870 || __CUDA_ARCH__ == 890)
inline constexpr int kMaxThreadsPerSm = 1536;
#else
inline constexpr int kMaxThreadsPerSm = 2048;
#endif

constexpr int min_blocks(int threads, int wanted) {
  return wanted * threads <= kMaxThreadsPerSm ? wanted : kMaxThreadsPerSm / threads;
}

}  // namespace sdm::cuda

// host_device.hpp - SDM_HOST_DEVICE marks scalar helpers shared by the CPU and CUDA code.
#pragma once

#if defined(__CUDACC__)
#define SDM_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define SDM_HOST_DEVICE inline
#endif

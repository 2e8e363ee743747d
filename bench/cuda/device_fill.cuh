// device_fill.cuh - the GPU benchmarks' random inputs (walk_floor.cu, gather_floor.cu): values
// uniform in [lo, hi) from a counter hash of (seed, index), written as f32 or as bf16 bits
// (truncated: inputs need no rounding), the same on every device.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "device_array.hpp"

namespace sdm::bench {

__device__ __forceinline__ std::uint16_t bf16_bits(float x) { return static_cast<std::uint16_t>(__float_as_uint(x) >> 16); }

__global__ void fill_uniform(float* f32, std::uint16_t* bf16, std::int64_t n, std::uint64_t seed, float lo, float hi) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    std::uint64_t x = seed * 0x9e3779b97f4a7c15ull + static_cast<std::uint64_t>(i);
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    const float v = lo + (hi - lo) * static_cast<float>((x ^ (x >> 31)) >> 40) * 0x1p-24f;
    if (f32 != nullptr) f32[i] = v;
    else bf16[i] = bf16_bits(v);
  }
}

// The first n elements of a float (f32) or std::uint16_t (bf16 bits) array, uniform in [lo, hi).
template <typename T>
void fill(sdm::testing::DeviceArray<T>& array, std::int64_t n, std::uint64_t seed, float lo = -0.1f, float hi = 0.1f) {
  static_assert(sizeof(T) == 4 || sizeof(T) == 2, "f32 or bf16 bits");
  float* f32 = nullptr;
  std::uint16_t* bf16 = nullptr;
  if constexpr (sizeof(T) == 4) f32 = reinterpret_cast<float*>(array.get());
  else bf16 = reinterpret_cast<std::uint16_t*>(array.get());
  fill_uniform<<<1024, 256>>>(f32, bf16, n, seed, lo, hi);
  sdm::testing::cuda_ok(cudaGetLastError(), "fill_uniform");
}

}  // namespace sdm::bench

// values.cuh - element access shared by the CUDA kernels.
//
// Bank elements are `float` (f32 bank) or `std::uint16_t` holding bf16 bits (bf16 bank);
// conversions use the shared round-to-nearest-even helpers of core/float_convert.hpp, so CPU
// and CUDA round identically. Row pieces of kVec consecutive elements are loaded with 16-byte
// vector accesses when kVec == 8 (caller guarantees hd % 8 == 0 and a 16-byte aligned bank),
// element by element when kVec == 1. The op's float inputs (k_val, v, beta, g, q_val) keep
// their caller dtype (f32 / bf16 / f16): a run-time switch converts one element exactly to f32.
#pragma once

#include <cstdint>

#include "core/float_convert.hpp"
#include "cuda/common/row_types.hpp"
#include "sdm/types.hpp"

namespace sdm::cuda {

__device__ __forceinline__ float to_f32(float x) { return x; }
__device__ __forceinline__ float to_f32(Bf16Bits h) { return core::bf16_to_float(h); }

template <typename E>
__device__ __forceinline__ E from_f32(float x);
template <>
__device__ __forceinline__ float from_f32<float>(float x) { return x; }
template <>
__device__ __forceinline__ Bf16Bits from_f32<Bf16Bits>(float x) { return core::bf16_from_float(x); }

// x rounded once to the bank dtype (k_val, v, q_val on entry, docs/spec.md §3).
__device__ __forceinline__ float round_to_bank(float x, bool bf16_bank) {
  return bf16_bank ? core::round_to_bf16(x) : x;
}

// One element of a float input, exactly converted to f32.
__device__ __forceinline__ float load_input(const void* data, DType dtype, std::int64_t i) {
  switch (dtype) {
    case DType::bf16: return core::bf16_to_float(static_cast<const std::uint16_t*>(data)[i]);
    case DType::f16: return core::f16_to_float(static_cast<const std::uint16_t*>(data)[i]);
    default: return static_cast<const float*>(data)[i];
  }
}

__device__ __forceinline__ std::int64_t load_index(const void* data, bool index64, std::int64_t i) {
  return index64 ? static_cast<const std::int64_t*>(data)[i] : static_cast<const std::int32_t*>(data)[i];
}

// ---- kVec consecutive row elements as f32 ---------------------------------------------

template <int kVec>
__device__ __forceinline__ void load_row(const float* p, float (&x)[kVec]) {
  if constexpr (kVec == 8) {
    const float4 a = reinterpret_cast<const float4*>(p)[0];
    const float4 b = reinterpret_cast<const float4*>(p)[1];
    x[0] = a.x, x[1] = a.y, x[2] = a.z, x[3] = a.w, x[4] = b.x, x[5] = b.y, x[6] = b.z, x[7] = b.w;
  } else {
#pragma unroll
    for (int k = 0; k < kVec; ++k) x[k] = p[k];
  }
}

template <int kVec>
__device__ __forceinline__ void load_row(const Bf16Bits* p, float (&x)[kVec]) {
  if constexpr (kVec == 8) {
    const uint4 u = *reinterpret_cast<const uint4*>(p);
    const std::uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      x[2 * k] = __uint_as_float(w[k] << 16);
      x[2 * k + 1] = __uint_as_float(w[k] & 0xffff0000u);
    }
  } else {
#pragma unroll
    for (int k = 0; k < kVec; ++k) x[k] = to_f32(p[k]);
  }
}

template <int kVec>
__device__ __forceinline__ void store_row(float* p, const float (&x)[kVec]) {
  if constexpr (kVec == 8) {
    reinterpret_cast<float4*>(p)[0] = make_float4(x[0], x[1], x[2], x[3]);
    reinterpret_cast<float4*>(p)[1] = make_float4(x[4], x[5], x[6], x[7]);
  } else {
#pragma unroll
    for (int k = 0; k < kVec; ++k) p[k] = x[k];
  }
}

template <int kVec>
__device__ __forceinline__ void store_row(Bf16Bits* p, const float (&x)[kVec]) {
  if constexpr (kVec == 8) {
    std::uint32_t w[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      w[k] = std::uint32_t{core::bf16_from_float(x[2 * k])} |
             (std::uint32_t{core::bf16_from_float(x[2 * k + 1])} << 16);
    }
    *reinterpret_cast<uint4*>(p) = make_uint4(w[0], w[1], w[2], w[3]);
  } else {
#pragma unroll
    for (int k = 0; k < kVec; ++k) p[k] = core::bf16_from_float(x[k]);
  }
}

// ---- kVec consecutive row elements kept as stored (packed in 4-byte words) ------------------
// A bf16 row piece of 8 takes 4 registers instead of 8 floats: for kernels that hold many rows.

template <typename E, int kVec>
struct PackedRow {
  static constexpr int kWords = kVec == 8 ? kVec * static_cast<int>(sizeof(E)) / 4 : 1;
  std::uint32_t w[kWords];
};

template <typename E, int kVec>
__device__ __forceinline__ void load_packed(const E* p, PackedRow<E, kVec>& x) {
  if constexpr (kVec == 8) {
#pragma unroll
    for (int k = 0; k < PackedRow<E, kVec>::kWords / 4; ++k) {
      const uint4 u = reinterpret_cast<const uint4*>(p)[k];
      x.w[4 * k] = u.x, x.w[4 * k + 1] = u.y, x.w[4 * k + 2] = u.z, x.w[4 * k + 3] = u.w;
    }
  } else if constexpr (sizeof(E) == 4) {
    x.w[0] = __float_as_uint(p[0]);
  } else {
    x.w[0] = p[0];
  }
}

template <typename E, int kVec>
__device__ __forceinline__ void unpack(const PackedRow<E, kVec>& x, float (&out)[kVec]) {
  if constexpr (sizeof(E) == 4) {
#pragma unroll
    for (int k = 0; k < kVec; ++k) out[k] = __uint_as_float(x.w[k]);
  } else if constexpr (kVec == 8) {
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      out[2 * k] = __uint_as_float(x.w[k] << 16);
      out[2 * k + 1] = __uint_as_float(x.w[k] & 0xffff0000u);
    }
  } else {
    out[0] = __uint_as_float(x.w[0] << 16);
  }
}

}  // namespace sdm::cuda

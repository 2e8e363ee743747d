// score_types.cuh - storage <-> float of the top-k's score dtypes on the device (the conversions of
// core/float_convert.hpp, the CPU kernels' bits), and the factor ranking keys of the register
// forward.
//
// A factor column c ranks by (score_key(value), c), larger first in both. FactorKey packs it into
// one unsigned integer: bf16 values keep all their information in the upper 16 bits of their
// score_key (the lower 16 are all 0 or all 1 by sign; NaN maps to -inf's key), so a bf16 key is
// (score_key & 0xffff0000) | c in 32 bits (c < 2^16); f32 and f16 keys are score_key << 32 | c.
// Every real key is > 0 (score_key(-inf) = 0x007fffff), so 0 pads below all of them.
#pragma once

#include <cstdint>

#include "core/float_convert.hpp"
#include "core/product_key_plan.hpp"

namespace sdm::cuda::topk {

struct F32Scores {
  using Storage = float;
  using Key = std::uint64_t;
  __device__ static float load(float x) { return x; }
  __device__ static float store(float x) { return x; }
  __device__ static float round(float x) { return x; }
  __device__ static Key key(float v, std::uint32_t c) { return static_cast<Key>(core::score_key(v)) << 32 | c; }
};
struct BF16Scores {
  using Storage = std::uint16_t;
  using Key = std::uint32_t;
  __device__ static float load(std::uint16_t x) { return core::bf16_to_float(x); }
  __device__ static std::uint16_t store(float x) { return core::bf16_from_float(x); }
  __device__ static float round(float x) { return core::round_to_bf16(x); }
  __device__ static Key key(float v, std::uint32_t c) { return (core::score_key(v) & 0xffff0000u) | c; }
};
struct F16Scores {
  using Storage = std::uint16_t;
  using Key = std::uint64_t;
  __device__ static float load(std::uint16_t x) { return core::f16_to_float(x); }
  __device__ static std::uint16_t store(float x) { return core::f16_from_float(x); }
  __device__ static float round(float x) { return core::round_to_f16(x); }
  __device__ static Key key(float v, std::uint32_t c) { return static_cast<Key>(core::score_key(v)) << 32 | c; }
};

}  // namespace sdm::cuda::topk

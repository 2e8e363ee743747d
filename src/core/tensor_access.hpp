// tensor_access.hpp - element loads and stores of contiguous TensorRefs by flat index, for
// code that handles every dtype at run time (the float64 reference, staging, tests).
// Stores round exactly once (round to nearest even) to the destination dtype.
#pragma once

#include <cstdint>

#include "float_convert.hpp"
#include "sdm/error.hpp"
#include "sdm/types.hpp"

namespace sdm::core {

inline double load_f64(const TensorRef& t, std::int64_t i) {
  switch (t.dtype) {
    case DType::f64: return static_cast<const double*>(t.data)[i];
    case DType::f32: return static_cast<const float*>(t.data)[i];
    case DType::bf16: return bf16_to_float(static_cast<const std::uint16_t*>(t.data)[i]);
    case DType::f16: return f16_to_float(static_cast<const std::uint16_t*>(t.data)[i]);
    case DType::i32: return static_cast<const std::int32_t*>(t.data)[i];
    case DType::i64: return static_cast<double>(static_cast<const std::int64_t*>(t.data)[i]);
    case DType::u8: return static_cast<const std::uint8_t*>(t.data)[i];
  }
  throw RuntimeError("load_f64: unknown dtype");
}

inline std::int64_t load_index(const TensorRef& t, std::int64_t i) {
  if (t.dtype == DType::i32) return static_cast<const std::int32_t*>(t.data)[i];
  return static_cast<const std::int64_t*>(t.data)[i];
}

inline void store_f64(const TensorRef& t, std::int64_t i, double x) {
  switch (t.dtype) {
    case DType::f64: static_cast<double*>(t.data)[i] = x; return;
    case DType::f32: static_cast<float*>(t.data)[i] = static_cast<float>(x); return;
    case DType::bf16: static_cast<std::uint16_t*>(t.data)[i] = bf16_from_double(x); return;
    case DType::f16: static_cast<std::uint16_t*>(t.data)[i] = f16_from_double(x); return;
    default: throw RuntimeError(std::string("store_f64: not a float dtype: ") + dtype_name(t.dtype));
  }
}

// x rounded once to `dtype` (a float dtype), returned as a double.
inline double round_to(DType dtype, double x) {
  switch (dtype) {
    case DType::f64: return x;
    case DType::f32: return static_cast<float>(x);
    case DType::bf16: return bf16_to_float(bf16_from_double(x));
    case DType::f16: return f16_to_float(f16_from_double(x));
    default: throw RuntimeError(std::string("round_to: not a float dtype: ") + dtype_name(dtype));
  }
}

}  // namespace sdm::core

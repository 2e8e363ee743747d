// element_io.hpp - how the chunked engine reads and writes tensor elements as f32.
//
// Bank rows are bf16 (stored as uint16 bits) or f32; BankElem<Elem> converts one element.
// Inputs (k_val, v, beta, g, q_val, grad_readings, grad_final_bank) may be f32, bf16, f16
// (f64 for the gradients); widening f32 / bf16 / f16 to f32 is exact, f64 is rounded once.
// Stores round once, to nearest even, to the destination dtype. The row helpers switch on
// the dtype once per row, not per element, so their loops stay simple and vectorisable.
#pragma once

#include <cstdint>

#include "core/float_convert.hpp"
#include "sdm/types.hpp"

namespace sdm::cpu {

template <typename Elem>
struct BankElem;

template <>
struct BankElem<float> {
  static float load(float x) { return x; }
  static float store(float x) { return x; }
};

template <>
struct BankElem<std::uint16_t> {
  static float load(std::uint16_t x) { return core::bf16_to_float(x); }
  static std::uint16_t store(float x) { return core::bf16_from_float(x); }
};

// x rounded to the bank dtype (bf16 or f32), as f32.
inline float round_to_bank(DType bank, float x) { return bank == DType::bf16 ? core::round_to_bf16(x) : x; }

// Element i of a float tensor as f32.
float load_element(const TensorRef& t, std::int64_t i);

// Elements [offset, offset + n) of a float tensor as f32.
void load_elements(const TensorRef& t, std::int64_t offset, std::int64_t n, float* out);

// Stores n f32 values at elements [offset, offset + n) of a float tensor, rounding once.
void store_elements(const TensorRef& t, std::int64_t offset, std::int64_t n, const float* in);

// A [rows, width] row-major matrix of bf16 or f32 elements (a bank, a gradient bank).
struct RowMatrix {
  void* data = nullptr;
  DType dtype = DType::f32;  // bf16 or f32
  std::int64_t width = 0;

  // Row `row` as f32 (width values).
  void load(std::int64_t row, float* out) const;
  // Stores width f32 values into row `row`, rounding once to the dtype.
  void store(std::int64_t row, const float* in) const;
  // Stores a[c] + b[c] (one f32 sum, then one rounding to the dtype) into row `row`.
  void store_sum(std::int64_t row, const float* a, const float* b) const;
  // dot(x, row `row` as f32) in row_math.hpp's order.
  float dot(std::int64_t row, const float* x) const;
  // A prefetch hint for row `row` (changes no value).
  void prefetch(std::int64_t row) const;
};

}  // namespace sdm::cpu

// product_key_plan.hpp - the validated geometry of a product-key top-k call, and the score
// order both backends rank by (include/sdm/product_key_topk.hpp states the rule).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/float_convert.hpp"
#include "core/host_device.hpp"
#include "sdm/product_key_topk.hpp"
#include "sdm/types.hpp"

namespace sdm::core {

struct ProductKeyPlan {
  std::int64_t rows = 0;
  std::int64_t k = 0;         // requested
  std::int64_t selected = 0;  // kk = min(k, slots)
  std::int64_t width = 0;     // sum of the factor widths (raw's columns)
  std::int64_t slots = 1;     // product of the factor widths
  std::vector<std::int64_t> dims;     // factor widths
  std::vector<std::int64_t> offsets;  // first raw column of each factor
  std::vector<std::int64_t> radix;    // product of the widths after each factor (slot digit f = id / radix[f] % dims[f])
  DType dtype = DType::f32;           // raw's (forward) or grad_values' (backward)
};

// Checks factor_dims and k; `raw` (forward) or `grad_raw` (backward) gives rows and dtype.
ProductKeyPlan plan_product_key_topk(const TensorRef& raw, std::span<const std::int64_t> factor_dims,
                                     std::int64_t k);
// The forward's outputs: values [rows, kk] raw's dtype, slots [rows, kk] int64, contiguous,
// on raw's device; raw's columns contiguous.
void validate_product_key_outputs(const ProductKeyPlan& plan, const TensorRef& raw, const TensorRef& values,
                                  const TensorRef& slots);
// The backward's arguments: slots [rows, kk] int64, grad_values [rows, kk] float, grad_raw
// [rows, sum(factor_dims)] grad_values' dtype, contiguous, one device. Returns the plan.
ProductKeyPlan plan_product_key_backward(const TensorRef& slots, const TensorRef& grad_values,
                                         std::span<const std::int64_t> factor_dims, const TensorRef& grad_raw);

// Order-preserving map of a score to an unsigned key: -0 below +0, NaN ranked as -inf.
SDM_HOST_DEVICE std::uint32_t score_key(float x) {
  const std::uint32_t bits = x != x ? 0xff800000u : float_bits(x);
  return (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
}

inline std::uint64_t score_key(double x) {
  std::uint64_t bits = 0;
  if (x != x) {
    bits = 0xfff0000000000000ull;
  } else {
    static_assert(sizeof bits == sizeof x);
    __builtin_memcpy(&bits, &x, sizeof bits);
  }
  return (bits >> 63) ? ~bits : (bits | 0x8000000000000000ull);
}

// The backward's slot check (options.validate): every entry of `slots` ([rows, kk], int64) in
// [0, prod(factor_dims)). check_selected_slots reads host data; slot_outside throws the error of
// the first bad entry (row, entry, value) for both devices' checks.
void check_selected_slots(const ProductKeyPlan& plan, const TensorRef& slots);
[[noreturn]] void slot_outside(const ProductKeyPlan& plan, std::int64_t row, std::int64_t entry, std::int64_t value);

}  // namespace sdm::core

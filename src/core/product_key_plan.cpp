// product_key_plan.cpp - argument checks of the product-key top-k entry points.
#include "core/product_key_plan.hpp"

#include <string>

#include "core/validate.hpp"
#include "sdm/error.hpp"

namespace sdm::core {
namespace {

std::string list_string(std::span<const std::int64_t> values) {
  std::string s = "[";
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (i) s += ", ";
    if (i == 8 && values.size() > 10) {
      s += "... (" + std::to_string(values.size()) + " in all)";
      break;
    }
    s += std::to_string(values[i]);
  }
  return s + "]";
}

bool is_score_dtype(DType d) { return d == DType::f32 || d == DType::bf16 || d == DType::f16 || d == DType::f64; }

void check_float(const TensorRef& t, const char* name) {
  if (!is_score_dtype(t.dtype)) {
    throw TypeError(name, std::string(name) + " must be float32, bfloat16, float16 or float64, got " +
                              dtype_name(t.dtype));
  }
}

void check_matrix(const TensorRef& t, const char* name, std::int64_t rows, std::int64_t cols, bool contiguous) {
  if (t.ndim != 2 || t.sizes[0] != rows || t.sizes[1] != cols) {
    throw ValueError(name, std::string(name) + " must be [" + std::to_string(rows) + ", " + std::to_string(cols) +
                               "], got " + t.shape_string());
  }
  if (contiguous && !t.is_contiguous()) {
    throw ValueError(name, std::string(name) + " must be contiguous");
  }
}

void check_device(const TensorRef& t, const char* name, const TensorRef& like, const char* like_name) {
  if (!(t.device == like.device)) {
    throw ValueError(name, std::string(name) + " must be on " + like_name + "'s device " + device_name(like.device) +
                               ", got " + device_name(t.device));
  }
}

void set_factors(ProductKeyPlan& plan, std::span<const std::int64_t> dims) {
  const auto count = static_cast<std::int64_t>(dims.size());
  if (count < 1 || count > kMaxProductKeyFactors) {
    throw ValueError("factor_dims", "factor_dims must list 1 to " + std::to_string(kMaxProductKeyFactors) +
                                        " factor widths, got " + std::to_string(count));
  }
  for (std::size_t f = 0; f < dims.size(); ++f) {
    if (dims[f] < 1 || dims[f] > kMaxProductKeySlots) {
      throw ValueError("factor_dims", "factor_dims[" + std::to_string(f) + "] must be in 1.." +
                                          std::to_string(kMaxProductKeySlots) + ", got " + std::to_string(dims[f]) +
                                          " (factor_dims = " + list_string(dims) + ")");
    }
    // Both bounds are checked before each product / sum, so neither can wrap.
    if (plan.slots > kMaxProductKeySlots / dims[f]) {
      throw ValueError("factor_dims", "factor_dims = " + list_string(dims) + " address more than " +
                                          std::to_string(kMaxProductKeySlots) + " slots");
    }
    plan.slots *= dims[f];
    plan.offsets.push_back(plan.width);
    plan.width += dims[f];
    if (plan.width > kMaxProductKeySlots) {
      throw ValueError("factor_dims", "factor_dims = " + list_string(dims) + " sum to more than " +
                                          std::to_string(kMaxProductKeySlots) + " columns");
    }
  }
  plan.dims.assign(dims.begin(), dims.end());
  plan.radix.assign(dims.size(), 1);
  for (std::size_t f = dims.size() - 1; f > 0; --f) plan.radix[f - 1] = plan.radix[f] * dims[f];
}

void set_k(ProductKeyPlan& plan, std::int64_t k) {
  if (k < 1 || k > kMaxProductKeyK) {
    throw ValueError("k", "k must be in 1.." + std::to_string(kMaxProductKeyK) + ", got " + std::to_string(k));
  }
  plan.k = k;
  plan.selected = k < plan.slots ? k : plan.slots;
}

}  // namespace

ProductKeyPlan plan_product_key_topk(const TensorRef& raw, std::span<const std::int64_t> factor_dims,
                                     std::int64_t k) {
  ProductKeyPlan plan;
  check_tensor_ref(raw, "raw");
  check_float(raw, "raw");
  set_factors(plan, factor_dims);
  set_k(plan, k);
  if (raw.ndim != 2) {
    throw ValueError("raw", "raw must be [rows, sum(factor_dims)], got " + raw.shape_string());
  }
  if (raw.sizes[1] != plan.width) {
    throw ValueError("raw", "raw has " + std::to_string(raw.sizes[1]) + " columns but factor_dims = " +
                                list_string(factor_dims) + " sum to " + std::to_string(plan.width));
  }
  plan.rows = raw.sizes[0];
  plan.dtype = raw.dtype;
  return plan;
}

void validate_product_key_outputs(const ProductKeyPlan& plan, const TensorRef& raw, const TensorRef& values,
                                  const TensorRef& slots) {
  check_tensor_ref(values, "values");
  check_tensor_ref(slots, "slots");
  if (plan.rows > 0 && raw.strides[1] != 1) {
    throw ValueError("raw", "raw's columns must be contiguous (stride 1), got stride " + std::to_string(raw.strides[1]));
  }
  if (values.dtype != raw.dtype) {
    throw TypeError("values", std::string("values must have raw's dtype ") + dtype_name(raw.dtype) + ", got " +
                                  dtype_name(values.dtype));
  }
  if (slots.dtype != DType::i64) {
    throw TypeError("slots", std::string("slots must be int64, got ") + dtype_name(slots.dtype));
  }
  check_matrix(values, "values", plan.rows, plan.selected, true);
  check_matrix(slots, "slots", plan.rows, plan.selected, true);
  check_device(values, "values", raw, "raw");
  check_device(slots, "slots", raw, "raw");
}

ProductKeyPlan plan_product_key_backward(const TensorRef& slots, const TensorRef& grad_values,
                                         std::span<const std::int64_t> factor_dims, const TensorRef& grad_raw) {
  ProductKeyPlan plan;
  check_tensor_ref(slots, "slots");
  check_tensor_ref(grad_values, "grad_values");
  check_tensor_ref(grad_raw, "grad_raw");
  set_factors(plan, factor_dims);
  if (slots.dtype != DType::i64) {
    throw TypeError("slots", std::string("slots must be int64, got ") + dtype_name(slots.dtype));
  }
  check_float(grad_values, "grad_values");
  if (slots.ndim != 2 || slots.sizes[1] < 1 || slots.sizes[1] > kMaxProductKeyK || slots.sizes[1] > plan.slots) {
    throw ValueError("slots", "slots must be [rows, kk] with kk in 1..min(" + std::to_string(kMaxProductKeyK) +
                                  ", prod(factor_dims) = " + std::to_string(plan.slots) + "), got " +
                                  slots.shape_string());
  }
  set_k(plan, slots.sizes[1]);
  plan.rows = slots.sizes[0];
  plan.dtype = grad_values.dtype;
  check_matrix(slots, "slots", plan.rows, plan.selected, true);
  check_matrix(grad_values, "grad_values", plan.rows, plan.selected, true);
  if (grad_raw.dtype != grad_values.dtype) {
    throw TypeError("grad_raw", std::string("grad_raw must have grad_values' dtype ") +
                                    dtype_name(grad_values.dtype) + ", got " + dtype_name(grad_raw.dtype));
  }
  check_matrix(grad_raw, "grad_raw", plan.rows, plan.width, true);
  check_device(grad_values, "grad_values", slots, "slots");
  check_device(grad_raw, "grad_raw", slots, "slots");
  return plan;
}

void check_selected_slots(const ProductKeyPlan& plan, const TensorRef& slots) {
  const auto* ids = slots.data_as<const std::int64_t>();
  for (std::int64_t row = 0; row < plan.rows; ++row) {
    for (std::int64_t e = 0; e < plan.selected; ++e) {
      const std::int64_t id = ids[row * slots.strides[0] + e];
      if (id < 0 || id >= plan.slots) slot_outside(plan, row, e, id);
    }
  }
}

void slot_outside(const ProductKeyPlan& plan, std::int64_t row, std::int64_t entry, std::int64_t value) {
  throw ValueError("slots", "slots[row " + std::to_string(row) + ", entry " + std::to_string(entry) + "] = " +
                                std::to_string(value) + " is outside [0, prod(factor_dims)) = [0, " +
                                std::to_string(plan.slots) + "); the backward takes the slots the forward selected");
}

}  // namespace sdm::core

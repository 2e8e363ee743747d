// topk_ops.cpp - the product-key top-k operators (include/sdm/product_key_topk.hpp):
//
//   product_key_topk(raw, factor_dims, k) -> (values, slots)
//       raw [..., sum(factor_dims)] float; values [..., kk] raw's dtype, slots [..., kk] int64
//   product_key_topk_backward(slots, grad_values, factor_dims, *, validate=True) -> grad_raw [..., sum(factor_dims)]
//       validate: slots outside [0, prod(factor_dims)) are refused (the autograd formula, which passes
//       the forward's own slots, turns it off)
//   product_key_topk_selected(raw, factor_dims, k) -> kk   (shape and dtype only: fake kernels)
//   product_key_columns(factor_dims) -> sum(factor_dims)    after the C++ check of factor_dims (the
//       Python args and the backward's fake kernel check factor widths by this rule, not a copy)
//
// Leading dims are flattened into rows; the C++ API checks everything before any work. The
// autograd formula and the fake kernels are registered from Python (sdm/product_keys.py).
#include <ATen/ATen.h>
#include <torch/library.h>

#include <cstdint>
#include <string>
#include <vector>

#include "device_context.hpp"
#include "errors.hpp"
#include "sdm/error.hpp"
#include "sdm/product_key_topk.hpp"
#include "tensor_ref.hpp"
#include "topk_ops.hpp"

namespace sdm::torch_bindings {
namespace {

void check_has_columns(const at::Tensor& t, const char* name) {
  if (t.dim() == 0) {
    throw ValueError(name, std::string(name) + " must have at least one dimension (the factor columns), got a scalar");
  }
}

std::int64_t leading_rows(const at::Tensor& t) {
  std::int64_t rows = 1;
  for (std::int64_t d = 0; d + 1 < t.dim(); ++d) rows *= t.size(d);
  return rows;
}

// t viewed as [rows, last dim], its columns contiguous.
at::Tensor as_rows(const at::Tensor& t) {
  const auto rows = t.reshape({leading_rows(t), t.size(-1)});
  return rows.stride(1) == 1 || rows.size(0) == 0 ? rows : rows.contiguous();
}

std::vector<std::int64_t> with_last(const at::Tensor& t, std::int64_t last) {
  std::vector<std::int64_t> sizes(t.sizes().begin(), t.sizes().end());
  sizes.back() = last;
  return sizes;
}

// "[2, 5, 3]", with std::to_string: the extension formats no message through an iostream
// (c10::str, TORCH_CHECK), docs/cuda.md "The extension's C++ runtime".
std::string shape_of(const at::Tensor& t) {
  std::string out = "[";
  for (std::int64_t d = 0; d < t.dim(); ++d) out += (d ? ", " : "") + std::to_string(t.size(d));
  return out + "]";
}

// A data-less [1, columns] view of `dtype`: what the shape-only checks read.
TensorRef row_shape(DType dtype, std::int64_t columns) {
  TensorRef ref;
  ref.dtype = dtype;
  ref.ndim = 2;
  ref.sizes = {1, columns, 0, 0};
  ref.strides = {columns, 1, 0, 0};
  return ref;
}

TensorRef row_shape(const at::Tensor& t, const char* name) {
  return row_shape(to_sdm_dtype(t.scalar_type(), name), t.size(-1));
}

// The column count of factor_dims when every width is valid, else 0 (the C++ check then
// reports the bad width before anything else).
std::int64_t columns_of(c10::IntArrayRef factor_dims) {
  std::int64_t sum = 0;
  for (const auto w : factor_dims) {
    if (w < 1 || w > kMaxProductKeySlots - sum) return 0;
    sum += w;
  }
  return sum;
}

int64_t product_key_columns(c10::IntArrayRef factor_dims) {
  return translate_errors([&] {
    const std::int64_t width = columns_of(factor_dims);
    // k = 1 is in range whatever the limits: only factor_dims can be refused.
    sdm::product_key_topk_selected(row_shape(DType::f32, width),
                                   std::span<const std::int64_t>(factor_dims.data(), factor_dims.size()), 1);
    return width;
  });
}

}  // namespace

std::tuple<at::Tensor, at::Tensor> product_key_topk(const at::Tensor& raw, c10::IntArrayRef factor_dims, int64_t k) {
  return translate_errors([&] {
    check_has_columns(raw, "raw");
    const std::span<const std::int64_t> dims(factor_dims.data(), factor_dims.size());
    const std::int64_t kk = sdm::product_key_topk_selected(row_shape(raw, "raw"), dims, k);
    const DeviceContext context(raw);
    const auto rows = as_rows(raw);
    auto values = at::empty({rows.size(0), kk}, raw.options());
    auto slots = at::empty({rows.size(0), kk}, raw.options().dtype(at::kLong));
    ProductKeyTopkOptions options;
    options.cuda_stream = context.cuda_stream();
    sdm::product_key_topk_forward(to_ref(rows, "raw"), dims, k, to_ref(values, "values"), to_ref(slots, "slots"),
                                  options);
    return std::make_tuple(values.view(with_last(raw, kk)), slots.view(with_last(raw, kk)));
  });
}

at::Tensor product_key_topk_backward(const at::Tensor& slots, const at::Tensor& grad_values,
                                     c10::IntArrayRef factor_dims, bool validate) {
  return translate_errors([&] {
    check_has_columns(slots, "slots");
    if (grad_values.sizes() != slots.sizes()) {
      throw ValueError("grad_values", "grad_values must have slots' shape " + shape_of(slots) + ", got " +
                                          shape_of(grad_values));
    }
    const DeviceContext context(slots);
    const auto slot_rows = as_rows(slots).contiguous();
    const auto grad_rows = as_rows(grad_values).contiguous();
    const std::int64_t width = columns_of(factor_dims);
    auto grad_raw = at::empty({slot_rows.size(0), width}, grad_values.options());
    ProductKeyTopkOptions options;
    options.cuda_stream = context.cuda_stream();
    options.validate = validate;
    sdm::product_key_topk_backward(to_ref(slot_rows, "slots"), to_ref(grad_rows, "grad_values"),
                                   std::span<const std::int64_t>(factor_dims.data(), factor_dims.size()),
                                   to_ref(grad_raw, "grad_raw"), options);
    return grad_raw.view(with_last(slots, width));
  });
}

int64_t product_key_topk_selected(const at::Tensor& raw, c10::IntArrayRef factor_dims, int64_t k) {
  return translate_errors([&] {
    check_has_columns(raw, "raw");
    return sdm::product_key_topk_selected(row_shape(raw, "raw"),
                                          std::span<const std::int64_t>(factor_dims.data(), factor_dims.size()), k);
  });
}

TORCH_LIBRARY_FRAGMENT(sdm, m) {
  m.def("product_key_topk(Tensor raw, int[] factor_dims, int k) -> (Tensor values, Tensor slots)");
  m.def("product_key_topk_backward(Tensor slots, Tensor grad_values, int[] factor_dims, *, bool validate=True) -> "
        "Tensor grad_raw");
  m.def("product_key_topk_selected(Tensor raw, int[] factor_dims, int k) -> int");
  // No tensor argument: one kernel for every dispatch key.
  m.def("product_key_columns(int[] factor_dims) -> int", &product_key_columns);
}

TORCH_LIBRARY_IMPL(sdm, CPU, m) {
  m.impl("product_key_topk", &product_key_topk);
  m.impl("product_key_topk_backward", &product_key_topk_backward);
}

// Shape-only: the same kernel serves real, meta and fake tensors on every device.
TORCH_LIBRARY_IMPL(sdm, CompositeExplicitAutograd, m) {
  m.impl("product_key_topk_selected", &product_key_topk_selected);
}

}  // namespace sdm::torch_bindings

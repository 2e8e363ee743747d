// topk_ops.hpp - the product-key top-k kernels of torch.ops.sdm (topk_ops.cpp), shared by the
// CPU registration there and the CUDA one (topk_register_cuda.cpp).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/ArrayRef.h>

#include <cstdint>
#include <tuple>

namespace sdm::torch_bindings {

std::tuple<at::Tensor, at::Tensor> product_key_topk(const at::Tensor& raw, c10::IntArrayRef factor_dims, int64_t k);
at::Tensor product_key_topk_backward(const at::Tensor& slots, const at::Tensor& grad_values,
                                     c10::IntArrayRef factor_dims, bool validate);
int64_t product_key_topk_selected(const at::Tensor& raw, c10::IntArrayRef factor_dims, int64_t k);

}  // namespace sdm::torch_bindings

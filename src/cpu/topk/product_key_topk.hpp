// product_key_topk.hpp - the CPU kernels of the product-key top-k (rule and shapes:
// include/sdm/product_key_topk.hpp). Arguments are validated by the caller (src/ops).
#pragma once

#include "core/product_key_plan.hpp"
#include "sdm/product_key_topk.hpp"

namespace sdm::cpu {

void product_key_topk_forward(const core::ProductKeyPlan& plan, const TensorRef& raw, const TensorRef& values,
                              const TensorRef& slots, int num_threads);

// Slots outside [0, prod(factor_dims)) contribute nothing.
void product_key_topk_backward(const core::ProductKeyPlan& plan, const TensorRef& slots,
                               const TensorRef& grad_values, const TensorRef& grad_raw, int num_threads);

}  // namespace sdm::cpu

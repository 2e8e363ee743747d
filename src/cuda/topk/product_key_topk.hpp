// product_key_topk.hpp - the CUDA kernels of the product-key top-k (rule and shapes:
// include/sdm/product_key_topk.hpp). Arguments are validated by the caller (src/ops); these
// launchers check what only the CUDA kernels limit (dtype, device), enqueue on `cuda_stream`
// and never synchronise.
#pragma once

#include "core/product_key_plan.hpp"

namespace sdm::cuda {

// raw f32 / bf16 / f16 (float64 runs on the CPU only).
void product_key_topk_forward(const core::ProductKeyPlan& plan, const TensorRef& raw, const TensorRef& values,
                              const TensorRef& slots, void* cuda_stream);

// Slots outside [0, prod(factor_dims)) contribute nothing.
// (The launchers never synchronise; check_selected_slots, slot_check.cu, is the exception: the
// validate=True check of the backward's slots, one host sync, nothing while capturing.)
void check_selected_slots(const core::ProductKeyPlan& plan, const TensorRef& slots, void* cuda_stream);

void product_key_topk_backward(const core::ProductKeyPlan& plan, const TensorRef& slots,
                               const TensorRef& grad_values, const TensorRef& grad_raw, void* cuda_stream);

}  // namespace sdm::cuda

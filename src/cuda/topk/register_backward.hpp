// register_backward.hpp - the product-key top-k backward for kk <= 128 and every factor width
// <= 2^24 (register_backward.cu: column sums in shared memory for rows of width <= 1024, keys
// sorted in registers for wider ones); product_key_topk.cu sends every other call to the general
// kernel. Same bits as the CPU kernels.
#pragma once

#include "core/product_key_plan.hpp"

namespace sdm::cuda {

bool register_backward_fits(const core::ProductKeyPlan& plan);

// slots, grad_values [rows, kk] -> grad_raw [rows, width]; enqueued on `stream`, no synchronisation.
void register_backward(const core::ProductKeyPlan& plan, const TensorRef& slots, const TensorRef& grad_values,
                       const TensorRef& grad_raw, void* cuda_stream);

}  // namespace sdm::cuda

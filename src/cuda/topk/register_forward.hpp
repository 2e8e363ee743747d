// register_forward.hpp - the product-key top-k forward with keys in registers (register_forward.cu):
// the kernel for two or more factors of width <= 512 and k <= 128; product_key_topk.cu sends
// every other call to the general kernel. Same bits as the CPU kernels.
#pragma once

#include "core/product_key_plan.hpp"

namespace sdm::cuda {

// Whether register_forward takes `plan` (dtype f32 / bf16 / f16).
bool register_forward_fits(const core::ProductKeyPlan& plan);

// raw [rows, width] (row stride raw.strides[0]) -> values, slots [rows, selected]; enqueued on
// `stream`, no synchronisation.
void register_forward(const core::ProductKeyPlan& plan, const TensorRef& raw, const TensorRef& values,
                      const TensorRef& slots, void* cuda_stream);

}  // namespace sdm::cuda

// register_backward.hpp - the product-key top-k backward for kk <= 128 and every factor width
// <= 2^24 (register_backward.cu: keys sorted in registers, or column sums in shared memory);
// product_key_topk.cu sends every other call to the general kernel. Same bits as the CPU kernels.
#pragma once

#include "core/product_key_plan.hpp"

namespace sdm::cuda {

bool register_backward_fits(const core::ProductKeyPlan& plan);

// slots, grad_values [rows, kk] -> grad_raw [rows, width]; enqueued on `stream`, no synchronisation.
void register_backward(const core::ProductKeyPlan& plan, const TensorRef& slots, const TensorRef& grad_values,
                       const TensorRef& grad_raw, void* cuda_stream);

// Which row path and loop register_backward runs (register_backward.cu lists them); every variant
// gives the same bits, so the choice decides only the speed. SDM_TOPK_BWD_VARIANT=n in the
// environment sets the default (0); tests and benchmarks set each in turn.
inline constexpr int kRegisterBackwardVariants = 8;
int register_backward_variant();
void set_register_backward_variant(int variant);  // outside [0, kRegisterBackwardVariants): 0

}  // namespace sdm::cuda

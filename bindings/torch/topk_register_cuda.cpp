// topk_register_cuda.cpp - CUDA registrations of the product-key top-k operators (compiled only
// when the library has the CUDA engine): the kernels of topk_ops.cpp, which hand torch's current
// stream to the C++ API.
#include <torch/library.h>

#include "topk_ops.hpp"

namespace sdm::torch_bindings {

TORCH_LIBRARY_IMPL(sdm, CUDA, m) {
  m.impl("product_key_topk", &product_key_topk);
  m.impl("product_key_topk_backward", &product_key_topk_backward);
}

}  // namespace sdm::torch_bindings

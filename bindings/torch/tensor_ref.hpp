// tensor_ref.hpp - at::Tensor -> sdm::TensorRef adapters (the only bridge between torch
// types and the C++ API).
//
// A TensorRef is a non-owning view: the at::Tensor must outlive every call that uses it.
// Unsupported dtypes raise sdm::TypeError and unsupported devices or ranks sdm::ValueError,
// both naming the argument, so they surface in Python like the library's own checks.
#pragma once

#include <ATen/core/Tensor.h>

#include "sdm/ops.hpp"
#include "sdm/types.hpp"

namespace sdm::torch_bindings {

DType to_sdm_dtype(at::ScalarType type, const char* name);
Device to_sdm_device(const c10::Device& device, const char* name);
at::ScalarType to_scalar_type(DType dtype);

// A view of `tensor` (data pointer, dtype, device, sizes, strides).
TensorRef to_ref(const at::Tensor& tensor, const char* name);

// A data-less view with `tensor`'s sizes, strides, dtype and device: what the shape-only entry
// points (write_read_plan, check_write_read, check_decode_step) need, also for meta /
// fake tensors.
TensorRef to_shape_ref(const at::Tensor& tensor, const char* name);

// The op's inputs other than the bank, made contiguous (a no-op when they already are).
struct OpInputs {
  at::Tensor k_idx, k_val, v, beta, g, q_idx, q_val;
};
OpInputs contiguous_inputs(const at::Tensor& k_idx, const at::Tensor& k_val, const at::Tensor& v,
                           const at::Tensor& beta, const at::Tensor& g, const at::Tensor& q_idx,
                           const at::Tensor& q_val);

// WriteReadArgs over `memory` and `inputs`.
WriteReadArgs make_args(const at::Tensor& memory, const OpInputs& inputs);

}  // namespace sdm::torch_bindings

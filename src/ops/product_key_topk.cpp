// product_key_topk.cpp - the entry points of include/sdm/product_key_topk.hpp: validate every
// argument before any work, then run the kernel of raw's (or slots') device.
#include "sdm/product_key_topk.hpp"

#include <string>

#include "core/product_key_plan.hpp"
#include "core/validate.hpp"
#include "cpu/topk/product_key_topk.hpp"
#include "sdm/error.hpp"
#if defined(SDM_WITH_CUDA)
#include "cuda/topk/product_key_topk.hpp"
#endif

namespace sdm {
namespace {

// Throws unless `t` is on a device this build has a kernel for.
void check_kernel_device(const TensorRef& t, const char* name) {
  if (t.device.type == DeviceType::cpu) return;
#if defined(SDM_WITH_CUDA)
  if (t.device.type == DeviceType::cuda) return;
  throw ValueError(name, std::string(name) + " is on " + device_name(t.device) + "; the kernels take cpu and cuda tensors");
#else
  throw ValueError(name, std::string(name) + " is on " + device_name(t.device) +
                             "; this build of sdm has no CUDA support (SDM_ENABLE_CUDA=OFF), only cpu tensors");
#endif
}

}  // namespace

std::int64_t product_key_topk_selected(const TensorRef& raw, std::span<const std::int64_t> factor_dims,
                                       std::int64_t k) {
  return core::plan_product_key_topk(raw, factor_dims, k).selected;
}

void product_key_topk_forward(const TensorRef& raw, std::span<const std::int64_t> factor_dims, std::int64_t k,
                              const TensorRef& values, const TensorRef& slots, const ProductKeyTopkOptions& options) {
  const auto plan = core::plan_product_key_topk(raw, factor_dims, k);
  core::validate_product_key_outputs(plan, raw, values, slots);
  core::check_engine_data({{raw, "raw"}, {values, "values"}, {slots, "slots"}}, {});
  check_kernel_device(raw, "raw");
  if (raw.device.type == DeviceType::cpu) return cpu::product_key_topk_forward(plan, raw, values, slots, options.num_threads);
#if defined(SDM_WITH_CUDA)
  cuda::product_key_topk_forward(plan, raw, values, slots, options.cuda_stream);
#endif
}

void product_key_topk_backward(const TensorRef& slots, const TensorRef& grad_values,
                               std::span<const std::int64_t> factor_dims, const TensorRef& grad_raw,
                               const ProductKeyTopkOptions& options) {
  const auto plan = core::plan_product_key_backward(slots, grad_values, factor_dims, grad_raw);
  core::check_engine_data({{slots, "slots"}, {grad_values, "grad_values"}, {grad_raw, "grad_raw"}}, {});
  check_kernel_device(slots, "slots");
  if (slots.device.type == DeviceType::cpu) {
    if (options.validate) core::check_selected_slots(plan, slots);
    return cpu::product_key_topk_backward(plan, slots, grad_values, grad_raw, options.num_threads);
  }
#if defined(SDM_WITH_CUDA)
  if (options.validate) cuda::check_selected_slots(plan, slots, options.cuda_stream);
  cuda::product_key_topk_backward(plan, slots, grad_values, grad_raw, options.cuda_stream);
#endif
}

}  // namespace sdm

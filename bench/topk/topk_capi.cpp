// topk_capi.cpp - a C entry point to the CUDA product-key top-k launchers, for
// bench/topk/compare_2_0_0.py (ctypes): the comparison with sparse-delta-memory 2.0.0 needs sdm's
// kernels in a Python process without building the torch extension. Device pointers in, the
// launchers of src/cuda/topk (plan as the ops build it, no validation sync); returns 0, or 1 with
// the error's message in `error` (at most error_size bytes, NUL-terminated).
#include <cstdint>
#include <cstdio>
#include <exception>
#include <numeric>
#include <span>

#include "core/product_key_plan.hpp"
#include "cuda/topk/product_key_topk.hpp"

namespace {

sdm::DType score_dtype(int code) { return code == 0 ? sdm::DType::f32 : code == 1 ? sdm::DType::bf16 : sdm::DType::f16; }

sdm::TensorRef matrix(void* data, sdm::DType dtype, std::int64_t rows, std::int64_t cols, std::int64_t stride) {
  sdm::TensorRef ref;
  ref.data = data;
  ref.dtype = dtype;
  ref.device = sdm::Device{sdm::DeviceType::cuda, 0};
  ref.ndim = 2;
  ref.sizes = {rows, cols, 0, 0};
  ref.strides = {stride, 1, 0, 0};
  return ref;
}

int fail(const std::exception& e, char* error, int error_size) {
  if (error != nullptr && error_size > 0) std::snprintf(error, static_cast<std::size_t>(error_size), "%s", e.what());
  return 1;
}

}  // namespace

extern "C" {

// raw [rows, sum(dims)] (row stride row_stride elements; dtype 0 f32, 1 bf16, 2 f16) -> values
// [rows, kk] (raw's dtype), slots [rows, kk] int64, kk = min(k, prod(dims)); on `stream`.
int sdm_topk_forward(const void* raw, int dtype, std::int64_t rows, std::int64_t row_stride, const std::int64_t* dims,
                     int factors, std::int64_t k, void* values, std::int64_t* slots, void* stream, char* error,
                     int error_size) {
  try {
    const std::span<const std::int64_t> d(dims, static_cast<std::size_t>(factors));
    const std::int64_t width = std::accumulate(d.begin(), d.end(), std::int64_t{0});
    const auto t = score_dtype(dtype);
    const sdm::TensorRef raw_ref = matrix(const_cast<void*>(raw), t, rows, width, row_stride);
    const auto plan = sdm::core::plan_product_key_topk(raw_ref, d, k);
    sdm::cuda::product_key_topk_forward(plan, raw_ref, matrix(values, t, rows, plan.selected, plan.selected),
                                        matrix(slots, sdm::DType::i64, rows, plan.selected, plan.selected), stream);
    return 0;
  } catch (const std::exception& e) {
    return fail(e, error, error_size);
  }
}

// slots [rows, kk] int64 and grad_values [rows, kk] (dtype) -> grad_raw [rows, sum(dims)].
int sdm_topk_backward(const std::int64_t* slots, const void* grad_values, int dtype, std::int64_t rows,
                      std::int64_t kk, const std::int64_t* dims, int factors, void* grad_raw, void* stream, char* error,
                      int error_size) {
  try {
    const std::span<const std::int64_t> d(dims, static_cast<std::size_t>(factors));
    const std::int64_t width = std::accumulate(d.begin(), d.end(), std::int64_t{0});
    const auto t = score_dtype(dtype);
    const sdm::TensorRef slots_ref = matrix(const_cast<std::int64_t*>(slots), sdm::DType::i64, rows, kk, kk);
    const sdm::TensorRef grad_ref = matrix(const_cast<void*>(grad_values), t, rows, kk, kk);
    const sdm::TensorRef out_ref = matrix(grad_raw, t, rows, width, width);
    const auto plan = sdm::core::plan_product_key_backward(slots_ref, grad_ref, d, out_ref);
    sdm::cuda::product_key_topk_backward(plan, slots_ref, grad_ref, out_ref, stream);
    return 0;
  } catch (const std::exception& e) {
    return fail(e, error, error_size);
  }
}

}  // extern "C"

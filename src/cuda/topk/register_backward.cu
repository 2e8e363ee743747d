// register_backward.cu - the product-key top-k backward for kk <= 128: the kernels and their
// launcher. Rows of 65..128 entries and width <= kColumnSumsWidth sum their columns in shared
// memory (column_sums.cuh); the others sort their keys in registers (register_scatter.cuh). Both
// give the CPU kernel's bits (the same chains), so the choice decides only the speed. Measured on
// the H200 (docs/performance.md, "Product-key top-k, stop 38"): the column sums are 15-20 % faster
// at k 128 (no 4-key-a-lane sort) and 5-17 % slower at k 64, where the sort is cheap and the
// column walks' serial chains (one lane a column, divergent) dominate.
//
// Grid: one warp per row, 8 rows per 256-thread CTA; instantiated per score dtype and per KMAX in
// {32, 64, 128} (kk <= KMAX). Shared memory per warp: ColumnSums (4.1 KiB) or ScatterLists<KMAX>
// (1 KiB at KMAX 128).
#include "cuda/topk/register_backward.hpp"

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "cuda/common/cuda_check.hpp"
#include "cuda/topk/column_sums.cuh"
#include "cuda/topk/register_scatter.cuh"

namespace sdm::cuda {
namespace {

constexpr int kRowsPerBlock = 8;

struct RegisterBackwardParams {
  const std::int64_t* slots;
  const void* grad_values;
  void* grad_raw;
  std::int64_t rows;
  int factors, selected;
  std::int64_t width, num_slots;
  std::uint32_t dims[kMaxProductKeyFactors];
  std::uint64_t magic[kMaxProductKeyFactors];  // topk::division_magic(dims[f])
};

// kColumnSums: the row's columns summed in shared memory (column_sums.cuh), else its keys sorted
// (register_scatter.cuh).
template <typename S, int KMAX, bool kColumnSums>
__global__ void __launch_bounds__(32 * kRowsPerBlock) register_backward_kernel(RegisterBackwardParams p) {
  using Shared = std::conditional_t<kColumnSums, topk::ColumnSums, topk::ScatterLists<KMAX>>;
  __shared__ Shared per_warp[kRowsPerBlock];
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const std::int64_t row = static_cast<std::int64_t>(blockIdx.x) * kRowsPerBlock + warp;
  if (row >= p.rows) return;
  using Storage = typename S::Storage;
  const topk::ScatterRow shape{p.dims, p.magic, p.factors, p.selected, p.width, p.num_slots};
  const std::int64_t* ids = p.slots + row * p.selected;
  const Storage* grad = static_cast<const Storage*>(p.grad_values) + row * p.selected;
  Storage* out = static_cast<Storage*>(p.grad_raw) + row * p.width;
  if constexpr (kColumnSums) topk::column_sums_row<S, KMAX>(shape, ids, grad, out, per_warp[warp], lane);
  else topk::scatter_row<S, KMAX>(shape, ids, grad, out, per_warp[warp], lane);
}

template <typename S, int KMAX>
void launch_kernel(const RegisterBackwardParams& p, unsigned blocks, cudaStream_t stream) {
  if constexpr (KMAX == 128) {
    if (p.width <= topk::kColumnSumsWidth) {
      register_backward_kernel<S, KMAX, true><<<blocks, 32 * kRowsPerBlock, 0, stream>>>(p);
      return;
    }
  }
  register_backward_kernel<S, KMAX, false><<<blocks, 32 * kRowsPerBlock, 0, stream>>>(p);
}

template <typename S>
void launch_for_k(const RegisterBackwardParams& p, cudaStream_t stream) {
  const auto blocks = static_cast<unsigned>((p.rows + kRowsPerBlock - 1) / kRowsPerBlock);
  if (p.selected <= 32) return launch_kernel<S, 32>(p, blocks, stream);
  if (p.selected <= 64) return launch_kernel<S, 64>(p, blocks, stream);
  launch_kernel<S, 128>(p, blocks, stream);
}

}  // namespace

bool register_backward_fits(const core::ProductKeyPlan& plan) {
  if (plan.selected > 128) return false;
  for (const auto w : plan.dims) {
    if (w > (std::int64_t{1} << 24)) return false;
  }
  return plan.dtype == DType::f32 || plan.dtype == DType::bf16 || plan.dtype == DType::f16;
}

void register_backward(const core::ProductKeyPlan& plan, const TensorRef& slots, const TensorRef& grad_values,
                       const TensorRef& grad_raw, void* cuda_stream) {
  RegisterBackwardParams p{};
  p.slots = slots.data_as<const std::int64_t>();
  p.grad_values = grad_values.data;
  p.grad_raw = grad_raw.data;
  p.rows = plan.rows;
  p.factors = static_cast<int>(plan.dims.size());
  p.selected = static_cast<int>(plan.selected);
  p.width = plan.width;
  p.num_slots = plan.slots;
  for (std::size_t f = 0; f < plan.dims.size(); ++f) {
    p.dims[f] = static_cast<std::uint32_t>(plan.dims[f]);
    p.magic[f] = topk::division_magic(p.dims[f]);
  }
  const cudaStream_t stream = stream_of(cuda_stream);
  if (plan.dtype == DType::f32) launch_for_k<topk::F32Scores>(p, stream);
  else if (plan.dtype == DType::bf16) launch_for_k<topk::BF16Scores>(p, stream);
  else launch_for_k<topk::F16Scores>(p, stream);
  check_launch("product-key top-k backward (register_backward.cu)");
}

}  // namespace sdm::cuda

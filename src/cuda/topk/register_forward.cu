// register_forward.cu - the product-key top-k forward, keys in registers: the kernel and its
// launcher (the row's math, decomposition and numerics: register_select.cuh).
//
// Grid: one warp per row, 8 rows per 256-thread CTA; the kernel is instantiated per score dtype
// and per KMAX in {32, 64, 128} (k <= KMAX: the candidates per lane and the kept list's length).
// Shared memory: StageLists<KMAX> per warp (3 KB at KMAX 128).
#include "cuda/topk/register_forward.hpp"

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common/cuda_check.hpp"
#include "cuda/topk/register_select.cuh"

namespace sdm::cuda {
namespace {

constexpr int kRowsPerBlock = 8;

struct RegisterForwardParams {
  const void* raw;
  void* values;
  std::int64_t* slots;
  std::int64_t rows, row_stride, selected;
  int factors, k;
  bool wide_ids;
  std::uint32_t dims[kMaxProductKeyFactors];
};

// CTAs per SM the register budget must allow: 4 at KMAX 32 / 64 (64 registers; every dtype's
// factor keys are 32-bit, f32's 64-bit re-rank is out of line; measured on the H200 with 32-bit
// keys: 1-4 % faster than the unconstrained allocation, docs/performance.md "Product-key top-k
// v3"), 3 at KMAX 128 (80 registers), where the last stage's id sort is unrolled (store_by_id),
// which at 64 registers spills the pair stage's candidates (measured on the H100 against the
// 4-CTA kernel with the sort as a loop: 2x256 k 128 4 % faster in bf16, 0.5 % in f32;
// docs/performance.md "Product-key top-k, stop 48").
template <int KMAX>
constexpr int min_blocks() {
  return KMAX == 128 ? 3 : 4;
}

template <typename S, int KMAX>
__global__ void __launch_bounds__(32 * kRowsPerBlock, min_blocks<KMAX>())
    register_forward_kernel(RegisterForwardParams p) {
  __shared__ topk::StageLists<KMAX> lists[kRowsPerBlock];
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const std::int64_t row = static_cast<std::int64_t>(blockIdx.x) * kRowsPerBlock + warp;
  if (row >= p.rows) return;
  using Storage = typename S::Storage;
  const topk::RegisterRow shape{p.dims, p.factors, p.k, p.wide_ids};
  const auto* x = static_cast<const Storage*>(p.raw) + row * p.row_stride;
  topk::select_row<S, KMAX>(shape, x, static_cast<Storage*>(p.values) + row * p.selected, p.slots + row * p.selected,
                            lists[warp], lane);
}

template <typename S>
void launch_for_k(const RegisterForwardParams& p, cudaStream_t stream) {
  const auto blocks = static_cast<unsigned>((p.rows + kRowsPerBlock - 1) / kRowsPerBlock);
  if (p.k <= 32) return register_forward_kernel<S, 32><<<blocks, 32 * kRowsPerBlock, 0, stream>>>(p);
  if (p.k <= 64) return register_forward_kernel<S, 64><<<blocks, 32 * kRowsPerBlock, 0, stream>>>(p);
  register_forward_kernel<S, 128><<<blocks, 32 * kRowsPerBlock, 0, stream>>>(p);
}

}  // namespace

bool register_forward_fits(const core::ProductKeyPlan& plan) {
  if (plan.dims.size() < 2 || plan.k > topk::kRegisterMaxK) return false;
  for (const auto w : plan.dims) {
    if (w > topk::kRegisterMaxWidth) return false;
  }
  return plan.dtype == DType::f32 || plan.dtype == DType::bf16 || plan.dtype == DType::f16;
}

void register_forward(const core::ProductKeyPlan& plan, const TensorRef& raw, const TensorRef& values,
                      const TensorRef& slots, void* cuda_stream) {
  RegisterForwardParams p{};
  p.raw = raw.data;
  p.values = values.data;
  p.slots = slots.data_as<std::int64_t>();
  p.rows = plan.rows;
  p.row_stride = raw.strides[0];
  p.selected = plan.selected;
  p.factors = static_cast<int>(plan.dims.size());
  p.k = static_cast<int>(plan.k);
  p.wide_ids = plan.slots > (std::int64_t{1} << 24);
  for (std::size_t f = 0; f < plan.dims.size(); ++f) p.dims[f] = static_cast<std::uint32_t>(plan.dims[f]);
  const cudaStream_t stream = stream_of(cuda_stream);
  if (plan.dtype == DType::f32) launch_for_k<topk::F32Scores>(p, stream);
  else if (plan.dtype == DType::bf16) launch_for_k<topk::BF16Scores>(p, stream);
  else launch_for_k<topk::F16Scores>(p, stream);
  check_launch("register_forward_kernel");
}

}  // namespace sdm::cuda

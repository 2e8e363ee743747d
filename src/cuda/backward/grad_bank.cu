// grad_bank.cu - the gradient bank G of the CUDA backward (docs/spec.md §4).
//
// Row dtype between chunks: bf16 for a bf16 bank with grad_bank_fp32 == false, else f32 (inside a
// chunk the backward works in f32 and rounds a touched row once). Storage (backward.cu picks it):
// grad_memory itself when it has that dtype, else a workspace buffer of the P*sps stream rows.
//   init_grad_bank    G[r] = rnd_rows(grad_final_bank[r]), rows [0, rows); without grad_final_bank
//                     a cudaMemsetAsync to 0 (all-zero bits are +0 in f32 and in bf16)
//   finish_grad_bank  grad_memory[r] = G[r] for r < P*sps, grad_final_bank[r] (or 0) beyond: rows
//                     the op never touches keep the incoming gradient
// One thread per element, grid-stride; elementwise conversions only (exact, order-free).
#include "cuda/backward/backward.hpp"
#include "cuda/common/rows.cuh"
#include "cuda/common/cuda_check.hpp"
#include "cuda/common/dispatch.hpp"

namespace sdm::cuda {
namespace {

constexpr int kThreads = 256;

unsigned blocks_for(std::int64_t items) {
  const std::int64_t blocks = (items + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < 65536 ? blocks : 65536);
}

template <typename Gt>
__global__ void init_rows(Gt* __restrict__ rows, std::int64_t count, AnyFloat final_bank) {
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    rows[i] = from_f32<Gt>(load_any(final_bank.data, final_bank.dtype, i));
  }
}

template <typename Gt>
__global__ void finish_rows(const Gt* __restrict__ rows, std::int64_t stream_count, std::int64_t count,
                            AnyFloat final_bank, AnyFloat out) {
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    float x = 0.0f;
    if (i < stream_count) x = to_f32(rows[i]);
    else if (final_bank.data != nullptr) x = load_any(final_bank.data, final_bank.dtype, i);
    store_any(out.data, out.dtype, i, x);
  }
}

}  // namespace

void init_grad_bank(const Geometry& geo, const BackwardBuffers& bb, std::int64_t rows, AnyFloat grad_final_bank,
                    cudaStream_t stream) {
  const std::int64_t count = rows * geo.hd;
  if (grad_final_bank.data == nullptr) {
    const std::size_t bytes = static_cast<std::size_t>(count) * (bb.bf16_grad_rows ? sizeof(Bf16Bits) : sizeof(float));
    check_cuda(cudaMemsetAsync(bb.grad_rows, 0, bytes, stream), "cudaMemsetAsync (gradient bank)");
    return;
  }
  dispatch(
      [&](auto row) {
        using Gt = typename decltype(row)::type;
        init_rows<<<blocks_for(count), kThreads, 0, stream>>>(static_cast<Gt*>(bb.grad_rows), count, grad_final_bank);
      },
      Rows{bb.bf16_grad_rows});
  check_launch("init_rows (gradient bank)");
}

void finish_grad_bank(const Geometry& geo, const BackwardBuffers& bb, std::int64_t bank_rows,
                      AnyFloat grad_final_bank, AnyFloat grad_memory, cudaStream_t stream) {
  const std::int64_t count = bank_rows * geo.hd, stream_count = geo.P * geo.sps * geo.hd;
  dispatch(
      [&](auto row) {
        using Gt = typename decltype(row)::type;
        finish_rows<<<blocks_for(count), kThreads, 0, stream>>>(static_cast<const Gt*>(bb.grad_rows), stream_count,
                                                                count, grad_final_bank, grad_memory);
      },
      Rows{bb.bf16_grad_rows});
  check_launch("finish_rows (gradient bank)");
}

}  // namespace sdm::cuda

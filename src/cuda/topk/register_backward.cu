// register_backward.cu - the product-key top-k backward for kk <= 128: the kernels and their
// launcher. A row of width <= 1024 whose gradient row takes at most kColumnWalkRowBytes (2 KiB: bf16
// / f16 up to 1024 columns, f32 up to 512) walks each column's linked entries (column_walk.cuh);
// another row of width <= 1024 sums its columns in shared memory and stores the row once
// (column_sums.cuh); a wider one sorts its keys in registers and stores each column's sum into the
// zeroed global row (register_scatter.cuh). All give the CPU kernel's bits (the same chains).
// SDM_TOPK_BWD=walk | sums forces one of the first two where the width allows it (read once per
// process: tests and A/Bs). Measured on the H100 (docs/performance.md, "Stop 51"): the walk against
// the column sums 4-18 % faster at 2x256 (k 64, 128; bf16, f32), 2x512 bf16 and 3x64, 14 % slower at
// 2x512 f32 (a 4 KiB row zeroed, then scattered 4-byte stores), hence the row bytes. Earlier
// (stop 48): the column sums at every k against stop 38's rule (the sort below k 65) from 3-4 %
// slower (2x512 k 64 bf16) to 25 % faster (2x512 k 64 f32); the sort into a shared row, lanes found
// by shared atomicOr words instead of __match_any_sync, warps prefetching their next row and column
// masks (stop 50: each column's entries as shared bit masks, up to 1.9x slower) all lost and are
// gone.
//
// Grid: one warp per row, 8 rows per 256-thread CTA; instantiated per score dtype, per KMAX in
// {32, 64, 128} (kk <= KMAX) and per path. Dynamic shared memory per warp: warp_bytes (the column
// walk's byte table sized to the width and 12 bytes an entry: 6.1 KB a CTA at 2x256 k 64; the
// column sums' row sized to the width: 17.4 KB a CTA at 2x256, 33.8 KB at 1024; the sort's 2 KMAX
// floats).
// Launch bounds (min_blocks): a full SM (kFullBlocks CTAs: 32 registers a thread on sm_80 / 90, 40
// on sm_86 / 87 / 89) for the bf16 and f16 column sums at KMAX 32 / 64, which ptxas compiles
// without spills under it (cuobjdump -res-usage: STACK 0); none for f32's column sums (8 bytes of
// stack a thread at 32 registers), the column sums at KMAX 128, the walk (30-40 registers, no
// bound measured) and the sort (unbounded as measured), nor on other architectures (e.g. sm_120,
// where 8 CTAs of 256 threads exceed the SM's threads).
#include "cuda/topk/register_backward.hpp"

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "core/env_knobs.hpp"
#include "cuda/common/cuda_check.hpp"
#include "cuda/topk/column_sums.cuh"
#include "cuda/topk/column_walk.cuh"
#include "cuda/topk/register_scatter.cuh"
#include "cuda/topk/row_entries.cuh"

namespace sdm::cuda {
namespace {

constexpr int kRowsPerBlock = 8;

// CTAs of 256 threads an SM holds at most: 8 on sm_80 and sm_90 (2048 threads), 6 on sm_86, sm_87
// and sm_89 (1536): the bound that caps a bounded kernel at 32 registers (40 on 6-CTA devices).
// 0 (no bound) on every other architecture and in the host pass.
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ == 800 || __CUDA_ARCH__ == 900)
constexpr int kFullBlocks = 8;
#elif defined(__CUDA_ARCH__) && (__CUDA_ARCH__ == 860 || __CUDA_ARCH__ == 870 || __CUDA_ARCH__ == 890)
constexpr int kFullBlocks = 6;
#else
constexpr int kFullBlocks = 0;
#endif

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

enum class RowPath { column_walk, column_sums, sort };

// The widest gradient row (bytes) the column walk takes by default (see the file's comment).
constexpr std::int64_t kColumnWalkRowBytes = 2048;

// The path of a row (see the file's comment); `bytes`: the score dtype's size.
inline RowPath row_path(const RegisterBackwardParams& p, std::int64_t bytes) {
  static const int forced = 1 + core::env_choice("SDM_TOPK_BWD", {"walk", "sums"});  // 0: the rule, 1: walk, 2: sums
  static_assert(topk::kColumnWalkWidth == topk::kColumnSumsWidth);
  if (p.width > topk::kColumnWalkWidth) return RowPath::sort;
  if (forced != 0) return forced == 1 ? RowPath::column_walk : RowPath::column_sums;
  return p.width * bytes <= kColumnWalkRowBytes ? RowPath::column_walk : RowPath::column_sums;
}

// A warp's shared bytes (a multiple of 16: every warp's part 16-byte aligned).
template <int KMAX, RowPath kPath>
__host__ __device__ constexpr std::int64_t warp_bytes(const RegisterBackwardParams& p) {
  if constexpr (kPath == RowPath::column_walk) return topk::column_walk_bytes(p.width, KMAX);
  else if constexpr (kPath == RowPath::column_sums) return topk::column_floats(p.width) * 4;
  else return topk::kScatterFloats<KMAX> * 4;
}

// The kernel's min-blocks bound (see the file's comment): kFullBlocks where spill-free, else 0.
template <typename S, int KMAX, RowPath kPath>
constexpr int min_blocks() {
  if (kPath != RowPath::column_sums || KMAX == 128) return 0;  // unbounded as measured
  if (std::is_same_v<S, topk::F32Scores>) return 0;            // spills at 32 registers
  return kFullBlocks;
}

template <typename S, int KMAX, RowPath kPath>
__global__ void __launch_bounds__(32 * kRowsPerBlock, (min_blocks<S, KMAX, kPath>()))
    register_backward_kernel(RegisterBackwardParams p) {
  extern __shared__ float4 shared_words[];
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const std::int64_t row = static_cast<std::int64_t>(blockIdx.x) * kRowsPerBlock + warp;
  if (row >= p.rows) return;
  using Storage = typename S::Storage;
  unsigned char* const shared = reinterpret_cast<unsigned char*>(shared_words) + warp * warp_bytes<KMAX, kPath>(p);
  const topk::ScatterRow shape{p.dims, p.magic, p.factors, p.selected, p.width, p.num_slots};
  const std::int64_t* ids = p.slots + row * p.selected;
  const Storage* grad = static_cast<const Storage*>(p.grad_values) + row * p.selected;
  Storage* out = static_cast<Storage*>(p.grad_raw) + row * p.width;
  topk::RowEntries<KMAX / 32> in;
  if constexpr (kPath == RowPath::column_walk) {
    topk::load_by_batch<S>(ids, grad, p.selected, lane, in);
    topk::column_walk_row<S, KMAX>(shape, in, out, shared, lane);
  } else if constexpr (kPath == RowPath::column_sums) {
    topk::load_by_batch<S>(ids, grad, p.selected, lane, in);
    topk::column_sums_row<S, KMAX>(shape, in, out, reinterpret_cast<float*>(shared), lane);
  } else {
    topk::load_by_lane<S>(ids, grad, p.selected, lane, in);
    topk::scatter_row<S, KMAX>(shape, in, out, reinterpret_cast<float*>(shared), lane);
  }
}

template <typename S, int KMAX, RowPath kPath>
void launch_kernel(const RegisterBackwardParams& p, unsigned blocks, cudaStream_t stream) {
  const auto smem = static_cast<std::size_t>(kRowsPerBlock * warp_bytes<KMAX, kPath>(p));
  register_backward_kernel<S, KMAX, kPath><<<blocks, 32 * kRowsPerBlock, smem, stream>>>(p);
}

template <typename S, int KMAX>
void launch_path(const RegisterBackwardParams& p, unsigned blocks, cudaStream_t stream) {
  switch (row_path(p, static_cast<std::int64_t>(sizeof(typename S::Storage)))) {
    case RowPath::column_walk: return launch_kernel<S, KMAX, RowPath::column_walk>(p, blocks, stream);
    case RowPath::column_sums: return launch_kernel<S, KMAX, RowPath::column_sums>(p, blocks, stream);
    case RowPath::sort: return launch_kernel<S, KMAX, RowPath::sort>(p, blocks, stream);
  }
}

template <typename S>
void launch_for_k(const RegisterBackwardParams& p, cudaStream_t stream) {
  const auto blocks = static_cast<unsigned>((p.rows + kRowsPerBlock - 1) / kRowsPerBlock);
  if (p.selected <= 32) return launch_path<S, 32>(p, blocks, stream);
  if (p.selected <= 64) return launch_path<S, 64>(p, blocks, stream);
  launch_path<S, 128>(p, blocks, stream);
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

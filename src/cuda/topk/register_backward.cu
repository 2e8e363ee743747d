// register_backward.cu - the product-key top-k backward for kk <= 128: the kernel and its launcher.
// A row takes one of four paths, all giving the CPU kernel's bits (the same chains):
//   sort     keys sorted in registers, global row zeroed, each column's sum stored where it is
//            (register_scatter.cuh)
//   sorted   the same sort, the sums into a shared float row, stored once (register_scatter.cuh,
//            kSharedRow; width <= kSharedRowWidth)
//   columns  the columns summed in a shared float row batch by batch (__match_any_sync), stored
//            once (column_sums.cuh; width <= kSharedRowWidth)
//   claims   the same, a column's lanes found by integer atomicOr on a shared word a digit
//            instead of __match_any_sync (column_sums.cuh, kClaims; claims_fit: 2x256, 3x64, not 2x512)
// Variants (register_backward_variant(), SDM_TOPK_BWD_VARIANT):
//   0  columns at 65..128 entries (width <= 1024), else sort: measured on the H200 (stop 38) the
//      column sums are 15-20 % faster at k 128 and 5-17 % slower at k 64 (then with a 4.1 KiB
//      shared row a warp whatever the width; now sized to the width)
//   1  columns wherever width <= 1024, else sort
//   2  sorted wherever width <= 1024, else sort
//   3  claims wherever claims_fit, else as 1
//   4, 5, 6, 7  as 0, 1, 2, 3, with prefetching warps: a grid of at most the resident CTAs, each warp
//      walking rows at a stride of the grid's warps and loading its next row's entries
//      (row_entries.cuh) before it works on this one (the loads' latency under the work).
// Launch bounds (min_blocks): a full SM (kFullBlocks CTAs: 32 registers a thread on sm_90) only
// for the kernels that ptxas compiles without spills under it (cuobjdump -res-usage on sm_90:
// STACK 0); the rest unbounded: main's two kernels (the plain sort, the columns at KMAX 128: v0's
// paths, unbounded in main), f32's shared-row kernels, f16's sorted at KMAX 128 and the
// prefetching kernels at KMAX 64 / 128 (each spilled 8-120 bytes a thread at 32 registers), and
// on sm_80 the KMAX 128 kernels (bf16 sorted, f16 claims spill there; sm_86 / 89 at 40: none).
// Only on the architectures whose full SM is known (sm_80 / 90: 8 CTAs, sm_86 / 87 / 89: 6);
// none elsewhere (e.g. sm_120, where 8 CTAs of 256 threads exceed the SM's threads).
//
// Grid: one warp per row, 8 rows per 256-thread CTA; instantiated per score dtype, per KMAX in
// {32, 64, 128} (kk <= KMAX), per path and loop. Dynamic shared memory per warp: warp_floats.
#include "cuda/topk/register_backward.hpp"

#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <type_traits>

#include "cuda/common/cuda_check.hpp"
#include "cuda/topk/column_sums.cuh"
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
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ == 800
constexpr bool kSm80 = true;  // where bf16's sorted and f16's claims at KMAX 128 spill at 32 registers
#else
constexpr bool kSm80 = false;
#endif

struct RegisterBackwardParams {
  const std::int64_t* slots;
  const void* grad_values;
  void* grad_raw;
  std::int64_t rows;
  int factors, selected;
  std::int64_t width, num_slots, widest;
  std::uint32_t dims[kMaxProductKeyFactors];
  std::uint64_t magic[kMaxProductKeyFactors];  // topk::division_magic(dims[f])
};

enum class RowPath { sort, sorted, columns, claims };
template <RowPath P>
inline constexpr bool kBatches = P == RowPath::columns || P == RowPath::claims;  // column_sums.cuh's rows

// A warp's shared floats (a multiple of 4: every warp's part 16-byte aligned).
template <RowPath P, int KMAX>
__host__ __device__ constexpr std::int64_t warp_floats(const RegisterBackwardParams& p) {
  if constexpr (kBatches<P>) return topk::column_floats<P == RowPath::claims>(p.width, p.widest);
  else return topk::scatter_floats<KMAX, P == RowPath::sorted>(p.width);
}

template <typename S, int KMAX, RowPath P>
__device__ __forceinline__ void load_row(const RegisterBackwardParams& p, std::int64_t row, int lane,
                                         topk::RowEntries<KMAX / 32>& x) {
  const std::int64_t* ids = p.slots + row * p.selected;
  const auto* grad = static_cast<const typename S::Storage*>(p.grad_values) + row * p.selected;
  if constexpr (kBatches<P>) topk::load_by_batch<S>(ids, grad, p.selected, lane, x);
  else topk::load_by_lane<S>(ids, grad, p.selected, lane, x);
}

// The kernel's min-blocks bound (see the file's comment): kFullBlocks where spill-free, else 0.
template <typename S, int KMAX, RowPath P, bool kPrefetch>
constexpr int min_blocks() {
  if (!kPrefetch && P == RowPath::sort) return 0;                      // main's sort kernel (v0)
  if (!kPrefetch && P == RowPath::columns && KMAX == 128) return 0;    // main's columns kernel (v0)
  if (kPrefetch) return KMAX == 32 ? kFullBlocks : 0;                  // spills at KMAX 64 / 128
  if (std::is_same_v<S, topk::F32Scores>) return 0;                    // spills at every KMAX
  if (std::is_same_v<S, topk::F16Scores> && P == RowPath::sorted && KMAX == 128) return 0;  // spills
  if (kSm80 && KMAX == 128) return 0;                                  // spills on sm_80
  return kFullBlocks;
}

template <typename S, int KMAX, RowPath P, bool kPrefetch>
__global__ void __launch_bounds__(32 * kRowsPerBlock, (min_blocks<S, KMAX, P, kPrefetch>()))
    register_backward_kernel(RegisterBackwardParams p) {
  extern __shared__ float4 shared_words[];
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  float* const shared = reinterpret_cast<float*>(shared_words) + warp * warp_floats<P, KMAX>(p);
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * kRowsPerBlock;
  std::int64_t row = static_cast<std::int64_t>(blockIdx.x) * kRowsPerBlock + warp;
  if (row >= p.rows) return;
  const topk::ScatterRow shape{p.dims, p.magic, p.factors, p.selected, p.width, p.num_slots, p.widest};
  if constexpr (P == RowPath::claims) topk::clear_claims(shared, p.width, p.widest, lane);
  topk::RowEntries<KMAX / 32> here, ahead{};
  load_row<S, KMAX, P>(p, row, lane, here);
  for (;;) {
    const bool more = kPrefetch && row + stride < p.rows;  // the same for the whole warp
    if (more) load_row<S, KMAX, P>(p, row + stride, lane, ahead);
    auto* out = static_cast<typename S::Storage*>(p.grad_raw) + row * p.width;
    if constexpr (kBatches<P>) topk::column_sums_row<S, KMAX, P == RowPath::claims>(shape, here, out, shared, lane);
    else topk::scatter_row<S, KMAX, P == RowPath::sorted>(shape, here, out, shared, lane);
    if (!more) return;
    __syncwarp();  // this row's reads of the warp's shared floats before the next row's writes
    here = ahead;
    row += stride;
  }
}

// kPrefetch: at most the CTAs that fit on the device at once (looked up once per kernel and
// shared memory size; the grid decides only the speed, as the warps stride over every row).
template <typename S, int KMAX, RowPath P, bool kPrefetch>
void launch_kernel(const RegisterBackwardParams& p, cudaStream_t stream) {
  const auto kernel = register_backward_kernel<S, KMAX, P, kPrefetch>;
  const auto smem = static_cast<std::size_t>(kRowsPerBlock * warp_floats<P, KMAX>(p)) * sizeof(float);
  auto blocks = static_cast<std::uint64_t>((p.rows + kRowsPerBlock - 1) / kRowsPerBlock);
  if constexpr (kPrefetch) {
    static std::atomic<std::uint64_t> resident{0};  // smem << 32 | CTAs, 0 before the first look-up
    std::uint64_t known = resident.load(std::memory_order_relaxed);
    if (known == 0 || known >> 32 != smem) {
      int device = 0, sms = 0, per_sm = 0;
      check_cuda(cudaGetDevice(&device), "cudaGetDevice");
      check_cuda(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), "cudaDeviceGetAttribute");
      check_cuda(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, 32 * kRowsPerBlock, smem),
                 "cudaOccupancyMaxActiveBlocksPerMultiprocessor");
      known = static_cast<std::uint64_t>(smem) << 32 | static_cast<std::uint64_t>(sms > 0 && per_sm > 0 ? sms * per_sm : 1);
      resident.store(known, std::memory_order_relaxed);
    }
    const std::uint64_t fit = known & 0xffffffffu;
    if (blocks > fit) blocks = fit;
  }
  kernel<<<static_cast<unsigned>(blocks), 32 * kRowsPerBlock, smem, stream>>>(p);
}

template <typename S, int KMAX, bool kPrefetch>
void launch_path(const RegisterBackwardParams& p, int path_rule, cudaStream_t stream) {
  const bool narrow = p.width <= topk::kSharedRowWidth;
  if (path_rule == 3 && narrow && topk::claims_fit(p.width, p.widest)) {
    return launch_kernel<S, KMAX, RowPath::claims, kPrefetch>(p, stream);
  }
  if (narrow && (path_rule == 1 || path_rule == 3 || (path_rule == 0 && KMAX == 128))) {
    return launch_kernel<S, KMAX, RowPath::columns, kPrefetch>(p, stream);
  }
  if (narrow && path_rule == 2) return launch_kernel<S, KMAX, RowPath::sorted, kPrefetch>(p, stream);
  launch_kernel<S, KMAX, RowPath::sort, kPrefetch>(p, stream);
}

template <typename S, int KMAX>
void launch_variant(const RegisterBackwardParams& p, cudaStream_t stream) {
  const int variant = register_backward_variant();
  if (variant >= 4) return launch_path<S, KMAX, true>(p, variant - 4, stream);
  launch_path<S, KMAX, false>(p, variant, stream);
}

template <typename S>
void launch_for_k(const RegisterBackwardParams& p, cudaStream_t stream) {
  if (p.selected <= 32) return launch_variant<S, 32>(p, stream);
  if (p.selected <= 64) return launch_variant<S, 64>(p, stream);
  launch_variant<S, 128>(p, stream);
}

std::atomic<int>& variant_setting() {
  static std::atomic<int> variant{[] {
    const char* value = std::getenv("SDM_TOPK_BWD_VARIANT");
    const int n = value != nullptr ? std::atoi(value) : 0;
    return n >= 0 && n < kRegisterBackwardVariants ? n : 0;
  }()};
  return variant;
}

}  // namespace

int register_backward_variant() { return variant_setting().load(std::memory_order_relaxed); }
void set_register_backward_variant(int variant) {
  variant_setting().store(variant >= 0 && variant < kRegisterBackwardVariants ? variant : 0, std::memory_order_relaxed);
}

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
    p.widest = p.dims[f] > p.widest ? p.dims[f] : p.widest;
    p.magic[f] = topk::division_magic(p.dims[f]);
  }
  const cudaStream_t stream = stream_of(cuda_stream);
  if (plan.dtype == DType::f32) launch_for_k<topk::F32Scores>(p, stream);
  else if (plan.dtype == DType::bf16) launch_for_k<topk::BF16Scores>(p, stream);
  else launch_for_k<topk::F16Scores>(p, stream);
  check_launch("product-key top-k backward (register_backward.cu)");
}

}  // namespace sdm::cuda

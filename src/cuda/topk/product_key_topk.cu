// product_key_topk.cu - CUDA product-key top-k, forward and backward (the rule:
// include/sdm/product_key_topk.hpp; the CPU kernels in src/cpu/topk compute the same bits).
//
// Forward: two or more factors of width <= 512 with k <= 128 (the layer's shapes) run on the
// register kernel (register_forward.cu); every other call runs on the general kernel below. So
// does the backward: kk <= 128 runs on register_backward.cu.
// General forward: one warp per row, its lists in shared memory (RowScratch, sized for k <= KMAX).
//   factor f: the m = min(k, n_f) best columns by (score_key(value) << column bits | column),
//     a radix select (warp_kth_largest) then a bitonic sort, best first;
//   stage f: the candidate rank pairs (i, j), (i + 1) * (j + 1) <= c, enumerated through the
//     prefix sums of their row lengths min(m, c / (i + 1)), keyed
//     (score_key(running[i] + factor[j]) << 16 | (i + j) << 8 | i); the c largest are selected,
//     then sorted into the next running list (sums rounded to a 16-bit input dtype) or, at the
//     last stage, by slot id for the output.
// Backward: one warp per row zeroes its gradient row; per factor the (column, position) keys of
// the selected slots are sorted and the first position of each column sums its run in position
// order (float32) and stores it once. No floating-point atomics: the integer histogram counts
// are the only atomics, and counts do not depend on their order.
// Numerics: float32 sums (__fadd_rn), one rounding per stored value: the CPU kernel's bits.
#include "cuda/topk/product_key_topk.hpp"

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "core/float_convert.hpp"
#include "core/product_key_plan.hpp"
#include "cuda/common/cuda_check.hpp"
#include "cuda/topk/register_backward.hpp"
#include "cuda/topk/register_forward.hpp"
#include "cuda/topk/score_types.cuh"
#include "cuda/topk/warp_select.cuh"
#include "sdm/error.hpp"

namespace sdm::cuda {
namespace {

using topk::kFullMask;

// The factor widths travel in the kernel parameters (512 x 4 bytes).
struct FactorList {
  std::uint32_t dims[kMaxProductKeyFactors];
  int count;
  std::int64_t width;  // sum of dims
};

struct ForwardParams {
  const void* raw;
  void* values;
  std::int64_t* slots;
  std::int64_t rows, row_stride, k, selected;
  FactorList factors;
};

struct BackwardParams {
  const std::int64_t* slots;
  const void* grad_values;
  void* grad_raw;
  std::int64_t rows, selected, num_slots;
  FactorList factors;
};

using topk::BF16Scores;
using topk::F16Scores;
using topk::F32Scores;

__host__ __device__ constexpr int max_pairs(int kmax) {
  int n = 0;
  for (int i = 1; i <= kmax; ++i) n += kmax / i;
  return n;
}

__host__ __device__ constexpr int warps_per_block(int kmax) { return kmax >= 256 ? 2 : 4; }

template <int KMAX>
struct RowScratch {
  unsigned hist[256];
  float running_val[KMAX];
  std::uint32_t running_id[KMAX];
  float factor_val[KMAX];
  std::uint32_t factor_col[KMAX];
  float out_val[KMAX];
  int pair_start[KMAX + 1];
  std::uint16_t pair_code[max_pairs(KMAX)];  // i << 8 | j
  std::uint64_t list[KMAX];
};

__device__ __forceinline__ int bit_width(std::uint64_t x) { return x == 0 ? 0 : 64 - __clzll(static_cast<long long>(x)); }

__device__ __forceinline__ int pow2_at_least(int x) {
  int p = 1;
  while (p < x) p *= 2;
  return p;
}

// factor_val / factor_col: the m best columns of x[0..width), best first.
template <typename S, int KMAX>
__device__ void rank_factor(const typename S::Storage* x, std::uint32_t width, int m, RowScratch<KMAX>& s, int lane) {
  const int col_bits = bit_width(width - 1);
  const auto key = [&](std::int64_t c) {
    return static_cast<std::uint64_t>(core::score_key(S::load(x[c]))) << col_bits | static_cast<std::uint64_t>(c);
  };
  const std::uint64_t threshold = topk::warp_kth_largest(key, width, m, 32 + col_bits, s.hist, lane);
  topk::warp_compact(key, width, threshold, s.list, lane);
  const int n = pow2_at_least(m);
  for (int e = m + lane; e < n; e += 32) s.list[e] = 0;  // real keys are > 0 (score_key(-inf) > 0)
  __syncwarp();
  topk::warp_bitonic_sort<true>(s.list, n, lane);
  const std::uint64_t col_mask = (std::uint64_t{1} << col_bits) - 1;
  for (int r = lane; r < m; r += 32) {
    const auto c = static_cast<std::uint32_t>(s.list[r] & col_mask);
    s.factor_col[r] = c;
    s.factor_val[r] = S::load(x[c]);
  }
  __syncwarp();
}

// Writes entries (id, value) of the `count` (id, position) keys in s.list after sorting them
// by id: out_slots / out_values of one row.
template <typename S, int KMAX>
__device__ void store_by_id(RowScratch<KMAX>& s, int count, typename S::Storage* out_values, std::int64_t* out_slots,
                            int lane) {
  const int n = pow2_at_least(count);
  for (int e = count + lane; e < n; e += 32) s.list[e] = ~std::uint64_t{0};
  __syncwarp();
  topk::warp_bitonic_sort<false>(s.list, n, lane);
  for (int e = lane; e < count; e += 32) {
    out_slots[e] = static_cast<std::int64_t>(s.list[e] >> 8);
    out_values[e] = S::store(s.out_val[s.list[e] & 0xffu]);
  }
}

template <typename S, int KMAX>
__global__ void __launch_bounds__(32 * warps_per_block(KMAX)) product_key_topk_forward_kernel(ForwardParams p) {
  __shared__ RowScratch<KMAX> scratch[warps_per_block(KMAX)];
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const std::int64_t row = static_cast<std::int64_t>(blockIdx.x) * warps_per_block(KMAX) + warp;
  if (row >= p.rows) return;
  RowScratch<KMAX>& s = scratch[warp];
  const auto* x = static_cast<const typename S::Storage*>(p.raw) + row * p.row_stride;
  auto* out_values = static_cast<typename S::Storage*>(p.values) + row * p.selected;
  std::int64_t* out_slots = p.slots + row * p.selected;
  const int k = static_cast<int>(p.k);

  std::uint32_t width = p.factors.dims[0];
  int n = width < static_cast<std::uint32_t>(k) ? static_cast<int>(width) : k;
  rank_factor<S>(x, width, n, s, lane);
  for (int r = lane; r < n; r += 32) {
    s.running_val[r] = s.factor_val[r];
    s.running_id[r] = s.factor_col[r];
  }
  __syncwarp();
  if (p.factors.count == 1) {
    for (int r = lane; r < n; r += 32) {
      s.list[r] = static_cast<std::uint64_t>(s.running_id[r]) << 8 | static_cast<std::uint64_t>(r);
      s.out_val[r] = s.running_val[r];
    }
    __syncwarp();
    return store_by_id<S>(s, n, out_values, out_slots, lane);
  }

  std::int64_t offset = width;
  for (int f = 1; f < p.factors.count; ++f) {
    width = p.factors.dims[f];
    const int m = width < static_cast<std::uint32_t>(k) ? static_cast<int>(width) : k;
    rank_factor<S>(x + offset, width, m, s, lane);
    offset += width;
    const int c = static_cast<std::int64_t>(n) * m < k ? n * m : k;
    const bool last = f + 1 == p.factors.count;

    // Row i of the candidates holds min(m, c / (i + 1)) pairs (none from i = c on).
    constexpr int kPerLane = KMAX / 32;
    int len[kPerLane], local = 0;
#pragma unroll
    for (int q = 0; q < kPerLane; ++q) {
      const int i = lane * kPerLane + q;
      len[q] = i < n && i < c ? min(m, c / (i + 1)) : 0;
      local += len[q];
    }
    int start = static_cast<int>(topk::warp_exclusive_sum(static_cast<unsigned>(local), lane));
    const int inclusive = start + local;
#pragma unroll
    for (int q = 0; q < kPerLane; ++q) {
      s.pair_start[lane * kPerLane + q] = start;
      start += len[q];
    }
    const int pairs = __shfl_sync(kFullMask, inclusive, 31);
    if (lane == 0) s.pair_start[KMAX] = pairs;
    __syncwarp();
    for (int t = lane; t < pairs; t += 32) {
      int lo = 0, hi = KMAX;  // the last row i with pair_start[i] <= t
      while (hi - lo > 1) {
        const int mid = (lo + hi) / 2;
        if (s.pair_start[mid] <= t) lo = mid;
        else hi = mid;
      }
      s.pair_code[t] = static_cast<std::uint16_t>(lo << 8 | (t - s.pair_start[lo]));
    }
    __syncwarp();
    const auto key = [&](std::int64_t t) {
      const int i = s.pair_code[t] >> 8, j = s.pair_code[t] & 0xff;
      const float sum = __fadd_rn(s.running_val[i], s.factor_val[j]);
      return static_cast<std::uint64_t>(core::score_key(sum)) << 16 | static_cast<std::uint64_t>((i + j) << 8 | i);
    };
    const std::uint64_t threshold = topk::warp_kth_largest(key, pairs, c, 48, s.hist, lane);
    topk::warp_compact(key, pairs, threshold, s.list, lane);
    if (!last) {
      const int size = pow2_at_least(c);
      for (int e = c + lane; e < size; e += 32) s.list[e] = 0;
      __syncwarp();
      topk::warp_bitonic_sort<true>(s.list, size, lane);
    }
    float next_val[kPerLane];
    std::uint32_t next_id[kPerLane];
#pragma unroll
    for (int q = 0; q < kPerLane; ++q) {
      const int e = lane + 32 * q;
      if (e < c) {
        const int i = static_cast<int>(s.list[e] & 0xffu), j = static_cast<int>((s.list[e] >> 8) & 0xffu) - i;
        const float sum = __fadd_rn(s.running_val[i], s.factor_val[j]);
        next_val[q] = last ? sum : S::round(sum);
        next_id[q] = s.running_id[i] * width + s.factor_col[j];
      }
    }
    __syncwarp();
#pragma unroll
    for (int q = 0; q < kPerLane; ++q) {
      const int e = lane + 32 * q;
      if (e < c) {
        if (last) {
          s.out_val[e] = next_val[q];
          s.list[e] = static_cast<std::uint64_t>(next_id[q]) << 8 | static_cast<std::uint64_t>(e);
        } else {
          s.running_val[e] = next_val[q];
          s.running_id[e] = next_id[q];
        }
      }
    }
    __syncwarp();
    if (last) return store_by_id<S>(s, c, out_values, out_slots, lane);
    n = c;
  }
}

template <typename S, int KMAX>
__global__ void __launch_bounds__(32 * warps_per_block(KMAX)) product_key_topk_backward_kernel(BackwardParams p) {
  __shared__ float grad[warps_per_block(KMAX)][KMAX];
  __shared__ std::uint32_t rest[warps_per_block(KMAX)][KMAX];  // slot id / widths of the factors after f
  __shared__ std::uint64_t list[warps_per_block(KMAX)][KMAX];
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const std::int64_t row = static_cast<std::int64_t>(blockIdx.x) * warps_per_block(KMAX) + warp;
  if (row >= p.rows) return;
  const int kk = static_cast<int>(p.selected);
  auto* out = static_cast<typename S::Storage*>(p.grad_raw) + row * p.factors.width;
  for (std::int64_t c = lane; c < p.factors.width; c += 32) out[c] = S::store(0.0f);
  for (int e = lane; e < kk; e += 32) {
    const std::int64_t id = p.slots[row * kk + e];
    grad[warp][e] = S::load(static_cast<const typename S::Storage*>(p.grad_values)[row * kk + e]);
    rest[warp][e] = id >= 0 && id < p.num_slots ? static_cast<std::uint32_t>(id) : 0xffffffffu;
  }
  __syncwarp();
  const int n = pow2_at_least(kk);
  std::int64_t offset = p.factors.width;
  for (int f = p.factors.count - 1; f >= 0; --f) {  // last factor first: its digit is id % width
    const std::uint32_t w = p.factors.dims[f];
    offset -= w;
    for (int e = lane; e < n; e += 32) {
      if (e < kk && rest[warp][e] != 0xffffffffu) {
        list[warp][e] = static_cast<std::uint64_t>(rest[warp][e] % w) << 8 | static_cast<std::uint64_t>(e);
        rest[warp][e] /= w;
      } else {
        list[warp][e] = ~std::uint64_t{0};
      }
    }
    __syncwarp();
    topk::warp_bitonic_sort<false>(list[warp], n, lane);
    for (int q = lane; q < kk; q += 32) {
      const std::uint64_t key = list[warp][q];
      const std::uint64_t column = key >> 8;
      if (key == ~std::uint64_t{0} || (q > 0 && (list[warp][q - 1] >> 8) == column)) continue;
      float sum = 0.0f;
      for (int r = q; r < kk && (list[warp][r] >> 8) == column; ++r) sum = __fadd_rn(sum, grad[warp][list[warp][r] & 0xffu]);
      out[offset + static_cast<std::int64_t>(column)] = S::store(sum);
    }
    __syncwarp();
  }
}

FactorList factor_list(const core::ProductKeyPlan& plan) {
  FactorList list{};
  list.count = static_cast<int>(plan.dims.size());
  for (std::size_t f = 0; f < plan.dims.size(); ++f) list.dims[f] = static_cast<std::uint32_t>(plan.dims[f]);
  list.width = plan.width;
  return list;
}

void check_cuda_dtype(DType dtype, const char* name) {
  if (dtype != DType::f32 && dtype != DType::bf16 && dtype != DType::f16) {
    throw TypeError(name, std::string(name) + " on CUDA must be float32, bfloat16 or float16, got " +
                              dtype_name(dtype) + " (float64 runs on the CPU)");
  }
}

struct ForwardLaunch {
  template <typename S, int KMAX>
  static void run(const ForwardParams& p, unsigned blocks, cudaStream_t stream) {
    product_key_topk_forward_kernel<S, KMAX><<<blocks, 32 * warps_per_block(KMAX), 0, stream>>>(p);
  }
};

struct BackwardLaunch {
  template <typename S, int KMAX>
  static void run(const BackwardParams& p, unsigned blocks, cudaStream_t stream) {
    product_key_topk_backward_kernel<S, KMAX><<<blocks, 32 * warps_per_block(KMAX), 0, stream>>>(p);
  }
};

template <typename Launch, typename S, typename Params>
void launch_for_k(std::int64_t k, std::int64_t rows, const Params& p, cudaStream_t stream) {
  const auto blocks = [&](int kmax) { return static_cast<unsigned>((rows + warps_per_block(kmax) - 1) / warps_per_block(kmax)); };
  if (k <= 32) return Launch::template run<S, 32>(p, blocks(32), stream);
  if (k <= 64) return Launch::template run<S, 64>(p, blocks(64), stream);
  if (k <= 128) return Launch::template run<S, 128>(p, blocks(128), stream);
  return Launch::template run<S, 256>(p, blocks(256), stream);
}

template <typename Launch, typename Params>
void dispatch(DType dtype, std::int64_t k, std::int64_t rows, const Params& p, cudaStream_t stream) {
  if (dtype == DType::f32) return launch_for_k<Launch, F32Scores>(k, rows, p, stream);
  if (dtype == DType::bf16) return launch_for_k<Launch, BF16Scores>(k, rows, p, stream);
  return launch_for_k<Launch, F16Scores>(k, rows, p, stream);
}

}  // namespace

void product_key_topk_forward(const core::ProductKeyPlan& plan, const TensorRef& raw, const TensorRef& values,
                              const TensorRef& slots, void* cuda_stream) {
  check_cuda_dtype(raw.dtype, "raw");
  if (plan.rows == 0) return;
  const DeviceGuard guard(raw.device.index);
  if (register_forward_fits(plan)) return register_forward(plan, raw, values, slots, cuda_stream);
  ForwardParams p{raw.data, values.data, slots.data_as<std::int64_t>(), plan.rows, raw.strides[0], plan.k,
                  plan.selected, factor_list(plan)};
  dispatch<ForwardLaunch>(plan.dtype, plan.k, plan.rows, p, stream_of(cuda_stream));
  check_launch("product_key_topk_forward_kernel");
}

void product_key_topk_backward(const core::ProductKeyPlan& plan, const TensorRef& slots,
                               const TensorRef& grad_values, const TensorRef& grad_raw, void* cuda_stream) {
  check_cuda_dtype(grad_values.dtype, "grad_values");
  if (plan.rows == 0) return;
  const DeviceGuard guard(slots.device.index);
  if (register_backward_fits(plan)) return register_backward(plan, slots, grad_values, grad_raw, cuda_stream);
  BackwardParams p{slots.data_as<const std::int64_t>(), grad_values.data, grad_raw.data, plan.rows, plan.selected,
                   plan.slots, factor_list(plan)};
  dispatch<BackwardLaunch>(plan.dtype, plan.selected, plan.rows, p, stream_of(cuda_stream));
  check_launch("product_key_topk_backward_kernel");
}

}  // namespace sdm::cuda

// backward_tokens.cu - the token side of one reverse step of the CUDA backward (SPEC C.2 steps 1-6,
// C.3 "GWR" and "baddbmm"), for the P chunks n = ti*P + p of step ti. Kernels, in launch order:
//
//   stage_dy      dy step rows [P*C, hd] f32 = grad_readings of the step's tokens (any dtype), 0 for
//                 padding tokens. Grid-stride, one element per thread.
//   gather_grads  D_w[p*C+i] = sum_w coef_(i,w) G[s_(i,w)] (coef = kappa exp(Lambda - L), masked
//                 entries skipped). One CTA of 8 warps per (step row, 256-column tile); lane l owns 8
//                 columns (backward_rows.cuh); warp k sums lanes w = k, k+8, ... in that order, then
//                 the 8 warp partials are added in warp order through shared memory.
//   solve_side    ddelta_j = D_w[j] + (sum_{i>=j} QK[i][j] dy_i);  dU_j = sum_{i>=j} X[i][j] ddelta_i;
//                 stores dU (step rows) and grad_v = beta dU (valid tokens, if requested). One CTA per
//                 (8-column tile, chunk), 8 x 32 threads: thread (x, y) owns column x, rows y, y+32, ...;
//                 32-row slices of QK / X are staged in shared memory; every sum runs over i ascending.
//   pair_dots     per chunk and pair j <= i, one warp: dQK[i][j] = <dy_i, delta_j>, and
//                 dMs[i][j] = -<dU_i, delta_j> (j < i) or rdot[i] = <res_i, dU_i> (j == i), with
//                 warp_dot's fixed order. Padding rows are zero, so their results are 0.
// Numerics: f32 throughout; every order above is fixed by the shape. No atomics; each output
// element has exactly one writer.
#include "backward.hpp"
#include "backward_rows.cuh"
#include "cuda_check.hpp"
#include "dependent_launch.cuh"

namespace sdm::cuda {
namespace {

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;

__global__ void __launch_bounds__(kThreads)
    stage_dy(Geometry geo, AnyFloat grad_readings, float* __restrict__ dy, std::int64_t ti) {
  wait_for_predecessor();
  const std::int64_t count = geo.P * geo.C * geo.hd;
  for (std::int64_t e = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < count;
       e += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t row = e / geo.hd, c = e % geo.hd;
    const std::int64_t p = row / geo.C, t = ti * geo.C + row % geo.C;
    dy[e] = t < geo.T ? load_any(grad_readings.data, grad_readings.dtype, (p * geo.T + t) * geo.hd + c) : 0.0f;
  }
}

template <typename Gt, bool kVec>
__global__ void __launch_bounds__(kThreads)
    gather_grads(Geometry geo, Phase1Buffers p1, BackwardBuffers bb, std::int64_t ti) {
  __shared__ float partial[kWarps][kWarpCols];
  wait_for_predecessor();
  const std::int64_t row = blockIdx.x;  // step row p*C + i
  const std::int64_t n = ti * geo.P + row / geo.C;
  const std::int64_t entry0 = (ti * geo.P * geo.C + row) * geo.W;  // entry (n, i, 0)
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const std::int64_t tile0 = static_cast<std::int64_t>(blockIdx.y) * kWarpCols;
  const std::int64_t c0 = tile0 + lane * kLaneCols;
  const Gt* rows = static_cast<const Gt*>(bb.grad_rows);
  float acc[kLaneCols] = {};
  if (c0 < geo.hd) {
    for (std::int64_t w = warp; w < geo.W; w += kWarps) {
      const std::int32_t slot = p1.k_slot[entry0 + w];
      if (slot < 0) continue;
      const float coef = p1.wcoef[n * geo.C * geo.W + p1.inv_pos[entry0 + w]];
      float x[kLaneCols];
      load_piece<kVec>(rows + static_cast<std::int64_t>(slot) * geo.hd, c0, geo.hd, x);
#pragma unroll
      for (int k = 0; k < kLaneCols; ++k) acc[k] = fmaf(coef, x[k], acc[k]);
    }
  }
#pragma unroll
  for (int k = 0; k < kLaneCols; ++k) partial[warp][lane * kLaneCols + k] = acc[k];
  __syncthreads();
  const int col = static_cast<int>(threadIdx.x);
  const std::int64_t c = tile0 + col;
  if (c >= geo.hd) return;
  float sum = partial[0][col];
#pragma unroll
  for (int k = 1; k < kWarps; ++k) sum += partial[k][col];
  bb.dw[row * geo.hd + c] = sum;
}

constexpr int kCols = 8;        // columns per solve_side CTA
constexpr int kRowGroups = 32;  // thread rows: row j belongs to thread row j % 32
constexpr int kSlice = 32;      // rows of QK / X staged per pass

// acc[m] += sum_{i >= j} M[i][j] * vin[i] for the rows j = ty + 32 m of this thread (column tx),
// i ascending. M [C, C] row-major in global memory, vin [C][kCols] in shared memory.
template <int kMaxRows>
__device__ __forceinline__ void transposed_product(const float* __restrict__ M, const float* vin, float* slice,
                                                   int C, int tx, int ty, float (&acc)[kMaxRows]) {
  const int tid = ty * kCols + tx;
  for (int it = 0; it < C; it += kSlice) {
    __syncthreads();  // vin is complete / the previous slice is consumed
    for (int o = tid; o < kSlice * C; o += kCols * kRowGroups) {
      const int i = it + o / C;
      slice[o] = i < C ? M[static_cast<std::int64_t>(i) * C + o % C] : 0.0f;
    }
    __syncthreads();
    const int rows = C - it < kSlice ? C - it : kSlice;
    for (int ii = 0; ii < rows; ++ii) {
      const int i = it + ii;
      const float x = vin[i * kCols + tx];
#pragma unroll
      for (int m = 0; m < kMaxRows; ++m) {
        const int j = ty + kRowGroups * m;
        if (j < C && i >= j) acc[m] = fmaf(slice[ii * C + j], x, acc[m]);
      }
    }
  }
}

template <int kMaxRows>
__global__ void __launch_bounds__(kCols * kRowGroups)
    solve_side(Geometry geo, Inputs in, Phase1Buffers p1, BackwardBuffers bb, AnyFloat grad_v, std::int64_t ti) {
  extern __shared__ float smem[];
  wait_for_predecessor();
  const int C = static_cast<int>(geo.C);
  const std::int64_t hd = geo.hd;
  float* dys = smem;               // [C][kCols]
  float* dds = dys + C * kCols;    // [C][kCols]
  float* slice = dds + C * kCols;  // [kSlice][C]
  const int tx = static_cast<int>(threadIdx.x), ty = static_cast<int>(threadIdx.y);
  const std::int64_t p = blockIdx.y, n = ti * geo.P + p;
  const std::int64_t c = static_cast<std::int64_t>(blockIdx.x) * kCols + tx;
  const bool in_cols = c < hd;

#pragma unroll
  for (int m = 0; m < kMaxRows; ++m) {
    const int i = ty + kRowGroups * m;
    if (i < C) dys[i * kCols + tx] = in_cols ? bb.dy[(p * C + i) * hd + c] : 0.0f;
  }
  float acc[kMaxRows] = {};
  transposed_product<kMaxRows>(p1.QK + n * C * C, dys, slice, C, tx, ty, acc);
#pragma unroll
  for (int m = 0; m < kMaxRows; ++m) {
    const int j = ty + kRowGroups * m;
    if (j < C) dds[j * kCols + tx] = (in_cols ? bb.dw[(p * C + j) * hd + c] : 0.0f) + acc[m];
    acc[m] = 0.0f;
  }
  transposed_product<kMaxRows>(p1.X + n * C * C, dds, slice, C, tx, ty, acc);

  if (!in_cols) return;
#pragma unroll
  for (int m = 0; m < kMaxRows; ++m) {
    const int j = ty + kRowGroups * m;
    if (j >= C) break;
    bb.du[(p * C + j) * hd + c] = acc[m];
    const std::int64_t t = ti * C + j;
    if (grad_v.data != nullptr && t < geo.T) {
      const std::int64_t token = p * geo.T + t;
      store_any(grad_v.data, grad_v.dtype, token * hd + c, load_input(in.beta, in.beta_dtype, token) * acc[m]);
    }
  }
}

template <bool kVec>
__global__ void __launch_bounds__(kThreads) pair_dots(Geometry geo, BackwardBuffers bb, std::int64_t ti) {
  wait_for_predecessor();
  const std::int64_t C = geo.C, hd = geo.hd;
  const std::int64_t pair = static_cast<std::int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  if (pair >= geo.P * C * C) return;
  const std::int64_t p = pair / (C * C), i = pair / C % C, j = pair % C;
  if (j > i) return;
  const std::int64_t n = ti * geo.P + p;
  const float* dy_i = bb.dy + (p * C + i) * hd;
  const float* du_i = bb.du + (p * C + i) * hd;
  const float* delta_j = bb.delta + (n * C + j) * hd;
  const float dqk = warp_dot<kVec>(dy_i, delta_j, hd, lane);
  const float other = j < i ? -warp_dot<kVec>(du_i, delta_j, hd, lane)
                            : warp_dot<kVec>(bb.residual + (n * C + i) * hd, du_i, hd, lane);
  if (lane != 0) return;
  bb.dqk[(n * C + i) * C + j] = dqk;
  if (j < i) bb.dms[(n * C + i) * C + j] = other;
  else bb.rdot[n * C + i] = other;
}

template <typename Gt, bool kVec>
void launch_gather_grads(const Geometry& geo, const Phase1Buffers& p1, const BackwardBuffers& bb, std::int64_t ti,
                         cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(geo.P * geo.C), static_cast<unsigned>((geo.hd + kWarpCols - 1) / kWarpCols));
  launch_dependent(gather_grads<Gt, kVec>, grid, dim3(kThreads), 0, stream, "gather_grads", geo, p1, bb, ti);
}

template <int kMaxRows>
void launch_solve_side(const Geometry& geo, const Inputs& in, const Phase1Buffers& p1, const BackwardBuffers& bb,
                       AnyFloat grad_v, std::int64_t ti, cudaStream_t stream) {
  const auto kernel = solve_side<kMaxRows>;
  const std::size_t smem = static_cast<std::size_t>(geo.C * (2 * kCols + kSlice)) * sizeof(float);
  if (smem > 48 * 1024) {
    check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)),
               "cudaFuncSetAttribute (solve_side shared memory)");
  }
  const dim3 grid(static_cast<unsigned>((geo.hd + kCols - 1) / kCols), static_cast<unsigned>(geo.P));
  launch_dependent(kernel, grid, dim3(kCols, kRowGroups), smem, stream, "solve_side", geo, in, p1, bb, grad_v, ti);
}

}  // namespace

void launch_token_side(const Geometry& geo, const Inputs& in, const Phase1Buffers& p1, const BackwardBuffers& bb,
                       AnyFloat grad_v, std::int64_t ti, cudaStream_t stream) {
  const std::int64_t elements = geo.P * geo.C * geo.hd;
  const std::int64_t blocks = (elements + kThreads - 1) / kThreads;
  launch_dependent(stage_dy, dim3(static_cast<unsigned>(blocks < 4096 ? blocks : 4096)), dim3(kThreads), 0, stream,
                   "stage_dy", geo, bb.grad_readings, bb.dy, ti);

  if (bb.bf16_grad_rows) {
    bb.vec8 ? launch_gather_grads<Bf16Bits, true>(geo, p1, bb, ti, stream)
            : launch_gather_grads<Bf16Bits, false>(geo, p1, bb, ti, stream);
  } else {
    bb.vec8 ? launch_gather_grads<float, true>(geo, p1, bb, ti, stream)
            : launch_gather_grads<float, false>(geo, p1, bb, ti, stream);
  }

  if (geo.C <= 2 * kRowGroups) launch_solve_side<2>(geo, in, p1, bb, grad_v, ti, stream);
  else launch_solve_side<8>(geo, in, p1, bb, grad_v, ti, stream);

  const std::int64_t pairs = geo.P * geo.C * geo.C;
  const dim3 grid(static_cast<unsigned>((pairs + kWarps - 1) / kWarps));
  if (bb.vec8) launch_dependent(pair_dots<true>, grid, dim3(kThreads), 0, stream, "pair_dots", geo, bb, ti);
  else launch_dependent(pair_dots<false>, grid, dim3(kThreads), 0, stream, "pair_dots", geo, bb, ti);
}

}  // namespace sdm::cuda

// dual.cu - per-step dual product (SPEC B.2 "residual / solve / readings", B.5.2).
//
// Inputs:  v [P, T, hd], beta [P, T] (caller dtypes), retrieved / inter f32 [P*C, hd] (step rows),
//          Phase 1's X, QX f32 [N, C, C] (lower triangular).
// Outputs: delta f32 (step rows, or chunk-token rows n*C + i in a saving call), readings E
//          [P, T, hd] (valid tokens only), residual f32 [N*C, hd] (saving calls only).
// Math:    res = rnd_E(v) - retrieved;  U = beta * res;  delta = X U;  readings = rnd_E(inter + QX U).
// Parallel decomposition: one CTA per (8-column tile, chunk p of the step), 8 x 32 threads.
//   Thread (x, y) owns column x of the tile and rows y, y+32, ... (kMaxRows of them, in
//   registers; every per-row loop is unrolled so its loads are in flight together). U and
//   32-column slices of X and QX are staged in shared memory; the j loop runs in ascending
//   order for every (i, column), so each output is one fixed-order f32 sum. Narrow tiles give
//   hd/8 * P CTAs: this kernel is latency-bound, more CTAs and fewer rows per thread pay.
// Numerics: f32 throughout; the arithmetic of readings is identical in no-grad and saving calls
//   (the saving call only stores more), so their readings are bitwise equal.
#include <algorithm>

#include "cuda_check.hpp"
#include "dependent_launch.cuh"
#include "device_values.cuh"
#include "step_kernels.hpp"

namespace sdm::cuda {
namespace {

constexpr int kCols = 8;        // columns per CTA
constexpr int kRowGroups = 32;  // thread rows per CTA: row i belongs to thread row i % 32
constexpr int kThreads = kCols * kRowGroups;
constexpr int kSlice = 32;      // columns of X / QX staged per pass

template <typename E, int kMaxRows>
__global__ void __launch_bounds__(kThreads)
    dual_product(Geometry geo, Inputs in, Phase1Buffers p1, StepBuffers sb, std::int64_t ti) {
  extern __shared__ float smem[];
  wait_for_predecessor();
  const int C = static_cast<int>(geo.C);
  const std::int64_t hd = geo.hd;
  float* U = smem;              // [C][kCols]
  float* Xs = U + C * kCols;    // [C][kSlice] columns jt .. jt+kSlice-1 of X
  float* QXs = Xs + C * kSlice; // [C][kSlice] same of QX
  const int tx = static_cast<int>(threadIdx.x), ty = static_cast<int>(threadIdx.y);
  const int tid = ty * kCols + tx;
  const std::int64_t p = blockIdx.y, n = ti * geo.P + p;
  const std::int64_t c = static_cast<std::int64_t>(blockIdx.x) * kCols + tx;
  const bool bf16_bank = sb.bf16_bank;

#pragma unroll
  for (int m = 0; m < kMaxRows; ++m) {
    const int i = ty + kRowGroups * m;
    if (i >= C) break;
    const std::int64_t t = ti * C + i;
    float u = 0.0f;
    if (c < hd) {
      float res = 0.0f;
      if (t < geo.T) {
        const std::int64_t token = p * geo.T + t;
        const float v = round_to_bank(load_input(in.v, in.v_dtype, token * hd + c), bf16_bank);
        res = v - sb.retrieved[(p * C + i) * hd + c];
        u = load_input(in.beta, in.beta_dtype, token) * res;
      }
      if (sb.residual != nullptr) sb.residual[(n * C + i) * hd + c] = res;
    }
    U[i * kCols + tx] = u;
  }

  float d[kMaxRows], y[kMaxRows];
#pragma unroll
  for (int m = 0; m < kMaxRows; ++m) d[m] = 0.0f, y[m] = 0.0f;
  const float* X = p1.X + n * C * C;
  const float* QX = p1.QX + n * C * C;
  for (int jt = 0; jt < C; jt += kSlice) {
    __syncthreads();  // U is complete / the previous slices are consumed
#pragma unroll
    for (int m = 0; m < kMaxRows * kSlice / kCols; ++m) {  // C * kSlice elements, kThreads at a time
      const int o = tid + kThreads * m, i = o / kSlice, j = jt + o % kSlice;
      if (i >= C) break;
      Xs[o] = j < C ? X[i * C + j] : 0.0f;
      QXs[o] = j < C ? QX[i * C + j] : 0.0f;
    }
    __syncthreads();
    const int jn = C - jt < kSlice ? C - jt : kSlice;
    for (int jj = 0; jj < jn; ++jj) {
      const int j = jt + jj;
      const float u = U[j * kCols + tx];
#pragma unroll
      for (int m = 0; m < kMaxRows; ++m) {
        const int i = ty + kRowGroups * m;
        if (i < C && i >= j) {
          d[m] = fmaf(Xs[i * kSlice + jj], u, d[m]);
          y[m] = fmaf(QXs[i * kSlice + jj], u, y[m]);
        }
      }
    }
  }

  if (c >= hd) return;
  E* readings = static_cast<E*>(sb.readings);
  const std::int64_t delta_row0 = sb.delta_per_chunk ? n * C : p * C;
#pragma unroll
  for (int m = 0; m < kMaxRows; ++m) {
    const int i = ty + kRowGroups * m;
    if (i >= C) break;
    sb.delta[(delta_row0 + i) * hd + c] = d[m];
    const std::int64_t t = ti * C + i;
    if (t < geo.T) readings[(p * geo.T + t) * hd + c] = from_f32<E>(sb.inter[(p * C + i) * hd + c] + y[m]);
  }
}

template <typename E, int kMaxRows>
void launch(const Geometry& geo, const Inputs& in, const Phase1Buffers& p1, const StepBuffers& sb, std::int64_t ti,
            cudaStream_t stream) {
  const auto kernel = dual_product<E, kMaxRows>;
  const std::size_t smem = static_cast<std::size_t>(geo.C * (kCols + 2 * kSlice)) * sizeof(float);
  if (smem > 48 * 1024) {
    check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)),
               "cudaFuncSetAttribute (dual_product shared memory)");
  }
  const dim3 grid(static_cast<unsigned>((geo.hd + kCols - 1) / kCols), static_cast<unsigned>(geo.P));
  launch_dependent(kernel, grid, dim3(kCols, kRowGroups), smem, stream, "dual_product", geo, in, p1, sb, ti);
}

}  // namespace

void launch_dual(const Geometry& geo, const Inputs& in, const Phase1Buffers& p1, const StepBuffers& sb,
                 std::int64_t ti, cudaStream_t stream) {
  const bool short_chunk = geo.C <= 2 * kRowGroups;  // at most 2 rows per thread
  if (sb.bf16_bank) {
    short_chunk ? launch<Bf16Bits, 2>(geo, in, p1, sb, ti, stream) : launch<Bf16Bits, 8>(geo, in, p1, sb, ti, stream);
  } else {
    short_chunk ? launch<float, 2>(geo, in, p1, sb, ti, stream) : launch<float, 8>(geo, in, p1, sb, ti, stream);
  }
}

}  // namespace sdm::cuda

// backward_tokens.cu - the token side of one reverse step of the CUDA backward (SPEC C.2 steps 1-6,
// C.3 "GWR" and "baddbmm"), for the P chunks n = ti*P + p of step ti. Kernels, in launch order:
//
//   gather_grads  D_w[p*C+i] = sum_w coef_(i,w) G[s_(i,w)] (coef = kappa exp(Lambda - L), masked
//                 entries skipped). One CTA of 8 warps per (step row, 256-column tile); lane l owns 8
//                 columns (backward_rows.cuh); warp k sums lanes w = k, k+8, ... in that order, then
//                 the 8 warp partials are added in warp order through shared memory.
//   solve_side    dy = grad_readings of the step as f32 rows (any dtype; 0 for padding tokens), stored
//                 into bb.dy [P*C, hd] (pair_dots and read_groups_backward read it);
//                 ddelta_j = D_w[j] + (sum_{i>=j} QK[i][j] dy_i);  dU_j = sum_{i>=j} X[i][j] ddelta_i;
//                 stores dU (step rows) and grad_v = beta dU (valid tokens, if requested).
//                 Grid (column tiles of kCols = 32 / 16 / 8, P): the CTA keeps dy and ddelta of its
//                 columns for all C rows in shared memory (transposed), so the two chained products
//                 never leave the CTA; thread t owns column t % kCols and 4 consecutive rows of each
//                 64-row block; QK and X are staged one 64 x 64 block at a time (chunk_products.cuh).
//                 Each sum is one fmaf chain over i = j .. C-1 ascending; ddelta = D_w + that sum.
//   pair_dots     per chunk, the lower triangle of 4 x 4 blocks of pairs (i, j), one CTA per block:
//                 dQK[i][j] = <dy_i, delta_j> (j <= i), dMs[i][j] = -<dU_i, delta_j> (j < i) and
//                 rdot[i] = <res_i, dU_i> (diagonal blocks, in the slot of dMs[i][i]). The CTA's
//                 min(8, ceil(hd/32)) warps split the columns: warp w, lane l owns the columns
//                 c = 32 (w + warps s) + l, s = 0, 1, ..; each lane keeps the 32 partial dots of the
//                 block (16 dQK, 16 dMs / rdot) as fmaf chains over its columns ascending, the warp
//                 sums them over its lanes with transpose_sum (a fixed halving tree: lanes differing in
//                 bit 4, then 3, 2, 1, 0; lane k ends with dot k), and warp 0 adds the warp sums in
//                 warp order. Each row is loaded once per block and used for 4 or 8 dots. Padding rows
//                 are zero, so their results are 0; rows beyond C read as 0 and are not stored.
// Numerics: f32 throughout; every order above is fixed by the shape (C, hd) only, never by the tile
// width, the SM count or the access path. No atomics; each output element has exactly one writer.
#include "backward.hpp"
#include "backward_rows.cuh"
#include "chunk_products.cuh"
#include "cuda_check.hpp"
#include "dependent_launch.cuh"

namespace sdm::cuda {
namespace {

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;

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

// ---- solve_side ----------------------------------------------------------------------------

using chunk::kBlock;
using chunk::kRows;

// acc[r] += sum_{i >= j} M[i][j] bt[i] for the thread's rows j = R0 + r0 + r (r < 4), i ascending:
// the 64 x 64 blocks M[it .., R0 ..] for it = R0, R0 + 64, .. are staged in turn (chunk_products.cuh).
__device__ __forceinline__ void transposed_pass(const float* __restrict__ M, int C, int R0, float* Ms,
                                                const float* bt, int r0, bool active, int tid, int threads,
                                                float (&acc)[kRows]) {
  for (int it = R0; it < C; it += kBlock) {
    __syncthreads();  // the previous block is consumed, the operand complete
    chunk::stage_block(M, C, it, R0, Ms, tid, threads);
    __syncthreads();
    if (!active) continue;
    const int iend = chunk::round_up4(C - it < kBlock ? C - it : kBlock);
    if (it == R0) {
      chunk::transposed_diagonal(Ms, bt + it, r0, acc);
      chunk::transposed_rows(Ms, bt + it, r0, r0 + kRows, iend, acc);
    } else {
      chunk::transposed_rows(Ms, bt + it, r0, 0, iend, acc);
    }
  }
}

template <int kCols>
__global__ void __launch_bounds__(kCols * chunk::kRowGroups)
    solve_side(Geometry geo, Inputs in, Phase1Buffers p1, BackwardBuffers bb, AnyFloat grad_v, std::int64_t ti) {
  extern __shared__ __align__(16) float smem[];
  wait_for_predecessor();
  const int C = static_cast<int>(geo.C);
  const std::int64_t hd = geo.hd;
  const int ld = chunk::operand_ld(C);
  float* Ms = smem;                   // [64][64] block of QK, then of X
  float* dyt = Ms + kBlock * kBlock;  // [kCols][ld]: dy of the tile, transposed
  float* ddt = dyt + kCols * ld;      // [kCols][ld]: ddelta of the tile, transposed
  const int tid = static_cast<int>(threadIdx.x), threads = static_cast<int>(blockDim.x);
  const int col = tid % kCols, group = tid / kCols, groups = threads / kCols;
  const int r0 = kRows * group;
  const std::int64_t p = blockIdx.y, n = ti * geo.P + p;
  const std::int64_t c = static_cast<std::int64_t>(blockIdx.x) * kCols + col;
  const bool in_cols = c < hd;
  float* dy_col = dyt + col * ld;
  float* dd_col = ddt + col * ld;

  // dy = grad_readings of the step as f32 (0 for padding tokens): to bb.dy and to shared memory.
  for (int i = group; i < chunk::round_up4(C); i += groups) {
    float x = 0.0f;
    if (in_cols && i < C) {
      const std::int64_t t = ti * C + i;
      if (t < geo.T) x = load_any(bb.grad_readings.data, bb.grad_readings.dtype, (p * geo.T + t) * hd + c);
      bb.dy[(p * C + i) * hd + c] = x;
    }
    dy_col[i] = x;
  }

  // ddelta = D_w + QK^T dy.
  for (int R0 = 0; R0 < C; R0 += kBlock) {
    const bool active = r0 < (C - R0 < kBlock ? C - R0 : kBlock);
    float dw[kRows], acc[kRows] = {};
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const int j = R0 + r0 + r;
      dw[r] = active && in_cols && j < C ? bb.dw[(p * C + j) * hd + c] : 0.0f;
    }
    transposed_pass(p1.QK + n * C * C, C, R0, Ms, dy_col, r0, active, tid, threads, acc);
    if (!active) continue;
#pragma unroll
    for (int r = 0; r < kRows; ++r) dd_col[R0 + r0 + r] = dw[r] + acc[r];
  }

  // dU = X^T ddelta; grad_v = beta dU.
  for (int R0 = 0; R0 < C; R0 += kBlock) {
    const bool active = r0 < (C - R0 < kBlock ? C - R0 : kBlock);
    float acc[kRows] = {};
    transposed_pass(p1.X + n * C * C, C, R0, Ms, dd_col, r0, active, tid, threads, acc);
    if (!active || !in_cols) continue;
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const int j = R0 + r0 + r;
      if (j >= C) break;
      bb.du[(p * C + j) * hd + c] = acc[r];
      const std::int64_t t = ti * C + j;
      if (grad_v.data != nullptr && t < geo.T) {
        const std::int64_t token = p * geo.T + t;
        store_any(grad_v.data, grad_v.dtype, token * hd + c, load_input(in.beta, in.beta_dtype, token) * acc[r]);
      }
    }
  }
}

// ---- pair_dots ---------------------------------------------------------------------------------

constexpr int kQuad = 4;                    // rows i (and j) of a CTA's block of pairs
constexpr int kDots = 2 * kQuad * kQuad;    // dQK and dMs of a 4 x 4 block: one per lane
constexpr unsigned kAllLanes = 0xffffffffu;
static_assert(kDots == 32, "pair_dots: one dot of a block per lane");

// One halving step of transpose_sum: lanes l and l ^ kWidth exchange halves of v[0, 2 kWidth); each
// keeps the half whose index bit kWidth matches its own lane bit, plus the partner's copy of it.
template <int kWidth>
__device__ __forceinline__ void halve(float (&v)[kDots], int lane) {
  const bool upper = (lane & kWidth) != 0;
#pragma unroll
  for (int k = 0; k < kWidth; ++k) {
    const float send = upper ? v[k] : v[k + kWidth];
    const float keep = upper ? v[k + kWidth] : v[k];
    v[k] = keep + __shfl_xor_sync(kAllLanes, send, kWidth);
  }
}

// v[k] of every lane summed over the 32 lanes, the sum of index k ending in lane k: five halving
// steps combining lanes that differ in bit 4, then 3, 2, 1, 0. Returns the lane's sum.
__device__ __forceinline__ float transpose_sum(float (&v)[kDots], int lane) {
  halve<16>(v, lane);
  halve<8>(v, lane);
  halve<4>(v, lane);
  halve<2>(v, lane);
  halve<1>(v, lane);
  return v[0];
}

// Lane partials over the columns c = c0, c0 + stride, .. < hd (ascending), for the rows
// dy_k = dy + k hd (k < ni), likewise du, res, and delta_k = delta + k hd (k < nj); rows past ni / nj
// read as 0. acc[a*4 + b] <- dy_a . delta_b and acc[16 + a*4 + b] <- dU_a . delta_b, except on a
// diagonal block (kDiag), where acc[16 + a*4 + a] <- res_a . dU_a.
template <bool kDiag>
__device__ __forceinline__ void pair_partials(const float* __restrict__ dy, const float* __restrict__ du,
                                              const float* __restrict__ res, const float* __restrict__ delta, int ni,
                                              int nj, std::int64_t c0, std::int64_t stride, std::int64_t hd,
                                              float (&acc)[kDots]) {
  for (std::int64_t c = c0; c < hd; c += stride) {
    float a[kQuad], u[kQuad], e[kQuad], s[kQuad];
#pragma unroll
    for (int k = 0; k < kQuad; ++k) {
      a[k] = k < ni ? dy[k * hd + c] : 0.0f;
      u[k] = k < ni ? du[k * hd + c] : 0.0f;
      e[k] = k < nj ? delta[k * hd + c] : 0.0f;
      s[k] = kDiag && k < ni ? res[k * hd + c] : 0.0f;
    }
#pragma unroll
    for (int ia = 0; ia < kQuad; ++ia) {
#pragma unroll
      for (int jb = 0; jb < kQuad; ++jb) {
        acc[ia * kQuad + jb] = fmaf(a[ia], e[jb], acc[ia * kQuad + jb]);
        float& other = acc[kQuad * kQuad + ia * kQuad + jb];
        other = kDiag && ia == jb ? fmaf(s[ia], u[ia], other) : fmaf(u[ia], e[jb], other);
      }
    }
  }
}

__global__ void __launch_bounds__(kThreads) pair_dots(Geometry geo, BackwardBuffers bb, std::int64_t ti) {
  __shared__ float partial[kWarps][32];
  wait_for_predecessor();
  const int C = static_cast<int>(geo.C);
  const std::int64_t hd = geo.hd;
  // Block x of the lower triangle of 4 x 4 blocks: row block iq, column block jq <= iq.
  const int x = static_cast<int>(blockIdx.x);
  int iq = static_cast<int>((sqrtf(8.0f * static_cast<float>(x) + 1.0f) - 1.0f) * 0.5f);
  while (iq * (iq + 1) / 2 > x) --iq;
  while ((iq + 1) * (iq + 2) / 2 <= x) ++iq;
  const int jq = x - iq * (iq + 1) / 2;
  const std::int64_t p = blockIdx.y, n = ti * geo.P + p;
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int warps = static_cast<int>(blockDim.x) / 32;
  const int i0 = kQuad * iq, j0 = kQuad * jq;
  const int ni = C - i0 < kQuad ? C - i0 : kQuad, nj = C - j0 < kQuad ? C - j0 : kQuad;
  const float* dy = bb.dy + (p * C + i0) * hd;
  const float* du = bb.du + (p * C + i0) * hd;
  const float* res = bb.residual + (n * C + i0) * hd;
  const float* delta = bb.delta + (n * C + j0) * hd;

  float acc[kDots] = {};
  const std::int64_t c0 = static_cast<std::int64_t>(warp) * 32 + lane, stride = static_cast<std::int64_t>(warps) * 32;
  if (iq == jq) pair_partials<true>(dy, du, res, delta, ni, nj, c0, stride, hd, acc);
  else pair_partials<false>(dy, du, res, delta, ni, nj, c0, stride, hd, acc);
  partial[warp][lane] = transpose_sum(acc, lane);
  __syncthreads();
  if (warp != 0) return;
  float sum = partial[0][lane];
  for (int w = 1; w < warps; ++w) sum += partial[w][lane];

  const int a = (lane >> 2) & (kQuad - 1), b = lane & (kQuad - 1);
  const int i = kQuad * iq + a, j = kQuad * jq + b;
  if (i >= C || j >= C) return;
  if (lane < kQuad * kQuad) {
    if (j <= i) bb.dqk[(n * C + i) * C + j] = sum;
  } else if (j < i) {
    bb.dms[(n * C + i) * C + j] = -sum;
  } else if (j == i) {
    bb.rdot[n * C + i] = sum;
  }
}

template <typename Gt, bool kVec>
void launch_gather_grads(const Geometry& geo, const Phase1Buffers& p1, const BackwardBuffers& bb, std::int64_t ti,
                         cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(geo.P * geo.C), static_cast<unsigned>((geo.hd + kWarpCols - 1) / kWarpCols));
  launch_dependent(gather_grads<Gt, kVec>, grid, dim3(kThreads), 0, stream, "gather_grads", geo, p1, bb, ti);
}

template <int kCols>
void launch_solve_side(const Geometry& geo, const Inputs& in, const Phase1Buffers& p1, const BackwardBuffers& bb,
                       AnyFloat grad_v, std::int64_t ti, cudaStream_t stream) {
  const auto kernel = solve_side<kCols>;
  const int C = static_cast<int>(geo.C);
  const std::size_t smem = static_cast<std::size_t>(kBlock * kBlock + 2 * kCols * chunk::operand_ld(C)) * sizeof(float);
  if (smem > 48 * 1024) {
    check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)),
               "cudaFuncSetAttribute (solve_side shared memory)");
  }
  const dim3 grid(static_cast<unsigned>((geo.hd + kCols - 1) / kCols), static_cast<unsigned>(geo.P));
  const dim3 block(static_cast<unsigned>(kCols * chunk::row_groups(C)));
  launch_dependent(kernel, grid, block, smem, stream, "solve_side", geo, in, p1, bb, grad_v, ti);
}

}  // namespace

void launch_token_side(const Geometry& geo, const Inputs& in, const Phase1Buffers& p1, const BackwardBuffers& bb,
                       AnyFloat grad_v, std::int64_t ti, cudaStream_t stream) {
  if (bb.bf16_grad_rows) {
    bb.vec8 ? launch_gather_grads<Bf16Bits, true>(geo, p1, bb, ti, stream)
            : launch_gather_grads<Bf16Bits, false>(geo, p1, bb, ti, stream);
  } else {
    bb.vec8 ? launch_gather_grads<float, true>(geo, p1, bb, ti, stream)
            : launch_gather_grads<float, false>(geo, p1, bb, ti, stream);
  }

  switch (chunk::tile_cols(geo.hd, geo.P)) {
    case 32: launch_solve_side<32>(geo, in, p1, bb, grad_v, ti, stream); break;
    case 16: launch_solve_side<16>(geo, in, p1, bb, grad_v, ti, stream); break;
    default: launch_solve_side<8>(geo, in, p1, bb, grad_v, ti, stream); break;
  }

  const std::int64_t quads = (geo.C + kQuad - 1) / kQuad;
  const std::int64_t column_warps = (geo.hd + 31) / 32;
  const dim3 grid(static_cast<unsigned>(quads * (quads + 1) / 2), static_cast<unsigned>(geo.P));
  const dim3 block(static_cast<unsigned>(32 * (column_warps < kWarps ? column_warps : kWarps)));
  launch_dependent(pair_dots, grid, block, 0, stream, "pair_dots", geo, bb, ti);
}

}  // namespace sdm::cuda

// tokens.cu - the token side of one reverse step of the CUDA backward (docs/spec.md §4: D_w,
// dU = X^T (D_w + QK^T dy), grad_v), chunks n = ti*P + p of step ti. Kernels, in launch order:
//   GWR          D_w[p*C+i] = sum_w coef_(i,w) G[s_(i,w)], coef = kappa exp(Lambda - L) (0 when
//                masked, entry_coefs once per call): the forward's gather (gather.cu) on G, k side;
//                on the vector path also dc_(i,w) = <delta_i, G[s_(i,w)]> (its row dots, dc_in_gwr).
//   solve_side   dy = grad_readings as f32 rows (0 for padding) into bb.dy [N*C, hd];
//                ddelta_j = D_w[j] + sum_{i>=j} QK[i][j] dy_i;  dU_j = sum_{i>=j} X[i][j] ddelta_i;
//                stores dU (bb.du) and grad_v = beta dU (valid tokens, if requested). Grid
//                (column tiles, P).
//   pair_dots    once after the reverse loop, all chunks: dQK[i][j] = <dy_i, delta_j> (j <= i),
//                dMs[i][j] = -<dU_i, delta_j> (j < i), rdot[i] = <res_i, dU_i>. Grid (chunk,
//                64 x 64 tile of the lower triangle).
// Numerics: f32; every sum one fmaf chain in an order fixed by (C, hd) only (ascending i from j,
//   or k from +0; details above each kernel), never by the tile width, SM count or access path.
//   No atomics; each output element has exactly one writer.
#include "cuda/common/alignment.hpp"
#include "cuda/common/async_copy.cuh"
#include "cuda/backward/backward.hpp"
#include "cuda/common/rows.cuh"
#include "cuda/common/chunk_products.cuh"
#include "cuda/common/chunk_products.hpp"
#include "cuda/common/cuda_check.hpp"
#include "cuda/common/dependent_launch.cuh"
#include "cuda/common/device_limits.hpp"
#include "cuda/common/dispatch.hpp"
#include "cuda/common/launch_bounds.cuh"
#include "cuda/common/step_kernels.hpp"

namespace sdm::cuda {
namespace {

constexpr int kThreads = 256;  // entry_coefs and pair_dots

// coef[e] = wcoef at the sorted position of write entry e (0 for masked entries): the GWR weights
// in entry order, for all chunks. One thread per entry (64-bit index, grid-stride).
__global__ void __launch_bounds__(kThreads) entry_coefs(Geometry geo, Phase1Buffers p1, float* __restrict__ coef) {
  const std::int64_t CW = geo.C * geo.W, entries = geo.N * CW;
  for (std::int64_t e = static_cast<std::int64_t>(blockIdx.x) * kThreads + threadIdx.x; e < entries;
       e += static_cast<std::int64_t>(gridDim.x) * kThreads) {
    coef[e] = p1.k_slot[e] >= 0 ? p1.wcoef[e / CW * CW + p1.inv_pos[e]] : 0.0f;
  }
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
    chunk::transposed_block(Ms, bt + it, r0, it == R0, chunk::round_up4(C - it < kBlock ? C - it : kBlock), acc);
  }
}

// solve_side.
// Grid (column tiles of kCols = 32 / 16 / 8, P): the CTA keeps dy and ddelta of its
// columns for all C rows in shared memory (transposed), so the two chained products
// never leave the CTA; thread t owns column t % kCols and 4 consecutive rows of each
// 64-row block; QK and X are staged one 64 x 64 block at a time (chunk_products.cuh).
// Each sum is one fmaf chain over i = j .. C-1 ascending; ddelta = D_w + that sum.
// C <= 64 (solve_side_small): QK and X are staged whole by cp.async, and dy (raw bits),
// D_w and beta of the CTA are loaded, before the first __syncthreads: one global
// round trip, then both products from shared memory (the same chains, same bits).
// 64 < C <= 128 (solve_side_medium): likewise with the three lower blocks of QK and X.
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
  const auto [tid, threads, col, group, groups, r0, p, n, c, in_cols] = chunk::tile_thread<kCols>(geo, ti, blockIdx.y);
  float* dy_col = dyt + col * ld;
  float* dd_col = ddt + col * ld;

  // dy = grad_readings of the step as f32 (0 for padding tokens): to bb.dy and to shared memory.
  for (int i = group; i < chunk::round_up4(C); i += groups) {
    float x = 0.0f;
    if (in_cols && i < C) {
      const std::int64_t t = ti * C + i;
      if (t < geo.T) x = load_any(bb.grad_readings.data, bb.grad_readings.dtype, (p * geo.T + t) * hd + c);
      bb.dy[(n * C + i) * hd + c] = x;
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
      bb.du[(n * C + j) * hd + c] = acc[r];
      const std::int64_t t = ti * C + j;
      if (grad_v.data != nullptr && t < geo.T) {
        const std::int64_t token = p * geo.T + t;
        store_any(grad_v.data, grad_v.dtype, token * hd + c, load_input(in.beta, in.beta_dtype, token) * acc[r]);
      }
    }
  }
}

// A thread's token operands in solve_side_small / solve_side_medium, loaded before their first
// barrier: dy of rows group + k * groups (k < 4: 0 .. round_up4(C) - 1 once, raw bits), D_w and
// beta (raw bits, only where grad_v is asked for) of the thread's rows r0 .. r0 + 3.
struct SideOperands {
  std::uint64_t dy_bits[kRows] = {};
  std::uint32_t beta_bits[kRows] = {};
  float dw[kRows] = {};
};

__device__ __forceinline__ SideOperands load_side_operands(const Geometry& geo, const Inputs& in,
                                                           const BackwardBuffers& bb, const chunk::TileThread& th,
                                                           std::int64_t ti, bool want_grad_v) {
  const int C = static_cast<int>(geo.C);
  const std::int64_t hd = geo.hd;
  SideOperands ops;
#pragma unroll
  for (int k = 0; k < kRows; ++k) {
    const int i = th.group + k * th.groups;
    const std::int64_t t = ti * C + i;
    if (th.in_cols && i < C && t < geo.T) {
      ops.dy_bits[k] =
          chunk::load_any_bits(bb.grad_readings.data, bb.grad_readings.dtype, (th.p * geo.T + t) * hd + th.c);
    }
  }
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const int j = th.r0 + r;
    const std::int64_t t = ti * C + j;
    if (th.in_cols && j < C) {
      ops.dw[r] = bb.dw[(th.p * C + j) * hd + th.c];
      if (want_grad_v && t < geo.T) {
        ops.beta_bits[r] = chunk::load_input_bits(in.beta, in.beta_dtype, th.p * geo.T + t);
      }
    }
  }
  return ops;
}

// dy as f32 (0 for padding tokens) into bb.dy and the tile's transposed column dy_col.
__device__ __forceinline__ void store_dy(const Geometry& geo, const BackwardBuffers& bb, const chunk::TileThread& th,
                                         std::int64_t ti, const SideOperands& ops, float* dy_col) {
  const int C = static_cast<int>(geo.C);
#pragma unroll
  for (int k = 0; k < kRows; ++k) {
    const int i = th.group + k * th.groups;
    const std::int64_t t = ti * C + i;
    const float x =
        th.in_cols && i < C && t < geo.T ? chunk::any_from_bits(ops.dy_bits[k], bb.grad_readings.dtype) : 0.0f;
    if (th.in_cols && i < C) bb.dy[(th.n * C + i) * geo.hd + th.c] = x;
    dy_col[i] = x;
  }
}

// dU of the thread's rows into bb.du, and grad_v = beta dU (valid tokens, if asked for).
__device__ __forceinline__ void store_du(const Geometry& geo, const Inputs& in, const BackwardBuffers& bb,
                                         AnyFloat grad_v, const chunk::TileThread& th, std::int64_t ti,
                                         const SideOperands& ops, const float (&du)[kRows]) {
  if (!th.in_cols) return;
  const int C = static_cast<int>(geo.C);
  const std::int64_t hd = geo.hd;
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const int j = th.r0 + r;
    if (j >= C) break;
    bb.du[(th.n * C + j) * hd + th.c] = du[r];
    const std::int64_t t = ti * C + j;
    if (grad_v.data != nullptr && t < geo.T) {
      store_any(grad_v.data, grad_v.dtype, (th.p * geo.T + t) * hd + th.c,
                chunk::input_from_bits(ops.beta_bits[r], in.beta_dtype) * du[r]);
    }
  }
}

// solve_side for C <= 64 (one 64-row block): the same sums, all global loads issued up front.
template <int kCols>
__global__ void __launch_bounds__(kCols * chunk::kRowGroups)
    solve_side_small(Geometry geo, Inputs in, Phase1Buffers p1, BackwardBuffers bb, AnyFloat grad_v,
                     std::int64_t ti) {
  extern __shared__ __align__(16) float smem[];
  wait_for_predecessor();
  const int C = static_cast<int>(geo.C);
  const int ld = chunk::operand_ld(C);
  float* QKs = smem;                   // [64][64]: QK of the chunk
  float* Xs = QKs + kBlock * kBlock;   // [64][64]: X of the chunk
  float* dyt = Xs + kBlock * kBlock;   // [kCols][ld]: dy of the tile, transposed
  float* ddt = dyt + kCols * ld;       // [kCols][ld]: ddelta of the tile, transposed
  // groups = row_groups(C), r0 < C: every thread owns a real row.
  const chunk::TileThread th = chunk::tile_thread<kCols>(geo, ti, blockIdx.y);

  chunk::stage_chunk_async(p1.QK + th.n * C * C, C, QKs, th.tid, th.threads);
  chunk::stage_chunk_async(p1.X + th.n * C * C, C, Xs, th.tid, th.threads);
  const SideOperands ops = load_side_operands(geo, in, bb, th, ti, grad_v.data != nullptr);

  float* dy_col = dyt + th.col * ld;
  float* dd_col = ddt + th.col * ld;
  store_dy(geo, bb, th, ti, ops, dy_col);
  chunk::wait_copies();
  __syncthreads();

  // ddelta = D_w + QK^T dy.
  float acc[kRows] = {};
  chunk::transposed_diagonal(QKs, dy_col, th.r0, acc);
  chunk::transposed_rows(QKs, dy_col, th.r0, th.r0 + kRows, chunk::round_up4(C), acc);
#pragma unroll
  for (int r = 0; r < kRows; ++r) dd_col[th.r0 + r] = ops.dw[r] + acc[r];
  __syncthreads();

  // dU = X^T ddelta; grad_v = beta dU.
  float du[kRows] = {};
  chunk::transposed_diagonal(Xs, dd_col, th.r0, du);
  chunk::transposed_rows(Xs, dd_col, th.r0, th.r0 + kRows, chunk::round_up4(C), du);
  store_du(geo, in, bb, grad_v, th, ti, ops, du);
}

// The three lower 64 x 64 blocks (I, J) = (0, 0), (1, 0), (1, 1) of a matrix with 64 < C <= 128,
// block (I, J) at Ms + medium_block(I, J) * 64 * 64.
constexpr int kMediumBlocks = 3;
__device__ __forceinline__ int medium_block(int I, int J) { return I * (I + 1) / 2 + J; }

// The lower blocks of the chunk's C x C matrix M (stage_block's values and zero padding), as
// cp.async copies in flight.
__device__ __forceinline__ void stage_lower_blocks(const float* __restrict__ M, int C, float* Ms, int tid,
                                                   int threads) {
  for (int I = 0; I < 2; ++I) {
    for (int J = 0; J <= I; ++J) {
      chunk::stage_block_async(M, C, I * kBlock, J * kBlock, Ms + medium_block(I, J) * kBlock * kBlock, tid, threads);
    }
  }
}

// acc[r] += sum_{i >= j} M[i][j] bt[i] for the rows j = R0 + rb + r (r < 4), i ascending, from the
// staged lower blocks: transposed_pass's chain, blocks it = R0, R0 + 64, .. in turn.
__device__ __forceinline__ void transposed_lower_blocks(const float* Ms, int C, int R0, const float* bt, int rb,
                                                        float (&acc)[kRows]) {
  for (int it = R0; it < C; it += kBlock) {
    const float* block = Ms + medium_block(it / kBlock, R0 / kBlock) * kBlock * kBlock;
    chunk::transposed_block(block, bt + it, rb, it == R0, chunk::round_up4(C - it < kBlock ? C - it : kBlock), acc);
  }
}

// solve_side for 64 < C <= 128 (two 64-row blocks): the same sums, all global loads issued up front.
// Threads: kCols x ceil(C / 4); thread group g owns the chunk rows r0 = 4g .. r0 + 3 (r0 < C), rows
// rb .. rb + 3 of block R0 (r0 = R0 + rb), so each thread holds one row group as in solve_side_small
// and the longest chain is C terms (solve_side's threads run a group of each block, up to C + 64 - 4
// terms). QK's three blocks are copied as one cp.async group, then dy (raw bits), D_w and beta of
// the thread are loaded, then X's blocks copied as a second group: ddelta waits for QK's group
// only, dU for X's. Shared memory: 6 blocks (96 KiB) + dy and ddelta of the tile (2 kCols
// operand_ld(C) floats): at C = 128, 104 / 113 / 129 KiB for kCols 8 / 16 / 32, so 2 / 2 / 1 CTAs
// of 256 / 512 / 1024 threads an SM on a Hopper (228 KiB; 53-57 registers, no spills).
template <int kCols>
__global__ void __launch_bounds__(kCols * chunk::kMediumChunk / kRows)
    solve_side_medium(Geometry geo, Inputs in, Phase1Buffers p1, BackwardBuffers bb, AnyFloat grad_v,
                      std::int64_t ti) {
  extern __shared__ __align__(16) float smem[];
  wait_for_predecessor();
  const int C = static_cast<int>(geo.C);
  const int ld = chunk::operand_ld(C);
  float* QKs = smem;                                  // [3][64][64]: QK's lower blocks
  float* Xs = QKs + kMediumBlocks * kBlock * kBlock;  // [3][64][64]: X's lower blocks
  float* dyt = Xs + kMediumBlocks * kBlock * kBlock;  // [kCols][ld]: dy of the tile, transposed
  float* ddt = dyt + kCols * ld;                      // [kCols][ld]: ddelta of the tile, transposed
  // groups = ceil(C / 4), r0 < C: every thread owns a real row.
  const chunk::TileThread th = chunk::tile_thread<kCols>(geo, ti, blockIdx.y);
  const int R0 = th.r0 / kBlock * kBlock, rb = th.r0 - R0;

  stage_lower_blocks(p1.QK + th.n * C * C, C, QKs, th.tid, th.threads);
  commit_async_copies();
  const SideOperands ops = load_side_operands(geo, in, bb, th, ti, grad_v.data != nullptr);
  stage_lower_blocks(p1.X + th.n * C * C, C, Xs, th.tid, th.threads);
  commit_async_copies();

  float* dy_col = dyt + th.col * ld;
  float* dd_col = ddt + th.col * ld;
  store_dy(geo, bb, th, ti, ops, dy_col);
  wait_async_groups<1>();
  __syncthreads();

  // ddelta = D_w + QK^T dy.
  float acc[kRows] = {};
  transposed_lower_blocks(QKs, C, R0, dy_col, rb, acc);
#pragma unroll
  for (int r = 0; r < kRows; ++r) dd_col[th.r0 + r] = ops.dw[r] + acc[r];
  wait_async_groups<0>();
  __syncthreads();

  // dU = X^T ddelta; grad_v = beta dU.
  float du[kRows] = {};
  transposed_lower_blocks(Xs, C, R0, dd_col, rb, du);
  store_du(geo, in, bb, grad_v, th, ti, ops, du);
}

// ---- pair_dots ---------------------------------------------------------------------------------

constexpr int kPairTile = 64;                 // rows i (and j) of a CTA's output tile
constexpr int kTileStride = 16;               // thread (ty, tx) owns rows ty + 16 a and columns tx + 16 b
constexpr int kTileRows = kPairTile / kTileStride;  // a, b < 4: a 4 x 4 register tile per thread
constexpr int kSliceCols = 32;                // columns k of a staged slice
constexpr int kSliceUnits = kSliceCols / 4;   // 16-byte units of a staged row
constexpr int kSliceLd = kSliceCols + 4;      // floats per staged row: rows r, r + 1 start 4 banks apart
constexpr int kOperandFloats = kPairTile * kSliceLd;  // one operand of a slice: 64 rows
constexpr int kOperands = 4;                  // dy, dU, delta, residual (diagonal tiles only)
constexpr int kSliceFloats = kOperands * kOperandFloats;
constexpr int kSlicesInFlight = 3;            // cp.async pipeline depth
constexpr std::size_t kPairSmemBytes = sizeof(float) * kSlicesInFlight * kSliceFloats;  // 108 KiB: 2 CTAs / SM
static_assert(kTileStride * kTileStride == kThreads, "pair_dots: one 4 x 4 register tile per thread");
static_assert(kPairTile * kSliceUnits % kThreads == 0, "pair_dots: whole copies per thread");

// dst[r][c] = rows[r][k0 + c] (row stride hd) for r < 64, c < 32, as cp.async copies; 0 for r >= real_rows
// and for k0 + c >= hd. Copy o = tid + 256 m: row o / 8, unit o % 8 (8 lanes read 128 contiguous bytes).
// kVec (hd % 4 == 0, 16-byte aligned rows): one 16-byte copy per unit, else four 4-byte copies (same values).
template <bool kVec>
__device__ __forceinline__ void stage_operand(const float* __restrict__ rows, int real_rows, std::int64_t hd,
                                              std::int64_t k0, float* dst, int tid) {
#pragma unroll
  for (int m = 0; m < kPairTile * kSliceUnits / kThreads; ++m) {
    const int o = tid + m * kThreads, r = o / kSliceUnits, q = o % kSliceUnits;
    const std::int64_t c = k0 + 4 * q;
    float* d = dst + r * kSliceLd + 4 * q;
    const bool real_row = r < real_rows;
    const float* src = real_row ? rows + r * hd + c : rows;  // rows: a valid address for zero-fill copies
    if constexpr (kVec) {
      const bool real = real_row && c < hd;
      chunk::copy_async16(d, real ? src : rows, real ? 16 : 0);
    } else {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const bool real = real_row && c + e < hd;
        chunk::copy_async4(d + e, real ? src + e : rows, real ? 4 : 0);
      }
    }
  }
}

__device__ __forceinline__ void load_quad(const float* p, float (&x)[4]) {
  const float4 v = chunk::load4(p);
  x[0] = v.x, x[1] = v.y, x[2] = v.z, x[3] = v.w;
}

// The thread's tile over the slice's columns k = 4g .. 4g + 3, g < groups, ascending:
//   qk[a][b] += dy_(ty+16a)[k] delta_(tx+16b)[k],  ms[a][b] += dU_(ty+16a)[k] delta_(tx+16b)[k]
// (kDiag: pairs b <= a only; the others lie above the diagonal). One fmaf per pair and k.
template <bool kDiag>
__device__ __forceinline__ void pair_slice(const float* slice, int ty, int tx, int groups,
                                           float (&qk)[kTileRows][kTileRows], float (&ms)[kTileRows][kTileRows]) {
  const float* dys = slice + ty * kSliceLd;
  const float* dus = dys + kOperandFloats;
  const float* des = slice + 2 * kOperandFloats + tx * kSliceLd;
#pragma unroll 1
  for (int g = 0; g < groups; ++g) {
    float y[kTileRows][4], u[kTileRows][4], e[kTileRows][4];
#pragma unroll
    for (int a = 0; a < kTileRows; ++a) {
      load_quad(dys + a * kTileStride * kSliceLd + 4 * g, y[a]);
      load_quad(dus + a * kTileStride * kSliceLd + 4 * g, u[a]);
      load_quad(des + a * kTileStride * kSliceLd + 4 * g, e[a]);
    }
#pragma unroll
    for (int q = 0; q < 4; ++q) {
#pragma unroll
      for (int a = 0; a < kTileRows; ++a) {
#pragma unroll
        for (int b = 0; b < kTileRows; ++b) {
          if (kDiag && b > a) continue;
          qk[a][b] = fmaf(y[a][q], e[b][q], qk[a][b]);
          ms[a][b] = fmaf(u[a][q], e[b][q], ms[a][b]);
        }
      }
    }
  }
}

// acc += res_r[k] dU_r[k] over the slice's columns k = 0 .. 4 groups - 1 ascending (row r of the tile).
__device__ __forceinline__ float residual_slice(const float* slice, int r, int groups, float acc) {
  const float* dus = slice + kOperandFloats + r * kSliceLd;
  const float* res = slice + 3 * kOperandFloats + r * kSliceLd;
#pragma unroll 1
  for (int g = 0; g < groups; ++g) {
    float x[4], u[4];
    load_quad(res + 4 * g, x);
    load_quad(dus + 4 * g, u);
#pragma unroll
    for (int q = 0; q < 4; ++q) acc = fmaf(x[q], u[q], acc);
  }
  return acc;
}

// One 64 x 64 output tile (row tile I, column tile J <= I) of chunk n (file header).
template <bool kDiag, bool kVec>
__device__ __forceinline__ void pair_tile(const Geometry& geo, const BackwardBuffers& bb, int I, int J, float* smem) {
  const int C = static_cast<int>(geo.C);
  const std::int64_t hd = geo.hd, n = blockIdx.x;
  const int tid = static_cast<int>(threadIdx.x), warp = tid / 32, lane = tid % 32;
  const int tx = lane % 8 + 8 * (warp % 2), ty = lane / 8 + 4 * (warp / 2);
  const int i0 = kPairTile * I, j0 = kPairTile * J;
  const int ni = C - i0 < kPairTile ? C - i0 : kPairTile, nj = C - j0 < kPairTile ? C - j0 : kPairTile;
  const float* dy = bb.dy + (n * C + i0) * hd;
  const float* du = bb.du + (n * C + i0) * hd;
  const float* res = bb.residual + (n * C + i0) * hd;
  const float* delta = bb.delta + (n * C + j0) * hd;
  const std::int64_t slices = (hd + kSliceCols - 1) / kSliceCols;

  const auto stage = [&](std::int64_t s) {
    float* slice = smem + (s % kSlicesInFlight) * kSliceFloats;
    const std::int64_t k0 = s * kSliceCols;
    stage_operand<kVec>(dy, ni, hd, k0, slice, tid);
    stage_operand<kVec>(du, ni, hd, k0, slice + kOperandFloats, tid);
    stage_operand<kVec>(delta, nj, hd, k0, slice + 2 * kOperandFloats, tid);
    if constexpr (kDiag) stage_operand<kVec>(res, ni, hd, k0, slice + 3 * kOperandFloats, tid);
  };

  // One copy group per slice (empty past the last), so "all but the newest kSlicesInFlight - 2
  // groups complete" means slice s has landed.
  for (int s = 0; s < kSlicesInFlight - 1; ++s) {
    if (s < slices) stage(s);
    commit_async_copies();
  }
  float qk[kTileRows][kTileRows] = {}, ms[kTileRows][kTileRows] = {};
  float rdot = 0.0f;
  const bool rdot_owner = kDiag && tid < kPairTile;  // warps 0 and 1: rdot of tile row tid
  for (std::int64_t s = 0; s < slices; ++s) {
    wait_async_groups<kSlicesInFlight - 2>();
    __syncthreads();  // slice s visible to all; slice s - 1 consumed, its buffer free for slice s + 2
    if (s + kSlicesInFlight - 1 < slices) stage(s + kSlicesInFlight - 1);
    commit_async_copies();
    const float* slice = smem + (s % kSlicesInFlight) * kSliceFloats;
    const std::int64_t left = hd - s * kSliceCols;
    const int groups = left < kSliceCols ? static_cast<int>((left + 3) / 4) : kSliceUnits;
    pair_slice<kDiag>(slice, ty, tx, groups, qk, ms);
    if (rdot_owner) rdot = residual_slice(slice, tid, groups, rdot);
  }

#pragma unroll
  for (int a = 0; a < kTileRows; ++a) {
    const int i = i0 + ty + kTileStride * a;
    if (i >= C) break;
    float* dqk_row = bb.dqk + (n * C + i) * C;
    float* dms_row = bb.dms + (n * C + i) * C;
#pragma unroll
    for (int b = 0; b < kTileRows; ++b) {
      if (kDiag && b > a) continue;
      const int j = j0 + tx + kTileStride * b;
      if (j <= i) dqk_row[j] = qk[a][b];
      if (j < i) dms_row[j] = -ms[a][b];
    }
  }
  if (rdot_owner && tid < ni) bb.rdot[n * C + i0 + tid] = rdot;
}

// pair_dots.
// Grid (chunk n, tile): the lower triangle of 64 x 64 output tiles (row tile I, column tile
// J <= I; one tile for C <= 64, at most 10 for C <= 256), 256 threads per CTA. The CTA walks
// the columns k in slices of 32: dy, dU (and, on a diagonal tile, residual) of the 64 rows
// of tile I and delta of the rows of tile J are copied into shared memory by cp.async, 3
// slices in flight (16-byte copies when hd % 4 == 0 and the four buffers are 16-byte
// aligned, else 4-byte copies: the same values; rows past C and columns past hd are
// zero-filled), so each row is read from global memory once per CTA. Thread (ty, tx)
// (tx = lane % 8 + 8 (warp % 2), ty = lane / 8 + 4 (warp / 2)) owns the pairs
// i = 64 I + ty + 16 a, j = 64 J + tx + 16 b (a, b < 4) of dQK and of dMs in registers;
// on a diagonal tile only b <= a (pairs with b > a have j > i), 20 fmaf per k instead of
// 32. Per 4 columns a thread loads 12 float4 from shared memory (rows 36 floats apart: a
// warp's 4 i-rows and 8 j-rows hit distinct banks). On a diagonal tile threads t < 64
// (warps 0, 1) also own rdot of row 64 I + t.
// Numerics: every dQK, dMs and rdot value is ONE fmaf chain (f32, round to nearest) over
// k = 0, 1, .., hd - 1 ascending starting at +0 (dy_i[k] delta_j[k], dU_i[k] delta_j[k],
// res_i[k] dU_i[k]); dMs stores the chain negated. The last slice's zero columns up to a
// multiple of 4 add fmaf(0, 0, .) terms, which change no value except possibly the sign of
// a zero. Rows past C are zero in shared memory and never stored.
template <bool kVec>
__global__ void __launch_bounds__(kThreads, min_blocks(kThreads, 2)) pair_dots(Geometry geo, BackwardBuffers bb) {
  extern __shared__ __align__(16) float smem[];
  wait_for_predecessor();
  // Tile y of the lower triangle of 64 x 64 tiles: row tile I, column tile J <= I.
  const int y = static_cast<int>(blockIdx.y);
  int I = 0;
  while ((I + 1) * (I + 2) / 2 <= y) ++I;
  const int J = y - I * (I + 1) / 2;
  if (I == J) pair_tile<true, kVec>(geo, bb, I, J, smem);
  else pair_tile<false, kVec>(geo, bb, I, J, smem);
}

// solve_side_medium where it applies (64 < C <= 128, not forced blockwise: chunk_products.hpp) and
// its shared memory fits the device (129 KiB at kCols 32: not on sm_86 / sm_89); false otherwise.
template <int kCols>
bool launch_solve_side_medium(const Geometry& geo, const Inputs& in, const Phase1Buffers& p1,
                              const BackwardBuffers& bb, AnyFloat grad_v, std::int64_t ti, cudaStream_t stream) {
  const int C = static_cast<int>(geo.C);
  const std::size_t smem =
      static_cast<std::size_t>(2 * kMediumBlocks * kBlock * kBlock + 2 * kCols * chunk::operand_ld(C)) * sizeof(float);
  if (C <= kBlock || C > chunk::kMediumChunk || blockwise_chunk_products() || smem > shared_memory_optin()) return false;
  const auto kernel = solve_side_medium<kCols>;
  allow_dynamic_shared_memory(kernel, smem, "cudaFuncSetAttribute (solve_side_medium shared memory)");
  const dim3 grid(static_cast<unsigned>((geo.hd + kCols - 1) / kCols), static_cast<unsigned>(geo.p_count));
  const dim3 block(static_cast<unsigned>(kCols * ((C + kRows - 1) / kRows)));
  launch_dependent(kernel, grid, block, smem, stream, "solve_side", geo, in, p1, bb, grad_v, ti);
  return true;
}

template <int kCols>
void launch_solve_side(const Geometry& geo, const Inputs& in, const Phase1Buffers& p1, const BackwardBuffers& bb,
                       AnyFloat grad_v, std::int64_t ti, cudaStream_t stream) {
  if (launch_solve_side_medium<kCols>(geo, in, p1, bb, grad_v, ti, stream)) return;
  const int C = static_cast<int>(geo.C);
  const bool small = C <= kBlock;  // one block: both matrices staged whole (solve_side_small)
  const auto kernel = small ? solve_side_small<kCols> : solve_side<kCols>;
  const int matrices = small ? 2 : 1;
  const std::size_t smem =
      static_cast<std::size_t>(matrices * kBlock * kBlock + 2 * kCols * chunk::operand_ld(C)) * sizeof(float);
  if (smem > 48 * 1024) {
    check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)),
               "cudaFuncSetAttribute (solve_side shared memory)");
  }
  const dim3 grid(static_cast<unsigned>((geo.hd + kCols - 1) / kCols), static_cast<unsigned>(geo.p_count));
  const dim3 block(static_cast<unsigned>(kCols * chunk::row_groups(C)));
  launch_dependent(kernel, grid, block, smem, stream, "solve_side", geo, in, p1, bb, grad_v, ti);
}

}  // namespace

void launch_entry_coefs(const Geometry& geo, const Phase1Buffers& p1, const BackwardBuffers& bb, cudaStream_t stream) {
  const std::int64_t entries = geo.write_entries();
  const std::int64_t blocks = (entries + kThreads - 1) / kThreads;
  entry_coefs<<<static_cast<unsigned>(blocks < 65536 ? blocks : 65536), kThreads, 0, stream>>>(geo, p1, bb.entry_coef);
  check_launch("entry_coefs");
}

void launch_token_side(const Geometry& geo, const Inputs& in, const Phase1Buffers& p1, const BackwardBuffers& bb,
                       AnyFloat grad_v, std::int64_t ti, cudaStream_t stream) {
  GatherDots dc;  // <delta_i, G[s]> of every write entry, at its sorted position (backward.hpp: dc_in_gwr)
  if (dc_in_gwr(bb.vec8)) dc = GatherDots{bb.delta, p1.inv_pos, bb.dc.base, bb.dc.stride};
  launch_weighted_gather(geo, bb.grad_rows, bb.bf16_grad_rows, bb.vec8, GatherSide{p1.k_slot, bb.entry_coef, geo.W},
                         GatherSide{}, ti, bb.dw, nullptr, stream, dc);

  dispatch([&](auto cols) { launch_solve_side<decltype(cols)::value>(geo, in, p1, bb, grad_v, ti, stream); },
           TileCols{chunk::tile_cols(geo.hd, geo.p_count)});
}

void launch_pair_dots(const Geometry& geo, const BackwardBuffers& bb, cudaStream_t stream) {
  const std::int64_t tiles = (geo.C + kPairTile - 1) / kPairTile;
  const dim3 grid(static_cast<unsigned>(geo.N), static_cast<unsigned>(tiles * (tiles + 1) / 2));
  const bool vec =
      geo.hd % 4 == 0 && aligned16(bb.dy) && aligned16(bb.du) && aligned16(bb.residual) && aligned16(bb.delta);
  dispatch(
      [&](auto vec4) {
        constexpr auto kernel = pair_dots<decltype(vec4)::value>;
        check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        static_cast<int>(kPairSmemBytes)),
                   "cudaFuncSetAttribute (pair_dots shared memory)");
        check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                        cudaSharedmemCarveoutMaxShared),
                   "cudaFuncSetAttribute (pair_dots carveout)");
        launch_dependent(kernel, grid, dim3(kThreads), kPairSmemBytes, stream, "pair_dots", geo, bb);
      },
      Flag{vec});
}

}  // namespace sdm::cuda

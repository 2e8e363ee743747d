// backward_tokens.cu - the token side of one reverse step of the CUDA backward (SPEC C.2 steps 1-6,
// C.3 "GWR" and "baddbmm"), for the P chunks n = ti*P + p of step ti. Kernels, in launch order:
//
//   gather_grads  D_w[p*C+i] = sum_w coef_(i,w) G[s_(i,w)] (coef = kappa exp(Lambda - L), masked
//                 entries skipped). One CTA of 8 warps per (step row, 256-column tile); lane l owns 8
//                 columns (backward_rows.cuh); warp k sums lanes w = k, k+8, ... in that order, then
//                 the 8 warp partials are added in warp order through shared memory. Latency: a
//                 warp's lanes load the slots / coefs of 32 of its entries at once, then the warp
//                 keeps 8 G row pieces in flight (raw, converted when added) per batch of adds.
//   solve_side    dy = grad_readings of the step as f32 rows (any dtype; 0 for padding tokens), stored
//                 into bb.dy [N*C, hd] at the chunk's rows (slot_groups_backward and pair_dots read it);
//                 ddelta_j = D_w[j] + (sum_{i>=j} QK[i][j] dy_i);  dU_j = sum_{i>=j} X[i][j] ddelta_i;
//                 stores dU (bb.du [N*C, hd], the chunk's rows) and grad_v = beta dU (valid tokens, if
//                 requested).
//                 Grid (column tiles of kCols = 32 / 16 / 8, P): the CTA keeps dy and ddelta of its
//                 columns for all C rows in shared memory (transposed), so the two chained products
//                 never leave the CTA; thread t owns column t % kCols and 4 consecutive rows of each
//                 64-row block; QK and X are staged one 64 x 64 block at a time (chunk_products.cuh).
//                 Each sum is one fmaf chain over i = j .. C-1 ascending; ddelta = D_w + that sum.
//                 C <= 64 (solve_side_small): QK and X are staged whole by cp.async, and dy (raw bits),
//                 D_w and beta of the CTA are loaded, before the first __syncthreads: one global
//                 round trip, then both products from shared memory (the same chains, same bits).
//   pair_dots     once after the reverse loop, for every chunk (nothing in the loop reads its output; its
//                 inputs dy, dU, delta, residual are kept for all chunks): grid (chunk n, block), the
//                 lower triangle of 4 x 4 blocks of pairs (i, j), one CTA per block:
//                 dQK[i][j] = <dy_i, delta_j> (j <= i), dMs[i][j] = -<dU_i, delta_j> (j < i) and
//                 rdot[i] = <res_i, dU_i> (diagonal blocks, in the slot of dMs[i][i]). The CTA's
//                 warps = min(8, ceil(ceil(hd/4) / 96)) split the columns in units of 4: warp w, lane l
//                 owns the units u = 32 (w + warps s) + l, s = 0, 1, .. (columns 4u .. 4u+3; a float4
//                 per row and unit when hd % 4 == 0 and the rows are 16-byte aligned, scalars
//                 otherwise: same values, same order); each lane keeps the 32 partial dots of the
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
constexpr unsigned kAllLanes = 0xffffffffu;

constexpr int kInFlight = 8;  // G row pieces a warp loads before it adds them

// A lane's piece of a G row as loaded (packed bf16 / f32 words, or element by element with the
// columns past hd read as 0), converted to f32 only when added: loads of several rows fly together.
template <typename Gt, bool kVec>
struct RawPiece {
  PackedRow<Gt, kLaneCols> packed;
};
template <typename Gt>
struct RawPiece<Gt, false> {
  Gt e[kLaneCols];
};

template <typename Gt, bool kVec>
__device__ __forceinline__ void load_raw(const Gt* row, std::int64_t c0, std::int64_t hd, RawPiece<Gt, kVec>& x) {
  if constexpr (kVec) {
    load_packed(row + c0, x.packed);
  } else {
#pragma unroll
    for (int k = 0; k < kLaneCols; ++k) x.e[k] = c0 + k < hd ? row[c0 + k] : Gt{};
  }
}

template <typename Gt, bool kVec>
__device__ __forceinline__ void unpack_raw(const RawPiece<Gt, kVec>& x, float (&out)[kLaneCols]) {
  if constexpr (kVec) {
    unpack(x.packed, out);
  } else {
#pragma unroll
    for (int k = 0; k < kLaneCols; ++k) out[k] = to_f32(x.e[k]);
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
  // Warp k adds w = k, k + 8, .. ascending, 32 at a time: lane l loads the slot and coef of the
  // batch's entry l, then the warp loads kInFlight G pieces (slots by shuffle) before adding them.
  for (std::int64_t base = warp; base < geo.W; base += kWarps * 32) {
    const std::int64_t w = base + kWarps * lane;
    std::int32_t slot = -1;
    float coef = 0.0f;
    if (w < geo.W) {
      slot = p1.k_slot[entry0 + w];
      if (slot >= 0) coef = p1.wcoef[n * geo.C * geo.W + p1.inv_pos[entry0 + w]];
    }
    const std::int64_t left = (geo.W - base + kWarps - 1) / kWarps;  // entries of this warp from base on
    const int count = left < 32 ? static_cast<int>(left) : 32;
    for (int m0 = 0; m0 < count; m0 += kInFlight) {
      RawPiece<Gt, kVec> x[kInFlight];
      std::int32_t s[kInFlight];
#pragma unroll
      for (int m = 0; m < kInFlight; ++m) {
        s[m] = __shfl_sync(kAllLanes, slot, (m0 + m) & 31);
        if (m0 + m >= count) s[m] = -1;
        if (s[m] >= 0 && c0 < geo.hd) load_raw<Gt, kVec>(rows + static_cast<std::int64_t>(s[m]) * geo.hd, c0, geo.hd, x[m]);
      }
#pragma unroll
      for (int m = 0; m < kInFlight; ++m) {
        const float cm = __shfl_sync(kAllLanes, coef, (m0 + m) & 31);
        if (s[m] < 0 || c0 >= geo.hd) continue;
        float g[kLaneCols];
        unpack_raw<Gt, kVec>(x[m], g);
#pragma unroll
        for (int k = 0; k < kLaneCols; ++k) acc[k] = fmaf(cm, g[k], acc[k]);
      }
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

// solve_side for C <= 64 (one 64-row block): the same sums, all global loads issued up front.
template <int kCols>
__global__ void __launch_bounds__(kCols * chunk::kRowGroups)
    solve_side_small(Geometry geo, Inputs in, Phase1Buffers p1, BackwardBuffers bb, AnyFloat grad_v,
                     std::int64_t ti) {
  extern __shared__ __align__(16) float smem[];
  wait_for_predecessor();
  const int C = static_cast<int>(geo.C);
  const std::int64_t hd = geo.hd;
  const int ld = chunk::operand_ld(C);
  float* QKs = smem;                   // [64][64]: QK of the chunk
  float* Xs = QKs + kBlock * kBlock;   // [64][64]: X of the chunk
  float* dyt = Xs + kBlock * kBlock;   // [kCols][ld]: dy of the tile, transposed
  float* ddt = dyt + kCols * ld;       // [kCols][ld]: ddelta of the tile, transposed
  const int tid = static_cast<int>(threadIdx.x), threads = static_cast<int>(blockDim.x);
  const int col = tid % kCols, group = tid / kCols, groups = threads / kCols;  // groups = row_groups(C)
  const int r0 = kRows * group;  // < C: every thread owns a real row
  const std::int64_t p = blockIdx.y, n = ti * geo.P + p;
  const std::int64_t c = static_cast<std::int64_t>(blockIdx.x) * kCols + col;
  const bool in_cols = c < hd;
  const bool want_grad_v = grad_v.data != nullptr;

  chunk::stage_chunk_async(p1.QK + n * C * C, C, QKs, tid, threads);
  chunk::stage_chunk_async(p1.X + n * C * C, C, Xs, tid, threads);
  // dy rows i = group + k * groups (k < 4) cover 0 .. round_up4(C) - 1 once; D_w and beta of the
  // thread's rows r0 .. r0 + 3.
  std::uint64_t dy_bits[kRows] = {};
  std::uint32_t beta_bits[kRows] = {};
  float dw[kRows] = {};
#pragma unroll
  for (int k = 0; k < kRows; ++k) {
    const int i = group + k * groups;
    const std::int64_t t = ti * C + i;
    if (in_cols && i < C && t < geo.T) {
      dy_bits[k] = chunk::load_any_bits(bb.grad_readings.data, bb.grad_readings.dtype, (p * geo.T + t) * hd + c);
    }
  }
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const int j = r0 + r;
    const std::int64_t t = ti * C + j;
    if (in_cols && j < C) {
      dw[r] = bb.dw[(p * C + j) * hd + c];
      if (want_grad_v && t < geo.T) beta_bits[r] = chunk::load_input_bits(in.beta, in.beta_dtype, p * geo.T + t);
    }
  }

  float* dy_col = dyt + col * ld;
  float* dd_col = ddt + col * ld;
#pragma unroll
  for (int k = 0; k < kRows; ++k) {
    const int i = group + k * groups;
    const std::int64_t t = ti * C + i;
    const float x = in_cols && i < C && t < geo.T ? chunk::any_from_bits(dy_bits[k], bb.grad_readings.dtype) : 0.0f;
    if (in_cols && i < C) bb.dy[(n * C + i) * hd + c] = x;
    dy_col[i] = x;
  }
  chunk::wait_copies();
  __syncthreads();

  // ddelta = D_w + QK^T dy.
  float acc[kRows] = {};
  chunk::transposed_diagonal(QKs, dy_col, r0, acc);
  chunk::transposed_rows(QKs, dy_col, r0, r0 + kRows, chunk::round_up4(C), acc);
#pragma unroll
  for (int r = 0; r < kRows; ++r) dd_col[r0 + r] = dw[r] + acc[r];
  __syncthreads();

  // dU = X^T ddelta; grad_v = beta dU.
  float du[kRows] = {};
  chunk::transposed_diagonal(Xs, dd_col, r0, du);
  chunk::transposed_rows(Xs, dd_col, r0, r0 + kRows, chunk::round_up4(C), du);
  if (!in_cols) return;
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const int j = r0 + r;
    if (j >= C) break;
    bb.du[(n * C + j) * hd + c] = du[r];
    const std::int64_t t = ti * C + j;
    if (want_grad_v && t < geo.T) {
      store_any(grad_v.data, grad_v.dtype, (p * geo.T + t) * hd + c,
                chunk::input_from_bits(beta_bits[r], in.beta_dtype) * du[r]);
    }
  }
}

// ---- pair_dots ---------------------------------------------------------------------------------

constexpr int kQuad = 4;                    // rows i (and j) of a CTA's block of pairs
constexpr int kDots = 2 * kQuad * kQuad;    // dQK and dMs of a 4 x 4 block: one per lane
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

constexpr int kUnit = 4;           // consecutive columns of a unit (one 16-byte access on the vector path)
constexpr int kLaneUnits = 3;      // a lane walks at least about this many units (sets the warps per CTA)

// pair_partials: lane partials over the units u = u0, u0 + ustride, .. (columns 4u .. 4u + 3 < hd; u ascending,
// then the unit's columns ascending), for the rows dy_k = dy + k hd (k < ni), likewise du, res, and
// delta_k = delta + k hd (k < nj); rows past ni / nj and columns past hd read as 0 (adding fmaf(0, 0)
// to a partial that starts at +0 never changes it). acc[a*4 + b] <- dy_a . delta_b and
// acc[16 + a*4 + b] <- dU_a . delta_b, except on a diagonal block (kDiag), where
// acc[16 + a*4 + a] <- res_a . dU_a. kVec (hd % 4 == 0, 16-byte aligned rows): one float4 per row and
// unit instead of 4 scalars, the same values in the same order.

// x = row[c .. c + 3] (0 for a row that is not real and for columns past hd).
template <bool kVec>
__device__ __forceinline__ void load_unit(const float* __restrict__ row, std::int64_t c, std::int64_t hd, bool real,
                                          float (&x)[kUnit]) {
  if constexpr (kVec) {
    const float4 v = real ? *reinterpret_cast<const float4*>(row + c) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    x[0] = v.x, x[1] = v.y, x[2] = v.z, x[3] = v.w;
  } else {
#pragma unroll
    for (int q = 0; q < kUnit; ++q) x[q] = real && c + q < hd ? row[c + q] : 0.0f;
  }
}

// The lane partials described above.
template <bool kDiag, bool kVec>
__device__ __forceinline__ void pair_partials(const float* __restrict__ dy, const float* __restrict__ du,
                                              const float* __restrict__ res, const float* __restrict__ delta, int ni,
                                              int nj, std::int64_t u0, std::int64_t ustride, std::int64_t hd,
                                              float (&acc)[kDots]) {
  for (std::int64_t c = kUnit * u0; c < hd; c += kUnit * ustride) {
    float a[kQuad][kUnit], u[kQuad][kUnit], e[kQuad][kUnit], r[kQuad][kUnit];
#pragma unroll
    for (int k = 0; k < kQuad; ++k) {
      load_unit<kVec>(dy + k * hd, c, hd, k < ni, a[k]);
      load_unit<kVec>(du + k * hd, c, hd, k < ni, u[k]);
      load_unit<kVec>(delta + k * hd, c, hd, k < nj, e[k]);
      load_unit<kVec>(res + k * hd, c, hd, kDiag && k < ni, r[k]);
    }
#pragma unroll
    for (int q = 0; q < kUnit; ++q) {
#pragma unroll
      for (int ia = 0; ia < kQuad; ++ia) {
#pragma unroll
        for (int jb = 0; jb < kQuad; ++jb) {
          acc[ia * kQuad + jb] = fmaf(a[ia][q], e[jb][q], acc[ia * kQuad + jb]);
          float& other = acc[kQuad * kQuad + ia * kQuad + jb];
          other = kDiag && ia == jb ? fmaf(r[ia][q], u[ia][q], other) : fmaf(u[ia][q], e[jb][q], other);
        }
      }
    }
  }
}

template <bool kVec>
__global__ void __launch_bounds__(kThreads) pair_dots(Geometry geo, BackwardBuffers bb) {
  __shared__ float partial[kWarps][32];
  wait_for_predecessor();
  const int C = static_cast<int>(geo.C);
  const std::int64_t hd = geo.hd;
  // Block x of the lower triangle of 4 x 4 blocks: row block iq, column block jq <= iq.
  const int x = static_cast<int>(blockIdx.y);
  int iq = static_cast<int>((sqrtf(8.0f * static_cast<float>(x) + 1.0f) - 1.0f) * 0.5f);
  while (iq * (iq + 1) / 2 > x) --iq;
  while ((iq + 1) * (iq + 2) / 2 <= x) ++iq;
  const int jq = x - iq * (iq + 1) / 2;
  const std::int64_t n = blockIdx.x;
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int warps = static_cast<int>(blockDim.x) / 32;
  const int i0 = kQuad * iq, j0 = kQuad * jq;
  const int ni = C - i0 < kQuad ? C - i0 : kQuad, nj = C - j0 < kQuad ? C - j0 : kQuad;
  const float* dy = bb.dy + (n * C + i0) * hd;
  const float* du = bb.du + (n * C + i0) * hd;
  const float* res = bb.residual + (n * C + i0) * hd;
  const float* delta = bb.delta + (n * C + j0) * hd;

  float acc[kDots] = {};
  const std::int64_t u0 = static_cast<std::int64_t>(warp) * 32 + lane, ustride = static_cast<std::int64_t>(warps) * 32;
  if (iq == jq) pair_partials<true, kVec>(dy, du, res, delta, ni, nj, u0, ustride, hd, acc);
  else pair_partials<false, kVec>(dy, du, res, delta, ni, nj, u0, ustride, hd, acc);
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
}

void launch_pair_dots(const Geometry& geo, const BackwardBuffers& bb, cudaStream_t stream) {
  const std::int64_t quads = (geo.C + kQuad - 1) / kQuad;
  const std::int64_t units = (geo.hd + kUnit - 1) / kUnit;
  const std::int64_t column_warps = (units + 32 * kLaneUnits - 1) / (32 * kLaneUnits);
  const dim3 grid(static_cast<unsigned>(geo.N), static_cast<unsigned>(quads * (quads + 1) / 2));
  const dim3 block(static_cast<unsigned>(32 * (column_warps < kWarps ? column_warps : kWarps)));
  const auto aligned = [](const void* ptr) { return (reinterpret_cast<std::uintptr_t>(ptr) & 15u) == 0; };
  const bool vec = geo.hd % kUnit == 0 && aligned(bb.dy) && aligned(bb.du) && aligned(bb.residual) && aligned(bb.delta);
  if (vec) launch_dependent(pair_dots<true>, grid, block, 0, stream, "pair_dots", geo, bb);
  else launch_dependent(pair_dots<false>, grid, block, 0, stream, "pair_dots", geo, bb);
}

}  // namespace sdm::cuda

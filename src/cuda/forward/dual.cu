// dual.cu - per-step dual product (docs/spec.md §2: residual, solve, readings).
//
// Inputs:  v [P, T, hd], beta [P, T] (caller dtypes), retrieved / inter f32 [P*C, hd] (step rows),
//          Phase 1's X, QX f32 [N, C, C] (lower triangular).
// Outputs: delta f32 (step rows, or chunk-token rows n*C + i in a saving call), readings E
//          [P, T, hd] (valid tokens only), residual f32 [N*C, hd] (saving calls only).
// Math:    res = rnd_E(v) - retrieved;  U = beta * res;  delta = X U;  readings = rnd_E(inter + QX U).
// Parallel decomposition (chunk_products.cuh): grid (column tiles of kCols, 64-row blocks of the
//   chunk, P); thread t owns column t % kCols and the 4 rows 4 (t / kCols) .. +3 of the CTA's row
//   block R0 .. R0+63, with delta and QX U of those rows in registers. For each 64-column slice
//   jt = 0, 64, .., R0 of X / QX (rows of the block) the CTA stages the two matrix blocks and
//   U[jt .. jt+63] of its columns (computed from v, retrieved and beta; a CTA also computes the U
//   rows of earlier slices, the same values as their own CTA's) into shared memory; slices below
//   the block are full products, the slice jt = R0 is triangular. Padding tokens have U = 0.
//   kCols (32, 16 or 8) is the widest giving about one wave of CTAs (chunk::tile_cols).
//   C <= 64 (dual_product_small, one slice): the CTA issues all its global loads before its only
//   __syncthreads - X and QX whole by cp.async, then v / retrieved / beta of its U rows (thread t:
//   rows t / kCols + k * row_groups(C), k < 4, as raw bits) and inter of its 4 output rows - so one
//   global round trip precedes the products, which then read shared memory only.
// Numerics: f32; delta[i] and (QX U)[i] are each one fmaf chain over j = 0 .. i ascending,
//   independent of kCols; readings = rnd(inter + QX U).
//   The arithmetic of readings is identical in no-grad and saving calls (the saving call only
//   stores more: residual, delta per chunk), so their readings are bitwise equal.
#include "cuda/common/chunk_products.cuh"
#include "cuda/common/cuda_check.hpp"
#include "cuda/common/dependent_launch.cuh"
#include "cuda/common/dispatch.hpp"
#include "cuda/common/values.cuh"
#include "cuda/common/step_kernels.hpp"

namespace sdm::cuda {
namespace {

using chunk::kBlock;
using chunk::kRows;
constexpr int kLdU = chunk::operand_ld(kBlock);  // U of a slice lies transposed: Ut[col * kLdU + j]

template <typename E, int kCols>
__global__ void __launch_bounds__(kCols * chunk::kRowGroups)
    dual_product(Geometry geo, Inputs in, Phase1Buffers p1, StepBuffers sb, std::int64_t ti) {
  __shared__ __align__(16) float Xs[kBlock * kBlock];
  __shared__ __align__(16) float QXs[kBlock * kBlock];
  __shared__ __align__(16) float Ut[kCols * kLdU];
  wait_for_predecessor();
  const int C = static_cast<int>(geo.C);
  const std::int64_t hd = geo.hd;
  const auto [tid, threads, col, group, groups, r0, p, n, c, in_cols] = chunk::tile_thread<kCols>(geo, ti, blockIdx.z);
  const int R0 = kBlock * static_cast<int>(blockIdx.y);
  const int rows = C - R0 < kBlock ? C - R0 : kBlock;  // rows of this CTA's block
  const bool active = r0 < rows;                       // the thread owns a real row
  const bool bf16_bank = sb.bf16_bank;

  float d[kRows] = {}, y[kRows] = {}, inter[kRows] = {};
  const float* X = p1.X + n * C * C;
  const float* QX = p1.QX + n * C * C;
  float* ut = Ut + col * kLdU;
  for (int jt = 0; jt <= R0; jt += kBlock) {
    __syncthreads();  // the previous slice is consumed
    chunk::stage_block(X, C, R0, jt, Xs, tid, threads);
    chunk::stage_block(QX, C, R0, jt, QXs, tid, threads);
    const int jrows = C - jt < kBlock ? C - jt : kBlock;
    for (int jj = group; jj < chunk::round_up4(jrows); jj += groups) {
      float u = 0.0f;
      if (in_cols && jj < jrows) {
        const std::int64_t i = jt + jj, t = ti * C + i;
        float res = 0.0f;
        if (t < geo.T) {
          const std::int64_t token = p * geo.T + t;
          const float v = round_to_bank(load_input(in.v, in.v_dtype, token * hd + c), bf16_bank);
          res = v - sb.retrieved[(p * C + i) * hd + c];
          u = load_input(in.beta, in.beta_dtype, token) * res;
        }
        if (jt == R0 && sb.residual != nullptr) sb.residual[(n * C + i) * hd + c] = res;
      }
      ut[jj] = u;
    }
    if (jt == R0) {  // the last slice: inter's loads fly during its products
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        const int i = R0 + r0 + r;
        inter[r] = active && in_cols && i < C ? sb.inter[(p * C + i) * hd + c] : 0.0f;
      }
    }
    __syncthreads();
    if (!active) continue;
    if (jt < R0) {
      chunk::lower_rows(Xs, QXs, ut, r0, kBlock, d, y);
    } else {
      chunk::lower_rows(Xs, QXs, ut, r0, r0, d, y);
      chunk::lower_diagonal(Xs, QXs, ut, r0, d, y);
    }
  }

  if (!active || !in_cols) return;
  E* readings = static_cast<E*>(sb.readings);
  const std::int64_t delta_row0 = sb.delta_per_chunk ? n * C : p * C;
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const int i = R0 + r0 + r;
    if (i >= C) break;
    sb.delta[(delta_row0 + i) * hd + c] = d[r];
    const std::int64_t t = ti * C + i;
    if (t < geo.T) readings[(p * geo.T + t) * hd + c] = from_f32<E>(inter[r] + y[r]);
  }
}

// The same results for C <= 64 (file header): the general kernel's single slice jt = R0 = 0.
template <typename E, int kCols>
__global__ void __launch_bounds__(kCols * chunk::kRowGroups)
    dual_product_small(Geometry geo, Inputs in, Phase1Buffers p1, StepBuffers sb, std::int64_t ti) {
  __shared__ __align__(16) float Xs[kBlock * kBlock];
  __shared__ __align__(16) float QXs[kBlock * kBlock];
  __shared__ __align__(16) float Ut[kCols * kLdU];
  wait_for_predecessor();
  const int C = static_cast<int>(geo.C);
  const std::int64_t hd = geo.hd;
  // groups = row_groups(C), r0 < C: every thread owns a real row.
  const auto [tid, threads, col, group, groups, r0, p, n, c, in_cols] = chunk::tile_thread<kCols>(geo, ti, blockIdx.y);

  chunk::stage_chunk_async(p1.X + n * C * C, C, Xs, tid, threads);
  chunk::stage_chunk_async(p1.QX + n * C * C, C, QXs, tid, threads);
  // U rows jj = group + k * groups (k < 4) cover 0 .. round_up4(C) - 1 once; 0 past C / T.
  std::uint32_t v_bits[kRows] = {}, beta_bits[kRows] = {};
  float retrieved[kRows] = {}, inter[kRows] = {};
#pragma unroll
  for (int k = 0; k < kRows; ++k) {
    const int i = group + k * groups;
    const std::int64_t t = ti * C + i;
    if (in_cols && i < C && t < geo.T) {
      const std::int64_t token = p * geo.T + t;
      v_bits[k] = chunk::load_input_bits(in.v, in.v_dtype, token * hd + c);
      retrieved[k] = sb.retrieved[(p * C + i) * hd + c];
      beta_bits[k] = chunk::load_input_bits(in.beta, in.beta_dtype, token);
    }
  }
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const int i = r0 + r;
    if (in_cols && i < C) inter[r] = sb.inter[(p * C + i) * hd + c];
  }

  float* ut = Ut + col * kLdU;
#pragma unroll
  for (int k = 0; k < kRows; ++k) {
    const int i = group + k * groups;
    const std::int64_t t = ti * C + i;
    float res = 0.0f, u = 0.0f;
    if (in_cols && i < C && t < geo.T) {
      const float v = round_to_bank(chunk::input_from_bits(v_bits[k], in.v_dtype), sb.bf16_bank);
      res = v - retrieved[k];
      u = chunk::input_from_bits(beta_bits[k], in.beta_dtype) * res;
    }
    if (in_cols && i < C && sb.residual != nullptr) sb.residual[(n * C + i) * hd + c] = res;
    ut[i] = u;
  }
  chunk::wait_copies();
  __syncthreads();

  float d[kRows] = {}, y[kRows] = {};
  chunk::lower_rows(Xs, QXs, ut, r0, r0, d, y);
  chunk::lower_diagonal(Xs, QXs, ut, r0, d, y);

  if (!in_cols) return;
  E* readings = static_cast<E*>(sb.readings);
  const std::int64_t delta_row0 = sb.delta_per_chunk ? n * C : p * C;
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const int i = r0 + r;
    if (i >= C) break;
    sb.delta[(delta_row0 + i) * hd + c] = d[r];
    const std::int64_t t = ti * C + i;
    if (t < geo.T) readings[(p * geo.T + t) * hd + c] = from_f32<E>(inter[r] + y[r]);
  }
}

template <typename E, int kCols>
void launch(const Geometry& geo, const Inputs& in, const Phase1Buffers& p1, const StepBuffers& sb, std::int64_t ti,
            cudaStream_t stream) {
  const int C = static_cast<int>(geo.C);
  const dim3 grid(static_cast<unsigned>((geo.hd + kCols - 1) / kCols),
                  static_cast<unsigned>((C + kBlock - 1) / kBlock), static_cast<unsigned>(geo.p_count));
  const dim3 block(static_cast<unsigned>(kCols * chunk::row_groups(C)));
  if (C <= kBlock) {
    const dim3 small_grid(grid.x, grid.z);
    launch_dependent(dual_product_small<E, kCols>, small_grid, block, 0, stream, "dual_product", geo, in, p1, sb, ti);
  } else {
    launch_dependent(dual_product<E, kCols>, grid, block, 0, stream, "dual_product", geo, in, p1, sb, ti);
  }
}

}  // namespace

void launch_dual(const Geometry& geo, const Inputs& in, const Phase1Buffers& p1, const StepBuffers& sb,
                 std::int64_t ti, cudaStream_t stream) {
  dispatch(
      [&](auto row, auto cols) {
        launch<typename decltype(row)::type, decltype(cols)::value>(geo, in, p1, sb, ti, stream);
      },
      Rows{sb.bf16_bank}, TileCols{chunk::tile_cols(geo.hd, geo.p_count * ((geo.C + kBlock - 1) / kBlock))});
}

}  // namespace sdm::cuda

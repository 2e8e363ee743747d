// dual.cu - per-step dual product (docs/spec.md §2: residual, solve, readings).
//
// Inputs:  v [P, T, hd], beta [P, T] (caller dtypes), retrieved / inter f32 [P*C, hd] (step rows),
//          Phase 1's X, QX f32 [N, C, C] (lower triangular).
// Outputs: delta f32 (step rows, or chunk-token rows n*C + i in a saving call), readings E
//          [P, T, hd] (valid tokens only), residual f32 [N*C, hd] (saving calls only).
// Math:    res = rnd_E(v) - retrieved;  U = beta * res;  delta = X U;  readings = rnd_E(inter + QX U).
// Decomposition (chunk_products.cuh): grid (column tiles of kCols, 64-row blocks, P); thread t owns
//   column t % kCols and 4 rows of the block, delta and QX U of them in registers; 64-column slices
//   of X / QX and the matching U rows are staged in shared memory (the diagonal slice triangular).
//   kCols (32, 16 or 8): the widest giving about one wave of CTAs (chunk::tile_cols). C <= 64 takes
//   dual_product_small (one slice, every global load issued before its only barrier), 64 < C <= 128
//   dual_product_medium (the same grid and threads, every slice of the CTA staged before its only
//   barrier; chunk_products.hpp).
// Numerics: f32; delta[i] and (QX U)[i] are each one fmaf chain over j = 0 .. i ascending,
//   independent of kCols; readings = rnd(inter + QX U), the same arithmetic in no-grad and saving
//   calls (the saving call only stores more), so their readings are bitwise equal.
#include "cuda/common/chunk_products.cuh"
#include "cuda/common/chunk_products.hpp"
#include "cuda/common/cuda_check.hpp"
#include "cuda/common/dependent_launch.cuh"
#include "cuda/common/device_limits.hpp"
#include "cuda/common/dispatch.hpp"
#include "cuda/common/launch_bounds.cuh"
#include "cuda/common/values.cuh"
#include "cuda/common/step_kernels.hpp"

namespace sdm::cuda {
namespace {

using chunk::kBlock;
using chunk::kRows;
constexpr int kLdU = chunk::operand_ld(kBlock);  // U of a slice lies transposed: Ut[col * kLdU + j]

// delta and readings = rnd_E(inter + QX U) of a thread's rows row0 .. row0 + 3 (those below C; the
// readings of valid tokens only), column c of stream p's chunk n.
template <typename E>
__device__ __forceinline__ void store_delta_readings(const Geometry& geo, const StepBuffers& sb, std::int64_t p,
                                                     std::int64_t n, std::int64_t c, std::int64_t ti, int row0,
                                                     const float (&d)[kRows], const float (&y)[kRows],
                                                     const float (&inter)[kRows]) {
  const int C = static_cast<int>(geo.C);
  const std::int64_t hd = geo.hd;
  E* readings = static_cast<E*>(sb.readings);
  const std::int64_t delta_row0 = sb.delta_per_chunk ? n * C : p * C;
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const int i = row0 + r;
    if (i >= C) break;
    sb.delta[(delta_row0 + i) * hd + c] = d[r];
    const std::int64_t t = ti * C + i;
    if (t < geo.T) readings[(p * geo.T + t) * hd + c] = from_f32<E>(inter[r] + y[r]);
  }
}

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
    chunk::lower_block(Xs, QXs, ut, r0, jt < R0, d, y);
  }

  if (!active || !in_cols) return;
  store_delta_readings<E>(geo, sb, p, n, c, ti, R0 + r0, d, y, inter);
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
  store_delta_readings<E>(geo, sb, p, n, c, ti, r0, d, y, inter);
}

// dual_product for 64 < C <= 128: the same grid, threads and sums, all global loads issued up front.
// The CTA of row block R0 = 64 y stages its blocks X[R0 .., jt ..] and QX[R0 .., jt ..] for jt = 0 ..
// R0 by cp.async and loads the raw v and beta bits and retrieved of the U rows its products read,
// 0 .. R0 + round_up4(rows) - 1 (rows group + k groups, k < kURows = 8), and inter of its rows, all
// before its only barrier; then each slice's lower_block in ascending jt, as dual_product does.
// Shared memory: 4 blocks (64 KiB; the CTA of R0 = 0 fills 2) + U of the tile (kCols operand_ld(C)
// floats): at C = 128, 68 / 72 / 80.5 KiB for kCols 8 / 16 / 32, under the 99 KiB a block may opt in
// to on any sm_80+ device. Two CTAs per SM asked for (min_blocks): at kCols 32 that caps registers
// at 64 (a few bytes spill, as dual_product's do), so 2 x 512 threads fit an SM (86 without); on a
// Hopper 3 / 2 / 2 CTAs an SM (registers 96 / 90 / 64).
template <typename E, int kCols>
__global__ void __launch_bounds__(kCols * chunk::kRowGroups, min_blocks(kCols * chunk::kRowGroups, 2))
    dual_product_medium(Geometry geo, Inputs in, Phase1Buffers p1, StepBuffers sb, std::int64_t ti) {
  constexpr int kURows = chunk::kMediumChunk / chunk::kRowGroups;  // U rows per thread
  extern __shared__ __align__(16) float smem[];
  wait_for_predecessor();
  const int C = static_cast<int>(geo.C);
  const std::int64_t hd = geo.hd;
  const int ld = chunk::operand_ld(C);
  // groups = kRowGroups (C > 64): rows group + k groups, k < kURows, cover 0 .. kMediumChunk - 1.
  const auto [tid, threads, col, group, groups, r0, p, n, c, in_cols] = chunk::tile_thread<kCols>(geo, ti, blockIdx.z);
  const int R0 = kBlock * static_cast<int>(blockIdx.y);
  const int rows = C - R0 < kBlock ? C - R0 : kBlock;  // rows of this CTA's block
  const bool active = r0 < rows;                       // the thread owns a real row
  const int urows = R0 + chunk::round_up4(rows);       // U rows the products read
  float* Xs = smem;                       // [2][64][64]: X[R0 .., jt ..] at slice jt / 64
  float* QXs = Xs + 2 * kBlock * kBlock;  // [2][64][64]: QX likewise
  float* Ut = QXs + 2 * kBlock * kBlock;  // [kCols][ld]: U rows 0 .. urows - 1 of the tile, transposed

  const float* X = p1.X + n * C * C;
  const float* QX = p1.QX + n * C * C;
  for (int jt = 0; jt <= R0; jt += kBlock) {
    chunk::stage_block_async(X, C, R0, jt, Xs + jt / kBlock * kBlock * kBlock, tid, threads);
    chunk::stage_block_async(QX, C, R0, jt, QXs + jt / kBlock * kBlock * kBlock, tid, threads);
  }
  std::uint32_t v_bits[kURows] = {}, beta_bits[kURows] = {};
  float retrieved[kURows] = {}, inter[kRows] = {};
#pragma unroll
  for (int k = 0; k < kURows; ++k) {
    const int i = group + k * groups;
    const std::int64_t t = ti * C + i;
    if (in_cols && i < urows && i < C && t < geo.T) {
      const std::int64_t token = p * geo.T + t;
      v_bits[k] = chunk::load_input_bits(in.v, in.v_dtype, token * hd + c);
      retrieved[k] = sb.retrieved[(p * C + i) * hd + c];
      beta_bits[k] = chunk::load_input_bits(in.beta, in.beta_dtype, token);
    }
  }
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const int i = R0 + r0 + r;
    if (active && in_cols && i < C) inter[r] = sb.inter[(p * C + i) * hd + c];
  }

  float* ut = Ut + col * ld;
#pragma unroll
  for (int k = 0; k < kURows; ++k) {
    const int i = group + k * groups;
    if (i >= urows) break;
    const std::int64_t t = ti * C + i;
    float res = 0.0f, u = 0.0f;
    if (in_cols && i < C && t < geo.T) {
      const float v = round_to_bank(chunk::input_from_bits(v_bits[k], in.v_dtype), sb.bf16_bank);
      res = v - retrieved[k];
      u = chunk::input_from_bits(beta_bits[k], in.beta_dtype) * res;
    }
    if (in_cols && i >= R0 && i < C && sb.residual != nullptr) sb.residual[(n * C + i) * hd + c] = res;
    ut[i] = u;
  }
  chunk::wait_copies();
  __syncthreads();

  if (!active || !in_cols) return;
  float d[kRows] = {}, y[kRows] = {};
  for (int jt = 0; jt <= R0; jt += kBlock) {
    const int slice = jt / kBlock * kBlock * kBlock;
    chunk::lower_block(Xs + slice, QXs + slice, ut + jt, r0, jt < R0, d, y);
  }
  store_delta_readings<E>(geo, sb, p, n, c, ti, R0 + r0, d, y, inter);
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
  } else if (C <= chunk::kMediumChunk && !blockwise_chunk_products()) {
    const auto kernel = dual_product_medium<E, kCols>;
    const std::size_t smem = static_cast<std::size_t>(4 * kBlock * kBlock + kCols * chunk::operand_ld(C)) * sizeof(float);
    allow_dynamic_shared_memory(kernel, smem, "cudaFuncSetAttribute (dual_product_medium shared memory)");
    launch_dependent(kernel, grid, block, smem, stream, "dual_product", geo, in, p1, sb, ti);
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

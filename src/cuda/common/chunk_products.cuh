// chunk_products.cuh - the per-chunk products of a triangular C x C f32 matrix with a C x hd
// column tile, shared by the forward's dual product (dual.cu) and the backward's transposed solve
// (backward/tokens.cu). Tiling: a CTA works on one column tile of kCols columns and on 64-row
// blocks of the chunk (kBlock). Thread t owns column t % kCols of the tile and the kRows = 4
// consecutive rows r0 = 4 (t / kCols) .. r0 + 3 of the block: a 4 x 1 micro-tile of each product in
// registers. The matrix is staged into shared memory one 64 x 64 block at a time (stage_block:
// row-major, leading dimension 64, zero outside the chunk); the column operand lies transposed in
// shared memory (bt[row], one array per column with a padded leading dimension), so one 16-byte
// load brings four consecutive rows of it. Per four steps of the inner index a thread issues four
// 16-byte loads of the matrix (warp broadcasts) and one of the operand for 16 fmaf per matrix.
// Small chunks (C <= 64, one block): stage_chunk_async copies the whole C x C matrix with cp.async,
// so a kernel issues every global load of its CTA (both matrices and its operand rows, the latter
// as raw bits: load_input_bits / load_any_bits) before its first __syncthreads. Medium chunks
// (64 < C <= kMediumChunk = 128, two blocks): stage_block_async copies each block a CTA needs the
// same way, so the medium kernels also load everything up front (host side: chunk_products.hpp).
//
// Numerics: every output is ONE fmaf chain over the inner index in ascending order, starting from
// the caller's accumulator: the lower product sums j = 0 .. i for row i, the transposed product
// i = j .. C-1 for row j. Blocks are visited in ascending order, so neither the tile width kCols,
// the block size nor the number of threads changes a result (the order depends on the shape only).
// Entries of the matrix above its diagonal are never multiplied (the diagonal 4 x 4 blocks are
// masked at compile time); zero-filled padding beyond C only ever meets zero-filled operand rows.
#pragma once

#include <cstdint>

#include "cuda/common/alignment.hpp"
#include "cuda/common/geometry.hpp"
#include "core/float_convert.hpp"
#include "sdm/types.hpp"

namespace sdm::cuda::chunk {

constexpr int kBlock = 64;                  // rows / columns of a staged matrix block
constexpr int kRows = 4;                    // rows of a thread's micro-tile
constexpr int kRowGroups = kBlock / kRows;  // thread rows of a full block
constexpr int kTargetCtas = 128;            // about one wave of CTAs on an H200 (132 SMs)
constexpr int kMediumChunk = 2 * kBlock;    // the largest C of the medium kernels: two row blocks

__host__ __device__ constexpr int round_up4(int x) { return (x + 3) & ~3; }

// Thread rows of a CTA: enough 4-row groups for min(C, 64) rows.
__host__ __device__ constexpr int row_groups(int C) { return C >= kBlock ? kRowGroups : (C + kRows - 1) / kRows; }

// The widest column tile of 32, 16 and 8 that still gives kTargetCtas CTAs (other: the CTAs per
// column tile). A speed choice only: results do not depend on it (file header).
inline int tile_cols(std::int64_t hd, std::int64_t other) {
  if ((hd + 31) / 32 * other >= kTargetCtas) return 32;
  if ((hd + 15) / 16 * other >= kTargetCtas) return 16;
  return 8;
}

// A thread's place in a (column tile, chunk) CTA of the chunk products (the tiling above): column
// `col` of the CTA's tile of kCols columns (global column c; in_cols: c < hd), row group `group` of
// `groups` (rows r0 .. r0 + 3 of each 64-row block), stream p = p_first + `stream` (the CTA's
// stream index within its launch) and chunk n = ti P + p.
struct TileThread {
  int tid, threads, col, group, groups, r0;
  std::int64_t p, n, c;
  bool in_cols;
};

template <int kCols>
__device__ __forceinline__ TileThread tile_thread(const Geometry& geo, std::int64_t ti, unsigned stream) {
  TileThread t;
  t.tid = static_cast<int>(threadIdx.x), t.threads = static_cast<int>(blockDim.x);
  t.col = t.tid % kCols, t.group = t.tid / kCols, t.groups = t.threads / kCols;
  t.r0 = kRows * t.group;
  t.p = geo.p_first + stream, t.n = ti * geo.P + t.p;
  t.c = static_cast<std::int64_t>(blockIdx.x) * kCols + t.col;
  t.in_cols = t.c < geo.hd;
  return t;
}

// Leading dimension (floats) of the transposed operand for `rows` rows: a multiple of 4 whose
// 16-byte units are odd, so the 16-byte loads of eight consecutive columns hit distinct banks.
__host__ __device__ constexpr int operand_ld(int rows) {
  const int units = round_up4(rows) / 4 + 1;
  return 4 * (units % 2 == 0 ? units + 1 : units);
}

// Ms[r][c] = M[row0 + r][col0 + c] of the chunk's C x C row-major matrix M, for the rows
// r < round_up4(min(64, C - row0)) and columns c < round_up4(min(64, C - col0)), 0 outside the
// chunk. 16-byte global loads when C % 4 == 0 and M is 16-byte aligned (same values either way).
__device__ __forceinline__ void stage_block(const float* __restrict__ M, int C, int row0, int col0, float* Ms,
                                            int tid, int threads) {
  const int rows = C - row0 < kBlock ? C - row0 : kBlock;
  const int cols = C - col0 < kBlock ? C - col0 : kBlock;
  const int units = (cols + 3) / 4;  // 16-byte units per staged row
  const bool vec = C % 4 == 0 && aligned16(M);
  for (int o = tid; o < round_up4(rows) * (kBlock / 4); o += threads) {
    const int r = o >> 4, q = o & 15;
    if (q >= units) continue;
    float4 x = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (r < rows) {
      const float* src = M + static_cast<std::int64_t>(row0 + r) * C + col0 + 4 * q;
      const int valid = cols - 4 * q;
      if (vec) {
        x = *reinterpret_cast<const float4*>(src);
      } else {
        x.x = src[0];
        if (valid > 1) x.y = src[1];
        if (valid > 2) x.z = src[2];
        if (valid > 3) x.w = src[3];
      }
    }
    reinterpret_cast<float4*>(Ms)[o] = x;
  }
}

// cp.async of 16 (or 4) bytes from global src to shared dst; src_bytes < size zero-fills the rest
// (src_bytes == 0 reads nothing: src only has to be a valid address).
__device__ __forceinline__ void copy_async16(float* dst, const float* src, int src_bytes) {
  const auto d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(src_bytes) : "memory");
}
__device__ __forceinline__ void copy_async4(float* dst, const float* src, int src_bytes) {
  const auto d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(d), "l"(src), "r"(src_bytes) : "memory");
}
// Waits for this thread's cp.async copies (a __syncthreads must follow before others read them).
__device__ __forceinline__ void wait_copies() { asm volatile("cp.async.wait_all;\n" ::: "memory"); }

// stage_block(M, C, row0, col0, Ms, ..) as cp.async copies in flight: the same values, the same zero
// padding. The caller waits for the copies and runs __syncthreads() before reading Ms.
__device__ __forceinline__ void stage_block_async(const float* __restrict__ M, int C, int row0, int col0, float* Ms,
                                                  int tid, int threads) {
  const int rows = C - row0 < kBlock ? C - row0 : kBlock;
  const int cols = C - col0 < kBlock ? C - col0 : kBlock;
  const int units = (cols + 3) / 4;  // 16-byte units per staged row
  const bool vec = C % 4 == 0 && aligned16(M);
  for (int o = tid; o < round_up4(rows) * (kBlock / 4); o += threads) {
    const int r = o >> 4, q = o & 15;
    if (q >= units) continue;
    const float* src = M + static_cast<std::int64_t>(row0 + (r < rows ? r : 0)) * C + col0 + 4 * q;
    if (vec) {
      copy_async16(Ms + 4 * o, src, r < rows ? 16 : 0);
    } else {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const bool real = r < rows && 4 * q + e < cols;
        copy_async4(Ms + 4 * o + e, real ? src + e : M, real ? 4 : 0);
      }
    }
  }
}

// stage_block_async at row0 = col0 = 0 for C <= 64: the whole chunk (rows C .. round_up4(C) - 1 and the
// columns C .. round_up4(C) - 1 of the last unit zero). The caller runs wait_copies() and
// __syncthreads() before reading Ms.
__device__ __forceinline__ void stage_chunk_async(const float* __restrict__ M, int C, float* Ms, int tid,
                                                  int threads) {
  stage_block_async(M, C, 0, 0, Ms, tid, threads);
}

// load_input (common/values.cuh) split in two: the raw bits now, the exact conversion later (which
// would otherwise wait for each load in turn; so the small-chunk kernels make one global round trip).
__device__ __forceinline__ std::uint32_t load_input_bits(const void* data, DType dtype, std::int64_t i) {
  return dtype == DType::bf16 || dtype == DType::f16 ? std::uint32_t{static_cast<const std::uint16_t*>(data)[i]}
                                                     : static_cast<const std::uint32_t*>(data)[i];
}
__device__ __forceinline__ float input_from_bits(std::uint32_t bits, DType dtype) {
  switch (dtype) {
    case DType::bf16: return core::bf16_to_float(static_cast<std::uint16_t>(bits));
    case DType::f16: return core::f16_to_float(static_cast<std::uint16_t>(bits));
    default: return __uint_as_float(bits);
  }
}

// load_any (common/rows.cuh: f64 / f32 / bf16 / f16) split likewise.
__device__ __forceinline__ std::uint64_t load_any_bits(const void* data, DType dtype, std::int64_t i) {
  if (dtype == DType::f64) return static_cast<const std::uint64_t*>(data)[i];
  return load_input_bits(data, dtype, i);
}
__device__ __forceinline__ float any_from_bits(std::uint64_t bits, DType dtype) {
  if (dtype == DType::f64) return static_cast<float>(__longlong_as_double(static_cast<long long>(bits)));
  return input_from_bits(static_cast<std::uint32_t>(bits), dtype);
}

__device__ __forceinline__ float4 load4(const float* p) { return *reinterpret_cast<const float4*>(p); }

// Lower product, two matrices sharing the operand: for the thread's rows r0 + r (r < 4)
//   a[r] += sum_j A[r0 + r][j] bt[j],  b[r] += sum_j B[r0 + r][j] bt[j]
// over j in [0, jn) (jn % 4 == 0, all below the rows' diagonal), j ascending. This loop and
// transposed_rows' are not unrolled further (unroll 1): unrolled, they spill registers for some kCols.
__device__ __forceinline__ void lower_rows(const float* As, const float* Bs, const float* bt, int r0, int jn,
                                           float (&a)[kRows], float (&b)[kRows]) {
#pragma unroll 1
  for (int j = 0; j < jn; j += 4) {
    const float4 u = load4(bt + j);
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const float4 x = load4(As + (r0 + r) * kBlock + j);
      const float4 y = load4(Bs + (r0 + r) * kBlock + j);
      a[r] = fmaf(x.x, u.x, a[r]), a[r] = fmaf(x.y, u.y, a[r]), a[r] = fmaf(x.z, u.z, a[r]),
      a[r] = fmaf(x.w, u.w, a[r]);
      b[r] = fmaf(y.x, u.x, b[r]), b[r] = fmaf(y.y, u.y, b[r]), b[r] = fmaf(y.z, u.z, b[r]),
      b[r] = fmaf(y.w, u.w, b[r]);
    }
  }
}

// The diagonal 4 x 4 block of the lower product: j = r0 .. r0 + r for row r0 + r, ascending.
__device__ __forceinline__ void lower_diagonal(const float* As, const float* Bs, const float* bt, int r0,
                                               float (&a)[kRows], float (&b)[kRows]) {
  const float4 u4 = load4(bt + r0);
  const float u[4] = {u4.x, u4.y, u4.z, u4.w};
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const float4 x4 = load4(As + (r0 + r) * kBlock + r0);
    const float4 y4 = load4(Bs + (r0 + r) * kBlock + r0);
    const float x[4] = {x4.x, x4.y, x4.z, x4.w}, y[4] = {y4.x, y4.y, y4.z, y4.w};
#pragma unroll
    for (int j = 0; j <= r; ++j) {
      a[r] = fmaf(x[j], u[j], a[r]);
      b[r] = fmaf(y[j], u[j], b[r]);
    }
  }
}

// One staged 64-column slice of the lower product for the thread's rows r0 + r of their block:
// a slice left of the block (left: j = 0 .. 63), or the block's own (j = 0 .. r0 + r).
__device__ __forceinline__ void lower_block(const float* As, const float* Bs, const float* bt, int r0, bool left,
                                            float (&a)[kRows], float (&b)[kRows]) {
  if (left) {
    lower_rows(As, Bs, bt, r0, kBlock, a, b);
  } else {
    lower_rows(As, Bs, bt, r0, r0, a, b);
    lower_diagonal(As, Bs, bt, r0, a, b);
  }
}

// Transposed product: for the thread's rows r0 + r (r < 4)
//   acc[r] += sum_i M[i][r0 + r] bt[i]
// over i in [i0, iend) (multiples of 4; every such i is past the rows' diagonal block), i ascending.
__device__ __forceinline__ void transposed_rows(const float* Ms, const float* bt, int r0, int i0, int iend,
                                                float (&acc)[kRows]) {
#pragma unroll 1
  for (int i = i0; i < iend; i += 4) {
    const float4 v4 = load4(bt + i);
    const float v[4] = {v4.x, v4.y, v4.z, v4.w};
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const float4 m = load4(Ms + (i + q) * kBlock + r0);
      acc[0] = fmaf(m.x, v[q], acc[0]);
      acc[1] = fmaf(m.y, v[q], acc[1]);
      acc[2] = fmaf(m.z, v[q], acc[2]);
      acc[3] = fmaf(m.w, v[q], acc[3]);
    }
  }
}

// The diagonal 4 x 4 block of the transposed product: i = r0 + r .. r0 + 3 for row r0 + r, ascending.
__device__ __forceinline__ void transposed_diagonal(const float* Ms, const float* bt, int r0, float (&acc)[kRows]) {
  const float4 v4 = load4(bt + r0);
  const float v[4] = {v4.x, v4.y, v4.z, v4.w};
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    const float4 m4 = load4(Ms + (r0 + q) * kBlock + r0);
    const float m[4] = {m4.x, m4.y, m4.z, m4.w};
#pragma unroll
    for (int r = 0; r <= q; ++r) acc[r] = fmaf(m[r], v[q], acc[r]);
  }
}

// One staged block M[it .. it + 63][R0 .. R0 + 63] of the transposed product for the thread's rows
// R0 + r0 + r, bt = the operand from row it on, iend = round_up4 of the block's rows in the chunk:
// the block's own (diagonal: it == R0, i = j .. ) or one below it (i = it .. it + iend - 1).
__device__ __forceinline__ void transposed_block(const float* Ms, const float* bt, int r0, bool diagonal, int iend,
                                                 float (&acc)[kRows]) {
  if (diagonal) {
    transposed_diagonal(Ms, bt, r0, acc);
    transposed_rows(Ms, bt, r0, r0 + kRows, iend, acc);
  } else {
    transposed_rows(Ms, bt, r0, 0, iend, acc);
  }
}

}  // namespace sdm::cuda::chunk

// solve.cu - Phase 1's chunk solve (docs/spec.md §2): per chunk, from A and QK (pair_products)
// and beta,
//   X  = (I + diag(beta) A)^-1   f32 [N, C, C], unit lower triangular (padding rows: 0 off the diagonal)
//   QX = tril(QK) X              f32 [N, C, C], zeros above the diagonal
// One CTA per chunk, one warp per column k, lanes over rows: right-looking forward substitution
// fused with the QX product (solve_column); every sum from +0 over j ascending (fmaf), bitwise the
// textbook left-looking column solve. C <= 128: the lower triangles of the four matrices staged in
// shared memory, packed (4 C (C + 1) / 2 floats: 132 KiB at C = 128); larger C: the same code on
// global memory. Where the operands lie changes no sum, so every path gives the same bits.
#include <type_traits>

#include "core/validate.hpp"
#include "cuda/common/cuda_check.hpp"
#include "cuda/common/device_limits.hpp"
#include "cuda/common/values.cuh"
#include "cuda/forward/phase1_kernels.hpp"

namespace sdm::cuda {
namespace {

constexpr unsigned kFullMask = 0xffffffffu;
constexpr int kSolveWarps = 16;       // columns in flight per chunk
constexpr int kStagedMaxChunk = 128;  // C up to this: A, QK, X, QX of the chunk in shared memory
constexpr int kStageBatch = 8;        // elements per thread and matrix loaded at once when staging

// Where element (i, j), j <= i, of a chunk matrix lies. Dense: row-major with row stride ld (global
// memory; the solve stores +0 above the diagonal itself). Packed: the lower triangle row by row,
// row i from i (i + 1) / 2; the rows 32 m + l (l < 32) of one column fall in 32 distinct banks
// (the triangular numbers mod 32 of 32 consecutive rows are a permutation of 0 .. 31).
struct Dense {
  float* p;
  int ld;
  __device__ __forceinline__ float* row(int i) const { return p + i * ld; }
};
struct Packed {
  float* p;
  __device__ __forceinline__ float* row(int i) const { return p + i * (i + 1) / 2; }
};
__host__ __device__ constexpr int packed_floats(int C) { return C * (C + 1) / 2; }

// Column k of X and QX for one chunk, by one warp; lane l owns rows l, l + 32, ... (kRows of them,
// 32 * kRows >= C). Right-looking forward substitution: at step j = k, k+1, ..., the owner of row
// j finalises x_j = X[j, k] (1 at j == k, else -(beta_j s_j), 0 for a padding row), broadcasts it
// by a shuffle, and every row i > j adds s_i = fmaf(A[i, j], x_j, s_i) and every row i >= j adds
// q_i = fmaf(QK[i, j], x_j, q_i). So s_i = sum_{j in [k, i)} and q_i = QX[i, k] = sum_{j in [k, i]},
// each from +0 in j ascending order: the sums of the textbook left-looking column solve, bit for
// bit. Only elements on or below the diagonal are read; X and QX are stored on and below it, and
// above it too when kDense (+0, the value the left-looking solve gives there).
template <int kRows, typename Layout>
__device__ __forceinline__ void solve_column(Layout A, Layout QK, Layout X, Layout QX, int C, int k, int lane,
                                             const float (&beta)[kRows], const bool (&valid)[kRows]) {
  constexpr bool kDense = std::is_same_v<Layout, Dense>;
  float s[kRows], q[kRows];
#pragma unroll
  for (int m = 0; m < kRows; ++m) s[m] = 0.0f, q[m] = 0.0f;
#pragma unroll
  for (int mj = 0; mj < kRows; ++mj) {  // the block of 32 rows holding step j
    const int base = 32 * mj, own_row = base + lane;
    const int jj_end = C - base < 32 ? C - base : 32;
    for (int jj = k - base > 0 ? k - base : 0; jj < jj_end; ++jj) {  // warp-uniform bounds
      const int j = base + jj;
      const float own = own_row == k ? 1.0f : (valid[mj] ? -(beta[mj] * s[mj]) : 0.0f);
      const float x = __shfl_sync(kFullMask, own, jj);
      if (lane >= jj && own_row < C) {
        if (lane > jj) s[mj] = fmaf(A.row(own_row)[j], x, s[mj]);
        q[mj] = fmaf(QK.row(own_row)[j], x, q[mj]);
      }
#pragma unroll
      for (int m = mj + 1; m < kRows; ++m) {  // rows all > j
        const int i = 32 * m + lane;
        if (i < C) {
          s[m] = fmaf(A.row(i)[j], x, s[m]);
          q[m] = fmaf(QK.row(i)[j], x, q[m]);
        }
      }
    }
  }
#pragma unroll
  for (int m = 0; m < kRows; ++m) {
    const int i = 32 * m + lane;
    if (i >= C) break;
    if (i < k) {
      if constexpr (kDense) X.row(i)[k] = 0.0f, QX.row(i)[k] = q[m];
      continue;
    }
    X.row(i)[k] = i == k ? 1.0f : (valid[m] ? -(beta[m] * s[m]) : 0.0f);
    QX.row(i)[k] = q[m];
  }
}

static_assert(8 * 32 >= core::kMaxChunk, "solve's global-memory instantiation covers every chunk size");

// solve: one CTA per chunk, one warp per column k (zig-zag over 16 warps), lanes over
// rows: right-looking forward substitution for column k of X = (I + diag(beta)
// A)^-1 fused with QX = tril(QK) X (solve_column); every sum from +0 over j
// ascending, bitwise the left-looking column solve. kStaged (C <= 128): the lower
// triangles of A and QK staged packed in shared memory (only they are loaded), X and
// QX solved there, then stored dense and coalesced with +0 above the diagonal; else
// the same code on global memory.
template <int kRows, bool kStaged>
__global__ void __launch_bounds__(kSolveWarps * 32) solve(Geometry geo, Inputs in, Phase1Buffers buf) {
  extern __shared__ float solve_tiles[];  // kStaged: A, QK, X, QX, each packed_floats(C)
  const int C = static_cast<int>(geo.C);
  const std::int64_t n = blockIdx.x, cc = static_cast<std::int64_t>(C) * C;
  const std::int64_t p = n % geo.P, t0 = (n / geo.P) * C;
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int warps = static_cast<int>(blockDim.x) / 32;
  float beta[kRows];
  bool valid[kRows];
#pragma unroll
  for (int m = 0; m < kRows; ++m) {
    const int i = 32 * m + lane;
    valid[m] = i < C && t0 + i < geo.T;
    beta[m] = valid[m] ? load_input(in.beta, in.beta_dtype, p * geo.T + t0 + i) : 0.0f;
  }
  float* Ag = buf.A + n * cc;
  float* QKg = buf.QK + n * cc;
  float* Xg = buf.X + n * cc;
  float* QXg = buf.QX + n * cc;
  // Columns zig-zag over the warps (round r: warp w takes r*warps + w, or r*warps + warps-1-w when
  // r is odd) so that the long (left) and short (right) columns even out.
  const auto solve_columns = [&](auto A, auto QK, auto X, auto QX) {
    for (int round = 0; round * warps < C; ++round) {
      const int k = round * warps + (round % 2 == 0 ? warp : warps - 1 - warp);
      if (k < C) solve_column<kRows>(A, QK, X, QX, C, k, lane, beta, valid);
    }
  };
  if constexpr (kStaged) {
    const int tri = packed_floats(C);
    const Packed A{solve_tiles}, QK{solve_tiles + tri}, X{solve_tiles + 2 * tri}, QX{solve_tiles + 3 * tri};
    // All of a thread's loads (kStageBatch per matrix) are issued before its first shared store;
    // elements above the diagonal are neither loaded nor stored.
    const int threads = static_cast<int>(blockDim.x);
    for (int o0 = static_cast<int>(threadIdx.x); o0 < C * C; o0 += kStageBatch * threads) {
      float a[kStageBatch], qk[kStageBatch];
#pragma unroll
      for (int b = 0; b < kStageBatch; ++b) {
        const int o = o0 + b * threads;
        const bool lower = o < C * C && o % C <= o / C;
        a[b] = lower ? Ag[o] : 0.0f;
        qk[b] = lower ? QKg[o] : 0.0f;
      }
#pragma unroll
      for (int b = 0; b < kStageBatch; ++b) {
        const int o = o0 + b * threads, i = o / C, j = o % C;
        if (o < C * C && j <= i) A.row(i)[j] = a[b], QK.row(i)[j] = qk[b];
      }
    }
    __syncthreads();
    solve_columns(A, QK, X, QX);
    __syncthreads();
    for (int o = static_cast<int>(threadIdx.x); o < C * C; o += threads) {
      const int i = o / C, j = o % C;
      Xg[o] = j <= i ? X.row(i)[j] : 0.0f;
      QXg[o] = j <= i ? QX.row(i)[j] : 0.0f;
    }
  } else {
    solve_columns(Dense{Ag, C}, Dense{QKg, C}, Dense{Xg, C}, Dense{QXg, C});
  }
}

template <int kRows, bool kStaged>
void launch_solve_with(const Geometry& geo, const Inputs& in, const Phase1Buffers& buf, cudaStream_t stream) {
  const auto kernel = solve<kRows, kStaged>;
  const std::size_t tri = static_cast<std::size_t>(packed_floats(static_cast<int>(geo.C)));
  const std::size_t smem = kStaged ? 4 * tri * sizeof(float) : 0;
  allow_dynamic_shared_memory(kernel, smem, "cudaFuncSetAttribute (solve shared memory)");
  const unsigned threads = 32u * static_cast<unsigned>(geo.C < kSolveWarps ? geo.C : kSolveWarps);
  kernel<<<static_cast<unsigned>(geo.N), threads, smem, stream>>>(geo, in, buf);
  check_launch("solve");
}

}  // namespace

void launch_solve(const Geometry& geo, const Inputs& in, const Phase1Buffers& buf, cudaStream_t stream) {
  if (geo.C <= 64) launch_solve_with<2, true>(geo, in, buf, stream);
  else if (geo.C <= kStagedMaxChunk) launch_solve_with<4, true>(geo, in, buf, stream);
  else launch_solve_with<8, false>(geo, in, buf, stream);
}

}  // namespace sdm::cuda

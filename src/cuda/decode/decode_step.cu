// decode_step.cu - one token per stream, in place (docs/spec.md §9): the engine.hpp entry point.
//
// Inputs:  bank [S, hd] E; per stream s: k_idx, k_val [W]; v [hd]; beta [1]; g [1 or W];
//          q_idx, q_val [R] (caller dtypes; k_val, v, q_val rounded to E, beta and g in f32).
// Outputs: the written bank rows (in place, rounded to E once), readings [streams, hd] E.
// Math (per stream, per column; docs/spec.md §1):  r_w = exp(g_w) M[k_w];  ret = sum_w kappa_w r_w;
//          delta = beta (v - ret);  M[k_w] = rnd_E(r_w + kappa_w delta);  y = rnd_E(sum_r rho_r M[q_r]).
// Parallel decomposition: one launch for all streams; one CTA of 8 warps per (stream, column
//   tile of 32*kVec columns). The recurrence is column-separable, so column tiles are
//   independent; warp k handles write lanes k, k+8, ... and read lanes k, k+8, ...; the warp
//   partials are added in warp order in shared memory. A CTA barrier orders the row stores
//   before the row loads of the reads (read-after-write within the stream; no other CTA touches
//   these columns of this stream's rows, streams' slots being private).
// Numerics: f32 accumulation in an order fixed by (W, R, hd): per warp in ascending lane order,
//   then warps in order; entries outside the stream's rows (or the bank, with
//   slots_per_stream == 0) are masked: no load, no write, no contribution.
#include <cstdint>

#include "cuda/engine.hpp"
#include "cuda/common/alignment.hpp"
#include "cuda/common/call.hpp"
#include "cuda/common/cuda_check.hpp"
#include "cuda/common/dispatch.hpp"
#include "cuda/common/values.cuh"

namespace sdm::cuda {
namespace {

constexpr int kWarps = 8;
constexpr int kHeld = 8;  // write / read lanes per warp held in registers (W, R <= kWarps * kHeld: all)
static_assert(2 * kHeld <= 32, "one lane record per thread of a warp");

struct DecodeParams {
  void* bank = nullptr;
  void* readings = nullptr;
  Inputs in;
  std::int64_t streams = 0, W = 0, R = 0, G = 1, hd = 0, S = 0, sps = 0;
  bool bf16_bank = false;
};

// Latency: the kernel moves little data, so its time is its chain of dependent memory round
// trips and each warp's instruction count. The lane records (index, kappa, decay, rho) are
// fetched up front, one per thread and shuffled across the warp, with v / beta; the rows of
// a warp's first kHeld write lanes (all of them for W <= 64) are loaded in one round, kept in
// registers and stored from there (no reload), and the first kHeld read rows are loaded in
// one round. Lanes beyond kHeld (W or R > 64) take a reloading loop.
template <typename E, int kVec>
__global__ void __launch_bounds__(kWarps * 32) decode_token(DecodeParams prm) {
  constexpr int kTile = 32 * kVec;
  static_assert(kTile <= kWarps * 32, "one thread per tile column in the reductions");
  __shared__ float partial[kWarps][kTile];
  __shared__ float delta[kTile];
  const Inputs& in = prm.in;
  E* bank = static_cast<E*>(prm.bank);
  const std::int64_t s = blockIdx.x, hd = prm.hd;
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const std::int64_t tile0 = static_cast<std::int64_t>(blockIdx.y) * kTile, c0 = tile0 + lane * kVec;
  const bool active = c0 < hd;
  const std::int64_t lo = prm.sps >= 1 ? s * prm.sps : 0, hi = prm.sps >= 1 ? lo + prm.sps : prm.S;

  // Write lane w of this stream: its bank row (-1 when masked), kappa and decay. The three loads
  // are independent (one round trip); a masked lane's kappa and decay are not used.
  const auto write_lane = [&](std::int64_t w, float& kappa, float& decay) -> std::int64_t {
    const std::int64_t idx = load_index(in.k_idx, in.k_index64, s * prm.W + w);
    const float k_val = load_input(in.k_val, in.k_val_dtype, s * prm.W + w);
    const float g = load_input(in.g, in.g_dtype, s * prm.G + (prm.G == 1 ? 0 : w));
    if (idx < lo || idx >= hi) return -1;
    // A lane repeating an earlier lane's slot is masked (docs/spec.md §8; Inputs::distinct_writes).
    // No early exit: the unrolled loads (one or two cache lines, already fetched for lane 0) overlap
    // instead of adding a round trip per lane to the kernel's latency chain.
    if (!in.distinct_writes) {
      bool repeat = false;
#pragma unroll 8
      for (std::int64_t e = 0; e < w; ++e) repeat |= load_index(in.k_idx, in.k_index64, s * prm.W + e) == idx;
      if (repeat) return -1;
    }
    kappa = round_to_bank(k_val, prm.bf16_bank);
    decay = expf(g);
    return idx;
  };
  // Read lane r of this stream: its bank row (-1 when masked) and rho.
  const auto read_lane = [&](std::int64_t r, float& rho) -> std::int64_t {
    const std::int64_t idx = load_index(in.q_idx, in.q_index64, s * prm.R + r);
    const float q_val = load_input(in.q_val, in.q_val_dtype, s * prm.R + r);
    if (idx < lo || idx >= hi) return -1;
    rho = round_to_bank(q_val, prm.bf16_bank);
    return idx;
  };
  const auto piece = [&](std::int64_t row) { return bank + row * hd + c0; };

  // Up front: the records of this warp's first kHeld write and read lanes (bank rows < 2^31,
  // docs/spec.md §7; -1: masked or no such lane), one per thread: lane l < kHeld fetches write lane
  // warp + kWarps*l, lane kHeld + l read lane warp + kWarps*l; shuffles hand them to the warp.
  // Also this thread's v and beta.
  std::int64_t my_row = -1;
  float my_coef = 0.0f, my_decay = 0.0f;
  if (lane < kHeld) {
    const std::int64_t w = warp + kWarps * lane;
    if (w < prm.W) my_row = write_lane(w, my_coef, my_decay);
  } else if (lane < 2 * kHeld) {
    const std::int64_t r = warp + kWarps * (lane - kHeld);
    if (r < prm.R) my_row = read_lane(r, my_coef);
  }
  const std::int32_t my_row32 = static_cast<std::int32_t>(my_row);
  std::int32_t wrow[kHeld], rrow[kHeld];
  float kappa[kHeld], decay[kHeld], rho[kHeld];
#pragma unroll
  for (int k = 0; k < kHeld; ++k) {
    wrow[k] = __shfl_sync(0xffffffffu, my_row32, k);
    kappa[k] = __shfl_sync(0xffffffffu, my_coef, k);
    decay[k] = __shfl_sync(0xffffffffu, my_decay, k);
    rrow[k] = __shfl_sync(0xffffffffu, my_row32, kHeld + k);
    rho[k] = __shfl_sync(0xffffffffu, my_coef, kHeld + k);
  }
  const int col = static_cast<int>(threadIdx.x);
  const bool owns_col = col < kTile && tile0 + col < hd;
  float v_col = 0.0f, beta = 0.0f;
  if (owns_col) {
    v_col = round_to_bank(load_input(in.v, in.v_dtype, s * hd + tile0 + col), prm.bf16_bank);
    beta = load_input(in.beta, in.beta_dtype, s);
  }

  // retrieved = sum_w kappa_w exp(g_w) M[k_w]: held rows in one round (kept packed), then any
  // further lanes.
  PackedRow<E, kVec> held[kHeld] = {};
  float acc[kVec] = {};
  if (active) {
#pragma unroll
    for (int k = 0; k < kHeld; ++k) {
      if (wrow[k] >= 0) load_packed(piece(wrow[k]), held[k]);
    }
#pragma unroll
    for (int k = 0; k < kHeld; ++k) {
      if (wrow[k] < 0) continue;
      float x[kVec];
      unpack(held[k], x);
#pragma unroll
      for (int e = 0; e < kVec; ++e) acc[e] = fmaf(kappa[k], decay[k] * x[e], acc[e]);
    }
#pragma unroll 4
    for (std::int64_t w = warp + kWarps * kHeld; w < prm.W; w += kWarps) {
      float kap = 0.0f, dec = 0.0f;
      const std::int64_t row = write_lane(w, kap, dec);
      if (row < 0) continue;
      float x[kVec];
      load_row<kVec>(piece(row), x);
#pragma unroll
      for (int e = 0; e < kVec; ++e) acc[e] = fmaf(kap, dec * x[e], acc[e]);
    }
  }
#pragma unroll
  for (int e = 0; e < kVec; ++e) partial[warp][lane * kVec + e] = acc[e];
  __syncthreads();
  if (col < kTile) {
    float ret = partial[0][col];
#pragma unroll
    for (int k = 1; k < kWarps; ++k) ret += partial[k][col];
    delta[col] = owns_col ? beta * (v_col - ret) : 0.0f;
  }
  __syncthreads();

  // M[k_w] = rnd(exp(g_w) M[k_w] + kappa_w delta): held rows from registers, further lanes reloaded.
  if (active) {
#pragma unroll
    for (int k = 0; k < kHeld; ++k) {
      if (wrow[k] < 0) continue;
      float x[kVec];
      unpack(held[k], x);
#pragma unroll
      for (int e = 0; e < kVec; ++e) x[e] = fmaf(kappa[k], delta[lane * kVec + e], decay[k] * x[e]);
      store_row<kVec>(piece(wrow[k]), x);
    }
    for (std::int64_t w = warp + kWarps * kHeld; w < prm.W; w += kWarps) {
      float kap = 0.0f, dec = 0.0f;
      const std::int64_t row = write_lane(w, kap, dec);
      if (row < 0) continue;
      float x[kVec];
      load_row<kVec>(piece(row), x);
#pragma unroll
      for (int e = 0; e < kVec; ++e) x[e] = fmaf(kap, delta[lane * kVec + e], dec * x[e]);
      store_row<kVec>(piece(row), x);
    }
  }
  __syncthreads();  // the rows written above are read below, possibly by other warps

  // readings = rnd(sum_r rho_r M[q_r]): held read rows in one round, then any further lanes.
  float rd[kVec] = {};
  if (active) {
    PackedRow<E, kVec> got[kHeld] = {};
#pragma unroll
    for (int k = 0; k < kHeld; ++k) {
      if (rrow[k] >= 0) load_packed(piece(rrow[k]), got[k]);
    }
#pragma unroll
    for (int k = 0; k < kHeld; ++k) {
      if (rrow[k] < 0) continue;
      float x[kVec];
      unpack(got[k], x);
#pragma unroll
      for (int e = 0; e < kVec; ++e) rd[e] = fmaf(rho[k], x[e], rd[e]);
    }
#pragma unroll 4
    for (std::int64_t r = warp + kWarps * kHeld; r < prm.R; r += kWarps) {
      float rh = 0.0f;
      const std::int64_t row = read_lane(r, rh);
      if (row < 0) continue;
      float x[kVec];
      load_row<kVec>(piece(row), x);
#pragma unroll
      for (int e = 0; e < kVec; ++e) rd[e] = fmaf(rh, x[e], rd[e]);
    }
  }
#pragma unroll
  for (int e = 0; e < kVec; ++e) partial[warp][lane * kVec + e] = rd[e];
  __syncthreads();
  if (owns_col) {
    float y = partial[0][col];
#pragma unroll
    for (int k = 1; k < kWarps; ++k) y += partial[k][col];
    static_cast<E*>(prm.readings)[s * hd + tile0 + col] = from_f32<E>(y);
  }
}

template <typename E, int kVec>
void launch(const DecodeParams& prm, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(prm.streams), static_cast<unsigned>((prm.hd + 32 * kVec - 1) / (32 * kVec)));
  decode_token<E, kVec><<<grid, kWarps * 32, 0, stream>>>(prm);
  check_launch("decode_token");
}

}  // namespace

void decode_step(const WriteReadArgs& args, const TensorRef& readings, const core::DecodeShape& shape,
                 const DecodeOptions& options) {
  Call call(args.memory, options.cuda_stream, options.validate);
  const cudaStream_t stream = call.stream();
  DecodeParams prm;
  prm.bank = args.memory.data;
  prm.readings = readings.data;
  prm.in = call.inputs(args);
  prm.streams = shape.streams, prm.W = shape.W, prm.R = shape.R, prm.G = shape.G, prm.hd = shape.hd;
  prm.S = shape.S, prm.sps = options.slots_per_stream;
  prm.bf16_bank = shape.bank == DType::bf16;

  call.workspace().allocate();
  call.check_indices(prm.in, IndexCheck{shape.streams, 1, shape.W, shape.R, options.slots_per_stream, shape.S, false});

  const bool vec8 = shape.hd % 8 == 0 && aligned16(prm.bank);
  dispatch([&](auto row, auto vec) { launch<typename decltype(row)::type, decltype(vec)::value>(prm, stream); },
           Rows{prm.bf16_bank}, VecWidth{vec8});
}

}  // namespace sdm::cuda

// gather.cu - per-step gather of bank rows (SPEC B.2 "gather", B.5.1).
//
// Inputs:  bank M0 [S, hd] (E); Phase 1's k_slot / k_eff [N, C, W] and q_slot / q_w [N, C, R].
// Outputs: retrieved, inter f32 [P*C, hd] (step rows p*C + i of step ti).
// Math:    retrieved[i] = sum_w k_eff(i,w) M0[k_slot(i,w)];  inter[i] = sum_r q_w(i,r) M0[q_slot(i,r)].
// Parallel decomposition: one CTA of 8 warps per (step row, column tile of 32*kVec columns).
//   Lane l owns columns [l*kVec, l*kVec + kVec) of the tile (16-byte loads when kVec == 8);
//   warp k sums the entries k, k+8, k+16, ... in that order (their slots and weights loaded once,
//   one per lane, then broadcast by shuffles), 8 (bf16 bank) or 4 (f32) row loads in flight at
//   a time, rows held as loaded (75 registers: 3 CTAs per SM, still one wave at readme's 384
//   CTAs; a cap of 64 spills);
//   the 8 warp partials are then added in warp order through shared memory.
// Numerics: f32 accumulation; the order above is a function of (W, R, hd) only. Masked entries
//   (slot -1: padding or an index outside the stream's rows) load nothing and add nothing.
#include "cuda_check.hpp"
#include "dependent_launch.cuh"
#include "device_values.cuh"
#include "step_kernels.hpp"

namespace sdm::cuda {
namespace {

constexpr int kWarps = 8;
// Row loads in flight per warp: rows are held as loaded (PackedRow), so a bf16 row piece takes
// half the registers of an f32 one and twice as many fit in the same budget.
template <typename E>
constexpr int kBatch = sizeof(E) == 2 ? 8 : 4;

// Adds the entries warp, warp + 8, ... (< count, at most 32 of them since W, R <= 256) into acc,
// in that order. Lane l first loads entry warp + 8 l's slot and weight; the rows then go
// kBatch<E> at a time, all their loads in flight together (kept as loaded, converted at the FMA). Every lane runs the loop (shuffles);
// only lanes with active columns load rows.
template <typename E, int kVec>
__device__ __forceinline__ void accumulate_rows(const E* __restrict__ bank, std::int64_t hd, std::int64_t c0,
                                                bool active, const std::int32_t* __restrict__ slots,
                                                const float* __restrict__ weights, std::int64_t count, int warp,
                                                int lane, float (&acc)[kVec]) {
  const std::int64_t mine = warp + static_cast<std::int64_t>(kWarps) * lane;
  const std::int32_t my_slot = mine < count ? slots[mine] : -1;
  const float my_weight = mine < count ? weights[mine] : 0.0f;
  const int entries = count > warp ? static_cast<int>((count - warp + kWarps - 1) / kWarps) : 0;
  constexpr int kRows = kBatch<E>;
  for (int base = 0; base < entries; base += kRows) {
    PackedRow<E, kVec> rows[kRows] = {};
    float wts[kRows];
#pragma unroll
    for (int b = 0; b < kRows; ++b) {
      const std::int32_t slot = __shfl_sync(0xffffffffu, my_slot, (base + b) & 31);
      wts[b] = __shfl_sync(0xffffffffu, my_weight, (base + b) & 31);
      if (base + b < entries && slot >= 0 && active) {
        load_packed(bank + static_cast<std::int64_t>(slot) * hd + c0, rows[b]);
      } else {
        wts[b] = 0.0f;
      }
    }
#pragma unroll
    for (int b = 0; b < kRows; ++b) {
      float x[kVec];
      unpack(rows[b], x);
#pragma unroll
      for (int k = 0; k < kVec; ++k) acc[k] = fmaf(wts[b], x[k], acc[k]);
    }
  }
}

template <typename E, int kVec>
__global__ void __launch_bounds__(kWarps * 32)
    gather_rows(Geometry geo, const E* __restrict__ bank, Phase1Buffers p1, std::int64_t ti,
                float* __restrict__ retrieved, float* __restrict__ inter) {
  constexpr int kTile = 32 * kVec;
  __shared__ float partial[kWarps][2][kTile];
  wait_for_predecessor();
  const std::int64_t row = blockIdx.x;                     // step row p*C + i
  const std::int64_t token = ti * geo.P * geo.C + row;     // chunk-token n*C + i
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const std::int64_t tile0 = static_cast<std::int64_t>(blockIdx.y) * kTile;
  const std::int64_t c0 = tile0 + lane * kVec;
  const bool active = c0 < geo.hd;
  float ret[kVec] = {}, rd[kVec] = {};
  accumulate_rows<E, kVec>(bank, geo.hd, c0, active, p1.k_slot + token * geo.W, p1.k_eff + token * geo.W, geo.W,
                           warp, lane, ret);
  accumulate_rows<E, kVec>(bank, geo.hd, c0, active, p1.q_slot + token * geo.R, p1.q_w + token * geo.R, geo.R,
                           warp, lane, rd);
#pragma unroll
  for (int k = 0; k < kVec; ++k) {
    partial[warp][0][lane * kVec + k] = ret[k];
    partial[warp][1][lane * kVec + k] = rd[k];
  }
  __syncthreads();
  for (int o = static_cast<int>(threadIdx.x); o < 2 * kTile; o += kWarps * 32) {
    const int which = o / kTile, col = o % kTile;
    const std::int64_t c = tile0 + col;
    if (c >= geo.hd) continue;
    float sum = partial[0][which][col];
#pragma unroll
    for (int k = 1; k < kWarps; ++k) sum += partial[k][which][col];
    (which == 0 ? retrieved : inter)[row * geo.hd + c] = sum;
  }
}

template <typename E, int kVec>
void launch(const Geometry& geo, const Phase1Buffers& p1, const StepBuffers& sb, std::int64_t ti,
            cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(geo.P * geo.C), static_cast<unsigned>((geo.hd + 32 * kVec - 1) / (32 * kVec)));
  launch_dependent(gather_rows<E, kVec>, grid, dim3(kWarps * 32), 0, stream, "gather_rows", geo,
                   static_cast<const E*>(sb.bank), p1, ti, sb.retrieved, sb.inter);
}

}  // namespace

void launch_gather(const Geometry& geo, const Phase1Buffers& p1, const StepBuffers& sb, std::int64_t ti,
                   cudaStream_t stream) {
  if (sb.bf16_bank) {
    sb.vec8 ? launch<Bf16Bits, 8>(geo, p1, sb, ti, stream) : launch<Bf16Bits, 1>(geo, p1, sb, ti, stream);
  } else {
    sb.vec8 ? launch<float, 8>(geo, p1, sb, ti, stream) : launch<float, 1>(geo, p1, sb, ti, stream);
  }
}

}  // namespace sdm::cuda

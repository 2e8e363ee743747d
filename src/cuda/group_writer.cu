// group_writer.cu - per-step decay-and-write of every slot group (SPEC B.2 "write", B.5.3), and
// in a saving call the encoding of each group's pre-write row into the snapshot (SPEC D, Z.7).
//
// Inputs:  Phase 1's sorted keys, wcoef, gdecay; delta f32 (step rows, or chunk-token rows in a
//          saving call); the bank, which still holds M0 for this step's written rows.
// Outputs: the bank rows written in the step's chunks, in place; in a saving call also the
//          pre-write row of each group into snapshot row e (saved_layout.hpp), encoded in the
//          effective mode kMode (snapshot_rows.cuh), and for fp8 / int4 its scale into scales[e].
// Math:    M[s] = rnd_E( exp(Lambda_s) M0[s] + sum_{e in group(s)} wcoef_e delta[i_e] ).
//          Snapshot: none M0[s] bit for bit; bf16 rnd_bf16(M0[s]); fp8 / int4 the shared quantiser
//          core/snapshot_quant.hpp (scale from the row's amax, codes from the fast quotient on bf16
//          rows, the IEEE division on f32 rows): the bytes and scale core::quantize_row gives.
// Parallel decomposition: one warp per sorted write position of the step (P*C*W warps); the warp
//   at a group's first entry is the group's only writer, the others exit at once. Lane l owns
//   columns l*kVec + 32*kVec*k (16-byte accesses when kVec == 8). Groups of at most 32 entries
//   (nearly all) keep their tokens and coefficients in lane registers (one coalesced load, then
//   shuffles); longer groups read them from memory. Both sum in the same order. fp8 / int4 first
//   read the row once for its amax (lane maxima, then a warp max: exact, any order); lane 0
//   stores the scale. int4 with kVec == 1 pairs the adjacent columns of lanes 2j, 2j+1 by a shuffle.
// Numerics: per element, f32 in group order (ascending token) starting from exp(Lambda) M0, one
//   rounding to E per chunk. The update always uses the exact M0, so readings and the final bank
//   do not depend on the snapshot mode. A single writer per row makes the in-place update safe and
//   deterministic; padding and masked entries (local slot == sps) form no group.
#include "cuda_check.hpp"
#include "dependent_launch.cuh"
#include "device_values.cuh"
#include "snapshot_rows.cuh"
#include "step_kernels.hpp"

namespace sdm::cuda {
namespace {

constexpr int kWarps = 8;

template <typename E, int kVec, SnapshotQuant kMode>
__global__ void __launch_bounds__(kWarps * 32, 5)
    write_groups(Geometry geo, Phase1Buffers p1, StepBuffers sb, std::int64_t ti) {
  wait_for_predecessor();
  const std::int64_t CW = geo.C * geo.W;
  const std::int64_t g = static_cast<std::int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  if (g >= geo.P * CW) return;
  const std::int64_t p = g / CW, q = g % CW, n = ti * geo.P + p;
  const std::int64_t e = n * CW + q, chunk_end = (n + 1) * CW;
  const std::int64_t local = geo.keys.local_slot(p1.keys[e]);
  if (local == geo.sps) return;
  if (q > 0 && geo.keys.local_slot(p1.keys[e - 1]) == local) return;

  E* __restrict__ row = static_cast<E*>(sb.bank) + (p * geo.sps + local) * geo.hd;
  // kMode none: a saving call stores the exact row, a no-grad call (snapshot null) nothing.
  constexpr DType kBank = sizeof(E) == 2 ? DType::bf16 : DType::f32;
  const auto row_bytes = static_cast<std::int64_t>(core::snapshot_payload_bytes(kMode, kBank, geo.hd));
  unsigned char* __restrict__ snapshot =
      sb.snapshot != nullptr ? static_cast<unsigned char*>(sb.snapshot) + e * row_bytes : nullptr;
  const float* __restrict__ delta = sb.delta + (sb.delta_per_chunk ? n * geo.C : p * geo.C) * geo.hd;
  const float decay = p1.gdecay[e];

  // Lane l holds the group's entry l (token and coefficient) when the group has at most 32.
  const std::int64_t mine = e + lane;
  const std::uint64_t my_key = mine < chunk_end ? p1.keys[mine] : 0;
  const bool member = mine < chunk_end && geo.keys.local_slot(my_key) == local;
  const unsigned members = __ballot_sync(0xffffffffu, member);  // lanes 0 .. count-1 (groups are contiguous)
  const int count = members == 0xffffffffu ? 32 : __ffs(~members) - 1;
  const bool longer = count == 32 && e + 32 < chunk_end && geo.keys.local_slot(p1.keys[e + 32]) == local;
  const std::int64_t my_token = member ? geo.keys.token(my_key) : 0;
  const float my_coef = member ? p1.wcoef[mine] : 0.0f;

  const SnapshotScale quant = snapshot_row_scale<kMode, kVec>(row, geo.hd, lane);
  if constexpr (kMode == SnapshotQuant::fp8 || kMode == SnapshotQuant::int4) {
    if (lane == 0) sb.snapshot_scales[e] = quant.scale;
  }

  // Every lane runs every column step (the shuffles need the whole warp); inactive lanes
  // (columns beyond hd) load and store nothing.
  const std::int64_t steps = (geo.hd + 32 * kVec - 1) / (32 * kVec);
  for (std::int64_t step = 0; step < steps; ++step) {
    const std::int64_t c0 = step * 32 * kVec + lane * kVec;
    const bool active = c0 < geo.hd;
    float base[kVec] = {}, acc[kVec];
    if (active) load_row<kVec>(row + c0, base);
    if (snapshot != nullptr) encode_snapshot_piece<kMode, kVec, E>(snapshot, c0, active, base, quant);
#pragma unroll
    for (int k = 0; k < kVec; ++k) acc[k] = decay * base[k];
    if (!longer) {
      for (int k = 0; k < count; ++k) {
        const std::int64_t token = __shfl_sync(0xffffffffu, my_token, k);
        const float coef = __shfl_sync(0xffffffffu, my_coef, k);
        float dv[kVec] = {};
        if (active) load_row<kVec>(delta + token * geo.hd + c0, dv);
#pragma unroll
        for (int x = 0; x < kVec; ++x) acc[x] = fmaf(coef, dv[x], acc[x]);
      }
    } else if (active) {
      for (std::int64_t s = e; s < chunk_end; ++s) {
        const std::uint64_t key = p1.keys[s];
        if (geo.keys.local_slot(key) != local) break;
        const float coef = p1.wcoef[s];
        float dv[kVec];
        load_row<kVec>(delta + geo.keys.token(key) * geo.hd + c0, dv);
#pragma unroll
        for (int x = 0; x < kVec; ++x) acc[x] = fmaf(coef, dv[x], acc[x]);
      }
    }
    if (active) store_row<kVec>(row + c0, acc);
  }
}

template <typename E, int kVec, SnapshotQuant kMode>
void launch(const Geometry& geo, const Phase1Buffers& p1, const StepBuffers& sb, std::int64_t ti,
            cudaStream_t stream) {
  const std::int64_t warps = geo.P * geo.C * geo.W;
  launch_dependent(write_groups<E, kVec, kMode>, dim3(static_cast<unsigned>((warps + kWarps - 1) / kWarps)),
                   dim3(kWarps * 32), 0, stream, "write_groups", geo, p1, sb, ti);
}

template <typename E, int kVec>
void launch_mode(const Geometry& geo, const Phase1Buffers& p1, const StepBuffers& sb, std::int64_t ti,
                 cudaStream_t stream) {
  switch (sb.snapshot_mode) {
    case SnapshotQuant::fp8: launch<E, kVec, SnapshotQuant::fp8>(geo, p1, sb, ti, stream); return;
    case SnapshotQuant::int4: launch<E, kVec, SnapshotQuant::int4>(geo, p1, sb, ti, stream); return;
    case SnapshotQuant::bf16:
      // The effective mode is never bf16 on a bf16 bank (saved_layout.hpp).
      if constexpr (sizeof(E) == 4) {
        launch<E, kVec, SnapshotQuant::bf16>(geo, p1, sb, ti, stream);
        return;
      }
      break;
    case SnapshotQuant::none: break;
  }
  launch<E, kVec, SnapshotQuant::none>(geo, p1, sb, ti, stream);
}

}  // namespace

void launch_group_writer(const Geometry& geo, const Phase1Buffers& p1, const StepBuffers& sb, std::int64_t ti,
                         cudaStream_t stream) {
  if (sb.bf16_bank) {
    sb.vec8 ? launch_mode<Bf16Bits, 8>(geo, p1, sb, ti, stream) : launch_mode<Bf16Bits, 1>(geo, p1, sb, ti, stream);
  } else {
    sb.vec8 ? launch_mode<float, 8>(geo, p1, sb, ti, stream) : launch_mode<float, 1>(geo, p1, sb, ti, stream);
  }
}

}  // namespace sdm::cuda

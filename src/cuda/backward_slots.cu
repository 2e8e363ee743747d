// backward_slots.cu - the slot side of one reverse step of the CUDA backward (SPEC C.3 "PA" and
// "GDS", C.2 steps 7-8), for the P chunks n = ti*P + p of step ti. Runs after the token side (it
// reads dU and dy of the step). Two kernels, in launch order:
//
//   write_groups_backward  one warp per sorted write position; the warp at a group's first entry is
//     the group's only worker (slot s, entries e in token order, pre = the snapshot row = M0[s]):
//       dlambda = exp(Lambda) <G[s], pre>;  per e: dc_e = <delta_i, G[s]>, dk_eff_e = <-beta_i dU_i, pre>
//       G'[s] = exp(Lambda) G[s] + sum_e k_eff_e (-beta_i dU_i)     (f32, entries in group order)
//       bank[s] <- pre (bit copy: the bank holds the chunk's start afterwards)
//     G' goes to the stash when the chunk also reads s (the read side finishes the row), else it is
//     stored into G[s] rounded once.
//   read_groups_backward   one warp per sorted read position; the warp at a read group's first entry
//     is the group's only worker (slot sigma, reads q in (token, lane) order):
//       per q: dq_w = <dy_i, bank[sigma]> (the bank holds M0 now)
//       G[sigma] <- rnd( base + (sum_q q_w dy_i) ), base = the stash (sigma written in the chunk)
//       or G[sigma]; the sum starts at +0 and runs in group order.
// Dots: warp_dot (backward_rows.cuh). Rows are disjoint between groups of one step (streams own
// disjoint rows, a slot forms one group per chunk), so every bank / G / stash row has one writer.
#include "backward.hpp"
#include "backward_rows.cuh"
#include "cuda_check.hpp"
#include "dependent_launch.cuh"

namespace sdm::cuda {
namespace {

constexpr int kWarps = 8;

// True when chunk n's sorted keys (count of them, layout `layout`) hold local slot `local`; *first
// receives its first position.
__device__ __forceinline__ bool find_slot(const std::uint64_t* keys, std::int64_t count, const KeyLayout& layout,
                                          std::int64_t n, std::int64_t local, std::int64_t* first) {
  const std::int64_t pos = lower_bound_key(keys, count, layout.encode(n, local, 0, 0));
  *first = pos;
  return pos < count && layout.local_slot(keys[pos]) == local;
}

template <typename E, typename Gt, bool kVec>
__global__ void __launch_bounds__(kWarps * 32)
    write_groups_backward(Geometry geo, Inputs in, Phase1Buffers p1, BackwardBuffers bb, std::int64_t ti) {
  wait_for_predecessor();
  const std::int64_t CW = geo.C * geo.W, hd = geo.hd;
  const std::int64_t g = static_cast<std::int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  if (g >= geo.P * CW) return;
  const std::int64_t p = g / CW, q = g % CW, n = ti * geo.P + p;
  const std::int64_t e = n * CW + q, chunk_end = (n + 1) * CW;
  const std::int64_t local = geo.keys.local_slot(p1.keys[e]);
  if (local == geo.sps) return;
  if (q > 0 && geo.keys.local_slot(p1.keys[e - 1]) == local) return;
  std::int64_t end = e + 1;
  while (end < chunk_end && geo.keys.local_slot(p1.keys[end]) == local) ++end;

  const std::int64_t slot = p * geo.sps + local;
  Gt* grad = static_cast<Gt*>(bb.grad_rows) + slot * hd;
  const E* pre = reinterpret_cast<const E*>(static_cast<const unsigned char*>(bb.snapshot.payload) + e * bb.snapshot.row_bytes);
  E* bank = static_cast<E*>(bb.bank) + slot * hd;
  const float decay = p1.gdecay[e];
  const std::int64_t token0 = p * geo.T + ti * geo.C;  // flat token of i = 0

  const float dlambda = decay * warp_dot<kVec>(grad, pre, hd, lane);
  for (std::int64_t s = e; s < end; ++s) {
    const std::int64_t i = geo.keys.token(p1.keys[s]);
    const float beta = load_input(in.beta, in.beta_dtype, token0 + i);
    const float dc = warp_dot<kVec>(bb.delta + (n * geo.C + i) * hd, grad, hd, lane);
    const float dk_eff = warp_dot_scaled<kVec>(bb.du + (p * geo.C + i) * hd, -beta, pre, hd, lane);
    if (lane == 0) bb.dc[s] = dc, bb.dk_eff[s] = dk_eff;
  }
  if (lane == 0) bb.dlambda[e] = dlambda;

  std::int64_t first_read = 0;
  const bool read_here =
      find_slot(bb.read_keys + n * geo.C * geo.R, geo.C * geo.R, bb.read_layout, n, local, &first_read);
  float* stash = bb.stash + g * hd;
  for (std::int64_t c0 = static_cast<std::int64_t>(lane) * kLaneCols; c0 < hd; c0 += kWarpCols) {
    float acc[kLaneCols];
    load_piece<kVec>(grad, c0, hd, acc);
#pragma unroll
    for (int k = 0; k < kLaneCols; ++k) acc[k] *= decay;
    for (std::int64_t s = e; s < end; ++s) {
      const std::uint64_t key = p1.keys[s];
      const std::int64_t i = geo.keys.token(key);
      const float scale = -load_input(in.beta, in.beta_dtype, token0 + i);
      const float k_eff = p1.k_eff[n * CW + i * geo.W + geo.keys.lane(key)];
      float u[kLaneCols];
      load_piece<kVec>(bb.du + (p * geo.C + i) * hd, c0, hd, u);
#pragma unroll
      for (int k = 0; k < kLaneCols; ++k) acc[k] = fmaf(k_eff, scale * u[k], acc[k]);
    }
    if (read_here) store_piece<kVec>(stash, c0, hd, acc);
    else store_piece<kVec>(grad, c0, hd, acc);
    copy_piece<kVec>(pre, bank, c0, hd);
  }
}

template <typename E, typename Gt, bool kVec>
__global__ void __launch_bounds__(kWarps * 32)
    read_groups_backward(Geometry geo, Phase1Buffers p1, BackwardBuffers bb, std::int64_t ti) {
  wait_for_predecessor();
  const std::int64_t CR = geo.C * geo.R, CW = geo.C * geo.W, hd = geo.hd;
  const KeyLayout& layout = bb.read_layout;
  const std::int64_t g = static_cast<std::int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  if (g >= geo.P * CR) return;
  const std::int64_t p = g / CR, q = g % CR, n = ti * geo.P + p;
  const std::int64_t e = n * CR + q, chunk_end = (n + 1) * CR;
  const std::int64_t local = layout.local_slot(bb.read_keys[e]);
  if (local == geo.sps) return;
  if (q > 0 && layout.local_slot(bb.read_keys[e - 1]) == local) return;
  std::int64_t end = e + 1;
  while (end < chunk_end && layout.local_slot(bb.read_keys[end]) == local) ++end;

  const std::int64_t slot = p * geo.sps + local;
  Gt* grad = static_cast<Gt*>(bb.grad_rows) + slot * hd;
  const E* bank = static_cast<const E*>(bb.bank) + slot * hd;
  for (std::int64_t s = e; s < end; ++s) {
    const std::uint64_t key = bb.read_keys[s];
    const std::int64_t i = layout.token(key);
    const float dq_w = warp_dot<kVec>(bb.dy + (p * geo.C + i) * hd, bank, hd, lane);
    if (lane == 0) bb.dq_w[n * CR + i * geo.R + layout.lane(key)] = dq_w;
  }

  std::int64_t write_pos = 0;
  const bool written = find_slot(p1.keys + n * CW, CW, geo.keys, n, local, &write_pos);
  const float* stash = bb.stash + (p * CW + write_pos) * hd;
  for (std::int64_t c0 = static_cast<std::int64_t>(lane) * kLaneCols; c0 < hd; c0 += kWarpCols) {
    float acc[kLaneCols] = {};
    for (std::int64_t s = e; s < end; ++s) {
      const std::uint64_t key = bb.read_keys[s];
      const std::int64_t i = layout.token(key);
      const float q_w = p1.q_w[n * CR + i * geo.R + layout.lane(key)];
      float dy[kLaneCols];
      load_piece<kVec>(bb.dy + (p * geo.C + i) * hd, c0, hd, dy);
#pragma unroll
      for (int k = 0; k < kLaneCols; ++k) acc[k] = fmaf(q_w, dy[k], acc[k]);
    }
    float base[kLaneCols];
    if (written) load_piece<kVec>(stash, c0, hd, base);
    else load_piece<kVec>(grad, c0, hd, base);
#pragma unroll
    for (int k = 0; k < kLaneCols; ++k) acc[k] = base[k] + acc[k];
    store_piece<kVec>(grad, c0, hd, acc);
  }
}

template <typename E, typename Gt, bool kVec>
void launch(const Geometry& geo, const Inputs& in, const Phase1Buffers& p1, const BackwardBuffers& bb,
            std::int64_t ti, cudaStream_t stream) {
  const std::int64_t write_warps = geo.P * geo.C * geo.W, read_warps = geo.P * geo.C * geo.R;
  launch_dependent(write_groups_backward<E, Gt, kVec>, dim3(static_cast<unsigned>((write_warps + kWarps - 1) / kWarps)),
                   dim3(kWarps * 32), 0, stream, "write_groups_backward", geo, in, p1, bb, ti);
  launch_dependent(read_groups_backward<E, Gt, kVec>, dim3(static_cast<unsigned>((read_warps + kWarps - 1) / kWarps)),
                   dim3(kWarps * 32), 0, stream, "read_groups_backward", geo, p1, bb, ti);
}

template <typename E, typename Gt>
void launch_rows(const Geometry& geo, const Inputs& in, const Phase1Buffers& p1, const BackwardBuffers& bb,
                 std::int64_t ti, cudaStream_t stream) {
  bb.vec8 ? launch<E, Gt, true>(geo, in, p1, bb, ti, stream) : launch<E, Gt, false>(geo, in, p1, bb, ti, stream);
}

}  // namespace

void launch_slot_side(const Geometry& geo, const Inputs& in, const Phase1Buffers& p1, const BackwardBuffers& bb,
                      std::int64_t ti, cudaStream_t stream) {
  if (!bb.bf16_bank) launch_rows<float, float>(geo, in, p1, bb, ti, stream);
  else if (bb.bf16_grad_rows) launch_rows<Bf16Bits, Bf16Bits>(geo, in, p1, bb, ti, stream);
  else launch_rows<Bf16Bits, float>(geo, in, p1, bb, ti, stream);
}

}  // namespace sdm::cuda

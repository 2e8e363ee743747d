// backward_slots.cu - the slot side of one reverse step of the CUDA backward (SPEC C.3 "PA" and
// "GDS", C.2 steps 7-8), for the P chunks n = ti*P + p of step ti. Runs after the token side (it
// reads dU and dy of the step). Two kernels, in launch order:
//
//   write_groups_backward  write group of slot s (entries e in token order, token i_e, pre = the
//     snapshot row = M0[s], decoded by load_snapshot_piece):
//       dlambda = exp(Lambda) <G[s], pre>;  per e: dc_e = <delta_i, G[s]>, dk_eff_e = <-beta_i dU_i, pre>
//       G'[s] = exp(Lambda) G[s] + sum_e k_eff_e (-beta_i dU_i)     (f32, entries in group order)
//       bank[s] <- pre (restore_snapshot_piece: a bit copy in mode "none")
//     G' goes to the stash when the chunk also reads s (the read side finishes the row), else it is
//     stored into G[s] rounded once.
//   read_groups_backward   read group of slot sigma (reads r in (token, lane) order):
//       per r: dq_w = <dy_i, bank[sigma]> (the bank holds M0 now)
//       G[sigma] <- rnd( base + (sum_r q_w dy_i) ), base = the stash (sigma written in the chunk)
//       or G[sigma]; the sum starts at +0 and runs in group order.
//
// Parallel decomposition: grid (P, sorted positions / 8), one warp per sorted position of chunk n;
// the warp at a group's first position is the group's only worker, the others exit after one
// coalesced key load (find_group_start: lane l looks at position q + l, so the group's size and its
// entries' keys come from one load per lane). Whether the slot is also read / written in the chunk,
// and where, comes from warp_lower_bound_key over the other side's sorted keys (3 dependent loads
// for 4096 keys). Lane l owns the 8-column pieces c0 = 256 s + 8 l (backward_rows.cuh). A worker
// walks the row's columns once per pass; every dot's lane partial stays in a register next to the
// row accumulator, and the butterflies of all of a pass's dots run together at its end (warp_sums).
//   write: one pass per entry (nearly every group has one: slots_per_stream is large). Per piece it
//     loads G, the entry's delta and dU pieces and the snapshot piece once (all issued before any
//     is used) and updates dlambda (first pass), dc, dk_eff and G'. A longer group carries G' from
//     pass to pass in its own stash row (f32: bitwise the same chain); G stays unchanged until the
//     last pass, which stores G' and restores the bank row.
//   read: the main pass loads M0 and the base once per piece and dy once per entry; it keeps the
//     dots of the first kHeldReads entries and reads the further entries' data from memory for the
//     row sum; their dots take one earlier pass per kHeldReads of them.
// At most 80 registers a thread (24 resident warps an SM); no spills in the column loops.
// Rows are disjoint between groups of one step (streams own disjoint rows, a slot forms one group
// per chunk), so every bank / G / stash row and every output element has one writer.
//
// Numerics (bitwise those of warp_dot's per-dot walks): every dot's lane partial is an fmaf chain
// over the lane's columns in ascending order (dlambda: fmaf(G, pre), dc: fmaf(delta, G), dk_eff:
// fmaf(scale * dU, pre) with scale * dU rounded first, dq_w: fmaf(dy, M0)), then warp_sum's
// butterfly; dlambda = exp(Lambda) * <G, pre>. Row sums per column: G' = fmaf chain in entry
// order starting from exp(Lambda) * G; the read sum starts at +0, entries in group order, then
// base + sum, rounded once to G's dtype. Nothing depends on the access path or the SM count.
#include "backward.hpp"
#include "backward_rows.cuh"
#include "cuda_check.hpp"
#include "dependent_launch.cuh"

namespace sdm::cuda {
namespace {

constexpr int kWarps = 8;
constexpr int kMinBlocks = 3;  // at most 80 registers a thread: 24 warps an SM
constexpr int kHeldReads = 2;  // read entries whose dots one pass keeps in registers
constexpr unsigned kAllLanes = 0xffffffffu;

// The slot group starting at sorted position q of a chunk (keys: the chunk's `count` sorted keys),
// as one warp sees it: lane l holds the key at q + l, which is the group's entry l when l < size.
// size == 0: q starts no group (padding / masked entries, or q continues the group of q - 1).
struct GroupStart {
  std::int64_t local = 0;
  int size = 0;
  std::uint64_t key = 0;
};

__device__ __forceinline__ GroupStart find_group_start(const std::uint64_t* keys, int count, int q,
                                                       const KeyLayout& layout, std::int64_t sps, int lane) {
  GroupStart group;
  const int at = q + lane;
  group.key = at < count ? keys[at] : 0;
  const std::int64_t mine = at < count ? layout.local_slot(group.key) : -1;
  const std::int64_t before = q > 0 ? layout.local_slot(keys[q - 1]) : -1;
  group.local = __shfl_sync(kAllLanes, mine, 0);
  if (group.local == sps || before == group.local) return group;
  // Sorted keys: the group's positions are contiguous, so its members are lanes 0 .. size - 1.
  unsigned members = __ballot_sync(kAllLanes, mine == group.local);
  group.size = members == kAllLanes ? 32 : __ffs(~members) - 1;
  for (int next = q + 32; members == kAllLanes && next < count; next += 32) {
    const int later = next + lane;
    members = __ballot_sync(kAllLanes, later < count && layout.local_slot(keys[later]) == group.local);
    group.size += members == kAllLanes ? 32 : __ffs(~members) - 1;
  }
  return group;
}

// ---- write groups -------------------------------------------------------------------------------

// A write entry's data: row = i * hd (its token's row in the step's dU rows and the chunk's delta
// rows), scale = -beta_i, k_eff.
struct WriteEntry {
  std::int64_t row = 0;
  float scale = 0.0f, k_eff = 0.0f;
};

__device__ __forceinline__ WriteEntry write_entry(const Geometry& geo, const Inputs& in, const Phase1Buffers& p1,
                                                  std::int64_t n, std::int64_t token0, std::uint64_t key) {
  const std::int64_t i = geo.keys.token(key);
  WriteEntry entry;
  entry.row = i * geo.hd;
  entry.scale = -load_input(in.beta, in.beta_dtype, token0 + i);
  entry.k_eff = p1.k_eff[(n * geo.C + i) * geo.W + geo.keys.lane(key)];
  return entry;
}

// Dot partials of a write pass: dlambda / exp(Lambda), dc, dk_eff.
constexpr int kWriteDots = 3;

template <typename E, typename Gt, bool kVec>
__global__ void __launch_bounds__(kWarps * 32, kMinBlocks)
    write_groups_backward(Geometry geo, Inputs in, Phase1Buffers p1, BackwardBuffers bb, std::int64_t ti) {
  wait_for_predecessor();
  const int CW = static_cast<int>(geo.C * geo.W), CR = static_cast<int>(geo.C * geo.R);
  const int q = static_cast<int>(blockIdx.y) * kWarps + static_cast<int>(threadIdx.x) / 32;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  if (q >= CW) return;
  const std::int64_t p = blockIdx.x, n = ti * geo.P + p, hd = geo.hd;
  const std::int64_t e = n * CW + q;  // the group's first sorted position = its snapshot row
  const std::uint64_t* keys = p1.keys + n * CW;
  const GroupStart group = find_group_start(keys, CW, q, geo.keys, geo.sps, lane);
  if (group.size == 0) return;

  std::uint64_t read_key = 0;
  const int first_read = warp_lower_bound_key(bb.read_keys + n * CR, CR, bb.read_layout.encode(n, group.local, 0, 0),
                                              lane, &read_key);
  const bool read_here = first_read < CR && bb.read_layout.local_slot(read_key) == group.local;

  const std::int64_t slot = p * geo.sps + group.local;
  Gt* grad = static_cast<Gt*>(bb.grad_rows) + slot * hd;
  E* bank = static_cast<E*>(bb.bank) + slot * hd;
  float* stash = bb.stash + (p * CW + q) * hd;
  const float* delta = bb.delta + n * geo.C * hd;
  const float* du = bb.du + p * geo.C * hd;
  const std::int64_t token0 = p * geo.T + ti * geo.C;  // flat token of i = 0
  const float decay = p1.gdecay[e];

  // One pass per entry (nearly always a single one). A longer group carries its G' sum from pass to
  // pass in its stash row (f32, so bitwise the same chain); G stays unchanged until the last pass,
  // which stores G' (stash or G) and restores the bank row.
  for (int b = 0; b < group.size; ++b) {
    const bool first = b == 0, last = b + 1 == group.size;
    const WriteEntry entry =
        write_entry(geo, in, p1, n, token0, b < 32 ? __shfl_sync(kAllLanes, group.key, b) : keys[q + b]);
    float dots[kWriteDots] = {};
    for (std::int64_t c0 = static_cast<std::int64_t>(lane) * kLaneCols; c0 < hd; c0 += kWarpCols) {
      float g[kLaneCols], d[kLaneCols], u[kLaneCols], pre[kLaneCols], acc[kLaneCols];
      const int valid = load_piece<kVec>(grad, c0, hd, g);
      load_piece<kVec>(delta + entry.row, c0, hd, d);
      load_piece<kVec>(du + entry.row, c0, hd, u);
      load_snapshot_piece<kVec, E>(bb.snapshot, e, c0, hd, pre);
      if (first) {
#pragma unroll
        for (int k = 0; k < kLaneCols; ++k) {
          if (k < valid) dots[0] = fmaf(g[k], pre[k], dots[0]);
          acc[k] = decay * g[k];
        }
      } else {
        load_piece<kVec>(stash, c0, hd, acc);
      }
#pragma unroll
      for (int k = 0; k < kLaneCols; ++k) {
        const float ret = entry.scale * u[k];
        if (k < valid) {
          dots[1] = fmaf(d[k], g[k], dots[1]);
          dots[2] = fmaf(ret, pre[k], dots[2]);
        }
        acc[k] = fmaf(entry.k_eff, ret, acc[k]);
      }
      if (!last || read_here) store_piece<kVec>(stash, c0, hd, acc);
      else store_piece<kVec>(grad, c0, hd, acc);
      if (last) restore_snapshot_piece<kVec>(bb.snapshot, e, c0, hd, pre, bank);
    }
    warp_sums(dots);
    if (lane == 0) {
      if (first) bb.dlambda[e] = decay * dots[0];
      bb.dc[e + b] = dots[1];
      bb.dk_eff[e + b] = dots[2];
    }
  }
}

// ---- read groups --------------------------------------------------------------------------------

// A read entry's data: row = i * hd (its token's dy step row), q_w, and its entry index (for dq_w).
struct ReadEntry {
  std::int64_t row = 0, index = 0;
  float q_w = 0.0f;
};

__device__ __forceinline__ ReadEntry read_entry(const Geometry& geo, const Phase1Buffers& p1, const KeyLayout& layout,
                                                std::int64_t n, std::uint64_t key) {
  const std::int64_t i = layout.token(key);
  ReadEntry entry;
  entry.row = i * geo.hd;
  entry.index = (n * geo.C + i) * geo.R + layout.lane(key);
  entry.q_w = p1.q_w[entry.index];
  return entry;
}

// Up to kHeldReads read entries (rows and weights), in every lane's registers (entries past `count`:
// row 0, a valid address).
struct ReadBatch {
  std::int64_t row[kHeldReads];
  float q_w[kHeldReads];
  int count;
};

__device__ __forceinline__ ReadBatch share_reads(const ReadEntry& mine, int count) {
  ReadBatch batch;
#pragma unroll
  for (int j = 0; j < kHeldReads; ++j) {
    batch.row[j] = __shfl_sync(kAllLanes, mine.row, j);
    batch.q_w[j] = __shfl_sync(kAllLanes, mine.q_w, j);
  }
  batch.count = count;
  return batch;
}

// Entry j's terms of one column piece (y: the piece of dy_i): dq_j += y . M0 over the `valid` real
// columns, and acc += q_w y.
template <int j>
__device__ __forceinline__ void add_read_entry(const ReadBatch& batch, const float (&y)[kLaneCols], int valid,
                                               const float (&m0)[kLaneCols], float (&dots)[kHeldReads],
                                               float (&acc)[kLaneCols]) {
#pragma unroll
  for (int k = 0; k < kLaneCols; ++k) {
    if (k < valid) dots[j] = fmaf(y[k], m0[k], dots[j]);
    acc[k] = fmaf(batch.q_w[j], y[k], acc[k]);
  }
}

// Entries 1 .. count - 1 of the batch on one column piece.
template <bool kVec, int j = 1>
__device__ __forceinline__ void add_later_reads(const ReadBatch& batch, const float* dy, std::int64_t c0,
                                                std::int64_t hd, int valid, const float (&m0)[kLaneCols],
                                                float (&dots)[kHeldReads], float (&acc)[kLaneCols]) {
  if constexpr (j < kHeldReads) {
    if (j < batch.count) {
      float y[kLaneCols];
      load_piece<kVec>(dy + batch.row[j], c0, hd, y);
      add_read_entry<j>(batch, y, valid, m0, dots, acc);
      add_later_reads<kVec, j + 1>(batch, dy, c0, hd, valid, m0, dots, acc);
    }
  }
}

// Lane j < count stores the batch's dq_w j at its entry index (the lane's own entry).
__device__ __forceinline__ void store_read_dots(const BackwardBuffers& bb, const float (&dots)[kHeldReads], int count,
                                                const ReadEntry& mine, int lane) {
  float dq_w = 0.0f;
#pragma unroll
  for (int j = 0; j < kHeldReads; ++j) {
    if (lane == j) dq_w = dots[j];
  }
  if (lane < count) bb.dq_w[mine.index] = dq_w;
}

template <typename E, typename Gt, bool kVec>
__global__ void __launch_bounds__(kWarps * 32, kMinBlocks)
    read_groups_backward(Geometry geo, Phase1Buffers p1, BackwardBuffers bb, std::int64_t ti) {
  wait_for_predecessor();
  const int CW = static_cast<int>(geo.C * geo.W), CR = static_cast<int>(geo.C * geo.R);
  const KeyLayout& layout = bb.read_layout;
  const int q = static_cast<int>(blockIdx.y) * kWarps + static_cast<int>(threadIdx.x) / 32;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  if (q >= CR) return;
  const std::int64_t p = blockIdx.x, n = ti * geo.P + p, hd = geo.hd;
  const std::uint64_t* keys = bb.read_keys + n * CR;
  const GroupStart group = find_group_start(keys, CR, q, layout, geo.sps, lane);
  if (group.size == 0) return;

  const ReadEntry mine = lane < group.size ? read_entry(geo, p1, layout, n, group.key) : ReadEntry{};
  std::uint64_t write_key = 0;
  const int first_write =
      warp_lower_bound_key(p1.keys + n * CW, CW, geo.keys.encode(n, group.local, 0, 0), lane, &write_key);
  const bool written = first_write < CW && geo.keys.local_slot(write_key) == group.local;

  const std::int64_t slot = p * geo.sps + group.local;
  Gt* grad = static_cast<Gt*>(bb.grad_rows) + slot * hd;
  const E* bank = static_cast<const E*>(bb.bank) + slot * hd;
  const float* stash = bb.stash + (p * CW + first_write) * hd;  // used only when written
  const float* dy = bb.dy + p * geo.C * hd;

  // Groups longer than kHeldReads: dq_w of the further entries, kHeldReads of them a pass.
  for (int b = kHeldReads; b < group.size; b += kHeldReads) {
    const int take = min(kHeldReads, group.size - b);
    const ReadEntry other = lane < take ? read_entry(geo, p1, layout, n, keys[q + b + lane]) : ReadEntry{};
    const ReadBatch batch = share_reads(other, take);
    float dots[kHeldReads] = {};
    for (std::int64_t c0 = static_cast<std::int64_t>(lane) * kLaneCols; c0 < hd; c0 += kWarpCols) {
      float m0[kLaneCols], y[kLaneCols], unused[kLaneCols] = {};
      const int valid = load_piece<kVec>(bank, c0, hd, m0);
      load_piece<kVec>(dy + batch.row[0], c0, hd, y);
      add_read_entry<0>(batch, y, valid, m0, dots, unused);
      add_later_reads<kVec>(batch, dy, c0, hd, valid, m0, dots, unused);
    }
    warp_sums(dots);
    store_read_dots(bb, dots, take, other, lane);
  }

  // The main pass: the first kHeldReads entries' dq_w, and the row sum over every entry (the further
  // entries' data come from memory).
  const ReadBatch batch = share_reads(mine, min(kHeldReads, group.size));
  float dots[kHeldReads] = {};
  for (std::int64_t c0 = static_cast<std::int64_t>(lane) * kLaneCols; c0 < hd; c0 += kWarpCols) {
    float m0[kLaneCols], y[kLaneCols], base[kLaneCols], acc[kLaneCols] = {};
    const int valid = load_piece<kVec>(bank, c0, hd, m0);
    load_piece<kVec>(dy + batch.row[0], c0, hd, y);
    if (written) load_piece<kVec>(stash, c0, hd, base);
    else load_piece<kVec>(grad, c0, hd, base);
    add_read_entry<0>(batch, y, valid, m0, dots, acc);
    add_later_reads<kVec>(batch, dy, c0, hd, valid, m0, dots, acc);
    for (int j = kHeldReads; j < group.size; ++j) {
      const ReadEntry entry = read_entry(geo, p1, layout, n, keys[q + j]);
      float later[kLaneCols];
      load_piece<kVec>(dy + entry.row, c0, hd, later);
#pragma unroll
      for (int k = 0; k < kLaneCols; ++k) acc[k] = fmaf(entry.q_w, later[k], acc[k]);
    }
#pragma unroll
    for (int k = 0; k < kLaneCols; ++k) acc[k] = base[k] + acc[k];
    store_piece<kVec>(grad, c0, hd, acc);
  }
  warp_sums(dots);
  store_read_dots(bb, dots, batch.count, mine, lane);
}

template <typename E, typename Gt, bool kVec>
void launch(const Geometry& geo, const Inputs& in, const Phase1Buffers& p1, const BackwardBuffers& bb,
            std::int64_t ti, cudaStream_t stream) {
  const auto blocks = [](std::int64_t warps) { return static_cast<unsigned>((warps + kWarps - 1) / kWarps); };
  const unsigned streams = static_cast<unsigned>(geo.P);
  launch_dependent(write_groups_backward<E, Gt, kVec>, dim3(streams, blocks(geo.C * geo.W)), dim3(kWarps * 32), 0,
                   stream, "write_groups_backward", geo, in, p1, bb, ti);
  launch_dependent(read_groups_backward<E, Gt, kVec>, dim3(streams, blocks(geo.C * geo.R)), dim3(kWarps * 32), 0,
                   stream, "read_groups_backward", geo, p1, bb, ti);
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

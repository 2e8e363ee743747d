// slot_split.cuh - the long slot groups of the backward's slot kernel (slots.cu): a write group of
// two or more entries or read two or more times, and a read-only group of two or more reads. The
// group's row is split by 256-column steps over the group's own warps (the warps at its first
// `members` sorted positions, which would otherwise idle): member j of g' = split_members(..)
// owns column steps s = j, j + g', j + 2 g', ... For each step it owns, one warp:
//   write group (entries b = 0 .. size-1 in group order, reads r = 0 .. rsize-1, pre = M0[s]
//   decoded from the snapshot row):
//     loads G's and pre's pieces once, then per entry its dU piece once (four entries a pass):
//       dk_eff_b = <-beta_b dU_b, pre> (step partials, plane s),
//       G' = exp(Lambda) G + sum_b k_eff_b (-beta_b dU_b) in registers (no scratch row),
//       and on the element path its delta piece too: dc_b = <delta_b, G> (two entries a pass; on
//       the vector path GWR takes dc, backward.hpp dc_in_gwr);
//     dlambda's step partial <G, pre>; per read its dy piece once (four reads a pass): dq_w_r =
//     <dy_r, pre>, the read sum from +0; G <- rnd(G' + sum) (rnd(G') unread);
//   read-only group (M0 = the row at the chunk's start, bank_at_chunk.cuh): dq_w_r per read,
//   G <- rnd(G + sum).
// Parallel decomposition: a step has one owner, so every G piece and every plane element has one
// writer; warps of a group share nothing and never synchronise.
// Numerics: per column the same fmaf chains as one warp walking the whole row (G' in group order
// from exp(Lambda) G, the read sum in group order from +0, one rounding of base + sum), so G and
// every column result keep their bits whatever g' is. Each dot's step partial
// is the lane's fmaf chain over its 8 columns of the step, then warp_sum's butterfly (common/rows.cuh;
// run transposed over four dots at once, bitwise the same); the
// entry kernels add the steps in step order (sum_steps): bits independent of g', of the warps per
// CTA and of the SM count. With hd <= 256 (one step) every dot equals the whole-row warp dot.
// The one-step bodies (write_group_step, read_group_step) take the token pieces of their step as
// TokenPieces.
#pragma once

#include <cstdint>

#include "cuda/backward/slot_reads.cuh"
#include "cuda/backward/slot_writes.cuh"
#include "cuda/saved/snapshot_rows.cuh"

namespace sdm::cuda::slot_side {

// How many warps share a group of `positions` sorted positions: one per column step at most, and
// at most `cap` (0: no cap; the test knob slot_split_warps).
__device__ __forceinline__ int split_members(int positions, std::int64_t steps, int cap) {
  int members = positions < steps ? positions : static_cast<int>(steps);
  if (cap > 0 && cap < members) members = cap;
  return members > 0 ? members : 1;
}

// Where one column piece of a chunk's token rows lies for one lane: the piece of the token whose
// row offset is `row` (an entry's row: i times the rows' stride) is at delta + row, du + row,
// dy + row: the step rows in global memory (stride hd, pointers at column c0).
struct TokenPieces {
  const float* delta;
  const float* du;
  const float* dy;
};

// The read side of one column piece for reads 0 .. size-1 (M0's piece m0; the dy pieces at
// dy + row): dq_w's step partials (stored at plane `step`) and the read sum into sum (+0 on
// entry, group order). Four entries at a time: their dy pieces are loaded before any is used, and
// their dots summed in one transposed warp_sum.
template <bool kVec>
__device__ __forceinline__ void read_step(const ReadGroup& reads, const float* dy, bool active, int rest, int valid,
                                          const float (&m0)[kLaneCols], int step, float (&sum)[kLaneCols],
                                          int lane) {
  constexpr int kPass = 4;
  for (int j = 0; j < reads.size; j += kPass) {
    float q_w[kPass], y[kPass][kLaneCols] = {};
#pragma unroll
    for (int t = 0; t < kPass; ++t) {
      const ReadRow r = j + t < reads.size ? group_read_row(reads, j + t) : ReadRow{};
      q_w[t] = r.q_w;
      if (active && j + t < reads.size) load_piece<kVec>(dy + r.row, 0, rest, y[t]);
    }
    float dots[kPass] = {};
#pragma unroll
    for (int t = 0; t < kPass; ++t) {
      if (j + t < reads.size) add_read(q_w[t], y[t], valid, m0, dots[t], sum);
    }
    const float total = warp_sum4_to_lanes(dots[0], dots[1], dots[2], dots[3], lane);  // lane 8 t: entry j + t's
    if (j < 32) {
      // Lane j + t holds entry j + t (ReadGroup::mine): it takes the total from lane 8 t and stores it.
      const int t = lane - j;
      const float mine = __shfl_sync(kAllLanes, total, (t & (kPass - 1)) * 8);
      if (t >= 0 && t < kPass && lane < reads.size) reads.dq_w.at(step, reads.mine.index) = mine;
    } else {
      const int t = lane >> 3;
      if ((lane & 7) == 0 && j + t < reads.size) {
        reads.dq_w.at(step, read_entry(reads.src, reads.keys[j + t]).index) = total;
      }
    }
  }
}

// The entries of a write group at one column piece, two at a time (their delta and dU pieces are
// loaded before either is used): dc_b = <delta_b, G> and dk_eff_b = <-beta_b dU_b, pre> (step
// partials at plane s), and G' += k_eff_b (-beta_b dU_b) in entry order.
template <bool kVec, typename E, typename Gt>
__device__ __forceinline__ void write_entries_dc_du(const WriteRows<E, Gt>& rows, const WriteEntry& mine,
                                                    const WriteEntrySource& src, const std::uint64_t* group_keys,
                                                    int size, const TokenPieces& pieces, bool active, int rest,
                                                    int valid, const float (&g)[kLaneCols],
                                                    const float (&pre)[kLaneCols], int s, float (&acc)[kLaneCols],
                                                    int lane) {
  for (int b = 0; b < size; b += 2) {
    const bool two = b + 1 < size;
    const WriteEntry e0 = group_entry(mine, b, src, group_keys);
    const WriteEntry e1 = two ? group_entry(mine, b + 1, src, group_keys) : e0;
    float d0[kLaneCols] = {}, u0[kLaneCols] = {}, d1[kLaneCols] = {}, u1[kLaneCols] = {};
    if (active) {
      load_piece<kVec>(pieces.delta + e0.row, 0, rest, d0);
      load_piece<kVec>(pieces.du + e0.row, 0, rest, u0);
      if (two) {
        load_piece<kVec>(pieces.delta + e1.row, 0, rest, d1);
        load_piece<kVec>(pieces.du + e1.row, 0, rest, u1);
      }
    }
    float dots[4] = {};
#pragma unroll
    for (int k = 0; k < kLaneCols; ++k) {
      const float ret = e0.scale * u0[k];
      if (k < valid) {
        dots[0] = fmaf(d0[k], g[k], dots[0]);
        dots[1] = fmaf(ret, pre[k], dots[1]);
      }
      acc[k] = fmaf(e0.k_eff, ret, acc[k]);
    }
    if (two) {
#pragma unroll
      for (int k = 0; k < kLaneCols; ++k) {
        const float ret = e1.scale * u1[k];
        if (k < valid) {
          dots[2] = fmaf(d1[k], g[k], dots[2]);
          dots[3] = fmaf(ret, pre[k], dots[3]);
        }
        acc[k] = fmaf(e1.k_eff, ret, acc[k]);
      }
    }
    // Lanes 0, 8 hold entry b's dc, dk_eff; lanes 16, 24 entry b + 1's.
    const float total = warp_sum4_to_lanes(dots[0], dots[1], dots[2], dots[3], lane);
    if (lane == 0) rows.dc.at(s, b) = total;
    if (lane == 8) rows.dk_eff.at(s, b) = total;
    if (two && lane == 16) rows.dc.at(s, b + 1) = total;
    if (two && lane == 24) rows.dk_eff.at(s, b + 1) = total;
  }
}

// The same where GWR took dc (backward.hpp dc_in_gwr): only the dU pieces, four entries at a time
// (loaded before any is used): dk_eff_b's step partials and G' += k_eff_b (-beta_b dU_b) in entry
// order, the four dots summed in one transposed warp_sum.
template <bool kVec, typename E, typename Gt>
__device__ __forceinline__ void write_entries_du(const WriteRows<E, Gt>& rows, const WriteEntry& mine,
                                                 const WriteEntrySource& src, const std::uint64_t* group_keys,
                                                 int size, const TokenPieces& pieces, bool active, int rest, int valid,
                                                 const float (&pre)[kLaneCols], int s, float (&acc)[kLaneCols],
                                                 int lane) {
  constexpr int kPass = 4;
  for (int b = 0; b < size; b += kPass) {
    WriteEntry e[kPass];
    float u[kPass][kLaneCols] = {};
#pragma unroll
    for (int j = 0; j < kPass; ++j) {
      e[j] = b + j < size ? group_entry(mine, b + j, src, group_keys) : WriteEntry{};
      if (active && b + j < size) load_piece<kVec>(pieces.du + e[j].row, 0, rest, u[j]);
    }
    float dots[kPass] = {};
#pragma unroll
    for (int j = 0; j < kPass; ++j) {
      if (b + j >= size) continue;
#pragma unroll
      for (int k = 0; k < kLaneCols; ++k) {
        const float ret = e[j].scale * u[j][k];
        if (k < valid) dots[j] = fmaf(ret, pre[k], dots[j]);
        acc[k] = fmaf(e[j].k_eff, ret, acc[k]);
      }
    }
    // Lane 8 j holds entry b + j's dk_eff.
    const float total = warp_sum4_to_lanes(dots[0], dots[1], dots[2], dots[3], lane);
    const int j = lane >> 3;
    if ((lane & 7) == 0 && b + j < size) rows.dk_eff.at(s, b + j) = total;
  }
}

// Column step s of a write group (mine: lane l < size holds entry l; group_keys: the group's
// sorted keys; reads: the slot's read group, size 0 if unread; pieces: the token pieces of step s
// for this lane): the dots' step partials at plane s, G's piece of the step.
template <SnapshotQuant kMode, bool kVec, typename E, typename Gt>
__device__ __forceinline__ void write_group_step(const WriteRows<E, Gt>& rows, const WriteEntry& mine,
                                                 const WriteEntrySource& src, const std::uint64_t* group_keys,
                                                 int size, const ReadGroup& reads, const TokenPieces& pieces, int hd,
                                                 int s, int lane) {
  SnapshotRows snapshot = rows.snapshot;
  snapshot.mode = kMode;  // known here too: load_snapshot_piece keeps one decoder
  const int c0 = s * kWarpCols + lane * kLaneCols, rest = hd - c0;
  const bool active = c0 < hd;
  float g[kLaneCols] = {}, pre[kLaneCols] = {}, acc[kLaneCols];
  int valid = 0;
  if (active) {
    valid = load_piece<kVec>(rows.grad + c0, 0, rest, g);
    load_snapshot_piece<kVec, E>(snapshot, 0, c0, hd, pre);
  }
  float lambda_dot = 0.0f;
#pragma unroll
  for (int k = 0; k < kLaneCols; ++k) {
    if (k < valid) lambda_dot = fmaf(g[k], pre[k], lambda_dot);
    acc[k] = rows.decay * g[k];
  }
  if constexpr (dc_in_gwr(kVec)) {
    write_entries_du<kVec>(rows, mine, src, group_keys, size, pieces, active, rest, valid, pre, s, acc, lane);
  } else {
    write_entries_dc_du<kVec>(rows, mine, src, group_keys, size, pieces, active, rest, valid, g, pre, s, acc, lane);
  }
  lambda_dot = warp_sum(lambda_dot);
  if (lane == 0) rows.dlambda.at(s, 0) = lambda_dot;
  if (reads.size > 0) {
    float sum[kLaneCols] = {};
    read_step<kVec>(reads, pieces.dy, active, rest, valid, pre, s, sum, lane);
#pragma unroll
    for (int k = 0; k < kLaneCols; ++k) acc[k] = acc[k] + sum[k];
  }
  if (active) store_piece_cvt<kVec>(rows.grad + c0, 0, rest, acc);
}

// The write group's steps of member `member` of `members`, token pieces from the step rows.
template <SnapshotQuant kMode, bool kVec, typename E, typename Gt>
__device__ __forceinline__ void write_split_group(const WriteRows<E, Gt> rows, const WriteEntry mine,
                                               const WriteEntrySource src, const std::uint64_t* group_keys, int size,
                                               const ReadGroup reads, int hd, int steps, int member, int members,
                                               int lane) {
  for (int s = member; s < steps; s += members) {
    const int c0 = s * kWarpCols + lane * kLaneCols;
    const TokenPieces pieces{rows.delta + c0, rows.du + c0, reads.dy + c0};
    write_group_step<kMode, kVec>(rows, mine, src, group_keys, size, reads, pieces, hd, s, lane);
  }
}

// Column step s of a read-only group (M0 = the row at the chunk's start, base = G; dy: the lane's
// dy pieces as in TokenPieces).
template <bool kVec, typename E, SnapshotQuant kMode, typename Gt>
__device__ __forceinline__ void read_group_step(Gt* grad, const BankRow<E, kMode>& bank, const ReadGroup& reads,
                                                const float* dy, int hd, int s, int lane) {
  const int c0 = s * kWarpCols + lane * kLaneCols, rest = hd - c0;
  const bool active = c0 < hd;
  float m0[kLaneCols] = {}, base[kLaneCols] = {}, sum[kLaneCols] = {};
  int valid = 0;
  if (active) {
    valid = bank.template load<kVec>(c0, hd, m0);
    load_piece<kVec>(grad + c0, 0, rest, base);
  }
  read_step<kVec>(reads, dy, active, rest, valid, m0, s, sum, lane);
#pragma unroll
  for (int k = 0; k < kLaneCols; ++k) sum[k] = base[k] + sum[k];
  if (active) store_piece_cvt<kVec>(grad + c0, 0, rest, sum);
}

// The read-only group's steps of member `member` of `members`, dy pieces from the step rows.
template <bool kVec, typename E, SnapshotQuant kMode, typename Gt>
__device__ __forceinline__ void read_split_group(Gt* grad, const BankRow<E, kMode> bank, const ReadGroup reads,
                                                 int hd, int steps, int member, int members, int lane) {
  for (int s = member; s < steps; s += members) {
    read_group_step<kVec>(grad, bank, reads, reads.dy + s * kWarpCols + lane * kLaneCols, hd, s, lane);
  }
}

}  // namespace sdm::cuda::slot_side

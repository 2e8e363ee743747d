// slot_writes.cuh - the write side of the backward's slot kernel (slots.cu, slot_split.cuh): a
// write group's entries and rows, and the row walk of a group of one write entry read at most once
// (nearly every group; longer ones: slot_split.cuh). For the group's entry (token i), per column:
//   dlambda's step partial G . pre, dc = <delta_i, G>, dk_eff = <-beta_i dU_i, pre> (per-lane fmaf
//   chains over the lane's columns of one 256-column step, then warp_sum's butterfly, transposed:
//   warp_sum4_to_lanes; stored at plane s);
//   G' = exp(Lambda) G + k_eff (-beta_i dU_i); G <- rnd(G') or, read once, rnd(G' + q_w dy_r) with
//   dq_w's step partial dy_r . pre in the same walk. The bank is not written: the group's worker
//   names its snapshot row as the slot's row source (bank_at_chunk.cuh).
// Numerics: as slot_reads.cuh; G' is one fmaf chain per column in group order.
#pragma once

#include <cstdint>

#include "cuda/backward/slot_reads.cuh"
#include "cuda/saved/snapshot_rows.cuh"

namespace sdm::cuda::slot_side {

// A write entry's data: row = i * hd (its token's row in the step's dU rows and the chunk's delta
// rows), scale = -beta_i, k_eff.
struct WriteEntry {
  std::int64_t row = 0;
  float scale = 0.0f, k_eff = 0.0f;
};

// Where a chunk's write entries find their data (k_eff: chunk n's [C, W] block; token0: the flat
// token of i = 0).
struct WriteEntrySource {
  const void* beta;
  DType beta_dtype;
  const float* k_eff;
  KeyLayout keys;
  std::int64_t hd, W, token0;
};

__device__ __forceinline__ WriteEntry write_entry(const WriteEntrySource& src, std::uint64_t key) {
  const std::int64_t i = src.keys.token(key);
  WriteEntry entry;
  entry.row = i * src.hd;
  entry.scale = -load_input(src.beta, src.beta_dtype, src.token0 + i);
  entry.k_eff = src.k_eff[i * src.W + src.keys.lane(key)];
  return entry;
}

// Entry b of a group whose lane l holds entry l's data (l < 32): a shuffle, or memory past 32
// (group_keys: the group's sorted keys).
__device__ __forceinline__ WriteEntry group_entry(const WriteEntry& mine, int b, const WriteEntrySource& src,
                                                  const std::uint64_t* group_keys) {
  if (b >= 32) return write_entry(src, group_keys[b]);
  WriteEntry entry;
  entry.row = __shfl_sync(kAllLanes, mine.row, b);
  entry.scale = __shfl_sync(kAllLanes, mine.scale, b);
  entry.k_eff = __shfl_sync(kAllLanes, mine.k_eff, b);
  return entry;
}

// The rows one write group touches (lane independent; computed once per group). snapshot: the
// group's own snapshot row (payload and scale moved to it, row index 0) in the compile-time mode;
// dlambda / dc / dk_eff: the dot planes moved to the group's first sorted position e (entry b of
// the group at index b).
template <typename E, typename Gt>
struct WriteRows {
  Gt* grad;
  const float* delta;
  const float* du;
  SnapshotRows snapshot;
  DotPlanes dlambda, dc, dk_eff;
  float decay;
};

// Dot partials of a single-entry write walk: dlambda / exp(Lambda), dc, dk_eff, and dq_w when read.
constexpr int kWriteDots = 3;

// The row walk of a write group of one entry (`entry`), read once (kRead: `reads` holds the single
// read entry in every lane's `mine`, M0 = pre) or not at all: per column step s the dots' step
// partials (stored at plane s; dc only where GWR does not take it, backward.hpp dc_in_gwr), G
// rounded once. Every lane runs every step (the warp sums need all lanes); lanes past hd load and
// store nothing. Lane pointers advance by a column step; `rest` = the columns from the piece on
// (load_piece / store_piece see the piece as column 0 of a row of `rest` columns).
template <bool kRead, SnapshotQuant kMode, bool kVec, typename E, typename Gt>
__device__ __forceinline__ void write_single(const WriteRows<E, Gt>& rows, const WriteEntry& entry,
                                             const ReadGroup& reads, int hd, int steps, int lane) {
  constexpr bool kDc = !dc_in_gwr(kVec);  // else GWR took dc (backward.hpp)
  const int first = lane * kLaneCols;
  Gt* grad = rows.grad + first;
  SnapshotRows snapshot = rows.snapshot;
  snapshot.mode = kMode;  // known here: load_snapshot_piece keeps one decoder
  const float* delta = rows.delta + entry.row + first;
  const float* du = rows.du + entry.row + first;
  const float* dy = nullptr;
  if constexpr (kRead) dy = reads.dy + reads.mine.row + first;
  for (int s = 0, c0 = first; s < steps; ++s, c0 += kWarpCols) {
    float dots[kWriteDots + (kRead ? 1 : 0)] = {};
    if (c0 < hd) {
      const int rest = hd - c0;
      float g[kLaneCols], d[kLaneCols], u[kLaneCols], pre[kLaneCols], acc[kLaneCols], y[kLaneCols];
      const int valid = load_piece<kVec>(grad, 0, rest, g);
      if constexpr (kDc) load_piece<kVec>(delta, 0, rest, d);
      load_piece<kVec>(du, 0, rest, u);
      load_snapshot_piece<kVec, E>(snapshot, 0, c0, hd, pre);
      if constexpr (kRead) load_piece<kVec>(dy, 0, rest, y);
#pragma unroll
      for (int k = 0; k < kLaneCols; ++k) {
        if (k < valid) dots[0] = fmaf(g[k], pre[k], dots[0]);
        acc[k] = rows.decay * g[k];
      }
#pragma unroll
      for (int k = 0; k < kLaneCols; ++k) {
        const float ret = entry.scale * u[k];
        if (k < valid) {
          if constexpr (kDc) dots[1] = fmaf(d[k], g[k], dots[1]);
          dots[2] = fmaf(ret, pre[k], dots[2]);
        }
        acc[k] = fmaf(entry.k_eff, ret, acc[k]);
      }
      if constexpr (kRead) {
        float sum[kLaneCols] = {};
        add_read(reads.mine.q_w, y, valid, pre, dots[kWriteDots], sum);
#pragma unroll
        for (int k = 0; k < kLaneCols; ++k) acc[k] = acc[k] + sum[k];
      }
      store_piece_cvt<kVec>(grad, 0, rest, acc);
    }
    if constexpr (kDc || kRead) {
      // Lanes 0, 8, 16 (and 24) hold the step's dlambda, dc (0 if GWR took it), dk_eff (and dq_w).
      const float total = warp_sum4_to_lanes(dots[0], dots[1], dots[2], kRead ? dots[kWriteDots] : 0.0f, lane);
      if (lane == 0) rows.dlambda.at(s, 0) = total;
      if (kDc && lane == 8) rows.dc.at(s, 0) = total;
      if (lane == 16) rows.dk_eff.at(s, 0) = total;
      if constexpr (kRead) {
        if (lane == 24) reads.dq_w.at(s, reads.mine.index) = total;
      }
    } else {
      const float total = warp_sum2_to_lanes(dots[0], dots[2], lane);  // lanes 0, 16: dlambda, dk_eff
      if (lane == 0) rows.dlambda.at(s, 0) = total;
      if (lane == 16) rows.dk_eff.at(s, 0) = total;
    }
    grad += kWarpCols, delta += kWarpCols, du += kWarpCols;
    if constexpr (kRead) dy += kWarpCols;
  }
}

}  // namespace sdm::cuda::slot_side

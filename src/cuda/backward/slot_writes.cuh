// slot_writes.cuh - the write side of the backward's slot kernel (slots.cu): one write group's
// passes over its slot's row, for entries b = 0 .. size-1 in group (token) order.
//   pass b       dots of entry b: dlambda (G . pre), dc_b = <delta_i, G>, dk_eff_b =
//                <-beta_i dU_i, pre> (per-lane partials, then warp_sum); G' = exp(Lambda) G +
//                sum_b k_eff_b (-beta_i dU_i), carried between passes in the group's scratch row
//   last pass    stores G rounded once (rnd(G'), or rnd(G' + read sum) with the slot's read side
//                folded into the same walk, slot_reads.cuh) and restores bank[s] <- pre from the
//                snapshot row (a bit copy for mode "none")
//   long groups  write_long_group, out of line: one pass per entry for groups of two or more
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
// stash: the group's scratch row (G' between passes); dlambda / dc / dk_eff: the outputs at the
// group's first sorted position e.
template <typename E, typename Gt>
struct WriteRows {
  Gt* grad;
  E* bank;
  float* stash;
  const float* delta;
  const float* du;
  SnapshotRows snapshot;
  float* dlambda;
  float* dc;
  float* dk_eff;
  float decay;
};

// Dot partials of a write pass: dlambda / exp(Lambda), dc, dk_eff.
constexpr int kWriteDots = 3;

// One pass of a write group over its row for entry b (kFirst: b == 0, kLast: b == size - 1), then
// the pass's dots stored at sorted position e + b. kToStash: G' goes to the scratch row (every pass
// but the last), else the last pass stores G rounded once: rnd(G'), or with kReads != none
// rnd(G' + read sum), the read side (`reads`, M0 = pre) computed in the same walk. Mode "none" with
// vector access keeps the snapshot piece's bits from its one load and stores them back into the
// bank (copy_piece's bits).
template <bool kFirst, bool kLast, bool kToStash, Reads kReads, SnapshotQuant kMode, bool kVec, typename E,
          typename Gt>
__device__ __forceinline__ void write_pass(const WriteRows<E, Gt>& rows, const WriteEntry& entry, int hd, int lane,
                                           int b, const ReadGroup& reads) {
  static_assert(kReads == Reads::none || (kLast && !kToStash), "the read side runs in the last pass");
  // Lane pointers at the lane's first piece, advanced by a column step per piece; `rest` = the
  // columns from the piece on (load_piece / store_piece see the piece as column 0 of a row of
  // `rest` columns: the same columns and `valid`).
  const int first = lane * kLaneCols;
  Gt* grad = rows.grad + first;
  E* bank = rows.bank + first;
  float* stash = rows.stash + first;
  const float* delta = rows.delta + entry.row + first;
  const float* du = rows.du + entry.row + first;
  const E* saved = static_cast<const E*>(rows.snapshot.payload) + first;
  const float* dy = nullptr;
  if constexpr (kReads != Reads::none) dy = reads.dy + reads.batch.row[0] + first;
  float dots[kWriteDots] = {};
  float read_dots[kReadDots<kReads>] = {};
  for (int c0 = first; c0 < hd; c0 += kWarpCols) {
    const int rest = hd - c0;
    float g[kLaneCols], d[kLaneCols], u[kLaneCols], pre[kLaneCols], acc[kLaneCols], y[kLaneCols];
    PackedRow<E, kLaneCols> saved_bits;
    const int valid = load_piece<kVec>(grad, 0, rest, g);
    load_piece<kVec>(delta, 0, rest, d);
    load_piece<kVec>(du, 0, rest, u);
    if constexpr (kMode == SnapshotQuant::none && kVec) {
      load_packed(saved, saved_bits);
      unpack(saved_bits, pre);
    } else {
      load_snapshot_piece<kVec, E>(rows.snapshot, 0, c0, hd, pre);
    }
    if constexpr (kReads != Reads::none) load_piece<kVec>(dy, 0, rest, y);
    if constexpr (kFirst) {
#pragma unroll
      for (int k = 0; k < kLaneCols; ++k) {
        if (k < valid) dots[0] = fmaf(g[k], pre[k], dots[0]);
        acc[k] = rows.decay * g[k];
      }
    } else {
      load_piece<kVec>(stash, 0, rest, acc);
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
    if constexpr (kReads != Reads::none) {
      float sum[kLaneCols] = {};
      add_read_piece<kReads, kVec>(reads, y, c0, hd, valid, pre, read_dots, sum);
#pragma unroll
      for (int k = 0; k < kLaneCols; ++k) acc[k] = acc[k] + sum[k];
    }
    if constexpr (kToStash) store_piece<kVec>(stash, 0, rest, acc);
    else store_piece_cvt<kVec>(grad, 0, rest, acc);
    if constexpr (kLast) {
      if constexpr (kMode == SnapshotQuant::none && kVec) {
#pragma unroll
        for (int k = 0; k < PackedRow<E, kLaneCols>::kWords / 4; ++k) {
          reinterpret_cast<uint4*>(bank)[k] = make_uint4(saved_bits.w[4 * k], saved_bits.w[4 * k + 1],
                                                         saved_bits.w[4 * k + 2], saved_bits.w[4 * k + 3]);
        }
      } else {
        restore_snapshot_piece<kVec>(rows.snapshot, 0, c0, hd, pre, rows.bank);
      }
    }
    grad += kWarpCols, bank += kWarpCols, stash += kWarpCols, delta += kWarpCols, du += kWarpCols;
    saved += kWarpCols;
    if constexpr (kReads != Reads::none) dy += kWarpCols;
  }
  warp_sums(dots);
  if (lane == 0) {
    if (kFirst) rows.dlambda[0] = rows.decay * dots[0];
    rows.dc[b] = dots[1];
    rows.dk_eff[b] = dots[2];
  }
  if constexpr (kReads != Reads::none) {
    warp_sums(read_dots);
    store_read_dots(reads, read_dots, reads.batch.count, reads.mine, lane);
  }
}

// A write group of two or more entries, or of one entry whose slot the chunk reads two or more
// times (a few percent of them): one pass per entry. It carries its G' sum from pass to pass in its
// scratch row (f32, so bitwise the same chain); G stays unchanged until the last pass, which does
// the read side, stores G and restores the bank row. Then the dots of read entries past the first
// kHeldReads, with M0 decoded again from the snapshot row. Out of line, so that the common paths
// do not hold this path's state in their registers.
template <SnapshotQuant kMode, bool kVec, typename E, typename Gt>
__device__ __noinline__ void write_long_group(const WriteRows<E, Gt> group_rows, const WriteEntry mine,
                                              const WriteEntrySource src, const std::uint64_t* group_keys, int size,
                                              const ReadGroup reads, int hd, int lane) {
  WriteRows<E, Gt> rows = group_rows;
  rows.snapshot.mode = kMode;  // known here too: load_snapshot_piece keeps one decoder
  const int last = size - 1;
  const WriteEntry entry = group_entry(mine, last, src, group_keys);
  if (size == 1) {
    // Only reached with two or more reads.
    write_pass<true, true, false, Reads::many, kMode, kVec>(rows, entry, hd, lane, 0, reads);
  } else {
    write_pass<true, false, true, Reads::none, kMode, kVec>(rows, group_entry(mine, 0, src, group_keys), hd, lane,
                                                            0, reads);
    for (int b = 1; b < last; ++b) {
      write_pass<false, false, true, Reads::none, kMode, kVec>(rows, group_entry(mine, b, src, group_keys), hd, lane,
                                                               b, reads);
    }
    if (reads.size == 0) {
      write_pass<false, true, false, Reads::none, kMode, kVec>(rows, entry, hd, lane, last, reads);
    } else if (reads.size == 1) {
      write_pass<false, true, false, Reads::one, kMode, kVec>(rows, entry, hd, lane, last, reads);
    } else {
      write_pass<false, true, false, Reads::many, kMode, kVec>(rows, entry, hd, lane, last, reads);
    }
  }
  read_dot_passes<kVec>(
      reads, [&](int c0, float(&m0)[kLaneCols]) { load_snapshot_piece<kVec, E>(rows.snapshot, 0, c0, hd, m0); }, hd,
      lane);
}

}  // namespace sdm::cuda::slot_side

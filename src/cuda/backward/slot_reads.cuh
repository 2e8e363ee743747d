// slot_reads.cuh - the read side of the backward's slot kernel (slots.cu, slot_split.cuh): a
// chunk's read entries of one slot, as the slot's warps load and walk them.
//   ReadGroup   the group at a sorted read position: lane l < min(size, 32) holds entry l (row of
//               its token's dy, q_w, entry index); group_read_row gives entry j's row and q_w to
//               every lane (a shuffle, or memory past 32)
//   add_read    per column piece of entry j: dq_w_j += dy_i . M0 (the lane's fmaf chain over its
//               columns; a warp_sum per column step follows), and the read sum acc += q_w dy_i
// Numerics: each dot step partial and the read sum are fmaf chains in ascending columns / group
// order; the caller rounds base + sum once.
#pragma once

#include <cstdint>

#include "cuda/backward/backward.hpp"
#include "cuda/backward/bank_at_chunk.cuh"
#include "cuda/common/rows.cuh"

namespace sdm::cuda::slot_side {

constexpr unsigned kAllLanes = 0xffffffffu;

// The key at sorted position q + lane of a chunk's `count` sorted keys (0 past the end). For the
// group starting at q (the slot tasks give its size), lane l < size holds its entry l's key: a
// chunk's keys are sorted by slot, so a group's positions are contiguous.
__device__ __forceinline__ std::uint64_t lane_key(const std::uint64_t* keys, int count, int q, int lane) {
  return q + lane < count ? keys[q + lane] : 0;
}

// Where a chunk's read entries find their data (entry0 = n*C*R, the chunk's first read entry).
struct ReadEntrySource {
  const float* q_w;
  KeyLayout keys;
  std::int64_t hd, R, entry0;
};

// A read entry's data: row = i * hd (its token's dy step row), q_w, and its entry index (for dq_w).
struct ReadEntry {
  std::int64_t row = 0, index = 0;
  float q_w = 0.0f;
};

__device__ __forceinline__ ReadEntry read_entry(const ReadEntrySource& src, std::uint64_t key) {
  const std::int64_t i = src.keys.token(key);
  ReadEntry entry;
  entry.row = i * src.hd;
  entry.index = src.entry0 + i * src.R + src.keys.lane(key);
  entry.q_w = src.q_w[entry.index];
  return entry;
}

// A slot's read group as its warps see it (size == 0: the chunk does not read the slot).
struct ReadGroup {
  const float* dy = nullptr;            // the step's dy rows [C, hd] of chunk n
  const std::uint64_t* keys = nullptr;  // the group's sorted read keys
  ReadEntrySource src{};
  DotPlanes dq_w;                       // per read entry (entry order), per column step
  ReadEntry mine;                       // lane l < size: entry l
  int size = 0;
};

// The read group of `size` entries at sorted read position q: lane l < size loads entry l's data
// (key: lane_key).
__device__ __forceinline__ ReadGroup load_read_group(int size, std::uint64_t key, const std::uint64_t* keys, int q,
                                                     const ReadEntrySource& src, const float* dy,
                                                     const DotPlanes& dq_w, int lane) {
  ReadGroup reads;
  reads.dy = dy;
  reads.keys = keys + q;
  reads.src = src;
  reads.dq_w = dq_w;
  reads.size = size;
  if (lane < size) reads.mine = read_entry(src, key);
  return reads;
}

// Entry j's dy row offset and q_w in every lane (called by all lanes with the same j): what a walk
// needs before the entry's dot is summed (its index only for the store).
struct ReadRow {
  std::int64_t row = 0;
  float q_w = 0.0f;
};
__device__ __forceinline__ ReadRow group_read_row(const ReadGroup& reads, int j) {
  if (j >= 32) {
    const ReadEntry entry = read_entry(reads.src, reads.keys[j]);
    return ReadRow{entry.row, entry.q_w};
  }
  return ReadRow{__shfl_sync(kAllLanes, reads.mine.row, j), __shfl_sync(kAllLanes, reads.mine.q_w, j)};
}

// One read entry's terms of one column piece (y: the piece of dy_i): dot += y . M0 over the
// `valid` real columns, and acc += q_w y.
__device__ __forceinline__ void add_read(float q_w, const float (&y)[kLaneCols], int valid,
                                         const float (&m0)[kLaneCols], float& dot, float (&acc)[kLaneCols]) {
#pragma unroll
  for (int k = 0; k < kLaneCols; ++k) {
    if (k < valid) dot = fmaf(y[k], m0[k], dot);
    acc[k] = fmaf(q_w, y[k], acc[k]);
  }
}

// The row walk of a read group of one entry whose slot the chunk does not write (M0 = the row at
// the chunk's start, bank_at_chunk.cuh; base = G; nearly every read-only group): per column step s,
// dq_w's step partial (warp_sum, lane 0 stores plane s) and G <- rnd(G + q_w dy) (the read sum from
// +0, then base + sum). Every lane runs every step (the warp_sum needs all lanes); lanes past hd
// load and store nothing. Lane pointers advance by a column step; `rest` = the columns from the
// piece on (the piece is column 0 of a row of `rest` columns).
template <bool kVec, typename E, SnapshotQuant kMode, typename Gt>
__device__ __forceinline__ void read_single(Gt* grad, const BankRow<E, kMode>& bank, const ReadGroup& reads, int hd,
                                            int steps, int lane) {
  const int first = lane * kLaneCols;
  const float* y_at = reads.dy + reads.mine.row + first;
  Gt* grad_at = grad + first;
  for (int s = 0, c0 = first; s < steps; ++s, c0 += kWarpCols) {
    float dot = 0.0f;
    if (c0 < hd) {
      const int rest = hd - c0;
      float m0[kLaneCols], y[kLaneCols], base[kLaneCols], sum[kLaneCols] = {};
      const int valid = bank.template load<kVec>(c0, hd, m0);
      load_piece<kVec>(y_at, 0, rest, y);
      load_piece<kVec>(grad_at, 0, rest, base);
      add_read(reads.mine.q_w, y, valid, m0, dot, sum);
#pragma unroll
      for (int k = 0; k < kLaneCols; ++k) sum[k] = base[k] + sum[k];
      store_piece_cvt<kVec>(grad_at, 0, rest, sum);
    }
    dot = warp_sum(dot);
    if (lane == 0) reads.dq_w.at(s, reads.mine.index) = dot;
    y_at += kWarpCols, grad_at += kWarpCols;
  }
}

}  // namespace sdm::cuda::slot_side

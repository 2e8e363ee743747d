// slot_reads.cuh - the read side of the backward's slot kernel (slots.cu): a chunk's read entries
// of one slot, as the slot's worker warp loads, shares and walks them.
//   ReadGroup      the group at a sorted read position: lane l < size holds entry l (row of its
//                  token's dy, q_w, entry index); the first kHeldReads shared to all lanes
//   read passes    per column piece: dq_w_r += dy_i . M0 (per-lane fmaf chains, warp_sum after),
//                  and the read sum acc += q_w dy_i in group order (add_read_piece)
// Numerics: every dot and the read sum are fmaf chains in ascending columns / group order; the
// caller rounds base + sum once.
#pragma once

#include <cstdint>

#include "cuda/backward/backward.hpp"
#include "cuda/common/rows.cuh"

namespace sdm::cuda::slot_side {

constexpr int kHeldReads = 2;  // read entries whose dots one pass keeps in registers
constexpr unsigned kAllLanes = 0xffffffffu;

// The read side a pass computes: none, a single read entry, or any number of them.
enum class Reads { none, one, many };

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

// Up to kHeldReads read entries (rows and weights), in every lane's registers (entries past `count`:
// row 0, a valid address).
struct ReadBatch {
  std::int64_t row[kHeldReads] = {};
  float q_w[kHeldReads] = {};
  int count = 0;
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

// A slot's read group as its worker sees it (size == 0: the chunk does not read the slot).
struct ReadGroup {
  const float* dy = nullptr;              // the step's dy rows [C, hd] of chunk n
  const std::uint64_t* keys = nullptr;    // the group's sorted read keys
  ReadEntrySource src{};
  float* dq_w = nullptr;                  // per read entry (entry order)
  ReadEntry mine;                         // lane l < size: entry l
  ReadBatch batch;                        // the first kHeldReads entries
  int size = 0;
};

// The read group of `size` entries at sorted read position q: lane l < size loads entry l's data
// (key: lane_key); the caller shares the batch (share_reads) once other independent loads are issued.
__device__ __forceinline__ ReadGroup load_read_group(int size, std::uint64_t key, const std::uint64_t* keys, int q,
                                                     const ReadEntrySource& src, const float* dy, float* dq_w,
                                                     int lane) {
  ReadGroup reads;
  reads.dy = dy;
  reads.keys = keys + q;
  reads.src = src;
  reads.dq_w = dq_w;
  reads.size = size;
  if (lane < size) reads.mine = read_entry(src, key);
  return reads;
}

// Entry j's terms of one column piece (y: the piece of dy_i): dq_j += y . M0 over the `valid` real
// columns, and acc += q_w y.
template <int j, int kDots>
__device__ __forceinline__ void add_read_entry(const ReadBatch& batch, const float (&y)[kLaneCols], int valid,
                                               const float (&m0)[kLaneCols], float (&dots)[kDots],
                                               float (&acc)[kLaneCols]) {
#pragma unroll
  for (int k = 0; k < kLaneCols; ++k) {
    if (k < valid) dots[j] = fmaf(y[k], m0[k], dots[j]);
    acc[k] = fmaf(batch.q_w[j], y[k], acc[k]);
  }
}

// Entries 1 .. count - 1 of the batch on one column piece.
template <bool kVec, int j = 1>
__device__ __forceinline__ void add_later_reads(const ReadBatch& batch, const float* dy, int c0, int hd, int valid,
                                                const float (&m0)[kLaneCols], float (&dots)[kHeldReads],
                                                float (&acc)[kLaneCols]) {
  if constexpr (j < kHeldReads) {
    if (j < batch.count) {
      float y[kLaneCols];
      load_piece<kVec>(dy + batch.row[j], c0, hd, y);
      add_read_entry<j>(batch, y, valid, m0, dots, acc);
      add_later_reads<kVec, j + 1>(batch, dy, c0, hd, valid, m0, dots, acc);
    }
  }
}

// The read side of one column piece of a main pass (y: the first entry's dy piece): the held
// entries' dots, and the read sum of every entry into acc (from +0, in group order; entries past
// kHeldReads from memory).
template <Reads kReads, bool kVec, int kDots>
__device__ __forceinline__ void add_read_piece(const ReadGroup& reads, const float (&y)[kLaneCols], int c0, int hd,
                                               int valid, const float (&m0)[kLaneCols], float (&dots)[kDots],
                                               float (&acc)[kLaneCols]) {
  add_read_entry<0>(reads.batch, y, valid, m0, dots, acc);
  if constexpr (kReads == Reads::many) {
    add_later_reads<kVec>(reads.batch, reads.dy, c0, hd, valid, m0, dots, acc);
    for (int j = kHeldReads; j < reads.size; ++j) {
      const ReadEntry entry = read_entry(reads.src, reads.keys[j]);
      float later[kLaneCols];
      load_piece<kVec>(reads.dy + entry.row, c0, hd, later);
#pragma unroll
      for (int k = 0; k < kLaneCols; ++k) acc[k] = fmaf(entry.q_w, later[k], acc[k]);
    }
  }
}

// The dots a main pass keeps: one for a single read, else kHeldReads.
template <Reads kReads>
constexpr int kReadDots = kReads == Reads::many ? kHeldReads : 1;

// Lane j < count stores the batch's dq_w j at its entry index (the lane's own entry).
template <int kDots>
__device__ __forceinline__ void store_read_dots(const ReadGroup& reads, const float (&dots)[kDots], int count,
                                                const ReadEntry& mine, int lane) {
  float dq_w = 0.0f;
#pragma unroll
  for (int j = 0; j < kDots; ++j) {
    if (lane == j) dq_w = dots[j];
  }
  if (lane < count) reads.dq_w[mine.index] = dq_w;
}

// Groups longer than kHeldReads: dq_w of the entries past the first kHeldReads, kHeldReads of them
// a pass. load_m0(c0, m0) loads M0's piece at column c0.
template <bool kVec, typename LoadM0>
__device__ __forceinline__ void read_dot_passes(const ReadGroup& reads, LoadM0 load_m0, int hd, int lane) {
  for (int b = kHeldReads; b < reads.size; b += kHeldReads) {
    const int take = min(kHeldReads, reads.size - b);
    const ReadEntry other = lane < take ? read_entry(reads.src, reads.keys[b + lane]) : ReadEntry{};
    const ReadBatch batch = share_reads(other, take);
    float dots[kHeldReads] = {};
    for (int c0 = lane * kLaneCols; c0 < hd; c0 += kWarpCols) {
      float m0[kLaneCols], y[kLaneCols], unused[kLaneCols] = {};
      load_m0(c0, m0);
      const int valid = load_piece<kVec>(reads.dy + batch.row[0], c0, hd, y);
      add_read_entry<0>(batch, y, valid, m0, dots, unused);
      add_later_reads<kVec>(batch, reads.dy, c0, hd, valid, m0, dots, unused);
    }
    warp_sums(dots);
    store_read_dots(reads, dots, take, other, lane);
  }
}

}  // namespace sdm::cuda::slot_side

// slots.cu - the slot side of one reverse step of the CUDA backward (docs/spec.md §4: the
// G update of written and read slots, the rows restored from the snapshot), for the chunks
// n = ti*P + p of step ti, p in [geo.p_first, geo.p_first + geo.p_count). Runs after the token
// side (it reads dU and dy of the step). One kernel, slot_groups_backward; for each slot s that
// chunk n writes or reads:
//
//   write group of s (entries e in token order, token i_e, pre = the snapshot row = M0[s],
//   decoded by load_snapshot_piece):
//       dlambda = exp(Lambda) <G[s], pre>;  per e: dc_e = <delta_i, G[s]>, dk_eff_e = <-beta_i dU_i, pre>
//       G'[s] = exp(Lambda) G[s] + sum_e k_eff_e (-beta_i dU_i)     (f32, entries in group order)
//       bank[s] <- pre (restore_snapshot_piece: a bit copy in mode "none")
//   read group of s (reads r in (token, lane) order; M0[s] = pre if s is written, else bank[s]):
//       per r: dq_w = <dy_i, M0[s]>
//   G[s] <- rnd( base + (sum_r q_w dy_i) ), base = G'[s] if s is written in the chunk, else G[s];
//       the read sum starts at +0 and runs in group order (no reads: G[s] <- rnd(G'[s])).
//
// Parallel decomposition: one warp per sorted position of chunk n (its C*W write positions, then
// its C*R read positions); the warp at a write group's first position is the only worker of its
// slot, write side and read side, and the warp at a read group's first position works only when
// the chunk does not write the slot (details above slot_groups_backward). Every bank / G / scratch
// row and every output element has one writer.
// Numerics: every dot is a per-lane fmaf chain over the lane's columns in ascending order, then
// warp_sum's butterfly (common/rows.cuh); G' and the read sum are fmaf chains in entry / group
// order; base + sum is rounded once to G's dtype. Nothing depends on the access path or SM count.
#include "cuda/backward/backward.hpp"
#include "cuda/common/rows.cuh"
#include "cuda/common/cuda_check.hpp"
#include "cuda/common/dependent_launch.cuh"
#include "cuda/common/dispatch.hpp"
#include "cuda/common/launch_bounds.cuh"
#include "cuda/common/prefetch.cuh"

namespace sdm::cuda {
namespace {

constexpr int kWarps = 8;
constexpr int kMinBlocks = 3;  // at most 80 registers a thread: 24 warps an SM
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

// ---- read entries -------------------------------------------------------------------------------

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

// ---- write entries ------------------------------------------------------------------------------

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

// ---- the two kinds of workers -------------------------------------------------------------------

// A task's single read entry (read group size 1), from the task: no load.
__device__ __forceinline__ ReadGroup single_read(const SlotTask& task, const float* dy, float* dq_w, std::int64_t hd,
                                                 std::int64_t R, std::int64_t entry0) {
  const std::int64_t entry = task.tokens >> 16;
  ReadGroup reads;
  reads.dy = dy;
  reads.dq_w = dq_w;
  reads.size = 1;
  reads.mine.row = entry / R * hd;
  reads.mine.index = entry0 + entry;
  reads.mine.q_w = task.read_q_w;
  reads.batch.row[0] = reads.mine.row;
  reads.batch.q_w[0] = reads.mine.q_w;
  reads.batch.count = 1;
  return reads;
}

__device__ __forceinline__ int write_size_of(const SlotTask& task) { return task.sizes & ((1 << kReadSizeShift) - 1); }
__device__ __forceinline__ int read_size_of(const SlotTask& task) { return task.sizes >> kReadSizeShift; }

// The warp at sorted write position q of chunk n (stream p): the slot's only worker when q starts a
// write group. A group of one entry read at most once (nearly all) takes everything from its task;
// other groups load their keys and entries and run out of line (write_long_group).
template <typename E, typename Gt, bool kVec, SnapshotQuant kMode>
__device__ __forceinline__ void write_group_worker(const Geometry& geo, const Inputs& in, const Phase1Buffers& p1,
                                                   const BackwardBuffers& bb, std::int64_t ti, std::int64_t p,
                                                   int q, int lane) {
  const int CW = static_cast<int>(geo.C * geo.W), CR = static_cast<int>(geo.C * geo.R);
  const std::int64_t n = ti * geo.P + p;
  const int hd = static_cast<int>(geo.hd);
  const std::int64_t e = n * CW + q;  // the group's first sorted position = its snapshot row
  const SlotTask task = bb.slot_tasks[n * (CW + CR) + q];
  if (task.role == kSlotIdle) return;
  const std::int64_t slot = p * geo.sps + task.local;
  prefetch_row_l2(static_cast<const unsigned char*>(bb.grad_rows) + slot * geo.hd * sizeof(Gt),
                  geo.hd * static_cast<std::int64_t>(sizeof(Gt)), lane);
  prefetch_row_l2(static_cast<const unsigned char*>(bb.snapshot.payload) + e * bb.snapshot.row_bytes,
                  bb.snapshot.row_bytes, lane);

  WriteRows<E, Gt> rows;
  rows.grad = static_cast<Gt*>(bb.grad_rows) + slot * geo.hd;
  rows.bank = static_cast<E*>(bb.bank) + slot * geo.hd;
  rows.stash = bb.stash + (p * CW + q) * geo.hd;
  rows.delta = bb.delta + n * geo.C * geo.hd;
  rows.du = bb.du + n * geo.C * geo.hd;
  rows.snapshot = bb.snapshot;
  rows.snapshot.mode = kMode;
  rows.snapshot.payload = static_cast<unsigned char*>(bb.snapshot.payload) + e * bb.snapshot.row_bytes;
  if constexpr (kMode == SnapshotQuant::fp8 || kMode == SnapshotQuant::int4) rows.snapshot.scales += e;
  rows.dlambda = bb.dlambda + e;
  rows.dc = bb.dc + e;
  rows.dk_eff = bb.dk_eff + e;
  rows.decay = task.decay;
  const float* dy = bb.dy + n * geo.C * geo.hd;

  const int read_size = read_size_of(task);
  if (write_size_of(task) == 1 && read_size <= 1) {
    const WriteEntry entry{(task.tokens & 0xffffu) * geo.hd, task.write_scale, task.write_k_eff};
    if (read_size == 1) {
      write_pass<true, true, false, Reads::one, kMode, kVec>(rows, entry, hd, lane, 0,
                                                             single_read(task, dy, bb.dq_w, geo.hd, geo.R, n * CR));
    } else {
      write_pass<true, true, false, Reads::none, kMode, kVec>(rows, entry, hd, lane, 0, ReadGroup{});
    }
    return;
  }

  // Lane l < size loads entry l's data while the warp loads the slot's read keys.
  const std::uint64_t* keys = p1.keys + n * CW;
  const int size = write_size_of(task);
  const WriteEntrySource src{in.beta, in.beta_dtype, p1.k_eff + n * CW, geo.keys, geo.hd, geo.W,
                             p * geo.T + ti * geo.C};
  const WriteEntry mine = lane < size ? write_entry(src, lane_key(keys, CW, q, lane)) : WriteEntry{};
  ReadGroup reads;
  if (task.role >= 0) {
    const std::uint64_t* read_keys = bb.read_keys + n * CR;
    const ReadEntrySource read_src{p1.q_w, bb.read_layout, geo.hd, geo.R, n * CR};
    reads = load_read_group(read_size, lane_key(read_keys, CR, task.role, lane), read_keys, task.role, read_src, dy,
                            bb.dq_w, lane);
  }
  reads.batch = share_reads(reads.mine, min(kHeldReads, reads.size));
  write_long_group<kMode, kVec>(rows, mine, src, keys + q, size, reads, hd, lane);
}

// The read main pass of a slot the chunk does not write (bank row = M0, base = G): the first
// kHeldReads entries' dq_w and G <- rnd(G + read sum). Lane pointers advance by a column step;
// `rest` = the columns from the piece on (the piece is column 0 of a row of `rest` columns).
template <Reads kReads, bool kVec, typename E, typename Gt>
__device__ __forceinline__ void read_main_pass(Gt* grad, const E* bank, const ReadGroup& reads, int hd, int lane) {
  const int first = lane * kLaneCols;
  const E* m0_at = bank + first;
  const float* y_at = reads.dy + reads.batch.row[0] + first;
  Gt* grad_at = grad + first;
  float dots[kReadDots<kReads>] = {};
  for (int c0 = first; c0 < hd; c0 += kWarpCols) {
    const int rest = hd - c0;
    float m0[kLaneCols], y[kLaneCols], base[kLaneCols], sum[kLaneCols] = {};
    const int valid = load_piece<kVec>(m0_at, 0, rest, m0);
    load_piece<kVec>(y_at, 0, rest, y);
    load_piece<kVec>(grad_at, 0, rest, base);
    add_read_piece<kReads, kVec>(reads, y, c0, hd, valid, m0, dots, sum);
#pragma unroll
    for (int k = 0; k < kLaneCols; ++k) sum[k] = base[k] + sum[k];
    store_piece_cvt<kVec>(grad_at, 0, rest, sum);
    m0_at += kWarpCols, y_at += kWarpCols, grad_at += kWarpCols;
  }
  warp_sums(dots);
  store_read_dots(reads, dots, reads.batch.count, reads.mine, lane);
}

// The warp at sorted read position q of chunk n (stream p): the slot's only worker when q starts a
// read group and the chunk does not write the slot (else the write group's worker does the reads).
// A group of one entry (nearly all) takes it from its task; others load their keys and entries.
template <typename E, typename Gt, bool kVec>
__device__ __forceinline__ void read_group_worker(const Geometry& geo, const Phase1Buffers& p1,
                                                  const BackwardBuffers& bb, std::int64_t ti, std::int64_t p, int q,
                                                  int lane) {
  const int CW = static_cast<int>(geo.C * geo.W), CR = static_cast<int>(geo.C * geo.R);
  const std::int64_t n = ti * geo.P + p;
  const int hd = static_cast<int>(geo.hd);
  const SlotTask task = bb.slot_tasks[n * (CW + CR) + CW + q];
  if (task.role == kSlotIdle) return;  // not a group start, or the slot's write worker does the reads
  const std::int64_t slot = p * geo.sps + task.local;
  const std::int64_t row_bytes = geo.hd * static_cast<std::int64_t>(sizeof(E));
  prefetch_row_l2(static_cast<const unsigned char*>(bb.grad_rows) + slot * geo.hd * sizeof(Gt),
                  geo.hd * static_cast<std::int64_t>(sizeof(Gt)), lane);
  prefetch_row_l2(static_cast<const unsigned char*>(bb.bank) + slot * row_bytes, row_bytes, lane);
  Gt* grad = static_cast<Gt*>(bb.grad_rows) + slot * geo.hd;
  const E* bank = static_cast<const E*>(bb.bank) + slot * geo.hd;
  const float* dy = bb.dy + n * geo.C * geo.hd;
  if (read_size_of(task) == 1) {
    read_main_pass<Reads::one, kVec>(grad, bank, single_read(task, dy, bb.dq_w, geo.hd, geo.R, n * CR), hd, lane);
    return;
  }

  const std::uint64_t* keys = bb.read_keys + n * CR;
  const ReadEntrySource src{p1.q_w, bb.read_layout, geo.hd, geo.R, n * CR};
  ReadGroup reads = load_read_group(read_size_of(task), lane_key(keys, CR, q, lane), keys, q, src, dy, bb.dq_w, lane);
  reads.batch = share_reads(reads.mine, min(kHeldReads, reads.size));
  read_dot_passes<kVec>(
      reads, [&](int c0, float(&m0)[kLaneCols]) { load_piece<kVec>(bank, c0, hd, m0); }, hd, lane);
  read_main_pass<Reads::many, kVec>(grad, bank, reads, hd, lane);
}

// slot_groups_backward in detail. Grid (P, (C*W + C*R) / 8), one warp per sorted position of chunk n:
// first the C*W sorted write positions, then the C*R sorted read positions. The warp at a write
// group's first position is the only worker of its slot: the write side, and, when the chunk
// also reads the slot, the read side in the same walk over the row, with M0 = the decoded pre it
// already holds (bitwise the values the restored bank row holds: restore stores exactly them, or
// in mode "none" the saved bits, which decode to the same f32), so G' never leaves registers. The
// warp at a read group's first position works only when the chunk does not write the slot (the
// bank row is M0 there, base = G). Each warp first loads its task (bb.slot_tasks, found for
// every chunk before the loop by backward/slot_tasks.cu: idle, or the slot, the group sizes, where
// a written slot's reads start and, for a group of one write entry read at most once or of one
// read entry, the entries' scalars); idle warps exit there, and no warp searches keys inside the
// loop. A worker asks L2 for its G row and its snapshot row (write) or bank row (read)
// (prefetch_row_l2); the common groups then start their row pass at once, the others first load
// their keys (lane_key: lane l loads the key at position q + l, so the group's first 32 entries'
// keys come from one load per lane; the task holds the group's size) and entries' scalars, with the
// row fetches in flight. Lane l owns the 8-column pieces c0 = 256 s + 8 l (common/rows.cuh). A
// worker walks the row's columns once per pass; every dot's lane partial stays in a register next
// to the row accumulators, and the butterflies of a pass's dots run at its end (warp_sums).
//   write: one pass per entry (nearly every group has one: slots_per_stream is large). Per piece it
//     loads G, the entry's delta and dU pieces, the snapshot piece and, when the slot is read, the
//     first read entry's dy piece once (all issued before any is used) and updates dlambda (first
//     pass), dc, dk_eff, G' and the read side's dots and sum. A group of two or more entries
//     carries G' from pass to pass in its own scratch row (the stash, f32: bitwise the same chain);
//     G stays unchanged until the last pass, which does the read side, stores G and restores the
//     bank row. In a long group lane l < size loads entry l's scalars (token row, -beta, k_eff)
//     once, next to the read-key load; a pass gets them by shuffles. Read entries likewise (row, q_w, index).
//   read: the main pass (the write group's last pass for a written slot) keeps the dots of the
//     first kHeldReads entries and reads the further entries' data from memory for the row sum;
//     their dots take one more pass per kHeldReads of them (M0 from the bank row, or decoded again
//     from the snapshot row for a written slot).
// Instruction economy of the column loops (they are instruction / latency bound): the snapshot
// mode is a template parameter (the host knows it), so a loop holds one decoder and no mode
// switch; each pass is compiled for its place in the group (first / last / G' to the scratch row
// or G / no, one or more reads), so the loop has no run-time role tests; row pointers are formed
// once per pass and then advanced by a column step (no 64-bit index products per piece); in mode
// "none" the snapshot piece's bits from its one load are stored back into the bank (the bits
// copy_piece would copy); a bf16 G piece is rounded by store_piece_cvt (the hardware pair
// conversion, bitwise the integer rounding for every non-NaN value; a piece with a NaN takes
// store_piece). Write groups of two or more entries and single-entry write groups whose slot the
// chunk reads more than once (a few percent) run out of line (write_long_group), so the common
// paths do not keep their state in registers or spill it.
// At most 80 registers a thread (24 resident warps an SM); no spills in the hot column loops.
// Rows are disjoint between slots (streams own disjoint rows, a slot forms at most one write and
// one read group per chunk, and one warp works on both), so every bank / G / scratch row and every
// output element has one writer.
//
// Numerics (the warp dot order of common/rows.cuh): every dot's lane partial is an fmaf chain
// over the lane's columns in ascending order (dlambda: fmaf(G, pre), dc: fmaf(delta, G), dk_eff:
// fmaf(scale * dU, pre) with scale * dU rounded first, dq_w: fmaf(dy, M0)), then warp_sum's
// butterfly; dlambda = exp(Lambda) * <G, pre>. Row sums per column: G' = fmaf chain in entry
// order starting from exp(Lambda) * G; the read sum = fmaf chain in group order starting at +0;
// then base + sum, rounded once to G's dtype. Nothing depends on the access path or the SM count.
// Grid (p_count, ceil((C*W + C*R) / kWarps)): warp q < C*W takes sorted write position q, the others
// sorted read position q - C*W.
template <typename E, typename Gt, bool kVec, SnapshotQuant kMode>
__global__ void __launch_bounds__(kWarps * 32, min_blocks(kWarps * 32, kMinBlocks))
    slot_groups_backward(Geometry geo, Inputs in, Phase1Buffers p1, BackwardBuffers bb, std::int64_t ti) {
  wait_for_predecessor();
  const int CW = static_cast<int>(geo.C * geo.W), CR = static_cast<int>(geo.C * geo.R);
  const int q = static_cast<int>(blockIdx.y) * kWarps + static_cast<int>(threadIdx.x) / 32;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const std::int64_t p = geo.p_first + blockIdx.x;
  if (q < CW) write_group_worker<E, Gt, kVec, kMode>(geo, in, p1, bb, ti, p, q, lane);
  else if (q < CW + CR) read_group_worker<E, Gt, kVec>(geo, p1, bb, ti, p, q - CW, lane);
}

template <typename E, typename Gt, bool kVec, SnapshotQuant kMode>
void launch(const Geometry& geo, const Inputs& in, const Phase1Buffers& p1, const BackwardBuffers& bb,
            std::int64_t ti, cudaStream_t stream) {
  const std::int64_t warps = geo.C * geo.W + geo.C * geo.R;
  const dim3 grid(static_cast<unsigned>(geo.p_count), static_cast<unsigned>((warps + kWarps - 1) / kWarps));
  launch_dependent(slot_groups_backward<E, Gt, kVec, kMode>, grid, dim3(kWarps * 32), 0, stream,
                   "slot_groups_backward", geo, in, p1, bb, ti);
}

}  // namespace

// The snapshot mode (known on the host) becomes a template parameter: no mode switch in the loop.
void launch_slot_side(const Geometry& geo, const Inputs& in, const Phase1Buffers& p1, const BackwardBuffers& bb,
                      std::int64_t ti, cudaStream_t stream) {
  dispatch(
      [&](auto row, auto grad_row, auto vec, auto mode) {
        launch<typename decltype(row)::type, typename decltype(grad_row)::type, decltype(vec)::value == 8,
               decltype(mode)::value>(geo, in, p1, bb, ti, stream);
      },
      BankRows{bb.bf16_bank, bb.bf16_grad_rows}, VecWidth{bb.vec8}, Snapshot{bb.snapshot.mode});
}

}  // namespace sdm::cuda

// slots_staged.cu - the slot side of one reverse step of the CUDA backward on the vector path
// (16-byte aligned rows; GWR takes dc) when hd is a multiple of 256 (every lane owns 8 columns of
// every column step, so no lane idles and no piece is partial), as a walk with every per-member
// operand on chip: the same math, the same bits as slots.cu (docs/spec.md §4; per slot s of chunk
// n: the write group's dlambda / dk_eff step partials and G', the read group's dq_w step partials
// and G <- rnd(base + sum); the bank is only read, bank_at_chunk.cuh).
//
// Kernel staged_slot_walk. Grid (streams p, column steps s, shares j): CTA (p, s, j)
//   1. stages chunk n's dU and dy rows [C, 256 columns of step s] (f32) in shared memory (kStaged
//      2); where both do not fit (C = 128: 256 KiB), dU's alone, and a read member loads its dy
//      piece from global memory (kStaged 1: the same values, so the same bits);
//   2. walks the groups whose first sorted position falls in its share j of the chunk's C*W + C*R
//      positions (cut at about equal work, walk_cuts.cu, or at equal counts): its warps take
//      batches of kBatch positions: warp w's first is batch w, opened while the token rows' copies
//      are in flight, the later ones from a shared counter (the next one claimed as the current
//      batch's last worker starts, and its tasks, backward/slot_tasks.cu, loaded while that worker
//      walks); each worker's own lane works out where its G piece and its snapshot (write group) or M0
//      (read-only group, row source bank_at_chunk.cuh) piece of step s are, and a write group's
//      lane names its snapshot row as the slot's row source; the pieces come through the warp's
//      ring: cp.async copies kRing workers ahead, each lane copying exactly the bytes it loads (its
//      8 columns), so a slot needs the lane's own cp.async.wait_group and no barrier;
//   3. per group, one pass over its members: a write member (token i) loads dU_i's piece from
//      shared memory, G' = fmaf(k_eff, -beta dU, G') and its dk_eff partial; a read member dy_i's
//      piece, sum = fmaf(q_w, dy, sum) and its dq_w partial. A group of at most one write and one
//      read entry takes them from its task and runs as one straight block; longer groups take
//      their members' entries 32 at a time from the members' own tasks (one 16-byte load a
//      member, backward.hpp SlotTask) and walk them two at a time. Each member's lane partial
//      goes to the warp's transpose rows; once kFlush rows are taken the lanes sum one row each
//      in warp_sum's butterfly order (flush_dots) and store it at the dot's plane s.
//      G <- rnd(acc + sum) (written) or rnd(G + sum) (read only), one rounding.
// Each (group, column step) has one owner CTA and one warp, so every G piece and every
// dot-plane element has one writer; the shared counter only decides which warp that is.
// Numerics: per column step the fmaf chains of slots.cu's walks (the lane owns columns
// 256 s + 8 l .. + 7, common/rows.cuh; group order; the read sum from +0; one rounding), and each
// dot's 32 lane partials summed in warp_sum's tree, so every output is bitwise the per-position
// kernel's (tests/gpu/test_cuda_slot_split.cpp compares them).
// Shared memory: kStaged x C x 256 f32 of token rows (C = 64, both: 128 KiB; C = 128, dU only:
// 128 KiB) and per warp a ring of kRing (G, M0) pieces, kFlush transpose rows of 33 floats (32
// lane partials, lane l's at column l, and a pad: writes and reads hit 32 banks) and kFlush 4-byte
// destination codes (a dot's plane and index): one CTA of kStageWarps warps an SM.
#include <cstdint>

#include "core/env_knobs.hpp"
#include "cuda/backward/backward.hpp"
#include "cuda/backward/bank_at_chunk.cuh"
#include "cuda/backward/slot_reads.cuh"
#include "cuda/backward/slot_split.hpp"
#include "cuda/backward/slot_task_data.cuh"
#include "cuda/backward/slot_writes.cuh"
#include "cuda/backward/slots_staged.hpp"
#include "cuda/common/async_copy.cuh"
#include "cuda/common/cuda_check.hpp"
#include "cuda/common/dependent_launch.cuh"
#include "cuda/common/device_limits.hpp"
#include "cuda/common/prefetch.cuh"
#include "cuda/common/rows.cuh"
#include "cuda/saved/group_rows.cuh"

namespace sdm::cuda {
namespace {

using namespace slot_side;

constexpr int kStageWarps = 16;  // 128 registers a thread
constexpr int kStageThreads = kStageWarps * 32;
// Positions a warp takes at a time: its tasks, row sources and L2 requests go out together.
// (Batches of 4 in each share's last 256 positions, which a host model of the claims favoured,
// measured +3 % at readme heavy C 64 and -0.8 % at readme pk: docs/performance.md, "Stop 55".)
constexpr int kBatch = 16;
// Members whose dot partials a warp holds before it sums them (one row of the transpose each).
constexpr int kFlush = 16;

// The ring: slots a warp keeps in flight, and the bytes of one slot (M0's piece, at most
// kWarpCols E values, then G's piece).
template <typename E, typename Gt>
__host__ __device__ constexpr int ring_depth() {
  return sizeof(E) + sizeof(Gt) <= 4 ? 4 : 2;
}
template <typename E, typename Gt>
__host__ __device__ constexpr std::size_t ring_slot_bytes() {
  return kWarpCols * (sizeof(E) + sizeof(Gt));
}

// Floats of one transpose row: a member's 32 lane partials and one pad column, so that the lanes'
// writes of a row and the summing lanes' reads of a column both hit 32 banks.
constexpr int kDotRow = 33;

// A warp's share of shared memory: its ring, its transpose rows and their destination codes.
template <typename E, typename Gt>
__host__ __device__ constexpr std::size_t warp_bytes() {
  return ring_depth<E, Gt>() * ring_slot_bytes<E, Gt>() + kFlush * kDotRow * sizeof(float) +
         kFlush * sizeof(std::uint32_t);
}

// Shared memory of a CTA that stages `staged` token rows a chunk token (2: dU and dy, 1: dU).
template <typename E, typename Gt>
std::size_t stage_bytes(std::int64_t C, int staged) {
  return static_cast<std::size_t>(staged * C * kWarpCols) * sizeof(float) + kStageWarps * warp_bytes<E, Gt>();
}

// ---- 1. copies into shared memory ----------------------------------------------------------------

// Copies rows [C, kWarpCols] at column col0 of chunk rows du (and dy, kStaged 2; stride hd) into
// stage ([kStaged][C][kWarpCols]), 16 bytes a copy, as one commit group of each thread (the caller
// waits for it).
template <int kStaged>
__device__ __forceinline__ void copy_token_rows(float* stage, const float* du, const float* dy, int C, int hd,
                                                int col0) {
  constexpr int kCopies = kWarpCols / 4;  // 16-byte copies a row
  for (int at = static_cast<int>(threadIdx.x); at < kStaged * C * kCopies; at += kStageThreads) {
    const int row = at / kCopies, c = (at % kCopies) * 4;
    const float* from = row < C ? du + static_cast<std::int64_t>(row) * hd : dy + static_cast<std::int64_t>(row - C) * hd;
    copy_async<16>(stage + row * kWarpCols + c, from + col0 + c);
  }
  commit_async_copies();
}

// Bits of one column of a snapshot row in each mode (E, bf16, one byte, or half a byte), which is
// also the bytes of one lane's piece (kLaneCols = 8 columns); and the bytes before column 256 s.
template <typename E, SnapshotQuant kMode>
__host__ __device__ constexpr int snapshot_column_bits() {
  return kMode == SnapshotQuant::none   ? 8 * static_cast<int>(sizeof(E))
         : kMode == SnapshotQuant::bf16 ? 16
         : kMode == SnapshotQuant::fp8  ? 8
                                        : 4;
}
template <typename E, SnapshotQuant kMode>
__device__ __forceinline__ std::int64_t snapshot_step_offset(int s) {
  return static_cast<std::int64_t>(s) * kWarpCols * snapshot_column_bits<E, kMode>() / 8;
}

// What every walk of one CTA shares: chunk n of stream p, column step s, the chunk's tasks, and
// the staged rows as this lane sees them: its columns (8 l .. 8 l + 7) of token 0's rows, so that
// token i's piece is one offset away.
struct StagedStep {
  std::int64_t n, p;
  int CW, CR, s, hd;
  const float* du;  // token 0's dU piece in shared memory (rows [C][kWarpCols])
  const float* dy;  // the same for dy (kStaged 2), or in the chunk's rows in global memory (stride hd)
  const SlotTask* tasks;        // the chunk's C*W + C*R positions
  float inverse_R;              // 1 / R, for read_token
};

// The token i of read entry index = i*R + r (index < 2^16, so (index + 1/2) / R in f32 is within
// 2^-7 / R of its value, which is at least 1 / (2R) from an integer: the truncation is exact).
__device__ __forceinline__ int read_token(const StagedStep& st, int index) {
  return static_cast<int>((static_cast<float>(index) + 0.5f) * st.inverse_R);
}

// Where a worker's pieces of column step s are (the same in every lane; each worker's own lane
// works them out when its batch loads, worker_rows): G's piece, and the pre / M0 piece: the write
// group's snapshot row (group_first[n] + group_ordinal at q, saved/group_rows.cuh; inside the
// buffer whatever the indices) or the read-only group's row source (bank_at_chunk.cuh: a snapshot
// row, or kFinalBankRow for the final bank row). The owner of a write group's step 0
// names its snapshot row as the slot's row source there (earlier chunks find M0 in it; this
// chunk's read-only groups read the sources of other slots only).
template <typename Gt>
struct WorkerRows {
  Gt* grad = nullptr;
  const unsigned char* m0 = nullptr;
  std::int64_t m0_row = kFinalBankRow;
};

template <typename E, typename Gt, SnapshotQuant kMode>
__device__ __forceinline__ WorkerRows<Gt> worker_rows(const Geometry& geo, const BackwardBuffers& bb,
                                                      const StagedStep& st, const SlotTask& task, int q) {
  WorkerRows<Gt> rows;
  const std::int64_t slot = st.p * geo.sps + task.local, c0 = static_cast<std::int64_t>(st.s) * kWarpCols;
  rows.grad = static_cast<Gt*>(bb.grad_rows) + slot * geo.hd + c0;
  if (q < st.CW) {
    rows.m0_row = group_row_read(GroupNumbers{bb.group_first, bb.group_ordinal}, st.n, st.CW, q, bb.snapshot.rows);
    if (st.s == 0) bb.row_source[slot] = rows.m0_row;
  } else {
    rows.m0_row = bb.row_source[slot];
  }
  if (rows.m0_row == kFinalBankRow) {
    rows.m0 = reinterpret_cast<const unsigned char*>(static_cast<const E*>(bb.bank) + slot * geo.hd + c0);
  } else {
    rows.m0 = static_cast<const unsigned char*>(bb.snapshot.payload) + rows.m0_row * bb.snapshot.row_bytes +
              snapshot_step_offset<E, kMode>(st.s);
  }
  return rows;
}

// A worker's rows in every lane (its lane b): G's piece, and M0's (kM0, for the ring's copies); the
// row index only where a quantised mode needs it (the row's scale; bank or snapshot bits).
template <SnapshotQuant kMode, bool kM0, typename Gt>
__device__ __forceinline__ WorkerRows<Gt> rows_from_lane(const WorkerRows<Gt>& rows, int b) {
  WorkerRows<Gt> r;
  r.grad = reinterpret_cast<Gt*>(__shfl_sync(kAllLanes, reinterpret_cast<std::uintptr_t>(rows.grad), b));
  if (kM0) {
    r.m0 = reinterpret_cast<const unsigned char*>(__shfl_sync(kAllLanes, reinterpret_cast<std::uintptr_t>(rows.m0), b));
  }
  if (kMode != SnapshotQuant::none) r.m0_row = __shfl_sync(kAllLanes, rows.m0_row, b);
  return r;
}

// The step pieces a worker's walk loads from memory, copied into `ring_slot` at the offsets they
// have within the step (M0's bytes first, then G's): G's piece, and the pre / M0 piece (E values of
// a bank row; a snapshot row's piece in its mode's bits).
template <typename E, typename Gt, SnapshotQuant kMode>
__device__ __forceinline__ void fetch_to_ring(const WorkerRows<Gt>& rows, unsigned char* ring_slot, int lane) {
  constexpr int kGrad = kLaneCols * static_cast<int>(sizeof(Gt)), kSnapshot = snapshot_column_bits<E, kMode>();
  constexpr int kRow = kLaneCols * static_cast<int>(sizeof(E));
  copy_async<kGrad>(ring_slot + kWarpCols * sizeof(E) + lane * kGrad, rows.grad + lane * kLaneCols);
  if (kMode == SnapshotQuant::none || rows.m0_row == kFinalBankRow) {
    copy_async<kRow>(ring_slot + lane * kRow, rows.m0 + lane * kRow);
  } else {
    copy_async<kSnapshot>(ring_slot + lane * kSnapshot, rows.m0 + lane * kSnapshot);
  }
}

// ---- 2. the dots ---------------------------------------------------------------------------------

// Where a dot's total goes, in 4 bytes: its plane (the dlambda, dk_eff or dq_w plane of step s)
// in the top two bits, its index in the plane's chunk block below them.
enum DotPlane : std::uint32_t { kDlambdaPlane = 0, kDkEffPlane = 1, kDqWPlane = 2 };
constexpr int kDotPlaneShift = 30;
static_assert(kMaxChunk * kMaxWidth <= (std::int64_t{1} << kDotPlaneShift),
              "a dot's index (< C*W or C*R) fits its code");
__device__ __forceinline__ std::uint32_t dot_dest(DotPlane plane, int index) {
  return plane << kDotPlaneShift | static_cast<std::uint32_t>(index);
}

// A warp's pending dot partials: row m of `rows` (kDotRow floats) holds member m's 32 lane
// partials, lane l's at column l; `column` is this lane's column of row 0. `dest[m]` is the code of
// member m's total (dot_dest), decoded against the planes of step s moved to the chunk's first
// entry (dlambda, dk_eff: sorted write position 0; dq_w: read entry 0).
struct PendingDots {
  float* rows;
  float* column;
  std::uint32_t* dest;
  float *dlambda, *dk_eff, *dq_w;
  int count;
};

// Lane m < count sums member m's partials in warp_sum's butterfly order (offset 16 first: the
// partial of lane l plus that of lane l ^ 16, then ^ 8, ^ 4, ^ 2, ^ 1; fp32 addition commutes, so
// the total is bitwise warp_sum's at every lane) and stores it where its code says.
__device__ __forceinline__ void flush_dots(PendingDots& dots, int lane) {
  __syncwarp();
  if (lane < dots.count) {
    const float* row = dots.rows + lane * kDotRow;
    float x[16];
#pragma unroll
    for (int l = 0; l < 16; ++l) x[l] = row[l] + row[l + 16];
#pragma unroll
    for (int l = 0; l < 8; ++l) x[l] = x[l] + x[l + 8];
#pragma unroll
    for (int l = 0; l < 4; ++l) x[l] = x[l] + x[l + 4];
    x[0] = x[0] + x[2];
    x[1] = x[1] + x[3];
    const std::uint32_t code = dots.dest[lane], plane = code >> kDotPlaneShift;
    float* planes = plane == kDlambdaPlane ? dots.dlambda : plane == kDkEffPlane ? dots.dk_eff : dots.dq_w;
    planes[code & ((1u << kDotPlaneShift) - 1)] = x[0] + x[1];
  }
  __syncwarp();
  dots.count = 0;
}

// kCount members' lane partials, their totals to go where codes `dest` say (warp-uniform): a
// flush first when they do not fit. Lane m < kCount stores code m, so one predicated store takes
// them all. When a dot is summed never changes its bits.
template <int kCount>
__device__ __forceinline__ void add_dots(PendingDots& dots, const float (&partial)[kCount],
                                         const std::uint32_t (&dest)[kCount], int lane) {
  static_assert(kCount <= kFlush);
  if (dots.count + kCount > kFlush) flush_dots(dots, lane);
  float* column = dots.column + dots.count * kDotRow;
  std::uint32_t code = dest[0];
#pragma unroll
  for (int m = 0; m < kCount; ++m) {
    column[m * kDotRow] = partial[m];
    if (m > 0 && lane == m) code = dest[m];
  }
  if (lane < kCount) dots.dest[dots.count + lane] = code;
  dots.count += kCount;
}

// ---- 3. the walks --------------------------------------------------------------------------------

// The piece of token i's row at this lane's columns, from token 0's (`piece`, StagedStep): a staged
// row (stride kWarpCols; as an unsigned byte offset the address is one add to the lane's base) or,
// kStaged 1 for dy, the chunk's row in global memory (stride hd).
template <bool kOnChip>
__device__ __forceinline__ void token_piece(const float* piece, int token, int hd, float (&x)[kLaneCols]) {
  if constexpr (kOnChip) {
    const unsigned offset = static_cast<unsigned>(token) * static_cast<unsigned>(kWarpCols * sizeof(float));
    load_piece<true>(reinterpret_cast<const float*>(reinterpret_cast<const unsigned char*>(piece) + offset), 0,
                     kLaneCols, x);
  } else {
    load_piece<true>(piece + static_cast<std::int64_t>(token) * hd, 0, kLaneCols, x);
  }
}

// A write member (token i, scale = -beta_i): acc = fmaf(k_eff, scale dU_i, acc) per column, and
// its dk_eff partial (scale dU_i) . pre, which it returns.
__device__ __forceinline__ float write_member(const StagedStep& st, int token, float scale, float k_eff,
                                              const float (&pre)[kLaneCols], float (&acc)[kLaneCols]) {
  float u[kLaneCols];
  token_piece<true>(st.du, token, st.hd, u);
  float dot = 0.0f;
#pragma unroll
  for (int k = 0; k < kLaneCols; ++k) {
    const float ret = scale * u[k];
    dot = fmaf(ret, pre[k], dot);
    acc[k] = fmaf(k_eff, ret, acc[k]);
  }
  return dot;
}

// A read member (token i): sum = fmaf(q_w, dy_i, sum) per column, and its dq_w partial
// dy_i . m0, which it returns.
template <int kStaged>
__device__ __forceinline__ float read_member(const StagedStep& st, int token, float q_w,
                                             const float (&m0)[kLaneCols], float (&sum)[kLaneCols]) {
  float y[kLaneCols];
  token_piece<kStaged == 2>(st.dy, token, st.hd, y);
  float dot = 0.0f;
  add_read(q_w, y, kLaneCols, m0, dot, sum);
  return dot;
}

// The members of a group that the members' own tasks hold (window: its first position's task, size
// of them), walked in group order two at a time so that their dot chains overlap: member(entry)
// walks one and returns its partial, dest(entry, b) is the code of where member b's total goes
// (dot_dest).
template <bool kWrite, typename Member, typename Dest>
__device__ __forceinline__ void walk_window(const SlotTask* window, int size, PendingDots& dots, int lane,
                                            Member member, Dest dest) {
  for (int b0 = 0; b0 < size; b0 += 32) {
    EntryWords mine{};
    if (b0 + lane < size) mine = entry_words(window + b0 + lane);
    const int count = size - b0 < 32 ? size - b0 : 32;
    const auto entry = [&](int b) {  // the fields the walk reads, in every lane
      EntryWords words{__shfl_sync(kAllLanes, mine.tokens, b), 0.0f, 0.0f, 0.0f};
      if constexpr (kWrite) {
        words.write_scale = __shfl_sync(kAllLanes, mine.write_scale, b);
        words.write_k_eff = __shfl_sync(kAllLanes, mine.write_k_eff, b);
      } else {
        words.read_q_w = __shfl_sync(kAllLanes, mine.read_q_w, b);
      }
      return words;
    };
    int b = 0;
    for (; b + 1 < count; b += 2) {
      const EntryWords first = entry(b), second = entry(b + 1);
      const float partial[2] = {member(first), member(second)};
      const std::uint32_t to[2] = {dest(first, b0 + b), dest(second, b0 + b + 1)};
      add_dots(dots, partial, to, lane);
    }
    if (b < count) {
      const EntryWords last = entry(b);
      const float partial[1] = {member(last)};
      const std::uint32_t to[1] = {dest(last, b0 + b)};
      add_dots(dots, partial, to, lane);
    }
  }
}

// Step s of the write group whose worker's task sits at sorted write position q (its rows `rows`);
// its G and snapshot pieces in `ring_slot`. A group of one write entry read at most once
// (task_holds_entries, nearly every group) runs as one straight block, its two or three dot chains
// side by side.
template <typename E, typename Gt, SnapshotQuant kMode, int kStaged>
__device__ __forceinline__ void walk_write_group(const BackwardBuffers& bb, const StagedStep& st, const SlotTask& task,
                                                 int q, const WorkerRows<Gt>& rows, const unsigned char* ring_slot,
                                                 PendingDots& dots, int lane) {
  SnapshotRows snapshot = snapshot_row<kMode>(bb.snapshot, ring_slot, rows.m0_row);  // the ring's copy of pre
  float g[kLaneCols], pre[kLaneCols], acc[kLaneCols], sum[kLaneCols] = {};
  load_piece<true>(reinterpret_cast<const Gt*>(ring_slot + kWarpCols * sizeof(E)), lane * kLaneCols, kWarpCols, g);
  load_snapshot_piece<true, E>(snapshot, 0, lane * kLaneCols, kWarpCols, pre);
  float lambda_dot = 0.0f;
#pragma unroll
  for (int k = 0; k < kLaneCols; ++k) {
    lambda_dot = fmaf(g[k], pre[k], lambda_dot);
    acc[k] = task.decay * g[k];
  }
  if (task_holds_entries(task)) {
    const float write_dot =
        write_member(st, entry_token(task.tokens), task.write_scale, task.write_k_eff, pre, acc);
    if (task.role >= 0) {
      const int index = read_index(task.tokens);
      const float partial[3] = {lambda_dot, write_dot,
                                read_member<kStaged>(st, read_token(st, index), task.read_q_w, pre, sum)};
      const std::uint32_t to[3] = {dot_dest(kDlambdaPlane, q), dot_dest(kDkEffPlane, q), dot_dest(kDqWPlane, index)};
      add_dots(dots, partial, to, lane);
    } else {
      const float partial[2] = {lambda_dot, write_dot};
      const std::uint32_t to[2] = {dot_dest(kDlambdaPlane, q), dot_dest(kDkEffPlane, q)};
      add_dots(dots, partial, to, lane);
    }
  } else {
    const float partial[1] = {lambda_dot};
    const std::uint32_t to[1] = {dot_dest(kDlambdaPlane, q)};
    add_dots(dots, partial, to, lane);
    walk_window<true>(
        st.tasks + q, write_size_of(task), dots, lane,
        [&](const EntryWords& w) {
          return write_member(st, entry_token(w.tokens), w.write_scale, w.write_k_eff, pre, acc);
        },
        [&](const EntryWords&, int b) { return dot_dest(kDkEffPlane, q + b); });
    if (task.role >= 0) {
      walk_window<false>(
          st.tasks + st.CW + task.role, read_size_of(task), dots, lane,
          [&](const EntryWords& r) { return read_member<kStaged>(st, entry_token(r.tokens), r.read_q_w, pre, sum); },
          [&](const EntryWords& r, int) { return dot_dest(kDqWPlane, read_index(r.tokens)); });
    }
  }
  if (task.role >= 0) {
#pragma unroll
    for (int k = 0; k < kLaneCols; ++k) acc[k] = acc[k] + sum[k];
  }
  store_piece_cvt<true>(rows.grad, lane * kLaneCols, kWarpCols, acc);
}

// Step s of the read-only group whose worker's task sits at sorted read position q (its rows `rows`,
// M0's row source rows.m0_row); its G and M0 pieces in `ring_slot`.
template <typename E, typename Gt, SnapshotQuant kMode, int kStaged>
__device__ __forceinline__ void walk_read_group(const BackwardBuffers& bb, const StagedStep& st, const SlotTask& task,
                                                int q, const WorkerRows<Gt>& rows, const unsigned char* ring_slot,
                                                PendingDots& dots, int lane) {
  BankRow<E, kMode> m0_row;  // the ring's copy of M0's piece: row 0 of a bank or snapshot row
  if (kMode == SnapshotQuant::none || rows.m0_row == kFinalBankRow) {
    m0_row.row = reinterpret_cast<const E*>(ring_slot);
  } else {
    m0_row.snapshot = snapshot_row<kMode>(bb.snapshot, ring_slot, rows.m0_row);
  }
  float base[kLaneCols], m0[kLaneCols], sum[kLaneCols] = {};
  load_piece<true>(reinterpret_cast<const Gt*>(ring_slot + kWarpCols * sizeof(E)), lane * kLaneCols, kWarpCols, base);
  m0_row.template load<true>(lane * kLaneCols, kWarpCols, m0);
  if (read_size_of(task) == 1) {
    const EntryWords own{task.tokens, 0.0f, 0.0f, task.read_q_w};  // the read-only worker's entry is its own
    const float partial[1] = {read_member<kStaged>(st, entry_token(own.tokens), own.read_q_w, m0, sum)};
    const std::uint32_t to[1] = {dot_dest(kDqWPlane, read_index(own.tokens))};
    add_dots(dots, partial, to, lane);
  } else {
    walk_window<false>(
        st.tasks + st.CW + q, read_size_of(task), dots, lane,
        [&](const EntryWords& r) { return read_member<kStaged>(st, entry_token(r.tokens), r.read_q_w, m0, sum); },
        [&](const EntryWords& r, int) { return dot_dest(kDqWPlane, read_index(r.tokens)); });
  }
#pragma unroll
  for (int k = 0; k < kLaneCols; ++k) sum[k] = base[k] + sum[k];
  store_piece_cvt<true>(rows.grad, lane * kLaneCols, kWarpCols, sum);
}

// The task of lane `lane` in every lane: the fields its walk reads (a read-only worker's walk reads
// only its sizes and its own entry).
__device__ __forceinline__ SlotTask task_from_lane(const SlotTask& t, int lane, bool write) {
  SlotTask r;
  r.sizes = __shfl_sync(kAllLanes, t.sizes, lane);
  r.tokens = __shfl_sync(kAllLanes, t.tokens, lane);
  r.read_q_w = __shfl_sync(kAllLanes, t.read_q_w, lane);
  if (write) {
    r.role = __shfl_sync(kAllLanes, t.role, lane);
    r.decay = __shfl_sync(kAllLanes, t.decay, lane);
    r.write_scale = __shfl_sync(kAllLanes, t.write_scale, lane);
    r.write_k_eff = __shfl_sync(kAllLanes, t.write_k_eff, lane);
  }
  return r;
}

// staged_slot_walk in detail: see the file's header. Grid (p_count, dot steps, shares),
// kStageThreads threads, stage_bytes<E, Gt>(C, kStaged) of dynamic shared memory.
template <typename E, typename Gt, SnapshotQuant kMode, int kStaged>
__global__ void __launch_bounds__(kStageThreads, 1)
    staged_slot_walk(Geometry geo, BackwardBuffers bb, std::int64_t ti) {
  extern __shared__ float4 stage_words[];
  __shared__ int next_batch;
  float* stage = reinterpret_cast<float*>(stage_words);
  const int C = static_cast<int>(geo.C), hd = static_cast<int>(geo.hd);
  const int lane = static_cast<int>(threadIdx.x) % 32, warp = static_cast<int>(threadIdx.x) / 32;
  StagedStep st;
  st.p = geo.p_first + blockIdx.x;
  st.n = ti * geo.P + st.p;
  st.CW = static_cast<int>(geo.C * geo.W);
  st.CR = static_cast<int>(geo.C * geo.R);
  st.s = static_cast<int>(blockIdx.y);
  st.hd = hd;
  st.du = stage + lane * kLaneCols;
  st.dy = stage + C * kWarpCols + lane * kLaneCols;
  st.tasks = bb.slot_tasks + st.n * (st.CW + st.CR);
  st.inverse_R = 1.0f / static_cast<float>(geo.R);
  const int positions = st.CW + st.CR, shares = static_cast<int>(gridDim.z), share = static_cast<int>(blockIdx.z);
  constexpr int kRing = ring_depth<E, Gt>();
  constexpr std::size_t kSlotBytes = ring_slot_bytes<E, Gt>();
  unsigned char* mine = reinterpret_cast<unsigned char*>(stage + kStaged * C * kWarpCols) + warp * warp_bytes<E, Gt>();
  unsigned char* ring = mine;
  PendingDots dots;
  dots.rows = reinterpret_cast<float*>(mine + kRing * kSlotBytes);
  dots.column = dots.rows + lane;
  dots.dest = reinterpret_cast<std::uint32_t*>(dots.rows + kFlush * kDotRow);
  dots.dlambda = &bb.dlambda.at(st.s, st.n * st.CW);
  dots.dk_eff = &bb.dk_eff.at(st.s, st.n * st.CW);
  dots.dq_w = &bb.dq_w.at(st.s, st.n * st.CR);
  dots.count = 0;

  wait_for_predecessor();
  int first = static_cast<int>(static_cast<std::int64_t>(positions) * share / shares);
  int end = static_cast<int>(static_cast<std::int64_t>(positions) * (share + 1) / shares);
  if (bb.walk_cuts != nullptr) {
    const std::int32_t* cut = bb.walk_cuts + st.n * (shares + 1) + share;
    first = cut[0];
    end = cut[1];
  }
  // Batch k: positions first + k kBatch .. (at most kBatch, none past end).
  const auto batch_base = [first](int k) { return first + k * kBatch; };
  const auto batch_size = [first, end](int k) {
    const int left = end - (first + k * kBatch);
    return left < kBatch ? left : kBatch;
  };
  if (threadIdx.x == 0) next_batch = kStageWarps;  // batch w is warp w's first (below)
  const std::int64_t row0 = st.n * geo.C * geo.hd;
  if constexpr (kStaged == 1) st.dy = bb.dy + row0 + st.s * kWarpCols + lane * kLaneCols;
  copy_token_rows<kStaged>(stage, bb.du + row0, bb.dy + row0, C, hd, st.s * kWarpCols);

  const SlotTask* tasks = st.tasks;
  // A warp claims its next batch when it starts the last worker of the current one (so a claimed
  // batch waits one worker, not a whole batch, while other warps may be idle) and loads that
  // batch's tasks while that worker walks (below); which warp walks a batch never changes a value.
  const auto claim = [&] {
    int next = 0;
    if (lane == 0) next = atomicAdd(&next_batch, 1);
    return __shfl_sync(kAllLanes, next, 0);
  };
  const int past = (end - first + kBatch - 1) / kBatch;  // no batch from here on
  // Batch k's tasks (lane < its size; idle past it).
  const auto load_tasks = [&](int k) {
    SlotTask t;
    if (lane < batch_size(k)) t = tasks[batch_base(k) + lane];
    return t;
  };
  // Warp w's first batch is batch w, opened while the token rows are in flight (its tasks, row
  // sources and ring copies need no staged row); then every thread waits for its copies of the
  // rows (its oldest group: the ring's kRing groups came after them), and the CTA for all of them.
  // k comes through a shuffle, so that the compiler sees it is the same in every lane (with k =
  // warp, ptxas put convergence barriers around the walk's shuffles: 14 % more instructions).
  int k = __shfl_sync(kAllLanes, warp, 0);
  SlotTask task = load_tasks(k);
  for (int opened = 0;; ++opened) {
    const int base = batch_base(k), q = base + lane;
    // Each worker's rows, by its own lane (a read-only worker's row source is one load a lane, so a
    // batch waits for one load).
    WorkerRows<Gt> rows;
    if (task.role != kSlotIdle) rows = worker_rows<E, Gt, kMode>(geo, bb, st, task, q);
    const unsigned workers = __ballot_sync(kAllLanes, task.role != kSlotIdle);
    // The ring: the k-th worker of the batch in slot k % kRing, one commit group per slot (empty
    // past the batch's workers), so kRing groups are always in flight and the oldest is the next
    // worker's.
    unsigned to_fetch = workers;
    const auto fetch_next = [&](unsigned char* ring_slot) {
      if (to_fetch != 0) {
        const int b = __ffs(to_fetch) - 1;
        to_fetch &= to_fetch - 1;
        fetch_to_ring<E, Gt, kMode>(rows_from_lane<kMode, true>(rows, b), ring_slot, lane);
      }
      commit_async_copies();
    };
#pragma unroll
    for (int r = 0; r < kRing; ++r) fetch_next(ring + r * kSlotBytes);
    if (opened == 0) {  // every thread's first pass
      wait_async_groups<kRing>();
      __syncthreads();
    }
    if (batch_size(k) <= 0) break;
    int next = past, walked = 0;
    if (workers == 0) {
      next = claim();
      task = load_tasks(next);
    }
    for (unsigned todo = workers; todo != 0; todo &= todo - 1, ++walked) {
      const int b = __ffs(todo) - 1;
      const bool write = base + b < st.CW;
      const SlotTask worker_task = task_from_lane(task, b, write);
      const WorkerRows<Gt> worker = rows_from_lane<kMode, false>(rows, b);
      if ((todo & (todo - 1)) == 0) {
        // The batch's last worker: the batch's tasks and rows are taken, so the next batch is
        // claimed and its tasks loaded into the same registers while this worker walks; its write
        // positions' group ordinals (which need no task) are asked into L1.
        next = claim();
        task = load_tasks(next);
        const int ahead = batch_base(next) + lane;
        if (lane < batch_size(next) && ahead < st.CW) prefetch_l1(bb.group_ordinal + st.n * st.CW + ahead);
      }
      unsigned char* ring_slot = ring + (walked % kRing) * kSlotBytes;
      wait_async_groups<kRing - 1>();
      if (write) {
        walk_write_group<E, Gt, kMode, kStaged>(bb, st, worker_task, base + b, worker, ring_slot, dots, lane);
      } else {
        walk_read_group<E, Gt, kMode, kStaged>(bb, st, worker_task, base + b - st.CW, worker, ring_slot, dots, lane);
      }
      fetch_next(ring_slot);  // the walk consumed the slot's loads: refill it
    }
    k = next;
  }
  if (dots.count > 0) flush_dots(dots, lane);
}

// The forced shares (slot_split.hpp walk_shares): SDM_CUDA_WALK_SHARES, else 0; set_walk_shares
// overrides it.
std::int64_t& forced_shares() {
  static std::int64_t shares = core::env_count("SDM_CUDA_WALK_SHARES", kMaxWalkShares);
  return shares;
}

// The cut SDM_CUDA_WALK_CUT names (balanced without it); set_walk_cut overrides it.
WalkCut& cut_choice() {
  static WalkCut cut =
      core::env_choice("SDM_CUDA_WALK_CUT", {"balanced", "positions"}) == 1 ? WalkCut::positions : WalkCut::balanced;
  return cut;
}

// The slot walk SDM_CUDA_SLOT_WALK names (automatic without it); set_slot_walk overrides it.
SlotWalk& walk_choice() {
  static SlotWalk walk = [] {
    constexpr SlotWalk kWalks[] = {SlotWalk::automatic, SlotWalk::per_position, SlotWalk::staged,
                                   SlotWalk::staged_du_only};
    const int named = core::env_choice("SDM_CUDA_SLOT_WALK", {"automatic", "positions", "staged", "staged_du_only"});
    return named < 0 ? SlotWalk::automatic : kWalks[named];
  }();
  return walk;
}

// Whether a CTA staging `staged` token rows a chunk token fits the SM's shared memory, with the
// static counter (16 bytes).
template <typename E, typename Gt>
bool stage_fits(std::int64_t C, int staged) {
  return stage_bytes<E, Gt>(C, staged) + 16 <= shared_memory_optin();
}

// The token rows a CTA stages: dU and dy where they fit with the warps' shares, else (or when
// SlotWalk::staged_du_only asks) dU alone; staged_slot_walk_fits says one of the two fits. The
// choice changes no value.
template <typename E, typename Gt>
int staged_rows(std::int64_t C) {
  if (walk_choice() == SlotWalk::staged_du_only) return 1;
  return stage_fits<E, Gt>(C, 2) ? 2 : 1;
}

template <typename E, typename Gt, SnapshotQuant kMode, int kStaged>
void launch(const Geometry& geo, const BackwardBuffers& bb, std::int64_t ti, cudaStream_t stream) {
  const auto kernel = staged_slot_walk<E, Gt, kMode, kStaged>;
  const std::size_t smem = stage_bytes<E, Gt>(geo.C, kStaged);
  allow_dynamic_shared_memory(kernel, smem, "cudaFuncSetAttribute (staged_slot_walk shared memory)");
  const dim3 grid(static_cast<unsigned>(geo.p_count), static_cast<unsigned>(bb.dot_steps),
                  static_cast<unsigned>(bb.walk_shares));
  launch_dependent(kernel, grid, dim3(kStageThreads), smem, stream, "staged_slot_walk", geo, bb, ti);
}

}  // namespace

std::int64_t chunk_positions(const Geometry& geo) { return geo.C * geo.W + geo.C * geo.R; }
void read_slot_side_knobs() {
  slot_split_warps();
  walk_choice();
  forced_shares();
  cut_choice();
}
SlotWalk slot_walk() { return walk_choice(); }
void set_slot_walk(SlotWalk walk) { walk_choice() = walk; }
std::int64_t walk_shares() { return forced_shares(); }
void set_walk_shares(std::int64_t n) { forced_shares() = n > 0 ? n : 0; }
WalkCut walk_cut() { return cut_choice(); }
void set_walk_cut(WalkCut cut) { cut_choice() = cut; }

// About one CTA an SM over all streams' launches of the step, or the forced count; at most one a
// batch of positions.
std::int64_t staged_walk_shares(const Geometry& geo, std::int64_t steps) {
  const std::int64_t shares =
      forced_shares() > 0 ? forced_shares() : (multiprocessor_count() + geo.P * steps - 1) / (geo.P * steps);
  const std::int64_t most = (chunk_positions(geo) + kBatch - 1) / kBatch;
  return shares < 1 ? 1 : shares > most ? most : shares;
}

bool staged_slot_walk_fits(std::int64_t chunk_size) {
  // The most any variant asks (f32 bank and G rows) with dU alone staged.
  return stage_fits<float, float>(chunk_size, 1);
}

// The automatic choice: the walk stages C x 256 f32 rows a CTA, which pays only where each of the
// CTA's warps gets at least one batch of positions. Measured on an H100 (docs/performance.md, stop
// 40): small (P 4, W = R = 16, hd 128: 62 positions a share) 1.53 -> 1.64-1.71 ms with the walk;
// readme (372 a share), big (910) and flagship (3277) faster or equal.
bool staged_walk_pays(const Geometry& geo, const BackwardBuffers& bb) {
  return chunk_positions(geo) / bb.walk_shares >= kStageWarps * kBatch;
}

bool use_staged_slot_walk(const Geometry& geo, const BackwardBuffers& bb) {
  if (!bb.vec8 || geo.hd % kWarpCols != 0 || !staged_slot_walk_fits(geo.C)) return false;
  switch (walk_choice()) {
    case SlotWalk::per_position: return false;
    case SlotWalk::staged:
    case SlotWalk::staged_du_only: return true;
    default: return staged_walk_pays(geo, bb);
  }
}

void launch_staged_slot_side(const Geometry& geo, const BackwardBuffers& bb, std::int64_t ti, cudaStream_t stream) {
  dispatch_slot_kernel(bb, [&]<typename E, typename Gt, bool kVec, SnapshotQuant kMode>() {
    if constexpr (kVec) {
      if (staged_rows<E, Gt>(geo.C) == 2) {
        launch<E, Gt, kMode, 2>(geo, bb, ti, stream);
      } else {
        launch<E, Gt, kMode, 1>(geo, bb, ti, stream);
      }
    }
  });
}

}  // namespace sdm::cuda

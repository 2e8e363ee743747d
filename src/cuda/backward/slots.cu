// slots.cu - the slot side of one reverse step of the CUDA backward (docs/spec.md §4: the G update
// of written and read slots), chunks n = ti*P + p of step ti,
// p in [geo.p_first, +geo.p_count); after the token side (it reads the step's dU and dy). One
// kernel, slot_groups_backward; for each slot s that chunk n writes or reads:
//   write group (entries e in token order, pre = M0[s] decoded from the snapshot):
//     dlambda = exp(Lambda) <G[s], pre>;  dk_eff_e = <-beta_i dU_i, pre>;  dc_e = <delta_i, G[s]>
//       (dc here only on the element path: on the vector path GWR takes it, backward.hpp dc_in_gwr)
//     G'[s] = exp(Lambda) G[s] + sum_e k_eff_e (-beta_i dU_i);  row_source[s] <- the snapshot row
//       (group_first[n] + group_ordinal at the group's first position, saved/group_rows.cuh; a row
//       past the buffer's reads its last row instead: never out of bounds)
//   read group (reads r in (token, lane) order; M0[s] = pre if written, else the row at the
//   chunk's start, bank_at_chunk.cuh: the bank is only read):
//     dq_w_r = <dy_i, M0[s]>
//   G[s] <- rnd(base + sum_r q_w dy_i), base = G'[s] if written, else G[s]; the read sum from +0.
// Decomposition: one warp per sorted position of the chunk (C*W write, then C*R read positions);
//   the warp at a group's first position is the slot's worker (a read group's only when the chunk
//   does not write the slot); a long group's row is split by 256-column steps over the warps at
//   its first positions (slot_split.cuh). Every row piece and output element has one writer.
// Numerics: each dot is stored per 256-column step (planes, backward.hpp): the lane's fmaf chain
//   over its columns of the step, then warp_sum's butterfly (common/rows.cuh); the entry kernels
//   add the steps in step order. G' and the read sum are fmaf chains in group order; base + sum is
//   rounded once to G's dtype. Nothing depends on the access path, the split or the SM count.

#include "core/env_knobs.hpp"
#include "cuda/backward/backward.hpp"
#include "cuda/backward/bank_at_chunk.cuh"
#include "cuda/backward/slot_reads.cuh"
#include "cuda/backward/slot_split.cuh"
#include "cuda/backward/slot_split.hpp"
#include "cuda/backward/slot_task_data.cuh"
#include "cuda/backward/slot_writes.cuh"
#include "cuda/backward/slots_staged.hpp"
#include "cuda/common/rows.cuh"
#include "cuda/common/cuda_check.hpp"
#include "cuda/common/dependent_launch.cuh"
#include "cuda/common/launch_bounds.cuh"
#include "cuda/common/prefetch.cuh"
#include "cuda/saved/group_rows.cuh"

namespace sdm::cuda {
namespace {

// Small CTAs: a CTA holds its SM's warp slots until its slowest warp is done, and most positions
// exit after one load while their group's worker walks its row; with 4 warps a CTA the slots
// come back sooner (docs/performance.md).
constexpr int kWarps = 4;
constexpr int kMinBlocks = 16 / kWarps;  // at most 128 registers a thread: 16 warps an SM
static_assert((2 * kMaxChunk * kMaxWidth + kWarps - 1) / kWarps <= 65535,
              "a chunk's C*W + C*R positions fit the grid's y dimension");

using namespace slot_side;

// ---- the two kinds of workers -------------------------------------------------------------------

// The task of the warp at sorted position `at` of a chunk's tasks: a group's worker (member 0), a
// helper of the worker `member` positions before it (the worker's task replaces its own), or
// nobody (returns false). `size_of` gives the group's positions from the worker's task.
template <typename SizeOf>
__device__ __forceinline__ bool group_member(const SlotTask* tasks, int at, const BackwardBuffers& bb,
                                             SizeOf size_of, SlotTask& task, int& member, int& members) {
  task = tasks[at];
  member = 0;
  if (task.role == kSlotIdle) {
    member = helper_offset(task);
    if (member == 0) return false;
    task = tasks[at - member];
  }
  members = split_members(size_of(task), bb.dot_steps, bb.split_warps);
  return member < members;
}

// The warp at sorted write position q of chunk n (stream p): the worker of the write group starting
// at q, or a helper of the group starting `member` positions earlier. A group of one entry read
// at most once (nearly all) takes everything from its task (write_single); other groups load
// their keys and entries and split their row over their members (write_split_group).
template <typename E, typename Gt, bool kVec, SnapshotQuant kMode>
__device__ __forceinline__ void write_group_worker(const Geometry& geo, const Inputs& in, const Phase1Buffers& p1,
                                                   const BackwardBuffers& bb, std::int64_t ti, std::int64_t p,
                                                   int q_at, int lane) {
  const int CW = static_cast<int>(geo.C * geo.W), CR = static_cast<int>(geo.C * geo.R);
  const std::int64_t n = ti * geo.P + p;
  const int hd = static_cast<int>(geo.hd), steps = static_cast<int>(bb.dot_steps);
  SlotTask task;
  int member = 0, members = 1;
  if (!group_member(bb.slot_tasks + n * (CW + CR), q_at, bb, write_size_of, task, member, members)) return;
  const int q = q_at - member;        // the group's first sorted position
  const std::int64_t e = n * CW + q;  // its sorted entry: the dots' planes
  const std::int64_t row = group_row_read(GroupNumbers{bb.group_first, bb.group_ordinal}, n, CW, q, bb.snapshot.rows);  // its snapshot row
  const std::int64_t slot = p * geo.sps + task.local;
  if (member == 0) {
    prefetch_row_l2(static_cast<const unsigned char*>(bb.grad_rows) + slot * geo.hd * sizeof(Gt),
                    geo.hd * static_cast<std::int64_t>(sizeof(Gt)), lane);
    prefetch_row_l2(static_cast<const unsigned char*>(bb.snapshot.payload) + row * bb.snapshot.row_bytes,
                    bb.snapshot.row_bytes, lane);
    if (lane == 0) bb.row_source[slot] = row;  // earlier chunks find M0[s] in this snapshot row
  }

  WriteRows<E, Gt> rows;
  rows.grad = static_cast<Gt*>(bb.grad_rows) + slot * geo.hd;
  rows.delta = bb.delta + n * geo.C * geo.hd;
  rows.du = bb.du + n * geo.C * geo.hd;
  rows.snapshot =
      snapshot_row<kMode>(bb.snapshot, static_cast<unsigned char*>(bb.snapshot.payload) + row * bb.snapshot.row_bytes,
                          row);
  rows.dlambda = planes_at(bb.dlambda, e);
  rows.dc = planes_at(bb.dc, e);
  rows.dk_eff = planes_at(bb.dk_eff, e);
  rows.decay = task.decay;
  const float* dy = bb.dy + n * geo.C * geo.hd;

  const int read_size = read_size_of(task);
  if (write_size_of(task) == 1 && read_size <= 1) {
    const WriteEntry entry = single_write(task, geo.hd);
    if (read_size == 1) {
      write_single<true, kMode, kVec>(rows, entry, single_read(task, dy, bb.dq_w, geo.hd, geo.R, n * CR), hd, steps,
                                      lane);
    } else {
      write_single<false, kMode, kVec>(rows, entry, ReadGroup{}, hd, steps, lane);
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
  write_split_group<kMode, kVec>(rows, mine, src, keys + q, size, reads, hd, steps, member, members, lane);
}

// The warp at sorted read position q of chunk n (stream p): the worker of the read group starting
// at q when the chunk does not write the slot (else the write group's warps do the reads), or a
// helper of such a group's worker. A group of one entry (nearly all) takes it from its task;
// others load their keys and entries and split their row over their members.
template <typename E, typename Gt, bool kVec, SnapshotQuant kMode>
__device__ __forceinline__ void read_group_worker(const Geometry& geo, const Phase1Buffers& p1,
                                                  const BackwardBuffers& bb, std::int64_t ti, std::int64_t p,
                                                  int q_at, int lane) {
  const int CW = static_cast<int>(geo.C * geo.W), CR = static_cast<int>(geo.C * geo.R);
  const std::int64_t n = ti * geo.P + p;
  const int hd = static_cast<int>(geo.hd), steps = static_cast<int>(bb.dot_steps);
  SlotTask task;
  int member = 0, members = 1;
  if (!group_member(bb.slot_tasks + n * (CW + CR) + CW, q_at, bb, read_size_of, task, member, members)) return;
  const int q = q_at - member;
  const std::int64_t slot = p * geo.sps + task.local;
  if (member == 0) {  // G's row first: it does not wait for the row source
    prefetch_row_l2(static_cast<const unsigned char*>(bb.grad_rows) + slot * geo.hd * sizeof(Gt),
                    geo.hd * static_cast<std::int64_t>(sizeof(Gt)), lane);
  }
  const BankRow<E, kMode> bank = bank_row_at_chunk<E, kMode>(bb, slot, geo.hd);
  if (member == 0) bank.prefetch(geo.hd, lane);
  Gt* grad = static_cast<Gt*>(bb.grad_rows) + slot * geo.hd;
  const float* dy = bb.dy + n * geo.C * geo.hd;
  if (read_size_of(task) == 1) {
    read_single<kVec>(grad, bank, single_read(task, dy, bb.dq_w, geo.hd, geo.R, n * CR), hd, steps, lane);
    return;
  }

  const std::uint64_t* keys = bb.read_keys + n * CR;
  const ReadEntrySource src{p1.q_w, bb.read_layout, geo.hd, geo.R, n * CR};
  const ReadGroup reads =
      load_read_group(read_size_of(task), lane_key(keys, CR, q, lane), keys, q, src, dy, bb.dq_w, lane);
  read_split_group<kVec>(grad, bank, reads, hd, steps, member, members, lane);
}

// slot_groups_backward in detail. Grid (P, (C*W + C*R) / kWarps), one warp per sorted position of chunk n:
// first the C*W sorted write positions, then the C*R sorted read positions. The warp at a write
// group's first position is its slot's worker: the write side, and, when the chunk also reads the
// slot, the read side in the same walk over the row, with M0 = the decoded pre it already holds,
// so G' never leaves registers; its worker names the group's snapshot row as the slot's row source
// for the earlier chunks (bank_at_chunk.cuh). The warp at a read group's first position works only
// when the chunk does not write the slot (M0 = the row at the chunk's start: the final bank row or
// a later chunk's decoded snapshot row; base = G). Each warp first loads its task (bb.slot_tasks, found for every chunk before
// the loop by backward/slot_tasks.cu: idle, a helper's offset, or the slot, the group sizes, where
// a written slot's reads start and, for a group of one write entry read at most once or of one
// read entry, the entries' scalars); idle warps exit there, and no warp searches keys inside the
// loop. A worker asks L2 for its G row and its snapshot row (write) or M0 row (read)
// (prefetch_row_l2); the common groups then walk their row at once (write_single / read_single,
// every column step in turn), the others first load their keys (lane_key: lane l loads the key at
// position q + l, so the group's first 32 entries' keys come from one load per lane) and entries'
// scalars, with the row fetches in flight, and split the row: the warps at the group's first
// split_members(size, steps) positions (the worker and its helpers, which load the worker's task
// at q - offset) each take every g'-th 256-column step (slot_split.cuh), G' in registers. Lane l
// owns the 8-column pieces c0 = 256 s + 8 l (common/rows.cuh).
// Instruction economy of the column loops (they are instruction / latency bound): the snapshot
// mode is a template parameter (the host knows it), so a loop holds one decoder and no mode
// switch; row pointers are formed once per walk; the bank is never written; a bf16 G piece is
// rounded by store_piece_cvt (the hardware pair conversion, bitwise the integer rounding for
// every non-NaN value; a piece with a NaN takes store_piece). Registers over occupancy: at most
// 128 registers a thread (16 resident warps an SM) with the split walks inlined, so no walk
// spills or passes its state through the stack; measured against 80 registers (24 warps, the
// split walks out of line), 64 (32) and 48 (40): fewer registers lose at every config
// (docs/performance.md, stop 34).
// Rows are disjoint between slots (streams own disjoint rows, a slot forms at most one write and
// one read group per chunk, and its write group's warps do both), and a column step of a row has
// one owner, so every bank / G piece and every output element has one writer.
//
// Numerics (the warp dot order of common/rows.cuh, per column step): every dot's step partial is
// the lane's fmaf chain over its columns of the step in ascending order (dlambda: fmaf(G, pre),
// dc: fmaf(delta, G), dk_eff: fmaf(scale * dU, pre) with scale * dU rounded first, dq_w:
// fmaf(dy, M0)), then warp_sum's butterfly, stored at plane s; the entry kernels add the planes in
// step order and multiply dlambda's sum by exp(Lambda). Row sums per column: G' = fmaf chain in
// entry order starting from exp(Lambda) * G; the read sum = fmaf chain in group order starting at
// +0; then base + sum, rounded once to G's dtype. Nothing depends on the access path, the number
// of warps sharing a group or the SM count.
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
  else if (q < CW + CR) read_group_worker<E, Gt, kVec, kMode>(geo, p1, bb, ti, p, q - CW, lane);
}

template <typename E, typename Gt, bool kVec, SnapshotQuant kMode>
void launch(const Geometry& geo, const Inputs& in, const Phase1Buffers& p1, const BackwardBuffers& bb,
            std::int64_t ti, cudaStream_t stream) {
  const std::int64_t warps = geo.C * geo.W + geo.C * geo.R;
  const dim3 grid(static_cast<unsigned>(geo.p_count), static_cast<unsigned>((warps + kWarps - 1) / kWarps));
  launch_dependent(slot_groups_backward<E, Gt, kVec, kMode>, grid, dim3(kWarps * 32), 0, stream,
                   "slot_groups_backward", geo, in, p1, bb, ti);
}

int& split_cap() {
  static int cap = static_cast<int>(core::env_count("SDM_CUDA_SLOT_WARPS", kMaxSlotSplitWarps));
  return cap;
}

}  // namespace

int slot_split_warps() { return split_cap(); }
void set_slot_split_warps(int n) { split_cap() = n > 0 ? n : 0; }

// The staged walk on the vector path where it fits (slots_staged.hpp), else the per-position
// kernel; the snapshot mode (known on the host) becomes a template parameter: no mode switch in
// the loop.
void launch_slot_side(const Geometry& geo, const Inputs& in, const Phase1Buffers& p1, const BackwardBuffers& bb,
                      std::int64_t ti, cudaStream_t stream) {
  if (use_staged_slot_walk(geo, bb)) {
    launch_staged_slot_side(geo, bb, ti, stream);
    return;
  }
  dispatch_slot_kernel(bb, [&]<typename E, typename Gt, bool kVec, SnapshotQuant kMode>() {
    launch<E, Gt, kVec, kMode>(geo, in, p1, bb, ti, stream);
  });
}

}  // namespace sdm::cuda

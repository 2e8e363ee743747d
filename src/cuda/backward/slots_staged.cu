// slots_staged.cu - the slot side of one reverse step of the CUDA backward with the chunk's token
// rows on chip: the same math, the same bits as slots.cu (docs/spec.md §4; per slot s of chunk n:
// the write group's dlambda / dc / dk_eff step partials and G', the read group's dq_w partials and
// G <- rnd(base + sum); the bank is only read, bank_at_chunk.cuh), for chunks whose staged rows fit
// one CTA.
//
// Kernel staged_slot_groups_backward. Grid (streams p, column steps s, shares j): CTA (p, s, j)
//   1. stages chunk n's delta, dU and dy rows [C, 256 columns of step s] (f32) in shared memory
//      (cp.async; columns past hd are neither loaded nor read);
//   2. walks the groups whose first sorted position falls in its share j of the chunk's C*W + C*R
//      positions (contiguous shares: a group of m entries spans m positions, so a share's work is
//      about its length): its warps take batches of kBatch positions from a shared counter, load
//      the batch's tasks (backward/slot_tasks.cu), ask L2 for each worker's G piece and snapshot
//      (write group) or M0 (read-only group) piece of step s, then run each worker's step s
//      with every token piece from shared memory: a group of at most one write and one read
//      entry (nearly all) by slots.cu's single-entry walks (write_single / read_single) over the
//      one step, the others by write_group_step / read_group_step (slot_split.cuh). Only G, pre
//      and the M0 pieces travel from L2 / DRAM. The owner of a write group's step 0 names its
//      snapshot row as the slot's row source.
// Where it pays: see use_staged_slot_walk (the automatic choice; slot_split.hpp's knob forces
// either kernel).
// Each (group, column step) has one owner CTA and one warp, so every G piece and every
// dot-plane element has one writer; the shared counter only decides which warp that is.
// Numerics: per column step the fmaf chains, warp butterflies and the one rounding of slots.cu's
// split walk (the lane owns columns 256 s + 8 l .. + 7 of the step, common/rows.cuh), so every
// output is bitwise the per-position kernel's (tests/gpu/test_cuda_slot_split.cpp compares them).
// Shared memory: 3 x C x 256 f32 (C = 64: 192 KiB), one CTA of kStageWarps warps an SM.
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "cuda/backward/backward.hpp"
#include "cuda/backward/bank_at_chunk.cuh"
#include "cuda/backward/slot_reads.cuh"
#include "cuda/backward/slot_split.cuh"
#include "cuda/backward/slot_split.hpp"
#include "cuda/backward/slot_task_data.cuh"
#include "cuda/backward/slot_writes.cuh"
#include "cuda/backward/slots_staged.hpp"
#include "cuda/common/cuda_check.hpp"
#include "cuda/common/dependent_launch.cuh"
#include "cuda/common/device_limits.hpp"
#include "cuda/common/prefetch.cuh"
#include "cuda/common/rows.cuh"

namespace sdm::cuda {
namespace {

using namespace slot_side;

constexpr int kStageWarps = 16;  // 128 registers a thread
constexpr int kStageThreads = kStageWarps * 32;
// Positions a warp takes at a time: its tasks, row sources and L2 requests go out together.
// Measured at flagship (the shape the walk is chosen for; docs/performance.md, stop 38): 16
// against 4, training pk 30.30 -> 28.52 ms, heavy reuse 26.99 -> 25.77, 8 in between.
constexpr int kBatch = 16;
constexpr std::int64_t kStagedRows = 3;  // delta, dU, dy

std::size_t stage_bytes(std::int64_t C) {
  return static_cast<std::size_t>(kStagedRows * C * kWarpCols) * sizeof(float);
}

// ---- 1. staging --------------------------------------------------------------------------------

__device__ __forceinline__ void copy_async16(float* shared, const float* global) {
  const auto to = static_cast<unsigned>(__cvta_generic_to_shared(shared));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(to), "l"(global) : "memory");
}

__device__ __forceinline__ void wait_async_copies() { asm volatile("cp.async.wait_all;" ::: "memory"); }

// Copies rows [C, width] at column col0 of chunk rows delta, du, dy (stride hd) into stage
// ([3][C][kWarpCols]; delta only where the walk takes dc, backward.hpp dc_in_gwr). kVec: 16-byte
// copies (hd % 8 == 0, aligned rows), else one float each.
template <bool kVec>
__device__ __forceinline__ void stage_token_rows(float* stage, const float* delta, const float* du, const float* dy,
                                                 int C, int hd, int col0) {
  const int width = hd - col0 < kWarpCols ? hd - col0 : kWarpCols;
  const int unit = kVec ? 4 : 1;
  const int per_row = width / unit, per_rows = C * per_row;
  constexpr int kFirstRows = dc_in_gwr(kVec) ? 1 : 0;  // skip delta
  for (int at = static_cast<int>(threadIdx.x) + kFirstRows * per_rows; at < 3 * per_rows; at += kStageThreads) {
    const int which = at / per_rows, rest = at - which * per_rows, i = rest / per_row, c = (rest - i * per_row) * unit;
    const float* rows = which == 0 ? delta : which == 1 ? du : dy;
    const float* from = rows + static_cast<std::int64_t>(i) * hd + col0 + c;
    float* to = stage + (which * C + i) * kWarpCols + c;
    if constexpr (kVec) copy_async16(to, from);
    else *to = *from;
  }
  if constexpr (kVec) wait_async_copies();
}

// ---- 2. the walk -------------------------------------------------------------------------------

__device__ __forceinline__ SlotTask task_from_lane(const SlotTask& t, int lane) {
  SlotTask r;
  r.role = __shfl_sync(kAllLanes, t.role, lane);
  r.local = __shfl_sync(kAllLanes, t.local, lane);
  r.sizes = __shfl_sync(kAllLanes, t.sizes, lane);
  r.tokens = __shfl_sync(kAllLanes, t.tokens, lane);
  r.write_scale = __shfl_sync(kAllLanes, t.write_scale, lane);
  r.write_k_eff = __shfl_sync(kAllLanes, t.write_k_eff, lane);
  r.decay = __shfl_sync(kAllLanes, t.decay, lane);
  r.read_q_w = __shfl_sync(kAllLanes, t.read_q_w, lane);
  return r;
}

// Asks L2 for `bytes` (<= 1 KiB) from `at`: one 32-byte sector a lane.
__device__ __forceinline__ void prefetch_piece(const void* at, std::int64_t bytes, int lane) {
  if (32 * lane < bytes) prefetch_l2(static_cast<const unsigned char*>(at) + 32 * lane);
}

// What every walk of one CTA shares: chunk n of stream p, column step s, the staged pieces.
struct StagedStep {
  std::int64_t n, p;
  int CW, CR, hd, s;
  TokenPieces pieces;  // this lane's pieces of the staged rows (entry rows: i * kWarpCols)
  const float* delta;  // the staged rows themselves ([C][kWarpCols] each)
  const float* du;
  const float* dy;
};

// Bytes of a snapshot row before column 256 s (every mode's payload is linear in the column:
// E, bf16, one byte, or half a byte a column; 256 s is even).
template <typename E, SnapshotQuant kMode>
__device__ __forceinline__ std::int64_t snapshot_step_offset(int s) {
  const std::int64_t cols = static_cast<std::int64_t>(s) * kWarpCols;
  if constexpr (kMode == SnapshotQuant::none) return cols * static_cast<std::int64_t>(sizeof(E));
  else if constexpr (kMode == SnapshotQuant::bf16) return cols * 2;
  else if constexpr (kMode == SnapshotQuant::fp8) return cols;
  else return cols / 2;
}

// The planes moved to plane s: plane 0 of the result is plane s.
__device__ __forceinline__ DotPlanes plane_of(const DotPlanes& planes, int s) {
  return DotPlanes{planes.base + s * planes.stride, planes.stride};
}

// Asks L2 for the pieces of step s a worker's walk loads from memory: its G piece and its snapshot
// piece (write group at sorted write position q) or M0 piece (read-only group with row source
// `source`, bank_at_chunk.cuh).
template <typename E, typename Gt, SnapshotQuant kMode>
__device__ __forceinline__ void prefetch_worker(const Geometry& geo, const BackwardBuffers& bb, const StagedStep& st,
                                                std::int32_t local, int q, std::int64_t source, int lane) {
  const std::int64_t slot = st.p * geo.sps + local;
  const std::int64_t col0 = static_cast<std::int64_t>(st.s) * kWarpCols;
  const std::int64_t cols = geo.hd - col0 < kWarpCols ? geo.hd - col0 : kWarpCols;
  prefetch_piece(static_cast<const Gt*>(bb.grad_rows) + slot * geo.hd + col0, cols * sizeof(Gt), lane);
  const std::int64_t from = snapshot_step_offset<E, kMode>(st.s), to = snapshot_step_offset<E, kMode>(st.s + 1);
  const std::int64_t end = to < bb.snapshot.row_bytes ? to : bb.snapshot.row_bytes;
  if (q < st.CW) {
    const auto* row = static_cast<const unsigned char*>(bb.snapshot.payload) + (st.n * st.CW + q) * bb.snapshot.row_bytes;
    prefetch_piece(row + from, end - from, lane);
    return;
  }
  const BankRow<E, kMode> m0 = bank_row_of<E, kMode>(bb, slot, source, geo.hd);
  if (m0.row != nullptr) prefetch_piece(m0.row + col0, cols * sizeof(E), lane);
  else prefetch_piece(static_cast<const unsigned char*>(m0.snapshot.payload) + from, end - from, lane);
}

// Step s of the write group whose worker's task sits at sorted write position q.
template <typename E, typename Gt, bool kVec, SnapshotQuant kMode>
__device__ __forceinline__ void staged_write_group(const Geometry& geo, const Inputs& in, const Phase1Buffers& p1,
                                                   const BackwardBuffers& bb, const StagedStep& st,
                                                   const SlotTask& task, int q, int lane) {
  const std::int64_t n = st.n, e = n * st.CW + q, slot = st.p * geo.sps + task.local;
  WriteRows<E, Gt> rows;
  rows.grad = static_cast<Gt*>(bb.grad_rows) + slot * geo.hd;
  rows.delta = nullptr;  // the staged pieces (st) stand for the step rows
  rows.du = nullptr;
  rows.snapshot = bb.snapshot;
  rows.snapshot.mode = kMode;
  rows.snapshot.payload = static_cast<unsigned char*>(bb.snapshot.payload) + e * bb.snapshot.row_bytes;
  if constexpr (kMode == SnapshotQuant::fp8 || kMode == SnapshotQuant::int4) rows.snapshot.scales += e;
  rows.dlambda = planes_at(bb.dlambda, e);
  rows.dc = planes_at(bb.dc, e);
  rows.dk_eff = planes_at(bb.dk_eff, e);
  rows.decay = task.decay;
  if (st.s == 0 && lane == 0) bb.row_source[slot] = e;  // earlier chunks find M0[s] in this snapshot row

  const int size = write_size_of(task), read_size = read_size_of(task);
  if (task_holds_entries(task)) {
    // Nearly every group: slots.cu's single-entry walk over the one step, rows moved to column
    // 256 s (the lane keeps its columns of the step, so every chain is the same).
    const int col0 = st.s * kWarpCols;
    WriteRows<E, Gt> step = rows;
    step.grad += col0;
    step.delta = st.delta;
    step.du = st.du;
    step.snapshot.payload = static_cast<unsigned char*>(step.snapshot.payload) + snapshot_step_offset<E, kMode>(st.s);
    step.dlambda = plane_of(rows.dlambda, st.s);
    step.dc = plane_of(rows.dc, st.s);
    step.dk_eff = plane_of(rows.dk_eff, st.s);
    const WriteEntry entry = single_write(task, kWarpCols);
    if (read_size == 1) {
      write_single<true, kMode, kVec>(step, entry,
                                      single_read(task, st.dy, plane_of(bb.dq_w, st.s), kWarpCols, geo.R, n * st.CR),
                                      st.hd - col0, 1, lane);
    } else {
      write_single<false, kMode, kVec>(step, entry, ReadGroup{}, st.hd - col0, 1, lane);
    }
    return;
  }
  const std::uint64_t* keys = p1.keys + n * st.CW;
  const WriteEntrySource src{in.beta, in.beta_dtype, p1.k_eff + n * st.CW, geo.keys, kWarpCols, geo.W,
                             st.p * geo.T + (n / geo.P) * geo.C};
  WriteEntry mine;
  ReadGroup reads;
  if (lane < size) mine = write_entry(src, lane_key(keys, st.CW, q, lane));
  if (task.role >= 0) {
    const std::uint64_t* read_keys = bb.read_keys + n * st.CR;
    const ReadEntrySource read_src{p1.q_w, bb.read_layout, kWarpCols, geo.R, n * st.CR};
    reads = load_read_group(read_size, lane_key(read_keys, st.CR, task.role, lane), read_keys, task.role, read_src,
                            nullptr, bb.dq_w, lane);
  }
  write_group_step<kMode, kVec>(rows, mine, src, keys + q, size, reads, st.pieces, st.hd, st.s, lane);
}

// Step s of the read-only group whose worker's task sits at sorted read position q (M0's row
// source `source`).
template <typename E, typename Gt, bool kVec, SnapshotQuant kMode>
__device__ __forceinline__ void staged_read_group(const Geometry& geo, const Phase1Buffers& p1,
                                                  const BackwardBuffers& bb, const StagedStep& st,
                                                  const SlotTask& task, int q, std::int64_t source, int lane) {
  const std::int64_t n = st.n, slot = st.p * geo.sps + task.local;
  Gt* grad = static_cast<Gt*>(bb.grad_rows) + slot * geo.hd;
  const BankRow<E, kMode> bank = bank_row_of<E, kMode>(bb, slot, source, geo.hd);
  if (read_size_of(task) == 1) {
    const int col0 = st.s * kWarpCols;
    read_single<kVec>(grad + col0, bank_row_from(bank, col0, snapshot_step_offset<E, kMode>(st.s)),
                      single_read(task, st.dy, plane_of(bb.dq_w, st.s), kWarpCols, geo.R, n * st.CR), st.hd - col0, 1,
                      lane);
    return;
  }
  const std::uint64_t* keys = bb.read_keys + n * st.CR;
  const ReadEntrySource src{p1.q_w, bb.read_layout, kWarpCols, geo.R, n * st.CR};
  const ReadGroup reads =
      load_read_group(read_size_of(task), lane_key(keys, st.CR, q, lane), keys, q, src, nullptr, bb.dq_w, lane);
  read_group_step<kVec>(grad, bank, reads, st.pieces.dy, st.hd, st.s, lane);
}

// staged_slot_groups_backward in detail: see the file's header. Grid (p_count, dot steps, shares),
// kStageThreads threads, stage_bytes(C) of dynamic shared memory.
template <typename E, typename Gt, bool kVec, SnapshotQuant kMode>
__global__ void __launch_bounds__(kStageThreads, 1)
    staged_slot_groups_backward(Geometry geo, Inputs in, Phase1Buffers p1, BackwardBuffers bb, std::int64_t ti) {
  extern __shared__ float4 stage_words[];
  __shared__ int next_position;
  float* stage = reinterpret_cast<float*>(stage_words);
  const int C = static_cast<int>(geo.C), hd = static_cast<int>(geo.hd);
  const int lane = static_cast<int>(threadIdx.x) % 32;
  StagedStep st;
  st.p = geo.p_first + blockIdx.x;
  st.n = ti * geo.P + st.p;
  st.CW = static_cast<int>(geo.C * geo.W);
  st.CR = static_cast<int>(geo.C * geo.R);
  st.hd = hd;
  st.s = static_cast<int>(blockIdx.y);
  const int positions = st.CW + st.CR, shares = static_cast<int>(gridDim.z), share = static_cast<int>(blockIdx.z);
  const int first = static_cast<int>(static_cast<std::int64_t>(positions) * share / shares);
  const int end = static_cast<int>(static_cast<std::int64_t>(positions) * (share + 1) / shares);
  if (threadIdx.x == 0) next_position = first;
  const int lane_col = lane * kLaneCols;
  st.delta = stage;
  st.du = stage + C * kWarpCols;
  st.dy = stage + 2 * C * kWarpCols;
  st.pieces = TokenPieces{st.delta + lane_col, st.du + lane_col, st.dy + lane_col};

  wait_for_predecessor();
  const std::int64_t row0 = st.n * geo.C * geo.hd;
  stage_token_rows<kVec>(stage, bb.delta + row0, bb.du + row0, bb.dy + row0, C, hd, st.s * kWarpCols);
  __syncthreads();

  const SlotTask* tasks = bb.slot_tasks + st.n * positions;
  for (;;) {
    int base = 0;
    if (lane == 0) base = atomicAdd(&next_position, kBatch);
    base = __shfl_sync(kAllLanes, base, 0);
    if (base >= end) break;
    const int q = base + lane;
    SlotTask task;
    if (lane < kBatch && q < end) task = tasks[q];
    // A read-only worker's row source: each lane loads its own, so a batch waits for one load.
    std::int64_t source = kFinalBankRow;
    if (q >= st.CW && task.role != kSlotIdle) source = bb.row_source[st.p * geo.sps + task.local];
    const unsigned workers = __ballot_sync(kAllLanes, task.role != kSlotIdle);
    for (unsigned todo = workers; todo != 0; todo &= todo - 1) {
      const int b = __ffs(todo) - 1;
      prefetch_worker<E, Gt, kMode>(geo, bb, st, __shfl_sync(kAllLanes, task.local, b), base + b,
                                    __shfl_sync(kAllLanes, source, b), lane);
    }
    for (unsigned todo = workers; todo != 0; todo &= todo - 1) {
      const int b = __ffs(todo) - 1;
      const SlotTask mine = task_from_lane(task, b);
      if (base + b < st.CW) {
        staged_write_group<E, Gt, kVec, kMode>(geo, in, p1, bb, st, mine, base + b, lane);
      } else {
        staged_read_group<E, Gt, kVec, kMode>(geo, p1, bb, st, mine, base + b - st.CW,
                                              __shfl_sync(kAllLanes, source, b), lane);
      }
    }
  }
}

template <typename E, typename Gt, bool kVec, SnapshotQuant kMode>
void launch(const Geometry& geo, const Inputs& in, const Phase1Buffers& p1, const BackwardBuffers& bb,
            std::int64_t ti, cudaStream_t stream) {
  const auto kernel = staged_slot_groups_backward<E, Gt, kVec, kMode>;
  const std::size_t smem = stage_bytes(geo.C);
  allow_dynamic_shared_memory(kernel, smem, "cudaFuncSetAttribute (staged_slot_groups_backward shared memory)");
  // About one CTA an SM over all streams' launches of the step (a share's work is its positions).
  const std::int64_t steps = bb.dot_steps, positions = geo.C * geo.W + geo.C * geo.R;
  const std::int64_t sms = multiprocessor_count();
  std::int64_t shares = (sms + geo.P * steps - 1) / (geo.P * steps);
  const std::int64_t most = (positions + kBatch - 1) / kBatch;
  shares = shares < 1 ? 1 : shares > most ? most : shares;
  const dim3 grid(static_cast<unsigned>(geo.p_count), static_cast<unsigned>(steps), static_cast<unsigned>(shares));
  launch_dependent(kernel, grid, dim3(kStageThreads), smem, stream, "staged_slot_groups_backward", geo, in, p1, bb, ti);
}

SlotWalk& walk_choice() {
  static SlotWalk walk = [] {
    const char* value = std::getenv("SDM_CUDA_SLOT_WALK");
    if (value != nullptr && std::strcmp(value, "positions") == 0) return SlotWalk::per_position;
    if (value != nullptr && std::strcmp(value, "staged") == 0) return SlotWalk::staged;
    return SlotWalk::automatic;
  }();
  return walk;
}

}  // namespace

SlotWalk slot_walk() { return walk_choice(); }
void set_slot_walk(SlotWalk walk) { walk_choice() = walk; }

bool staged_slot_walk_fits(std::int64_t chunk_size) {
  return stage_bytes(chunk_size) + 1024 <= shared_memory_optin();  // the static counter and the runtime's reserve
}

// The automatic choice. Staging costs about one CTA an SM times 3 C x 256 f32 of L2 reads a step
// and runs each CTA's groups on fewer warps; it saves the per-entry L2 reads of the token pieces,
// P C (2 W + R) hd f32 a step. Measured on the H200 (docs/performance.md, stop 33) it pays where
// the saved reads are 32 times the staging (flagship: P 8, W = R = 128, hd 1024) and loses at 8
// (big) and 3 (readme), so it is taken from kStagedReuse = 16 times on.
constexpr std::int64_t kStagedReuse = 16;

bool staged_walk_pays(const Geometry& geo) {
  const std::int64_t sms = multiprocessor_count();
  return geo.P * (2 * geo.W + geo.R) * geo.hd >= kStagedReuse * sms * kStagedRows * kWarpCols;
}

bool use_staged_slot_walk(const Geometry& geo) {
  switch (walk_choice()) {
    case SlotWalk::per_position: return false;
    case SlotWalk::staged: return staged_slot_walk_fits(geo.C);
    default: return staged_slot_walk_fits(geo.C) && staged_walk_pays(geo);
  }
}

void launch_staged_slot_side(const Geometry& geo, const Inputs& in, const Phase1Buffers& p1,
                             const BackwardBuffers& bb, std::int64_t ti, cudaStream_t stream) {
  dispatch_slot_kernel(bb, [&]<typename E, typename Gt, bool kVec, SnapshotQuant kMode>() {
    launch<E, Gt, kVec, kMode>(geo, in, p1, bb, ti, stream);
  });
}

}  // namespace sdm::cuda

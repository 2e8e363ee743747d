// backward.hpp - the pieces of the CUDA backward of the chunked op (docs/spec.md §4), shared by
// backward.cu (the entry point: planning and launch order) and the kernel files of backward/:
//   grad_bank.cu   the gradient bank G: initial value, final conversion into grad_memory
//   reads.cu       read records: the read entries of every chunk sorted by slot (sort/entry_keys.hpp)
//   slot_tasks.cu  the slot kernel's warp tasks (roles, group sizes, entry scalars)
//   tokens.cu      per step, token side: GWR (gather.cu's kernel on G), dy staging, the transposed
//                  solves; before the loop the GWR weights in entry order, after it the C x C dots
//   slots.cu       per step, slot side: write groups (PA) and read groups (GDS), one kernel
//   entries.cu     after the loop, per entry: the sparse A / QK backward, the chain to k_val,
//                  q_val, beta, and the per-slot scans to g
//
// Names follow backward_chunk.hpp of the CPU engine (the same math): for chunk n of step ti,
//   ddelta = D_w + QK^T dy,  D_w[i] = sum_w coef_(i,w) G[s_(i,w)],  dU = X^T ddelta,
//   dv = beta dU,  dret = -beta dU,  dMs[i][j] = -<dU_i, delta_j> (j < i),  dQK[i][j] = <dy_i, delta_j>
//   (j <= i),  rdot[i] = <res_i, dU_i>;  per write group s: dLambda = exp(Lambda) <G[s], pre_s>,
//   dc_e = <delta_i, G[s]>, dk_eff_e = <dret_i, pre_s>, G'[s] = exp(Lambda) G[s] + sum k_eff dret,
//   row_source[s] <- pre_s's snapshot row;  per read group sigma: dq_w = <dy_i, M0[sigma]>, G[sigma] <- rnd(base + sum q_w dy)
//   with base = G'[sigma] if sigma is written in the chunk (the warps of the slot's write group do
//   both sides of such a slot, G' stays in their registers), else G[sigma]; written rows nobody
//   reads store rnd(G'). One rounding of a G row per chunk (docs/spec.md §3, §4).
// The slot kernel's row dots (dlambda, dc, dk_eff, dq_w) are stored per 256-column step s, as
// planes [dot_steps][entries] (DotPlanes); the entry kernels sum a dot's steps in step order
// (sum_steps): a fixed order, whichever warps computed the steps (slot_split.cuh). On the vector
// path dc is taken by GWR instead (it holds every entry's G row piece anyway; gather.cu's row
// dots, the same dot order): dc_in_gwr.
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime.h>

#include "cuda/common/geometry.hpp"
#include "sdm/options.hpp"
#include "cuda/forward/phase1.hpp"
#include "cuda/saved/snapshot_rows.cuh"
#include "sdm/types.hpp"
#include "cuda/common/workspace.hpp"

namespace sdm::cuda {

// A float tensor of any dtype (gradient outputs, grad_readings, grad_final_bank); data == nullptr:
// absent.
struct AnyFloat {
  void* data = nullptr;
  DType dtype = DType::f32;
};

// What slot_groups_backward's warp at one sorted position of a chunk does (the C*W write
// positions, then the C*R read positions), found before the loop (backward/slot_tasks.cu):
//   role    write position q starting a write group of local slot s: the first sorted read
//           position of s in the chunk (>= 0), or kSlotNoPartner when the chunk does not read s;
//           read position q starting a read group of s that the chunk does not write:
//           kSlotNoPartner (the read-only worker of s); every other position (inside a group,
//           padding / masked entries, a read group of a written slot, which its write worker
//           finishes): kSlotIdle;
//   local   s (a kSlotIdle position inside a group: helper_offset);
//   sizes   the write group's size | the read group's size << kReadSizeShift;
//   decay   exp(Lambda_s) of a write group (gdecay at its first sorted position);
//   the position's own entry, at every real position (a worker's or not; 0 at padding / masked
//   ones): a write position's token i in tokens' low 16 bits, write_scale = -beta_i and
//   write_k_eff; a read position's token i in the low 16 bits, its read index (i*R + r) in the
//   high 16 bits and read_q_w. A write group of at most one write entry and one read entry also
//   holds its read entry's index in tokens' high 16 bits and its read_q_w (task_holds_entries).
// The entry fields fill the task's second 16 bytes: a group's entries are one 16-byte load each.
constexpr std::int32_t kSlotNoPartner = -1;
constexpr std::int32_t kSlotIdle = -2;
constexpr int kReadSizeShift = 9;
// A write group has at most one entry per token of the chunk (a lane repeating an earlier lane's
// slot is masked by make_entry_keys, sort/entry_keys.hpp, docs/spec.md §8), so at most C <= 256 entries; a read group
// may hold every read of the chunk (reads may repeat): C * R <= 65536 entries.
static_assert(kMaxChunk < (std::int64_t{1} << kReadSizeShift), "a write group's size fits below kReadSizeShift");
static_assert(kMaxChunk * kMaxWidth <= (std::int64_t{INT32_MAX} >> kReadSizeShift),
              "a read group's size fits above kReadSizeShift");

struct alignas(16) SlotTask {
  std::int32_t role = kSlotIdle;
  std::int32_t local = 0;
  std::int32_t sizes = 0;
  float decay = 0.0f;        // exp(Lambda) of the write group
  std::uint32_t tokens = 0;  // token i | read index << 16
  float write_scale = 0.0f;  // -beta of the write entry's token
  float write_k_eff = 0.0f;
  float read_q_w = 0.0f;
};
static_assert(sizeof(SlotTask) == 32 && offsetof(SlotTask, tokens) == 16, "the entry fields are the second 16 bytes");

// The offset of a kSlotIdle position from its group's worker (0: no helper).
__host__ __device__ __forceinline__ int helper_offset(const SlotTask& task) { return task.local; }

// Column steps of the slot kernel's row walks: a group's row is cut into steps of kDotStepCols
// columns (one warp's 32 lanes x 8 columns, common/rows.cuh); each step's dots are one plane.
constexpr std::int64_t kDotStepCols = 256;
__host__ __device__ __forceinline__ std::int64_t dot_steps_of(std::int64_t hd) {
  return (hd + kDotStepCols - 1) / kDotStepCols;
}

// Whether GWR (tokens.cu) computes the dc planes, which the slot kernels then skip: on the vector
// path (bb.vec8: GWR's column tile is then the dots' 256-column step). Bits are the same either way.
__host__ __device__ constexpr bool dc_in_gwr(bool vec8) { return vec8; }

// Per-step partials of one row dot, plane s at base + s * stride (stride: the entries of a plane).
struct DotPlanes {
  float* base = nullptr;
  std::int64_t stride = 0;
  __device__ __forceinline__ float& at(std::int64_t step, std::int64_t index) const {
    return base[step * stride + index];
  }
};

// The dot at `index`: its step partials summed in step order (plane 0 first, then + plane 1, ...),
// the one order every reader uses; bits never depend on which warps computed the steps.
__device__ __forceinline__ float sum_steps(const DotPlanes& planes, std::int64_t steps, std::int64_t index) {
  float sum = planes.base[index];
  for (std::int64_t s = 1; s < steps; ++s) sum += planes.base[s * planes.stride + index];
  return sum;
}

// Device pointers of one backward call. "Sorted" arrays follow Phase 1's sorted write positions
// n*C*W + q; "read-sorted" ones the sorted read positions n*C*R + q; "entry" ones the unsorted
// write entries n*C*W + i*W + w (reads: n*C*R + i*R + r). Step rows are p*C + i.
struct BackwardBuffers {
  // The final bank (only read while the chunks are walked) and the gradient bank G (absolute bank
  // rows; bf16 or f32 rows).
  void* bank = nullptr;
  void* grad_rows = nullptr;
  // Per bank row of the streams (P*sps): the snapshot row holding it at the start of the chunk
  // being walked, or -1: the final bank row (bank_at_chunk.cuh).
  std::int64_t* row_source = nullptr;
  bool bf16_bank = false, bf16_grad_rows = false;
  bool vec8 = false;  // hd % 8 == 0 and 16-byte aligned rows everywhere: vector accesses

  // The saved buffer of the forward (saved/layout.hpp): delta, residual [N*C, hd] f32, snapshot rows.
  const float* delta = nullptr;
  const float* residual = nullptr;
  SnapshotRows snapshot;
  // Where each write group's snapshot row is (Phase 1's numbering, saved/group_rows.cuh): the saved
  // group_first [N + 1] and group_ordinal (sorted [N*C*W]).
  const std::int64_t* group_first = nullptr;
  const std::int32_t* group_ordinal = nullptr;

  // Upstream gradient.
  AnyFloat grad_readings;

  // dy and dU of every chunk, f32 [N*C, hd] at row n*C + i (pair_dots reads them after the loop).
  // Per step (reused): D_w as f32 step rows [P*C, hd].
  float* dy = nullptr;
  float* du = nullptr;
  float* dw = nullptr;

  // Read records: sorted read keys (chunk | local slot | token | lane) of every chunk.
  std::uint64_t* read_keys_unsorted = nullptr;
  std::uint64_t* read_keys = nullptr;
  KeyLayout read_layout;
  void* read_sort_temp = nullptr;
  std::size_t read_sort_temp_bytes = 0;

  // Per chunk and sorted position: the task of the slot kernel's warp there ([N, C*W + C*R]).
  SlotTask* slot_tasks = nullptr;
  // The staged walk's CTAs a (stream, column step), and where they cut each chunk's positions
  // ([N, walk_shares + 1], walk_cuts.cu), or null: cut at equal position counts.
  std::int64_t walk_shares = 1;
  std::int32_t* walk_cuts = nullptr;

  // Per chunk: dMs, dQK [N, C, C] (entries j <= i written), rdot [N*C].
  float* dms = nullptr;
  float* dqk = nullptr;
  float* rdot = nullptr;

  // The GWR weight of every write entry in entry order (wcoef at its sorted position, 0 if masked).
  float* entry_coef = nullptr;

  // Per write entry: dL, dP (sorted), dgamma (entry order); per read entry (entry order): dLq.
  // The slot kernel's row dots as step planes ([dot_steps][write entries] / [dot_steps][read
  // entries]): dk_eff, dc (sorted), dlambda (sorted, at a group's first position: <G, pre>, the
  // entry kernels multiply the step sum by exp(Lambda)), dq_w (entry order).
  float* dL = nullptr;
  float* dP = nullptr;
  float* dgamma = nullptr;
  float* dLq = nullptr;
  std::int64_t dot_steps = 1;
  DotPlanes dk_eff, dc, dlambda, dq_w;
  // The most warps that share one group's row (0: as many as the group has positions, up to
  // dot_steps); a test knob (slot_split_warps, backward/slot_split.hpp), never changes a bit.
  int split_warps = 0;
};

// The token gradients the caller asked for (absent: data == nullptr).
struct TokenGrads {
  AnyFloat k_val, v, beta, g, q_val;
};

// Plans the read keys and their sort's temporary storage in `ws` (before ws.allocate()).
void plan_read_records(const Geometry& geo, Workspace& ws, BackwardBuffers& bb);
// Sorts the read entries of every chunk by (slot, token, lane) (after Phase 1).
void sort_reads(const Geometry& geo, const Phase1Buffers& p1, const BackwardBuffers& bb, cudaStream_t stream);

// Plans slot_tasks in `ws`; finds every chunk's slot-kernel tasks (after Phase 1 and sort_reads).
void plan_slot_tasks(const Geometry& geo, Workspace& ws, BackwardBuffers& bb);
void find_slot_tasks(const Geometry& geo, const Inputs& in, const Phase1Buffers& p1, const BackwardBuffers& bb,
                     cudaStream_t stream);

// The bank at the start of chunk 0 from the row sources after the walk: every row some chunk
// writes gets the decoded pre-write row of the first chunk writing it (restore.cu).
void restore_initial_bank(const Geometry& geo, const BackwardBuffers& bb, cudaStream_t stream);

// G = grad_final_bank (or 0) rounded to the row dtype, over `rows` rows.
void init_grad_bank(const Geometry& geo, const BackwardBuffers& bb, std::int64_t rows, AnyFloat grad_final_bank,
                    cudaStream_t stream);
// grad_memory [S, hd] = G on the streams' rows, grad_final_bank (or 0) beyond them.
void finish_grad_bank(const Geometry& geo, const BackwardBuffers& bb, std::int64_t bank_rows,
                      AnyFloat grad_final_bank, AnyFloat grad_memory, cudaStream_t stream);

// entry_coef of every chunk (before the loop).
void launch_entry_coefs(const Geometry& geo, const Phase1Buffers& p1, const BackwardBuffers& bb, cudaStream_t stream);

// One reverse step ti, in this order (each reads what the previous ones wrote).
void launch_token_side(const Geometry& geo, const Inputs& in, const Phase1Buffers& p1, const BackwardBuffers& bb,
                       AnyFloat grad_v, std::int64_t ti, cudaStream_t stream);
void launch_slot_side(const Geometry& geo, const Inputs& in, const Phase1Buffers& p1, const BackwardBuffers& bb,
                      std::int64_t ti, cudaStream_t stream);

// After the loop: the C x C dots of every chunk (dQK, dMs, rdot; backward/tokens.cu), then every
// per-entry and per-token gradient (k_val, q_val, beta, g).
void launch_pair_dots(const Geometry& geo, const BackwardBuffers& bb, cudaStream_t stream);
void launch_entry_grads(const Geometry& geo, const Inputs& in, const Phase1Buffers& p1, const BackwardBuffers& bb,
                        const TokenGrads& out, cudaStream_t stream);

}  // namespace sdm::cuda

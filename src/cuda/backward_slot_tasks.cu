// backward_slot_tasks.cu - what each warp of slot_groups_backward does, found once per call for
// every chunk (before the reverse loop: it reads only Phase 1's write keys and per-entry scalars,
// beta and the read keys, none of which the loop changes).
//
// For chunk n the slot kernel has one warp per sorted position: the C*W write positions, then the
// C*R read positions. tasks[n*(C*W + C*R) + position] (SlotTask, backward.hpp) holds:
//   role    write position q starting a write group of local slot s: the first sorted read
//           position of s in the chunk (>= 0), or kSlotNoPartner when the chunk does not read s;
//           read position q starting a read group of s that the chunk does not write:
//           kSlotNoPartner (the read-only worker of s); every other position (inside a group,
//           padding / masked entries, a read group of a written slot, which its write worker
//           finishes): kSlotIdle, and nothing else of the task is set;
//   local   s;  sizes  the write group's size | the read group's size << kReadSizeShift;
//   decay   exp(Lambda_s) of a write group (gdecay at its first sorted position);
//   and for a group of at most one write entry and one read entry (nearly all of them:
//   slots_per_stream is large) the entries' data, so that the worker starts its row passes after
//   one load: the write entry's token i, -beta_i and k_eff, the read entry's index i*R + r and
//   q_w. These are the values the worker would load itself (the same words, no arithmetic but
//   beta's negation), so nothing downstream changes by a bit.
//
// Parallel decomposition: one thread per position; grid (N, position slices of 256). A group start
// (its key's slot differs from the previous key's) finds the other side's first key of its slot
// by a binary search of that chunk's sorted keys (lower_bound_key) and the groups' sizes by
// walking their keys. Integer work and copies only; each task has one writer.
#include "backward.hpp"
#include "backward_rows.cuh"
#include "cuda_check.hpp"
#include "device_values.cuh"

namespace sdm::cuda {
namespace {

constexpr int kThreads = 256;

// Whether sorted position q of keys[0, count) starts the group of a real slot; its slot in *local.
__device__ __forceinline__ bool starts_group(const std::uint64_t* keys, int q, const KeyLayout& layout,
                                             std::int64_t sps, std::int64_t* local) {
  *local = layout.local_slot(keys[q]);
  return *local != sps && (q == 0 || layout.local_slot(keys[q - 1]) != *local);
}

// The first position of slot `local` in the sorted keys[0, count) of chunk n, or -1.
__device__ __forceinline__ int find_slot(const std::uint64_t* keys, int count, const KeyLayout& layout,
                                         std::int64_t n, std::int64_t local) {
  const std::int64_t at = lower_bound_key(keys, count, layout.encode(n, local, 0, 0));
  return at < count && layout.local_slot(keys[at]) == local ? static_cast<int>(at) : -1;
}

// The size of the group of slot `local` that starts at position q of keys[0, count).
__device__ __forceinline__ int group_size(const std::uint64_t* keys, int count, int q, const KeyLayout& layout,
                                          std::int64_t local) {
  int end = q + 1;
  while (end < count && layout.local_slot(keys[end]) == local) ++end;
  return end - q;
}

__global__ void __launch_bounds__(kThreads)
    find_slot_tasks(Geometry geo, Inputs in, Phase1Buffers p1, KeyLayout read_layout,
                    const std::uint64_t* __restrict__ read_keys, SlotTask* __restrict__ tasks) {
  const int CW = static_cast<int>(geo.C * geo.W), CR = static_cast<int>(geo.C * geo.R);
  const int position = static_cast<int>(blockIdx.y) * kThreads + static_cast<int>(threadIdx.x);
  if (position >= CW + CR) return;
  const std::int64_t n = blockIdx.x;
  const std::uint64_t* writes = p1.keys + n * CW;
  const std::uint64_t* reads = read_keys + n * CR;
  SlotTask task{};
  task.role = kSlotIdle;
  std::int64_t local = 0;
  int write_size = 0, first_read = -1;
  if (position < CW) {
    if (starts_group(writes, position, geo.keys, geo.sps, &local)) {
      write_size = group_size(writes, CW, position, geo.keys, local);
      first_read = find_slot(reads, CR, read_layout, n, local);
      task.role = first_read >= 0 ? first_read : kSlotNoPartner;
      task.decay = p1.gdecay[n * CW + position];
    }
  } else if (starts_group(reads, position - CW, read_layout, geo.sps, &local)) {
    if (find_slot(writes, CW, geo.keys, n, local) < 0) {
      task.role = kSlotNoPartner;
      first_read = position - CW;
    }
  }
  if (task.role != kSlotIdle) {
    const int read_size = first_read >= 0 ? group_size(reads, CR, first_read, read_layout, local) : 0;
    task.local = static_cast<std::int32_t>(local);
    task.sizes = write_size | read_size << kReadSizeShift;
    if (write_size <= 1 && read_size <= 1) {
      std::uint32_t tokens = 0;
      if (write_size == 1) {
        const std::uint64_t key = writes[position];
        const std::int64_t i = geo.keys.token(key), p = n % geo.P, ti = n / geo.P;
        tokens = static_cast<std::uint32_t>(i);
        task.write_scale = -load_input(in.beta, in.beta_dtype, p * geo.T + ti * geo.C + i);
        task.write_k_eff = p1.k_eff[n * CW + i * geo.W + geo.keys.lane(key)];
      }
      if (read_size == 1) {
        const std::uint64_t key = reads[first_read];
        const std::int64_t entry = read_layout.token(key) * geo.R + read_layout.lane(key);
        tokens |= static_cast<std::uint32_t>(entry) << 16;
        task.read_q_w = p1.q_w[n * CR + entry];
      }
      task.tokens = tokens;
    }
  }
  tasks[n * (CW + CR) + position] = task;
}

}  // namespace

void plan_slot_tasks(const Geometry& geo, Workspace& ws, BackwardBuffers& bb) {
  ws.plan(&bb.slot_tasks, geo.N * (geo.C * geo.W + geo.C * geo.R));
}

void find_slot_tasks(const Geometry& geo, const Inputs& in, const Phase1Buffers& p1, const BackwardBuffers& bb,
                     cudaStream_t stream) {
  const std::int64_t positions = geo.C * geo.W + geo.C * geo.R;
  const dim3 grid(static_cast<unsigned>(geo.N), static_cast<unsigned>((positions + kThreads - 1) / kThreads));
  find_slot_tasks<<<grid, kThreads, 0, stream>>>(geo, in, p1, bb.read_layout, bb.read_keys, bb.slot_tasks);
  check_launch("find_slot_tasks");
}

}  // namespace sdm::cuda

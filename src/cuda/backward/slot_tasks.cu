// slot_tasks.cu - what each warp of slot_groups_backward does, found once per call for every
// chunk (before the reverse loop: it reads only Phase 1's write keys and per-entry scalars, beta
// and the read keys, none of which the loop changes).
//
// Output: tasks[n*(C*W + C*R) + position] (SlotTask, backward.hpp, which states every field): for
// chunk n the slot kernel has one warp per sorted position, the C*W write positions, then the C*R
// read positions. Every real position's task also holds its own entry's data, and a group of at
// most one write entry and one read entry (nearly all of them: slots_per_stream is large) its read
// entry's too, so that a worker starts its row passes after one load and a longer group's entries
// are one load each: the values the worker would load itself (the same words, no arithmetic but
// beta's negation), so nothing downstream changes by a bit.
//
// Parallel decomposition: one CTA per chunk (chunk_slot_tasks, its three passes described above
// the kernel). Integer work and copies only; each task has one writer.
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "cuda/backward/backward.hpp"
#include "cuda/common/cuda_check.hpp"
#include "cuda/common/device_limits.hpp"
#include "cuda/common/values.cuh"

namespace sdm::cuda {
namespace {

// 32 registers: two CTAs (one per chunk) fill an SM's 2048 threads.
constexpr int kThreads = 1024;
// Chunks of at most this many read entries stage their read slots (4 bytes each; with the claimed
// bytes 160 KiB of shared memory at the limit, 40 KiB at C*R = 8192).
constexpr std::int64_t kMaxStagedReads = 32768;

// The local slots along a chunk's sorted keys from their u32 copy in shared memory (else from the
// keys in global memory: KeySlots, common/geometry.hpp).
struct StagedSlots {
  using Slot = std::uint32_t;
  const std::uint32_t* slots;
  __device__ Slot operator[](int q) const { return slots[q]; }
};

// Chunk n's sorted keys: C*W write keys, C*R read keys, and the read keys' slots (staged or not).
template <typename ReadSlots>
struct ChunkKeys {
  std::int64_t n;
  int CW, CR;
  KeySlots writes, reads;
  ReadSlots read_slots;
};


// The size of the group of slot `local` that starts at position q of slots[0, count).
template <typename Slots>
__device__ __forceinline__ int group_size(const Slots& slots, int count, int q, std::int64_t local) {
  int end = q + 1;
  while (end < count && slots[end] == local) ++end;
  return end - q;
}

// The first position of slot `local` in slots[0, count) (ascending, count >= 1), or -1; `local`
// fits Slots::Slot. Binary search: the range holding the first slot >= local (if any) halves each
// round, the same ceil(log2(count)) rounds for every position of the chunk, then one probe.
template <typename Slots>
__device__ __forceinline__ int find_slot(const Slots& slots, int count, std::int64_t local) {
  const auto bound = static_cast<typename Slots::Slot>(local);
  int at = 0, len = count;  // slots[0, at) < bound; the first slot >= bound, if any, in [at, at + len)
  while (len > 1) {
    const int half = len / 2;
    if (slots[at + half - 1] < bound) at += half;
    len -= half;
  }
  return slots[at] == bound ? at : -1;
}

// The offset j of position q from the first position of its group of slot `local` (a real slot,
// q not that first position, so slots[q - 1] == local) when j < limit, else 0: at most limit - 1
// probes backwards.
template <typename Slots>
__device__ __forceinline__ int group_offset(const Slots& slots, int q, std::int64_t local, int limit) {
  for (int j = 1; j < limit; ++j) {
    if (q - j == 0 || slots[q - j - 1] != local) return j;
  }
  return 0;
}

// The entry of write position q (a real one) into its task: token i, -beta_i, k_eff.
template <typename ReadSlots>
__device__ __forceinline__ void set_write_entry(const Geometry& geo, const Inputs& in, const Phase1Buffers& p1,
                                                const ChunkKeys<ReadSlots>& chunk, int q, SlotTask& task) {
  const std::uint64_t key = chunk.writes.keys[q];
  const std::int64_t n = chunk.n, i = geo.keys.token(key), p = n % geo.P, ti = n / geo.P;
  task.tokens = static_cast<std::uint32_t>(i);
  task.write_scale = -load_input(in.beta, in.beta_dtype, p * geo.T + ti * geo.C + i);
  task.write_k_eff = p1.k_eff[n * chunk.CW + i * geo.W + geo.keys.lane(key)];
}

// The read entry at sorted read position q (a real one): its token i, its index i*R + r, q_w.
struct ReadEntryWords {
  std::uint32_t token, index;
  float q_w;
};
template <typename ReadSlots>
__device__ __forceinline__ ReadEntryWords read_entry_words(const Geometry& geo, const Phase1Buffers& p1,
                                                           const ChunkKeys<ReadSlots>& chunk, int q) {
  const std::uint64_t key = chunk.reads.keys[q];
  const std::int64_t i = chunk.reads.layout.token(key), index = i * geo.R + chunk.reads.layout.lane(key);
  return ReadEntryWords{static_cast<std::uint32_t>(i), static_cast<std::uint32_t>(index),
                        p1.q_w[chunk.n * chunk.CR + index]};
}

// Completes the task of the worker of slot `local`: its write group of write_size entries (0:
// none) and its read group starting at sorted read position first_read (-1: none). A group of at
// most one write entry and one read entry gets its read entry (the write entry is the position's
// own, set before).
template <typename ReadSlots>
__device__ __forceinline__ void finish_task(const Geometry& geo, const Phase1Buffers& p1,
                                            const ChunkKeys<ReadSlots>& chunk, std::int64_t local, int write_size,
                                            int first_read, SlotTask& task) {
  const int read_size = first_read >= 0 ? group_size(chunk.read_slots, chunk.CR, first_read, local) : 0;
  task.local = static_cast<std::int32_t>(local);
  task.sizes = write_size | read_size << kReadSizeShift;
  if (write_size == 1 && read_size == 1) {
    const ReadEntryWords read = read_entry_words(geo, p1, chunk, first_read);
    task.tokens |= read.index << 16;
    task.read_q_w = read.q_w;
  }
}

// Parallel decomposition (kernel chunk_slot_tasks): one CTA of kThreads per chunk, three passes
// split by __syncthreads:
//   1. stage: the local slots of the chunk's C*R sorted read keys go to shared memory as u32
//      (when C*R <= kMaxStagedReads and a slot fits 32 bits; otherwise the passes below take them
//      from the read keys in global memory), and one `claimed` byte per read position is cleared;
//   2. write positions q = t, t + kThreads, ..: a group start (its key's slot differs from the
//      previous key's) walks its group's keys for the size and finds the first read of its slot by
//      a binary search of the read slots (every search of a chunk has the same trip count); it
//      claims that read position (distinct slots claim distinct positions: one writer per byte);
//   3. read positions: a read group start that no write group claimed starts a slot the chunk
//      reads but does not write (each written slot's write group claimed its first read position
//      in pass 2): the read-only worker, which finds its group's size as in pass 2.
//   In passes 2 and 3 a position j = 1 .. dot_steps - 1 places after the start of a real group
//   that has a worker (any write group; a read group that no write group claimed) records j in
//   its idle task (helper_offset): the slot kernel's warp there may take some of the group's
//   column steps (slot_split.cuh). Found by at most dot_steps - 1 probes backwards.
// A chunk's slots ascend along its sorted keys (the chunk field of every key is n), so the search
// by slot finds the position of lower_bound(key (n, s, 0, 0)). Integer work and copies only; each
// task has one writer; consecutive threads store consecutive tasks.
//
// Dynamic shared memory: [kStaged ? C*R : 0] u32 read slots, then C*R claimed bytes (rounded up to
// whole words).
template <bool kStaged>
__global__ void __launch_bounds__(kThreads)
    chunk_slot_tasks(Geometry geo, Inputs in, Phase1Buffers p1, KeyLayout read_layout,
                     const std::uint64_t* __restrict__ read_keys, SlotTask* __restrict__ tasks) {
  extern __shared__ std::uint32_t shared_words[];
  const int CW = static_cast<int>(geo.C * geo.W), CR = static_cast<int>(geo.C * geo.R);
  const int t = static_cast<int>(threadIdx.x);
  const std::int64_t n = blockIdx.x;
  const KeySlots reads{read_keys + n * CR, read_layout};
  std::uint32_t* staged = shared_words;
  std::uint32_t* claimed_words = shared_words + (kStaged ? CR : 0);
  std::uint8_t* claimed = reinterpret_cast<std::uint8_t*>(claimed_words);

  // 1. Stage the read slots, clear the claims.
  if constexpr (kStaged) {
#pragma unroll 4
    for (int q = t; q < CR; q += kThreads) staged[q] = static_cast<std::uint32_t>(reads[q]);
  }
  for (int w = t; w < (CR + 3) / 4; w += kThreads) claimed_words[w] = 0;
  __syncthreads();

  using ReadSlots = std::conditional_t<kStaged, StagedSlots, KeySlots>;
  ReadSlots read_slots{};
  if constexpr (kStaged) read_slots = StagedSlots{staged};
  else read_slots = reads;
  const ChunkKeys<ReadSlots> chunk{n, CW, CR, KeySlots{p1.keys + n * CW, geo.keys}, reads, read_slots};
  SlotTask* chunk_tasks = tasks + n * (CW + CR);
  const int steps = static_cast<int>(dot_steps_of(geo.hd));

  // 2. Write positions: every written slot's worker, claiming its slot's first read position.
  for (int q = t; q < CW; q += kThreads) {
    SlotTask task{};
    const std::int64_t local = chunk.writes[q];
    if (local != geo.sps) set_write_entry(geo, in, p1, chunk, q, task);
    if (starts_group(chunk.writes, q, local, geo.sps)) {
      const int write_size = group_size(chunk.writes, CW, q, local);
      const int first_read = find_slot(read_slots, CR, local);
      task.role = first_read >= 0 ? first_read : kSlotNoPartner;
      task.decay = p1.gdecay[n * CW + q];
      if (first_read >= 0) claimed[first_read] = 1;
      finish_task(geo, p1, chunk, local, write_size, first_read, task);
    } else if (local != geo.sps) {
      task.local = group_offset(chunk.writes, q, local, steps);
    }
    chunk_tasks[q] = task;
  }
  __syncthreads();

  // 3. Read positions: the workers of the slots read but not written.
  for (int q = t; q < CR; q += kThreads) {
    SlotTask task{};
    const std::int64_t local = read_slots[q];
    if (local != geo.sps) {
      const ReadEntryWords read = read_entry_words(geo, p1, chunk, q);
      task.tokens = read.token | read.index << 16;
      task.read_q_w = read.q_w;
    }
    if (starts_group(read_slots, q, local, geo.sps) && claimed[q] == 0) {
      task.role = kSlotNoPartner;
      finish_task(geo, p1, chunk, local, 0, q, task);
    } else if (local != geo.sps && !starts_group(read_slots, q, local, geo.sps)) {
      const int j = group_offset(read_slots, q, local, steps);
      if (j > 0 && claimed[q - j] == 0) task.local = j;
    }
    chunk_tasks[CW + q] = task;
  }
}

}  // namespace

void plan_slot_tasks(const Geometry& geo, Workspace& ws, BackwardBuffers& bb) {
  ws.plan(&bb.slot_tasks, geo.N * (geo.C * geo.W + geo.C * geo.R));
}

void find_slot_tasks(const Geometry& geo, const Inputs& in, const Phase1Buffers& p1, const BackwardBuffers& bb,
                     cudaStream_t stream) {
  const std::int64_t reads = geo.C * geo.R;
  const bool staged = reads <= kMaxStagedReads && bb.read_layout.slot_bits <= 32;
  const std::size_t smem = static_cast<std::size_t>((staged ? reads : 0) + (reads + 3) / 4) * sizeof(std::uint32_t);
  const auto kernel = staged ? chunk_slot_tasks<true> : chunk_slot_tasks<false>;
  allow_dynamic_shared_memory(kernel, smem, "cudaFuncSetAttribute (chunk_slot_tasks shared memory)");
  kernel<<<static_cast<unsigned>(geo.N), kThreads, smem, stream>>>(geo, in, p1, bb.read_layout, bb.read_keys,
                                                                   bb.slot_tasks);
  check_launch("chunk_slot_tasks");
}

}  // namespace sdm::cuda

// slot_task_data.cuh - what a worker of the backward's slot kernels (slots.cu, slots_staged.cu)
// takes from its SlotTask (backward.hpp): the group sizes, and for a group of at most one write
// entry and one read entry the entries themselves (no load). Entry rows are token i times
// `stride`, the stride of the token rows the walk reads (hd in global memory, kWarpCols staged).
#pragma once

#include <cstdint>

#include "cuda/backward/backward.hpp"
#include "cuda/backward/slot_reads.cuh"
#include "cuda/backward/slot_writes.cuh"

namespace sdm::cuda::slot_side {

__device__ __forceinline__ int write_size_of(const SlotTask& task) { return task.sizes & ((1 << kReadSizeShift) - 1); }
__device__ __forceinline__ int read_size_of(const SlotTask& task) { return task.sizes >> kReadSizeShift; }

// Whether the task holds its group's entries: at most one write entry and one read entry.
__device__ __forceinline__ bool task_holds_entries(const SlotTask& task) {
  return write_size_of(task) <= 1 && read_size_of(task) <= 1;
}

// A position's own entry (SlotTask's second 16 bytes, backward.hpp) in one load; `task` is read
// only while the slot kernels run.
struct EntryWords {
  std::uint32_t tokens;
  float write_scale, write_k_eff, read_q_w;
};
__device__ __forceinline__ EntryWords entry_words(const SlotTask* task) {
  const uint4 v = __ldg(reinterpret_cast<const uint4*>(&task->tokens));
  return EntryWords{v.x, __uint_as_float(v.y), __uint_as_float(v.z), __uint_as_float(v.w)};
}
// The two halves of an entry's packed `tokens` word (a task's or EntryWords'): token i, read index.
__device__ __forceinline__ int entry_token(std::uint32_t tokens) { return static_cast<int>(tokens & 0xffffu); }
__device__ __forceinline__ int read_index(std::uint32_t tokens) { return static_cast<int>(tokens >> 16); }

// The dot planes moved to index e.
__device__ __forceinline__ DotPlanes planes_at(const DotPlanes& planes, std::int64_t e) {
  return DotPlanes{planes.base + e, planes.stride};
}

// A task's single write entry (write group size 1, task_holds_entries).
__device__ __forceinline__ WriteEntry single_write(const SlotTask& task, std::int64_t stride) {
  return WriteEntry{entry_token(task.tokens) * stride, task.write_scale, task.write_k_eff};
}

// A task's single read entry (read group size 1, task_holds_entries) in every lane's `mine`.
__device__ __forceinline__ ReadGroup single_read(const SlotTask& task, const float* dy, const DotPlanes& dq_w,
                                                 std::int64_t stride, std::int64_t R, std::int64_t entry0) {
  const std::int64_t entry = read_index(task.tokens);
  ReadGroup reads;
  reads.dy = dy;
  reads.dq_w = dq_w;
  reads.size = 1;
  reads.mine.row = entry / R * stride;
  reads.mine.index = entry0 + entry;
  reads.mine.q_w = task.read_q_w;
  return reads;
}

}  // namespace sdm::cuda::slot_side

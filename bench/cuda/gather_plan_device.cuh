// gather_plan_device.cuh - the gather by distinct rows' plan (bench/gather_plan.hpp's greedy blocks)
// built on the GPU, for gather_floor.cu: what the engine would run once a call, timed there and
// checked against the host plan before it goes into the engine.
//
// CTA n (chunk n = ti * P + p; kPlanThreads threads, W + R <= kPlanThreads): thread t holds entry
// t of the current token (k lanes, then q lanes). The open block's rows are a hash set in shared
// memory (open addressing, linear probing, capacity a power of two >= 2 max_rows). Token by token:
// each entry with a row inserts its slot (atomicCAS); the slots new to the block are counted
// (__syncthreads_count); where they would pass max_rows, the open block closes before the token
// and the token is inserted again into the emptied set. A new slot's ordinal is the block's count
// so far plus its rank among the token's new slots, ranked by the lowest thread naming it
// (atomicMin), so the ordinals are the same every run; that thread stores the row. Then every entry
// reads its ordinal. Block b of chunk n goes to blocks[n * C + b] (block_count[n] of them), its rows
// to the chunk's region of rows, from n * C (W + R). Blocks and row sets are the host plan's (the
// same greedy rule); the ordinals number a block's rows in first-use order instead of ascending.
#pragma once

#include <cuda_runtime.h>

#include <climits>
#include <cstdint>

#include "gather_plan.hpp"

namespace sdm::bench {

constexpr int kPlanThreads = 512;

struct DevicePlanArgs {
  int C, W, R, max_rows, capacity;      // capacity: the hash set's, a power of two >= 2 max_rows
  const std::int32_t *k_slot, *q_slot;  // [chunks * C, W] / [.., R], -1: no row
  GatherBlock* blocks;                  // [chunks, C]
  std::int32_t* block_count;            // [chunks]
  std::int32_t* rows;                   // [chunks, C (W + R)]
  std::int16_t *k_ord, *q_ord;
};

// Shared memory of a plan CTA: key, ordinal and owner words of the set, and the warps' counts.
inline std::size_t device_plan_smem(int capacity) {
  return static_cast<std::size_t>(capacity) * 3 * sizeof(std::int32_t) + (kPlanThreads / 32) * sizeof(int);
}

__global__ void __launch_bounds__(kPlanThreads) plan_gather_blocks(DevicePlanArgs a) {
  extern __shared__ std::int32_t set_words[];
  std::int32_t* key = set_words;                 // slot, -1: empty
  std::int32_t* ordinal = key + a.capacity;      // -2: new in this token, ordinal pending
  std::int32_t* owner = ordinal + a.capacity;    // lowest thread naming the slot in its first token
  int* warp_reps = owner + a.capacity;
  const int t = static_cast<int>(threadIdx.x), warp = t / 32, lane = t % 32;
  const std::int64_t n = blockIdx.x;
  const std::int64_t row_base = n * a.C * (a.W + a.R);
  const unsigned mask = static_cast<unsigned>(a.capacity) - 1u;
  const auto clear = [&] {
    for (int h = t; h < a.capacity; h += kPlanThreads) key[h] = -1, owner[h] = INT_MAX;
  };
  clear();
  __syncthreads();
  int first = 0, count = 0, rows_used = 0, blocks = 0;
  for (int i = 0; i < a.C; ++i) {
    const std::int64_t token = n * a.C + i;
    std::int32_t slot = -1;
    if (t < a.W) slot = a.k_slot[token * a.W + t];
    else if (t < a.W + a.R) slot = a.q_slot[token * a.R + (t - a.W)];
    int pos = -1;
    const auto insert = [&] {
      bool inserted = false;
      if (slot >= 0) {
        unsigned h = (static_cast<unsigned>(slot) * 0x9e3779b1u) & mask;
        for (;;) {
          const std::int32_t prev = atomicCAS(&key[h], -1, slot);
          if (prev == -1 || prev == slot) {
            inserted = prev == -1;
            break;
          }
          h = (h + 1u) & mask;
        }
        pos = static_cast<int>(h);
        if (inserted) ordinal[pos] = -2;
        atomicMin(&owner[pos], t);
      }
      return __syncthreads_count(inserted);
    };
    int fresh = insert();
    if (count + fresh > a.max_rows) {  // CTA-uniform: the open block closes before token i
      if (t == 0) a.blocks[n * a.C + blocks] = GatherBlock{static_cast<std::int32_t>(n), first, i - first,
                                                           static_cast<std::int32_t>(row_base + rows_used), count};
      ++blocks, rows_used += count, first = i, count = 0;
      clear();
      __syncthreads();
      fresh = insert();
    }
    const bool rep = slot >= 0 && ordinal[pos] == -2 && owner[pos] == t;
    const unsigned reps = __ballot_sync(0xffffffffu, rep);
    if (lane == 0) warp_reps[warp] = __popc(reps);
    __syncthreads();
    if (rep) {
      int rank = __popc(reps & ((1u << lane) - 1u));
      for (int w = 0; w < warp; ++w) rank += warp_reps[w];
      ordinal[pos] = count + rank;
      a.rows[row_base + rows_used + count + rank] = slot;
    }
    __syncthreads();
    if (t < a.W) a.k_ord[token * a.W + t] = static_cast<std::int16_t>(slot >= 0 ? ordinal[pos] : -1);
    else if (t < a.W + a.R) a.q_ord[token * a.R + (t - a.W)] = static_cast<std::int16_t>(slot >= 0 ? ordinal[pos] : -1);
    count += fresh;
    __syncthreads();  // every ordinal read before the next token's slots are marked new
  }
  if (t == 0) {
    a.blocks[n * a.C + blocks] = GatherBlock{static_cast<std::int32_t>(n), first, a.C - first,
                                             static_cast<std::int32_t>(row_base + rows_used), count};
    a.block_count[n] = blocks + 1;
  }
}

}  // namespace sdm::bench

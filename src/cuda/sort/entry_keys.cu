// entry_keys.cu - make_entry_keys, the one kernel that builds the write and the read keys
// (entry_keys.hpp has the key; entry_key_rules.hpp the grid and per-entry rules), then the
// per-chunk sort (chunk_sort.hpp).
//
// make_entry_keys<Slots>: one thread per entry, a CTA per block of whole tokens of one chunk;
// Slots says where an entry's slot comes from (WriteSlots: k_idx; ReadSlots: Phase 1's q_slot).
// Repeated write lanes (WriteSlots, unless distinct_writes): each thread stages its repeat word in
// shared memory; a lane repeats when an earlier lane of its token holds the same word: the lanes of
// its warp by one __match_any_sync, the token's lanes in earlier warps from shared memory (only the
// warp's first token can start in an earlier warp; its lanes read the same words in step:
// broadcasts). An integer-only test: any order of the comparisons gives the same answer.
#include "cuda/sort/entry_keys.hpp"

#include "cuda/common/cuda_check.hpp"
#include "cuda/common/values.cuh"
#include "cuda/sort/chunk_sort.hpp"
#include "cuda/sort/entry_key_rules.hpp"

namespace sdm::cuda {
namespace {

constexpr unsigned kAll = 0xffffffffu;

// Write entries: the op's k_idx; stores k_slot.
struct WriteSlots {
  const void* k_idx;
  bool index64;
  bool mask_repeats;  // !Inputs::distinct_writes
  std::int32_t* k_slot;

  __device__ __forceinline__ std::int64_t local_slot(const Geometry& geo, const EntryPlace& at, int lane,
                                                     std::int64_t) const {
    const std::int64_t idx = at.t < geo.T ? load_index(k_idx, index64, at.token * geo.W + lane) : 0;
    return local_slot_of_index(geo, at, idx);
  }
  __device__ __forceinline__ void store(const Geometry& geo, const EntryPlace& at, std::int64_t e,
                                        std::int64_t local) const {
    k_slot[e] = row_of_local_slot(geo, at, local);
  }
};

// Read entries: Phase 1's q_slot (lookup_reads masked them already); reads may repeat.
struct ReadSlots {
  const std::int32_t* q_slot;
  static constexpr bool mask_repeats = false;

  __device__ __forceinline__ std::int64_t local_slot(const Geometry& geo, const EntryPlace& at, int,
                                                     std::int64_t e) const {
    return local_slot_of_row(geo, at, q_slot[e]);
  }
  __device__ __forceinline__ void store(const Geometry&, const EntryPlace&, std::int64_t, std::int64_t) const {}
};

// Whether an earlier lane of th's token names the same slot (a candidate's local slot < sps).
// Every thread of the CTA calls it (it syncs the CTA).
__device__ __forceinline__ bool repeats_earlier_lane(const Geometry& geo, const KeyLayout& layout, std::int64_t n,
                                                     const KeyThread& th, std::int64_t local) {
  __shared__ std::uint64_t staged[kKeyThreads];
  const int u = static_cast<int>(threadIdx.x);
  const bool candidate = th.inside && local != geo.sps;
  const std::uint64_t word = repeat_word(geo, layout, n, local, th);
  staged[u] = word;
  __syncthreads();
  const unsigned peers = __match_any_sync(kAll, word) & __ballot_sync(kAll, candidate);
  bool repeat = (peers & ((1u << (u % 32)) - 1)) != 0;
#pragma unroll 4
  for (int e = th.token_first; e < warp_first(u); ++e) repeat |= staged[e] == word;
  return candidate && repeat;
}

template <typename Slots>
__global__ void __launch_bounds__(kKeyThreads)
    make_entry_keys(Geometry geo, KeyLayout layout, KeyGrid grid, Slots slots, std::uint64_t* __restrict__ keys) {
  const std::int64_t n = blockIdx.x / grid.ctas_per_chunk;
  const KeyThread th = key_thread(grid, geo.C, blockIdx.x % grid.ctas_per_chunk, static_cast<int>(threadIdx.x));
  const EntryPlace at = entry_place(geo, n, th.i);
  const std::int64_t e = (n * geo.C + th.i) * grid.lanes + th.lane;
  std::int64_t local = th.inside ? slots.local_slot(geo, at, th.lane, e) : geo.sps;
  if (slots.mask_repeats && repeats_earlier_lane(geo, layout, n, th, local)) local = geo.sps;  // CTA-uniform test
  if (!th.inside) return;
  keys[e] = layout.encode(n, local, th.i, th.lane);
  slots.store(geo, at, e, local);
}

template <typename Slots>
void launch_entry_keys(const Geometry& geo, const KeyLayout& layout, std::int64_t lanes, const Slots& slots,
                       std::uint64_t* keys, cudaStream_t stream) {
  const KeyGrid grid = key_grid(geo.C, lanes);
  make_entry_keys<Slots><<<static_cast<unsigned>(geo.N) * grid.ctas_per_chunk, kKeyThreads, 0, stream>>>(
      geo, layout, grid, slots, keys);
  check_launch("make_entry_keys");
}

// The sort of entries with `lanes` lanes on their chunk and slot bits (planned and run alike).
ChunkSort entry_key_sort(const Geometry& geo, const KeyLayout& layout, std::int64_t lanes) {
  const int begin = layout.lane_bits + layout.token_bits;
  return plan_chunk_sort(geo.N, geo.C * lanes, begin, begin + layout.slot_bits, layout.total_bits());
}

}  // namespace

std::size_t entry_key_sort_bytes(const Geometry& geo, const KeyLayout& layout, std::int64_t lanes) {
  return entry_key_sort(geo, layout, lanes).temp_bytes;
}

void sort_write_keys(const Geometry& geo, const Inputs& in, std::uint64_t* unsorted, std::uint64_t* sorted,
                     std::int32_t* k_slot, void* temp, cudaStream_t stream) {
  launch_entry_keys(geo, geo.keys, geo.W, WriteSlots{in.k_idx, in.k_index64, !in.distinct_writes, k_slot}, unsorted,
                    stream);
  sort_chunk_keys(entry_key_sort(geo, geo.keys, geo.W), unsorted, sorted, temp, stream);
}

void sort_read_keys(const Geometry& geo, const KeyLayout& layout, const std::int32_t* q_slot, std::uint64_t* unsorted,
                    std::uint64_t* sorted, void* temp, cudaStream_t stream) {
  launch_entry_keys(geo, layout, geo.R, ReadSlots{q_slot}, unsorted, stream);
  sort_chunk_keys(entry_key_sort(geo, layout, geo.R), unsorted, sorted, temp, stream);
}

}  // namespace sdm::cuda

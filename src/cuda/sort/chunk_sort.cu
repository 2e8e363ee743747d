// chunk_sort.cu - the stable sort of the engine's 64-bit keys, one CTA per chunk (see
// chunk_sort.hpp for the contract). Used by Phase 1 (write keys) and the backward (read keys).
//
// Why a per-chunk sort is the global sort: the global stable sort on bits [begin_bit, total_bits)
// orders keys by (chunk, slot) and keeps equal ones in input order. The chunk bits are the most
// significant and chunk n's keys already fill [n*per_chunk, (n+1)*per_chunk) with n ascending, so
// every key stays in its chunk's segment, and within a segment the keys differ in the sorted range
// only in their slot bits: the global result is, segment by segment, the stable sort on the slot
// bits [begin_bit, slot_end_bit) alone. (Fewer bits: 4 LSD passes for 15-16 slot bits, 5 for 17.)
//
// Chunks of up to 16384 keys (kMaxChunkSortTile): sort_chunk_tiles, one CTA per chunk (a cub block
// radix sort on the slot bits, stable; its tiles and storage are described above the kernel).
// Larger chunks (C * W or C * R up to kMaxChunk * kMaxWidth = 65536 keys), and a tile whose shared
// memory the device cannot give one CTA (the 64-bit 16384-key tile's 132 KiB on the 99 KiB parts:
// sm_86, sm_89, sm_120): cub::DeviceRadixSort::SortKeys over the whole array on [begin_bit,
// total_bits). Deterministic either way: integer keys ranked by prefix counts, no atomics, the same
// output whatever the timing or the SM count.
#include "cuda/sort/chunk_sort.hpp"

#include <string>
#include <type_traits>

#include <cub/block/block_exchange.cuh>
#include <cub/block/block_load.cuh>
#include <cub/block/block_radix_sort.cuh>
#include <cub/device/device_radix_sort.cuh>

#include "cuda/common/cuda_check.hpp"
#include "cuda/common/device_limits.hpp"
#include "cuda/common/launch_bounds.cuh"
#include "sdm/error.hpp"

namespace sdm::cuda {
namespace {

// log2 of a power of two.
__host__ __device__ constexpr int log2_of(int x) { return x == 1 ? 0 : 1 + log2_of(x / 2); }

// Whether a tile of `tile` keys sorts 32-bit values: the slot bits and a position in the tile fit.
constexpr bool narrow_tile(int tile, int slot_bits) { return slot_bits + log2_of(tile) <= 32; }

// A tile of kThreads x kItems keys. Wide: the 64-bit keys are loaded (cub warp-transpose load) and
// sorted. Narrow (narrow_tile): each key's slot is loaded into a 32-bit word (warp-striped, then
// the same warp transpose on the 32-bit words), each word becomes slot << log2(kTile) | its
// position q in the chunk, the words are sorted on their slot bits, and the sorted position k
// takes the input key at the position its word carries.
template <int kThreads, int kItems, bool kNarrow>
struct TileSort {
  static constexpr int kTile = kThreads * kItems;
  using Sorted = std::conditional_t<kNarrow, std::uint32_t, std::uint64_t>;
  using Load = cub::BlockLoad<std::uint64_t, kThreads, kItems, cub::BLOCK_LOAD_WARP_TRANSPOSE>;
  using Transpose = cub::BlockExchange<std::uint32_t, kThreads, kItems>;
  // cub's rank keeps its outer scan's counters in registers (MEMOIZE_OUTER_SCAN, the default) up
  // to 8 keys a thread; at 16 those registers would spill (64 at most): it re-reads shared memory.
  static constexpr bool kMemoizeScan = kItems <= 8;
  using Sort = cub::BlockRadixSort<Sorted, kThreads, kItems, cub::NullType, 4, kMemoizeScan>;
  union WideStorage {
    typename Load::TempStorage load;
    typename Sort::TempStorage sort;
  };
  union NarrowStorage {
    typename Transpose::TempStorage transpose;
    typename Sort::TempStorage sort;
  };
  using Storage = std::conditional_t<kNarrow, NarrowStorage, WideStorage>;
};

// sort_chunk_tiles<kThreads, kItems, kNarrow>: grid (chunks) in gridDim.x, kThreads threads, one
//   chunk of per_chunk <= kTile = kThreads * kItems keys per CTA. The smallest tile holding a chunk
//   is used: 1024 = 256 x 4, 2048 = 256 x 8, 4096 = 512 x 8, 8192 = 1024 x 8, 16384 = 1024 x 16
//   (threads x keys per thread).
//   1. Coalesced warp-striped reads (cub's warp transpose), then a transpose through shared memory
//      within each warp into a blocked arrangement: thread t holds positions t*kItems .. t*kItems +
//      kItems-1. Wide: the keys, positions past per_chunk the all-ones key. Narrow: the keys' slot
//      bits as 32-bit words (past per_chunk: the all-ones slot, as from the all-ones key).
//   2. cub::BlockRadixSort::SortBlockedToStriped on [begin_bit, slot_end_bit), 4 bits per pass.
//      It is stable (documented in CCCL's cub/block/block_radix_sort.cuh as shipped with CUDA 13.0:
//      "BlockRadixSort is stable"; an LSD radix sort whose BlockRadixRank ranks equal digits in
//      blocked, i.e. input, order). The padding keys are all ones in the sorted bits, so none sorts
//      before a real key: greater ones sort after, equal ones (a real slot equal to the all-ones
//      pattern) keep their input order, after every real key.
//      Narrow tiles (slot bits + log2(tile) <= 32: every engine config up to 2^19 slots per
//      stream at tiles up to 8192, 2^18 at 16384) sort 32-bit words slot << log2(tile) | q instead
//      (q = the key's position in the chunk, padding: all-ones slot, its own q past per_chunk) on
//      their slot bits: half the bytes through shared memory per pass; the ranks are the same as
//      the wide sort's (equal slots in q order).
//   3. The sorted keys come back striped (thread t holds ranks k*kThreads + t): the first per_chunk
//      are stored, coalesced (narrow: the input key at the sorted word's q, from L1 / L2).
//   Shared memory: the union of the transpose's and the sort's cub storage, dynamic (opted in
//   with cudaFuncSetAttribute above 48 KiB): wide 9.1, 16.5, 33, 66 and 132 KiB, narrow 9.1, 9.1,
//   18.1, 36.2 and 66 KiB (plan_chunk_sort takes the device-wide sort where the device's opt-in
//   limit per block is smaller).
// At most 64 registers (1024 threads resident per SM at least), so the tiles of 1024 threads run
// one CTA per SM. No tile spills but the wide 16384 one (16 64-bit keys a thread: 128 bytes a
// thread of spill stores and loads on sm_90, through L1; only for slot bits + 14 > 32).
template <int kThreads, int kItems, bool kNarrow>
__global__ void __launch_bounds__(kThreads, min_blocks(kThreads, 1024 / kThreads))
    sort_chunk_tiles(const std::uint64_t* __restrict__ in, std::uint64_t* __restrict__ out, int per_chunk,
                     int begin_bit, int slot_end_bit) {
  using Tile = TileSort<kThreads, kItems, kNarrow>;
  extern __shared__ __align__(16) unsigned char tile_storage[];
  auto& storage = *reinterpret_cast<typename Tile::Storage*>(tile_storage);
  const std::int64_t base = static_cast<std::int64_t>(blockIdx.x) * per_chunk;
  const int t = static_cast<int>(threadIdx.x);
  if constexpr (kNarrow) {
    constexpr int kPositionBits = log2_of(Tile::kTile);
    const int slot_bits = slot_end_bit - begin_bit;
    const std::uint64_t slot_mask = (std::uint64_t{1} << slot_bits) - 1;
    std::uint32_t values[kItems];
    {
      std::uint64_t keys[kItems];
      cub::LoadDirectWarpStriped(t, in + base, keys, per_chunk, ~std::uint64_t{0});
#pragma unroll
      for (int k = 0; k < kItems; ++k) values[k] = static_cast<std::uint32_t>((keys[k] >> begin_bit) & slot_mask);
    }
    typename Tile::Transpose(storage.transpose).WarpStripedToBlocked(values, values);
    __syncthreads();  // the sort reuses the transpose's shared memory
    // Blocked arrangement: thread t holds positions t * kItems + k.
#pragma unroll
    for (int k = 0; k < kItems; ++k) {
      values[k] = values[k] << kPositionBits | static_cast<std::uint32_t>(t * kItems + k);
    }
    typename Tile::Sort(storage.sort).SortBlockedToStriped(values, kPositionBits, kPositionBits + slot_bits);
    constexpr std::uint32_t kPositionMask = (std::uint32_t{1} << kPositionBits) - 1;
#pragma unroll
    for (int k = 0; k < kItems; ++k) {
      const int q = k * kThreads + t;
      if (q < per_chunk) out[base + q] = in[base + (values[k] & kPositionMask)];
    }
  } else {
    std::uint64_t keys[kItems];
    typename Tile::Load(storage.load).Load(in + base, keys, per_chunk, ~std::uint64_t{0});
    __syncthreads();  // the sort reuses the load's shared memory
    typename Tile::Sort(storage.sort).SortBlockedToStriped(keys, begin_bit, slot_end_bit);
#pragma unroll
    for (int k = 0; k < kItems; ++k) {
      const int q = k * kThreads + t;
      if (q < per_chunk) out[base + q] = keys[k];
    }
  }
}

template <int kThreads, int kItems, bool kNarrow>
constexpr std::size_t kTileBytes = sizeof(typename TileSort<kThreads, kItems, kNarrow>::Storage);

template <int kThreads, int kItems, bool kNarrow>
void launch_sort(const ChunkSort& plan, const std::uint64_t* in, std::uint64_t* out, cudaStream_t stream) {
  const auto kernel = sort_chunk_tiles<kThreads, kItems, kNarrow>;
  constexpr std::size_t smem = kTileBytes<kThreads, kItems, kNarrow>;
  allow_dynamic_shared_memory(kernel, smem, "cudaFuncSetAttribute (sort_chunk_tiles shared memory)");
  kernel<<<static_cast<unsigned>(plan.chunks), kThreads, smem, stream>>>(
      in, out, static_cast<int>(plan.per_chunk), plan.begin_bit, plan.slot_end_bit);
  check_launch("sort_chunk_tiles");
}

// The block-sort instantiations, smallest tile first: (threads, keys per thread).
constexpr int kTiles[] = {1024, 2048, 4096, 8192, 16384};
static_assert(kTiles[4] == kMaxChunkSortTile);

// Calls f.template operator()<kThreads, kItems>() with the instantiation of `tile` (one of kTiles).
template <typename F>
decltype(auto) with_tile(int tile, F&& f) {
  switch (tile) {
    case kTiles[0]: return f.template operator()<256, 4>();
    case kTiles[1]: return f.template operator()<256, 8>();
    case kTiles[2]: return f.template operator()<512, 8>();
    case kTiles[3]: return f.template operator()<1024, 8>();
    default: return f.template operator()<1024, 16>();  // kTiles[4]
  }
}
static_assert(TileSort<256, 4, false>::kTile == kTiles[0] && TileSort<256, 8, false>::kTile == kTiles[1] &&
              TileSort<512, 8, false>::kTile == kTiles[2] && TileSort<1024, 8, false>::kTile == kTiles[3] &&
              TileSort<1024, 16, false>::kTile == kTiles[4]);

// Whether one CTA of the current device may hold the dynamic shared memory of a tile's sort.
bool tile_fits_device(int tile, int slot_bits) {
  const std::size_t bytes = with_tile(tile, [narrow = narrow_tile(tile, slot_bits)]<int kThreads, int kItems>() {
    return narrow ? kTileBytes<kThreads, kItems, true> : kTileBytes<kThreads, kItems, false>;
  });
  return bytes <= 48 * 1024 || bytes <= shared_memory_optin();
}

}  // namespace

ChunkSort plan_chunk_sort(std::int64_t chunks, std::int64_t per_chunk, int begin_bit, int slot_end_bit,
                          int total_bits) {
  if (chunks < 0 || per_chunk < 0 || begin_bit < 0 || begin_bit > slot_end_bit || slot_end_bit > total_bits ||
      total_bits > 64) {
    throw RuntimeError("sdm CUDA engine: invalid chunk sort (chunks " + std::to_string(chunks) + ", per_chunk " +
                       std::to_string(per_chunk) + ", bits " + std::to_string(begin_bit) + ".." +
                       std::to_string(slot_end_bit) + ".." + std::to_string(total_bits) + ")");
  }
  ChunkSort plan;
  plan.chunks = chunks;
  plan.per_chunk = per_chunk;
  plan.begin_bit = begin_bit;
  plan.slot_end_bit = slot_end_bit;
  plan.total_bits = total_bits;
  const std::int64_t count = chunks * per_chunk;
  if (count == 0) return plan;  // nothing to sort
  if (chunks <= 0x7fffffff) {    // gridDim.x
    for (const int tile : kTiles) {
      if (per_chunk <= tile) {
        if (tile_fits_device(tile, slot_end_bit - begin_bit)) plan.tile = tile;
        break;
      }
    }
    if (plan.tile != 0) return plan;
  }
  std::uint64_t* none = nullptr;  // a size query reads no keys
  check_cuda(cub::DeviceRadixSort::SortKeys(nullptr, plan.temp_bytes, none, none, count, begin_bit, total_bits),
             "cub::DeviceRadixSort::SortKeys (size query)");
  return plan;
}

void sort_chunk_keys(const ChunkSort& plan, const std::uint64_t* in, std::uint64_t* out, void* temp,
                     cudaStream_t stream) {
  if (plan.tile != 0) {
    // The narrow sort when the slot bits and a tile position fit 32 bits, else the wide one.
    return with_tile(plan.tile, [&]<int kThreads, int kItems>() {
      if (narrow_tile(plan.tile, plan.slot_end_bit - plan.begin_bit)) {
        launch_sort<kThreads, kItems, true>(plan, in, out, stream);
      } else {
        launch_sort<kThreads, kItems, false>(plan, in, out, stream);
      }
    });
  }
  const std::int64_t count = plan.chunks * plan.per_chunk;
  if (count == 0) return;
  std::size_t temp_bytes = plan.temp_bytes;
  check_cuda(cub::DeviceRadixSort::SortKeys(temp, temp_bytes, in, out, count, plan.begin_bit, plan.total_bits, stream),
             "cub::DeviceRadixSort::SortKeys");
}

}  // namespace sdm::cuda

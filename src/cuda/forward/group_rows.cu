// group_rows.cu - Phase 1's numbering of the write groups for the exact snapshot (docs/spec.md §4,
// core/snapshot_row_rule.hpp): after the write-key sort, each group's ordinal in its chunk and each
// chunk's first snapshot row, so that the group writer and the backward's slot walks find a group's
// row as group_first[n] + group_ordinal[n*C*W + q] (q: the group's first sorted position).
//
// number_groups: one CTA of kNumberThreads per chunk walks its sorted positions in tiles of
//   kNumberThreads; position q starts a group when starts_group holds (geometry.hpp: a real slot
//   differing from position q - 1's). Within a tile each warp's ballot gives a lane its starts
//   before it (popc), the warps' counts are summed in warp order in shared memory, and the tiles'
//   counts carry in tile order: the ordinal is the number of starts before q, an integer count in
//   a fixed order. It writes the ordinal at every start (-1 at every other position, when an
//   ordinal array is given) and the chunk's count into group_first[n].
// scan_group_counts: one CTA of kScanThreads turns group_first[0, N) into its exclusive scan in
//   place, n ascending (tiles of kScanThreads, each a cub::BlockScan exclusive sum, plus the carry
//   of the earlier tiles), and writes the total into group_first[N].
// Integer work only, no atomics: the same numbers on every run. No host sync, no allocation: it
// runs inside a captured graph.
#include <cub/block/block_scan.cuh>

#include "cuda/common/cuda_check.hpp"
#include "cuda/forward/phase1_kernels.hpp"

namespace sdm::cuda {
namespace {

constexpr int kNumberThreads = 256;
constexpr int kScanThreads = 1024;
constexpr unsigned kFullWarp = 0xffffffffu;

__global__ void __launch_bounds__(kNumberThreads)
    number_groups(Geometry geo, const std::uint64_t* __restrict__ keys, std::int32_t* __restrict__ ordinal,
                  std::int64_t* __restrict__ group_first) {
  __shared__ int warp_starts[kNumberThreads / 32];
  const int CW = static_cast<int>(geo.C * geo.W), tid = static_cast<int>(threadIdx.x);
  const int lane = tid % 32, warp = tid / 32;
  const std::int64_t n = blockIdx.x;
  const KeySlots slots{keys + n * CW, geo.keys};
  int carried = 0;  // starts in the earlier tiles
  for (int tile = 0; tile < CW; tile += kNumberThreads) {
    const int q = tile + tid;
    const bool start = q < CW && starts_group(slots, q, slots[q], geo.sps);
    const unsigned ballot = __ballot_sync(kFullWarp, start);
    if (lane == 0) warp_starts[warp] = __popc(ballot);
    __syncthreads();
    int before = carried + __popc(ballot & ((1u << lane) - 1u)), tile_starts = 0;
    for (int w = 0; w < kNumberThreads / 32; ++w) {
      if (w < warp) before += warp_starts[w];
      tile_starts += warp_starts[w];
    }
    if (ordinal != nullptr && q < CW) ordinal[n * CW + q] = start ? before : -1;
    carried += tile_starts;
    __syncthreads();  // warp_starts is rewritten by the next tile
  }
  if (tid == 0) group_first[n] = carried;
}

using CountScan = cub::BlockScan<std::int64_t, kScanThreads, cub::BLOCK_SCAN_WARP_SCANS>;

__global__ void __launch_bounds__(kScanThreads) scan_group_counts(std::int64_t chunks, std::int64_t* group_first) {
  __shared__ typename CountScan::TempStorage scan_storage;
  const int tid = static_cast<int>(threadIdx.x);
  std::int64_t carried = 0;  // groups of the earlier tiles' chunks (the same in every thread)
  for (std::int64_t tile = 0; tile < chunks; tile += kScanThreads) {
    const std::int64_t n = tile + tid;
    const std::int64_t count = n < chunks ? group_first[n] : 0;
    std::int64_t before = 0, tile_total = 0;
    CountScan(scan_storage).ExclusiveSum(count, before, tile_total);
    if (n < chunks) group_first[n] = carried + before;
    carried += tile_total;
    __syncthreads();  // scan_storage is reused by the next tile
  }
  if (tid == 0) group_first[chunks] = carried;
}

}  // namespace

void launch_number_groups(const Geometry& geo, const std::uint64_t* keys, std::int32_t* ordinal,
                          std::int64_t* group_first, cudaStream_t stream) {
  number_groups<<<static_cast<unsigned>(geo.N), kNumberThreads, 0, stream>>>(geo, keys, ordinal, group_first);
  check_launch("number_groups");
  scan_group_counts<<<1, kScanThreads, 0, stream>>>(geo.N, group_first);
  check_launch("scan_group_counts");
}

}  // namespace sdm::cuda

// reads.cu - read records of the backward: the read entries of every chunk sorted by slot
// (the single-writer read side of the G update, docs/spec.md §4, §6).
//
// Input:  Phase 1's q_slot [N, C, R] (absolute row, -1 for padding / masked reads).
// Output: read_keys u64 [N*C*R] sorted; key = chunk n | local slot (sps for padding / masked:
//         after every real slot) | token i | lane r (common/geometry.hpp's KeyLayout with R lanes).
//         Chunk n's sorted reads are [n*C*R, (n+1)*C*R): slot groups in (token, lane) order.
// make_read_keys: one thread per read entry (a CTA per slice of one chunk), key of entry
// (n, i, r) at n*C*R + i*R + r; then sort_chunk_keys (chunk_sort.hpp): the keys arrive in (token,
// lane) order within each chunk, so a stable sort of each chunk's C*R keys on its slot bits alone
// leaves them fully sorted (one CTA per chunk up to 8192 keys, else cub's device-wide radix sort).
#include <string>

#include "cuda/backward/backward.hpp"
#include "cuda/sort/chunk_sort.hpp"
#include "cuda/common/cuda_check.hpp"
#include "sdm/error.hpp"

namespace sdm::cuda {
namespace {

constexpr int kThreads = 256;

// CTA b covers the reads [s * kThreads, (s + 1) * kThreads) of chunk b / slices, s = b % slices
// (32-bit index math inside the chunk).
__global__ void make_read_keys(Geometry geo, KeyLayout layout, unsigned slices, const std::int32_t* __restrict__ q_slot,
                               std::uint64_t* __restrict__ keys) {
  const std::int64_t n = blockIdx.x / slices;
  const int q = static_cast<int>((blockIdx.x % slices) * kThreads + threadIdx.x), R = static_cast<int>(geo.R);
  if (q >= static_cast<int>(geo.C) * R) return;
  const std::int64_t i = q / R, r = q % R, e = n * geo.C * R + q;
  const std::int32_t slot = q_slot[e];
  const std::int64_t local = slot < 0 ? geo.sps : slot - (n % geo.P) * geo.sps;
  keys[e] = layout.encode(n, local, i, r);
}

// The sort of the read keys (planned the same way by plan_read_records and sort_reads).
ChunkSort read_key_sort(const Geometry& geo, const KeyLayout& layout) {
  const int begin = sorted_bits_begin(layout);
  return plan_chunk_sort(geo.N, geo.C * geo.R, begin, begin + layout.slot_bits, layout.total_bits());
}

}  // namespace

KeyLayout read_key_layout(const Geometry& geo) {
  KeyLayout layout;
  layout.lane_bits = bits_for(static_cast<std::uint64_t>(geo.R - 1));
  layout.token_bits = bits_for(static_cast<std::uint64_t>(geo.C - 1));
  layout.slot_bits = bits_for(static_cast<std::uint64_t>(geo.sps));
  layout.chunk_bits = bits_for(static_cast<std::uint64_t>(geo.N - 1));
  if (layout.total_bits() > 64) {
    throw RuntimeError("sdm CUDA backward: this call needs a " + std::to_string(layout.total_bits()) +
                       "-bit read key (chunks " + std::to_string(geo.N) + ", slots_per_stream " +
                       std::to_string(geo.sps) + ", R " + std::to_string(geo.R) +
                       "), more than the 64 bits supported on CUDA so far; split the call over time or streams");
  }
  return layout;
}

void plan_read_records(const Geometry& geo, Workspace& ws, BackwardBuffers& bb) {
  const std::int64_t count = geo.read_entries();
  bb.read_layout = read_key_layout(geo);
  ws.plan(&bb.read_keys_unsorted, count);
  ws.plan(&bb.read_keys, count);
  bb.read_sort_temp_bytes = read_key_sort(geo, bb.read_layout).temp_bytes;
  ws.plan_bytes(&bb.read_sort_temp, bb.read_sort_temp_bytes);
}

void sort_reads(const Geometry& geo, const Phase1Buffers& p1, const BackwardBuffers& bb, cudaStream_t stream) {
  const unsigned slices = static_cast<unsigned>((geo.C * geo.R + kThreads - 1) / kThreads);
  make_read_keys<<<static_cast<unsigned>(geo.N) * slices, kThreads, 0, stream>>>(geo, bb.read_layout, slices, p1.q_slot,
                                                                                 bb.read_keys_unsorted);
  check_launch("make_read_keys");
  sort_chunk_keys(read_key_sort(geo, bb.read_layout), bb.read_keys_unsorted, bb.read_keys, bb.read_sort_temp, stream);
}

}  // namespace sdm::cuda

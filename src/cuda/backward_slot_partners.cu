// backward_slot_partners.cu - who works on which slot in slot_groups_backward, found once per call
// for every chunk (before the reverse loop: it reads only Phase 1's write keys and the read keys).
//
// For chunk n the slot kernel has one warp per sorted position: the C*W write positions, then the
// C*R read positions. partner[n*(C*W + C*R) + position] tells that warp its role (encoding in
// backward.hpp, kSlotIdle / kSlotNoPartner):
//   write position q starting a write group of local slot s: the first sorted read position of s in
//     the chunk (>= 0), or kSlotNoPartner when the chunk does not read s;
//   read position q starting a read group of s that the chunk does not write: kSlotNoPartner (the
//     read-only worker of s);
//   every other position (inside a group, padding / masked entries, a read group of a written slot,
//     which its write worker finishes): kSlotIdle.
// So a slot-kernel warp needs no search over the other side's keys inside the reverse loop.
//
// Parallel decomposition: one thread per position; grid (N, position slices of 256). A group start
// (its key's slot differs from the previous key's) finds the other side's first key of its slot
// by a binary search of that chunk's sorted keys (lower_bound_key). Integer work only; each output
// element has one writer.
#include "backward.hpp"
#include "backward_rows.cuh"
#include "cuda_check.hpp"

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

__global__ void __launch_bounds__(kThreads)
    find_slot_partners(Geometry geo, const std::uint64_t* __restrict__ write_keys, KeyLayout read_layout,
                       const std::uint64_t* __restrict__ read_keys, std::int32_t* __restrict__ partners) {
  const int CW = static_cast<int>(geo.C * geo.W), CR = static_cast<int>(geo.C * geo.R);
  const int position = static_cast<int>(blockIdx.y) * kThreads + static_cast<int>(threadIdx.x);
  if (position >= CW + CR) return;
  const std::int64_t n = blockIdx.x;
  const std::uint64_t* writes = write_keys + n * CW;
  const std::uint64_t* reads = read_keys + n * CR;
  std::int32_t partner = kSlotIdle;
  std::int64_t local = 0;
  if (position < CW) {
    if (starts_group(writes, position, geo.keys, geo.sps, &local)) {
      const int first_read = find_slot(reads, CR, read_layout, n, local);
      partner = first_read >= 0 ? first_read : kSlotNoPartner;
    }
  } else if (starts_group(reads, position - CW, read_layout, geo.sps, &local)) {
    if (find_slot(writes, CW, geo.keys, n, local) < 0) partner = kSlotNoPartner;
  }
  partners[n * (CW + CR) + position] = partner;
}

}  // namespace

void plan_slot_partners(const Geometry& geo, Workspace& ws, BackwardBuffers& bb) {
  ws.plan(&bb.slot_partners, geo.N * (geo.C * geo.W + geo.C * geo.R));
}

void find_slot_partners(const Geometry& geo, const Phase1Buffers& p1, const BackwardBuffers& bb,
                        cudaStream_t stream) {
  const std::int64_t positions = geo.C * geo.W + geo.C * geo.R;
  const dim3 grid(static_cast<unsigned>(geo.N), static_cast<unsigned>((positions + kThreads - 1) / kThreads));
  find_slot_partners<<<grid, kThreads, 0, stream>>>(geo, p1.keys, bb.read_layout, bb.read_keys, bb.slot_partners);
  check_launch("find_slot_partners");
}

}  // namespace sdm::cuda

// reads.cu - read records of the backward: the read entries of every chunk sorted by slot (the
// single-writer read side of the G update, docs/spec.md §4, §6).
//
// Input:  Phase 1's q_slot [N, C, R] (absolute row, -1 for padding / masked reads).
// Output: read_keys u64 [N*C*R], chunk n's at [n*C*R, (n+1)*C*R): slot groups in (token, lane)
//         order, masked reads last; the key and its kernel are the write keys' (sort/entry_keys.hpp)
//         with R lanes (read_layout).
#include "cuda/backward/backward.hpp"
#include "cuda/sort/entry_keys.hpp"

namespace sdm::cuda {

void plan_read_records(const Geometry& geo, Workspace& ws, BackwardBuffers& bb) {
  const std::int64_t count = geo.read_entries();
  bb.read_layout = entry_key_layout(geo, geo.R);
  ws.plan(&bb.read_keys_unsorted, count);
  ws.plan(&bb.read_keys, count);
  bb.read_sort_temp_bytes = entry_key_sort_bytes(geo, bb.read_layout, geo.R);
  ws.plan_bytes(&bb.read_sort_temp, bb.read_sort_temp_bytes);
}

void sort_reads(const Geometry& geo, const Phase1Buffers& p1, const BackwardBuffers& bb, cudaStream_t stream) {
  sort_read_keys(geo, bb.read_layout, p1.q_slot, bb.read_keys_unsorted, bb.read_keys, bb.read_sort_temp, stream);
}

}  // namespace sdm::cuda

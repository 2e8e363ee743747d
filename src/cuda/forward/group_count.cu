// group_count.cu - the device count of the call's write groups (group_count.hpp).
#include "cuda/forward/group_count.hpp"

#include "cuda/forward/phase1_kernels.hpp"
#include "cuda/sort/entry_keys.hpp"

namespace sdm::cuda {

void plan_group_count(const Geometry& geo, Workspace& ws, GroupCount& count) {
  ws.plan(&count.keys_unsorted, geo.write_entries());
  ws.plan(&count.keys, geo.write_entries());
  ws.plan(&count.k_slot, geo.write_entries());
  ws.plan(&count.group_first, geo.N + 1);
  ws.plan_bytes(&count.sort_temp, entry_key_sort_bytes(geo, geo.keys, geo.W));
}

void run_group_count(const Geometry& geo, const Inputs& in, const GroupCount& count, cudaStream_t stream) {
  sort_write_keys(geo, in, count.keys_unsorted, count.keys, count.k_slot, count.sort_temp, stream);
  launch_number_groups(geo, count.keys, nullptr, count.group_first, stream);
}

}  // namespace sdm::cuda

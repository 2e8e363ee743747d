// write_groups_count.cu - the CUDA engine's write_groups_count (engine.hpp, sdm/ops.hpp): the
// call's write groups counted on its stream (group_count.hpp) and the total copied into `count`
// (int64, on the bank's device). No host sync: the caller reads `count` when it needs the value.
// Repeated write lanes are masked as in an unchecked call (Call with validate off), which gives
// the same count as the CPU engine's host count (core/snapshot_row_rule.hpp).
#include <cstdint>

#include "cuda/common/call.hpp"
#include "cuda/engine.hpp"
#include "cuda/forward/group_count.hpp"

namespace sdm::cuda {

void write_groups_count(const WriteReadArgs& args, const TensorRef& count, const WriteReadPlan& plan,
                        const WriteReadOptions& options) {
  Call call(args.memory, options.cuda_stream, false);
  const Geometry geo = make_geometry(plan.shape);
  GroupCount groups;
  plan_group_count(geo, call.workspace(), groups);
  call.workspace().allocate();
  run_group_count(geo, call.inputs(args), groups, call.stream());
  check_cuda(cudaMemcpyAsync(count.data, groups.group_first + geo.N, sizeof(std::int64_t), cudaMemcpyDeviceToDevice,
                             call.stream()),
             "cudaMemcpyAsync (write_groups_count)");
}

}  // namespace sdm::cuda

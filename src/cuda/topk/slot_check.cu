// slot_check.cu - the product-key backward's slot check on the device (options.validate):
// cuda::check_selected_slots (product_key_topk.hpp).
//
// One thread per entry of slots [rows, kk] (row stride from the TensorRef); an entry outside
// [0, prod(factor_dims)) folds its flat position row * kk + entry into one device word with an
// integer atomicMin (the first bad entry, whatever the order: deterministic). One host sync reads
// the word and, on a violation, that entry's value for the message (core::slot_outside).
#include <cstdint>

#include "core/product_key_plan.hpp"
#include "cuda/common/cuda_check.hpp"
#include "cuda/topk/product_key_topk.hpp"
#include "cuda/common/workspace.hpp"

namespace sdm::cuda {
namespace {

constexpr unsigned long long kNone = ~0ull;

__global__ void find_first_bad_slot(const std::int64_t* slots, std::int64_t rows, std::int64_t kk,
                                    std::int64_t row_stride, std::int64_t count, unsigned long long* first) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * kk) return;
  const std::int64_t id = slots[(i / kk) * row_stride + i % kk];
  if (id < 0 || id >= count) atomicMin(first, static_cast<unsigned long long>(i));
}

}  // namespace

void check_selected_slots(const core::ProductKeyPlan& plan, const TensorRef& slots, void* cuda_stream) {
  const cudaStream_t stream = stream_of(cuda_stream);
  if (plan.rows == 0 || is_capturing(stream)) return;  // no syncs inside a capture
  const DeviceGuard guard(slots.device.index);
  Workspace ws(stream);
  unsigned long long* first = nullptr;
  ws.plan(&first, 1);
  ws.allocate();
  check_cuda(cudaMemsetAsync(first, 0xff, sizeof *first, stream), "cudaMemsetAsync (slot check)");
  const std::int64_t entries = plan.rows * plan.selected;
  constexpr int kThreads = 256;
  find_first_bad_slot<<<static_cast<unsigned>((entries + kThreads - 1) / kThreads), kThreads, 0, stream>>>(
      slots.data_as<const std::int64_t>(), plan.rows, plan.selected, slots.strides[0], plan.slots, first);
  check_launch("find_first_bad_slot");
  unsigned long long found = kNone;
  check_cuda(cudaMemcpyAsync(&found, first, sizeof found, cudaMemcpyDeviceToHost, stream),
             "cudaMemcpyAsync (slot check)");
  check_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize (slot check)");
  if (found == kNone) return;
  const auto at = static_cast<std::int64_t>(found);
  const std::int64_t row = at / plan.selected, entry = at % plan.selected;
  std::int64_t value = 0;
  check_cuda(cudaMemcpy(&value, slots.data_as<const std::int64_t>() + row * slots.strides[0] + entry, sizeof value,
                        cudaMemcpyDeviceToHost),
             "cudaMemcpy (slot check)");
  core::slot_outside(plan, row, entry, value);
}

}  // namespace sdm::cuda

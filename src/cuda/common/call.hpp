// call.hpp - the set-up every CUDA entry point (forward/write_read.cu, backward/backward.cu,
// decode/decode_step.cu) does before its first launch, written once.
//
// A Call makes the bank's device current for its lifetime (the previous one is restored after),
// runs on the caller's stream (options.cuda_stream; null: the legacy default stream), knows
// whether that stream is being captured into a CUDA graph, and owns the call's workspace.
// checking(): options.validate on a stream that is not capturing. Then the workspace holds one
// check word and check_indices() runs the device index check and its one host sync
// (index_check.hpp); while capturing no sync is allowed, the check is skipped, and the kernels
// mask out-of-range entries and repeated write lanes instead (docs/spec.md §8, Inputs).
// Use: construct, plan the workspace's pieces, workspace().allocate(), check_indices(), launch.
// Members are destroyed in reverse order: the workspace is freed while the device is still set.
#pragma once

#include "cuda/common/cuda_check.hpp"
#include "cuda/common/geometry.hpp"
#include "cuda/common/index_check.hpp"
#include "cuda/common/workspace.hpp"
#include "sdm/ops.hpp"

namespace sdm::cuda {

class Call {
 public:
  Call(const TensorRef& bank, void* cuda_stream, bool validate)
      : guard_(bank.device.index),
        stream_(stream_of(cuda_stream)),
        capturing_(is_capturing(stream_)),
        checking_(validate && !capturing_),
        workspace_(stream_) {
    if (checking_) workspace_.plan(&check_word_, 1);
  }
  Call(const Call&) = delete;
  Call& operator=(const Call&) = delete;

  cudaStream_t stream() const { return stream_; }
  bool capturing() const { return capturing_; }
  bool checking() const { return checking_; }
  Workspace& workspace() { return workspace_; }

  // The kernels' view of the arguments; write lanes are known distinct only when checked.
  Inputs inputs(const WriteReadArgs& args) const {
    Inputs in = make_inputs(args);
    in.distinct_writes = checking_;
    return in;
  }

  // After workspace().allocate(): the device index check when checking(), else nothing. `also`
  // (optional, checking() only): a device word queued work writes, read back in the same sync.
  void check_indices(const Inputs& in, const IndexCheck& check, const std::int64_t* also = nullptr,
                     std::int64_t* also_host = nullptr) const {
    if (checking_) check_indices_on_device(in, check, check_word_, stream_, also, also_host);
  }

 private:
  DeviceGuard guard_;
  cudaStream_t stream_;
  bool capturing_, checking_;
  Workspace workspace_;
  unsigned long long* check_word_ = nullptr;
};

}  // namespace sdm::cuda

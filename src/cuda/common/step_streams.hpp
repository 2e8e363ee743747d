// step_streams.hpp - the per-step launches of a chunked call (forward or backward) split over two
// CUDA streams.
//
// Within a time step the P streams' chunks share nothing: every per-step kernel reads and writes
// only its own streams' bank rows, G rows, step rows and saved rows, and a launch covers the
// streams [p_first, p_first + p_count) of its Geometry. With P >= 2 a call therefore runs the
// streams [0, P/2) on its own CUDA stream and [P/2, P) on a side stream, forked from the call's
// stream after everything launched before the step loop (an event) and joined back after the loop
// (an event the call's stream waits for). One half's latency-bound launches (the dual product, the
// transposed solves, every kernel's ramp and tail) can then overlap the other half's memory-bound
// ones. No value changes: each element is computed by the same kernel with the same arithmetic
// whichever half holds it, and the halves write disjoint memory.
// It pays only where each half still has plenty to do (docs/performance.md), so a call splits when
// a half moves at least kSplitRowBytes of bank rows a step (P/2 * C * (W + R) * hd * element size).
// SDM_CUDA_STEP_STREAMS=1 in the environment splits every call with P >= 2, =0 none (read once
// per process; for tests and A/B measurements: the split only changes where launches run, never
// what they compute).
// While the call's stream is being captured into a CUDA graph the call stays on one stream (no
// stream or event is created during a capture).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/env_knobs.hpp"
#include "cuda/common/geometry.hpp"
#include "cuda/common/cuda_check.hpp"

namespace sdm::cuda {

constexpr std::int64_t kSplitRowBytes = std::int64_t{16} << 20;

// Whether a call of this shape splits its steps over two streams (`bank`: the bank's dtype; never
// while capturing).
inline bool split_steps(const Geometry& geo, DType bank, bool capturing) {
  const auto bank_element = static_cast<std::int64_t>(dtype_size(bank));
  static const int forced = core::env_choice("SDM_CUDA_STEP_STREAMS", {"0", "1"});  // -1: by size
  if (capturing || geo.P < 2 || forced == 0) return false;
  return forced == 1 || geo.P / 2 * geo.C * (geo.W + geo.R) * geo.hd * bank_element >= kSplitRowBytes;
}

class StepStreams {
 public:
  // split: false keeps every launch on `stream` (one half covering all P streams).
  StepStreams(const Geometry& geo, cudaStream_t stream, bool split) {
    half_[0] = geo;
    stream_[0] = stream;
    if (!split || geo.P < 2) return;
    half_[0].p_count = geo.P / 2;
    half_[1] = geo;
    half_[1].p_first = geo.P / 2;
    half_[1].p_count = geo.P - geo.P / 2;
    check_cuda(cudaStreamCreateWithFlags(&side_, cudaStreamNonBlocking), "cudaStreamCreateWithFlags (step streams)");
    check_cuda(cudaEventCreateWithFlags(&fork_, cudaEventDisableTiming), "cudaEventCreate (step streams)");
    check_cuda(cudaEventCreateWithFlags(&join_, cudaEventDisableTiming), "cudaEventCreate (step streams)");
    check_cuda(cudaEventRecord(fork_, stream), "cudaEventRecord (step streams fork)");
    check_cuda(cudaStreamWaitEvent(side_, fork_, 0), "cudaStreamWaitEvent (step streams fork)");
    stream_[1] = side_;
    count_ = 2;
  }

  // Joins (if join() was not called: an exception left the loop) and releases the side stream and
  // events; the device releases them once their work is done.
  ~StepStreams() {
    if (count_ == 2 && !joined_) {
      cudaEventRecord(join_, side_);
      cudaStreamWaitEvent(stream_[0], join_, 0);
    }
    if (join_ != nullptr) cudaEventDestroy(join_);
    if (fork_ != nullptr) cudaEventDestroy(fork_);
    if (side_ != nullptr) cudaStreamDestroy(side_);
  }
  StepStreams(const StepStreams&) = delete;
  StepStreams& operator=(const StepStreams&) = delete;

  int count() const { return count_; }
  const Geometry& geometry(int half) const { return half_[half]; }
  cudaStream_t stream(int half) const { return stream_[half]; }

  // The call's stream waits for the side stream's launches (call after the step loop).
  void join() {
    if (count_ != 2 || joined_) return;
    check_cuda(cudaEventRecord(join_, side_), "cudaEventRecord (step streams join)");
    check_cuda(cudaStreamWaitEvent(stream_[0], join_, 0), "cudaStreamWaitEvent (step streams join)");
    joined_ = true;
  }

 private:
  Geometry half_[2];
  cudaStream_t stream_[2] = {nullptr, nullptr};
  cudaStream_t side_ = nullptr;
  cudaEvent_t fork_ = nullptr, join_ = nullptr;
  int count_ = 1;
  bool joined_ = false;
};

}  // namespace sdm::cuda

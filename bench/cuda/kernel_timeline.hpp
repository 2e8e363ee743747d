// kernel_timeline.hpp - where the GPU time of a piece of work goes, kernel by kernel: records every
// kernel launched between start() and stop() with CUPTI's activity API (its start and end on the
// device, no change to how it runs) and summarises them per kernel name and as the time during
// which no kernel ran at all. For sdm_gpu_bench --timeline.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace sdm::testing {

struct KernelSpan {
  std::string name;  // demangled by CUPTI where it can, else as compiled
  std::uint64_t start = 0, end = 0;  // ns, device clock
  std::uint32_t stream = 0;
};

class KernelTimeline {
 public:
  KernelTimeline();  // registers the activity buffers (once per process)
  void start();
  // Waits for the device, flushes CUPTI's buffers and returns the kernels since start() in start
  // order.
  std::vector<KernelSpan> stop();
};

// Per kernel name (names cut at the first '(' or '<'): launches, total and mean duration, and its
// share of the span; then the span (first start to last end), the busy time (the union of the
// kernels' intervals) and the idle time (span - busy). `out` receives a markdown table.
void print_timeline(const std::vector<KernelSpan>& spans, const char* title, std::FILE* out);

}  // namespace sdm::testing

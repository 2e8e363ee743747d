// kernel_timeline.cpp - KernelTimeline on CUPTI's activity API (kernel_timeline.hpp).
#include "kernel_timeline.hpp"

#include <cuda_runtime.h>
#include <cupti.h>
#include <cxxabi.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <mutex>
#include <stdexcept>

namespace sdm::testing {
namespace {

std::mutex g_mutex;
std::vector<KernelSpan> g_spans;

void cupti_ok(CUptiResult status, const char* what) {
  if (status == CUPTI_SUCCESS) return;
  const char* message = nullptr;
  cuptiGetResultString(status, &message);
  throw std::runtime_error(std::string(what) + ": " + (message != nullptr ? message : "CUPTI error"));
}

void CUPTIAPI buffer_requested(std::uint8_t** buffer, std::size_t* size, std::size_t* max_records) {
  constexpr std::size_t kBytes = std::size_t{8} << 20;
  *buffer = static_cast<std::uint8_t*>(std::aligned_alloc(8, kBytes));
  *size = kBytes;
  *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext, std::uint32_t, std::uint8_t* buffer, std::size_t, std::size_t valid) {
  CUpti_Activity* record = nullptr;
  const std::lock_guard<std::mutex> lock(g_mutex);
  while (cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
    if (record->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) continue;
    const auto* kernel = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
    g_spans.push_back({kernel->name != nullptr ? kernel->name : "?", kernel->start, kernel->end, kernel->streamId});
  }
  std::free(buffer);
}

// The kernel's name without its namespace, template arguments and parameters (CUPTI reports the
// mangled name).
std::string short_name(const std::string& mangled) {
  int status = 0;
  char* demangled = abi::__cxa_demangle(mangled.c_str(), nullptr, nullptr, &status);
  std::string s = status == 0 && demangled != nullptr ? demangled : mangled;
  std::free(demangled);
  for (std::size_t at; (at = s.find("(anonymous namespace)::")) != std::string::npos;) s.erase(at, 23);
  s = s.substr(0, s.find_first_of("(<"));
  const std::size_t space = s.rfind(' ');
  if (space != std::string::npos) s = s.substr(space + 1);
  const std::size_t colon = s.rfind("::");
  return colon == std::string::npos ? s : s.substr(colon + 2);
}

}  // namespace

KernelTimeline::KernelTimeline() {
  static const bool registered = [] {
    cupti_ok(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed), "cuptiActivityRegisterCallbacks");
    return true;
  }();
  (void)registered;
}

void KernelTimeline::start() {
  if (cudaDeviceSynchronize() != cudaSuccess) throw std::runtime_error("cudaDeviceSynchronize");
  {
    const std::lock_guard<std::mutex> lock(g_mutex);
    g_spans.clear();
  }
  cupti_ok(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), "cuptiActivityEnable");
}

std::vector<KernelSpan> KernelTimeline::stop() {
  if (cudaDeviceSynchronize() != cudaSuccess) throw std::runtime_error("cudaDeviceSynchronize");
  cupti_ok(cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), "cuptiActivityDisable");
  cupti_ok(cuptiActivityFlushAll(1), "cuptiActivityFlushAll");
  const std::lock_guard<std::mutex> lock(g_mutex);
  std::vector<KernelSpan> spans = std::move(g_spans);
  g_spans.clear();
  std::sort(spans.begin(), spans.end(), [](const KernelSpan& a, const KernelSpan& b) { return a.start < b.start; });
  return spans;
}

void print_timeline(const std::vector<KernelSpan>& spans, const char* title, std::FILE* out) {
  if (spans.empty()) {
    std::fprintf(out, "%s: no kernels recorded\n", title);
    return;
  }
  struct Total {
    std::int64_t launches = 0;
    double ns = 0.0;
  };
  std::map<std::string, Total> totals;
  std::uint64_t first = spans.front().start, last = 0, busy = 0, covered_to = first;
  for (const KernelSpan& s : spans) {
    Total& t = totals[short_name(s.name)];
    ++t.launches;
    t.ns += static_cast<double>(s.end - s.start);
    last = std::max(last, s.end);
    // Union of the intervals (spans sorted by start).
    if (s.end > covered_to) {
      busy += s.end - std::max(s.start, covered_to);
      covered_to = s.end;
    }
  }
  const double span = static_cast<double>(last - first);
  std::vector<std::pair<std::string, Total>> rows(totals.begin(), totals.end());
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.ns > b.second.ns; });
  std::fprintf(out, "\n%s: span %.3f ms, some kernel running %.3f ms, none running %.3f ms (%.1f %%)\n", title,
               span * 1e-6, static_cast<double>(busy) * 1e-6, (span - static_cast<double>(busy)) * 1e-6,
               100.0 * (span - static_cast<double>(busy)) / span);
  std::fprintf(out, "| kernel | launches | total ms | mean us | of span |\n|---|---|---|---|---|\n");
  for (const auto& [name, t] : rows) {
    std::fprintf(out, "| %s | %lld | %.3f | %.2f | %.1f %% |\n", name.c_str(), static_cast<long long>(t.launches),
                 t.ns * 1e-6, t.ns * 1e-3 / static_cast<double>(t.launches), 100.0 * t.ns / span);
  }
}

}  // namespace sdm::testing

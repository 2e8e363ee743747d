// device_limits.cu - see device_limits.hpp.
#include "cuda/common/device_limits.hpp"

#include <cuda_runtime.h>

#include <atomic>
#include <map>
#include <mutex>
#include <utility>

#include "cuda/common/cuda_check.hpp"
#include "cuda/common/dependent_launch.cuh"

namespace sdm::cuda {
namespace {

int current_device(const char* what) {
  int device = 0;
  check_cuda(cudaGetDevice(&device), what);
  return device;
}

// One attribute of the current device, asked once per device.
int cached_attribute(cudaDeviceAttr attribute, const char* what) {
  static std::mutex mutex;
  static std::map<std::pair<int, int>, int> values;
  const int device = current_device(what);
  const std::pair<int, int> key{device, static_cast<int>(attribute)};
  const std::lock_guard<std::mutex> lock(mutex);
  const auto found = values.find(key);
  if (found != values.end()) return found->second;
  int value = 0;
  check_cuda(cudaDeviceGetAttribute(&value, attribute, device), what);
  values.emplace(key, value);
  return value;
}

constexpr std::size_t kDefaultSharedMemory = 48 * 1024;

// Compiled for the library's architectures like every kernel: the code the device loads for it
// (SASS, or PTX the driver JIT-compiles) comes from the same architecture as the others'.
__global__ void dependent_launch_probe() { wait_for_predecessor(); }

constexpr int kMaxDevices = 64;
constexpr int kFirstWaitingPtx = 90;  // griddepcontrol.wait is compiled in for sm_90 and later

}  // namespace

bool dependent_launch_safe() {
  // Per device: 0 not asked yet, 1 safe, 2 not (two threads asking at once store the same answer).
  // Lock-free: every dependent launch asks.
  static std::atomic<unsigned char> answers[kMaxDevices] = {};
  const int device = current_device("cudaGetDevice (dependent launch)");
  if (device < 0 || device >= kMaxDevices) return false;
  const unsigned char known = answers[device].load(std::memory_order_relaxed);
  if (known != 0) return known == 1;
  cudaFuncAttributes attributes{};
  check_cuda(cudaFuncGetAttributes(&attributes, dependent_launch_probe),
             "cudaFuncGetAttributes (dependent launch probe)");
  const bool safe = attributes.ptxVersion >= kFirstWaitingPtx;
  answers[device].store(safe ? 1 : 2, std::memory_order_relaxed);
  return safe;
}

int multiprocessor_count() {
  return cached_attribute(cudaDevAttrMultiProcessorCount, "cudaDeviceGetAttribute (SM count)");
}

std::size_t shared_memory_optin() {
  return static_cast<std::size_t>(
      cached_attribute(cudaDevAttrMaxSharedMemoryPerBlockOptin, "cudaDeviceGetAttribute (shared memory opt-in)"));
}

void allow_dynamic_shared_memory(const void* kernel, std::size_t bytes, const char* what) {
  struct Allowed {
    std::size_t static_bytes = 0;  // the kernel's own __shared__ variables
    std::size_t dynamic = 0;       // the limit raised so far (0: the default)
  };
  static std::mutex mutex;
  static std::map<std::pair<const void*, int>, Allowed> kernels;
  const int device = current_device(what);
  const std::lock_guard<std::mutex> lock(mutex);
  auto [at, added] = kernels.try_emplace({kernel, device});
  Allowed& allowed = at->second;
  if (added) {
    cudaFuncAttributes attributes{};
    check_cuda(cudaFuncGetAttributes(&attributes, kernel), what);
    allowed.static_bytes = attributes.sharedSizeBytes;
  }
  if (bytes + allowed.static_bytes <= kDefaultSharedMemory || bytes <= allowed.dynamic) return;
  check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)), what);
  allowed.dynamic = bytes;
}

}  // namespace sdm::cuda

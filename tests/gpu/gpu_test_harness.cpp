// gpu_test_harness.cpp - the GPU test programs' runner (gpu_test_harness.hpp).
#include "gpu_test_harness.hpp"

#include <cuda_runtime.h>

#include <cstdio>
#include <cstring>
#include <exception>
#include <vector>

#include "device_tensor.hpp"

namespace sdm::testing {
namespace {

int g_checks = 0, g_failures = 0;
bool g_verbose = false;

void record(bool ok) {
  ++g_checks;
  if (!ok) ++g_failures;
}

}  // namespace

bool expect(bool ok, const std::string& what) {
  record(ok);
  if (!ok || g_verbose) std::printf("    %s %s\n", ok ? "ok  " : "FAIL", what.c_str());
  return ok;
}

bool expect_error_at_most(double value, double bound, const std::string& what) {
  const bool ok = value <= bound;  // NaN fails
  record(ok);
  std::printf("    %-44s %.3e  (<= %.0e) %s\n", what.c_str(), value, bound, ok ? "ok" : "FAIL");
  return ok;
}

void sync() { cuda_ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize"); }

int run_gpu_tests(const char* program, std::span<const GpuTest> tests, int argc, char** argv) {
  std::vector<const char*> filters;
  for (int a = 1; a < argc; ++a) {
    if (std::strcmp(argv[a], "--verbose") == 0) {
      g_verbose = true;
      continue;
    }
    bool matches = false;
    for (const GpuTest& t : tests) matches = matches || std::strstr(t.name, argv[a]) != nullptr;
    if (!matches) {
      std::printf("%s: no test name contains \"%s\"; the tests:\n", program, argv[a]);
      for (const GpuTest& t : tests) std::printf("  %s\n", t.name);
      return 2;
    }
    filters.push_back(argv[a]);
  }
  if (!cuda_device_available()) {
    std::printf("%s: skipped (no CUDA device)\n", program);
    return 0;
  }
  int failed_tests = 0, ran = 0;
  for (const GpuTest& t : tests) {
    bool selected = filters.empty();
    for (const char* f : filters) selected = selected || std::strstr(t.name, f) != nullptr;
    if (!selected) continue;
    ++ran;
    std::printf("[ RUN  ] %s\n", t.name);
    const int before = g_failures;
    try {
      t.run();
    } catch (const std::exception& e) {
      record(false);
      std::printf("    FAIL unexpected exception: %s\n", e.what());
    }
    const bool ok = g_failures == before;
    failed_tests += ok ? 0 : 1;
    std::printf("[ %s ] %s\n", ok ? " OK " : "FAIL", t.name);
    std::fflush(stdout);
  }
  std::printf("%s: %d checks, %d failed, %d of %d tests failed\n", program, g_checks, g_failures, failed_tests, ran);
  return g_failures == 0 ? 0 : 1;
}

}  // namespace sdm::testing

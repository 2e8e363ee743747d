// gpu_test_harness.hpp - the runner shared by the GPU test programs (tests/gpu/test_*; the GPU
// machine has no GoogleTest): check counters, expect / expect_error_at_most, and the program's main.
//
// Output of a program, one line per event:
//   [ RUN  ] <test>                         before each selected test
//       <what> <value>  (<= <bound>) ok     every expect_error_at_most (the measured number is the
//                                           point of those checks, so it is always shown)
//       FAIL <what>                         a failed expect; a passed one prints "    ok   <what>"
//                                           only with --verbose
//       FAIL unexpected exception: <what>   a test that threw (counts as one failed check)
//   [  OK  ] <test>  or  [ FAIL ] <test>
//   <program>: N checks, F failed, X of Y tests failed      always the last line (scripts/gpu_check.sh
//                                                           shows it); exit status 1 when F > 0
// Without a CUDA device: "<program>: skipped (no CUDA device)" and exit status 0.
#pragma once

#include <span>
#include <string>

namespace sdm::testing {

// One named test of a program; run() records its checks through expect / expect_error_at_most.
struct GpuTest {
  const char* name;
  void (*run)();
};

// Records one check and returns `ok`. Prints "    FAIL <what>" when it failed, and
// "    ok   <what>" when it passed and the program runs with --verbose.
bool expect(bool ok, const std::string& what);

// Records the check value <= bound (NaN fails), prints the value, the bound and ok / FAIL, and
// returns whether it passed.
bool expect_error_at_most(double value, double bound, const std::string& what);

// cudaDeviceSynchronize; throws std::runtime_error naming the CUDA error (the runner reports it).
void sync();

// The main of a GPU test program. Arguments: substrings of test names to run (every test without
// any; an argument matching no test name is an error, exit status 2), and --verbose. Returns the
// exit status (0: every check passed or no CUDA device; 1: a check failed).
int run_gpu_tests(const char* program, std::span<const GpuTest> tests, int argc, char** argv);

}  // namespace sdm::testing

// golden.hpp - the float64 golden cases of tests/data/golden_f64.json (format and provenance:
// tests/data/README.md), loaded into HostTensors.
//
// Inputs come as a Problem with an f64 bank, f64 float inputs and i64 indices (spec filled
// from the case: P, T, W, R, hd, slots_per_stream, G); convert with HostTensor::to for other
// dtypes. The loss of the expected gradients is
//   L = sum(readings * weight_readings) + sum(final_bank * weight_final_bank).
#pragma once

#include <string>
#include <vector>

#include "host_tensor.hpp"
#include "problem.hpp"

namespace sdm::testing {

struct GoldenCase {
  std::string name;
  Problem problem;
  HostTensor weight_readings, weight_final_bank;  // loss weights [P, T, hd], [S, hd]
  HostTensor readings, final_bank;                // expected outputs
  // Expected gradients of L, shaped like their inputs.
  HostTensor grad_memory, grad_k_val, grad_v, grad_beta, grad_g, grad_q_val;
};

// SDM_TEST_DATA_DIR "/golden_f64.json".
std::string golden_path();

// Every case of the file; throws std::runtime_error on a malformed file or a shape mismatch.
std::vector<GoldenCase> load_golden_cases(const std::string& path = golden_path());

}  // namespace sdm::testing

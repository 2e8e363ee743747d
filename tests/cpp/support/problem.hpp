// problem.hpp - random SDM problems (inputs of the chunked op) for tests and benchmarks.
//
// Distributions follow the reference package's tests: bank randn*0.1, k_val and
// q_val randn*0.3, v randn*0.1, beta U(0, beta_max), g U(-0.5, -0.01). Each token writes W
// distinct slots and reads R distinct slots of its own stream, in random (unsorted) order;
// with slots_per_stream small against T*W, slots repeat across tokens and chunks.
#pragma once

#include <cstdint>

#include "host_tensor.hpp"
#include "sdm/ops.hpp"

namespace sdm::testing {

struct ProblemSpec {
  std::int64_t P = 1, T = 8, W = 2, R = 2, hd = 4, slots_per_stream = 16;
  std::int64_t G = 1;              // 1 or W
  std::int64_t extra_rows = 0;     // bank rows beyond P * slots_per_stream
  DType bank = DType::f32;         // f32 / bf16 (f64 for the reference only)
  DType index = DType::i32;        // i32 / i64 (both index tensors)
  DType input = DType::f32;        // dtype of k_val, v, beta, g, q_val
  double beta_max = 0.3;
  bool beta_3d = false;            // beta [P, T, 1] instead of [P, T]
  std::uint64_t seed = 1;
};

// The op's arguments as views of a problem's eight tensors (HostTensor here, DeviceTensor in the
// GPU tests: anything with ref()); memory is the bank (in / out).
template <typename Tensors>
WriteReadArgs args_of(const Tensors& t) {
  WriteReadArgs a;
  a.memory = t.memory.ref();
  a.k_idx = t.k_idx.ref();
  a.k_val = t.k_val.ref();
  a.v = t.v.ref();
  a.beta = t.beta.ref();
  a.g = t.g.ref();
  a.q_idx = t.q_idx.ref();
  a.q_val = t.q_val.ref();
  return a;
}

struct Problem {
  ProblemSpec spec;
  HostTensor memory, k_idx, k_val, v, beta, g, q_idx, q_val;

  WriteReadArgs args() const { return args_of(*this); }
  HostTensor make_readings(DType dtype) const;  // zeroed [P, T, hd]
  std::int64_t bank_rows() const { return spec.P * spec.slots_per_stream + spec.extra_rows; }
};

Problem make_problem(const ProblemSpec& spec);

// A spec from the fields engine tests vary most (the others keep their defaults).
ProblemSpec spec_of(std::int64_t P, std::int64_t T, std::int64_t W, std::int64_t R, std::int64_t hd,
                    std::int64_t slots_per_stream, std::int64_t G, DType bank, std::uint64_t seed);

}  // namespace sdm::testing

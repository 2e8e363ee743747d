// bench_inputs.hpp - random inputs of the op for one benchmark config.
//
// Distributions as tests/cpp/support/problem: bank randn*0.1, k_val and q_val
// randn*0.3, v randn*0.1, beta U(0, 0.3), g U(-0.5, -0.01); each token writes W distinct
// slots and reads R distinct slots of its own stream, in random order. Indices int32,
// float inputs f32, the bank in the requested dtype. Besides the stream-major tensors
// [P, T, ...] of the chunked op, the inputs are also kept time-major [T, P, ...] so that a
// decode step t sees contiguous [P, ...] views.
#pragma once

#include <cstdint>
#include <vector>

#include "bench_config.hpp"
#include "sdm/ops.hpp"

namespace sdm::bench {

// An owning, contiguous host buffer with a TensorRef view.
class Buffer {
 public:
  Buffer() = default;
  Buffer(DType dtype, std::vector<std::int64_t> sizes);
  TensorRef ref() const;
  // A contiguous view shaped `sizes` starting at element `offset`.
  TensorRef view(std::int64_t offset, std::initializer_list<std::int64_t> sizes) const;
  void* data() const { return const_cast<unsigned char*>(bytes_.data()); }
  std::size_t bytes() const { return bytes_.size(); }

 private:
  DType dtype_ = DType::f32;
  std::vector<std::int64_t> sizes_;
  std::vector<unsigned char> bytes_;
};

struct BenchInputs {
  BenchConfig config;
  DType bank_dtype = DType::bf16;
  Buffer initial_bank;                                // [P * sps, hd], never modified
  Buffer k_idx, k_val, v, beta, g, q_idx, q_val;      // [P, T, ...] stream-major
  Buffer k_idx_t, k_val_t, v_t, beta_t, g_t, q_idx_t, q_val_t;  // [T, P, ...] time-major
  Buffer grad_readings;                               // [P, T, hd] f32, randn

  // The chunked op's arguments on `bank`.
  WriteReadArgs args(const TensorRef& bank) const;
  // Decode step t's arguments on `bank` (leading dim P).
  WriteReadArgs decode_args(const TensorRef& bank, std::int64_t t) const;
};

BenchInputs make_bench_inputs(const BenchConfig& config, DType bank_dtype, std::uint64_t seed);

}  // namespace sdm::bench

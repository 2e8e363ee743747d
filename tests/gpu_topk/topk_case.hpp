// topk_case.hpp - one product-key top-k problem on the host and on the device, for the GPU test
// and the GPU benchmark: random raw scores of a kind, the plan, and both kernels' outputs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/product_key_plan.hpp"

namespace sdm::testing {

// "randn": normal scores; "ties": multiples of 1/2 in [-1.5, 1.5] (exact ties everywhere);
// "special": ties plus -0, +0, NaN, -inf and some +inf; "crowded": +-(1 + n 2^-23), n < 4096 (f32
// scores that differ in their last 12 bits only, some equal); "bucket_edge": in row r, factor
// r % F holds m - 1 distinct large scores, then +-0.75 and its f32 neighbour away from 0 (the
// better one at the smaller column), the rest below (m = min(k, width)), and every other factor
// one score far above its others.
enum class ScoreKind { randn, ties, special, crowded, bucket_edge };

struct TopkCase {
  std::vector<std::int64_t> dims;
  std::int64_t k = 1, rows = 1, row_stride = 0;  // row_stride >= sum(dims)
  DType dtype = DType::f32;
  ScoreKind kind = ScoreKind::randn;
  std::uint64_t seed = 1;

  std::string name() const;
};

// Host buffers of one case; `device_*` are cudaMalloc'ed mirrors (freed by the destructor).
struct TopkBuffers {
  explicit TopkBuffers(const TopkCase& c);
  ~TopkBuffers();
  TopkBuffers(const TopkBuffers&) = delete;
  TopkBuffers& operator=(const TopkBuffers&) = delete;

  core::ProductKeyPlan plan;
  std::vector<unsigned char> raw, grad_values;  // rows x row_stride, rows x kk elements
  void* device_raw = nullptr;
  void* device_values = nullptr;
  void* device_slots = nullptr;
  void* device_grad_values = nullptr;
  void* device_grad_raw = nullptr;

  TensorRef raw_ref(bool device) const;
  TensorRef grad_values_ref(bool device) const;
  TensorRef matrix_ref(void* data, DType dtype, std::int64_t cols, bool device) const;
};

}  // namespace sdm::testing

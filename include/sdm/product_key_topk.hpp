// sdm/product_key_topk.hpp - exact top-k over the sums of product-key factor scores.
//
// A row of raw scores holds F factors side by side (widths n_0..n_{F-1}, F in 1..512); slot
// (c_0, ..., c_{F-1}) has id (..(c_0 * n_1 + c_1) * ..) * n_{F-1} + c_{F-1} and scores the sum
// of one score from each factor, added in factor order. The selection rule (docs/spec.md,
// "Product-key top-k"):
//   - scores compare as float32 (float64 input: as float64), -0 below +0, NaN as -inf;
//   - factor 0 keeps its n = min(k, n_0) best columns, ranked by value, larger column first
//     on ties; one factor returns them;
//   - stage f = 1..F-1 ranks factor f the same way (m = min(k, n_f) columns) and keeps the best
//     c = min(k, n * m) rank pairs (i, j) with (i + 1) * (j + 1) <= c, ranked by the sum
//     running[i] + factor[j], exact ties to the larger i + j, then the larger i; the kept
//     pairs, in that order, are the next stage's running list (n = c). With a 16-bit input
//     dtype and F > 2, an intermediate stage rounds its sums to that dtype;
//   - the last stage's slots are returned in ascending id order, with their sums rounded
//     to the input dtype.
// Each pair left out has c kept pairs of lower or equal ranks that score at least as much,
// so the selected scores are an exact top-k of all prod(n_f) sums.
#pragma once

#include <cstdint>
#include <span>

#include "sdm/types.hpp"

namespace sdm {

inline constexpr std::int64_t kMaxProductKeyFactors = 512;
inline constexpr std::int64_t kMaxProductKeyK = 256;
// Slot ids and row widths are kept in 32 bits by the kernels.
inline constexpr std::int64_t kMaxProductKeySlots = (std::int64_t{1} << 32) - 1;

struct ProductKeyTopkOptions {
  int num_threads = 0;          // CPU threads; 0 = $SDM_NUM_THREADS, else the hardware's
  void* cuda_stream = nullptr;  // CUDA tensors: the cudaStream_t to run on (nullptr: legacy default)
  bool validate = true;         // backward: refuse slots outside [0, prod(factor_dims)) by name (CUDA:
                                // one host sync, skipped while capturing); false: they contribute nothing
};

// The number of slots each row selects, min(k, prod(factor_dims)), after checking raw
// ([rows, sum(factor_dims)], f32 / bf16 / f16 / f64; only its shape and dtype are read),
// factor_dims and k. Throws sdm::TypeError / sdm::ValueError naming the argument.
std::int64_t product_key_topk_selected(const TensorRef& raw, std::span<const std::int64_t> factor_dims,
                                       std::int64_t k);

// values [rows, kk] (raw's dtype) and slots [rows, kk] (int64), contiguous, on raw's device:
// each row's selected slot ids, ascending, and their scores. raw's rows may be strided; its
// columns must be contiguous.
void product_key_topk_forward(const TensorRef& raw, std::span<const std::int64_t> factor_dims, std::int64_t k,
                              const TensorRef& values, const TensorRef& slots,
                              const ProductKeyTopkOptions& options = {});

// Gradient of the scores to the raw scores: grad_raw [rows, sum(factor_dims)] (grad_values'
// dtype, contiguous) gets, in each factor's columns, the sum of grad_values over the selected
// slots using that column (float32 sums, float64 for float64, in the order of the entries: ascending
// slot order for the forward's own slots; rounded once); untouched columns get 0. slots [rows, kk] int64 as the forward returned them,
// grad_values [rows, kk] float. Deterministic: no atomics.
void product_key_topk_backward(const TensorRef& slots, const TensorRef& grad_values,
                               std::span<const std::int64_t> factor_dims, const TensorRef& grad_raw,
                               const ProductKeyTopkOptions& options = {});

}  // namespace sdm

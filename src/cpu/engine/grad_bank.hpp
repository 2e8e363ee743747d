// grad_bank.hpp - the bank-shaped gradient G carried by the backward (docs/spec.md §4).
//
// Row dtype between chunks: bf16 for a bf16 bank with grad_bank_fp32 == false, else f32
// (inside a chunk the backward works in f32 and rounds a touched row once per chunk).
// Storage: the caller's grad_memory itself when it has that dtype (no copy); otherwise an
// owned buffer of the P*sps stream rows, converted once into grad_memory by finish().
// Initial value: grad_final_bank rounded to the row dtype, or zero. Rows beyond P*sps are
// never touched by the op, so their gradient is grad_final_bank (or zero).
// Parallel decomposition: init and finish split rows over the pool (elementwise, exact).
#pragma once

#include <cstdint>
#include <vector>

#include "core/validate.hpp"
#include "element_io.hpp"
#include "sdm/ops.hpp"

namespace sdm::cpu {

class GradBank {
 public:
  // row_dtype: the plan's bank_grad.
  GradBank(const core::WriteReadShape& shape, DType row_dtype, const TensorRef& grad_final_bank,
           const TensorRef& grad_memory, int threads);

  // The rows G[row] (absolute bank rows of the streams), bf16 or f32.
  const RowMatrix& rows() const { return rows_; }

  // Writes grad_memory (if defined) when it is not the storage itself.
  void finish(const TensorRef& grad_final_bank, const TensorRef& grad_memory, int threads) const;

 private:
  std::int64_t stream_rows_ = 0;
  bool direct_ = false;
  std::vector<unsigned char> owned_;
  RowMatrix rows_;
};

}  // namespace sdm::cpu

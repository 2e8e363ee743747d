#include "grad_bank.hpp"

#include <algorithm>
#include <cstring>

#include "thread_pool.hpp"

namespace sdm::cpu {
namespace {

constexpr std::int64_t kRowsPerTask = 256;

// body(first, last) over [0, rows) in fixed blocks of kRowsPerTask rows.
template <typename Body>
void for_row_blocks(std::int64_t rows, int threads, const Body& body) {
  const std::int64_t blocks = (rows + kRowsPerTask - 1) / kRowsPerTask;
  parallel_for(blocks, threads, [&](std::int64_t b) {
    body(b * kRowsPerTask, std::min(rows, (b + 1) * kRowsPerTask));
  });
}

// Row `row` of grad_final_bank as f32, or zeros when it is absent.
void load_final_row(const TensorRef& grad_final_bank, std::int64_t row, std::int64_t hd, float* out) {
  if (grad_final_bank.defined()) {
    load_elements(grad_final_bank, row * hd, hd, out);
  } else {
    std::fill(out, out + hd, 0.0f);
  }
}

}  // namespace

GradBank::GradBank(const core::WriteReadShape& shape, DType row_dtype, const TensorRef& grad_final_bank,
                   const TensorRef& grad_memory, int threads) {
  stream_rows_ = shape.P * shape.slots_per_stream;
  direct_ = grad_memory.defined() && grad_memory.dtype == row_dtype;
  std::int64_t rows = shape.S;
  rows_.dtype = row_dtype;
  rows_.width = shape.hd;
  if (direct_) {
    rows_.data = grad_memory.data;
  } else {
    rows = stream_rows_;
    owned_.resize(static_cast<std::size_t>(rows * shape.hd) * dtype_size(row_dtype));
    rows_.data = owned_.data();
  }
  const std::int64_t hd = shape.hd;
  const std::size_t row_bytes = static_cast<std::size_t>(hd) * dtype_size(row_dtype);
  for_row_blocks(rows, threads, [&](std::int64_t first, std::int64_t last) {
    if (!grad_final_bank.defined()) {
      // Zero rows: +0 is all-zero bits in bf16 and f32 alike (what rounding 0.0f stores).
      std::memset(static_cast<unsigned char*>(rows_.data) + static_cast<std::size_t>(first) * row_bytes, 0,
                  static_cast<std::size_t>(last - first) * row_bytes);
      return;
    }
    std::vector<float> row(static_cast<std::size_t>(hd));
    for (std::int64_t r = first; r < last; ++r) {
      load_final_row(grad_final_bank, r, hd, row.data());
      rows_.store(r, row.data());
    }
  });
}

void GradBank::finish(const TensorRef& grad_final_bank, const TensorRef& grad_memory, int threads) const {
  if (direct_ || !grad_memory.defined()) return;
  const std::int64_t hd = rows_.width;
  for_row_blocks(grad_memory.size(0), threads, [&](std::int64_t first, std::int64_t last) {
    std::vector<float> row(static_cast<std::size_t>(hd));
    for (std::int64_t r = first; r < last; ++r) {
      if (r < stream_rows_) {
        rows_.load(r, row.data());
      } else {
        load_final_row(grad_final_bank, r, hd, row.data());
      }
      store_elements(grad_memory, r * hd, hd, row.data());
    }
  });
}

}  // namespace sdm::cpu

#include "element_io.hpp"

#include <string>

#include "row_kernels.hpp"
#include "sdm/error.hpp"

namespace sdm::cpu {
namespace {

[[noreturn]] void not_float(const char* where, DType dtype) {
  throw RuntimeError(std::string(where) + ": not a float dtype: " + dtype_name(dtype));
}

template <typename Src, typename Convert>
void widen(const void* data, std::int64_t offset, std::int64_t n, float* out, Convert convert) {
  const Src* src = static_cast<const Src*>(data) + offset;
  for (std::int64_t c = 0; c < n; ++c) out[c] = convert(src[c]);
}

template <typename Dst, typename Convert>
void narrow(void* data, std::int64_t offset, std::int64_t n, const float* in, Convert convert) {
  Dst* dst = static_cast<Dst*>(data) + offset;
  for (std::int64_t c = 0; c < n; ++c) dst[c] = convert(in[c]);
}

}  // namespace

float load_element(const TensorRef& t, std::int64_t i) {
  float x;
  load_elements(t, i, 1, &x);
  return x;
}

void load_elements(const TensorRef& t, std::int64_t offset, std::int64_t n, float* out) {
  switch (t.dtype) {
    case DType::f32: return widen<float>(t.data, offset, n, out, [](float x) { return x; });
    case DType::bf16: return load_row(static_cast<const std::uint16_t*>(t.data) + offset, out, n);
    case DType::f16: return widen<std::uint16_t>(t.data, offset, n, out, core::f16_to_float);
    case DType::f64:
      return widen<double>(t.data, offset, n, out, [](double x) { return static_cast<float>(x); });
    default: not_float("load_elements", t.dtype);
  }
}

void store_elements(const TensorRef& t, std::int64_t offset, std::int64_t n, const float* in) {
  switch (t.dtype) {
    case DType::f32: return narrow<float>(t.data, offset, n, in, [](float x) { return x; });
    case DType::bf16: return store_row(static_cast<std::uint16_t*>(t.data) + offset, in, nullptr, n);
    case DType::f16: return narrow<std::uint16_t>(t.data, offset, n, in, core::f16_from_float);
    case DType::f64:
      return narrow<double>(t.data, offset, n, in, [](float x) { return static_cast<double>(x); });
    default: not_float("store_elements", t.dtype);
  }
}

void RowMatrix::load(std::int64_t row, float* out) const {
  const std::int64_t offset = row * width;
  if (dtype == DType::bf16) return load_row(static_cast<const std::uint16_t*>(data) + offset, out, width);
  return load_row(static_cast<const float*>(data) + offset, out, width);
}

void RowMatrix::store(std::int64_t row, const float* in) const {
  const std::int64_t offset = row * width;
  if (dtype == DType::bf16) return store_row(static_cast<std::uint16_t*>(data) + offset, in, nullptr, width);
  return store_row(static_cast<float*>(data) + offset, in, nullptr, width);
}

void RowMatrix::store_sum(std::int64_t row, const float* a, const float* b) const {
  const std::int64_t offset = row * width;
  if (dtype == DType::bf16) return store_row(static_cast<std::uint16_t*>(data) + offset, a, b, width);
  return store_row(static_cast<float*>(data) + offset, a, b, width);
}

float RowMatrix::dot(std::int64_t row, const float* x) const {
  const std::int64_t offset = row * width;
  if (dtype == DType::bf16) return dot_row(x, static_cast<const std::uint16_t*>(data) + offset, width);
  return dot_row(x, static_cast<const float*>(data) + offset, width);
}

void RowMatrix::prefetch(std::int64_t row) const {
  const std::size_t row_bytes = static_cast<std::size_t>(width) * dtype_size(dtype);
  prefetch_row(static_cast<const unsigned char*>(data) + static_cast<std::size_t>(row) * row_bytes, row_bytes);
}

}  // namespace sdm::cpu

#include "host_tensor.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include "core/tensor_access.hpp"

namespace sdm::testing {

HostTensor::HostTensor(DType dtype, std::vector<std::int64_t> sizes)
    : dtype_(dtype), sizes_(std::move(sizes)) {
  if (sizes_.empty() || sizes_.size() > static_cast<std::size_t>(TensorRef::kMaxDims)) {
    throw std::invalid_argument("HostTensor: 1..4 dimensions");
  }
  bytes_.assign(static_cast<std::size_t>(numel()) * dtype_size(dtype_), 0);
}

std::int64_t HostTensor::numel() const {
  std::int64_t n = 1;
  for (auto s : sizes_) n *= s;
  return n;
}

TensorRef HostTensor::ref() const {
  TensorRef r;
  r.data = const_cast<unsigned char*>(bytes_.data());
  r.dtype = dtype_;
  r.ndim = static_cast<int>(sizes_.size());
  std::int64_t stride = 1;
  for (int i = r.ndim - 1; i >= 0; --i) {
    r.sizes[static_cast<std::size_t>(i)] = sizes_[static_cast<std::size_t>(i)];
    r.strides[static_cast<std::size_t>(i)] = stride;
    stride *= sizes_[static_cast<std::size_t>(i)];
  }
  return r;
}

double HostTensor::get(std::int64_t flat) const { return core::load_f64(ref(), flat); }

void HostTensor::set(std::int64_t flat, double x) {
  const TensorRef r = ref();
  if (dtype_ == DType::i32) {
    static_cast<std::int32_t*>(r.data)[flat] = static_cast<std::int32_t>(x);
  } else if (dtype_ == DType::i64) {
    static_cast<std::int64_t*>(r.data)[flat] = static_cast<std::int64_t>(x);
  } else if (dtype_ == DType::u8) {
    static_cast<std::uint8_t*>(r.data)[flat] = static_cast<std::uint8_t>(x);
  } else {
    core::store_f64(r, flat, x);
  }
}

std::vector<double> HostTensor::to_f64() const {
  std::vector<double> out(static_cast<std::size_t>(numel()));
  for (std::int64_t i = 0; i < numel(); ++i) out[static_cast<std::size_t>(i)] = get(i);
  return out;
}

HostTensor HostTensor::to(DType dtype) const {
  HostTensor out(dtype, sizes_);
  for (std::int64_t i = 0; i < numel(); ++i) out.set(i, get(i));
  return out;
}

bool HostTensor::bitwise_equal(const HostTensor& other) const {
  return dtype_ == other.dtype_ && sizes_ == other.sizes_ && bytes_ == other.bytes_;
}

double rel_error(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) throw std::invalid_argument("rel_error: size mismatch");
  double num = 0.0, den = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double d = std::fabs(a[i] - b[i]);
    if (std::isnan(d)) return INFINITY;
    num = std::max(num, d);
    den = std::max(den, std::fabs(b[i]));
  }
  if (den == 0.0) return num == 0.0 ? 0.0 : INFINITY;
  return num / den;
}

double rel_error(const HostTensor& a, const HostTensor& b) { return rel_error(a.to_f64(), b.to_f64()); }

}  // namespace sdm::testing

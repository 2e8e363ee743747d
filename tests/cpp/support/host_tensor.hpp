// host_tensor.hpp - an owning, contiguous host tensor for tests and benchmarks.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <vector>

#include "sdm/types.hpp"

namespace sdm::testing {

class HostTensor {
 public:
  HostTensor() = default;
  HostTensor(DType dtype, std::vector<std::int64_t> sizes);

  TensorRef ref() const;  // a view (mutable through the pointer, as TensorRef is)
  DType dtype() const { return dtype_; }
  const std::vector<std::int64_t>& sizes() const { return sizes_; }
  std::int64_t numel() const;
  bool defined() const { return !sizes_.empty(); }

  double get(std::int64_t flat) const;     // any dtype, as double
  void set(std::int64_t flat, double x);   // rounds once to the dtype
  std::vector<double> to_f64() const;
  HostTensor to(DType dtype) const;        // converted copy (rounds once)
  bool bitwise_equal(const HostTensor& other) const;

 private:
  DType dtype_ = DType::f32;
  std::vector<std::int64_t> sizes_;
  std::vector<unsigned char> bytes_;
};

// Relative error max|a - b| / max|b| (b is the reference). 0 when both are all zero.
double rel_error(const HostTensor& a, const HostTensor& b);
double rel_error(const std::vector<double>& a, const std::vector<double>& b);

}  // namespace sdm::testing

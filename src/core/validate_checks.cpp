// validate_checks.cpp - one helper per kind of argument check (validate_checks.hpp), and the
// well-formedness and data checks of validate.hpp (check_tensor_ref, check_engine_data).
#include "core/validate_checks.hpp"

#include <algorithm>
#include <string>

#include "sdm/error.hpp"

namespace sdm::core {
namespace validation {

namespace {

std::string strides_string(const TensorRef& t) {
  return dims_string(Dims(t.strides.begin(), t.strides.begin() + t.ndim));
}

std::string dtypes_string(const DTypes& dtypes) {
  std::string out;
  for (std::size_t i = 0; i < dtypes.size(); ++i) {
    if (i) out += (i + 1 == dtypes.size()) ? " or " : ", ";
    out += dtype_name(dtypes[i]);
  }
  return out;
}

}  // namespace

std::string dims_string(const Dims& dims) {
  std::string out = "[";
  for (std::size_t i = 0; i < dims.size(); ++i) out += (i ? ", " : "") + std::to_string(dims[i]);
  return out + "]";
}

Dims dims_of(const TensorRef& t) {
  return Dims(t.sizes.begin(), t.sizes.begin() + t.ndim);
}

DTypes bank_dtypes(BankDTypes banks) {
  if (banks == BankDTypes::reference) return {DType::bf16, DType::f32, DType::f64};
  return {DType::bf16, DType::f32};
}

DTypes input_dtypes(BankDTypes banks) {
  if (banks == BankDTypes::reference) return {DType::f32, DType::bf16, DType::f16, DType::f64};
  return {DType::f32, DType::bf16, DType::f16};
}

void check_present(const TensorRef& t, const char* name) {
  if (!t.defined()) throw ValueError(name, std::string(name) + " is required, got an absent tensor");
}

void check_dtype(const TensorRef& t, const char* name, const DTypes& allowed) {
  if (std::find(allowed.begin(), allowed.end(), t.dtype) == allowed.end()) {
    throw TypeError(name, std::string(name) + " must be " + dtypes_string(allowed) + ", got " +
                              dtype_name(t.dtype));
  }
}

void check_device(const TensorRef& t, const char* name, const Device& bank_device) {
  if (!(t.device == bank_device)) {
    throw ValueError(name, std::string(name) + " must be on the bank's device " + device_name(bank_device) +
                               " (memory), got " + device_name(t.device));
  }
}

std::int64_t size_product(const std::int64_t* first, const std::int64_t* last) {
  std::int64_t out = 1;
  bool saturated = false;
  for (; first != last; ++first) {
    if (*first == 0) return 0;
    saturated = saturated || __builtin_mul_overflow(out, *first, &out) || out > kMaxElements;
  }
  return saturated ? kMaxElements + 1 : out;
}

std::int64_t size_product(std::initializer_list<std::int64_t> factors) {
  return size_product(factors.begin(), factors.end());
}

void check_element_count(const TensorRef& t, const char* name) {
  const std::int64_t* sizes = t.sizes.data();
  if (std::any_of(sizes, sizes + t.ndim, [](std::int64_t size) { return size < 0; })) {
    throw ValueError(name, std::string(name) + " has a negative size: shape " + t.shape_string());
  }
  if (size_product(sizes, sizes + t.ndim) > kMaxElements) {
    throw ValueError(name, std::string(name) + " of shape " + t.shape_string() + " has more than 2^52 elements, "
                               "beyond what sdm addresses");
  }
}

void check_contiguous(const TensorRef& t, const char* name) {
  if (!t.is_contiguous()) {
    throw ValueError(name, std::string(name) + " must be contiguous, got shape " + t.shape_string() +
                               " with strides " + strides_string(t));
  }
}

void check_ndim(const TensorRef& t, const char* name, int ndim, const char* pattern) {
  if (t.ndim != ndim) {
    throw ValueError(name, std::string(name) + " must be " + std::to_string(ndim) + "-D " + pattern +
                               ", got shape " + t.shape_string());
  }
}

void check_shape(const TensorRef& t, const char* name, std::initializer_list<ShapeRule> accepted) {
  const Dims got = dims_of(t);
  std::string expected;
  for (const ShapeRule& rule : accepted) {
    if (got == rule.dims) return;
    expected += (expected.empty() ? "" : " or ") + rule.pattern + " = " + dims_string(rule.dims);
  }
  throw ValueError(name, std::string(name) + " must have shape " + expected + ", got " + dims_string(got));
}

void check_in_range(std::int64_t value, const std::string& what, const char* argument, std::int64_t lo,
                    std::int64_t hi) {
  if (value < lo || value > hi) {
    throw ValueError(argument, what + " must be in " + std::to_string(lo) + ".." + std::to_string(hi) +
                                   ", got " + std::to_string(value));
  }
}

void check_at_least(std::int64_t value, const std::string& what, const char* argument, std::int64_t lo) {
  if (value < lo) {
    throw ValueError(argument, what + " must be >= " + std::to_string(lo) + ", got " + std::to_string(value));
  }
}

void check_argument(const TensorRef& t, const char* name, const DTypes& dtypes, const Device& bank_device) {
  check_present(t, name);
  check_tensor_ref(t, name);
  check_dtype(t, name, dtypes);
  check_device(t, name, bank_device);
  check_element_count(t, name);
}

void check_tensor(const TensorRef& t, const char* name, const DTypes& dtypes, const Device& bank_device,
                  std::initializer_list<ShapeRule> accepted) {
  check_argument(t, name, dtypes, bank_device);
  check_shape(t, name, accepted);
  check_contiguous(t, name);
}

}  // namespace validation

using namespace validation;

void check_tensor_ref(const TensorRef& t, const char* name) {
  if (t.ndim < 0 || t.ndim > TensorRef::kMaxDims) {
    throw ValueError(name, std::string(name) + " has ndim = " + std::to_string(t.ndim) + "; a TensorRef holds 0 to " +
                               std::to_string(TensorRef::kMaxDims) + " dimensions");
  }
  const std::int64_t* sizes = t.sizes.data();
  if (std::any_of(sizes, sizes + t.ndim, [](std::int64_t size) { return size < 0; })) {
    throw ValueError(name, std::string(name) + " has a negative size: shape " + t.shape_string());
  }
  const std::int64_t* strides = t.strides.data();
  if (std::any_of(strides, strides + t.ndim, [](std::int64_t stride) { return stride < 0; })) {
    throw ValueError(name, std::string(name) + " has a negative stride: shape " + t.shape_string() + " with strides " +
                               strides_string(t));
  }
}

void check_engine_data(const NamedTensors& required, const NamedTensors& optional) {
  auto check = [](const NamedTensor& t) {
    check_tensor_ref(t.tensor, t.name);
    if (t.tensor.data == nullptr && size_product(t.tensor.sizes.data(), t.tensor.sizes.data() + t.tensor.ndim) > 0) {
      throw ValueError(t.name, std::string(t.name) + " has no data (data == nullptr) but its shape " +
                                   t.tensor.shape_string() + " has elements; the op reads and writes tensor data (only "
                                   "the shape-only checks and plans take data-less views)");
    }
  };
  for (const NamedTensor& t : required) {
    check_present(t.tensor, t.name);
    check(t);
  }
  for (const NamedTensor& t : optional) {
    if (t.tensor.defined()) check(t);
  }
}

}  // namespace sdm::core

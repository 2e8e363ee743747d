// types.cpp - DType / Device helpers and TensorRef geometry.
#include <string>

#include "sdm/error.hpp"
#include "sdm/types.hpp"

namespace sdm {

std::size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::f64: return 8;
    case DType::f32: return 4;
    case DType::bf16: return 2;
    case DType::f16: return 2;
    case DType::i32: return 4;
    case DType::i64: return 8;
    case DType::u8: return 1;
  }
  throw RuntimeError("dtype_size: unknown dtype");
}

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::f64: return "float64";
    case DType::f32: return "float32";
    case DType::bf16: return "bfloat16";
    case DType::f16: return "float16";
    case DType::i32: return "int32";
    case DType::i64: return "int64";
    case DType::u8: return "uint8";
  }
  return "unknown";
}

bool is_floating(DType dtype) {
  return dtype == DType::f64 || dtype == DType::f32 || dtype == DType::bf16 || dtype == DType::f16;
}

std::string device_name(const Device& device) {
  if (device.type == DeviceType::cpu) return "cpu";
  if (device.type == DeviceType::meta) return "meta";
  return "cuda:" + std::to_string(device.index);
}

TensorRef TensorRef::contiguous(void* data, DType dtype, std::initializer_list<std::int64_t> sizes,
                                Device device) {
  if (sizes.size() > static_cast<std::size_t>(kMaxDims)) {
    throw ValueError("sizes", "TensorRef supports at most 4 dimensions, got " +
                                  std::to_string(sizes.size()));
  }
  TensorRef ref;
  ref.data = data;
  ref.dtype = dtype;
  ref.device = device;
  ref.ndim = static_cast<int>(sizes.size());
  int d = 0;
  for (std::int64_t s : sizes) ref.sizes[static_cast<std::size_t>(d++)] = s;
  std::int64_t stride = 1;
  for (int i = ref.ndim - 1; i >= 0; --i) {
    ref.strides[static_cast<std::size_t>(i)] = stride;
    stride *= ref.sizes[static_cast<std::size_t>(i)];
  }
  return ref;
}

std::int64_t TensorRef::numel() const {
  std::int64_t n = 1;
  for (int i = 0; i < ndim; ++i) n *= sizes[static_cast<std::size_t>(i)];
  return n;
}

bool TensorRef::is_contiguous() const {
  std::int64_t expected = 1;
  for (int i = ndim - 1; i >= 0; --i) {
    const auto d = static_cast<std::size_t>(i);
    if (sizes[d] != 1 && strides[d] != expected) return false;
    expected *= sizes[d];
  }
  return true;
}

// Built with std::to_string, not a std::ostringstream: the error messages use no iostream (an
// ostringstream here crashed the CUDA build of the extension on the GPU machine; docs/cuda.md).
// A malformed ndim (outside 0..kMaxDims) prints the sizes the arrays hold, never past them.
std::string TensorRef::shape_string() const {
  std::string out = "[";
  const int shown = ndim < 0 ? 0 : ndim > kMaxDims ? kMaxDims : ndim;
  for (int i = 0; i < shown; ++i) out += (i ? ", " : "") + std::to_string(sizes[static_cast<std::size_t>(i)]);
  return out + "]";
}

}  // namespace sdm

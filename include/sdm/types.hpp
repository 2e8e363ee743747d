// sdm/types.hpp - element types, devices and the non-owning tensor view of the C++ API.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>

namespace sdm {

// Element types a TensorRef may hold.
enum class DType : std::uint8_t { f64, f32, bf16, f16, i32, i64, u8 };

// meta: a tensor of shapes only (no data). Only the shape-only entry points accept it
// (plan_write_read, write_read_saved_bytes, check_write_read, check_decode_step); the engines
// refuse it.
enum class DeviceType : std::uint8_t { cpu, cuda, meta };

struct Device {
  DeviceType type = DeviceType::cpu;
  int index = 0;  // CUDA ordinal; 0 for the CPU
  friend bool operator==(const Device&, const Device&) = default;
};

std::size_t dtype_size(DType dtype);     // bytes per element
const char* dtype_name(DType dtype);     // "float32", "bfloat16", ... (PyTorch's spelling)
bool is_floating(DType dtype);           // f64, f32, bf16, f16
std::string device_name(const Device&);  // "cpu", "cuda:0", "meta"

// A non-owning view of a strided tensor: data pointer, element type, device, sizes and
// strides in elements. A default-constructed TensorRef (data == nullptr, ndim == 0) means
// "absent" for optional arguments.
struct TensorRef {
  static constexpr int kMaxDims = 4;

  void* data = nullptr;
  DType dtype = DType::f32;
  Device device{};
  int ndim = 0;
  std::array<std::int64_t, kMaxDims> sizes{};
  std::array<std::int64_t, kMaxDims> strides{};

  // A contiguous (row-major) view.
  static TensorRef contiguous(void* data, DType dtype, std::initializer_list<std::int64_t> sizes,
                              Device device = {});

  bool defined() const { return data != nullptr || ndim > 0; }
  std::int64_t size(int dim) const { return sizes[static_cast<std::size_t>(dim < 0 ? dim + ndim : dim)]; }
  std::int64_t numel() const;
  bool is_contiguous() const;
  std::string shape_string() const;  // "[2, 5, 3]"

  template <typename T>
  T* data_as() const { return static_cast<T*>(data); }
};

}  // namespace sdm

// tensor_ref.cpp - at::Tensor -> sdm::TensorRef adapters.
#include "tensor_ref.hpp"

#include <string>

#include "sdm/error.hpp"

namespace sdm::torch_bindings {
namespace {

// A dtype as Python spells it after "torch." (c10::toString says "Char" for torch.int8).
std::string torch_dtype_name(at::ScalarType type) {
  switch (type) {
    case at::kBool: return "bool";
    case at::kByte: return "uint8";
    case at::kChar: return "int8";
    case at::kShort: return "int16";
    case at::kInt: return "int32";
    case at::kLong: return "int64";
    case at::kHalf: return "float16";
    case at::kBFloat16: return "bfloat16";
    case at::kFloat: return "float32";
    case at::kDouble: return "float64";
    case at::kComplexFloat: return "complex64";
    case at::kComplexDouble: return "complex128";
    default: return c10::toString(type);
  }
}

// The dtypes an index argument takes, or nullptr for the other arguments.
const char* index_dtypes(const std::string& name) {
  if (name == "k_idx" || name == "q_idx") return "int32 or int64 (bank row indices)";
  if (name == "slots") return "int64 (slot ids)";
  return nullptr;
}

}  // namespace

DType to_sdm_dtype(at::ScalarType type, const char* name) {
  switch (type) {
    case at::kDouble: return DType::f64;
    case at::kFloat: return DType::f32;
    case at::kBFloat16: return DType::bf16;
    case at::kHalf: return DType::f16;
    case at::kInt: return DType::i32;
    case at::kLong: return DType::i64;
    case at::kByte: return DType::u8;
    default:
      if (const char* index = index_dtypes(name)) {
        throw TypeError(name, std::string(name) + " must be " + index + ", got " + torch_dtype_name(type));
      }
      throw TypeError(name, std::string(name) + " has unsupported dtype " + torch_dtype_name(type) +
                                " (sdm takes float64, float32, bfloat16, float16, int32, int64, uint8)");
  }
}

at::ScalarType to_scalar_type(DType dtype) {
  switch (dtype) {
    case DType::f64: return at::kDouble;
    case DType::f32: return at::kFloat;
    case DType::bf16: return at::kBFloat16;
    case DType::f16: return at::kHalf;
    case DType::i32: return at::kInt;
    case DType::i64: return at::kLong;
    case DType::u8: return at::kByte;
  }
  throw RuntimeError("to_scalar_type: unknown sdm::DType " + std::to_string(static_cast<int>(dtype)));
}

Device to_sdm_device(const c10::Device& device, const char* name) {
  if (device.is_cpu()) return Device{DeviceType::cpu, 0};
  if (device.is_cuda()) return Device{DeviceType::cuda, device.index() < 0 ? 0 : device.index()};
  if (device.is_meta()) return Device{DeviceType::meta, 0};
  throw ValueError(name, std::string(name) + " is on unsupported device " + device.str() +
                             " (sdm takes cpu and cuda tensors, and meta tensors for shapes)");
}

namespace {

TensorRef view_of(const at::Tensor& tensor, void* data, const Device& device, const char* name) {
  if (tensor.dim() > TensorRef::kMaxDims) {
    throw ValueError(name, std::string(name) + " must have at most " + std::to_string(TensorRef::kMaxDims) +
                               " dimensions, got " + std::to_string(tensor.dim()));
  }
  TensorRef ref;
  ref.data = data;
  ref.dtype = to_sdm_dtype(tensor.scalar_type(), name);
  ref.device = device;
  ref.ndim = static_cast<int>(tensor.dim());
  for (int d = 0; d < ref.ndim; ++d) {
    ref.sizes[static_cast<std::size_t>(d)] = tensor.size(d);
    ref.strides[static_cast<std::size_t>(d)] = tensor.stride(d);
  }
  return ref;
}

}  // namespace

TensorRef to_ref(const at::Tensor& tensor, const char* name) {
  if (!tensor.defined()) return TensorRef{};
  return view_of(tensor, tensor.data_ptr(), to_sdm_device(tensor.device(), name), name);
}

TensorRef to_shape_ref(const at::Tensor& tensor, const char* name) {
  return view_of(tensor, nullptr, to_sdm_device(tensor.device(), name), name);
}

OpInputs contiguous_inputs(const at::Tensor& k_idx, const at::Tensor& k_val, const at::Tensor& v,
                           const at::Tensor& beta, const at::Tensor& g, const at::Tensor& q_idx,
                           const at::Tensor& q_val) {
  return OpInputs{k_idx.contiguous(), k_val.contiguous(), v.contiguous(),    beta.contiguous(),
                  g.contiguous(),     q_idx.contiguous(), q_val.contiguous()};
}

WriteReadArgs make_args(const at::Tensor& memory, const OpInputs& in) {
  WriteReadArgs args;
  args.memory = to_ref(memory, "memory");
  args.k_idx = to_ref(in.k_idx, "k_idx");
  args.k_val = to_ref(in.k_val, "k_val");
  args.v = to_ref(in.v, "v");
  args.beta = to_ref(in.beta, "beta");
  args.g = to_ref(in.g, "g");
  args.q_idx = to_ref(in.q_idx, "q_idx");
  args.q_val = to_ref(in.q_val, "q_val");
  return args;
}

}  // namespace sdm::torch_bindings

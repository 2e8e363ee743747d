// schema.cpp - the torch.ops.sdm operator schemas (docs/spec.md §9, §11).
//
//   write_read_             in-place no-grad chunked forward (inference, prefill, caches)
//   write_read_saving       saving forward -> (readings, final_bank): fills the caller's `saved` buffer
//                           (mutated; the bytes the engine does not write keep the caller's) and leaves
//                           memory as it is
//   limits                  every limit and default of the ops (sdm/options.hpp, sdm/product_key_topk.hpp)
//                           as a {name: value} dict: the Python package's only source for them
//   write_read_plan         shape-only plan of a call: size of `saved`, bank-gradient dtype (bf16?)
//                           (used by the fake kernels, and to allocate `saved`)
//   check_write_read, check_decode_step
//                           shape-only validation of write_read_ / decode_step (fake kernels)
//   write_read_backward     functional backward of write_read_saving
//   write_groups_count      the call's write groups (0-d int64 on the bank's device): the snapshot_rows of
//                           an exact `saved` (CPU: on the host; CUDA: on the current stream, no sync)
//   decode_step             one token per stream, in place
//   reference_write_read, reference_write_read_backward
//                           the float64 oracle as functional ops (tests, gradcheck)
//
// The fake kernels are registered from Python (sdm/_ops.py), which also holds sdm.write_read's
// torch.autograd.Function over write_read_saving and write_read_backward (WriteReadFunction); the
// ops that write a tensor in place get an Autograd kernel that refuses to be recorded
// (inplace_guard.cpp).
#include <torch/library.h>

#include <ATen/core/Dict.h>

#include <cstdint>
#include <string>

#include "sdm/options.hpp"
#include "sdm/product_key_topk.hpp"
#include "sdm/types.hpp"

namespace {

// Each key is its C++ constant's name in snake case, without the k.
c10::Dict<std::string, int64_t> limits() {
  c10::Dict<std::string, int64_t> out;
  out.insert("max_width", sdm::kMaxWidth);
  out.insert("max_chunk", sdm::kMaxChunk);
  out.insert("max_bank_rows", sdm::kMaxBankRows);
  out.insert("max_elements", sdm::kMaxElements);
  out.insert("max_dims", sdm::TensorRef::kMaxDims);  // TensorRef::kMaxDims: dimensions of a tensor
  out.insert("default_chunk", sdm::kDefaultChunk);
  out.insert("max_product_key_factors", sdm::kMaxProductKeyFactors);
  out.insert("max_product_key_k", sdm::kMaxProductKeyK);
  out.insert("max_product_key_slots", sdm::kMaxProductKeySlots);
  return out;
}

}  // namespace

TORCH_LIBRARY(sdm, m) {
  const std::string inputs = "Tensor k_idx, Tensor k_val, Tensor v, Tensor beta, Tensor g, Tensor q_idx, Tensor q_val";
  const std::string chunk = "int chunk_size=" + std::to_string(sdm::kDefaultChunk);  // the C++ default
  const std::string options =
      "int slots_per_stream, " + chunk + ", str snapshot_quant=\"none\", bool grad_bank_fp32=False";
  const std::string grads =
      "(Tensor grad_memory, Tensor grad_k_val, Tensor grad_v, Tensor grad_beta, Tensor grad_g, Tensor grad_q_val)";
  // The saving forward, its plan and its backward also take the snapshot rows of `saved` (0: the worst case).
  const std::string saving_options = options + ", int snapshot_rows=0";
  const auto def = [&m](const std::string& schema) { m.def(schema.c_str()); };

  m.def("limits() -> Dict(str, int)", &limits);
  def("write_read_(Tensor(a!) memory, " + inputs + ", *, " + options + ", bool validate=True) -> Tensor readings");
  def("write_read_saving(Tensor memory, " + inputs + ", Tensor(a!) saved, *, " + saving_options +
      ", bool validate=True) -> (Tensor readings, Tensor final_bank)");
  def("write_read_plan(Tensor memory, " + inputs + ", *, Device device, " + saving_options +
      ") -> (int saved_bytes, bool bank_grad_bf16)");
  def("check_write_read(Tensor memory, " + inputs + ", *, " + options + ") -> ()");
  def("check_decode_step(Tensor memory, " + inputs + ", *, int slots_per_stream=0) -> ()");
  def("write_read_backward(Tensor final_bank, Tensor saved, " + inputs +
      ", Tensor grad_readings, Tensor? grad_final_bank, *, " + saving_options + ", bool validate=True) -> " + grads);
  def("write_groups_count(Tensor memory, " + inputs + ", *, int slots_per_stream, " + chunk + ") -> Tensor count");
  def("decode_step(Tensor(a!) memory, " + inputs +
      ", *, int slots_per_stream=0, bool validate=True) -> Tensor readings");
  def("reference_write_read(Tensor memory, " + inputs + ", *, int slots_per_stream, " + chunk +
      ") -> (Tensor readings, Tensor final_bank)");
  def("reference_write_read_backward(Tensor memory, " + inputs +
      ", Tensor grad_readings, Tensor? grad_final_bank, *, int slots_per_stream, " + chunk + ") -> " + grads);
}

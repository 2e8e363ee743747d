// schema.cpp - the torch.ops.sdm operator schemas (docs/spec.md §9, §11).
//
//   write_read_             in-place no-grad chunked forward (inference, prefill, caches)
//   write_read              functional saving forward -> (readings, final_bank, saved)
//   limits                  the op's size limits (W, R; chunk size; bank rows), for the layer's checks
//   write_read_plan         shape-only plan of a call: size of `saved`, bank-gradient dtype (bf16?)
//                           (used by the fake kernels)
//   check_write_read, check_decode_step
//                           shape-only validation of write_read_ / decode_step (fake kernels)
//   write_read_backward     functional backward of write_read
//   decode_step             one token per stream, in place
//   reference_write_read, reference_write_read_backward
//                           the float64 oracle as functional ops (tests, gradcheck)
//
// Autograd for write_read and the fake kernels are registered from Python (sdm/_ops.py);
// the in-place ops get an Autograd kernel that refuses to be recorded (inplace_guard.cpp).
#include <torch/library.h>

#include <tuple>

#include "sdm/options.hpp"

#define SDM_OP_INPUTS \
  "Tensor k_idx, Tensor k_val, Tensor v, Tensor beta, Tensor g, Tensor q_idx, Tensor q_val"
#define SDM_OP_OPTIONS \
  "int slots_per_stream, int chunk_size=64, str snapshot_quant=\"none\", bool grad_bank_fp32=False"
#define SDM_GRADS \
  "(Tensor grad_memory, Tensor grad_k_val, Tensor grad_v, Tensor grad_beta, Tensor grad_g, Tensor grad_q_val)"

namespace {

std::tuple<int64_t, int64_t, int64_t> limits() {
  return {sdm::kMaxWidth, sdm::kMaxChunk, sdm::kMaxBankRows};
}

}  // namespace

TORCH_LIBRARY(sdm, m) {
  m.def("limits() -> (int max_width, int max_chunk, int max_bank_rows)", &limits);
  m.def("write_read_(Tensor(a!) memory, " SDM_OP_INPUTS ", *, " SDM_OP_OPTIONS
        ", bool validate=True) -> Tensor readings");
  m.def("write_read(Tensor memory, " SDM_OP_INPUTS ", *, " SDM_OP_OPTIONS
        ", bool validate=True) -> (Tensor readings, Tensor final_bank, Tensor saved)");
  m.def("write_read_plan(Tensor memory, " SDM_OP_INPUTS ", *, Device device, " SDM_OP_OPTIONS
        ") -> (int saved_bytes, bool bank_grad_bf16)");
  m.def("check_write_read(Tensor memory, " SDM_OP_INPUTS ", *, " SDM_OP_OPTIONS ") -> ()");
  m.def("check_decode_step(Tensor memory, " SDM_OP_INPUTS ", *, int slots_per_stream=0) -> ()");
  m.def("write_read_backward(Tensor final_bank, Tensor saved, " SDM_OP_INPUTS
        ", Tensor grad_readings, Tensor? grad_final_bank, *, " SDM_OP_OPTIONS ", bool validate=True) -> " SDM_GRADS);
  m.def("decode_step(Tensor(a!) memory, " SDM_OP_INPUTS
        ", *, int slots_per_stream=0, bool validate=True) -> Tensor readings");
  m.def("reference_write_read(Tensor memory, " SDM_OP_INPUTS
        ", *, int slots_per_stream, int chunk_size=64) -> (Tensor readings, Tensor final_bank)");
  m.def("reference_write_read_backward(Tensor memory, " SDM_OP_INPUTS
        ", Tensor grad_readings, Tensor? grad_final_bank, *, int slots_per_stream, int chunk_size=64) -> " SDM_GRADS);
}

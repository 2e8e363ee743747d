// kernels.hpp - the torch.ops.sdm kernels (schemas in schema.cpp).
//
// Each kernel converts its at::Tensors to sdm::TensorRefs and calls the public C++ API
// (include/sdm/ops.hpp), which dispatches on the bank's device. For a CUDA bank the kernel
// makes the bank's device current and passes torch's current stream on it as
// options.cuda_stream (device_context.hpp, device-generic c10 calls, no CUDA header), so the
// CPU and CUDA registrations (register_cpu.cpp, register_cuda.cpp) are these same functions.
// sdm::Error is rethrown as ValueError / TypeError / RuntimeError (errors.hpp); inputs are
// validated by the C++ API before anything caller-visible is written.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/util/string_view.h>

#include <cstdint>
#include <optional>
#include <tuple>

namespace sdm::torch_bindings {

using GradTuple = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>;

// sdm::write_read_ : no-grad chunked forward, in place. Returns readings [P, T, hd] in the
// bank dtype; `memory` holds the final bank afterwards.
at::Tensor write_read_inplace(at::Tensor& memory, const at::Tensor& k_idx, const at::Tensor& k_val,
                              const at::Tensor& v, const at::Tensor& beta, const at::Tensor& g,
                              const at::Tensor& q_idx, const at::Tensor& q_val, int64_t slots_per_stream,
                              int64_t chunk_size, c10::string_view snapshot_quant, bool grad_bank_fp32,
                              bool validate);

// sdm::write_read_saving : the saving forward. Returns (readings, final_bank): the final bank is
// a new tensor (memory is not modified). Fills `saved`, the caller's u8 buffer of
// write_read_saved_bytes bytes (1-D, contiguous, 16-byte aligned, on the bank's device), with
// what write_read_backward reads; its other bytes keep what the caller put there (docs/spec.md §11).
std::tuple<at::Tensor, at::Tensor> write_read_saving(
    const at::Tensor& memory, const at::Tensor& k_idx, const at::Tensor& k_val, const at::Tensor& v,
    const at::Tensor& beta, const at::Tensor& g, const at::Tensor& q_idx, const at::Tensor& q_val, at::Tensor& saved,
    int64_t slots_per_stream, int64_t chunk_size, c10::string_view snapshot_quant, bool grad_bank_fp32,
    int64_t snapshot_rows, bool validate);

// sdm::write_read_plan : what the fake kernels need of a call's plan (sdm/plan.hpp) on `device`
// (a meta device: planned as the CPU): the size of `saved` and whether the bank gradient is
// bfloat16 (else float32; a bool, not a ScalarType, which traced calls would see as an int).
// Reads shapes and dtypes only (meta and fake tensors are fine); validates them, with each
// tensor on its own device.
std::tuple<int64_t, bool> write_read_plan(const at::Tensor& memory, const at::Tensor& k_idx, const at::Tensor& k_val,
                                          const at::Tensor& v, const at::Tensor& beta, const at::Tensor& g,
                                          const at::Tensor& q_idx, const at::Tensor& q_val, c10::Device device,
                                          int64_t slots_per_stream, int64_t chunk_size, c10::string_view snapshot_quant,
                                          bool grad_bank_fp32, int64_t snapshot_rows);

// sdm::check_write_read / sdm::check_decode_step : every shape, dtype, device, size and option
// rule of write_read_ / decode_step, on shapes only (meta and fake tensors are fine); raise what
// the real op raises. The fake kernels call them.
void check_write_read(const at::Tensor& memory, const at::Tensor& k_idx, const at::Tensor& k_val,
                      const at::Tensor& v, const at::Tensor& beta, const at::Tensor& g, const at::Tensor& q_idx,
                      const at::Tensor& q_val, int64_t slots_per_stream, int64_t chunk_size,
                      c10::string_view snapshot_quant, bool grad_bank_fp32);
void check_decode_step(const at::Tensor& memory, const at::Tensor& k_idx, const at::Tensor& k_val,
                       const at::Tensor& v, const at::Tensor& beta, const at::Tensor& g, const at::Tensor& q_idx,
                       const at::Tensor& q_val, int64_t slots_per_stream);

// sdm::write_read_backward : gradients (memory, k_val, v, beta, g, q_val) of a saving
// forward, given its final bank and saved buffer. Works on a private clone of
// `final_bank`; no argument is modified. The bank gradient is f32 for f32 banks and for
// bf16 banks with grad_bank_fp32, else bf16; the others take their input's dtype.
GradTuple write_read_backward(const at::Tensor& final_bank, const at::Tensor& saved, const at::Tensor& k_idx,
                              const at::Tensor& k_val, const at::Tensor& v, const at::Tensor& beta,
                              const at::Tensor& g, const at::Tensor& q_idx, const at::Tensor& q_val,
                              const at::Tensor& grad_readings, const std::optional<at::Tensor>& grad_final_bank,
                              int64_t slots_per_stream, int64_t chunk_size, c10::string_view snapshot_quant,
                              bool grad_bank_fp32, int64_t snapshot_rows, bool validate);

// sdm::write_groups_count : the call's write groups, a 0-d int64 tensor on the bank's device
// (sdm::write_groups_count): the snapshot_rows of an exact `saved`.
at::Tensor write_groups_count(const at::Tensor& memory, const at::Tensor& k_idx, const at::Tensor& k_val,
                              const at::Tensor& v, const at::Tensor& beta, const at::Tensor& g, const at::Tensor& q_idx,
                              const at::Tensor& q_val, int64_t slots_per_stream, int64_t chunk_size);

// sdm::decode_step : one token per stream, in place (docs/spec.md §9). Readings shaped like v.
at::Tensor decode_step(at::Tensor& memory, const at::Tensor& k_idx, const at::Tensor& k_val, const at::Tensor& v,
                       const at::Tensor& beta, const at::Tensor& g, const at::Tensor& q_idx,
                       const at::Tensor& q_val, int64_t slots_per_stream, bool validate);

// sdm::reference_write_read : the float64 oracle (sdm::reference), functional. Banks may be
// float64 too. Returns (readings, final_bank) in the bank dtype.
std::tuple<at::Tensor, at::Tensor> reference_write_read(
    const at::Tensor& memory, const at::Tensor& k_idx, const at::Tensor& k_val, const at::Tensor& v,
    const at::Tensor& beta, const at::Tensor& g, const at::Tensor& q_idx, const at::Tensor& q_val,
    int64_t slots_per_stream, int64_t chunk_size);

// sdm::reference_write_read_backward : exact gradients of the oracle from the INITIAL bank.
GradTuple reference_write_read_backward(const at::Tensor& memory, const at::Tensor& k_idx, const at::Tensor& k_val,
                                        const at::Tensor& v, const at::Tensor& beta, const at::Tensor& g,
                                        const at::Tensor& q_idx, const at::Tensor& q_val,
                                        const at::Tensor& grad_readings,
                                        const std::optional<at::Tensor>& grad_final_bank,
                                        int64_t slots_per_stream, int64_t chunk_size);

}  // namespace sdm::torch_bindings

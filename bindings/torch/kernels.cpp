// kernels.cpp - the torch.ops.sdm kernels: at::Tensor in, sdm C++ API call, at::Tensor out.
#include "kernels.hpp"

#include <ATen/ATen.h>

#include <string_view>

#include "device_context.hpp"
#include "errors.hpp"
#include "sdm/ops.hpp"
#include "sdm/options.hpp"
#include "sdm/plan.hpp"
#include "sdm/reference.hpp"
#include "tensor_ref.hpp"

namespace sdm::torch_bindings {
namespace {

WriteReadOptions make_options(int64_t slots_per_stream, int64_t chunk_size, c10::string_view snapshot_quant,
                              bool grad_bank_fp32, bool validate, void* cuda_stream = nullptr,
                              int64_t snapshot_rows = 0) {
  WriteReadOptions options;
  options.snapshot_rows = snapshot_rows;
  options.cuda_stream = cuda_stream;
  options.slots_per_stream = slots_per_stream;
  options.chunk_size = chunk_size;
  options.snapshot_quant = parse_snapshot_quant(std::string_view(snapshot_quant.data(), snapshot_quant.size()));
  options.grad_bank_fp32 = grad_bank_fp32;
  options.validate = validate;
  return options;
}

// Readings [P, T, hd] (or shaped like v for the decode step) in the bank dtype.
at::Tensor new_readings(const at::Tensor& memory, const at::Tensor& v) {
  return at::empty(v.sizes(), v.options().dtype(memory.scalar_type()));
}

at::Tensor private_copy(const at::Tensor& bank) { return bank.clone(at::MemoryFormat::Contiguous); }

// Gradient buffers shaped like the inputs; the bank gradient in `bank_grad_dtype`.
struct GradBuffers {
  at::Tensor memory, k_val, v, beta, g, q_val;
  WriteReadGrads refs() const {
    return WriteReadGrads{to_ref(memory, "grad_memory"), to_ref(k_val, "grad_k_val"), to_ref(v, "grad_v"),
                          to_ref(beta, "grad_beta"),     to_ref(g, "grad_g"),         to_ref(q_val, "grad_q_val")};
  }
  GradTuple tuple() const { return {memory, k_val, v, beta, g, q_val}; }
};

GradBuffers new_grads(const at::Tensor& bank, at::ScalarType bank_grad_dtype, const OpInputs& in) {
  return GradBuffers{at::empty(bank.sizes(), bank.options().dtype(bank_grad_dtype)),
                     at::empty_like(in.k_val), at::empty_like(in.v), at::empty_like(in.beta),
                     at::empty_like(in.g),     at::empty_like(in.q_val)};
}

// Data-less views of the op's tensors, each on its own device (meta included).
WriteReadArgs shape_args(const at::Tensor& memory, const at::Tensor& k_idx, const at::Tensor& k_val,
                         const at::Tensor& v, const at::Tensor& beta, const at::Tensor& g, const at::Tensor& q_idx,
                         const at::Tensor& q_val) {
  WriteReadArgs args;
  args.memory = to_shape_ref(memory, "memory");
  args.k_idx = to_shape_ref(k_idx, "k_idx");
  args.k_val = to_shape_ref(k_val, "k_val");
  args.v = to_shape_ref(v, "v");
  args.beta = to_shape_ref(beta, "beta");
  args.g = to_shape_ref(g, "g");
  args.q_idx = to_shape_ref(q_idx, "q_idx");
  args.q_val = to_shape_ref(q_val, "q_val");
  return args;
}

TensorRef optional_ref(const std::optional<at::Tensor>& tensor, at::Tensor& keep_alive, const char* name) {
  if (!tensor.has_value() || !tensor->defined()) return TensorRef{};
  keep_alive = tensor->contiguous();
  return to_ref(keep_alive, name);
}

}  // namespace

at::Tensor write_read_inplace(at::Tensor& memory, const at::Tensor& k_idx, const at::Tensor& k_val,
                              const at::Tensor& v, const at::Tensor& beta, const at::Tensor& g,
                              const at::Tensor& q_idx, const at::Tensor& q_val, int64_t slots_per_stream,
                              int64_t chunk_size, c10::string_view snapshot_quant, bool grad_bank_fp32,
                              bool validate) {
  return translate_errors([&] {
    const DeviceContext context(memory);
    const auto options =
        make_options(slots_per_stream, chunk_size, snapshot_quant, grad_bank_fp32, validate, context.cuda_stream());
    const auto in = contiguous_inputs(k_idx, k_val, v, beta, g, q_idx, q_val);
    const auto args = make_args(memory, in);  // before `readings`: a bad input is named as itself
    auto readings = new_readings(memory, in.v);
    sdm::write_read_forward(args, to_ref(readings, "readings"), options);
    return readings;
  });
}

std::tuple<at::Tensor, at::Tensor> write_read_saving(
    const at::Tensor& memory, const at::Tensor& k_idx, const at::Tensor& k_val, const at::Tensor& v,
    const at::Tensor& beta, const at::Tensor& g, const at::Tensor& q_idx, const at::Tensor& q_val, at::Tensor& saved,
    int64_t slots_per_stream, int64_t chunk_size, c10::string_view snapshot_quant, bool grad_bank_fp32,
    int64_t snapshot_rows, bool validate) {
  return translate_errors([&] {
    const DeviceContext context(memory);
    const auto options = make_options(slots_per_stream, chunk_size, snapshot_quant, grad_bank_fp32, validate,
                                      context.cuda_stream(), snapshot_rows);
    const auto in = contiguous_inputs(k_idx, k_val, v, beta, g, q_idx, q_val);
    auto final_bank = private_copy(memory);
    const auto args = make_args(final_bank, in);  // before `readings` and `saved`: a bad input is named as itself
    auto readings = new_readings(memory, in.v);
    const auto readings_ref = to_ref(readings, "readings");
    // The C++ API checks `saved` (dtype, size, device, alignment, overlap) after the other arguments.
    sdm::write_read_forward_saving(args, readings_ref, to_ref(saved, "saved"), options);
    return std::make_tuple(readings, final_bank);
  });
}

std::tuple<int64_t, bool> write_read_plan(const at::Tensor& memory, const at::Tensor& k_idx, const at::Tensor& k_val,
                                          const at::Tensor& v, const at::Tensor& beta, const at::Tensor& g,
                                          const at::Tensor& q_idx, const at::Tensor& q_val, c10::Device device,
                                          int64_t slots_per_stream, int64_t chunk_size, c10::string_view snapshot_quant,
                                          bool grad_bank_fp32, int64_t snapshot_rows) {
  return translate_errors([&] {
    const auto options =
        make_options(slots_per_stream, chunk_size, snapshot_quant, grad_bank_fp32, false, nullptr, snapshot_rows);
    auto args = shape_args(memory, k_idx, k_val, v, beta, g, q_idx, q_val);
    sdm::check_write_read(args, TensorRef{}, options);  // on the tensors' own devices
    // Planned for `device` (a meta `device` is planned as the CPU).
    const auto on = to_sdm_device(device, "device");
    for (TensorRef* ref : {&args.memory, &args.k_idx, &args.k_val, &args.v, &args.beta, &args.g, &args.q_idx,
                           &args.q_val}) {
      ref->device = on;
    }
    const WriteReadPlan plan = sdm::plan_write_read(args, options);
    return std::make_tuple(static_cast<int64_t>(plan.saved_bytes), plan.bank_grad == DType::bf16);
  });
}

void check_write_read(const at::Tensor& memory, const at::Tensor& k_idx, const at::Tensor& k_val,
                      const at::Tensor& v, const at::Tensor& beta, const at::Tensor& g, const at::Tensor& q_idx,
                      const at::Tensor& q_val, int64_t slots_per_stream, int64_t chunk_size,
                      c10::string_view snapshot_quant, bool grad_bank_fp32) {
  translate_errors([&] {
    const auto options = make_options(slots_per_stream, chunk_size, snapshot_quant, grad_bank_fp32, false);
    sdm::check_write_read(shape_args(memory, k_idx, k_val, v, beta, g, q_idx, q_val), TensorRef{}, options);
  });
}

void check_decode_step(const at::Tensor& memory, const at::Tensor& k_idx, const at::Tensor& k_val,
                       const at::Tensor& v, const at::Tensor& beta, const at::Tensor& g, const at::Tensor& q_idx,
                       const at::Tensor& q_val, int64_t slots_per_stream) {
  translate_errors([&] {
    DecodeOptions options;
    options.slots_per_stream = slots_per_stream;
    sdm::check_decode_step(shape_args(memory, k_idx, k_val, v, beta, g, q_idx, q_val), TensorRef{}, options);
  });
}

GradTuple write_read_backward(const at::Tensor& final_bank, const at::Tensor& saved, const at::Tensor& k_idx,
                              const at::Tensor& k_val, const at::Tensor& v, const at::Tensor& beta,
                              const at::Tensor& g, const at::Tensor& q_idx, const at::Tensor& q_val,
                              const at::Tensor& grad_readings, const std::optional<at::Tensor>& grad_final_bank,
                              int64_t slots_per_stream, int64_t chunk_size, c10::string_view snapshot_quant,
                              bool grad_bank_fp32, int64_t snapshot_rows, bool validate) {
  return translate_errors([&] {
    const DeviceContext context(final_bank);
    auto options = make_options(slots_per_stream, chunk_size, snapshot_quant, grad_bank_fp32, validate,
                                context.cuda_stream(), snapshot_rows);
    // The backward only reads the final bank (no restore): no working copy, and the op stays
    // functional (final_bank is an input it does not mutate).
    options.restore_bank = false;
    const auto in = contiguous_inputs(k_idx, k_val, v, beta, g, q_idx, q_val);
    const auto bank = final_bank.contiguous();
    // Planned once: the plan gives the bank gradient's dtype and is handed to the backward.
    const WriteReadPlan plan = sdm::plan_write_read(make_args(bank, in), options);
    const auto grads = new_grads(final_bank, to_scalar_type(plan.bank_grad), in);
    const auto dy = grad_readings.contiguous();
    at::Tensor final_grad;
    sdm::write_read_backward(plan, make_args(bank, in), to_ref(saved, "saved"), to_ref(dy, "grad_readings"),
                             optional_ref(grad_final_bank, final_grad, "grad_final_bank"), grads.refs(), options);
    return grads.tuple();
  });
}

at::Tensor write_groups_count(const at::Tensor& memory, const at::Tensor& k_idx, const at::Tensor& k_val,
                              const at::Tensor& v, const at::Tensor& beta, const at::Tensor& g, const at::Tensor& q_idx,
                              const at::Tensor& q_val, int64_t slots_per_stream, int64_t chunk_size) {
  return translate_errors([&] {
    const DeviceContext context(memory);
    const auto options = make_options(slots_per_stream, chunk_size, "none", false, false, context.cuda_stream());
    const auto in = contiguous_inputs(k_idx, k_val, v, beta, g, q_idx, q_val);
    // The count reads the bank's shape and device only: memory itself, no copy (a non-contiguous
    // bank, which the saving forward copies, stands in as an uninitialised contiguous tensor).
    const auto bank = memory.is_contiguous() ? memory : at::empty(memory.sizes(), memory.options());
    auto count = at::empty({}, memory.options().dtype(at::kLong));
    sdm::write_groups_count(make_args(bank, in), to_ref(count, "count"), options);
    return count;
  });
}

at::Tensor decode_step(at::Tensor& memory, const at::Tensor& k_idx, const at::Tensor& k_val, const at::Tensor& v,
                       const at::Tensor& beta, const at::Tensor& g, const at::Tensor& q_idx,
                       const at::Tensor& q_val, int64_t slots_per_stream, bool validate) {
  return translate_errors([&] {
    const DeviceContext context(memory);
    DecodeOptions options;
    options.slots_per_stream = slots_per_stream;
    options.validate = validate;
    options.cuda_stream = context.cuda_stream();
    const auto in = contiguous_inputs(k_idx, k_val, v, beta, g, q_idx, q_val);
    const auto args = make_args(memory, in);  // before `readings`: a bad input is named as itself
    auto readings = new_readings(memory, in.v);
    sdm::decode_step(args, to_ref(readings, "readings"), options);
    return readings;
  });
}

std::tuple<at::Tensor, at::Tensor> reference_write_read(
    const at::Tensor& memory, const at::Tensor& k_idx, const at::Tensor& k_val, const at::Tensor& v,
    const at::Tensor& beta, const at::Tensor& g, const at::Tensor& q_idx, const at::Tensor& q_val,
    int64_t slots_per_stream, int64_t chunk_size) {
  return translate_errors([&] {
    const auto options = make_options(slots_per_stream, chunk_size, "none", false, true);
    const auto in = contiguous_inputs(k_idx, k_val, v, beta, g, q_idx, q_val);
    auto final_bank = private_copy(memory);
    auto readings = new_readings(memory, in.v);
    sdm::reference::write_read_forward(make_args(final_bank, in), to_ref(readings, "readings"), options);
    return std::make_tuple(readings, final_bank);
  });
}

GradTuple reference_write_read_backward(const at::Tensor& memory, const at::Tensor& k_idx, const at::Tensor& k_val,
                                        const at::Tensor& v, const at::Tensor& beta, const at::Tensor& g,
                                        const at::Tensor& q_idx, const at::Tensor& q_val,
                                        const at::Tensor& grad_readings,
                                        const std::optional<at::Tensor>& grad_final_bank,
                                        int64_t slots_per_stream, int64_t chunk_size) {
  return translate_errors([&] {
    const auto options = make_options(slots_per_stream, chunk_size, "none", false, true);
    const auto in = contiguous_inputs(k_idx, k_val, v, beta, g, q_idx, q_val);
    const auto bank = memory.contiguous();
    const auto grads = new_grads(bank, bank.scalar_type(), in);
    const auto dy = grad_readings.contiguous();
    at::Tensor final_grad;
    sdm::reference::write_read_backward(make_args(bank, in), to_ref(dy, "grad_readings"),
                                        optional_ref(grad_final_bank, final_grad, "grad_final_bank"), grads.refs(),
                                        options);
    return grads.tuple();
  });
}

}  // namespace sdm::torch_bindings

// inplace_guard.cpp - Autograd kernels of the ops that write a tensor in place (write_read_,
// decode_step: the bank; write_read_saving: the caller's `saved` buffer).
//
// Autograd cannot record these ops: the in-place forms save nothing for a backward, and the
// saving forward has no autograd formula of its own (sdm.write_read, a torch.autograd.Function,
// runs it with grad mode off and pairs it with write_read_backward). When grad mode is on and an
// input requires grad, they raise and name the functional form (docs/spec.md §11); otherwise they
// run the kernel below autograd and bump the written tensor's version counter, as any in-place op
// does.
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/LegacyTypeDispatch.h>
#include <c10/core/GradMode.h>
#include <torch/library.h>

#include <initializer_list>
#include <string>
#include <tuple>
#include <utility>

#include "kernels.hpp"

namespace sdm::torch_bindings {
namespace {

struct NamedTensor {
  const char* name;
  const at::Tensor* tensor;
};

// `what`: why autograd cannot record `op`.
void refuse_recording(const char* op, const char* what, std::initializer_list<NamedTensor> inputs) {
  if (!c10::GradMode::is_enabled()) return;
  for (const auto& input : inputs) {
    if (!input.tensor->requires_grad()) continue;
    // With std::string, not TORCH_CHECK: its message goes through c10::str, an iostream
    // (docs/cuda.md "The extension's C++ runtime").
    C10_THROW_ERROR(Error, std::string(op) + " " + what + ", but autograd would have to record it (grad mode is on "
                           "and " + input.name + " requires grad); use the functional sdm.write_read for training, "
                           "or call " + op + " under torch.no_grad() / torch.inference_mode()");
  }
}

constexpr const char* kUpdatesBank = "updates memory in place and saves nothing for a backward";

template <typename Signature, typename... Args>
auto call_below_autograd(const char* name, Args&&... args) {
  static const auto op = c10::Dispatcher::singleton().findSchemaOrThrow(name, "").typed<Signature>();
  at::AutoDispatchBelowADInplaceOrView guard;
  return op.call(std::forward<Args>(args)...);
}

at::Tensor write_read_inplace_autograd(at::Tensor& memory, const at::Tensor& k_idx, const at::Tensor& k_val,
                                       const at::Tensor& v, const at::Tensor& beta, const at::Tensor& g,
                                       const at::Tensor& q_idx, const at::Tensor& q_val, int64_t slots_per_stream,
                                       int64_t chunk_size, c10::string_view snapshot_quant, bool grad_bank_fp32,
                                       bool validate) {
  refuse_recording("sdm.write_read_", kUpdatesBank,
                   {{"memory", &memory}, {"k_val", &k_val}, {"v", &v}, {"beta", &beta}, {"g", &g},
                    {"q_val", &q_val}});
  auto readings = call_below_autograd<decltype(write_read_inplace)>(
      "sdm::write_read_", memory, k_idx, k_val, v, beta, g, q_idx, q_val, slots_per_stream, chunk_size,
      snapshot_quant, grad_bank_fp32, validate);
  memory.unsafeGetTensorImpl()->bump_version();
  return readings;
}

at::Tensor decode_step_autograd(at::Tensor& memory, const at::Tensor& k_idx, const at::Tensor& k_val,
                                const at::Tensor& v, const at::Tensor& beta, const at::Tensor& g,
                                const at::Tensor& q_idx, const at::Tensor& q_val, int64_t slots_per_stream,
                                bool validate) {
  refuse_recording("sdm.decode_step", kUpdatesBank,
                   {{"memory", &memory}, {"k_val", &k_val}, {"v", &v}, {"beta", &beta}, {"g", &g},
                    {"q_val", &q_val}});
  auto readings = call_below_autograd<decltype(decode_step)>("sdm::decode_step", memory, k_idx, k_val, v, beta, g,
                                                             q_idx, q_val, slots_per_stream, validate);
  memory.unsafeGetTensorImpl()->bump_version();
  return readings;
}

std::tuple<at::Tensor, at::Tensor> write_read_saving_autograd(
    const at::Tensor& memory, const at::Tensor& k_idx, const at::Tensor& k_val, const at::Tensor& v,
    const at::Tensor& beta, const at::Tensor& g, const at::Tensor& q_idx, const at::Tensor& q_val, at::Tensor& saved,
    int64_t slots_per_stream, int64_t chunk_size, c10::string_view snapshot_quant, bool grad_bank_fp32,
    int64_t snapshot_rows, bool validate) {
  refuse_recording("sdm.write_read_saving", "fills saved in place and has no autograd formula of its own",
                   {{"memory", &memory}, {"k_val", &k_val}, {"v", &v}, {"beta", &beta}, {"g", &g},
                    {"q_val", &q_val}});
  auto outputs = call_below_autograd<decltype(write_read_saving)>(
      "sdm::write_read_saving", memory, k_idx, k_val, v, beta, g, q_idx, q_val, saved, slots_per_stream, chunk_size,
      snapshot_quant, grad_bank_fp32, snapshot_rows, validate);
  saved.unsafeGetTensorImpl()->bump_version();
  return outputs;
}

}  // namespace

TORCH_LIBRARY_IMPL(sdm, Autograd, m) {
  m.impl("write_read_", &write_read_inplace_autograd);
  m.impl("decode_step", &decode_step_autograd);
  m.impl("write_read_saving", &write_read_saving_autograd);
}

}  // namespace sdm::torch_bindings

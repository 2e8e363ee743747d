#include "engine_run.hpp"

#include <random>
#include <vector>

namespace sdm::testing {
namespace {

WriteReadArgs args_on(const Problem& pb, const HostTensor& bank) {
  WriteReadArgs a = pb.args();
  a.memory = bank.ref();
  return a;
}

HostTensor copy_of(const HostTensor& t) { return t.to(t.dtype()); }

WriteReadGrads grads_of(const GradRun& out) {
  WriteReadGrads g;
  g.memory = out.memory.ref();
  g.k_val = out.k_val.ref();
  g.v = out.v.ref();
  g.beta = out.beta.ref();
  g.g = out.g.ref();
  g.q_val = out.q_val.ref();
  return g;
}

// Gradient buffers shaped like the inputs: the bank gradient in memory_dtype, the others in
// `dtype`.
GradRun make_grads(const Problem& pb, DType memory_dtype, DType dtype) {
  GradRun out;
  out.memory = HostTensor(memory_dtype, pb.memory.sizes());
  out.k_val = HostTensor(dtype, pb.k_val.sizes());
  out.v = HostTensor(dtype, pb.v.sizes());
  out.beta = HostTensor(dtype, pb.beta.sizes());
  out.g = HostTensor(dtype, pb.g.sizes());
  out.q_val = HostTensor(dtype, pb.q_val.sizes());
  return out;
}

TensorRef ref_or_absent(const HostTensor& t) { return t.defined() ? t.ref() : TensorRef{}; }

}  // namespace

ForwardRun engine_forward(const Problem& pb, const WriteReadOptions& options) {
  ForwardRun run;
  run.final_bank = copy_of(pb.memory);
  run.readings = pb.make_readings(pb.memory.dtype());
  write_read_forward(args_on(pb, run.final_bank), run.readings.ref(), options);
  return run;
}

ForwardRun engine_forward_saving(const Problem& pb, const WriteReadOptions& options) {
  ForwardRun run;
  run.final_bank = copy_of(pb.memory);
  run.readings = pb.make_readings(pb.memory.dtype());
  const WriteReadArgs a = args_on(pb, run.final_bank);
  run.saved = HostTensor(DType::u8, {static_cast<std::int64_t>(write_read_saved_bytes(a, options))});
  write_read_forward_saving(a, run.readings.ref(), run.saved.ref(), options);
  return run;
}

GradRun engine_backward(const Problem& pb, const ForwardRun& run, const HostTensor& grad_readings,
                        const HostTensor& grad_final_bank, const WriteReadOptions& options,
                        DType grad_memory_dtype) {
  GradRun out = make_grads(pb, grad_memory_dtype, DType::f32);
  out.bank_after = copy_of(run.final_bank);
  write_read_backward(args_on(pb, out.bank_after), run.saved.ref(), grad_readings.ref(), ref_or_absent(grad_final_bank),
                      grads_of(out), options);
  return out;
}

ForwardRun reference_forward(const Problem& pb, const WriteReadOptions& options) {
  ForwardRun run;
  run.final_bank = copy_of(pb.memory);
  run.readings = pb.make_readings(DType::f64);
  reference::write_read_forward(args_on(pb, run.final_bank), run.readings.ref(), options);
  return run;
}

GradRun reference_backward(const Problem& pb, const HostTensor& grad_readings, const HostTensor& grad_final_bank,
                           const WriteReadOptions& options) {
  GradRun out = make_grads(pb, DType::f64, DType::f64);
  reference::write_read_backward(pb.args(), grad_readings.ref(), ref_or_absent(grad_final_bank), grads_of(out),
                                 options);
  return out;
}

HostTensor random_tensor(std::vector<std::int64_t> sizes, double scale, std::uint64_t seed) {
  HostTensor t(DType::f32, std::move(sizes));
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  for (std::int64_t i = 0; i < t.numel(); ++i) t.set(i, scale * normal(rng));
  return t;
}

}  // namespace sdm::testing

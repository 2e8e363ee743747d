// test_cuda_backward.cpp - GPU tests of the CUDA backward of the chunked op. A plain program run
// by gpu_test_harness.hpp like test_cuda_engine.cpp: each test prints its measured errors and its
// failed checks (every check with --verbose); the exit status is 1 if any check failed. Without a CUDA device it prints a message and exits 0.
//
// Each case: the CUDA saving forward, then the CUDA backward with the final bank as the working
// bank, for the loss <readings, dy> + <final bank, dF> (dF present or absent). Oracles:
//   - the float64 reference's exact gradients (sdm::reference::write_read_backward) and
//   - the CPU engine's backward on the same inputs,
// metric max|a - b| / max|b| per gradient; tolerance f32 bank 1e-4, bf16 bank 3e-2 (room over the CPU
// engine's own bf16 error against the reference, tests/cpp/engine/test_engine_backward.cpp);
// the working bank is restored to the initial bank bitwise (snapshot "none").
// Bitwise checks: two backward runs, a CUDA-graph replay vs eager, a call asking for only some
// gradients vs one asking for all; `saved` and the inputs unchanged by the backward.
// Snapshot modes (docs/spec.md §5): per mode and bank, readings and final bank bitwise equal to mode
// "none"; gradients vs the reference and the CPU engine within the CPU engine's mode tolerances;
// the bank the backward restores bitwise equal to the CPU engine's (same codes and scales); the
// memory / v / beta gradients (which never read restored rows) bitwise equal to "none"'s; two
// forwards give the same saved bytes, two backwards the same gradients.
// Medium chunks (64 < C <= 128): the medium kernels of the dual product and solve_side (every block
// staged up front) and the blockwise kernels of C > 128 (cuda/common/chunk_products.hpp) give
// bitwise equal no-grad and saving forwards (readings, final bank, saved) and backwards (every
// gradient, restored bank), at every tile width, both staging paths (C % 4) and input dtypes.
// Extreme log-decays (g = -inf, -1e5 ... -1e30 mixed with normal g; docs/numerics.md): no-grad and
// saving forward and the backward in every mode, finite and within the tolerances above of the
// float64 reference (lossy modes: of the CPU engine).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "core/validate.hpp"
#include "cuda/common/chunk_products.hpp"
#include "device_tensor.hpp"
#include "engine_run.hpp"
#include "extreme_decay.hpp"
#include "gpu_test_harness.hpp"
#include "host_tensor.hpp"
#include "problem.hpp"
#include "sdm/error.hpp"
#include "sdm/ops.hpp"

namespace {

using namespace sdm;
using namespace sdm::testing;

double tolerance(DType bank) { return bank == DType::bf16 ? 3e-2 : 1e-4; }

void poison(const DeviceTensor& t) { cuda_ok(cudaMemset(t.data(), 0xff, t.bytes()), "cudaMemset"); }

std::string describe(const ProblemSpec& s, std::int64_t C) {
  char buf[256];
  std::snprintf(buf, sizeof buf, "P%lld T%lld W%lld R%lld hd%lld sps%lld C%lld G%lld %s", static_cast<long long>(s.P),
                static_cast<long long>(s.T), static_cast<long long>(s.W), static_cast<long long>(s.R),
                static_cast<long long>(s.hd), static_cast<long long>(s.slots_per_stream), static_cast<long long>(C),
                static_cast<long long>(s.G), dtype_name(s.bank));
  return buf;
}

// ---- one CUDA forward + backward ----------------------------------------------------------

// The six gradient buffers on the device (poisoned: unwritten elements show up as NaN).
struct DeviceGrads {
  DeviceTensor memory, k_val, v, beta, g, q_val;
  DeviceGrads(const Problem& pb, DType memory_dtype, DType dtype)
      : memory(memory_dtype, pb.memory.sizes()), k_val(dtype, pb.k_val.sizes()), v(dtype, pb.v.sizes()),
        beta(dtype, pb.beta.sizes()), g(dtype, pb.g.sizes()), q_val(dtype, pb.q_val.sizes()) {
    for (const DeviceTensor* t : {&memory, &k_val, &v, &beta, &g, &q_val}) poison(*t);
  }
  WriteReadGrads refs() const {
    WriteReadGrads out;
    out.memory = memory.ref(), out.k_val = k_val.ref(), out.v = v.ref();
    out.beta = beta.ref(), out.g = g.ref(), out.q_val = q_val.ref();
    return out;
  }
  GradRun to_host() const {
    GradRun out;
    out.memory = memory.to_host(), out.k_val = k_val.to_host(), out.v = v.to_host();
    out.beta = beta.to_host(), out.g = g.to_host(), out.q_val = q_val.to_host();
    return out;
  }
};

// A problem after the CUDA saving forward: inputs, final bank (the working bank), saved buffer.
struct CudaForward {
  DeviceProblem dp;
  DeviceTensor readings, saved, dy, d_final;
  bool has_final;
  CudaForward(const Problem& pb, const WriteReadOptions& opt, const HostTensor& dy_host, const HostTensor& d_final_host)
      : dp(pb), readings(pb.spec.bank, {pb.spec.P, pb.spec.T, pb.spec.hd}), dy(dy_host),
        has_final(d_final_host.defined()) {
    saved = DeviceTensor(DType::u8, {static_cast<std::int64_t>(write_read_saved_bytes(dp.args(), opt))});
    poison(saved);  // rows that start no group stay 0xff: saved buffers of two runs compare bitwise
    if (has_final) d_final = DeviceTensor(d_final_host);
    write_read_forward_saving(dp.args(), readings.ref(), saved.ref(), opt);
    sync();
  }
  TensorRef final_ref() const { return has_final ? d_final.ref() : TensorRef{}; }
  void backward(const WriteReadGrads& grads, const WriteReadOptions& opt) const {
    write_read_backward(dp.args(), saved.ref(), dy.ref(), final_ref(), grads, opt);
  }
};

struct GradView {
  const char* name;
  const HostTensor& tensor;
};
std::vector<GradView> views(const GradRun& r) {
  return {{"memory", r.memory}, {"k_val", r.k_val}, {"v", r.v}, {"beta", r.beta}, {"g", r.g}, {"q_val", r.q_val}};
}

// ---- every gradient vs the float64 reference and the CPU engine ---------------------------

struct Case {
  ProblemSpec spec;
  std::int64_t C;
  bool final_grad = true;
  bool grad_bank_fp32 = false;
  DType grad_memory = DType::f32;
};

void backward_case(const Case& c) {
  std::printf("  %s final-bank grad %s, grad_bank_fp32 %d, grad_memory %s\n", describe(c.spec, c.C).c_str(),
              c.final_grad ? "on" : "off", c.grad_bank_fp32 ? 1 : 0, dtype_name(c.grad_memory));
  const Problem pb = make_problem(c.spec);
  WriteReadOptions opt;
  opt.slots_per_stream = c.spec.slots_per_stream;
  opt.chunk_size = c.C;
  opt.grad_bank_fp32 = c.grad_bank_fp32;
  const HostTensor dy = random_tensor({c.spec.P, c.spec.T, c.spec.hd}, 1.0, c.spec.seed + 100);
  const HostTensor d_final = c.final_grad ? random_tensor({pb.bank_rows(), c.spec.hd}, 1.0, c.spec.seed + 200)
                                          : HostTensor();

  CudaForward fwd(pb, opt, dy, d_final);
  const HostTensor final_bank = fwd.dp.memory.to_host();
  DeviceGrads grads(pb, c.grad_memory, DType::f32);
  fwd.backward(grads.refs(), opt);
  sync();
  const GradRun got = grads.to_host();

  const GradRun want = reference_backward(pb, dy, d_final, opt);
  const GradRun cpu = engine_backward(pb, engine_forward_saving(pb, opt), dy, d_final, opt, c.grad_memory);
  const double tol = tolerance(c.spec.bank);
  const auto got_v = views(got), want_v = views(want), cpu_v = views(cpu);
  for (std::size_t k = 0; k < got_v.size(); ++k) {
    expect_error_at_most(rel_error(got_v[k].tensor, want_v[k].tensor), tol,
                         std::string("grad ") + got_v[k].name + " vs float64 reference");
    expect_error_at_most(rel_error(got_v[k].tensor, cpu_v[k].tensor), tol,
                         std::string("grad ") + got_v[k].name + " vs CPU engine");
  }
  expect(fwd.dp.memory.to_host().bitwise_equal(pb.memory), "working bank restored to the initial bank bitwise");
  expect(!final_bank.bitwise_equal(pb.memory), "(the forward did change the bank)");
}

void test_backward_vs_reference() {
  const DType f32 = DType::f32, bf16 = DType::bf16;
  std::vector<Case> cases;
  for (const DType bank : {f32, bf16}) {
    cases.push_back({spec_of(2, 37, 3, 5, 13, 16, 1, bank, 11), 8, true});       // T % C != 0, odd hd, heavy reuse
    cases.push_back({spec_of(3, 50, 4, 2, 20, 32, 4, bank, 12), 16, false});     // G = W, hd % 8 != 0, no dF
    cases.push_back({spec_of(2, 200, 5, 3, 7, 24, 5, bank, 13), 7, true});       // C = 7, odd hd
    cases.push_back({spec_of(1, 300, 2, 3, 9, 8, 1, bank, 14), 256, true});      // C = 256: hot slots
    cases.push_back({spec_of(2, 33, 8, 8, 64, 64, 8, bank, 15), 1, false});      // C = 1
    cases.push_back({spec_of(2, 150, 16, 12, 72, 128, 16, bank, 16), 64, true}); // vector path, W != R
    cases.push_back({spec_of(1, 9, 256, 256, 3, 300, 1, bank, 17), 4, true});    // W = R = 256
    // 64 < C <= 128 (the medium kernels): T % C != 0, odd hd; C % 4 != 0 (4-byte staging), G = W.
    cases.push_back({spec_of(2, 301, 3, 5, 37, 48, 1, bank, 35), 100, true});
    cases.push_back({spec_of(1, 250, 4, 3, 13, 32, 4, bank, 36), 127, false});
    // Heavy reuse on the vector path: write and read groups of ~128 entries (longer than a warp,
    // not a multiple of a long group's pass), G = W, C = 256; and groups of ~32 at hd 768.
    cases.push_back({spec_of(2, 300, 4, 4, 72, 8, 4, bank, 26), 256, true});
    cases.push_back({spec_of(1, 64, 8, 8, 768, 16, 1, bank, 27), 64, false});
    cases.push_back({spec_of(2, 230, 5, 3, 13, 24, 1, bank, 28), 100, true});   // 64 < C <= 128, T % C != 0
  }
  cases.push_back({spec_of(2, 40, 64, 64, 768, 4096, 1, bf16, 18), 64, true});    // hd 768: 3 column steps
  cases.push_back({spec_of(2, 40, 32, 16, 520, 512, 32, f32, 19), 16, true});    // hd 520: partial last step
  cases.push_back({spec_of(3, 100, 3, 3, 9, 16, 1, bf16, 20), 16, true, true, f32});     // grad_bank_fp32
  cases.push_back({spec_of(3, 100, 3, 3, 9, 16, 3, bf16, 21), 16, true, false, bf16});   // G rows are grad_memory
  cases.push_back({spec_of(2, 64, 8, 8, 32, 32, 8, bf16, 22), 16, true, true, bf16});    // fp32 rows, bf16 out
  // The slot tasks' read slots: staged in shared memory beyond the default 48 KB (C*R = 16384), and
  // too many to stage (C*R = 33280: the task kernel reads the global read keys).
  cases.push_back({spec_of(1, 64, 3, 256, 5, 300, 1, f32, 24), 64, true});
  cases.push_back({spec_of(1, 300, 2, 130, 9, 512, 1, f32, 25), 256, true});
  Case mixed{spec_of(1, 64, 3, 4, 6, 12, 3, f32, 23), 16, true};                  // f16 inputs, i64, beta [P,T,1]
  mixed.spec.index = DType::i64, mixed.spec.input = DType::f16, mixed.spec.beta_3d = true;
  cases.push_back(mixed);
  for (const Case& c : cases) backward_case(c);
}

// Two small cases for compute-sanitizer (scripts/gpu_check.sh): scalar and vector paths, both
// G-row dtypes.
void test_small() {
  backward_case({spec_of(2, 37, 3, 5, 13, 16, 1, DType::f32, 31), 8, true});
  backward_case({spec_of(2, 20, 4, 3, 16, 16, 4, DType::bf16, 32), 8, true});
}

// ---- bitwise: two runs, graph replay, partial requests; saved and inputs untouched ----------

void test_bitwise(const ProblemSpec& spec, std::int64_t C) {
  std::printf("  bitwise %s\n", describe(spec, C).c_str());
  const Problem pb = make_problem(spec);
  WriteReadOptions opt;
  opt.slots_per_stream = spec.slots_per_stream;
  opt.chunk_size = C;
  const HostTensor dy = random_tensor({spec.P, spec.T, spec.hd}, 1.0, 501);
  const HostTensor d_final = random_tensor({pb.bank_rows(), spec.hd}, 1.0, 502);
  CudaForward fwd(pb, opt, dy, d_final);
  const HostTensor final_bank = fwd.dp.memory.to_host(), saved_before = fwd.saved.to_host();

  const auto run_eager = [&]() {
    fwd.dp.memory.copy_from(final_bank);
    DeviceGrads grads(pb, DType::f32, DType::f32);
    fwd.backward(grads.refs(), opt);
    sync();
    GradRun out = grads.to_host();
    out.bank_after = fwd.dp.memory.to_host();
    return out;
  };
  const GradRun first = run_eager(), second = run_eager();
  for (std::size_t k = 0; k < 6; ++k) {
    expect(views(first)[k].tensor.bitwise_equal(views(second)[k].tensor),
           std::string("two runs: grad ") + views(first)[k].name + " bitwise equal");
  }
  expect(first.bank_after.bitwise_equal(second.bank_after) && first.bank_after.bitwise_equal(pb.memory),
         "two runs: restored bank bitwise equal to the initial bank");
  expect(fwd.saved.to_host().bitwise_equal(saved_before), "saved buffer unchanged by the backward");
  expect(fwd.dp.k_val.to_host().bitwise_equal(pb.k_val) && fwd.dp.v.to_host().bitwise_equal(pb.v) &&
             fwd.dp.beta.to_host().bitwise_equal(pb.beta) && fwd.dp.g.to_host().bitwise_equal(pb.g) &&
             fwd.dp.q_val.to_host().bitwise_equal(pb.q_val) && fwd.dp.k_idx.to_host().bitwise_equal(pb.k_idx) &&
             fwd.dp.q_idx.to_host().bitwise_equal(pb.q_idx) && fwd.dy.to_host().bitwise_equal(dy) &&
             fwd.d_final.to_host().bitwise_equal(d_final),
         "inputs, grad_readings and grad_final_bank unchanged");

  // Only k_val and g requested (grad_memory absent: G lives in the workspace): same bits.
  {
    fwd.dp.memory.copy_from(final_bank);
    DeviceGrads grads(pb, DType::f32, DType::f32);
    WriteReadGrads some;
    some.k_val = grads.k_val.ref();
    some.g = grads.g.ref();
    fwd.backward(some, opt);
    sync();
    expect(grads.k_val.to_host().bitwise_equal(first.k_val) && grads.g.to_host().bitwise_equal(first.g),
           "k_val and g alone: bitwise equal to the full request");
    expect(fwd.dp.memory.to_host().bitwise_equal(pb.memory), "k_val and g alone: bank restored");
  }

  // Captured into a CUDA graph (validate=True: the device check is skipped while capturing).
  cudaStream_t stream;
  cuda_ok(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  WriteReadOptions on_stream = opt;
  on_stream.cuda_stream = stream;
  DeviceGrads graphed(pb, DType::f32, DType::f32);
  fwd.dp.memory.copy_from(final_bank);
  cudaGraph_t graph;
  cuda_ok(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
  fwd.backward(graphed.refs(), on_stream);
  cuda_ok(cudaStreamEndCapture(stream, &graph), "cudaStreamEndCapture");
  cudaGraphExec_t exec;
  cuda_ok(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");
  for (int replay = 0; replay < 2; ++replay) {
    fwd.dp.memory.copy_from(final_bank);
    for (const DeviceTensor* t : {&graphed.memory, &graphed.k_val, &graphed.v, &graphed.beta, &graphed.g,
                                  &graphed.q_val}) {
      poison(*t);
    }
    sync();
    cuda_ok(cudaGraphLaunch(exec, stream), "cudaGraphLaunch");
    cuda_ok(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    const GradRun got = graphed.to_host();
    bool equal = fwd.dp.memory.to_host().bitwise_equal(pb.memory);
    for (std::size_t k = 0; k < 6; ++k) equal = equal && views(got)[k].tensor.bitwise_equal(views(first)[k].tensor);
    expect(equal, "graph replay " + std::to_string(replay) + ": every gradient and the bank bitwise equal to eager");
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

void test_bitwise_all() {
  test_bitwise(spec_of(2, 130, 64, 64, 768, 2048, 1, DType::bf16, 51), 64);
  test_bitwise(spec_of(2, 230, 8, 8, 72, 64, 1, DType::f32, 54), 128);  // the medium kernels
  test_bitwise(spec_of(3, 45, 5, 7, 13, 16, 5, DType::f32, 52), 8);
  test_bitwise(spec_of(2, 300, 4, 4, 72, 8, 4, DType::bf16, 53), 256);  // groups of ~128 entries
}

// ---- snapshot modes (docs/spec.md §5) -----------------------------------------------------------

// Tolerances of the CPU engine's snapshot-mode test (tests/cpp/engine/test_engine_backward.cpp):
// gradients vs the float64 reference, and the restored bank vs the initial bank (rel error).
struct ModeTolerance {
  SnapshotQuant mode;
  double grad, bank;
};
constexpr ModeTolerance kModeTolerances[] = {{SnapshotQuant::none, 0.0, 0.0},
                                             {SnapshotQuant::bf16, 1e-2, 4e-3},
                                             {SnapshotQuant::fp8, 8e-2, 7e-2},
                                             {SnapshotQuant::int4, 2e-1, 1e-1}};

struct ModeRun {
  HostTensor readings, final_bank, saved;
  GradRun grads;  // bank_after: the working bank after the backward
};

// CUDA saving forward + backward of the loss <readings, dy> + <final bank, dF> in opt's mode.
ModeRun run_mode(const Problem& pb, const WriteReadOptions& opt, const HostTensor& dy, const HostTensor& d_final) {
  CudaForward fwd(pb, opt, dy, d_final);
  ModeRun out;
  out.readings = fwd.readings.to_host();
  out.final_bank = fwd.dp.memory.to_host();
  out.saved = fwd.saved.to_host();
  DeviceGrads grads(pb, DType::f32, DType::f32);
  fwd.backward(grads.refs(), opt);
  sync();
  out.grads = grads.to_host();
  out.grads.bank_after = fwd.dp.memory.to_host();
  return out;
}

bool grads_bitwise_equal(const GradRun& a, const GradRun& b) {
  bool equal = a.bank_after.bitwise_equal(b.bank_after);
  for (std::size_t k = 0; k < 6; ++k) equal = equal && views(a)[k].tensor.bitwise_equal(views(b)[k].tensor);
  return equal;
}

void snapshot_modes_case(const ProblemSpec& spec, std::int64_t C) {
  std::printf("  snapshot modes, %s\n", describe(spec, C).c_str());
  const Problem pb = make_problem(spec);
  WriteReadOptions opt;
  opt.slots_per_stream = spec.slots_per_stream;
  opt.chunk_size = C;
  const HostTensor dy = random_tensor({spec.P, spec.T, spec.hd}, 1.0, spec.seed + 100);
  const HostTensor d_final = random_tensor({pb.bank_rows(), spec.hd}, 1.0, spec.seed + 200);
  const GradRun want = reference_backward(pb, dy, d_final, opt);

  ModeRun none;
  for (const ModeTolerance& m : kModeTolerances) {
    opt.snapshot_quant = m.mode;
    const std::string mode = std::string("[") + snapshot_quant_name(m.mode) + "] ";
    const bool exact = m.mode == SnapshotQuant::none || (m.mode == SnapshotQuant::bf16 && spec.bank == DType::bf16);
    const double tol = exact ? tolerance(spec.bank) : m.grad;
    const ModeRun got = run_mode(pb, opt, dy, d_final);
    if (m.mode == SnapshotQuant::none) none = got;

    // (a) the forward never depends on the mode.
    expect(got.readings.bitwise_equal(none.readings) && got.final_bank.bitwise_equal(none.final_bank),
           mode + "readings and final bank bitwise equal to \"none\"");
    // (b) gradients vs the float64 reference; (c) vs the CPU engine in the same mode.
    const GradRun cpu = engine_backward(pb, engine_forward_saving(pb, opt), dy, d_final, opt, DType::f32);
    const auto got_v = views(got.grads), want_v = views(want), cpu_v = views(cpu);
    for (std::size_t k = 0; k < got_v.size(); ++k) {
      expect_error_at_most(rel_error(got_v[k].tensor, want_v[k].tensor), tol,
                           mode + "grad " + got_v[k].name + " vs float64 reference");
      expect_error_at_most(rel_error(got_v[k].tensor, cpu_v[k].tensor), tol,
                           mode + "grad " + got_v[k].name + " vs CPU engine");
    }
    expect(got.grads.bank_after.bitwise_equal(cpu.bank_after),
           mode + "restored bank bitwise equal to the CPU engine's");
    if (exact) {
      expect(got.grads.bank_after.bitwise_equal(pb.memory), mode + "restored bank bitwise equal to the initial bank");
      expect(grads_bitwise_equal(got.grads, none.grads), mode + "every gradient bitwise equal to \"none\"");
    } else {
      const double bank_error = rel_error(got.grads.bank_after, pb.memory);
      expect_error_at_most(bank_error, m.bank, mode + "restored bank vs initial bank");
      expect(bank_error > 0.0, mode + "a lossy snapshot restores an approximate bank");
      expect(got.grads.memory.bitwise_equal(none.grads.memory) && got.grads.v.bitwise_equal(none.grads.v) &&
                 got.grads.beta.bitwise_equal(none.grads.beta),
             mode + "grads memory, v, beta (no restored rows) bitwise equal to \"none\"");
    }
    // (d) determinism: a second forward + backward.
    const ModeRun again = run_mode(pb, opt, dy, d_final);
    expect(again.saved.bitwise_equal(got.saved), mode + "two forwards: saved buffer bitwise equal");
    expect(grads_bitwise_equal(again.grads, got.grads), mode + "two runs: every gradient and the bank bitwise equal");
    // (e) restore_bank = false: the bank is only read (it keeps the final bank's bits) and every
    // gradient keeps its bits.
    WriteReadOptions kept_opt = opt;
    kept_opt.restore_bank = false;
    ModeRun kept = run_mode(pb, kept_opt, dy, d_final);
    expect(kept.grads.bank_after.bitwise_equal(kept.final_bank), mode + "restore_bank = false: bank left final");
    kept.grads.bank_after = got.grads.bank_after;
    expect(grads_bitwise_equal(kept.grads, got.grads), mode + "restore_bank = false: every gradient bitwise equal");
  }
}

void test_snapshot_modes() {
  for (const DType bank : {DType::f32, DType::bf16}) {
    snapshot_modes_case(spec_of(2, 37, 3, 5, 37, 16, 1, bank, 41), 8);     // odd hd > 32, T % C != 0, G = 1
    snapshot_modes_case(spec_of(3, 50, 4, 2, 20, 32, 4, bank, 42), 16);    // hd % 8 != 0, G = W
    snapshot_modes_case(spec_of(2, 70, 8, 6, 72, 64, 8, bank, 43), 16);    // vector path, G = W
    snapshot_modes_case(spec_of(1, 40, 16, 12, 520, 256, 1, bank, 44), 16);  // vector, 3 column steps
  }
}

// ---- medium chunks: the medium kernels vs the blockwise ones, bitwise --------------------------

// The no-grad forward's readings and final bank, then run_mode's saving forward + backward.
struct KernelsRun {
  HostTensor readings, final_bank;
  ModeRun saving;
};

KernelsRun run_kernels(const Problem& pb, const WriteReadOptions& opt, const HostTensor& dy, const HostTensor& d_final,
                       bool blockwise) {
  cuda::set_blockwise_chunk_products(blockwise);
  KernelsRun out;
  {
    DeviceProblem dp(pb);
    DeviceTensor readings(pb.spec.bank, {pb.spec.P, pb.spec.T, pb.spec.hd});
    poison(readings);
    write_read_forward(dp.args(), readings.ref(), opt);
    sync();
    out.readings = readings.to_host();
    out.final_bank = dp.memory.to_host();
  }
  out.saving = run_mode(pb, opt, dy, d_final);
  cuda::set_blockwise_chunk_products(false);
  return out;
}

// dy in dtype `dy_dtype` (solve_side reads any float dtype of grad_readings).
void medium_case(const ProblemSpec& spec, std::int64_t C, DType dy_dtype) {
  const std::string what = describe(spec, C) + " inputs " + dtype_name(spec.input) + " dy " + dtype_name(dy_dtype);
  std::printf("  medium vs blockwise kernels, %s\n", what.c_str());
  const Problem pb = make_problem(spec);
  WriteReadOptions opt;
  opt.slots_per_stream = spec.slots_per_stream;
  opt.chunk_size = C;
  const HostTensor dy = random_tensor({spec.P, spec.T, spec.hd}, 1.0, spec.seed + 100).to(dy_dtype);
  const HostTensor d_final = random_tensor({pb.bank_rows(), spec.hd}, 1.0, spec.seed + 200);
  const KernelsRun medium = run_kernels(pb, opt, dy, d_final, false);
  const KernelsRun blockwise = run_kernels(pb, opt, dy, d_final, true);
  expect(medium.readings.bitwise_equal(blockwise.readings) && medium.final_bank.bitwise_equal(blockwise.final_bank),
         "no-grad forward: readings and final bank bitwise equal");
  expect(medium.saving.readings.bitwise_equal(blockwise.saving.readings) &&
             medium.saving.final_bank.bitwise_equal(blockwise.saving.final_bank) &&
             medium.saving.saved.bitwise_equal(blockwise.saving.saved),
         "saving forward: readings, final bank and saved buffer bitwise equal");
  for (std::size_t k = 0; k < 6; ++k) {
    expect(views(medium.saving.grads)[k].tensor.bitwise_equal(views(blockwise.saving.grads)[k].tensor),
           std::string("backward: grad ") + views(medium.saving.grads)[k].name + " bitwise equal");
  }
  expect(medium.saving.grads.bank_after.bitwise_equal(blockwise.saving.grads.bank_after) &&
             medium.saving.grads.bank_after.bitwise_equal(pb.memory),
         "backward: restored bank bitwise equal (and to the initial bank)");
}

void test_medium_chunks() {
  const DType f32 = DType::f32, bf16 = DType::bf16;
  // Tile widths (chunk::tile_cols): dual_product's over 2 P row blocks, solve_side's over P.
  medium_case(spec_of(2, 301, 3, 5, 37, 48, 1, f32, 81), 100, f32);      // 8 / 8, odd hd, T % C != 0
  medium_case(spec_of(2, 301, 3, 5, 37, 48, 1, bf16, 81), 100, f32);
  ProblemSpec scalar = spec_of(3, 250, 4, 3, 13, 32, 4, bf16, 82);       // C % 4 != 0: 4-byte staging
  scalar.input = DType::f16, scalar.beta_3d = true, scalar.index = DType::i64;
  medium_case(scalar, 127, bf16);
  scalar.bank = f32, scalar.input = bf16;
  medium_case(scalar, 65, f32);                                          // one row in block 1
  medium_case(spec_of(2, 200, 8, 6, 520, 256, 1, bf16, 83), 128, f32);   // dual 16 / solve 8
  medium_case(spec_of(4, 150, 4, 4, 520, 256, 4, f32, 84), 96, DType::f64);  // dual 32 / solve 16
  // hd 1000, P 4, C 128 (dual 32 / solve 32), and W = R = 20: the steps split over two CUDA streams
  // (step_streams.hpp), launches of streams 2, 3 (p_first 2; dual 32 / solve 8).
  medium_case(spec_of(4, 140, 4, 4, 1000, 512, 1, bf16, 85), 128, f32);
  medium_case(spec_of(4, 140, 20, 20, 1000, 512, 1, bf16, 86), 128, f32);
}

// Two small cases for compute-sanitizer (scripts/gpu_check.sh): C 128 with 16-byte staging and C 99
// with 4-byte staging, both kernels of each kind.
void test_medium_chunks_small() {
  medium_case(spec_of(2, 150, 3, 2, 13, 16, 1, DType::f32, 91), 128, DType::f32);
  medium_case(spec_of(1, 130, 4, 4, 16, 32, 4, DType::bf16, 92), 99, DType::bf16);
}

// ---- extreme log-decays (docs/numerics.md, "Decay factors") -------------------------------

// g = -inf and finite g of -1e5 ... -1e30 mixed with normal g (tests/cpp/support/extreme_decay.hpp),
// hot slots: no-grad forward, saving forward (readings and final bank bitwise equal to the
// no-grad forward's), backward in every snapshot mode; outputs and gradients finite and within the
// usual tolerances of the float64 reference (lossy modes: of the CPU engine in the same mode,
// kModeTolerances). The CPU engine measured on these cases against the reference: f32 forward
// 1.5e-7, gradients 9e-7; bf16 4.7e-3, 9.3e-3.
void extreme_decay_case(const ProblemSpec& spec, std::int64_t C, DecayPattern pattern) {
  std::printf("  extreme decay %s, %s\n", decay_pattern_name(pattern), describe(spec, C).c_str());
  Problem pb = make_problem(spec);
  place_extreme_decays(pb, pattern, C);
  WriteReadOptions opt;
  opt.slots_per_stream = spec.slots_per_stream;
  opt.chunk_size = C;
  const double tol = tolerance(spec.bank);
  const ForwardRun want_fwd = reference_forward(pb, opt);
  HostTensor plain_readings, plain_bank;
  {
    DeviceProblem dp(pb);
    DeviceTensor readings(spec.bank, {spec.P, spec.T, spec.hd});
    write_read_forward(dp.args(), readings.ref(), opt);
    sync();
    plain_readings = readings.to_host();
    plain_bank = dp.memory.to_host();
  }
  expect(all_finite(plain_readings) && all_finite(plain_bank), "no-grad forward: readings and final bank finite");
  expect_error_at_most(std::max(rel_error(plain_readings, want_fwd.readings), rel_error(plain_bank, want_fwd.final_bank)),
                       tol, "no-grad forward: readings, final bank vs float64 reference");

  const HostTensor dy = random_tensor({spec.P, spec.T, spec.hd}, 1.0, spec.seed + 100);
  const HostTensor d_final = random_tensor({pb.bank_rows(), spec.hd}, 1.0, spec.seed + 200);
  const GradRun want = reference_backward(pb, dy, d_final, opt);
  for (const ModeTolerance& m : kModeTolerances) {
    opt.snapshot_quant = m.mode;
    const std::string mode = std::string("[") + snapshot_quant_name(m.mode) + "] ";
    const bool exact = m.mode == SnapshotQuant::none || (m.mode == SnapshotQuant::bf16 && spec.bank == DType::bf16);
    const ModeRun got = run_mode(pb, opt, dy, d_final);
    expect(got.readings.bitwise_equal(plain_readings) && got.final_bank.bitwise_equal(plain_bank),
           mode + "saving forward: readings and final bank bitwise equal to the no-grad forward's");
    // Exact modes against the reference; lossy ones against the CPU engine in the same mode (the
    // same quantiser: on these hot slots int4 alone is ~0.4 from the reference on the CPU too).
    const GradRun cpu = exact ? GradRun{} : engine_backward(pb, engine_forward_saving(pb, opt), dy, d_final, opt,
                                                            DType::f32);
    double worst = 0.0;
    bool finite = true;
    const auto got_v = views(got.grads), want_v = views(exact ? want : cpu);
    for (std::size_t k = 0; k < got_v.size(); ++k) {
      finite = finite && all_finite(got_v[k].tensor);
      worst = std::max(worst, rel_error(got_v[k].tensor, want_v[k].tensor));
    }
    expect(finite, mode + "every gradient finite");
    expect_error_at_most(worst, exact ? tol : m.grad,
                         mode + (exact ? "worst gradient vs float64 reference" : "worst gradient vs CPU engine"));
  }
}

void test_extreme_decay() {
  for (const DType bank : {DType::f32, DType::bf16}) {
    for (const std::int64_t G : {1, 2}) {
      for (const std::int64_t C : {1, 3, 64, 256}) {
        std::uint64_t seed = 600 + static_cast<std::uint64_t>(C + 10 * G) + (bank == DType::bf16 ? 5000 : 0);
        for (const DecayPattern pattern : kDecayPatterns) {
          // hd 5: scalar paths; hd 72: the vector paths (hd % 8 == 0).
          extreme_decay_case(spec_of(2, 301, 2, 3, C >= 64 ? 72 : 5, 6, G, bank, ++seed), C, pattern);
        }
      }
    }
    // C * W > 16384: Phase 1's scans and read lookups on global memory (not staged); groups of
    // ~200 entries.
    extreme_decay_case(spec_of(1, 300, 80, 8, 8, 100, 80, bank, 690), 256, DecayPattern::mixed);
    extreme_decay_case(spec_of(1, 300, 80, 8, 8, 100, 1, bank, 691), 256, DecayPattern::each_1e5);
  }
}

// ---- validate=True: the device check's error, nothing written ------------------------------

void test_validation() {
  ProblemSpec spec = spec_of(2, 10, 3, 2, 8, 16, 1, DType::f32, 71);
  std::printf("  validate=True backward with q_idx[stream 1, token 9, lane 1] out of range\n");
  Problem pb = make_problem(spec);
  pb.q_idx.set((1 * 10 + 9) * 2 + 1, -5);
  WriteReadOptions opt;
  opt.slots_per_stream = spec.slots_per_stream;
  opt.chunk_size = 4;
  opt.validate = false;  // the forward masks the entry
  const HostTensor dy = random_tensor({spec.P, spec.T, spec.hd}, 1.0, 72);
  CudaForward fwd(pb, opt, dy, HostTensor());
  const HostTensor bank_before = fwd.dp.memory.to_host();
  DeviceGrads grads(pb, DType::f32, DType::f32);
  const GradRun grads_before = grads.to_host();
  opt.validate = true;
  const core::WriteReadShape shape = core::validate_write_read(pb.args(), TensorRef{}, opt, core::BankDTypes::engine);
  std::string want;
  try {
    core::check_write_read_indices(pb.args(), shape);
  } catch (const ValueError& e) {
    want = e.what();
  }
  std::string got = "(no error)";
  try {
    fwd.backward(grads.refs(), opt);
  } catch (const ValueError& e) {
    got = e.what();
  }
  sync();
  std::printf("    device error: %s\n", got.c_str());
  expect(!want.empty() && got == want, "message equals the host check's");
  expect(got.find("q_idx[stream 1, token 9, lane 1]") != std::string::npos, "message names q_idx, stream, token, lane");
  expect(fwd.dp.memory.to_host().bitwise_equal(bank_before), "working bank untouched after the error");
  const GradRun after = grads.to_host();
  bool untouched = true;
  for (std::size_t k = 0; k < 6; ++k) untouched = untouched && views(after)[k].tensor.bitwise_equal(views(grads_before)[k].tensor);
  expect(untouched, "gradients untouched after the error");
}

}  // namespace

// Arguments: substrings of test names to run (all tests without any), --verbose (gpu_test_harness.hpp).
int main(int argc, char** argv) {
  const GpuTest tests[] = {
      {"backward small", test_small},
      {"backward vs float64 reference and CPU engine", test_backward_vs_reference},
      {"backward bitwise: runs, partial, graph replay", test_bitwise_all},
      {"backward device index check", test_validation},
      {"backward snapshot modes", test_snapshot_modes},
      {"medium chunks: medium kernels bitwise equal to the blockwise ones", test_medium_chunks},
      {"medium chunks small: medium kernels bitwise equal to the blockwise ones", test_medium_chunks_small},
      {"extreme log-decays: forward, saving forward, backward, snapshot modes", test_extreme_decay},
  };
  return run_gpu_tests("sdm_gpu_backward_tests", tests, argc, argv);
}

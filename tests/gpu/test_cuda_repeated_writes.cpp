// test_cuda_repeated_writes.cpp - GPU tests of the largest slot groups of a chunk (issue 22 item 11),
// run by gpu_test_harness.hpp like the other programs here (exit status 1 if a check failed; 0 with
// a message without a CUDA device).
//
// 1. Repeated write slots with validate = false (docs/spec.md §8): every lane of every token of a
//    chunk names one slot (C * W entries of one row in one chunk: 1024 for C = 64, W = 16, 4096 for
//    C = 256; more than a 9-bit group size holds). The token's first lane writes, the others are
//    masked: the CUDA forward, saving forward and backward equal, bitwise, the same calls with the
//    repeating lanes pointed outside the stream's rows (the masked twin), and agree with the CPU
//    engine and the float64 reference (which apply the same rule) within the usual tolerances
//    (f32 bank 1e-4, bf16 bank 3e-2). Also while a CUDA graph is captured with validate = true
//    (the device check is skipped there), and for the decode step (W = 16 and W = 256: the lanes
//    beyond the 64 held in registers).
// 2. A read group of C * R entries (legal: reads may repeat): every read lane of every token reads
//    the slot that lane 0 of every token writes (C = 64 and 256, R = 64 and 256: up to 65536 reads
//    of one row in one chunk), validate = true; forward and backward vs the CPU engine and the
//    reference.
// Run it also under compute-sanitizer (memcheck, racecheck, synccheck): scripts/gpu_check.sh.
#include <cuda_runtime.h>

#include <cstdio>
#include <string>
#include <vector>

#include "device_tensor.hpp"
#include "engine_run.hpp"
#include "gpu_test_harness.hpp"
#include "host_tensor.hpp"
#include "problem.hpp"
#include "sdm/ops.hpp"
#include "sdm/reference.hpp"

namespace {

using namespace sdm;
using namespace sdm::testing;

double tolerance(DType bank) { return bank == DType::bf16 ? 3e-2 : 1e-4; }

std::string describe(const ProblemSpec& s, std::int64_t C) {
  char buf[256];
  std::snprintf(buf, sizeof buf, "P%lld T%lld W%lld R%lld hd%lld sps%lld C%lld G%lld %s", static_cast<long long>(s.P),
                static_cast<long long>(s.T), static_cast<long long>(s.W), static_cast<long long>(s.R),
                static_cast<long long>(s.hd), static_cast<long long>(s.slots_per_stream), static_cast<long long>(C),
                static_cast<long long>(s.G), dtype_name(s.bank));
  return buf;
}

// Token n's lane `lane` of idx [P*T, width] takes `slot`; a lane of the token already holding it
// takes the lane's former slot, so the lanes stay distinct (for write slots).
void force_slot(HostTensor& idx, std::int64_t width, std::int64_t n, std::int64_t lane, std::int64_t slot) {
  const double former = idx.get(n * width + lane);
  for (std::int64_t w = 0; w < width; ++w) {
    if (w != lane && idx.get(n * width + w) == static_cast<double>(slot)) idx.set(n * width + w, former);
  }
  idx.set(n * width + lane, static_cast<double>(slot));
}

// The problem where lane 0 of every token writes stream-local slot 3, and (repeated) every other
// lane names it too, or (masked) every other lane names the stream's end (outside its rows).
struct Twins {
  Problem repeated, masked;
};
Twins one_slot_everywhere(const ProblemSpec& spec) {
  Twins out{make_problem(spec), Problem{}};
  for (std::int64_t n = 0; n < spec.P * spec.T; ++n) {
    force_slot(out.repeated.k_idx, spec.W, n, 0, (n / spec.T) * spec.slots_per_stream + 3);
  }
  out.masked = out.repeated;
  for (std::int64_t n = 0; n < spec.P * spec.T; ++n) {
    const std::int64_t p = n / spec.T;
    for (std::int64_t w = 1; w < spec.W; ++w) {
      out.repeated.k_idx.set(n * spec.W + w, static_cast<double>(p * spec.slots_per_stream + 3));
      out.masked.k_idx.set(n * spec.W + w, static_cast<double>((p + 1) * spec.slots_per_stream));
    }
  }
  return out;
}

WriteReadOptions options_for(const ProblemSpec& s, std::int64_t C, bool validate) {
  WriteReadOptions o;
  o.slots_per_stream = s.slots_per_stream;
  o.chunk_size = C;
  o.validate = validate;
  return o;
}

// One CUDA saving forward and backward (every gradient, f32) of pb.
struct CudaRun {
  HostTensor readings, final_bank;
  GradRun grads;
};
CudaRun cuda_run(const Problem& pb, const WriteReadOptions& opt, const HostTensor& dy, const HostTensor& d_final) {
  DeviceProblem dp(pb);
  DeviceTensor readings(pb.spec.bank, {pb.spec.P, pb.spec.T, pb.spec.hd});
  DeviceTensor saved(DType::u8, {static_cast<std::int64_t>(write_read_saved_bytes(dp.args(), opt))});
  cuda_ok(cudaMemset(saved.data(), 0, saved.bytes()), "cudaMemset");
  write_read_forward_saving(dp.args(), readings.ref(), saved.ref(), opt);
  sync();
  CudaRun out{readings.to_host(), dp.memory.to_host(), GradRun{}};
  DeviceTensor d_dy(dy), d_df(d_final);
  DeviceTensor g_memory(DType::f32, pb.memory.sizes()), g_k_val(DType::f32, pb.k_val.sizes()),
      g_v(DType::f32, pb.v.sizes()), g_beta(DType::f32, pb.beta.sizes()), g_g(DType::f32, pb.g.sizes()),
      g_q_val(DType::f32, pb.q_val.sizes());
  WriteReadGrads grads;
  grads.memory = g_memory.ref(), grads.k_val = g_k_val.ref(), grads.v = g_v.ref();
  grads.beta = g_beta.ref(), grads.g = g_g.ref(), grads.q_val = g_q_val.ref();
  write_read_backward(dp.args(), saved.ref(), d_dy.ref(), d_df.ref(), grads, opt);
  sync();
  out.grads.memory = g_memory.to_host(), out.grads.k_val = g_k_val.to_host(), out.grads.v = g_v.to_host();
  out.grads.beta = g_beta.to_host(), out.grads.g = g_g.to_host(), out.grads.q_val = g_q_val.to_host();
  return out;
}

// The no-grad CUDA forward of pb on `opt` (its stream, if any): readings and final bank.
ForwardRun cuda_forward(const Problem& pb, const WriteReadOptions& opt) {
  DeviceProblem dp(pb);
  DeviceTensor readings(pb.spec.bank, {pb.spec.P, pb.spec.T, pb.spec.hd});
  write_read_forward(dp.args(), readings.ref(), opt);
  sync();
  return {readings.to_host(), dp.memory.to_host(), HostTensor{}};
}

struct GradView {
  const char* name;
  const HostTensor& tensor;
};
std::vector<GradView> views(const GradRun& r) {
  return {{"memory", r.memory}, {"k_val", r.k_val}, {"v", r.v}, {"beta", r.beta}, {"g", r.g}, {"q_val", r.q_val}};
}

// CUDA forward + backward of pb vs the CPU engine and the float64 reference.
void expect_matches_cpu_and_reference(const Problem& pb, const CudaRun& got, const WriteReadOptions& opt,
                                      const HostTensor& dy, const HostTensor& d_final) {
  const DType bank = pb.spec.bank;
  const ForwardRun cpu = engine_forward_saving(pb, opt);
  const ForwardRun ref = reference_forward(pb, opt);
  expect_error_at_most(rel_error(got.readings, ref.readings), tolerance(bank), "readings vs reference");
  expect_error_at_most(rel_error(got.final_bank, ref.final_bank), tolerance(bank), "final bank vs reference");
  expect_error_at_most(rel_error(got.readings, cpu.readings), tolerance(bank), "readings vs CPU engine");
  const GradRun cpu_grads = engine_backward(pb, cpu, dy, d_final, opt, DType::f32);
  const GradRun ref_grads = reference_backward(pb, dy, d_final, opt);
  const auto g = views(got.grads), c = views(cpu_grads), r = views(ref_grads);
  for (std::size_t k = 0; k < g.size(); ++k) {
    expect_error_at_most(rel_error(g[k].tensor, r[k].tensor), tolerance(bank), std::string("grad ") + g[k].name + " vs reference");
    expect_error_at_most(rel_error(g[k].tensor, c[k].tensor), tolerance(bank), std::string("grad ") + g[k].name + " vs CPU engine");
  }
}

// ---- 1. one slot written by every lane of every token of a chunk, validate = false -------

void repeated_writes_case(const ProblemSpec& spec, std::int64_t C) {
  std::printf("  repeated writes %s\n", describe(spec, C).c_str());
  const Twins twins = one_slot_everywhere(spec);
  const WriteReadOptions opt = options_for(spec, C, false);
  const HostTensor dy = random_tensor({spec.P, spec.T, spec.hd}, 1.0, 11);
  const HostTensor d_final = random_tensor({twins.repeated.bank_rows(), spec.hd}, 0.5, 12);
  const ForwardRun fwd = cuda_forward(twins.repeated, opt), fwd_masked = cuda_forward(twins.masked, opt);
  expect(fwd.readings.bitwise_equal(fwd_masked.readings), "no-grad readings bitwise equal the masked twin's");
  expect(fwd.final_bank.bitwise_equal(fwd_masked.final_bank), "no-grad final bank bitwise equals the masked twin's");
  const CudaRun got = cuda_run(twins.repeated, opt, dy, d_final);
  const CudaRun masked = cuda_run(twins.masked, opt, dy, d_final);
  expect(got.readings.bitwise_equal(fwd.readings), "saving readings bitwise equal no-grad");
  expect(got.readings.bitwise_equal(masked.readings), "saving readings bitwise equal the masked twin's");
  const auto g = views(got.grads), m = views(masked.grads);
  for (std::size_t k = 0; k < g.size(); ++k) {
    expect(g[k].tensor.bitwise_equal(m[k].tensor), std::string("grad ") + g[k].name + " bitwise equals the masked twin's");
  }
  bool repeated_lanes_zero = true;
  for (std::int64_t n = 0; n < spec.P * spec.T; ++n) {
    for (std::int64_t w = 1; w < spec.W; ++w) repeated_lanes_zero = repeated_lanes_zero && got.grads.k_val.get(n * spec.W + w) == 0.0;
  }
  expect(repeated_lanes_zero, "grad k_val of every repeated lane is 0");
  expect_matches_cpu_and_reference(twins.repeated, got, opt, dy, d_final);
}

void test_repeated_writes() {
  for (DType bank : {DType::f32, DType::bf16}) {
    ProblemSpec spec = spec_of(2, 128, 16, 8, 64, 300, 1, bank, 101);
    spec.beta_max = 0.05;
    repeated_writes_case(spec, 64);  // 1024 entries of one slot per chunk, two chunks per stream
    spec.G = spec.W;
    spec.hd = 5;                     // the slow exact column path
    repeated_writes_case(spec, 64);
  }
  ProblemSpec wide = spec_of(1, 512, 16, 8, 32, 300, 1, DType::f32, 102);
  wide.beta_max = 0.05;
  repeated_writes_case(wide, 256);  // 4096 entries per chunk
  ProblemSpec lanes = spec_of(1, 64, 256, 4, 16, 512, 1, DType::f32, 103);
  lanes.beta_max = 0.05;
  repeated_writes_case(lanes, 64);  // W = 256: 16384 entries of one slot in one chunk
}

// While a graph is captured the device check is skipped even with validate = true: the repeats
// are masked the same way.
void test_repeated_writes_under_capture() {
  ProblemSpec spec = spec_of(2, 128, 16, 8, 64, 300, 1, DType::f32, 104);
  spec.beta_max = 0.05;
  const Twins twins = one_slot_everywhere(spec);
  const ForwardRun want = cuda_forward(twins.masked, options_for(spec, 64, false));
  DeviceProblem dp(twins.repeated);
  DeviceTensor readings(spec.bank, {spec.P, spec.T, spec.hd});
  cudaStream_t stream;
  cuda_ok(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  WriteReadOptions opt = options_for(spec, 64, true);
  opt.cuda_stream = stream;
  cudaGraph_t graph;
  cuda_ok(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
  write_read_forward(dp.args(), readings.ref(), opt);
  cuda_ok(cudaStreamEndCapture(stream, &graph), "cudaStreamEndCapture");
  cudaGraphExec_t exec;
  cuda_ok(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");
  cuda_ok(cudaGraphLaunch(exec, stream), "cudaGraphLaunch");
  cuda_ok(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  expect(readings.to_host().bitwise_equal(want.readings), "graph replay: readings bitwise equal the masked twin's");
  expect(dp.memory.to_host().bitwise_equal(want.final_bank), "graph replay: final bank bitwise equals the masked twin's");
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

// ---- the decode step ----------------------------------------------------------------------

void decode_case(std::int64_t W, DType bank, std::int64_t slots_per_stream) {
  std::printf("  decode W%lld %s sps%lld\n", static_cast<long long>(W), dtype_name(bank),
              static_cast<long long>(slots_per_stream));
  ProblemSpec spec = spec_of(4, 1, W, 8, 64, 512, 1, bank, 105);
  spec.beta_3d = true;
  Twins twins = one_slot_everywhere(spec);
  if (slots_per_stream == 0) {
    // Rows bounded by the bank only: the masked twin points its lanes past the bank.
    for (std::int64_t i = 0; i < twins.masked.k_idx.numel(); ++i) {
      if (twins.masked.k_idx.get(i) != twins.repeated.k_idx.get(i)) {
        twins.masked.k_idx.set(i, static_cast<double>(twins.masked.bank_rows()));
      }
    }
  }
  DecodeOptions opt;
  opt.slots_per_stream = slots_per_stream;
  opt.validate = false;
  HostTensor results[2];
  HostTensor banks[2];
  const Problem* problems[2] = {&twins.repeated, &twins.masked};
  for (int k = 0; k < 2; ++k) {
    DeviceProblem dp(*problems[k]);
    DeviceTensor readings(bank, {spec.P, 1, spec.hd});
    decode_step(dp.args(), readings.ref(), opt);
    sync();
    results[k] = readings.to_host();
    banks[k] = dp.memory.to_host();
  }
  expect(results[0].bitwise_equal(results[1]), "decode readings bitwise equal the masked twin's");
  expect(banks[0].bitwise_equal(banks[1]), "decode bank bitwise equals the masked twin's");
  Problem ref = twins.repeated;
  HostTensor ref_bank = ref.memory.to(DType::f64), ref_readings(DType::f64, {spec.P, 1, spec.hd});
  WriteReadArgs args = ref.args();
  args.memory = ref_bank.ref();
  reference::decode_step(args, ref_readings.ref(), opt);
  expect_error_at_most(rel_error(results[0], ref_readings), bank == DType::bf16 ? 2e-2 : 1e-5, "decode readings vs reference");
  Problem cpu = twins.repeated;
  HostTensor cpu_readings = cpu.make_readings(bank);
  decode_step(cpu.args(), cpu_readings.ref(), opt);
  expect_error_at_most(rel_error(results[0], cpu_readings), bank == DType::bf16 ? 2e-2 : 1e-5, "decode readings vs CPU engine");
}

void test_decode_repeated_writes() {
  for (DType bank : {DType::f32, DType::bf16}) {
    for (std::int64_t W : {std::int64_t{16}, std::int64_t{256}}) {
      decode_case(W, bank, 512);
      decode_case(W, bank, 0);
    }
  }
}

// ---- 2. a read group of C * R entries ------------------------------------------------------

void read_group_case(std::int64_t C, std::int64_t R, DType bank) {
  ProblemSpec spec = spec_of(1, 2 * C, 4, R, 32, 300, 1, bank, 106);
  spec.beta_max = 0.05;
  std::printf("  read group of C*R = %lld entries %s\n", static_cast<long long>(C * R), describe(spec, C).c_str());
  Problem pb = make_problem(spec);
  for (std::int64_t n = 0; n < spec.T; ++n) {
    force_slot(pb.k_idx, spec.W, n, 0, 3);                                       // every token writes slot 3
    for (std::int64_t r = 0; r < R; ++r) pb.q_idx.set(n * R + r, 3.0);          // and reads it in every lane
  }
  const WriteReadOptions opt = options_for(spec, C, true);
  const HostTensor dy = random_tensor({spec.P, spec.T, spec.hd}, 1.0, 13);
  const HostTensor d_final = random_tensor({pb.bank_rows(), spec.hd}, 0.5, 14);
  const CudaRun got = cuda_run(pb, opt, dy, d_final);
  expect_matches_cpu_and_reference(pb, got, opt, dy, d_final);
}

void test_read_groups() {
  for (std::int64_t C : {std::int64_t{64}, std::int64_t{256}}) {
    for (std::int64_t R : {std::int64_t{64}, std::int64_t{256}}) read_group_case(C, R, DType::f32);
  }
  read_group_case(64, 64, DType::bf16);
  read_group_case(256, 256, DType::bf16);
}

}  // namespace

// Arguments: substrings of test names to run (all tests without any), --verbose (gpu_test_harness.hpp).
int main(int argc, char** argv) {
  const GpuTest tests[] = {
      {"repeated write slots: every lane of every token of a chunk, validate=False", test_repeated_writes},
      {"repeated write slots under graph capture", test_repeated_writes_under_capture},
      {"repeated write slots in the decode step", test_decode_repeated_writes},
      {"read groups of C*R entries", test_read_groups},
  };
  return run_gpu_tests("sdm_gpu_repeated_writes_tests", tests, argc, argv);
}

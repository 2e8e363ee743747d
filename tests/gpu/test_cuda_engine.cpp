// test_cuda_engine.cpp - GPU tests of the CUDA engine. A plain program run by
// gpu_test_harness.hpp (the GPU machine has no GoogleTest): each test prints its measured errors
// and its failed checks; the exit status is 1 if any check failed. Without a CUDA device it prints
// a message and exits 0.
//
// Oracles: the float64 reference (sdm::reference) on host copies of fresh random inputs, with the
// tolerances of the project (relative error max|a-b| / max|b|: f32 bank 1e-4, bf16 bank 2e-2);
// the host index check (core::check_*_indices) for the device check's messages; the CPU engine.
// Bitwise checks: two runs, no-grad vs saving, eager vs CUDA-graph replay, saving forwards in every
// snapshot mode vs "none". Masking: guard rows around the bank stay untouched and masked entries
// act as no-ops. The saved buffer: the saving forward writes every byte the backward reads and no
// other (buffers of 0x00, 0xff and random bytes give the same written bytes and gradients).
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/saved_header.hpp"
#include "core/snapshot_quant.hpp"
#include "core/validate.hpp"
#include "cuda/common/device_limits.hpp"
#include "cuda/common/geometry.hpp"
#include "cuda/saved/layout.hpp"
#include "device_tensor.hpp"
#include "gpu_test_harness.hpp"
#include "host_tensor.hpp"
#include "problem.hpp"
#include "sdm/error.hpp"
#include "sdm/ops.hpp"
#include "sdm/plan.hpp"
#include "sdm/reference.hpp"
#include "snapshot_codec_runs.hpp"

namespace {

using namespace sdm;
using namespace sdm::testing;

double tolerance(DType bank) { return bank == DType::bf16 ? 2e-2 : 1e-4; }

std::string describe(const ProblemSpec& s, std::int64_t C) {
  char buf[256];
  std::snprintf(buf, sizeof buf, "P%lld T%lld W%lld R%lld hd%lld sps%lld C%lld G%lld %s %s",
                static_cast<long long>(s.P), static_cast<long long>(s.T), static_cast<long long>(s.W),
                static_cast<long long>(s.R), static_cast<long long>(s.hd), static_cast<long long>(s.slots_per_stream),
                static_cast<long long>(C), static_cast<long long>(s.G), dtype_name(s.bank), dtype_name(s.index));
  return buf;
}

// Readings buffer filled with 0xff bytes (NaN in f32 and bf16): unwritten elements show up.
DeviceTensor poisoned(DType dtype, std::vector<std::int64_t> sizes) {
  DeviceTensor t(dtype, std::move(sizes));
  cuda_ok(cudaMemset(t.data(), 0xff, t.bytes()), "cudaMemset");
  return t;
}

WriteReadOptions options_for(const ProblemSpec& s, std::int64_t C, bool validate = true) {
  WriteReadOptions o;
  o.slots_per_stream = s.slots_per_stream;
  o.chunk_size = C;
  o.validate = validate;
  return o;
}

// Runs the float64 reference on a copy of pb: readings f64 [P, T, hd], final bank (bank dtype).
struct Expected {
  HostTensor readings, bank;
};
Expected reference_run(const Problem& pb, const WriteReadOptions& opt) {
  Problem copy = pb;
  Expected out{HostTensor(DType::f64, {pb.spec.P, pb.spec.T, pb.spec.hd}), HostTensor()};
  reference::write_read_forward(copy.args(), out.readings.ref(), opt);
  out.bank = copy.memory;
  return out;
}

// ---- chunked forward vs the float64 reference ------------------------------------------

void chunked_vs_reference(const ProblemSpec& spec, std::int64_t C) {
  std::printf("  chunked %s\n", describe(spec, C).c_str());
  const Problem pb = make_problem(spec);
  const WriteReadOptions opt = options_for(spec, C);
  const Expected want = reference_run(pb, opt);
  DeviceProblem dp(pb);
  DeviceTensor readings = poisoned(spec.bank, {spec.P, spec.T, spec.hd});
  write_read_forward(dp.args(), readings.ref(), opt);
  sync();
  expect_error_at_most(rel_error(readings.to_host(), want.readings), tolerance(spec.bank), "readings vs reference");
  expect_error_at_most(rel_error(dp.memory.to_host(), want.bank), tolerance(spec.bank), "final bank vs reference");
}

void test_chunked_vs_reference() {
  struct Case {
    ProblemSpec spec;
    std::int64_t C;
  };
  const auto spec = [](std::int64_t P, std::int64_t T, std::int64_t W, std::int64_t R, std::int64_t hd,
                       std::int64_t sps, std::int64_t G, DType bank, DType index, std::uint64_t seed) {
    ProblemSpec s;
    s.P = P, s.T = T, s.W = W, s.R = R, s.hd = hd, s.slots_per_stream = sps, s.G = G, s.bank = bank, s.index = index;
    s.seed = seed;
    return s;
  };
  const DType f32 = DType::f32, bf16 = DType::bf16, i32 = DType::i32, i64 = DType::i64;
  std::vector<Case> cases = {
      {spec(2, 37, 3, 5, 13, 16, 1, f32, i32, 11), 8},      // T % C != 0, odd hd, W != R, heavy reuse
      {spec(3, 50, 4, 2, 20, 32, 4, bf16, i64, 12), 16},    // hd % 4 == 0 but % 8 != 0, G = W
      {spec(1, 64, 1, 1, 8, 4, 1, f32, i32, 13), 64},       // W = R = 1, 4 slots, one chunk
      {spec(2, 33, 8, 8, 64, 64, 8, f32, i64, 14), 1},      // C = 1
      {spec(2, 200, 5, 3, 7, 24, 5, f32, i32, 15), 7},      // C = 7, odd hd
      {spec(2, 200, 16, 16, 128, 256, 1, bf16, i32, 16), 64},
      {spec(2, 301, 5, 3, 37, 48, 1, f32, i32, 37), 100},   // 64 < C <= 128: the medium dual product,
      {spec(1, 250, 4, 4, 13, 32, 4, bf16, i64, 38), 127},  //   C % 4 != 0 (4-byte staging),
      {spec(2, 200, 16, 16, 520, 256, 1, bf16, i32, 39), 128},  //   16-column tiles
      {spec(1, 300, 2, 3, 9, 8, 1, f32, i32, 17), 256},     // C = 256: whole-chunk slot groups
      {spec(2, 5, 6, 4, 16, 12, 6, f32, i32, 18), 64},      // C clamped to T = 5
      {spec(3, 1, 4, 4, 24, 16, 1, bf16, i32, 19), 16},     // T = 1
      {spec(1, 5, 256, 256, 16, 512, 256, f32, i32, 20), 64},  // W = R = 256
      {spec(2, 40, 64, 64, 768, 4096, 1, bf16, i32, 21), 64},  // hd 768
      {spec(2, 40, 64, 64, 768, 4096, 64, f32, i64, 22), 16},
      {spec(1, 24, 16, 16, 2048, 1024, 1, f32, i32, 23), 16},  // hd 2048
      {spec(1, 24, 16, 16, 2048, 1024, 16, bf16, i32, 24), 8},
      {spec(2, 300, 4, 4, 72, 8, 4, bf16, i32, 25), 256},    // vector path, groups of ~128 entries
      {spec(1, 64, 8, 8, 1024, 16, 1, f32, i32, 26), 64},    // groups of ~32 entries, hd 1024
      {spec(2, 230, 5, 3, 13, 24, 1, f32, i32, 27), 100},    // 64 < C <= 128: the packed solve, 4 rows a lane
      {spec(2, 300, 6, 4, 72, 96, 6, bf16, i64, 28), 128},   // C = 128, T % C != 0, G = W
      {spec(1, 150, 3, 5, 9, 12, 1, f32, i32, 29), 129},     // C = 129: the solve on global memory
  };
  for (const Case& c : cases) chunked_vs_reference(c.spec, c.C);
}

// ---- decode step vs the float64 reference ----------------------------------------------

ProblemSpec decode_spec(std::int64_t streams, std::int64_t W, std::int64_t R, std::int64_t hd, std::int64_t sps,
                        std::int64_t G, DType bank, DType index, std::uint64_t seed) {
  ProblemSpec s;
  s.P = streams, s.T = 1, s.W = W, s.R = R, s.hd = hd, s.slots_per_stream = sps, s.G = G, s.bank = bank;
  s.index = index, s.beta_3d = true, s.seed = seed;
  return s;
}

void test_decode_vs_reference() {
  const std::vector<ProblemSpec> specs = {
      decode_spec(5, 3, 4, 13, 16, 1, DType::f32, DType::i32, 31),
      decode_spec(3, 16, 8, 64, 64, 16, DType::bf16, DType::i64, 32),
      decode_spec(2, 256, 256, 40, 600, 1, DType::f32, DType::i32, 33),
      decode_spec(8, 64, 64, 768, 36864, 1, DType::bf16, DType::i32, 34),
      decode_spec(4, 7, 3, 2048, 100, 7, DType::f32, DType::i64, 35),
  };
  for (const ProblemSpec& spec : specs) {
    for (const std::int64_t sps : {spec.slots_per_stream, std::int64_t{0}}) {
      std::printf("  decode %s (options.slots_per_stream %lld)\n", describe(spec, 1).c_str(),
                  static_cast<long long>(sps));
      const Problem pb = make_problem(spec);
      DecodeOptions opt;
      opt.slots_per_stream = sps;
      Problem ref = pb;
      HostTensor want(DType::f64, {spec.P, 1, spec.hd});
      reference::decode_step(ref.args(), want.ref(), opt);
      DeviceProblem dp(pb);
      DeviceTensor readings = poisoned(spec.bank, {spec.P, 1, spec.hd});
      decode_step(dp.args(), readings.ref(), opt);
      sync();
      expect_error_at_most(rel_error(readings.to_host(), want), tolerance(spec.bank), "readings vs reference");
      expect_error_at_most(rel_error(dp.memory.to_host(), ref.memory), tolerance(spec.bank), "bank vs reference");
    }
  }
}

// ---- decode == chunked -------------------------------------------------------------------

// Token t of every stream of pb as a T = 1 problem (with a copy of pb's initial bank).
Problem token_slice(const Problem& pb, std::int64_t t) {
  const ProblemSpec& s = pb.spec;
  Problem out;
  out.spec = s;
  out.spec.T = 1;
  out.memory = pb.memory;
  const auto slice = [&](const HostTensor& src, std::int64_t width) {
    std::vector<std::int64_t> sizes = src.sizes();
    sizes[1] = 1;
    HostTensor dst(src.dtype(), sizes);
    for (std::int64_t p = 0; p < s.P; ++p) {
      for (std::int64_t k = 0; k < width; ++k) dst.set(p * width + k, src.get((p * s.T + t) * width + k));
    }
    return dst;
  };
  out.k_idx = slice(pb.k_idx, s.W);
  out.k_val = slice(pb.k_val, s.W);
  out.v = slice(pb.v, s.hd);
  out.beta = slice(pb.beta, 1);
  out.g = slice(pb.g, s.G);
  out.q_idx = slice(pb.q_idx, s.R);
  out.q_val = slice(pb.q_val, s.R);
  return out;
}

void test_decode_equals_chunked() {
  for (const DType bank : {DType::f32, DType::bf16}) {
    ProblemSpec spec;
    spec.P = 3, spec.T = 20, spec.W = 4, spec.R = 3, spec.hd = 24, spec.slots_per_stream = 32, spec.G = 4;
    spec.bank = bank, spec.beta_3d = true, spec.seed = 41;
    std::printf("  decode x T vs chunked %s\n", describe(spec, 8).c_str());
    const Problem pb = make_problem(spec);
    DeviceProblem chunked(pb);
    DeviceTensor chunked_readings(bank, {spec.P, spec.T, spec.hd});
    write_read_forward(chunked.args(), chunked_readings.ref(), options_for(spec, 8));

    DeviceTensor bank_dev(pb.memory);
    HostTensor decoded(bank, {spec.P, spec.T, spec.hd});
    DecodeOptions dopt;
    dopt.slots_per_stream = spec.slots_per_stream;
    for (std::int64_t t = 0; t < spec.T; ++t) {
      const DeviceProblem ds(token_slice(pb, t));
      WriteReadArgs args = ds.args();
      args.memory = bank_dev.ref();
      DeviceTensor out(bank, {spec.P, 1, spec.hd});
      decode_step(args, out.ref(), dopt);
      const HostTensor got = out.to_host();
      for (std::int64_t p = 0; p < spec.P; ++p) {
        for (std::int64_t c = 0; c < spec.hd; ++c) decoded.set((p * spec.T + t) * spec.hd + c, got.get(p * spec.hd + c));
      }
    }
    sync();
    expect_error_at_most(rel_error(decoded, chunked_readings.to_host()), tolerance(bank), "decode readings vs chunked");
    expect_error_at_most(rel_error(bank_dev.to_host(), chunked.memory.to_host()), tolerance(bank),
                         "decode bank vs chunked");
  }
}

// ---- bitwise: two runs, no-grad vs saving, graph replay vs eager -----------------------

void test_bitwise() {
  ProblemSpec spec;
  spec.P = 2, spec.T = 130, spec.W = 64, spec.R = 64, spec.hd = 768, spec.slots_per_stream = 2048;
  spec.bank = DType::bf16, spec.seed = 51;
  const std::int64_t C = 64;
  std::printf("  bitwise %s\n", describe(spec, C).c_str());
  const Problem pb = make_problem(spec);
  const WriteReadOptions opt = options_for(spec, C);
  const std::vector<std::int64_t> rshape = {spec.P, spec.T, spec.hd};

  DeviceProblem first(pb), second(pb), saving(pb), graphed(pb);
  DeviceTensor r1(spec.bank, rshape), r2(spec.bank, rshape), r3(spec.bank, rshape), r4(spec.bank, rshape);
  write_read_forward(first.args(), r1.ref(), opt);
  write_read_forward(second.args(), r2.ref(), opt);
  DeviceTensor saved(DType::u8, {static_cast<std::int64_t>(write_read_saved_bytes(saving.args(), opt))});
  write_read_forward_saving(saving.args(), r3.ref(), saved.ref(), opt);
  sync();
  const HostTensor want_readings = r1.to_host(), want_bank = first.memory.to_host();
  expect(want_readings.bitwise_equal(r2.to_host()), "two runs: readings bitwise equal");
  expect(want_bank.bitwise_equal(second.memory.to_host()), "two runs: final bank bitwise equal");
  expect(want_readings.bitwise_equal(r3.to_host()), "saving vs no-grad: readings bitwise equal");
  expect(want_bank.bitwise_equal(saving.memory.to_host()), "saving vs no-grad: final bank bitwise equal");

  // Capture one call (validate=True: the device check must be skipped while capturing), replay twice.
  cudaStream_t stream;
  cuda_ok(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  WriteReadOptions on_stream = opt;
  on_stream.cuda_stream = stream;
  cudaGraph_t graph;
  cuda_ok(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
  write_read_forward(graphed.args(), r4.ref(), on_stream);
  cuda_ok(cudaStreamEndCapture(stream, &graph), "cudaStreamEndCapture");
  cudaGraphExec_t exec;
  cuda_ok(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");
  for (int replay = 0; replay < 2; ++replay) {
    graphed.memory.copy_from(pb.memory);
    cuda_ok(cudaMemset(r4.data(), 0xff, r4.bytes()), "cudaMemset");
    cuda_ok(cudaGraphLaunch(exec, stream), "cudaGraphLaunch");
    cuda_ok(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    expect(want_readings.bitwise_equal(r4.to_host()), "graph replay " + std::to_string(replay) + ": readings bitwise equal");
    expect(want_bank.bitwise_equal(graphed.memory.to_host()),
           "graph replay " + std::to_string(replay) + ": final bank bitwise equal");
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

// ---- masking with validate=False: guard rows, and masked entries as no-ops ---------------

// A bank of `rows` rows with `guard` rows of random bits before and after it in one allocation.
struct GuardedBank {
  DeviceTensor all;
  HostTensor pattern;
  std::int64_t guard, rows, hd;
  GuardedBank(const HostTensor& bank, std::int64_t guard_rows)
      : guard(guard_rows), rows(bank.sizes()[0]), hd(bank.sizes()[1]) {
    pattern = HostTensor(bank.dtype(), {rows + 2 * guard, hd});
    std::mt19937 rng(7);
    std::uniform_real_distribution<double> u(-1.0, 1.0);
    for (std::int64_t i = 0; i < pattern.numel(); ++i) pattern.set(i, u(rng));
    for (std::int64_t i = 0; i < bank.numel(); ++i) pattern.set(guard * hd + i, bank.get(i));
    all = DeviceTensor(pattern);
  }
  TensorRef bank() const {
    TensorRef t = all.ref();
    t.data = static_cast<unsigned char*>(all.data()) + static_cast<std::size_t>(guard * hd) * dtype_size(t.dtype);
    t.sizes[0] = rows;
    return t;
  }
  bool guards_untouched() const {
    const HostTensor now = all.to_host();
    for (std::int64_t i = 0; i < guard * hd; ++i) {
      const std::int64_t tail = (guard + rows) * hd + i;
      if (now.get(i) != pattern.get(i) || now.get(tail) != pattern.get(tail)) return false;
    }
    return true;
  }
  HostTensor inner() const {
    const HostTensor now = all.to_host();
    HostTensor out(now.dtype(), {rows, hd});
    for (std::int64_t i = 0; i < rows * hd; ++i) out.set(i, now.get(guard * hd + i));
    return out;
  }
};

// Puts out-of-range indices into `dirty` and the equivalent no-op entries into `clean`: a masked
// write = an unused slot of the stream with k_val 0 and g 0 (needs G = W); a masked read = any
// slot of the stream with q_val 0.
void plant_bad_entries(Problem& dirty, Problem& clean) {
  const ProblemSpec& s = dirty.spec;
  const std::int64_t S = dirty.bank_rows();
  struct Bad {
    bool write;
    std::int64_t p, t, lane, value;
  };
  const std::vector<Bad> bad = {
      {true, 1 % s.P, 3 % s.T, 2 % s.W, -1},
      {true, 2 % s.P, 10 % s.T, 0, S + 5},
      {true, 0, (s.T - 1), s.W - 1, s.slots_per_stream + 3},  // a row of stream 1
      {false, 1 % s.P, 4 % s.T, 1 % s.R, -7},
      {false, 2 % s.P, 0, s.R - 1, 0},                         // a row of stream 0
      {false, 0, (15 % s.T), 0, S + 100},
  };
  for (const Bad& b : bad) {
    const std::int64_t token = b.p * s.T + b.t;
    if (b.write) {
      dirty.k_idx.set(token * s.W + b.lane, static_cast<double>(b.value));
      std::int64_t unused = b.p * s.slots_per_stream;
      const auto used = [&](std::int64_t slot) {
        for (std::int64_t w = 0; w < s.W; ++w) {
          if (clean.k_idx.get(token * s.W + w) == static_cast<double>(slot)) return true;
        }
        return false;
      };
      while (used(unused)) ++unused;
      clean.k_idx.set(token * s.W + b.lane, static_cast<double>(unused));
      clean.k_val.set(token * s.W + b.lane, 0.0);
      clean.g.set(token * s.G + b.lane, 0.0);
    } else {
      dirty.q_idx.set(token * s.R + b.lane, static_cast<double>(b.value));
      clean.q_idx.set(token * s.R + b.lane, static_cast<double>(b.p * s.slots_per_stream));
      clean.q_val.set(token * s.R + b.lane, 0.0);
    }
  }
}

void test_masking() {
  for (const std::int64_t T : {std::int64_t{21}, std::int64_t{1}}) {
    ProblemSpec spec;
    spec.P = 3, spec.T = T, spec.W = 4, spec.R = 3, spec.hd = 24, spec.slots_per_stream = 32, spec.G = 4;
    spec.beta_3d = true, spec.seed = 61;
    const bool decode = T == 1;
    std::printf("  masking, validate=False, %s %s\n", decode ? "decode" : "chunked", describe(spec, 8).c_str());
    Problem dirty = make_problem(spec), clean = dirty;
    plant_bad_entries(dirty, clean);
    DeviceProblem dp(dirty);
    GuardedBank guarded(dirty.memory, 64);
    WriteReadArgs args = dp.args();
    args.memory = guarded.bank();
    DeviceTensor readings = poisoned(spec.bank, {spec.P, T, spec.hd});
    HostTensor want(DType::f64, {spec.P, T, spec.hd});
    Problem ref = clean;
    if (decode) {
      DecodeOptions opt;
      opt.slots_per_stream = spec.slots_per_stream;
      opt.validate = false;
      decode_step(args, readings.ref(), opt);
      opt.validate = true;
      reference::decode_step(ref.args(), want.ref(), opt);
    } else {
      write_read_forward(args, readings.ref(), options_for(spec, 8, false));
      reference::write_read_forward(ref.args(), want.ref(), options_for(spec, 8, true));
    }
    sync();
    expect(guarded.guards_untouched(), "guard rows around the bank untouched");
    expect_error_at_most(rel_error(readings.to_host(), want), tolerance(spec.bank), "readings vs no-op reference");
    expect_error_at_most(rel_error(guarded.inner(), ref.memory), tolerance(spec.bank), "bank vs no-op reference");
  }
}

// ---- validate=True: the device check's error names tensor, stream, token, lane -----------

std::string host_message(const std::function<void()>& check) {
  try {
    check();
  } catch (const ValueError& e) {
    return e.what();
  }
  return "";
}

void expect_device_error(const std::function<void(DeviceTensor&)>& run, const DeviceProblem& dp, DType bank,
                         std::vector<std::int64_t> rshape, const std::string& want, const std::string& must_name) {
  const HostTensor bank_before = dp.memory.to_host();
  DeviceTensor readings = poisoned(bank, rshape);
  const HostTensor readings_before = readings.to_host();
  std::string got = "(no error)";
  try {
    run(readings);
  } catch (const ValueError& e) {
    got = e.what();
  }
  std::printf("    device error: %s\n", got.c_str());
  expect(!want.empty() && got == want, "message equals the host check's: " + want);
  expect(got.find(must_name) != std::string::npos, "message names " + must_name);
  expect(dp.memory.to_host().bitwise_equal(bank_before), "bank untouched after the error");
  expect(readings.to_host().bitwise_equal(readings_before), "readings untouched after the error");
}

void test_validation_errors() {
  ProblemSpec spec;
  spec.P = 2, spec.T = 10, spec.W = 3, spec.R = 2, spec.hd = 8, spec.slots_per_stream = 16, spec.beta_3d = true;
  spec.seed = 71;
  const WriteReadOptions opt = options_for(spec, 4);
  struct Case {
    const char* name;
    std::function<void(Problem&)> plant;
    const char* must_name;
  };
  const std::vector<Case> cases = {
      {"k_idx out of range", [](Problem& p) { p.k_idx.set((1 * 10 + 5) * 3 + 2, 0); }, "k_idx[stream 1, token 5, lane 2]"},
      {"k_idx repeats a lane", [](Problem& p) { p.k_idx.set((0 * 10 + 3) * 3 + 2, p.k_idx.get((0 * 10 + 3) * 3 + 0)); },
       "k_idx[stream 0, token 3, lane 2]"},
      {"q_idx out of range", [](Problem& p) { p.q_idx.set((1 * 10 + 9) * 2 + 1, -5); }, "q_idx[stream 1, token 9, lane 1]"},
      {"first of two", [](Problem& p) {
         p.k_idx.set((1 * 10 + 0) * 3 + 0, 40);
         p.q_idx.set((0 * 10 + 7) * 2 + 0, 20);
       }, "q_idx[stream 0, token 7, lane 0]"},
  };
  for (const Case& c : cases) {
    std::printf("  validate=True, chunked: %s\n", c.name);
    Problem pb = make_problem(spec);
    c.plant(pb);
    const core::WriteReadShape shape = core::validate_write_read(pb.args(), TensorRef{}, opt, core::BankDTypes::engine);
    const std::string want = host_message([&] { core::check_write_read_indices(pb.args(), shape); });
    DeviceProblem dp(pb);
    expect_device_error([&](DeviceTensor& r) { write_read_forward(dp.args(), r.ref(), opt); }, dp, spec.bank,
                        {spec.P, spec.T, spec.hd}, want, c.must_name);
  }
  for (const std::int64_t sps : {std::int64_t{16}, std::int64_t{0}}) {
    ProblemSpec dspec = spec;
    dspec.T = 1;
    Problem pb = make_problem(dspec);
    pb.k_idx.set(1 * 3 + 1, sps == 0 ? 99 : 3);  // stream 1, lane 1: outside stream 1's rows / the bank
    DecodeOptions dopt;
    dopt.slots_per_stream = sps;
    std::printf("  validate=True, decode (slots_per_stream %lld)\n", static_cast<long long>(sps));
    const core::DecodeShape shape = core::validate_decode(pb.args(), TensorRef{}, dopt, core::BankDTypes::engine);
    const std::string want = host_message([&] { core::check_decode_indices(pb.args(), shape, dopt); });
    DeviceProblem dp(pb);
    expect_device_error([&](DeviceTensor& r) { decode_step(dp.args(), r.ref(), dopt); }, dp, spec.bank,
                        {spec.P, 1, spec.hd}, want, "k_idx[stream 1, lane 1]");
  }
}

// ---- snapshot modes: saved-buffer sizes, and the forward never depends on the mode ----------

// Per bank: write_read_saved_bytes orders the modes by their row size (docs/spec.md §5: none hd*E,
// bf16 2 hd (f32 bank; "none" on a bf16 bank), fp8 hd + scale, int4 ceil(hd/2) + scale), and a
// saving forward in every mode gives readings and a final bank bitwise equal to mode "none"'s
// (docs/spec.md §5). The backward's use of the modes is tested in test_cuda_backward.cpp.
void test_snapshot_modes_forward() {
  for (const DType bank : {DType::f32, DType::bf16}) {
    for (const std::int64_t hd : {std::int64_t{8}, std::int64_t{37}}) {
      ProblemSpec spec;
      spec.P = 2, spec.T = 21, spec.W = 3, spec.R = 2, spec.hd = hd, spec.slots_per_stream = 16, spec.bank = bank;
      spec.seed = 81;
      std::printf("  snapshot modes, saving forward %s\n", describe(spec, 8).c_str());
      const Problem pb = make_problem(spec);
      WriteReadOptions opt = options_for(spec, 8);
      std::size_t bytes[4] = {};
      HostTensor none_readings, none_bank;
      for (const SnapshotQuant mode :
           {SnapshotQuant::none, SnapshotQuant::bf16, SnapshotQuant::fp8, SnapshotQuant::int4}) {
        opt.snapshot_quant = mode;
        const std::string name = snapshot_quant_name(mode);
        DeviceProblem dp(pb);
        bytes[static_cast<int>(mode)] = write_read_saved_bytes(dp.args(), opt);
        DeviceTensor saved(DType::u8, {static_cast<std::int64_t>(bytes[static_cast<int>(mode)])});
        DeviceTensor readings = poisoned(bank, {spec.P, spec.T, spec.hd});
        write_read_forward_saving(dp.args(), readings.ref(), saved.ref(), opt);
        sync();
        if (mode == SnapshotQuant::none) {
          none_readings = readings.to_host();
          none_bank = dp.memory.to_host();
        } else {
          expect(readings.to_host().bitwise_equal(none_readings), name + ": readings bitwise equal to \"none\"");
          expect(dp.memory.to_host().bitwise_equal(none_bank), name + ": final bank bitwise equal to \"none\"");
        }
      }
      std::printf("    saved bytes: none %zu, bf16 %zu, fp8 %zu, int4 %zu\n", bytes[0], bytes[1], bytes[2], bytes[3]);
      const bool bf16_is_none = bank == DType::bf16;
      expect(bf16_is_none ? bytes[1] == bytes[0] : bytes[1] < bytes[0] && bytes[1] > bytes[2],
             bf16_is_none ? "bf16 on a bf16 bank saves as much as none" : "bf16 saves less than none, more than fp8");
      expect(bytes[2] < bytes[0] && bytes[3] < bytes[2], "fp8 saves less than none, int4 less than fp8");
    }
  }
}

// ---- the saving forward writes the bytes the backward reads, and no other ------------------------

// `saved` is the caller's buffer, allocated without zeroing (the PyTorch binding's autograd Function
// allocates it uninitialised; docs/spec.md §11). So the saving forward must write the stamp and every
// byte the backward reads, the same bytes whatever the buffer held, and leave every other byte as it
// was (no zeroing); the backward must read written bytes only. Three saving forwards + backwards into
// buffers filled with 0x00, 0xff (NaN in every float format) and random bytes; awkward shapes (T % C
// != 0, padding and masked entries, hot slots; odd hd, the vector path, three column steps, and
// hd 256, where SDM_CUDA_SLOT_WALK=staged runs the backward's staged walk), both banks, every mode:
//   - the snapshot rows and scales past the call's write groups (counted from the Phase 1 keys,
//     saved/layout.hpp) keep each buffer's bytes;
//   - every other byte is equal in the three runs, except the padding before a region's 256-byte
//     aligned start (a run of fewer than 256 bytes ending at a multiple of 256 of the body), which
//     keeps each buffer's bytes too; the 256-byte stamp is written whole;
//   - some byte is left unwritten (the forward zeroes nothing);
//   - the readings, the final bank, the six gradients and the restored bank are bitwise equal, and
//     equal those of a fourth run into a buffer left uninitialised (under initcheck: no read of it).

// The snapshot-row and scale bytes of the buffer's body (after the stamp) that the saving forward
// leaves unwritten: those of the rows past the call's write groups (rows are packed group by group,
// core/snapshot_row_rule.hpp), the groups counted from the Phase 1 keys in `body`.
std::vector<bool> unused_snapshot_bytes(const WriteReadPlan& plan, const unsigned char* body,
                                        std::size_t body_bytes) {
  const cuda::SavedLayout layout = cuda::saved_layout(plan);
  const cuda::Geometry geo = cuda::make_geometry(plan.shape);
  std::vector<std::uint64_t> keys(static_cast<std::size_t>(geo.write_entries()));
  std::memcpy(keys.data(), body + layout.phase1.keys, keys.size() * sizeof(std::uint64_t));
  const std::int64_t CW = geo.C * geo.W;
  std::size_t groups = 0;
  for (std::int64_t n = 0; n < geo.N; ++n) {
    const cuda::KeySlots slots{keys.data() + n * CW, geo.keys};
    for (int q = 0; q < static_cast<int>(CW); ++q) groups += cuda::starts_group(slots, q, slots[q], geo.sps) ? 1 : 0;
  }
  std::vector<bool> unused(body_bytes, false);
  for (std::size_t row = groups; row < layout.rows; ++row) {
    std::fill_n(unused.begin() + static_cast<std::ptrdiff_t>(layout.snapshot + row * layout.row_bytes),
                layout.row_bytes, true);
    if (layout.has_scales) {
      std::fill_n(unused.begin() + static_cast<std::ptrdiff_t>(layout.scales + row * sizeof(float)), sizeof(float),
                  true);
    }
  }
  return unused;
}

// One saving forward into a buffer of `bytes` holding `fill` (nullptr: left uninitialised, and not
// read back), then the backward of <readings, dy> + <final bank, dF>: readings, final bank, saved
// (absent without a fill), the six gradients, the restored bank.
std::vector<HostTensor> saving_run(const Problem& pb, const WriteReadOptions& opt, std::size_t bytes,
                                   const std::vector<unsigned char>* fill, const HostTensor& dy,
                                   const HostTensor& d_final) {
  const ProblemSpec& s = pb.spec;
  DeviceProblem dp(pb);
  DeviceTensor readings(s.bank, {s.P, s.T, s.hd});
  DeviceTensor saved(DType::u8, {static_cast<std::int64_t>(bytes)});
  if (fill != nullptr) cuda_ok(cudaMemcpy(saved.data(), fill->data(), bytes, cudaMemcpyHostToDevice), "cudaMemcpy");
  write_read_forward_saving(dp.args(), readings.ref(), saved.ref(), opt);
  std::vector<HostTensor> out{readings.to_host(), dp.memory.to_host(),
                              fill != nullptr ? saved.to_host() : HostTensor()};
  DeviceTensor d_readings(dy), d_bank(d_final);
  std::vector<DeviceTensor> grads;
  for (const HostTensor* like : {&pb.memory, &pb.k_val, &pb.v, &pb.beta, &pb.g, &pb.q_val}) {
    grads.emplace_back(DType::f32, like->sizes());
  }
  const WriteReadGrads refs{grads[0].ref(), grads[1].ref(), grads[2].ref(), grads[3].ref(), grads[4].ref(),
                            grads[5].ref()};
  write_read_backward(dp.args(), saved.ref(), d_readings.ref(), d_bank.ref(), refs, opt);
  for (const DeviceTensor& grad : grads) out.push_back(grad.to_host());
  out.push_back(dp.memory.to_host());
  return out;
}

HostTensor uniform_tensor(DType dtype, std::vector<std::int64_t> sizes, std::mt19937_64& rng) {
  HostTensor t(dtype, std::move(sizes));
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  for (std::int64_t i = 0; i < t.numel(); ++i) t.set(i, u(rng));
  return t;
}

void saved_bytes_case(const ProblemSpec& spec, std::int64_t C, SnapshotQuant mode) {
  const std::string name = describe(spec, C) + " " + snapshot_quant_name(mode);
  Problem pb = make_problem(spec);
  pb.k_idx.set(4, -1.0);  // a masked write entry and a masked read entry (validate=False)
  pb.q_idx.set(7, -1.0);
  WriteReadOptions opt = options_for(spec, C, false);
  opt.snapshot_quant = mode;
  const WriteReadPlan plan = plan_write_read(DeviceProblem(pb).args(), opt);  // the CUDA engine's layout
  const std::size_t bytes = plan.saved_bytes;
  std::mt19937_64 rng(spec.seed);
  const HostTensor dy = uniform_tensor(DType::f32, {spec.P, spec.T, spec.hd}, rng);
  const HostTensor d_final = uniform_tensor(DType::f32, {pb.bank_rows(), spec.hd}, rng);
  std::vector<unsigned char> noise(bytes);
  for (unsigned char& b : noise) b = static_cast<unsigned char>(rng());
  const std::vector<std::vector<unsigned char>> fills{std::vector<unsigned char>(bytes, 0x00),
                                                      std::vector<unsigned char>(bytes, 0xff), noise};
  std::vector<std::vector<HostTensor>> runs;
  for (const auto& fill : fills) runs.push_back(saving_run(pb, opt, bytes, &fill, dy, d_final));
  // A buffer left uninitialised: under compute-sanitizer's initcheck a read of a byte no kernel wrote
  // is reported (scripts/gpu_check.sh runs the small cases so).
  runs.push_back(saving_run(pb, opt, bytes, nullptr, dy, d_final));
  sync();

  std::vector<const unsigned char*> got;
  for (std::size_t r = 0; r < fills.size(); ++r) {
    got.push_back(static_cast<const unsigned char*>(runs[r][2].ref().data));
  }
  constexpr std::size_t kStamp = core::kSavedHeaderBytes;
  const std::vector<bool> unused = unused_snapshot_bytes(plan, got[0] + kStamp, bytes - kStamp);
  const auto in_unused_row = [&](std::size_t b) { return b >= kStamp && unused[b - kStamp]; };
  const auto holds_fills = [&](std::size_t b) {
    return got[0][b] == 0x00 && got[1][b] == 0xff && got[2][b] == noise[b];
  };
  const auto written = [&](std::size_t b) { return got[0][b] == got[1][b] && got[1][b] == got[2][b]; };
  // Each byte: written (the same in the three runs; not an unused snapshot byte) or kept (each run
  // holds its buffer's byte: an unused snapshot byte, or padding before a region's start).
  std::size_t kept = 0, wrong = 0, stray = 0;
  for (std::size_t b = 0; b < bytes;) {
    if (in_unused_row(b)) {
      kept += holds_fills(b);
      wrong += !holds_fills(b);
      ++b;
    } else if (written(b)) {
      ++b;
    } else {
      // A run of bytes outside the unused rows, not written: it must be padding before a region.
      std::size_t end = b + 1;
      while (end < bytes && !in_unused_row(end) && !written(end)) ++end;
      bool padding = b >= kStamp && end - b < 256 && (end - kStamp) % 256 == 0;
      for (std::size_t k = b; k < end; ++k) padding = padding && holds_fills(k);
      if (padding) kept += end - b;
      else if (++stray <= 8) std::printf("    %s: bytes [%zu, %zu) not written, not padding\n", name.c_str(), b, end);
      b = end;
    }
  }
  expect(wrong == 0, name + ": the unused snapshot rows keep the caller's bytes");
  expect(stray == 0, name + ": every other byte is written, the same for every buffer (padding aside)");
  expect(kept > 0, name + ": some bytes are left unwritten (the forward zeroes nothing)");

  const char* names[] = {"readings", "final bank", "saved", "grad memory", "grad k_val", "grad v",
                         "grad beta", "grad g", "grad q_val", "restored bank"};
  for (std::size_t r = 1; r < runs.size(); ++r) {
    for (std::size_t k = 0; k < runs[0].size(); ++k) {
      if (k == 2) continue;  // saved: compared above
      const std::string buffer = r == 1 ? "0xff" : r == 2 ? "random" : "uninitialised";
      expect(runs[r][k].bitwise_equal(runs[0][k]), name + ": " + names[k] + " bitwise equal, buffer " + buffer);
    }
  }
}

void test_saved_unwritten_bytes() {
  for (const DType bank : {DType::f32, DType::bf16}) {
    for (const SnapshotQuant mode :
         {SnapshotQuant::none, SnapshotQuant::bf16, SnapshotQuant::fp8, SnapshotQuant::int4}) {
      saved_bytes_case(spec_of(2, 37, 3, 5, 13, 16, 1, bank, 91), 8, mode);    // odd hd, hot slots
      saved_bytes_case(spec_of(2, 45, 4, 3, 24, 16, 4, bank, 92), 8, mode);    // vector path, G = W
      saved_bytes_case(spec_of(1, 40, 16, 12, 520, 256, 1, bank, 93), 16, mode);  // three column steps
      saved_bytes_case(spec_of(2, 40, 8, 6, 256, 32, 1, bank, 94), 16, mode);  // hd % 256 == 0: the staged walk
    }
  }
}

// Two of those cases for compute-sanitizer (scripts/gpu_check.sh): both column paths and banks.
void test_saved_unwritten_bytes_small() {
  saved_bytes_case(spec_of(2, 37, 3, 5, 13, 16, 1, DType::f32, 91), 8, SnapshotQuant::none);
  saved_bytes_case(spec_of(2, 45, 4, 3, 24, 16, 4, DType::bf16, 92), 8, SnapshotQuant::int4);
}

// ---- CUDA vs the CPU engine ------------------------------------------------------------

void test_cuda_vs_cpu_engine() {
  for (const DType bank : {DType::f32, DType::bf16}) {
    ProblemSpec spec;
    spec.P = 2, spec.T = 150, spec.W = 16, spec.R = 12, spec.hd = 72, spec.slots_per_stream = 128, spec.G = 16;
    spec.bank = bank, spec.seed = 91;
    std::printf("  CUDA vs CPU engine %s\n", describe(spec, 64).c_str());
    Problem pb = make_problem(spec);
    const WriteReadOptions opt = options_for(spec, 64);
    DeviceProblem dp(pb);
    DeviceTensor readings(bank, {spec.P, spec.T, spec.hd});
    write_read_forward(dp.args(), readings.ref(), opt);
    HostTensor cpu_readings = pb.make_readings(bank);
    write_read_forward(pb.args(), cpu_readings.ref(), opt);
    sync();
    expect_error_at_most(rel_error(readings.to_host(), cpu_readings), tolerance(bank), "readings vs CPU engine");
    expect_error_at_most(rel_error(dp.memory.to_host(), pb.memory), tolerance(bank), "final bank vs CPU engine");
  }
}


// A bank of more than 2^32 elements (docs/spec.md §7): a small problem run on a small bank, and the
// same problem on a bank of 2^21 + 64 rows of hd 2048 (2^32 + 2^17 elements, 8.6 GB bf16) whose
// top 64 rows hold the small bank's rows, indices shifted there. The op reads and writes only the
// indexed rows and its orders depend on the slot order, which the shift keeps: readings, the
// touched rows and every gradient must agree bitwise, and the untouched rows must stay zero.
void test_bank_over_2_pow_32_elements() {
  ProblemSpec spec;
  spec.P = 1, spec.T = 70, spec.W = 8, spec.R = 6, spec.hd = 2048, spec.slots_per_stream = 64;
  spec.bank = DType::bf16, spec.seed = 77;
  const std::int64_t big_rows = (std::int64_t{1} << 21) + spec.slots_per_stream;
  const std::int64_t shift = big_rows - spec.slots_per_stream;
  std::printf("  small bank [%lld, %lld] vs bank [%lld, %lld] (%.3g elements)\n",
              static_cast<long long>(spec.slots_per_stream), static_cast<long long>(spec.hd),
              static_cast<long long>(big_rows), static_cast<long long>(spec.hd),
              static_cast<double>(big_rows) * static_cast<double>(spec.hd));
  const Problem small = make_problem(spec);
  Problem shifted = small;
  for (HostTensor* idx : {&shifted.k_idx, &shifted.q_idx}) {
    for (std::int64_t i = 0; i < idx->numel(); ++i) idx->set(i, idx->get(i) + static_cast<double>(shift));
  }
  DeviceProblem ds(small), db(shifted);
  db.memory = DeviceTensor(DType::bf16, {big_rows, spec.hd});
  const std::size_t row_bytes = static_cast<std::size_t>(spec.hd) * 2;
  cuda_ok(cudaMemset(db.memory.data(), 0, db.memory.bytes()), "cudaMemset");
  cuda_ok(cudaMemcpy(static_cast<char*>(db.memory.data()) + static_cast<std::size_t>(shift) * row_bytes,
                     ds.memory.data(), ds.memory.bytes(), cudaMemcpyDeviceToDevice), "cudaMemcpy");

  WriteReadOptions small_opt = options_for(spec, 16), big_opt = small_opt;
  big_opt.slots_per_stream = big_rows;
  auto run = [&](DeviceProblem& dp, const WriteReadOptions& opt, std::int64_t rows) {
    DeviceTensor readings(DType::bf16, {spec.P, spec.T, spec.hd});
    DeviceTensor saved(DType::u8, {static_cast<std::int64_t>(write_read_saved_bytes(dp.args(), opt))});
    write_read_forward_saving(dp.args(), readings.ref(), saved.ref(), opt);
    DeviceTensor final_bank_rows(DType::bf16, {spec.slots_per_stream, spec.hd});
    cuda_ok(cudaMemcpy(final_bank_rows.data(), static_cast<char*>(dp.memory.data()) +
                           static_cast<std::size_t>(rows - spec.slots_per_stream) * row_bytes,
                       final_bank_rows.bytes(), cudaMemcpyDeviceToDevice), "cudaMemcpy");
    DeviceTensor grad_readings(DType::f32, {spec.P, spec.T, spec.hd});
    cuda_ok(cudaMemset(grad_readings.data(), 0x3c, grad_readings.bytes()), "cudaMemset");  // 0.0115 each
    DeviceTensor grad_memory(DType::f32, {rows, spec.hd}), grad_k_val(DType::f32, {spec.P, spec.T, spec.W});
    DeviceTensor grad_q_val(DType::f32, {spec.P, spec.T, spec.R}), grad_g(DType::f32, {spec.P, spec.T, 1});
    WriteReadGrads grads;
    grads.memory = grad_memory.ref(), grads.k_val = grad_k_val.ref(), grads.q_val = grad_q_val.ref();
    grads.g = grad_g.ref();
    write_read_backward(dp.args(), saved.ref(), grad_readings.ref(), TensorRef{}, grads, opt);
    DeviceTensor grad_rows(DType::f32, {spec.slots_per_stream, spec.hd});
    cuda_ok(cudaMemcpy(grad_rows.data(), static_cast<char*>(grad_memory.data()) +
                           static_cast<std::size_t>(rows - spec.slots_per_stream) * spec.hd * 4,
                       grad_rows.bytes(), cudaMemcpyDeviceToDevice), "cudaMemcpy");
    sync();
    return std::vector<HostTensor>{readings.to_host(), final_bank_rows.to_host(), grad_rows.to_host(),
                                   grad_k_val.to_host(), grad_q_val.to_host(), grad_g.to_host()};
  };
  const auto want = run(ds, small_opt, spec.slots_per_stream);
  const auto got = run(db, big_opt, big_rows);
  const char* names[] = {"readings", "final bank rows", "bank gradient rows", "grad k_val", "grad q_val", "grad g"};
  for (std::size_t i = 0; i < want.size(); ++i) {
    expect(got[i].bitwise_equal(want[i]), std::string(names[i]) + " on the large bank == small bank, bitwise");
  }
  // The backward restored the large bank: its top rows are the initial small bank again.
  DeviceTensor top(DType::bf16, {spec.slots_per_stream, spec.hd});
  cuda_ok(cudaMemcpy(top.data(), static_cast<char*>(db.memory.data()) + static_cast<std::size_t>(shift) * row_bytes,
                     top.bytes(), cudaMemcpyDeviceToDevice), "cudaMemcpy");
  expect(top.to_host().bitwise_equal(small.memory), "large bank's rows restored by the backward, bitwise");
  // Untouched rows: sample the first rows and the rows just below the shifted ones.
  DeviceTensor probe(DType::bf16, {2, spec.hd});
  cuda_ok(cudaMemcpy(probe.data(), db.memory.data(), row_bytes, cudaMemcpyDeviceToDevice), "cudaMemcpy");
  cuda_ok(cudaMemcpy(static_cast<char*>(probe.data()) + row_bytes,
                     static_cast<char*>(db.memory.data()) + static_cast<std::size_t>(shift - 1) * row_bytes, row_bytes,
                     cudaMemcpyDeviceToDevice), "cudaMemcpy");
  const HostTensor probed = probe.to_host();
  bool zero = true;
  for (std::int64_t i = 0; i < probed.numel(); ++i) zero = zero && probed.get(i) == 0.0;
  expect(zero, "untouched rows of the large bank stay zero");
}


// ---- snapshot quantiser: the device codec == the host quantiser, exhaustively -------------------
// The engine's device encoder (encode_snapshot_piece, as the writer calls it, kVec 8 and 1) against
// core::quant_encode for every bf16 value (bf16 rows, fast quotient) and for every bf16 value plus
// 8192 other f32 values (f32 rows, IEEE division), code by code, for 60 row scales; its decoder
// (load_snapshot_piece, restore_snapshot_piece) against core::quant_restore(core::quant_decode(..))
// for all 256 fp8 codes / all nibble pairs x the scales x both banks, bitwise (two NaNs are equal);
// the row scale (the gather's tile amaxes and the writer's reduction of them) against
// core::quant_scale of core's amax; the hardware bf16 rounding against core::round_to_bf16 for all
// 2^32 f32 bit patterns.

// bitwise, any two NaNs equal
bool same_float(float a, float b) { return (std::isnan(a) && std::isnan(b)) || core::float_bits(a) == core::float_bits(b); }

// Row scales as core::quant_scale makes them (bf16 values): powers of two 2^-30 .. 2^20, and the
// scales of amax values at the bounds (0, subnormal, 1e-12, inf, FLT_MAX), multiples of qmax, odd
// bf16 mantissas and others, for both qmax.
std::vector<float> codec_scales() {
  std::vector<float> scales;
  for (int e = -30; e <= 20; e += 2) scales.push_back(std::ldexp(1.0f, e));
  const float amaxes[] = {0.0f,     1e-40f,      1e-12f,         3e-10f,
                          0.1f,     1.0f,        3.0f,           7.0f,
                          448.0f,   7.0f * 1024, 448.0f / 4096,  1000.0f,
                          12345.678f, core::bf16_to_float(0x3f81), core::bf16_to_float(0x4b7f),
                          std::numeric_limits<float>::max(), std::numeric_limits<float>::infinity()};
  for (const float qmax : {core::kFp8QMax, core::kInt4QMax}) {
    for (const float amax : amaxes) scales.push_back(core::quant_scale(amax, qmax));
  }
  return scales;
}

const char* quant_name(SnapshotQuant mode) { return mode == SnapshotQuant::fp8 ? "fp8" : "int4"; }

// Device encode of the n = x.size() row values (given to the device as `values`, bank dtype)
// against core::quant_encode, per scale and code.
void check_encode(SnapshotQuant mode, DType bank, const void* values, const std::vector<float>& x,
                  const std::vector<float>& scales) {
  const auto n = static_cast<std::int64_t>(x.size());
  const auto row_bytes = static_cast<std::int64_t>(core::snapshot_payload_bytes(mode, bank, n));
  std::vector<std::uint8_t> want(x.size() * scales.size());
  for (std::size_t r = 0; r < scales.size(); ++r) {
    const float reciprocal = core::quant_reciprocal(scales[r]);
    for (std::int64_t c = 0; c < n; ++c) {
      want[r * x.size() + c] = core::quant_encode(mode, x[c], scales[r], reciprocal, bank == DType::bf16);
    }
  }
  for (const int vec : {8, 1}) {
    const std::vector<std::uint8_t> got = device_encode(mode, bank, values, n, scales, vec);
    long long mismatches = 0;
    for (std::size_t r = 0; r < scales.size(); ++r) {
      for (std::int64_t c = 0; c < n; ++c) {
        const std::uint8_t code = core::quantized_code(mode, got.data() + r * row_bytes, c);
        const std::uint8_t expected = want[r * x.size() + c];
        if (code == expected) continue;
        if (mismatches++ < 5) {
          std::printf("      x %a (bits %08x) scale %a: device %02x, host %02x\n", static_cast<double>(x[c]),
                      core::float_bits(x[c]), static_cast<double>(scales[r]), code, expected);
        }
      }
    }
    char what[160];
    std::snprintf(what, sizeof what, "encode %s, %s rows, kVec %d: %lld of %lld codes differ", quant_name(mode),
                  dtype_name(bank), vec, mismatches, static_cast<long long>(n) * static_cast<long long>(scales.size()));
    std::printf("    %s\n", what);
    expect(mismatches == 0, what);
  }
}

// Device decode and restore of every code (fp8: bytes 0..255 as 256 columns; int4: as 512
// columns, every nibble pair) against core, per scale; also the element path with a partial last
// piece (columns past hd must read 0 and stay unwritten).
void check_decode(SnapshotQuant mode, DType bank, const std::vector<float>& scales) {
  constexpr std::int64_t kRowBytes = 256;
  const std::int64_t full_hd = mode == SnapshotQuant::fp8 ? 256 : 512;
  std::vector<std::uint8_t> payload(static_cast<std::size_t>(kRowBytes) * scales.size());
  for (std::size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<std::uint8_t>(i % kRowBytes);
  const struct {
    bool vec;
    std::int64_t hd;
  } runs[] = {{true, full_hd}, {false, full_hd}, {false, full_hd - 3}};
  for (const auto& run : runs) {
    const DecodedRows got = device_decode(mode, bank, payload, kRowBytes, run.hd, scales, run.vec);
    const std::int64_t hd8 = (run.hd + 7) / 8 * 8;
    long long mismatches = 0;
    for (std::size_t r = 0; r < scales.size(); ++r) {
      for (std::int64_t c = 0; c < hd8; ++c) {
        const std::size_t i = r * static_cast<std::size_t>(hd8) + static_cast<std::size_t>(c);
        float want = 0.0f;
        std::uint32_t want_bits = 0;
        if (c < run.hd) {
          const std::uint8_t code = core::quantized_code(mode, payload.data() + r * kRowBytes, c);
          want = core::quant_restore(core::quant_decode(mode, code), scales[r], bank);
          want_bits = bank == DType::bf16 ? core::bf16_from_float(want) : core::float_bits(want);
        }
        const std::uint32_t bits = got.restored[i];
        const bool restored_ok = std::isnan(want) ? (bank == DType::bf16 ? (bits & 0x7fffu) > 0x7f80u
                                                                          : std::isnan(core::bits_float(bits)))
                                                  : bits == want_bits;
        if (same_float(got.values[i], want) && restored_ok) continue;
        if (mismatches++ < 5) {
          std::printf("      column %lld scale %a: decoded %a (host %a), restored %08x (host %08x)\n",
                      static_cast<long long>(c), static_cast<double>(scales[r]), static_cast<double>(got.values[i]),
                      static_cast<double>(want), bits, want_bits);
        }
      }
    }
    char what[160];
    std::snprintf(what, sizeof what, "decode %s, %s bank, %s, hd %lld: %lld of %lld values differ", quant_name(mode),
                  dtype_name(bank), run.vec ? "vector" : "elements", static_cast<long long>(run.hd), mismatches,
                  static_cast<long long>(hd8) * static_cast<long long>(scales.size()));
    std::printf("    %s\n", what);
    expect(mismatches == 0, what);
  }
}

// Device row scales against core: rows of random bf16 bit patterns (NaN, inf, subnormals
// included), random finite values, and special rows (all NaN, all -0, subnormals only, one inf).
void check_row_scales() {
  // hd % 256 != 0: partial pieces; 33 pieces of 32 columns with kVec 1 (more than a warp's lanes)
  constexpr std::int64_t kRows = 48, kHd = 1040;
  std::mt19937 rng(77);
  std::vector<std::uint16_t> bits(static_cast<std::size_t>(kRows * kHd));
  for (std::int64_t r = 0; r < kRows; ++r) {
    for (std::int64_t c = 0; c < kHd; ++c) {
      auto b = static_cast<std::uint16_t>(rng() & 0xffffu);
      switch (r % 8) {
        case 0: break;                                                        // any pattern
        case 1: b = static_cast<std::uint16_t>((b & 0x80ffu) | 0x3c00u); break;  // finite, 2^-7 .. 2^-5
        case 2: b = c % 97 == 5 ? std::uint16_t{0x7fc1} : static_cast<std::uint16_t>(b & 0xbfffu); break;  // finite + NaNs
        case 3: b = static_cast<std::uint16_t>(0x7f81u | (b & 0x807eu)); break;  // NaN only
        case 4: b = 0x8000; break;                                           // -0 only
        case 5: b &= 0x807fu; break;                                          // subnormals and zeros
        case 6: b = c == 300 ? 0xff80 : static_cast<std::uint16_t>(b & 0x3fffu); break;  // one -inf
        default: b = static_cast<std::uint16_t>((b & 0x81ffu) | 0x4600u); break;  // large finite
      }
      bits[static_cast<std::size_t>(r * kHd + c)] = b;
    }
  }
  std::vector<float> f32(bits.size());
  for (std::size_t i = 0; i < bits.size(); ++i) {
    // f32 rows: the same values, with random low bits on finite nonzero ones of odd rows
    const float v = core::bf16_to_float(bits[i]);
    const bool finite = std::isfinite(v) && v != 0.0f;
    const bool odd_row = (i / static_cast<std::size_t>(kHd)) % 2 == 1;
    const auto low = static_cast<std::uint32_t>(rng() & 0xffffu);
    f32[i] = odd_row && finite ? core::bits_float(core::float_bits(v) | low) : v;
  }
  long long mismatches = 0, checked = 0;
  for (const SnapshotQuant mode : {SnapshotQuant::fp8, SnapshotQuant::int4}) {
    for (const DType bank : {DType::bf16, DType::f32}) {
      for (const int vec : {8, 1}) {
        const void* rows = bank == DType::bf16 ? static_cast<const void*>(bits.data()) : f32.data();
        const std::vector<float> got = device_row_scales(mode, bank, rows, kRows, kHd, vec);
        for (std::int64_t r = 0; r < kRows; ++r) {
          float amax = 0.0f;
          for (std::int64_t c = 0; c < kHd; ++c) {
            const auto i = static_cast<std::size_t>(r * kHd + c);
            amax = core::quant_amax_update(amax, bank == DType::bf16 ? core::bf16_to_float(bits[i]) : f32[i]);
          }
          const float want = core::quant_scale(amax, core::quant_qmax(mode));
          ++checked;
          if (core::float_bits(got[static_cast<std::size_t>(r)]) == core::float_bits(want)) continue;
          if (mismatches++ < 5) {
            std::printf("      %s %s kVec %d row %lld: device scale %a, host %a\n", quant_name(mode), dtype_name(bank), vec,
                        static_cast<long long>(r), static_cast<double>(got[static_cast<std::size_t>(r)]),
                        static_cast<double>(want));
          }
        }
      }
    }
  }
  char what[128];
  std::snprintf(what, sizeof what, "row scales: %lld of %lld differ", mismatches, checked);
  std::printf("    %s\n", what);
  expect(mismatches == 0, what);
}

void test_snapshot_codec_exhaustive() {
  const std::uint64_t rounding = device_bf16_rounding_mismatches();
  char what[128];
  std::snprintf(what, sizeof what, "hardware rnd_bf16 of all 2^32 f32 patterns: %llu differ",
                static_cast<unsigned long long>(rounding));
  std::printf("    %s\n", what);
  expect(rounding == 0, what);

  const std::vector<float> scales = codec_scales();
  std::vector<std::uint16_t> bf16_values(65536);
  std::vector<float> x(65536);
  for (std::uint32_t b = 0; b < 65536; ++b) {
    bf16_values[b] = static_cast<std::uint16_t>(b);
    x[b] = core::bf16_to_float(static_cast<std::uint16_t>(b));
  }
  // f32 rows: every bf16 value, 4096 random bit patterns, and 4096 with random high halves and low
  // halves at or next to a bf16 rounding tie (quotients by powers of two tie exactly).
  std::vector<float> f32_values = x;
  std::mt19937 rng(2024);
  const std::uint32_t lows[] = {0x8000u, 0x7fffu, 0x8001u, 0x0001u, 0xffffu, 0x4000u, 0xc000u, 0x0000u};
  for (int i = 0; i < 4096; ++i) f32_values.push_back(core::bits_float(static_cast<std::uint32_t>(rng())));
  for (int i = 0; i < 4096; ++i) {
    f32_values.push_back(core::bits_float((static_cast<std::uint32_t>(rng()) & 0xffff0000u) | lows[i % 8]));
  }
  for (const SnapshotQuant mode : {SnapshotQuant::fp8, SnapshotQuant::int4}) {
    check_encode(mode, DType::bf16, bf16_values.data(), x, scales);
    check_encode(mode, DType::f32, f32_values.data(), f32_values, scales);
    check_decode(mode, DType::bf16, scales);
    check_decode(mode, DType::f32, scales);
  }
  check_row_scales();
}

// ---- programmatic dependent launch only where the kernels wait ---------------------------------

// Whether the code the device loads for this build holds the kernels' griddepcontrol.wait, from
// the build's architectures (SDM_CUDA_ARCHS, CMake's syntax: "90", "80-virtual", "80;90-real") and
// the device's compute capability: the driver takes the SASS of an architecture of the device's
// major version at or below it, else JIT-compiles the PTX of the highest architecture at or below
// it; the wait is there when that architecture is sm_90 or later. Unparsable entries ("native")
// leave `known` false.
bool kernels_wait(const std::string& archs, int device_cc, bool& known) {
  int sass = 0, ptx = 0;
  known = true;
  std::size_t at = 0;
  while (at <= archs.size()) {
    const std::size_t end = std::min(archs.find(',', at), archs.size());
    const std::string entry = archs.substr(at, end - at);
    at = end + 1;
    if (entry.empty()) continue;
    std::size_t digits = 0;
    while (digits < entry.size() && entry[digits] >= '0' && entry[digits] <= '9') ++digits;
    if (digits == 0) {
      known = false;
      continue;
    }
    const int arch = std::stoi(entry.substr(0, digits));
    const bool virtual_only = entry.find("-virtual") != std::string::npos;
    const bool real_only = entry.find("-real") != std::string::npos;
    if (!virtual_only && arch / 10 == device_cc / 10 && arch <= device_cc) sass = std::max(sass, arch);
    if (!real_only && arch <= device_cc) ptx = std::max(ptx, arch);
  }
  return (sass != 0 ? sass : ptx) >= 90;
}

void test_dependent_launch_only_where_kernels_wait() {
  int device = 0, major = 0, minor = 0;
  cuda_ok(cudaGetDevice(&device), "cudaGetDevice");
  cuda_ok(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device), "compute capability");
  cuda_ok(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device), "compute capability");
  bool known = false;
  const bool want = kernels_wait(SDM_TEST_CUDA_ARCHS, major * 10 + minor, known);
  expect(known, std::string("the build's architectures are explicit (SDM_CUDA_ARCHS ") + SDM_TEST_CUDA_ARCHS + ")");
  const bool got = cuda::dependent_launch_safe();
  std::printf("  SDM_CUDA_ARCHS %s on compute capability %d.%d: PDL %s\n", SDM_TEST_CUDA_ARCHS, major, minor,
              got ? "on" : "off (the kernels have no griddepcontrol.wait)");
  expect(got == want, "dependent launches exactly where the loaded kernels hold griddepcontrol.wait");
}
}  // namespace

// Arguments: substrings of test names to run (all tests without any), --verbose (gpu_test_harness.hpp).
int main(int argc, char** argv) {
  const GpuTest tests[] = {
      {"chunked forward vs float64 reference", test_chunked_vs_reference},
      {"decode step vs float64 reference", test_decode_vs_reference},
      {"decode step x T == chunked forward", test_decode_equals_chunked},
      {"bitwise: runs, saving, graph replay", test_bitwise},
      {"masking with validate=False", test_masking},
      {"device index check (validate=True)", test_validation_errors},
      {"snapshot modes: saved bytes, forward unchanged", test_snapshot_modes_forward},
      {"saving forward writes what the backward reads, no more", test_saved_unwritten_bytes},
      {"saved small: what the backward reads is written", test_saved_unwritten_bytes_small},
      {"CUDA vs CPU engine", test_cuda_vs_cpu_engine},
      {"bank of more than 2^32 elements", test_bank_over_2_pow_32_elements},
      {"snapshot quantiser: device == host, exhaustive", test_snapshot_codec_exhaustive},
      {"dependent launch only where the kernels wait", test_dependent_launch_only_where_kernels_wait},
  };
  return run_gpu_tests("sdm_gpu_tests", tests, argc, argv);
}

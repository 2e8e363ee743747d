// test_cuda_slot_split.cpp - GPU tests of the backward slot kernel's row split (issue 24 S1,
// src/cuda/backward/slot_split.cuh): a long slot group's row cut into 256-column steps over the
// group's own warps, each dot stored per step and summed in step order by the entry kernels. Run by
// gpu_test_harness.hpp like the other programs here.
//
// 1. Against the float64 reference and the CPU engine (f32 bank 1e-4, bf16 bank 3e-2, every
//    gradient): heavy slot reuse (write and read groups of many entries) at hd of 1, 2, 3 and 8
//    column steps, hd not a multiple of 256 (a partial last step), odd hd and hd % 8 != 0 (the
//    element path), G = W, both G-row dtypes (grad_bank_fp32), snapshot modes; a write group of
//    C*W entries (one slot named by every lane of every token, validate = false) and a read group
//    of C*R entries (every read lane reads the slot every token writes), both at hd > 256.
// 2. Bitwise: every gradient and the restored bank bitwise equal whether the per-position kernel
//    lets at most 1, 2, 3 or any number of warps share a group (sdm::cuda::set_slot_split_warps)
//    or the staged walk (slots_staged.cu, token rows in shared memory; set_slot_walk; it takes hd
//    a multiple of 256 only, so every kind of case has such an hd) runs, whatever number of CTAs
//    share a chunk's positions (set_walk_shares 1, 3, 7: what another SM count does) and wherever
//    they cut them (set_walk_cut: equal work or equal counts), in every snapshot mode and
//    for both bank dtypes; two runs equal. Where hd % 8 == 0, the same
//    call with the bank off its 16-byte alignment (the element path; dc from the slot kernels,
//    not GWR) gives the same forward and backward bits.
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "cuda/backward/slot_split.hpp"
#include "device_tensor.hpp"
#include "engine_run.hpp"
#include "gpu_test_harness.hpp"
#include "host_tensor.hpp"
#include "problem.hpp"
#include "sdm/ops.hpp"

namespace {

using namespace sdm;
using namespace sdm::testing;

double tolerance(DType bank) { return bank == DType::bf16 ? 3e-2 : 1e-4; }

void poison(const DeviceTensor& t) { cuda_ok(cudaMemset(t.data(), 0xff, t.bytes()), "cudaMemset"); }

std::string describe(const ProblemSpec& s, std::int64_t C, SnapshotQuant mode) {
  char buf[256];
  std::snprintf(buf, sizeof buf, "P%lld T%lld W%lld R%lld hd%lld sps%lld C%lld G%lld %s snapshot %s",
                static_cast<long long>(s.P), static_cast<long long>(s.T), static_cast<long long>(s.W),
                static_cast<long long>(s.R), static_cast<long long>(s.hd), static_cast<long long>(s.slots_per_stream),
                static_cast<long long>(C), static_cast<long long>(s.G), dtype_name(s.bank), snapshot_quant_name(mode));
  return buf;
}

struct GradView {
  const char* name;
  const HostTensor& tensor;
};
std::vector<GradView> views(const GradRun& r) {
  return {{"memory", r.memory}, {"k_val", r.k_val}, {"v", r.v}, {"beta", r.beta}, {"g", r.g}, {"q_val", r.q_val}};
}

// A problem after the CUDA saving forward; backward(cap) runs the backward with at most `cap`
// warps a group (0: no cap) from the final bank, every gradient requested (poisoned first).
// shifted_bank: the bank lives one element past a 16-byte boundary, so every kernel takes its
// element path (and the slot kernels, not GWR, take dc: backward.hpp dc_in_gwr).
struct SplitRun {
  const Problem& pb;
  WriteReadOptions opt;
  DeviceProblem dp;
  DeviceTensor readings, saved, dy, d_final, shifted;
  TensorRef bank;  // the bank the calls use: dp.memory, or its copy in `shifted`
  HostTensor final_bank;

  SplitRun(const Problem& problem, const WriteReadOptions& options, const HostTensor& dy_host,
           const HostTensor& d_final_host, bool shifted_bank = false)
      : pb(problem), opt(options), dp(problem), readings(problem.spec.bank, {problem.spec.P, problem.spec.T, problem.spec.hd}),
        dy(dy_host), d_final(d_final_host) {
    bank = dp.memory.ref();
    if (shifted_bank) {
      shifted = DeviceTensor(problem.spec.bank, {problem.memory.numel() + 8});
      bank.data = static_cast<unsigned char*>(shifted.data()) + dtype_size(problem.spec.bank);
      bank_from_host(problem.memory);
    }
    saved = DeviceTensor(DType::u8, {static_cast<std::int64_t>(write_read_saved_bytes(args(), opt))});
    poison(saved);
    write_read_forward_saving(args(), readings.ref(), saved.ref(), opt);
    sync();
    final_bank = bank_to_host();
  }

  WriteReadArgs args() const {
    WriteReadArgs a = dp.args();
    a.memory = bank;
    return a;
  }
  std::size_t bank_bytes() const { return static_cast<std::size_t>(pb.memory.numel()) * dtype_size(pb.spec.bank); }
  HostTensor bank_to_host() const {
    HostTensor host(pb.spec.bank, pb.memory.sizes());
    cuda_ok(cudaMemcpy(host.ref().data, bank.data, bank_bytes(), cudaMemcpyDeviceToHost), "cudaMemcpy D2H");
    return host;
  }
  void bank_from_host(const HostTensor& host) {
    cuda_ok(cudaMemcpy(bank.data, host.ref().data, bank_bytes(), cudaMemcpyHostToDevice), "cudaMemcpy H2D");
  }

  GradRun backward(int cap, DType grad_memory, cuda::SlotWalk walk = cuda::SlotWalk::automatic,
                   std::int64_t shares = 0, cuda::WalkCut cut = cuda::WalkCut::balanced) {
    bank_from_host(final_bank);
    DeviceTensor memory(grad_memory, pb.memory.sizes()), k_val(DType::f32, pb.k_val.sizes()),
        v(DType::f32, pb.v.sizes()), beta(DType::f32, pb.beta.sizes()), g(DType::f32, pb.g.sizes()),
        q_val(DType::f32, pb.q_val.sizes());
    for (const DeviceTensor* t : {&memory, &k_val, &v, &beta, &g, &q_val}) poison(*t);
    WriteReadGrads grads;
    grads.memory = memory.ref(), grads.k_val = k_val.ref(), grads.v = v.ref();
    grads.beta = beta.ref(), grads.g = g.ref(), grads.q_val = q_val.ref();
    cuda::set_slot_split_warps(cap);
    cuda::set_slot_walk(walk);
    cuda::set_walk_shares(shares);
    cuda::set_walk_cut(cut);
    write_read_backward(args(), saved.ref(), dy.ref(), d_final.ref(), grads, opt);
    sync();
    cuda::set_slot_split_warps(0);
    cuda::set_slot_walk(cuda::SlotWalk::automatic);
    cuda::set_walk_shares(0);
    cuda::set_walk_cut(cuda::WalkCut::balanced);
    GradRun out;
    out.memory = memory.to_host(), out.k_val = k_val.to_host(), out.v = v.to_host();
    out.beta = beta.to_host(), out.g = g.to_host(), out.q_val = q_val.to_host();
    out.bank_after = bank_to_host();
    return out;
  }
};

struct Case {
  ProblemSpec spec;
  std::int64_t C;
  SnapshotQuant mode = SnapshotQuant::none;
  bool validate = true;
  bool grad_bank_fp32 = false;
};

WriteReadOptions options_of(const Case& c) {
  WriteReadOptions o;
  o.slots_per_stream = c.spec.slots_per_stream;
  o.chunk_size = c.C;
  o.snapshot_quant = c.mode;
  o.validate = c.validate;
  o.grad_bank_fp32 = c.grad_bank_fp32;
  return o;
}

// Every gradient and the restored bank of `got` bitwise equal to `want`'s.
void expect_bitwise_equal(const GradRun& got, const GradRun& want, const std::string& what) {
  bool equal = got.bank_after.bitwise_equal(want.bank_after);
  std::string differing;
  const auto a = views(got), b = views(want);
  for (std::size_t k = 0; k < a.size(); ++k) {
    if (!a[k].tensor.bitwise_equal(b[k].tensor)) equal = false, differing += std::string(" ") + a[k].name;
  }
  expect(equal, what + (differing.empty() ? "" : " (differ:" + differing + ")"));
}

// Both walks (the per-position kernel at caps 1, 2, 3 and none, the staged walk where it fits, with
// dU and dy on chip where both fit and with dU alone, with its positions cut into 1, 3 and 7 shares a
// (stream, column step) instead of the automatic count, as another SM count would cut them, and
// cut at equal position counts instead of equal work) against the automatic choice: bitwise the
// same gradients and restored bank.
void expect_walk_invariant(SplitRun& run, const GradRun& free_run, DType grad_memory) {
  struct Variant {
    cuda::SlotWalk walk;
    int cap;
    std::string name;
    std::int64_t shares = 0;
    cuda::WalkCut cut = cuda::WalkCut::balanced;
  };
  const Variant variants[] = {{cuda::SlotWalk::per_position, 1, "per-position walk, at most 1 warp a group"},
                              {cuda::SlotWalk::per_position, 2, "per-position walk, at most 2 warps a group"},
                              {cuda::SlotWalk::per_position, 3, "per-position walk, at most 3 warps a group"},
                              {cuda::SlotWalk::per_position, 0, "per-position walk, any number of warps a group"},
                              {cuda::SlotWalk::staged, 0, "staged walk"},
                              {cuda::SlotWalk::staged_du_only, 0, "staged walk, dU alone on chip"},
                              {cuda::SlotWalk::staged, 0, "staged walk, 1 share", 1},
                              {cuda::SlotWalk::staged, 0, "staged walk, 3 shares", 3},
                              {cuda::SlotWalk::staged_du_only, 0, "staged walk, dU alone on chip, 7 shares", 7},
                              {cuda::SlotWalk::staged, 0, "staged walk cut at equal position counts", 0,
                               cuda::WalkCut::positions},
                              {cuda::SlotWalk::staged, 0, "staged walk cut at equal position counts, 5 shares", 5,
                               cuda::WalkCut::positions}};
  for (const Variant& v : variants) {
    expect_bitwise_equal(run.backward(v.cap, grad_memory, v.walk, v.shares, v.cut), free_run,
                         v.name + ": gradients and restored bank bitwise equal to the automatic walk's");
  }
}

// The vector-path run (hd % 8 == 0, aligned rows) once more with the bank off its 16-byte
// alignment: the element path everywhere, dc from the slot kernels instead of GWR. The saving
// forward's final bank and saved buffer, every gradient and the restored bank bitwise equal.
void expect_path_invariant(const Problem& pb, const WriteReadOptions& opt, const HostTensor& dy,
                           const HostTensor& d_final, SplitRun& vector_run, const GradRun& vector_grads,
                           DType grad_memory) {
  SplitRun element(pb, opt, dy, d_final, /*shifted_bank=*/true);
  expect(element.final_bank.bitwise_equal(vector_run.final_bank) &&
             element.saved.to_host().bitwise_equal(vector_run.saved.to_host()),
         "element path: the saving forward's final bank and saved buffer bitwise equal to the vector path's");
  expect_bitwise_equal(element.backward(0, grad_memory), vector_grads,
                       "element path: gradients and restored bank bitwise equal to the vector path's");
}

// The case against the reference and the CPU engine (snapshot "none"; lossy modes against the
// CPU engine alone, within the snapshot test's tolerances), then the cap invariance.
void split_case(const Problem& pb, const Case& c) {
  std::printf("  %s%s%s\n", describe(c.spec, c.C, c.mode).c_str(), c.validate ? "" : " validate=False",
              c.grad_bank_fp32 ? " grad_bank_fp32" : "");
  const WriteReadOptions opt = options_of(c);
  const HostTensor dy = random_tensor({c.spec.P, c.spec.T, c.spec.hd}, 1.0, c.spec.seed + 100);
  const HostTensor d_final = random_tensor({pb.bank_rows(), c.spec.hd}, 0.5, c.spec.seed + 200);
  const DType grad_memory = DType::f32;
  SplitRun run(pb, opt, dy, d_final);
  const GradRun got = run.backward(0, grad_memory);
  const GradRun cpu = engine_backward(pb, engine_forward_saving(pb, opt), dy, d_final, opt, grad_memory);
  const auto g = views(got), e = views(cpu);
  if (c.mode == SnapshotQuant::none) {
    const GradRun ref = reference_backward(pb, dy, d_final, opt);
    const auto r = views(ref);
    for (std::size_t k = 0; k < g.size(); ++k) {
      expect_error_at_most(rel_error(g[k].tensor, r[k].tensor), tolerance(c.spec.bank),
                           std::string("grad ") + g[k].name + " vs float64 reference");
    }
    expect(got.bank_after.bitwise_equal(pb.memory), "working bank restored to the initial bank bitwise");
  }
  const double cpu_tol = c.mode == SnapshotQuant::none ? tolerance(c.spec.bank)
                         : c.mode == SnapshotQuant::bf16 ? 1e-2
                         : c.mode == SnapshotQuant::fp8  ? 8e-2
                                                         : 2e-1;
  for (std::size_t k = 0; k < g.size(); ++k) {
    expect_error_at_most(rel_error(g[k].tensor, e[k].tensor), cpu_tol, std::string("grad ") + g[k].name + " vs CPU engine");
  }
  expect_walk_invariant(run, got, grad_memory);
  if (c.spec.hd % 8 == 0) expect_path_invariant(pb, opt, dy, d_final, run, got, grad_memory);
}

// Token n's write lane 0 takes `slot`; a lane of the token already holding it takes lane 0's
// former slot, so the lanes stay distinct.
void force_write_slot(HostTensor& idx, std::int64_t width, std::int64_t n, std::int64_t slot) {
  const double former = idx.get(n * width);
  for (std::int64_t w = 1; w < width; ++w) {
    if (idx.get(n * width + w) == static_cast<double>(slot)) idx.set(n * width + w, former);
  }
  idx.set(n * width, static_cast<double>(slot));
}

// ---- 1 + 2 on random heavy-reuse problems ---------------------------------------------------

void test_heavy_reuse() {
  const DType f32 = DType::f32, bf16 = DType::bf16;
  for (const DType bank : {f32, bf16}) {
    // sps 8 - 24 against W, R 4 - 16: write and read groups of 2 - 100+ entries.
    split_case(make_problem(spec_of(2, 96, 8, 8, 512, 16, 1, bank, 71)), {spec_of(2, 96, 8, 8, 512, 16, 1, bank, 71), 32});
    split_case(make_problem(spec_of(1, 128, 8, 6, 768, 12, 8, bank, 72)), {spec_of(1, 128, 8, 6, 768, 12, 8, bank, 72), 64});
    split_case(make_problem(spec_of(2, 64, 4, 8, 520, 8, 1, bank, 73)), {spec_of(2, 64, 4, 8, 520, 8, 1, bank, 73), 64});
    split_case(make_problem(spec_of(1, 70, 6, 5, 1031, 10, 1, bank, 74)), {spec_of(1, 70, 6, 5, 1031, 10, 1, bank, 74), 16});
    split_case(make_problem(spec_of(1, 64, 8, 8, 2048, 24, 1, bank, 75)), {spec_of(1, 64, 8, 8, 2048, 24, 1, bank, 75), 64});
    split_case(make_problem(spec_of(2, 50, 5, 3, 300, 6, 5, bank, 76)), {spec_of(2, 50, 5, 3, 300, 6, 5, bank, 76), 8});
    // One column step (hd <= 256): the split cannot happen; the cap changes nothing either.
    split_case(make_problem(spec_of(2, 80, 8, 8, 200, 8, 1, bank, 77)), {spec_of(2, 80, 8, 8, 200, 8, 1, bank, 77), 32});
  }
  // Both G-row dtypes of a bf16 bank: f32 rows (grad_bank_fp32).
  Case fp32_rows{spec_of(2, 64, 8, 8, 768, 12, 1, bf16, 78), 64};
  fp32_rows.grad_bank_fp32 = true;
  split_case(make_problem(fp32_rows.spec), fp32_rows);
  // C = 128 at whole column steps: the staged walk stages dU alone (both rows do not fit).
  split_case(make_problem(spec_of(2, 300, 8, 6, 512, 40, 1, bf16, 90)), {spec_of(2, 300, 8, 6, 512, 40, 1, bf16, 90), 128});
  split_case(make_problem(spec_of(1, 256, 6, 8, 768, 30, 1, f32, 91)), {spec_of(1, 256, 6, 8, 768, 30, 1, f32, 91), 128});
  // C = 256: groups of ~200 entries, longer than a warp's 32 held entries.
  split_case(make_problem(spec_of(1, 512, 4, 4, 640, 8, 1, f32, 79)), {spec_of(1, 512, 4, 4, 640, 8, 1, f32, 79), 256});
}

void test_snapshot_modes() {
  for (const DType bank : {DType::f32, DType::bf16}) {
    for (const SnapshotQuant mode : {SnapshotQuant::bf16, SnapshotQuant::fp8, SnapshotQuant::int4}) {
      if (mode == SnapshotQuant::bf16 && bank == DType::bf16) continue;  // "bf16" is "none" on a bf16 bank
      Case c{spec_of(2, 64, 8, 8, 776, 12, 1, bank, 81), 32, mode};  // partial last step: per-position only
      split_case(make_problem(c.spec), c);
      Case whole{spec_of(2, 64, 8, 8, 768, 12, 1, bank, 87), 32, mode};  // whole steps: the staged walk too
      split_case(make_problem(whole.spec), whole);
      // 64 writes a chunk over 200 slots, 128 reads: read-only groups, their M0 from a later
      // chunk's snapshot row (decoded with that row's scale) or from the final bank row.
      Case sparse{spec_of(2, 96, 4, 8, 768, 200, 1, bank, 88), 16, mode};
      split_case(make_problem(sparse.spec), sparse);
      Case odd{spec_of(1, 48, 4, 4, 517, 6, 1, bank, 82), 16, mode};  // element path, partial last step
      split_case(make_problem(odd.spec), odd);
    }
  }
}

// ---- the largest groups ------------------------------------------------------------------------

// Every lane of every token names one slot (validate = false: the token's first lane writes, the
// others are masked): a sorted run of C*W entries of one slot in each chunk, C of them real.
void test_one_slot_everywhere() {
  for (const DType bank : {DType::f32, DType::bf16}) {
    for (const std::int64_t hd : {std::int64_t{600}, std::int64_t{1024}}) {
      Case c{spec_of(2, 128, 16, 8, hd, 300, 1, bank, 83), 64};
      c.spec.beta_max = 0.05;
      c.validate = false;
      Problem pb = make_problem(c.spec);
      for (std::int64_t n = 0; n < c.spec.P * c.spec.T; ++n) {
        const double slot = static_cast<double>((n / c.spec.T) * c.spec.slots_per_stream + 3);
        for (std::int64_t w = 0; w < c.spec.W; ++w) pb.k_idx.set(n * c.spec.W + w, slot);
      }
      split_case(pb, c);
    }
  }
}

// Every token writes slot 3 and reads it in every read lane: a read group of C*R entries.
void test_read_group_of_every_read() {
  for (const DType bank : {DType::f32, DType::bf16}) {
    const std::int64_t hd = bank == DType::f32 ? 520 : 512;  // 512: whole column steps (the staged walk)
    Case c{spec_of(1, 128, 4, 64, hd, 300, 1, bank, 84), 64};
    c.spec.beta_max = 0.05;
    Problem pb = make_problem(c.spec);
    for (std::int64_t n = 0; n < c.spec.T; ++n) {
      force_write_slot(pb.k_idx, c.spec.W, n, 3);
      for (std::int64_t r = 0; r < c.spec.R; ++r) pb.q_idx.set(n * c.spec.R + r, 3.0);
    }
    split_case(pb, c);
  }
  // Read-only slots read by every other read lane (no token writes slot 7): the read-only split, at
  // whole column steps (the staged walk too).
  Case c{spec_of(1, 64, 4, 32, 1024, 300, 1, DType::f32, 85), 64};
  Problem pb = make_problem(c.spec);
  for (std::int64_t n = 0; n < c.spec.T; ++n) {
    for (std::int64_t w = 0; w < c.spec.W; ++w) {
      if (pb.k_idx.get(n * c.spec.W + w) != 7.0) continue;
      double slot = 299.0;  // the highest slot no lane of the token holds
      for (bool taken = true; taken; slot -= 1.0) {
        taken = false;
        for (std::int64_t v = 0; v < c.spec.W; ++v) taken = taken || pb.k_idx.get(n * c.spec.W + v) == slot;
        if (!taken) break;
      }
      pb.k_idx.set(n * c.spec.W + w, slot);
    }
    for (std::int64_t r = 0; r < c.spec.R; r += 2) {
      // Read lanes stay as drawn but for the even ones, which read slot 7 (a read lane may repeat).
      pb.q_idx.set(n * c.spec.R + r, 7.0);
    }
  }
  split_case(pb, c);
}

// Small cases for compute-sanitizer: both walks (the staged walk takes whole column steps only, hd
// 512), a partial step (hd 520, the per-position kernel), caps included.
void test_small() {
  expect(cuda::staged_slot_walk_fits(16), "the staged walk fits chunk size 16 (so these tests run it)");
  for (const std::int64_t hd : {std::int64_t{512}, std::int64_t{520}}) {
    Case c{spec_of(1, 32, 4, 4, hd, 6, 1, DType::bf16, 86), 16};
    split_case(make_problem(c.spec), c);
  }
}

}  // namespace

// Arguments: substrings of test names to run (all tests without any), --verbose (gpu_test_harness.hpp).
int main(int argc, char** argv) {
  const GpuTest tests[] = {
      {"slot split: heavy reuse vs reference, bitwise across warps a group", test_heavy_reuse},
      {"slot split: snapshot modes", test_snapshot_modes},
      {"slot split: one slot everywhere (C*W entries), validate=False", test_one_slot_everywhere},
      {"slot split: read groups of C*R entries and read-only groups", test_read_group_of_every_read},
      {"slot split small", test_small},
  };
  return run_gpu_tests("sdm_gpu_slot_split_tests", tests, argc, argv);
}

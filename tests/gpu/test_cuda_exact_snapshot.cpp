// test_cuda_exact_snapshot.cpp - GPU tests of the CUDA exact snapshot (docs/spec.md §4): `saved`
// sized for the call's write groups (options.snapshot_rows = write_groups_count) instead of one row
// per write entry. Run by gpu_test_harness.hpp like the other programs here.
//
// 1. Count: the device count (src/cuda/forward/write_groups_count.cu) equals the host brute force
//    (distinct in-range write rows of each chunk) and the CPU engine's count (one numbering rule,
//    core/snapshot_row_rule.hpp), below the worst case.
// 2. Bits: the worst-case and the exact buffer give bitwise equal readings and final bank, and
//    every slot walk of the exact buffer (automatic, per-position, staged and staged with dU alone
//    where hd is a multiple of 256) the gradients and restored bank of the worst-case buffer's
//    per-position walk bitwise, which is within tolerance of the CPU engine's; over T % C != 0, odd hd, W != R,
//    long slot groups, masked entries (validate=false), bf16 / f32 banks, none / fp8 / int4 and
//    grad_bank_fp32. Known answers besides the worst case (numbered by the same code): the readings
//    and final bank equal the no-grad forward's, and in mode none every walk's restored bank is
//    the initial bank, bitwise.
// 3. Refusal: with validate, a buffer planned for fewer rows than the call's groups is refused by a
//    ValueError naming `saved`, and `saved`, the bank and the readings keep every byte.
// 4. Guard: without validate the same buffer is not refused; the saving forward and the backward
//    run and write nothing past it (the bytes after it in a larger allocation keep theirs;
//    compute-sanitizer's memcheck sees every access); also hd 256 int4 on the staged walk.
// 5. Backward refusal: a validated backward of such an unvalidated forward is refused by a
//    ValueError naming `saved` (the forward's write groups against the buffer's rows) and writes
//    nothing.
#include <cuda_runtime.h>

#include <cstdio>
#include <string>
#include <vector>

#include "cuda/backward/slot_split.hpp"
#include "device_tensor.hpp"
#include "engine_run.hpp"
#include "gpu_test_harness.hpp"
#include "host_tensor.hpp"
#include "problem.hpp"
#include "sdm/error.hpp"
#include "sdm/ops.hpp"
#include "write_groups.hpp"

namespace {

using namespace sdm;
using namespace sdm::testing;

struct Case {
  const char* name;
  ProblemSpec spec;
  std::int64_t chunk;
  SnapshotQuant mode = SnapshotQuant::none;
  bool grad_bank_fp32 = false;
  bool masked = false;  // mask_some_writes, validate off
};

ProblemSpec shape(std::int64_t P, std::int64_t T, std::int64_t W, std::int64_t R, std::int64_t hd, std::int64_t sps,
                  DType bank, std::int64_t extra_rows = 0) {
  ProblemSpec s = spec_of(P, T, W, R, hd, sps, 1, bank, static_cast<std::uint64_t>(T * 131 + hd));
  s.extra_rows = extra_rows;
  return s;
}

std::vector<Case> cases() {
  using Q = SnapshotQuant;
  return {
      {"f32, T % C != 0", shape(2, 11, 3, 2, 6, 16, DType::f32), 4},
      {"bf16, odd hd, W != R", shape(2, 9, 2, 5, 7, 24, DType::bf16), 3},
      {"f32, long slot groups", shape(3, 17, 4, 3, 5, 6, DType::f32), 8},
      {"bf16, fp8", shape(2, 13, 3, 2, 9, 10, DType::bf16), 4, Q::fp8},
      {"f32, int4, odd hd", shape(2, 10, 2, 3, 7, 9, DType::f32), 4, Q::int4},
      {"bf16, int4, grad_bank_fp32", shape(2, 14, 3, 2, 6, 8, DType::bf16), 4, Q::int4, true},
      {"bf16, grad_bank_fp32", shape(2, 7, 2, 2, 5, 12, DType::bf16), 3, Q::none, true},
      {"f32, masked entries", shape(2, 11, 3, 2, 6, 8, DType::f32, 3), 4, Q::none, false, true},
      {"bf16, int4, masked entries", shape(2, 10, 4, 2, 5, 6, DType::bf16, 2), 4, Q::int4, false, true},
      {"f32, hd 256, long slot groups (staged walk)", shape(2, 19, 4, 3, 256, 6, DType::f32), 8},
      {"bf16, hd 512, fp8 (staged walk)", shape(2, 13, 3, 2, 512, 10, DType::bf16), 4, Q::fp8},
      {"bf16, hd 256, int4, grad_bank_fp32, masked (staged walk)", shape(2, 12, 3, 4, 256, 7, DType::bf16, 2), 5,
       Q::int4, true, true},
      {"f32, hd 256, bf16 snapshot (staged walk)", shape(1, 21, 2, 2, 256, 5, DType::f32), 8, Q::bf16},
  };
}

Problem problem_of(const Case& c) {
  Problem pb = make_problem(c.spec);
  if (c.masked) mask_some_writes(pb);
  return pb;
}

WriteReadOptions options_of(const Case& c) {
  WriteReadOptions o;
  o.slots_per_stream = c.spec.slots_per_stream;
  o.chunk_size = c.chunk;
  o.snapshot_quant = c.mode;
  o.grad_bank_fp32 = c.grad_bank_fp32;
  o.validate = !c.masked;
  return o;
}

void fill(const DeviceTensor& t, int byte) { cuda_ok(cudaMemset(t.data(), byte, t.bytes()), "cudaMemset"); }

std::int64_t device_count(const DeviceProblem& dp, const WriteReadOptions& options) {
  DeviceTensor count(DType::i64, {1});
  fill(count, 0xff);
  write_groups_count(dp.args(), count.ref(), options);
  sync();
  return static_cast<std::int64_t>(count.to_host().get(0));
}

std::int64_t host_count(const Problem& pb, const WriteReadOptions& options) {
  HostTensor count(DType::i64, {1});
  write_groups_count(pb.args(), count.ref(), options);
  return static_cast<std::int64_t>(count.get(0));
}

// One CUDA training step of `pb` with `options`: the saving forward at construction (into a
// poisoned `saved`), then backward(walk) from its final bank, every gradient requested.
struct DeviceStep {
  const Problem& pb;
  WriteReadOptions options;
  DeviceProblem dp;
  DeviceTensor readings, saved;
  HostTensor final_bank;

  DeviceStep(const Problem& problem, const WriteReadOptions& o)
      : pb(problem), options(o), dp(problem), readings(problem.spec.bank, {problem.spec.P, problem.spec.T, problem.spec.hd}) {
    saved = DeviceTensor(DType::u8, {static_cast<std::int64_t>(write_read_saved_bytes(dp.args(), options))});
    fill(saved, 0xff);
    write_read_forward_saving(dp.args(), readings.ref(), saved.ref(), options);
    sync();
    final_bank = dp.memory.to_host();
  }

  GradRun backward(const HostTensor& dy_host, const HostTensor& d_final_host, cuda::SlotWalk walk) {
    dp.memory.copy_from(final_bank);
    const DType grad_memory = pb.spec.bank == DType::bf16 && !options.grad_bank_fp32 ? DType::bf16 : DType::f32;
    const DeviceTensor dy(dy_host), d_final(d_final_host);
    DeviceTensor memory(grad_memory, pb.memory.sizes()), k_val(DType::f32, pb.k_val.sizes()),
        v(DType::f32, pb.v.sizes()), beta(DType::f32, pb.beta.sizes()), g(DType::f32, pb.g.sizes()),
        q_val(DType::f32, pb.q_val.sizes());
    for (const DeviceTensor* t : {&memory, &k_val, &v, &beta, &g, &q_val}) fill(*t, 0xff);
    WriteReadGrads grads;
    grads.memory = memory.ref(), grads.k_val = k_val.ref(), grads.v = v.ref();
    grads.beta = beta.ref(), grads.g = g.ref(), grads.q_val = q_val.ref();
    cuda::set_slot_walk(walk);
    write_read_backward(dp.args(), saved.ref(), dy.ref(), d_final.ref(), grads, options);
    sync();
    cuda::set_slot_walk(cuda::SlotWalk::automatic);
    GradRun out;
    out.memory = memory.to_host(), out.k_val = k_val.to_host(), out.v = v.to_host();
    out.beta = beta.to_host(), out.g = g.to_host(), out.q_val = q_val.to_host();
    out.bank_after = dp.memory.to_host();
    return out;
  }
};

void expect_grads_bitwise(const GradRun& exact, const GradRun& worst, const std::string& walk) {
  const struct {
    const char* name;
    const HostTensor &a, &b;
  } pairs[] = {{"grad memory", exact.memory, worst.memory}, {"grad k_val", exact.k_val, worst.k_val},
               {"grad v", exact.v, worst.v},                {"grad beta", exact.beta, worst.beta},
               {"grad g", exact.g, worst.g},                {"grad q_val", exact.q_val, worst.q_val},
               {"restored bank", exact.bank_after, worst.bank_after}};
  for (const auto& p : pairs) expect(p.a.bitwise_equal(p.b), walk + ": " + p.name + " bitwise the worst case's");
}

DType grad_memory_of(const Case& c) {
  return c.spec.bank == DType::bf16 && !c.grad_bank_fp32 ? DType::bf16 : DType::f32;
}

// Every gradient within the CPU engine's (the slot-split test's tolerances: the lossy snapshot
// modes round the same rows on both engines, the sums run in other orders).
void expect_close_to_cpu(const GradRun& got, const GradRun& cpu, const Case& c) {
  const double tol = c.mode == SnapshotQuant::none   ? (c.spec.bank == DType::bf16 ? 3e-2 : 1e-4)
                     : c.mode == SnapshotQuant::bf16 ? 1e-2
                     : c.mode == SnapshotQuant::fp8  ? 8e-2
                                                     : 2e-1;
  const struct {
    const char* name;
    const HostTensor &a, &b;
  } pairs[] = {{"memory", got.memory, cpu.memory}, {"k_val", got.k_val, cpu.k_val}, {"v", got.v, cpu.v},
               {"beta", got.beta, cpu.beta},       {"g", got.g, cpu.g},             {"q_val", got.q_val, cpu.q_val}};
  for (const auto& p : pairs) expect_error_at_most(rel_error(p.a, p.b), tol, std::string("grad ") + p.name + " vs CPU engine");
}

void test_count_equals_the_host_and_cpu_counts() {
  for (const Case& c : cases()) {
    std::printf("  %s\n", c.name);
    const Problem pb = problem_of(c);
    const WriteReadOptions options = options_of(c);
    const std::int64_t got = device_count(DeviceProblem(pb), options);
    std::printf("    count %lld of %lld worst-case rows\n", static_cast<long long>(got),
                static_cast<long long>(worst_rows(pb, c.chunk)));
    expect(got == distinct_rows_per_chunk(pb, c.chunk), "device count = distinct in-range write rows per chunk");
    expect(got == host_count(pb, options), "device count = the CPU engine's count");
    expect(got < worst_rows(pb, c.chunk), "fewer rows than the worst case");
  }
}

void test_exact_buffer_gives_the_worst_case_bits() {
  for (const Case& c : cases()) {
    std::printf("  %s\n", c.name);
    const Problem pb = problem_of(c);
    const WriteReadOptions worst_options = options_of(c);
    WriteReadOptions exact_options = worst_options;
    exact_options.snapshot_rows = host_count(pb, worst_options);
    DeviceStep worst(pb, worst_options), exact(pb, exact_options);
    expect(exact.saved.bytes() < worst.saved.bytes(), "the exact buffer is smaller");
    expect(exact.readings.to_host().bitwise_equal(worst.readings.to_host()), "readings bitwise the worst case's");
    expect(exact.final_bank.bitwise_equal(worst.final_bank), "final bank bitwise the worst case's");
    // A known answer besides the worst case (which numbers its rows by the same code): the no-grad
    // forward of the same inputs.
    {
      DeviceProblem plain(pb);
      DeviceTensor readings(pb.spec.bank, {c.spec.P, c.spec.T, c.spec.hd});
      write_read_forward(plain.args(), readings.ref(), exact_options);
      sync();
      expect(exact.readings.to_host().bitwise_equal(readings.to_host()), "readings bitwise the no-grad forward's");
      expect(exact.final_bank.bitwise_equal(plain.memory.to_host()), "final bank bitwise the no-grad forward's");
    }
    const HostTensor dy = random_tensor({c.spec.P, c.spec.T, c.spec.hd}, 1.0, c.spec.seed + 7);
    const HostTensor d_final = random_tensor({pb.bank_rows(), c.spec.hd}, 0.5, c.spec.seed + 8);
    std::vector<std::pair<cuda::SlotWalk, std::string>> walks = {{cuda::SlotWalk::automatic, "automatic walk"},
                                                                 {cuda::SlotWalk::per_position, "per-position walk"}};
    if (c.spec.hd % 256 == 0) {
      walks.emplace_back(cuda::SlotWalk::staged, "staged walk");
      walks.emplace_back(cuda::SlotWalk::staged_du_only, "staged walk, dU alone on chip");
    }
    // One reference for every walk: the worst-case buffer's per-position walk, itself close to the
    // CPU engine's gradients of the same exact call (so a fault both buffers share shows too).
    const GradRun reference = worst.backward(dy, d_final, cuda::SlotWalk::per_position);
    const GradRun cpu = engine_backward(pb, engine_forward_saving(pb, exact_options), dy, d_final, exact_options,
                                       grad_memory_of(c));
    expect_close_to_cpu(reference, cpu, c);
    for (const auto& [walk, name] : walks) {
      const GradRun run = exact.backward(dy, d_final, walk);
      expect_grads_bitwise(run, reference, name);
      // Mode none stores rows bit for bit: the restore (it reads every written slot's row source)
      // gives back the initial bank, which checks the whole row numbering against a known answer.
      if (c.mode == SnapshotQuant::none) {
        expect(run.bank_after.bitwise_equal(pb.memory), name + ": restored bank bitwise the initial bank");
      }
    }
  }
}

// A problem and its count, for buffers planned for fewer rows than its write groups.
struct CutProblem {
  Problem pb;
  WriteReadOptions options;
  std::int64_t count = 0;
  explicit CutProblem(const ProblemSpec& spec = shape(2, 19, 4, 2, 6, 6, DType::f32),
                      SnapshotQuant mode = SnapshotQuant::none)
      : pb(make_problem(spec)) {
    options.slots_per_stream = pb.spec.slots_per_stream;
    options.chunk_size = 8;
    options.snapshot_quant = mode;
    count = host_count(pb, options);
  }
};

// `call` throws a ValueError naming `saved` whose message gives the call's `count` write groups.
template <typename Call>
void expect_refused_naming_saved(Call&& call, std::int64_t count) {
  std::string argument = "(no error)", message;
  try {
    call();
  } catch (const ValueError& e) {
    argument = e.argument(), message = e.what();
  }
  sync();
  std::printf("    error: %s\n", message.c_str());
  expect(argument == "saved", "refused by a ValueError naming saved");
  expect(message.find(std::to_string(count) + " write groups") != std::string::npos, "message gives the count");
}

void test_validated_forward_refuses_too_few_rows_and_writes_nothing() {
  CutProblem cut;
  WriteReadOptions options = cut.options;
  options.snapshot_rows = cut.count - 1;
  DeviceProblem dp(cut.pb);
  DeviceTensor readings(cut.pb.spec.bank, {cut.pb.spec.P, cut.pb.spec.T, cut.pb.spec.hd});
  DeviceTensor saved(DType::u8, {static_cast<std::int64_t>(write_read_saved_bytes(dp.args(), options))});
  fill(saved, 0x5a);
  fill(readings, 0x3c);
  const HostTensor saved_before = saved.to_host(), readings_before = readings.to_host();
  expect_refused_naming_saved([&] { write_read_forward_saving(dp.args(), readings.ref(), saved.ref(), options); },
                              cut.count);
  expect(saved.to_host().bitwise_equal(saved_before), "saved keeps every byte");
  expect(readings.to_host().bitwise_equal(readings_before), "readings keep every byte");
  expect(dp.memory.to_host().bitwise_equal(cut.pb.memory), "the bank keeps every byte");
}

// One unvalidated call of `cut` into a buffer of half its rows, the backward in `walk`.
void expect_unvalidated_cut_stays_inside(const CutProblem& cut, cuda::SlotWalk walk) {
  WriteReadOptions options = cut.options;
  options.validate = false;
  options.snapshot_rows = cut.count / 2;
  DeviceProblem dp(cut.pb);
  const auto bytes = static_cast<std::int64_t>(write_read_saved_bytes(dp.args(), options));
  constexpr std::int64_t kTail = 4096;
  DeviceTensor block(DType::u8, {bytes + kTail});
  fill(block, 0xa5);
  TensorRef saved = block.ref();
  saved.sizes[0] = bytes;
  DeviceTensor readings(cut.pb.spec.bank, {cut.pb.spec.P, cut.pb.spec.T, cut.pb.spec.hd});
  write_read_forward_saving(dp.args(), readings.ref(), saved, options);
  sync();
  const DeviceTensor dy(random_tensor({cut.pb.spec.P, cut.pb.spec.T, cut.pb.spec.hd}, 1.0, 5));
  DeviceTensor grad_v(DType::f32, cut.pb.v.sizes());
  WriteReadGrads grads;
  grads.v = grad_v.ref();
  cuda::set_slot_walk(walk);
  write_read_backward(dp.args(), saved, dy.ref(), TensorRef{}, grads, options);
  sync();
  cuda::set_slot_walk(cuda::SlotWalk::automatic);
  const HostTensor after = block.to_host();
  bool tail_kept = true;
  for (std::int64_t i = bytes; i < bytes + kTail; ++i) tail_kept = tail_kept && after.get(i) == 0xa5;
  expect(tail_kept, "the bytes after saved keep theirs (forward and backward)");
}

// The small f32 problem (automatic walk), and hd 256 int4 on the staged walk: the staged walk's
// row guard (slots_staged.cu) and the group writer's scale guard (group_writer.cu) run too.
void test_unvalidated_too_few_rows_stay_inside_the_buffer() {
  std::printf("  f32, hd 6, none (automatic walk)\n");
  expect_unvalidated_cut_stays_inside(CutProblem(), cuda::SlotWalk::automatic);
  std::printf("  bf16, hd 256, int4 (staged walk)\n");
  expect_unvalidated_cut_stays_inside(CutProblem(shape(2, 19, 4, 2, 256, 6, DType::bf16), SnapshotQuant::int4),
                                      cuda::SlotWalk::staged);
}

// A forward run without validate into a too-small buffer, then a validated backward: refused by a
// ValueError naming `saved` (the write groups the forward numbered, group_first[N], against the
// buffer's rows; as the CPU backward), and no gradient byte written.
void test_validated_backward_refuses_an_unvalidated_forwards_too_few_rows() {
  CutProblem cut;
  WriteReadOptions options = cut.options;
  options.validate = false;
  options.snapshot_rows = cut.count - 1;
  DeviceProblem dp(cut.pb);
  DeviceTensor readings(cut.pb.spec.bank, {cut.pb.spec.P, cut.pb.spec.T, cut.pb.spec.hd});
  DeviceTensor saved(DType::u8, {static_cast<std::int64_t>(write_read_saved_bytes(dp.args(), options))});
  write_read_forward_saving(dp.args(), readings.ref(), saved.ref(), options);
  sync();
  const DeviceTensor dy(random_tensor({cut.pb.spec.P, cut.pb.spec.T, cut.pb.spec.hd}, 1.0, 5));
  DeviceTensor grad_v(DType::f32, cut.pb.v.sizes());
  fill(grad_v, 0x5a);
  const HostTensor grad_v_before = grad_v.to_host(), bank_before = dp.memory.to_host();
  WriteReadGrads grads;
  grads.v = grad_v.ref();
  options.validate = true;
  const auto backward = [&] { write_read_backward(dp.args(), saved.ref(), dy.ref(), TensorRef{}, grads, options); };
  expect_refused_naming_saved(backward, cut.count);
  expect(grad_v.to_host().bitwise_equal(grad_v_before), "grad v keeps every byte");
  expect(dp.memory.to_host().bitwise_equal(bank_before), "the bank keeps every byte");
}

}  // namespace

int main(int argc, char** argv) {
  const GpuTest tests[] = {
      {"exact snapshot: the device count", test_count_equals_the_host_and_cpu_counts},
      {"exact snapshot: worst-case bits in every walk", test_exact_buffer_gives_the_worst_case_bits},
      {"exact snapshot: validated refusal", test_validated_forward_refuses_too_few_rows_and_writes_nothing},
      {"exact snapshot: unvalidated guard", test_unvalidated_too_few_rows_stay_inside_the_buffer},
      {"exact snapshot: validated backward refusal",
       test_validated_backward_refuses_an_unvalidated_forwards_too_few_rows},
  };
  return run_gpu_tests("sdm_gpu_exact_snapshot_tests", tests, argc, argv);
}

// test_cuda_writer_split.cpp - GPU tests of the group writer's row split (src/cuda/forward/
// group_writer.cu): a write group's row shared by up to 32 of the group's warps, each owning every
// w-th piece of 32 * kVec columns. The split changes which warp computes an element, never how: the
// no-grad forward (readings, final bank) and the saving forward (readings, final bank, `saved`,
// filled with 0xa5 first: the bytes it does not write keep that) must be bitwise equal at every
// split limit (1 = the group's first warp alone, 2, 3, 5, 32), in every snapshot mode, for both
// banks and both column paths (kVec 8 and the exact per-column path of odd hd), on problems of long
// groups (few slots per stream: each slot is written by ~25 entries of a chunk) with T not a
// multiple of C; and agree with the float64 reference. Run by gpu_test_harness.hpp (exit status 1 if a check failed).
// The quantised modes (fp8, int4) split too: every warp of a group takes the row's scale from the
// gather's tile amaxes of the pre-write row. Their test runs the exact snapshot (snapshot_rows = the
// call's write groups, so every payload row is a group's) on long groups (heavy reuse: ~25 entries
// a group) at every split limit, for both banks, hd 768 and 2048 (3 and 8 pieces of 256
// columns, the kVec 8 path), 37 and 1037 (odd: the per-column path, 2 and 33 pieces of 32), and
// masked entries (validate=False): `saved` bitwise equal across the limits, the readings and the
// final bank bitwise equal to mode none's, and every snapshot row's payload and scale bitwise equal
// to core::quantize_row of the same row in mode none's snapshot (the pre-write row as it is; one
// quantiser: docs/spec.md §5); and two short problems of it for compute-sanitizer ("small quantised").
// The split tests force the per-position writer (GroupWriter::per_position); the walk of
// write_walk.cu (which runs at hd % 256 == 0 on the vector path) is forced (GroupWriter::walk, so
// whatever the automatic rule says) and checked bitwise against it ("write walk": every snapshot
// mode, long and one-entry groups, masked entries); "write walk: the automatic choice" checks the
// measured rule (write_walk_pays: at least two batches a warp) on the benchmark shapes and that the
// engine follows it.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "core/saved_header.hpp"
#include "core/snapshot_quant.hpp"
#include "cuda/common/device_limits.hpp"
#include "cuda/common/step_kernels.hpp"
#include "cuda/forward/write_walk.hpp"
#include "cuda/saved/layout.hpp"
#include "device_tensor.hpp"
#include "engine_run.hpp"
#include "gpu_test_harness.hpp"
#include "host_tensor.hpp"
#include "problem.hpp"
#include "sdm/ops.hpp"
#include "write_groups.hpp"

namespace {

using namespace sdm;
using namespace sdm::testing;
using sdm::cuda::GroupWriter;
using sdm::cuda::kMaxGroupWriterSplit;
using sdm::cuda::set_group_writer;
using sdm::cuda::set_group_writer_split;

const int kLimits[] = {1, 2, 3, 5, 32};

struct Outputs {
  HostTensor readings, final_bank, saved;  // saved: only for a saving run
};

Outputs run_cuda(const Problem& pb, const WriteReadOptions& opt, bool saving) {
  DeviceProblem dp(pb);
  DeviceTensor readings(pb.spec.bank, {pb.spec.P, pb.spec.T, pb.spec.hd});
  Outputs out;
  if (saving) {
    DeviceTensor saved(DType::u8, {static_cast<std::int64_t>(write_read_saved_bytes(dp.args(), opt))});
    cuda_ok(cudaMemset(saved.data(), 0xa5, saved.bytes()), "cudaMemset");
    write_read_forward_saving(dp.args(), readings.ref(), saved.ref(), opt);
    sync();
    out.saved = saved.to_host();
  } else {
    write_read_forward(dp.args(), readings.ref(), opt);
    sync();
  }
  out.readings = readings.to_host();
  out.final_bank = dp.memory.to_host();
  return out;
}

std::string describe(const ProblemSpec& s, std::int64_t C, SnapshotQuant mode, bool saving) {
  char buf[200];
  std::snprintf(buf, sizeof buf, "hd%lld sps%lld W%lld T%lld C%lld %s %s%s", static_cast<long long>(s.hd),
                static_cast<long long>(s.slots_per_stream), static_cast<long long>(s.W), static_cast<long long>(s.T),
                static_cast<long long>(C), dtype_name(s.bank), saving ? "saving " : "no-grad",
                saving ? snapshot_quant_name(mode) : "");
  return buf;
}

void split_case(const ProblemSpec& spec, std::int64_t C, SnapshotQuant mode, bool saving) {
  const std::string what = describe(spec, C, mode, saving);
  std::printf("  %s\n", what.c_str());
  const Problem pb = make_problem(spec);
  WriteReadOptions opt;
  opt.slots_per_stream = spec.slots_per_stream;
  opt.chunk_size = C;
  opt.snapshot_quant = mode;
  set_group_writer_split(1);
  const Outputs alone = run_cuda(pb, opt, saving);
  for (int limit : kLimits) {
    if (limit == 1) continue;
    set_group_writer_split(limit);
    const Outputs split = run_cuda(pb, opt, saving);
    const std::string at = what + ", split limit " + std::to_string(limit);
    expect(split.readings.bitwise_equal(alone.readings), at + ": readings bitwise equal limit 1's");
    expect(split.final_bank.bitwise_equal(alone.final_bank), at + ": final bank bitwise equals limit 1's");
    if (saving) expect(split.saved.bitwise_equal(alone.saved), at + ": saved bitwise equals limit 1's");
  }
  set_group_writer_split(kMaxGroupWriterSplit);
  const ForwardRun ref = reference_forward(pb, opt);
  const double bound = spec.bank == DType::bf16 ? 3e-2 : 1e-4;
  const Outputs got = run_cuda(pb, opt, saving);
  expect_error_at_most(rel_error(got.readings, ref.readings), bound, what + ": readings vs reference");
  expect_error_at_most(rel_error(got.final_bank, ref.final_bank), bound, what + ": final bank vs reference");
}

// Few slots per stream: a chunk of 64 tokens x 16 lanes writes each of 40 slots ~25 times.
ProblemSpec long_groups(std::int64_t hd, DType bank, std::uint64_t seed) {
  ProblemSpec spec = spec_of(2, 300, 16, 8, hd, 40, 1, bank, seed);
  spec.beta_max = 0.05;
  return spec;
}

void test_every_limit_gives_the_same_bits() {
  set_group_writer(GroupWriter::per_position);  // the split is the per-position writer's
  // hd 768: 3 pieces of 256 (kVec 8); 2056: 9 pieces, the last partial; 37: the per-column path
  // (2 pieces of 32); 1001: 32 pieces of 32 on the per-column path, more than kHeld (1000 took the
  // vector path: a multiple of 8).
  for (DType bank : {DType::bf16, DType::f32}) {
    for (std::int64_t hd : {std::int64_t{768}, std::int64_t{2056}, std::int64_t{37}, std::int64_t{1001}}) {
      const ProblemSpec spec = long_groups(hd, bank, 200 + static_cast<std::uint64_t>(hd));
      split_case(spec, 64, SnapshotQuant::none, false);
      for (SnapshotQuant mode : {SnapshotQuant::none, SnapshotQuant::bf16, SnapshotQuant::fp8, SnapshotQuant::int4}) {
        if (mode == SnapshotQuant::bf16 && bank == DType::bf16) continue;  // the same as none there
        split_case(spec, 64, mode, true);
      }
    }
  }
}

void test_large_chunks_and_group_sizes() {
  set_group_writer(GroupWriter::per_position);  // the split is the per-position writer's
  // C 256 with W 16 over 40 slots: ~100 entries per group, past one 32-entry batch.
  ProblemSpec spec = long_groups(512, DType::bf16, 301);
  spec.T = 700;
  split_case(spec, 256, SnapshotQuant::none, false);
  split_case(spec, 256, SnapshotQuant::none, true);
  // G = W (a log-decay per lane) and groups of one entry mixed with long ones.
  ProblemSpec lanes = spec_of(1, 200, 8, 4, 1536, 2000, 8, DType::f32, 302);
  split_case(lanes, 64, SnapshotQuant::none, true);
}

// The exact snapshot of a quantised mode across the split limits, against the CPU engine's
// snapshot rows (file header).
void quantised_case(const ProblemSpec& spec, std::int64_t C, SnapshotQuant mode, bool masked) {
  Problem pb = make_problem(spec);
  if (masked) mask_some_writes(pb);
  WriteReadOptions opt;
  opt.slots_per_stream = spec.slots_per_stream;
  opt.chunk_size = C;
  opt.validate = !masked;
  HostTensor count(DType::i64, {1});
  write_groups_count(pb.args(), count.ref(), opt);
  opt.snapshot_rows = static_cast<std::int64_t>(count.get(0));
  const std::string what = describe(spec, C, mode, true) + (masked ? " masked" : "") + ", " +
                           std::to_string(opt.snapshot_rows) + " groups";
  std::printf("  %s\n", what.c_str());

  opt.snapshot_quant = SnapshotQuant::none;
  const Outputs none = run_cuda(pb, opt, true);
  opt.snapshot_quant = mode;
  set_group_writer_split(1);
  const Outputs alone = run_cuda(pb, opt, true);
  for (int limit : kLimits) {
    if (limit == 1) continue;
    set_group_writer_split(limit);
    const Outputs split = run_cuda(pb, opt, true);
    expect(split.saved.bitwise_equal(alone.saved), what + ", split limit " + std::to_string(limit) +
                                                       ": saved bitwise equals limit 1's");
  }
  set_group_writer_split(kMaxGroupWriterSplit);
  expect(alone.readings.bitwise_equal(none.readings), what + ": readings bitwise equal mode none's");
  expect(alone.final_bank.bitwise_equal(none.final_bank), what + ": final bank bitwise equals mode none's");

  // Snapshot row r of mode `mode` against core::quantize_row of row r of mode none's snapshot (the
  // same pre-write bank row, stored as it is). CPU and CUDA banks may differ in last bits after a
  // chunk (docs/spec.md §6), so the quantiser is checked on the CUDA engine's own rows.
  DeviceProblem device_pb(pb);
  const cuda::SavedLayout quant_layout = cuda::saved_layout(plan_write_read(device_pb.args(), opt));
  WriteReadOptions none_opt = opt;
  none_opt.snapshot_quant = SnapshotQuant::none;
  const cuda::SavedLayout none_layout = cuda::saved_layout(plan_write_read(device_pb.args(), none_opt));
  const auto* quant_body = static_cast<const unsigned char*>(alone.saved.ref().data) + core::kSavedHeaderBytes;
  const auto* none_body = static_cast<const unsigned char*>(none.saved.ref().data) + core::kSavedHeaderBytes;
  const std::size_t row_bytes = quant_layout.row_bytes;
  std::vector<std::uint8_t> want(row_bytes);
  std::int64_t payload_rows = 0, scale_rows = 0;
  for (std::int64_t r = 0; r < opt.snapshot_rows; ++r) {
    const auto at = static_cast<std::size_t>(r);
    const unsigned char* none_row = none_body + none_layout.snapshot + at * none_layout.row_bytes;
    const float scale = core::quantize_row(mode, spec.bank, none_row, spec.hd, want.data());
    payload_rows += std::memcmp(quant_body + quant_layout.snapshot + at * row_bytes, want.data(), row_bytes) != 0;
    scale_rows += std::memcmp(quant_body + quant_layout.scales + at * sizeof(float), &scale, sizeof(float)) != 0;
  }
  expect(row_bytes == core::snapshot_payload_bytes(mode, spec.bank, spec.hd) && payload_rows == 0,
         what + ": every snapshot row's payload bitwise equals core::quantize_row of the pre-write row (" +
             std::to_string(payload_rows) + " differ)");
  expect(scale_rows == 0, what + ": every snapshot row's scale bitwise equals core::quantize_row's (" +
                              std::to_string(scale_rows) + " differ)");
}

void test_quantised_snapshots_split() {
  set_group_writer(GroupWriter::per_position);  // the split is the per-position writer's
  for (DType bank : {DType::bf16, DType::f32}) {
    for (std::int64_t hd : {std::int64_t{768}, std::int64_t{2048}, std::int64_t{37}, std::int64_t{1037}}) {
      const ProblemSpec spec = long_groups(hd, bank, 400 + static_cast<std::uint64_t>(hd));
      for (SnapshotQuant mode : {SnapshotQuant::fp8, SnapshotQuant::int4}) quantised_case(spec, 64, mode, false);
    }
  }
  // Masked entries (an index outside the stream's rows, a repeated lane: no group, no amax).
  for (DType bank : {DType::bf16, DType::f32}) {
    ProblemSpec spec = long_groups(768, bank, 501);
    spec.extra_rows = spec.P;
    quantised_case(spec, 64, SnapshotQuant::int4, true);
  }
  ProblemSpec odd = long_groups(37, DType::bf16, 502);
  odd.extra_rows = odd.P;
  quantised_case(odd, 64, SnapshotQuant::fp8, true);
}

// Two short problems of the test above (two steps each), small enough for compute-sanitizer:
// kVec 8 with a partial last piece, and the per-column path.
void test_quantised_snapshots_split_small() {
  set_group_writer(GroupWriter::per_position);  // the split is the per-position writer's
  ProblemSpec vec = long_groups(520, DType::bf16, 601);
  vec.T = 70;
  quantised_case(vec, 64, SnapshotQuant::fp8, false);
  ProblemSpec odd = long_groups(37, DType::f32, 602);
  odd.T = 70;
  quantised_case(odd, 64, SnapshotQuant::int4, false);
}


// The walk (write_walk.cu) against the per-position writer: readings, final bank and `saved`
// (filled with 0xa5 first) bitwise equal, no-grad and saving in every snapshot mode, and the walk
// launched (write_walk_launches) exactly where it should be. Shapes: long groups (~25 entries a
// group at C 64, ~50 at C 128, ~680 over 3 slots: the continuation past a batch of 32 and across
// shares), one-entry groups (many slots), C 100 (batches across a chunk's end) with T % C != 0,
// G = W, masked entries (validate=False), both banks; hd 520 (not a multiple of 256) takes the
// per-position writer.
void walk_case(Problem pb, std::int64_t C, bool masked, bool walks) {
  const ProblemSpec& spec = pb.spec;
  if (masked) mask_some_writes(pb);
  WriteReadOptions opt;
  opt.slots_per_stream = spec.slots_per_stream;
  opt.chunk_size = C;
  opt.validate = !masked;
  for (SnapshotQuant mode : {SnapshotQuant::none, SnapshotQuant::bf16, SnapshotQuant::fp8, SnapshotQuant::int4}) {
    if (mode == SnapshotQuant::bf16 && spec.bank == DType::bf16) continue;  // "none" there
    for (bool saving : {false, true}) {
      if (!saving && mode != SnapshotQuant::none) continue;
      opt.snapshot_quant = mode;
      const std::string what = describe(spec, C, mode, saving) + (masked ? " masked" : "");
      std::printf("  %s\n", what.c_str());
      set_group_writer(GroupWriter::per_position);
      const Outputs positions = run_cuda(pb, opt, saving);
      set_group_writer(GroupWriter::walk);
      const std::int64_t launches = sdm::cuda::write_walk_launches();
      const Outputs walk = run_cuda(pb, opt, saving);
      expect((sdm::cuda::write_walk_launches() > launches) == walks,
             what + (walks ? ": the walk ran" : ": the per-position writer ran (no walk)"));
      expect(walk.readings.bitwise_equal(positions.readings),
             what + ": readings bitwise equal the per-position writer's");
      expect(walk.final_bank.bitwise_equal(positions.final_bank),
             what + ": final bank bitwise equals the per-position writer's");
      if (saving) {
        expect(walk.saved.bitwise_equal(positions.saved), what + ": saved bitwise equals the per-position writer's");
      }
    }
  }
  set_group_writer(GroupWriter::automatic);
}

void test_walk_equals_per_position_writer() {
  for (DType bank : {DType::bf16, DType::f32}) {
    walk_case(make_problem(long_groups(768, bank, 700)), 64, false, true);
    ProblemSpec longer = long_groups(256, bank, 701);
    longer.T = 400;
    walk_case(make_problem(longer), 128, false, true);
    walk_case(make_problem(spec_of(2, 200, 16, 8, 1024, 8000, 1, bank, 702)), 64, false, true);  // one-entry groups
    walk_case(make_problem(spec_of(3, 250, 6, 4, 512, 300, 6, bank, 703)), 100, false, true);       // C 100, G = W
    // W = 16 slots a stream: every token writes each slot, so each group is a whole chunk (128
    // entries at C 128), past many batches and across shares.
    walk_case(make_problem(spec_of(1, 300, 16, 8, 256, 16, 1, bank, 706)), 128, false, true);
    ProblemSpec masked = long_groups(768, bank, 704);
    masked.extra_rows = masked.P;
    walk_case(make_problem(masked), 64, true, true);
    walk_case(make_problem(long_groups(520, bank, 705)), 64, false, false);  // hd % 256 != 0
  }
}

// One short problem of it for compute-sanitizer: two steps, groups past a batch, every mode.
void test_walk_small() {
  ProblemSpec spec = long_groups(512, DType::bf16, 710);
  spec.T = 200;
  walk_case(make_problem(spec), 128, false, true);
}

// The automatic choice (write_walk.hpp's measured rule): batches a warp on a 132-SM device (H100,
// H200) at the benchmark shapes (readme and big 1.0: the per-position writer; flagship 8192 / (9
// shares x 256 lanes) = 3.56 at C 64, 16384 / (9 x 512) at C 128: the walk), then the engine under
// GroupWriter::automatic on this device (no-grad forwards): a problem of one batch a warp does not
// launch the walk, one of P 16, hd 2048, W 32, C 64 (2048 positions a chunk in 3 shares on 132 SMs:
// 2.7 batches a warp; at least 2 up to 256 SMs) does, and either with the writer forced follows
// the force.
void test_walk_automatic_choice() {
  struct Shape {
    const char* name;
    std::int64_t hd, C, W, P;
    double batches;
  };
  const Shape shapes[] = {
      {"readme C 64", 768, 64, 64, 2, 1.0},
      {"readme C 128", 768, 128, 64, 2, 1.0},
      {"big C 64", 2048, 64, 64, 2, 1.0},
      {"big C 128", 2048, 128, 64, 2, 1.0},
      {"flagship C 64", 1024, 64, 128, 8, 8192.0 / (9 * 256)},
      {"flagship C 128", 1024, 128, 128, 8, 16384.0 / (9 * 512)},
  };
  for (const Shape& s : shapes) {
    const double got = sdm::cuda::write_walk_batches_per_warp(s.hd, s.C, s.W, s.P, 132);
    expect(got == s.batches, std::string(s.name) + ": " + std::to_string(s.batches) +
                                 " batches a warp at 132 SMs (got " + std::to_string(got) + ")");
  }
  const int sms = sdm::cuda::multiprocessor_count();
  const auto launched = [](const Problem& pb, std::int64_t C, GroupWriter writer) {
    WriteReadOptions opt;
    opt.slots_per_stream = pb.spec.slots_per_stream;
    opt.chunk_size = C;
    set_group_writer(writer);
    const std::int64_t before = sdm::cuda::write_walk_launches();
    run_cuda(pb, opt, false);
    set_group_writer(GroupWriter::automatic);
    return sdm::cuda::write_walk_launches() > before;
  };
  const Problem one_batch = make_problem(long_groups(768, DType::bf16, 720));  // P 2, W 16: 1024 positions
  expect(sdm::cuda::write_walk_batches_per_warp(768, 64, 16, 2, sms) < sdm::cuda::kWalkMinBatches,
         "P 2, hd 768, W 16, C 64: under two batches a warp on this device");
  expect(!launched(one_batch, 64, GroupWriter::automatic), "P 2, hd 768, W 16, C 64, automatic: no walk");
  expect(launched(one_batch, 64, GroupWriter::walk), "P 2, hd 768, W 16, C 64, walk forced: the walk ran");
  const Problem many = make_problem(spec_of(16, 128, 32, 8, 2048, 256, 1, DType::bf16, 721));
  expect(sdm::cuda::write_walk_batches_per_warp(2048, 64, 32, 16, sms) >= sdm::cuda::kWalkMinBatches,
         "P 16, hd 2048, W 32, C 64: at least two batches a warp on this device (" + std::to_string(sms) + " SMs)");
  expect(launched(many, 64, GroupWriter::automatic), "P 16, hd 2048, W 32, C 64, automatic: the walk ran");
  expect(!launched(many, 64, GroupWriter::per_position), "P 16, hd 2048, W 32, C 64, positions forced: no walk");
}
}  // namespace

// Arguments: substrings of test names to run (all tests without any), --verbose (gpu_test_harness.hpp).
int main(int argc, char** argv) {
  const GpuTest tests[] = {
      {"group writer split: every limit gives the same bits", test_every_limit_gives_the_same_bits},
      {"group writer split: C 256, G = W", test_large_chunks_and_group_sizes},
      {"group writer split: quantised snapshots vs CPU engine", test_quantised_snapshots_split},
      {"group writer split: small quantised problems", test_quantised_snapshots_split_small},
      {"write walk: bitwise the per-position writer", test_walk_equals_per_position_writer},
      {"write walk: small", test_walk_small},
      {"write walk: the automatic choice", test_walk_automatic_choice},
  };
  return run_gpu_tests("sdm_gpu_writer_split_tests", tests, argc, argv);
}

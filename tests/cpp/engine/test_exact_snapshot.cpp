// The exact snapshot (docs/spec.md §4): `saved` sized for the call's write groups
// (options.snapshot_rows = write_groups_count) instead of one row per write entry. The results —
// readings, final bank, every gradient and the backward's restored bank — are bitwise those of the
// worst-case buffer on awkward shapes and every snapshot mode; the exact size is the worst case
// less the unused rows; a buffer planned for fewer rows than the call's groups is refused by name,
// nothing written; the count is the number of distinct in-range write rows per chunk.
#include <gtest/gtest.h>

#include <algorithm>
#include <ostream>
#include <cstdint>
#include <string>
#include <vector>

#include "sdm/error.hpp"
#include "sdm/ops.hpp"
#include "support/engine_run.hpp"
#include "support/expect_rejects.hpp"
#include "support/host_tensor.hpp"
#include "support/problem.hpp"
#include "support/write_groups.hpp"

namespace sdm::testing {
namespace {

struct Case {
  const char* name;
  ProblemSpec spec;
  std::int64_t chunk = 4;
  SnapshotQuant mode = SnapshotQuant::none;
  bool grad_bank_fp32 = false;
  bool masked = false;  // out-of-range and repeated write lanes, validate off
};
void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

ProblemSpec spec(std::int64_t P, std::int64_t T, std::int64_t W, std::int64_t R, std::int64_t hd, std::int64_t sps,
                 DType bank, std::uint64_t seed) {
  return spec_of(P, T, W, R, hd, sps, 1, bank, seed);
}

std::vector<Case> cases() {
  std::vector<Case> out = {
      {"f32_T_not_multiple_of_C", spec(2, 11, 3, 2, 6, 16, DType::f32, 1)},
      {"bf16_odd_hd_W_ne_R", spec(2, 9, 2, 5, 7, 24, DType::bf16, 2), 3},
      {"long_slot_groups", spec(3, 17, 4, 3, 5, 6, DType::f32, 3), 8},
      {"bf16_fp8", spec(2, 13, 3, 2, 9, 10, DType::bf16, 4), 4, SnapshotQuant::fp8},
      {"f32_int4_odd_hd", spec(2, 10, 2, 3, 7, 9, DType::f32, 5), 4, SnapshotQuant::int4},
      {"f32_fp8", spec(1, 12, 3, 3, 8, 7, DType::f32, 6), 5, SnapshotQuant::fp8},
      {"bf16_int4_grad_bank_fp32", spec(2, 14, 3, 2, 6, 8, DType::bf16, 7), 4, SnapshotQuant::int4, true},
      {"bf16_grad_bank_fp32", spec(2, 7, 2, 2, 5, 12, DType::bf16, 8), 3, SnapshotQuant::none, true},
      {"masked_entries", spec(2, 11, 3, 2, 6, 8, DType::f32, 9), 4, SnapshotQuant::none, false, true},
      {"masked_bf16_int4", spec(2, 10, 4, 2, 5, 6, DType::bf16, 10), 4, SnapshotQuant::int4, false, true},
  };
  out[8].spec.extra_rows = 3;
  out[9].spec.extra_rows = 2;
  return out;
}

Problem problem_of(const Case& c) {
  Problem pb = make_problem(c.spec);
  if (c.masked) mask_some_writes(pb);
  return pb;
}

WriteReadOptions options_of(const Case& c) {
  return {.slots_per_stream = c.spec.slots_per_stream,
          .chunk_size = c.chunk,
          .snapshot_quant = c.mode,
          .grad_bank_fp32 = c.grad_bank_fp32,
          .validate = !c.masked};
}

std::int64_t counted(const Problem& pb, const WriteReadOptions& options) {
  HostTensor count(DType::i64, {1});
  write_groups_count(pb.args(), count.ref(), options);
  return static_cast<std::int64_t>(count.get(0));
}

void expect_grads_equal(const GradRun& a, const GradRun& b) {
  EXPECT_TRUE(a.memory.bitwise_equal(b.memory)) << "grad memory";
  EXPECT_TRUE(a.k_val.bitwise_equal(b.k_val)) << "grad k_val";
  EXPECT_TRUE(a.v.bitwise_equal(b.v)) << "grad v";
  EXPECT_TRUE(a.beta.bitwise_equal(b.beta)) << "grad beta";
  EXPECT_TRUE(a.g.bitwise_equal(b.g)) << "grad g";
  EXPECT_TRUE(a.q_val.bitwise_equal(b.q_val)) << "grad q_val";
  EXPECT_TRUE(a.bank_after.bitwise_equal(b.bank_after)) << "restored bank";
}

class ExactSnapshot : public ::testing::TestWithParam<Case> {};

TEST_P(ExactSnapshot, CountIsTheDistinctWriteRowsOfEachChunk) {
  const Case& c = GetParam();
  const Problem pb = problem_of(c);
  EXPECT_EQ(counted(pb, options_of(c)), distinct_rows_per_chunk(pb, c.chunk));
}

TEST_P(ExactSnapshot, ExactBufferGivesTheWorstCaseBits) {
  const Case& c = GetParam();
  const Problem pb = problem_of(c);
  const WriteReadOptions worst = options_of(c);
  WriteReadOptions exact = worst;
  exact.snapshot_rows = counted(pb, worst);
  const ForwardRun a = engine_forward_saving(pb, worst);
  const ForwardRun b = engine_forward_saving(pb, exact);
  EXPECT_LT(b.saved.numel(), a.saved.numel());
  EXPECT_TRUE(a.readings.bitwise_equal(b.readings));
  EXPECT_TRUE(a.final_bank.bitwise_equal(b.final_bank));
  const HostTensor dy = random_tensor(pb.make_readings(DType::f32).sizes(), 1.0, 31);
  const HostTensor dfinal = random_tensor({pb.bank_rows(), pb.spec.hd}, 0.5, 32);
  const DType grad_dtype = c.spec.bank == DType::bf16 && !c.grad_bank_fp32 ? DType::bf16 : DType::f32;
  expect_grads_equal(engine_backward(pb, a, dy, dfinal, worst, grad_dtype),
                     engine_backward(pb, b, dy, dfinal, exact, grad_dtype));
}

TEST_P(ExactSnapshot, ExactSizeIsTheWorstCaseLessTheUnusedRows) {
  const Case& c = GetParam();
  const Problem pb = problem_of(c);
  WriteReadOptions o = options_of(c);
  const auto worst_bytes = static_cast<std::int64_t>(write_read_saved_bytes(pb.args(), o));
  o.snapshot_rows = 1;
  const auto one_row = static_cast<std::int64_t>(write_read_saved_bytes(pb.args(), o));
  o.snapshot_rows = 2;
  const std::int64_t row_bytes = static_cast<std::int64_t>(write_read_saved_bytes(pb.args(), o)) - one_row;
  const std::int64_t hd = c.spec.hd;
  const bool bf16 = c.spec.bank == DType::bf16;
  const std::int64_t expected_row_bytes = c.mode == SnapshotQuant::fp8    ? hd
                                          : c.mode == SnapshotQuant::int4 ? (hd + 1) / 2
                                                                          : hd * (bf16 ? 2 : 4);
  EXPECT_EQ(row_bytes, expected_row_bytes);
  const std::int64_t fixed = one_row - row_bytes;  // header + delta, residual, scales and padding
  EXPECT_EQ(worst_bytes, fixed + worst_rows(pb, c.chunk) * row_bytes);
  o.snapshot_rows = counted(pb, options_of(c));
  EXPECT_EQ(static_cast<std::int64_t>(write_read_saved_bytes(pb.args(), o)), fixed + o.snapshot_rows * row_bytes);
}

INSTANTIATE_TEST_SUITE_P(Cases, ExactSnapshot, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<Case>& param) { return std::string(param.param.name); });

// ---- refusals --------------------------------------------------------------------------------

class ExactSnapshotRefusals : public ::testing::Test {
 protected:
  ExactSnapshotRefusals() : pb(make_problem(spec(2, 11, 3, 2, 6, 8, DType::f32, 11))) {
    options.slots_per_stream = pb.spec.slots_per_stream;
    options.chunk_size = 4;
    count = counted(pb, options);
  }
  Problem pb;
  WriteReadOptions options;
  std::int64_t count = 0;
};

TEST_F(ExactSnapshotRefusals, ForwardRefusesTooFewRowsAndWritesNothing) {
  for (const bool validate : {true, false}) {
    WriteReadOptions o = options;
    o.validate = validate;
    o.snapshot_rows = count - 1;
    HostTensor saved(DType::u8, {static_cast<std::int64_t>(write_read_saved_bytes(pb.args(), o))});
    for (std::int64_t i = 0; i < saved.numel(); ++i) saved.set(i, static_cast<double>(i % 251));
    const HostTensor saved_before = saved.to(DType::u8), bank_before = pb.memory.to(pb.memory.dtype());
    HostTensor readings = pb.make_readings(DType::f32);
    expect_rejects<ValueError>([&] { write_read_forward_saving(pb.args(), readings.ref(), saved.ref(), o); }, "saved",
                               {std::to_string(count - 1) + " snapshot rows", std::to_string(count) + " write groups"});
    EXPECT_TRUE(saved.bitwise_equal(saved_before));
    EXPECT_TRUE(pb.memory.bitwise_equal(bank_before));
    EXPECT_TRUE(readings.bitwise_equal(pb.make_readings(DType::f32)));
  }
}

TEST_F(ExactSnapshotRefusals, BackwardRefusesRowsOtherThanTheForwards) {
  WriteReadOptions exact = options;
  exact.snapshot_rows = count;
  const ForwardRun run = engine_forward_saving(pb, exact);
  HostTensor grad_v(DType::f32, pb.v.sizes());
  WriteReadGrads grads;
  grads.v = grad_v.ref();
  const HostTensor dy(DType::f32, pb.make_readings(DType::f32).sizes());
  WriteReadOptions fewer = exact;
  fewer.snapshot_rows = count - 1;
  HostTensor cut(DType::u8, {static_cast<std::int64_t>(write_read_saved_bytes(pb.args(), fewer))});
  std::copy_n(static_cast<const std::uint8_t*>(run.saved.ref().data), cut.numel(),
              static_cast<std::uint8_t*>(cut.ref().data));
  const auto backward = [&](const WriteReadOptions& o) {
    HostTensor bank = run.final_bank.to(run.final_bank.dtype());
    WriteReadArgs args = pb.args();
    args.memory = bank.ref();
    write_read_backward(args, cut.ref(), dy.ref(), TensorRef{}, grads, o);
  };
  // validate: the stamp records the forward's rows; without it, the count refuses.
  expect_rejects<ValueError>([&] { backward(fewer); }, "saved", {"snapshot_rows"});
  fewer.validate = false;
  expect_rejects<ValueError>([&] { backward(fewer); }, "saved", {std::to_string(count) + " write groups"});
  EXPECT_TRUE(grad_v.bitwise_equal(HostTensor(DType::f32, pb.v.sizes())));
}

TEST_F(ExactSnapshotRefusals, SnapshotRowsOutOfRangeIsRefusedByName) {
  for (const std::int64_t rows : {std::int64_t{-1}, worst_rows(pb, 4) + 1}) {
    WriteReadOptions o = options;
    o.snapshot_rows = rows;
    expect_rejects<ValueError>([&] { write_read_saved_bytes(pb.args(), o); }, "snapshot_rows",
                               {"0..N*C*W", std::to_string(rows)});
  }
}

TEST_F(ExactSnapshotRefusals, CountTensorIsChecked) {
  HostTensor f32(DType::f32, {1});
  expect_rejects<TypeError>([&] { write_groups_count(pb.args(), f32.ref(), options); }, "count", {"int64"});
  HostTensor two(DType::i64, {2});
  expect_rejects<ValueError>([&] { write_groups_count(pb.args(), two.ref(), options); }, "count", {"one int64"});
}

}  // namespace
}  // namespace sdm::testing

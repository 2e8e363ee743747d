// One test per validation rule of the chunked op, its backward and the decode step
// (src/core/validate.hpp; docs/spec.md §7, §8, §9, §11). Each test builds valid
// arguments with make_problem, breaks one thing and checks the exception type, argument()
// and that the message names the offending argument (and stream / token / lane for index
// errors). Valid variants (G = W, 2-D / 3-D beta, int64 indices, bf16 inputs, ...) pass.
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "core/validate.hpp"
#include "support/expect_rejects.hpp"
#include "support/problem.hpp"
#include "sdm/error.hpp"

namespace sdm::core {
namespace {

using testing::HostTensor;
using testing::make_problem;
using testing::Problem;
using testing::ProblemSpec;

using testing::expect_rejects;

const Device kCuda0{DeviceType::cuda, 0};

// The float inputs of the op, by name.
const std::vector<std::pair<const char*, TensorRef WriteReadArgs::*>> kFloatInputs = {
    {"k_val", &WriteReadArgs::k_val}, {"v", &WriteReadArgs::v},         {"beta", &WriteReadArgs::beta},
    {"g", &WriteReadArgs::g},         {"q_val", &WriteReadArgs::q_val},
};

// Every tensor argument except the bank (the bank fixes the device).
const std::vector<std::pair<const char*, TensorRef WriteReadArgs::*>> kNonBankTensors = {
    {"k_idx", &WriteReadArgs::k_idx}, {"k_val", &WriteReadArgs::k_val}, {"v", &WriteReadArgs::v},
    {"beta", &WriteReadArgs::beta},   {"g", &WriteReadArgs::g},         {"q_idx", &WriteReadArgs::q_idx},
    {"q_val", &WriteReadArgs::q_val},
};

// ===================================== chunked op =======================================

class ChunkedValidation : public ::testing::Test {
 protected:
  // P 2, T 5, W 3, R 2, hd 4, 16 rows per stream: small and every dim distinct.
  static ProblemSpec base_spec() {
    ProblemSpec spec;
    spec.P = 2;
    spec.T = 5;
    spec.W = 3;
    spec.R = 2;
    spec.hd = 4;
    spec.slots_per_stream = 16;
    return spec;
  }

  void SetUp() override { use(base_spec()); }

  void use(const ProblemSpec& spec) {
    pb = make_problem(spec);
    args = pb.args();
    readings_buffer = pb.make_readings(spec.bank);
    readings = readings_buffer.ref();
    options = WriteReadOptions{};
    options.slots_per_stream = spec.slots_per_stream;
    options.chunk_size = 4;
  }

  WriteReadShape validate(BankDTypes banks = BankDTypes::engine) const {
    return validate_write_read(args, readings, options, banks);
  }
  std::function<void()> validating(BankDTypes banks = BankDTypes::engine) const {
    return [this, banks] { validate(banks); };
  }
  std::function<void()> checking_indices() const {
    return [this] { check_write_read_indices(args, validate()); };
  }

  // One index of the problem's k_idx / q_idx [P, T, width].
  std::int64_t index_at(const HostTensor& idx, std::int64_t p, std::int64_t t, std::int64_t lane) const {
    return static_cast<std::int64_t>(idx.get((p * pb.spec.T + t) * idx.sizes()[2] + lane));
  }
  void set_index(HostTensor& idx, std::int64_t p, std::int64_t t, std::int64_t lane, std::int64_t value) {
    idx.set((p * pb.spec.T + t) * idx.sizes()[2] + lane, static_cast<double>(value));
  }

  Problem pb;
  WriteReadArgs args;
  HostTensor readings_buffer;
  TensorRef readings;
  WriteReadOptions options;
};

// ---- valid arguments pass ----

TEST_F(ChunkedValidation, ValidArgumentsGiveTheGeometry) {
  const WriteReadShape s = validate();
  EXPECT_EQ(s.P, 2);
  EXPECT_EQ(s.T, 5);
  EXPECT_EQ(s.W, 3);
  EXPECT_EQ(s.R, 2);
  EXPECT_EQ(s.G, 1);
  EXPECT_EQ(s.hd, 4);
  EXPECT_EQ(s.S, 32);
  EXPECT_EQ(s.slots_per_stream, 16);
  EXPECT_EQ(s.C, 4);
  EXPECT_EQ(s.num_time_chunks(), 2);
  EXPECT_EQ(s.bank, DType::f32);
  EXPECT_NO_THROW(check_write_read_indices(args, s));
}

TEST_F(ChunkedValidation, AcceptsPerWriteDecayAnd3dBeta) {
  ProblemSpec spec = base_spec();
  spec.G = spec.W;
  spec.beta_3d = true;
  use(spec);
  const WriteReadShape s = validate();
  EXPECT_EQ(s.G, 3);
  EXPECT_NO_THROW(check_write_read_indices(args, s));
}

TEST_F(ChunkedValidation, AcceptsInt64IndicesBf16InputsAndBf16Bank) {
  ProblemSpec spec = base_spec();
  spec.index = DType::i64;
  spec.input = DType::bf16;
  spec.bank = DType::bf16;
  use(spec);
  const WriteReadShape s = validate();
  EXPECT_EQ(s.bank, DType::bf16);
  EXPECT_NO_THROW(check_write_read_indices(args, s));
}

TEST_F(ChunkedValidation, AcceptsF16InputsAndMixedIndexDTypes) {
  ProblemSpec spec = base_spec();
  spec.input = DType::f16;
  use(spec);
  HostTensor q_idx64 = pb.q_idx.to(DType::i64);
  args.q_idx = q_idx64.ref();
  EXPECT_NO_THROW(check_write_read_indices(args, validate()));
}

TEST_F(ChunkedValidation, ClampsTheChunkSizeToT) {
  options.chunk_size = 256;
  const WriteReadShape s = validate();
  EXPECT_EQ(s.C, 5);
  EXPECT_EQ(s.num_time_chunks(), 1);
  options.chunk_size = 1;
  EXPECT_EQ(validate().C, 1);
  EXPECT_EQ(validate().num_time_chunks(), 5);
}

TEST_F(ChunkedValidation, AcceptsAbsentReadingsAndExtraBankRows) {
  ProblemSpec spec = base_spec();
  spec.extra_rows = 3;
  use(spec);
  readings = TensorRef{};
  EXPECT_EQ(validate().S, 35);
}

TEST_F(ChunkedValidation, AcceptsTheLimitsOfWAndR) {
  ProblemSpec spec = base_spec();
  spec.P = 1;
  spec.T = 2;
  spec.W = 256;
  spec.R = 256;
  spec.slots_per_stream = 256;
  use(spec);
  const WriteReadShape s = validate();
  EXPECT_EQ(s.W, 256);
  EXPECT_EQ(s.R, 256);
  EXPECT_NO_THROW(check_write_read_indices(args, s));
}

TEST_F(ChunkedValidation, ReferenceAcceptsFloat64BankInputsAndAnyFloatReadings) {
  ProblemSpec spec = base_spec();
  spec.bank = DType::f64;
  spec.input = DType::f64;
  use(spec);
  EXPECT_EQ(validate(BankDTypes::reference).bank, DType::f64);
  HostTensor bf16_readings = pb.make_readings(DType::bf16);
  readings = bf16_readings.ref();
  EXPECT_NO_THROW(validate(BankDTypes::reference));
}

TEST_F(ChunkedValidation, AllowsDuplicateReadSlots) {
  set_index(pb.q_idx, 1, 2, 1, index_at(pb.q_idx, 1, 2, 0));
  EXPECT_NO_THROW(check_write_read_indices(args, validate()));
}

// ---- the bank ----

TEST_F(ChunkedValidation, RejectsAbsentBank) {
  args.memory = TensorRef{};
  expect_rejects<ValueError>(validating(), "memory", {"absent"});
}

TEST_F(ChunkedValidation, RejectsBankDType) {
  args.memory.dtype = DType::f16;
  expect_rejects<TypeError>(validating(), "memory", {"bfloat16", "float32", "float16"});
  args.memory.dtype = DType::i32;
  expect_rejects<TypeError>(validating(BankDTypes::reference), "memory", {"float64", "int32"});
}

TEST_F(ChunkedValidation, EngineRejectsFloat64Bank) {
  args.memory.dtype = DType::f64;
  expect_rejects<TypeError>(validating(), "memory", {"got float64"});
}

TEST_F(ChunkedValidation, RejectsBankThatIsNot2d) {
  args.memory = TensorRef::contiguous(args.memory.data, DType::f32, {2, 16, 4});
  expect_rejects<ValueError>(validating(), "memory", {"2-D", "[S, hd]", "[2, 16, 4]"});
}

TEST_F(ChunkedValidation, RejectsNonContiguousBank) {
  args.memory.strides = {8, 1};
  expect_rejects<ValueError>(validating(), "memory", {"contiguous", "[8, 1]"});
}

TEST_F(ChunkedValidation, RejectsBankWithoutRows) {
  args.memory.sizes[0] = 0;
  expect_rejects<ValueError>(validating(), "memory", {"rows", "got 0"});
}

TEST_F(ChunkedValidation, RejectsBankWithoutColumns) {
  args.memory.sizes[1] = 0;
  args.memory.strides[0] = 0;
  expect_rejects<ValueError>(validating(), "memory", {"columns", "got 0"});
}

TEST_F(ChunkedValidation, RejectsBankWith2To31Rows) {
  // Shape-only views (no data, as for meta tensors): only the geometry is inspected.
  args.memory = TensorRef::contiguous(nullptr, DType::f32, {std::int64_t{1} << 31, 4});
  expect_rejects<ValueError>(validating(), "memory", {"2147483647", "2147483648"});
  args.memory = TensorRef::contiguous(nullptr, DType::f32, {(std::int64_t{1} << 31) - 1, 4});
  EXPECT_NO_THROW(validate());
}

TEST_F(ChunkedValidation, RejectsBankSmallerThanItsStreams) {
  args.memory.sizes[0] = 31;
  expect_rejects<ValueError>(validating(), "memory", {"slots_per_stream", "32", "got 31"});
}

// ---- options ----

TEST_F(ChunkedValidation, RejectsSlotsPerStreamBelowOne) {
  options.slots_per_stream = 0;
  expect_rejects<ValueError>(validating(), "slots_per_stream", {">= 1", "got 0"});
}

TEST_F(ChunkedValidation, RejectsChunkSizeOutside1To256) {
  options.chunk_size = 0;
  expect_rejects<ValueError>(validating(), "chunk_size", {"1..256", "got 0"});
  options.chunk_size = 257;
  expect_rejects<ValueError>(validating(), "chunk_size", {"1..256", "got 257"});
}

TEST_F(ChunkedValidation, RejectsNegativeThreadCount) {
  options.num_threads = -1;
  expect_rejects<ValueError>(validating(), "num_threads", {"got -1"});
}

TEST_F(ChunkedValidation, RejectsUnknownSnapshotMode) {
  options.snapshot_quant = static_cast<SnapshotQuant>(7);
  expect_rejects<ValueError>(validating(), "snapshot_quant", {"none", "int4", "7"});
}

TEST_F(ChunkedValidation, AcceptsEverySnapshotModeOnBothBanks) {
  for (DType bank : {DType::f32, DType::bf16}) {
    ProblemSpec spec = base_spec();
    spec.bank = bank;
    use(spec);
    for (SnapshotQuant mode : {SnapshotQuant::none, SnapshotQuant::bf16, SnapshotQuant::fp8, SnapshotQuant::int4}) {
      options.snapshot_quant = mode;
      EXPECT_NO_THROW(validate()) << dtype_name(bank) << " " << snapshot_quant_name(mode);
    }
  }
}

// ---- index tensors and the dims they fix ----

TEST_F(ChunkedValidation, RejectsIndexDTypes) {
  args.k_idx.dtype = DType::f32;
  expect_rejects<TypeError>(validating(), "k_idx", {"int32 or int64", "got float32"});
  args = pb.args();
  args.q_idx.dtype = DType::u8;
  expect_rejects<TypeError>(validating(), "q_idx", {"int32 or int64", "got uint8"});
}

TEST_F(ChunkedValidation, RejectsIndexTensorsThatAreNot3d) {
  args.k_idx = TensorRef::contiguous(args.k_idx.data, DType::i32, {10, 3});
  expect_rejects<ValueError>(validating(), "k_idx", {"3-D", "[P, T, W]", "[10, 3]"});
  args = pb.args();
  args.q_idx = TensorRef::contiguous(args.q_idx.data, DType::i32, {10, 2});
  expect_rejects<ValueError>(validating(), "q_idx", {"3-D", "[P, T, R]", "[10, 2]"});
}

TEST_F(ChunkedValidation, RejectsZeroStreams) {
  args.k_idx.sizes[0] = 0;
  expect_rejects<ValueError>(validating(), "k_idx", {"streams P", "got 0"});
}

TEST_F(ChunkedValidation, RejectsZeroTokens) {
  args.k_idx.sizes[1] = 0;
  expect_rejects<ValueError>(validating(), "k_idx", {"tokens T", "got 0"});
}

TEST_F(ChunkedValidation, RejectsWOutside1To256) {
  HostTensor wide(DType::i32, {2, 5, 257});
  args.k_idx = wide.ref();
  expect_rejects<ValueError>(validating(), "k_idx", {"W", "1..256", "got 257"});
  args.k_idx.sizes[2] = 0;
  expect_rejects<ValueError>(validating(), "k_idx", {"W", "1..256", "got 0"});
}

TEST_F(ChunkedValidation, RejectsROutside1To256) {
  HostTensor wide(DType::i32, {2, 5, 257});
  args.q_idx = wide.ref();
  expect_rejects<ValueError>(validating(), "q_idx", {"R", "1..256", "got 257"});
  args.q_idx.sizes[2] = 0;
  expect_rejects<ValueError>(validating(), "q_idx", {"R", "1..256", "got 0"});
}

TEST_F(ChunkedValidation, RejectsQIdxWithOtherStreamsOrTokens) {
  args.q_idx.sizes[1] = 4;
  expect_rejects<ValueError>(validating(), "q_idx", {"[P, T, R] = [2, 5, 2]", "got [2, 4, 2]"});
}

// ---- float inputs ----

TEST_F(ChunkedValidation, RejectsFloatInputDTypes) {
  for (const auto& [name, member] : kFloatInputs) {
    SCOPED_TRACE(name);
    args = pb.args();
    (args.*member).dtype = DType::i32;
    expect_rejects<TypeError>(validating(), name, {"float32, bfloat16 or float16", "got int32"});
    // A real float64 tensor of the same shape (relabelling the float32 buffer would make the
    // view reach past its allocation, into the next tensor's bytes).
    const TensorRef& input = args.*member;
    const HostTensor f64(DType::f64, std::vector<std::int64_t>(input.sizes.begin(), input.sizes.begin() + input.ndim));
    args.*member = f64.ref();
    expect_rejects<TypeError>(validating(), name, {"got float64"});
    EXPECT_NO_THROW(validate(BankDTypes::reference));
  }
}

TEST_F(ChunkedValidation, RejectsFloatInputsWithOtherStreamsOrTokens) {
  for (const auto& [name, member] : kFloatInputs) {
    SCOPED_TRACE(name);
    args = pb.args();
    (args.*member).sizes[1] = 6;
    expect_rejects<ValueError>(validating(), name, {"[P, T", "got [2, 6"});
  }
}

TEST_F(ChunkedValidation, RejectsKValWithOtherWidthThanKIdx) {
  args.k_val.sizes[2] = 2;
  expect_rejects<ValueError>(validating(), "k_val", {"[P, T, W] = [2, 5, 3]", "got [2, 5, 2]"});
}

TEST_F(ChunkedValidation, RejectsVWithOtherWidthThanTheBank) {
  args.v.sizes[2] = 5;
  expect_rejects<ValueError>(validating(), "v", {"[P, T, hd] = [2, 5, 4]", "got [2, 5, 5]"});
}

TEST_F(ChunkedValidation, RejectsBetaShape) {
  args.beta = TensorRef::contiguous(args.beta.data, DType::f32, {2, 5, 2});
  expect_rejects<ValueError>(validating(), "beta", {"[P, T] = [2, 5] or [P, T, 1] = [2, 5, 1]", "got [2, 5, 2]"});
}

TEST_F(ChunkedValidation, RejectsGLastDimOtherThanOneOrW) {
  args.g = TensorRef::contiguous(args.g.data, DType::f32, {2, 5, 2});
  expect_rejects<ValueError>(validating(), "g", {"[P, T, 1] = [2, 5, 1] or [P, T, W] = [2, 5, 3]", "got [2, 5, 2]"});
  args.g = TensorRef::contiguous(args.g.data, DType::f32, {2, 5});
  expect_rejects<ValueError>(validating(), "g", {"got [2, 5]"});
}

TEST_F(ChunkedValidation, RejectsQValWithOtherWidthThanQIdx) {
  args.q_val.sizes[2] = 3;
  expect_rejects<ValueError>(validating(), "q_val", {"[P, T, R] = [2, 5, 2]", "got [2, 5, 3]"});
}

TEST_F(ChunkedValidation, RejectsAbsentInputs) {
  for (const auto& [name, member] : kNonBankTensors) {
    SCOPED_TRACE(name);
    args = pb.args();
    args.*member = TensorRef{};
    expect_rejects<ValueError>(validating(), name, {"required"});
  }
}

TEST_F(ChunkedValidation, RejectsNonContiguousInputs) {
  for (const auto& [name, member] : kNonBankTensors) {
    SCOPED_TRACE(name);
    args = pb.args();
    (args.*member).strides[0] *= 2;
    expect_rejects<ValueError>(validating(), name, {"contiguous"});
  }
}

TEST_F(ChunkedValidation, RejectsInputsOnAnotherDevice) {
  for (const auto& [name, member] : kNonBankTensors) {
    SCOPED_TRACE(name);
    args = pb.args();
    (args.*member).device = kCuda0;
    expect_rejects<ValueError>(validating(), name, {"cpu", "got cuda:0"});
  }
}

TEST_F(ChunkedValidation, RejectsInputsOffACudaBank) {
  args.memory.device = Device{DeviceType::cuda, 1};
  expect_rejects<ValueError>(validating(), "k_idx", {"cuda:1", "got cpu"});
  for (const auto& [name, member] : kNonBankTensors) (args.*member).device = Device{DeviceType::cuda, 1};
  readings.device = kCuda0;
  expect_rejects<ValueError>(validating(), "readings", {"cuda:1", "got cuda:0"});
}

// ---- readings ----

TEST_F(ChunkedValidation, EngineRejectsReadingsInAnotherDTypeThanTheBank) {
  readings.dtype = DType::bf16;
  expect_rejects<TypeError>(validating(), "readings", {"float32", "got bfloat16"});
  EXPECT_NO_THROW(validate(BankDTypes::reference));
}

TEST_F(ChunkedValidation, RejectsReadingsShape) {
  readings.sizes[2] = 3;
  expect_rejects<ValueError>(validating(), "readings", {"[P, T, hd] = [2, 5, 4]", "got [2, 5, 3]"});
}

TEST_F(ChunkedValidation, ReferenceRejectsIntegerReadings) {
  readings.dtype = DType::i64;
  expect_rejects<TypeError>(validating(BankDTypes::reference), "readings", {"float64", "got int64"});
}

TEST_F(ChunkedValidation, RejectsNonContiguousReadings) {
  readings.strides[0] *= 2;
  expect_rejects<ValueError>(validating(), "readings", {"contiguous"});
}

// ---- index values (docs/spec.md §8) ----

TEST_F(ChunkedValidation, RejectsWriteSlotOutsideItsStream) {
  set_index(pb.k_idx, 1, 4, 2, 37);
  expect_rejects<ValueError>(checking_indices(), "k_idx",
                             {"k_idx[stream 1, token 4, lane 2] = 37 is outside stream 1's rows [16, 32)"});
}

TEST_F(ChunkedValidation, RejectsWriteSlotOfAnotherStream) {
  set_index(pb.k_idx, 1, 0, 0, 3);
  expect_rejects<ValueError>(checking_indices(), "k_idx",
                             {"k_idx[stream 1, token 0, lane 0] = 3 is outside stream 1's rows [16, 32)"});
}

TEST_F(ChunkedValidation, RejectsNegativeIndex) {
  set_index(pb.k_idx, 0, 2, 1, -1);
  expect_rejects<ValueError>(checking_indices(), "k_idx", {"[stream 0, token 2, lane 1] = -1", "[0, 16)"});
}

TEST_F(ChunkedValidation, RejectsReadSlotOutsideItsStream) {
  set_index(pb.q_idx, 0, 3, 1, 16);
  expect_rejects<ValueError>(checking_indices(), "q_idx",
                             {"q_idx[stream 0, token 3, lane 1] = 16 is outside stream 0's rows [0, 16)"});
}

TEST_F(ChunkedValidation, RejectsInt64IndexBeyond32Bits) {
  ProblemSpec spec = base_spec();
  spec.index = DType::i64;
  use(spec);
  const std::int64_t huge = (std::int64_t{1} << 32) + 17;  // 17 after truncation to 32 bits
  static_cast<std::int64_t*>(args.q_idx.data)[(1 * 5 + 1) * 2 + 0] = huge;
  expect_rejects<ValueError>(checking_indices(), "q_idx",
                             {"q_idx[stream 1, token 1, lane 0] = " + std::to_string(huge)});
}

TEST_F(ChunkedValidation, RejectsRepeatedWriteSlotOfAToken) {
  set_index(pb.k_idx, 0, 3, 2, index_at(pb.k_idx, 0, 3, 0));
  expect_rejects<ValueError>(checking_indices(), "k_idx", {"k_idx[stream 0, token 3, lane 2]", "repeats lane 0", "distinct"});
}

TEST_F(ChunkedValidation, RejectsRepeatedWriteSlotWithWideTokens) {
  ProblemSpec spec = base_spec();
  spec.W = 40;
  spec.slots_per_stream = 64;
  use(spec);
  set_index(pb.k_idx, 1, 2, 39, index_at(pb.k_idx, 1, 2, 17));
  expect_rejects<ValueError>(checking_indices(), "k_idx", {"k_idx[stream 1, token 2, lane 39]", "repeats lane 17"});
}

TEST_F(ChunkedValidation, ReportsTheFirstViolationInStreamTokenLaneOrder) {
  set_index(pb.k_idx, 1, 0, 0, 0);   // stream 1, token 0
  set_index(pb.q_idx, 0, 4, 1, 99);  // stream 0, token 4: first in stream order
  set_index(pb.k_idx, 0, 4, 2, 99);  // same token, lane 2 of the write slots
  set_index(pb.k_idx, 0, 4, 1, 98);  // lane 1 comes first
  expect_rejects<ValueError>(checking_indices(), "k_idx", {"k_idx[stream 0, token 4, lane 1] = 98"});
  set_index(pb.k_idx, 0, 4, 1, 1);
  set_index(pb.k_idx, 0, 4, 2, 2);
  set_index(pb.k_idx, 0, 4, 0, 3);
  expect_rejects<ValueError>(checking_indices(), "q_idx", {"q_idx[stream 0, token 4, lane 1] = 99"});
}

// ---- backward ----

class BackwardValidation : public ChunkedValidation {
 protected:
  void SetUp() override {
    ChunkedValidation::SetUp();
    grad_readings_buffer = pb.make_readings(DType::f32);
    grad_readings = grad_readings_buffer.ref();
    grad_bank_buffer = HostTensor(DType::f32, {32, 4});
    grad_k_val = HostTensor(DType::f32, {2, 5, 3});
    grad_v = HostTensor(DType::bf16, {2, 5, 4});
    grad_beta = HostTensor(DType::f32, {2, 5});
    grad_g = HostTensor(DType::f32, {2, 5, 1});
    grad_q_val = HostTensor(DType::f16, {2, 5, 2});
    grads.memory = grad_bank_buffer.ref();
    grads.k_val = grad_k_val.ref();
    grads.v = grad_v.ref();
    grads.beta = grad_beta.ref();
    grads.g = grad_g.ref();
    grads.q_val = grad_q_val.ref();
  }
  std::function<void()> validating_backward() const {
    return [this] { validate_write_read_backward(args, validate(), grad_readings, grad_final_bank, grads); };
  }

  HostTensor grad_readings_buffer, grad_bank_buffer, grad_k_val, grad_v, grad_beta, grad_g, grad_q_val;
  TensorRef grad_readings, grad_final_bank;
  WriteReadGrads grads;
};

const std::vector<std::pair<const char*, TensorRef WriteReadGrads::*>> kGrads = {
    {"grad_memory", &WriteReadGrads::memory}, {"grad_k_val", &WriteReadGrads::k_val},
    {"grad_v", &WriteReadGrads::v},           {"grad_beta", &WriteReadGrads::beta},
    {"grad_g", &WriteReadGrads::g},           {"grad_q_val", &WriteReadGrads::q_val},
};

TEST_F(BackwardValidation, AcceptsValidGradients) {
  EXPECT_NO_THROW(validating_backward()());
  const HostTensor final_bank_grad(DType::f32, {32, 4});
  grad_final_bank = final_bank_grad.ref();
  EXPECT_NO_THROW(validating_backward()());
  grads = WriteReadGrads{};  // every gradient output absent
  EXPECT_NO_THROW(validating_backward()());
}

TEST_F(BackwardValidation, RejectsAbsentGradReadings) {
  grad_readings = TensorRef{};
  expect_rejects<ValueError>(validating_backward(), "grad_readings", {"required"});
}

TEST_F(BackwardValidation, RejectsGradReadingsDTypeAndShape) {
  grad_readings.dtype = DType::i32;
  expect_rejects<TypeError>(validating_backward(), "grad_readings", {"got int32"});
  grad_readings.dtype = DType::f32;
  grad_readings.sizes[2] = 5;
  expect_rejects<ValueError>(validating_backward(), "grad_readings", {"[P, T, hd] = [2, 5, 4]", "got [2, 5, 5]"});
}

TEST_F(BackwardValidation, RejectsGradFinalBankShapeDTypeAndDevice) {
  grad_final_bank = grad_bank_buffer.ref();
  grad_final_bank.sizes[0] = 31;
  expect_rejects<ValueError>(validating_backward(), "grad_final_bank", {"[S, hd] = [32, 4]", "got [31, 4]"});
  grad_final_bank = grad_bank_buffer.ref();
  grad_final_bank.dtype = DType::u8;
  expect_rejects<TypeError>(validating_backward(), "grad_final_bank", {"got uint8"});
  grad_final_bank = grad_bank_buffer.ref();
  grad_final_bank.device = kCuda0;
  expect_rejects<ValueError>(validating_backward(), "grad_final_bank", {"got cuda:0"});
}

TEST_F(BackwardValidation, RejectsGradientsShapedUnlikeTheirInputs) {
  for (const auto& [name, member] : kGrads) {
    SCOPED_TRACE(name);
    SetUp();
    (grads.*member).sizes[1] += 1;
    expect_rejects<ValueError>(validating_backward(), name, {"the shape of"});
  }
}

TEST_F(BackwardValidation, GradBetaFollowsTheShapeOfBeta) {
  grads.beta = grad_g.ref();  // [2, 5, 1] while beta is [2, 5]
  expect_rejects<ValueError>(validating_backward(), "grad_beta", {"the shape of beta = [2, 5]", "got [2, 5, 1]"});
}

TEST_F(BackwardValidation, RejectsGradientDTypesDevicesAndLayouts) {
  for (const auto& [name, member] : kGrads) {
    SCOPED_TRACE(name);
    SetUp();
    (grads.*member).dtype = DType::i64;
    expect_rejects<TypeError>(validating_backward(), name, {"got int64"});
    SetUp();
    (grads.*member).device = kCuda0;
    expect_rejects<ValueError>(validating_backward(), name, {"got cuda:0"});
    SetUp();
    (grads.*member).strides[0] *= 2;
    expect_rejects<ValueError>(validating_backward(), name, {"contiguous"});
  }
}

// ===================================== decode step ======================================

class DecodeValidation : public ::testing::Test {
 protected:
  // One token per stream: a [P, 1, ...] problem whose leading dims [P, 1] are the streams.
  static ProblemSpec base_spec() {
    ProblemSpec spec;
    spec.P = 3;
    spec.T = 1;
    spec.W = 3;
    spec.R = 2;
    spec.hd = 5;
    spec.slots_per_stream = 8;
    spec.beta_3d = true;
    return spec;
  }
  void SetUp() override { use(base_spec()); }
  void use(const ProblemSpec& spec) {
    pb = make_problem(spec);
    args = pb.args();
    readings_buffer = pb.make_readings(spec.bank);
    readings = readings_buffer.ref();
    options = DecodeOptions{};
  }
  DecodeShape validate(BankDTypes banks = BankDTypes::engine) const {
    return validate_decode(args, readings, options, banks);
  }
  std::function<void()> validating(BankDTypes banks = BankDTypes::engine) const {
    return [this, banks] { validate(banks); };
  }
  std::function<void()> checking_indices() const {
    return [this] { check_decode_indices(args, validate(), options); };
  }
  // Views every tensor with leading dims `lead` instead of [P, 1].
  void reshape_lead(std::initializer_list<std::int64_t> lead) {
    auto view = [&lead](const HostTensor& t, std::int64_t last) {
      TensorRef r = t.ref();
      r.ndim = static_cast<int>(lead.size()) + 1;
      int d = 0;
      for (std::int64_t s : lead) r.sizes[static_cast<std::size_t>(d++)] = s;
      r.sizes[static_cast<std::size_t>(d)] = last;
      std::int64_t stride = 1;
      for (int i = r.ndim - 1; i >= 0; --i) {
        r.strides[static_cast<std::size_t>(i)] = stride;
        stride *= r.sizes[static_cast<std::size_t>(i)];
      }
      return r;
    };
    const ProblemSpec& s = pb.spec;
    args.k_idx = view(pb.k_idx, s.W);
    args.k_val = view(pb.k_val, s.W);
    args.v = view(pb.v, s.hd);
    args.beta = view(pb.beta, 1);
    args.g = view(pb.g, s.G);
    args.q_idx = view(pb.q_idx, s.R);
    args.q_val = view(pb.q_val, s.R);
    readings = view(readings_buffer, s.hd);
  }
  std::int64_t index_at(const HostTensor& idx, std::int64_t stream, std::int64_t lane) const {
    return static_cast<std::int64_t>(idx.get(stream * idx.sizes()[2] + lane));
  }
  void set_index(HostTensor& idx, std::int64_t stream, std::int64_t lane, std::int64_t value) {
    idx.set(stream * idx.sizes()[2] + lane, static_cast<double>(value));
  }

  Problem pb;
  WriteReadArgs args;
  HostTensor readings_buffer;
  TensorRef readings;
  DecodeOptions options;
};

TEST_F(DecodeValidation, ValidArgumentsGiveTheGeometry) {
  const DecodeShape s = validate();
  EXPECT_EQ(s.streams, 3);
  EXPECT_EQ(s.W, 3);
  EXPECT_EQ(s.R, 2);
  EXPECT_EQ(s.G, 1);
  EXPECT_EQ(s.hd, 5);
  EXPECT_EQ(s.S, 24);
  EXPECT_EQ(s.bank, DType::f32);
  EXPECT_NO_THROW(check_decode_indices(args, s, options));
  options.slots_per_stream = 8;
  EXPECT_NO_THROW(check_decode_indices(args, validate(), options));
}

TEST_F(DecodeValidation, StreamsAreTheProductOfTheLeadingDims) {
  ProblemSpec spec = base_spec();
  spec.P = 6;
  use(spec);
  reshape_lead({2, 3});
  EXPECT_EQ(validate().streams, 6);
  reshape_lead({1, 2, 3});
  EXPECT_EQ(validate().streams, 6);
  reshape_lead({6});
  EXPECT_EQ(validate().streams, 6);
  options.slots_per_stream = 8;
  EXPECT_NO_THROW(check_decode_indices(args, validate(), options));
}

TEST_F(DecodeValidation, OneStreamWithoutLeadingDims) {
  ProblemSpec spec = base_spec();
  spec.P = 1;
  use(spec);
  reshape_lead({});
  EXPECT_EQ(validate().streams, 1);
  EXPECT_NO_THROW(check_decode_indices(args, validate(), options));
}

TEST_F(DecodeValidation, AcceptsPerWriteDecayInt64Bf16AndBf16Bank) {
  ProblemSpec spec = base_spec();
  spec.G = spec.W;
  spec.index = DType::i64;
  spec.input = DType::bf16;
  spec.bank = DType::bf16;
  use(spec);
  const DecodeShape s = validate();
  EXPECT_EQ(s.G, 3);
  EXPECT_EQ(s.bank, DType::bf16);
  EXPECT_NO_THROW(check_decode_indices(args, s, options));
}

TEST_F(DecodeValidation, AcceptsAbsentReadingsAndDuplicateReads) {
  readings = TensorRef{};
  set_index(pb.q_idx, 2, 1, index_at(pb.q_idx, 2, 0));
  EXPECT_NO_THROW(check_decode_indices(args, validate(), options));
}

TEST_F(DecodeValidation, ReferenceAcceptsFloat64) {
  ProblemSpec spec = base_spec();
  spec.bank = DType::f64;
  spec.input = DType::f64;
  use(spec);
  EXPECT_EQ(validate(BankDTypes::reference).bank, DType::f64);
  expect_rejects<TypeError>(validating(), "memory", {"got float64"});
}

TEST_F(DecodeValidation, RejectsBankDType) {
  args.memory.dtype = DType::f16;
  expect_rejects<TypeError>(validating(), "memory", {"bfloat16 or float32", "got float16"});
}

TEST_F(DecodeValidation, RejectsBankThatIsNot2dOrNotContiguousOrEmpty) {
  args.memory = TensorRef::contiguous(args.memory.data, DType::f32, {120});
  expect_rejects<ValueError>(validating(), "memory", {"2-D"});
  args = pb.args();
  args.memory.strides = {10, 1};
  expect_rejects<ValueError>(validating(), "memory", {"contiguous"});
  args = pb.args();
  args.memory.sizes[0] = 0;
  expect_rejects<ValueError>(validating(), "memory", {"rows"});
  args = pb.args();
  args.memory.sizes[1] = 0;
  expect_rejects<ValueError>(validating(), "memory", {"columns"});
}

TEST_F(DecodeValidation, RejectsIndexDTypes) {
  args.k_idx.dtype = DType::f16;
  expect_rejects<TypeError>(validating(), "k_idx", {"int32 or int64", "got float16"});
  args = pb.args();
  args.q_idx.dtype = DType::f64;
  expect_rejects<TypeError>(validating(), "q_idx", {"int32 or int64", "got float64"});
}

TEST_F(DecodeValidation, RejectsFloatInputDTypes) {
  for (const auto& [name, member] : kFloatInputs) {
    SCOPED_TRACE(name);
    args = pb.args();
    (args.*member).dtype = DType::u8;
    expect_rejects<TypeError>(validating(), name, {"got uint8"});
  }
}

TEST_F(DecodeValidation, RejectsZeroSizedStreamDim) {
  args.k_idx.sizes[0] = 0;
  expect_rejects<ValueError>(validating(), "k_idx", {"leading", "got 0"});
}

TEST_F(DecodeValidation, RejectsWAndROutside1To256) {
  HostTensor wide(DType::i32, {3, 1, 257});
  args.k_idx = wide.ref();
  expect_rejects<ValueError>(validating(), "k_idx", {"1..256", "got 257"});
  args = pb.args();
  args.q_idx = wide.ref();
  expect_rejects<ValueError>(validating(), "q_idx", {"1..256", "got 257"});
  args.q_idx.sizes[2] = 0;
  expect_rejects<ValueError>(validating(), "q_idx", {"1..256", "got 0"});
}

TEST_F(DecodeValidation, RejectsTensorsWithOtherLeadingDims) {
  for (const auto& [name, member] : kNonBankTensors) {
    if (std::string(name) == "k_idx") continue;  // k_idx defines the leading dims
    SCOPED_TRACE(name);
    args = pb.args();
    (args.*member).sizes[0] = 2;
    expect_rejects<ValueError>(validating(), name, {"[..., ", "got [2, 1, "});
  }
}

TEST_F(DecodeValidation, RejectsQIdxWithAnotherRank) {
  args.q_idx = TensorRef::contiguous(args.q_idx.data, DType::i32, {3, 2});
  expect_rejects<ValueError>(validating(), "q_idx", {"3-D", "got shape [3, 2]"});
}

TEST_F(DecodeValidation, RejectsLastDimOfEachInput) {
  const struct {
    const char* name;
    TensorRef WriteReadArgs::*member;
    std::int64_t bad_last;
    const char* expected;
  } cases[] = {
      {"k_val", &WriteReadArgs::k_val, 2, "[..., W] = [3, 1, 3]"},
      {"v", &WriteReadArgs::v, 4, "[..., hd] = [3, 1, 5]"},
      {"beta", &WriteReadArgs::beta, 3, "[..., 1] = [3, 1, 1]"},
      {"g", &WriteReadArgs::g, 2, "[..., 1] = [3, 1, 1] or [..., W] = [3, 1, 3]"},
      {"q_val", &WriteReadArgs::q_val, 3, "[..., R] = [3, 1, 2]"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    args = pb.args();
    (args.*c.member).sizes[2] = c.bad_last;
    expect_rejects<ValueError>(validating(), c.name, {c.expected, "got [3, 1, " + std::to_string(c.bad_last) + "]"});
  }
}

TEST_F(DecodeValidation, RejectsInputsOnAnotherDeviceOrNonContiguous) {
  for (const auto& [name, member] : kNonBankTensors) {
    SCOPED_TRACE(name);
    args = pb.args();
    (args.*member).device = kCuda0;
    expect_rejects<ValueError>(validating(), name, {"cpu", "got cuda:0"});
    args = pb.args();
    (args.*member).strides[0] *= 2;
    expect_rejects<ValueError>(validating(), name, {"contiguous"});
  }
}

TEST_F(DecodeValidation, RejectsReadingsDTypeShapeAndDevice) {
  readings.dtype = DType::bf16;
  expect_rejects<TypeError>(validating(), "readings", {"float32", "got bfloat16"});
  EXPECT_NO_THROW(validate(BankDTypes::reference));
  readings = readings_buffer.ref();
  readings.sizes[2] = 4;
  expect_rejects<ValueError>(validating(), "readings", {"[..., hd] = [3, 1, 5]"});
  readings = readings_buffer.ref();
  readings.device = kCuda0;
  expect_rejects<ValueError>(validating(), "readings", {"got cuda:0"});
}

TEST_F(DecodeValidation, RejectsNegativeSlotsPerStream) {
  options.slots_per_stream = -1;
  expect_rejects<ValueError>(validating(), "slots_per_stream", {">= 0", "got -1"});
}

TEST_F(DecodeValidation, RejectsBankSmallerThanItsStreams) {
  options.slots_per_stream = 9;
  expect_rejects<ValueError>(validating(), "memory", {"3 * 9 = 27", "got 24"});
}

TEST_F(DecodeValidation, RejectsIndexOutsideTheBank) {
  set_index(pb.k_idx, 2, 1, 24);
  expect_rejects<ValueError>(checking_indices(), "k_idx",
                             {"k_idx[stream 2, lane 1] = 24 is outside the bank's rows [0, 24)"});
  set_index(pb.k_idx, 2, 1, 16);
  set_index(pb.q_idx, 0, 0, -5);
  expect_rejects<ValueError>(checking_indices(), "q_idx", {"q_idx[stream 0, lane 0] = -5", "[0, 24)"});
}

TEST_F(DecodeValidation, RejectsIndexOutsideItsStreamWhenStreamsAreGiven) {
  set_index(pb.q_idx, 1, 1, 2);  // inside the bank, in stream 0's rows
  EXPECT_NO_THROW(check_decode_indices(args, validate(), options));
  options.slots_per_stream = 8;
  expect_rejects<ValueError>(checking_indices(), "q_idx",
                             {"q_idx[stream 1, lane 1] = 2 is outside stream 1's rows [8, 16)"});
}

TEST_F(DecodeValidation, RejectsRepeatedWriteSlot) {
  set_index(pb.k_idx, 1, 2, index_at(pb.k_idx, 1, 1));
  expect_rejects<ValueError>(checking_indices(), "k_idx", {"k_idx[stream 1, lane 2]", "repeats lane 1"});
}

TEST_F(DecodeValidation, ReportsTheFirstViolationInStreamLaneOrder) {
  set_index(pb.k_idx, 2, 0, 100);
  set_index(pb.q_idx, 1, 1, 100);
  set_index(pb.q_idx, 1, 0, 101);
  expect_rejects<ValueError>(checking_indices(), "q_idx", {"q_idx[stream 1, lane 0] = 101"});
}

}  // namespace
}  // namespace sdm::core

// Size rules that must hold without 64-bit wrap-around, and the overlap rule (no tensor the
// call writes may share bytes with another argument), for the chunked op, its backward and the
// decode step (src/core/validate.hpp). Each test breaks one thing of a valid problem and checks
// the exception, the argument it names and the message.
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <limits>

#include "core/validate.hpp"
#include "sdm/error.hpp"
#include "support/expect_rejects.hpp"
#include "support/problem.hpp"

namespace sdm::core {
namespace {

using testing::expect_rejects;
using testing::HostTensor;
using testing::make_problem;
using testing::Problem;
using testing::ProblemSpec;

constexpr std::int64_t kHuge = std::int64_t{1} << 62;

ProblemSpec small_spec() {
  ProblemSpec spec;
  spec.P = 2;
  spec.T = 5;
  spec.W = 3;
  spec.R = 2;
  spec.hd = 4;
  spec.slots_per_stream = 4;
  return spec;
}

class SizeRules : public ::testing::Test {
 protected:
  void SetUp() override {
    pb = make_problem(small_spec());
    args = pb.args();
    readings_buffer = pb.make_readings(DType::f32);
    readings = readings_buffer.ref();
    options.slots_per_stream = 4;
    options.chunk_size = 4;
  }
  std::function<void()> validating() const {
    return [this] { validate_write_read(args, readings, options, BankDTypes::engine); };
  }

  Problem pb;
  WriteReadArgs args;
  HostTensor readings_buffer;
  TensorRef readings;
  WriteReadOptions options;
};

// P * slots_per_stream would wrap to a small number (2 * 2^62 = 2^63 -> negative; 4 * 2^62 = 0).
TEST_F(SizeRules, SlotsPerStreamWhoseProductWrapsIsRefusedByName) {
  for (std::int64_t slots : {kHuge, std::numeric_limits<std::int64_t>::max(), std::int64_t{1} << 31}) {
    SCOPED_TRACE(slots);
    options.slots_per_stream = slots;
    expect_rejects<ValueError>(validating(), "slots_per_stream", {"too large", std::to_string(slots), "2^31 - 1"});
  }
}

TEST_F(SizeRules, SlotsPerStreamBeyondTheBankNamesTheBank) {
  options.slots_per_stream = 5;  // 2 * 5 = 10 rows, the bank has 8
  expect_rejects<ValueError>(validating(), "memory", {"2 * 5 = 10 rows", "got 8"});
}

TEST_F(SizeRules, DecodeSlotsPerStreamWhoseProductWrapsIsRefusedByName) {
  DecodeOptions decode;
  decode.slots_per_stream = kHuge;
  ProblemSpec spec = small_spec();
  spec.T = 1;
  spec.beta_3d = true;
  const Problem one = make_problem(spec);
  const HostTensor out = one.make_readings(DType::f32);
  expect_rejects<ValueError>([&] { validate_decode(one.args(), out.ref(), decode, BankDTypes::engine); },
                             "slots_per_stream", {"too large"});
}

// Data-less views (as the shape-only entry points see meta tensors) of sizes no memory holds.
TEST_F(SizeRules, TensorWithMoreThan2To52ElementsIsRefused) {
  args.v = TensorRef{};
  args.v.dtype = DType::f32;
  args.v.ndim = 3;
  args.v.sizes = {2, std::int64_t{1} << 40, std::int64_t{1} << 40};
  args.v.strides = {std::int64_t{1} << 62, std::int64_t{1} << 40, 1};
  readings = TensorRef{};
  expect_rejects<ValueError>(validating(), "v", {"more than 2^52 elements"});
}

TEST_F(SizeRules, CallWhoseWorkingArraysExceed2To52ElementsIsRefused) {
  // P 2, T 2^30 tokens, W 256, hd 2^20: each tensor is under 2^52 elements, the entry rows
  // P * T * W * hd (the snapshot) are 2^59.
  const std::int64_t T = std::int64_t{1} << 30, W = 256, hd = std::int64_t{1} << 20;
  auto view = [](DType dtype, std::initializer_list<std::int64_t> sizes) {
    return TensorRef::contiguous(nullptr, dtype, sizes);
  };
  WriteReadArgs big;
  big.memory = view(DType::f32, {1024, hd});
  big.k_idx = view(DType::i32, {2, T, W});
  big.k_val = view(DType::f32, {2, T, W});
  big.v = view(DType::f32, {2, T, hd});
  big.beta = view(DType::f32, {2, T});
  big.g = view(DType::f32, {2, T, 1});
  big.q_idx = view(DType::i32, {2, T, 1});
  big.q_val = view(DType::f32, {2, T, 1});
  options.slots_per_stream = 512;
  options.chunk_size = 64;
  expect_rejects<ValueError>([&] { validate_write_read(big, TensorRef{}, options, BankDTypes::engine); }, "k_idx",
                             {"too large", "exceeds 2^52"});
}

// ---- overlap with the bank and the outputs ----------------------------------------------

class OverlapRules : public SizeRules {};

TEST_F(OverlapRules, InputThatViewsTheBankIsRefused) {
  // v [2, 5, 4] as a view of the bank's first 40 floats (the bank holds 8 x 4 = 32: take 40
  // floats of a larger bank).
  ProblemSpec spec = small_spec();
  spec.extra_rows = 8;
  pb = make_problem(spec);
  args = pb.args();
  args.v.data = pb.memory.ref().data;
  expect_rejects<ValueError>(validating(), "v", {"shares memory with memory (the bank)", "v.clone()"});
}

TEST_F(OverlapRules, EveryInputSharingTheBanksBytesIsRefused) {
  // Each input, pointed at the bank's last bytes (partial overlap).
  const std::vector<std::pair<const char*, TensorRef WriteReadArgs::*>> inputs = {
      {"k_idx", &WriteReadArgs::k_idx}, {"k_val", &WriteReadArgs::k_val}, {"v", &WriteReadArgs::v},
      {"beta", &WriteReadArgs::beta},   {"g", &WriteReadArgs::g},         {"q_idx", &WriteReadArgs::q_idx},
      {"q_val", &WriteReadArgs::q_val}};
  for (const auto& [name, member] : inputs) {
    SCOPED_TRACE(name);
    args = pb.args();
    auto* bank_end = static_cast<unsigned char*>(pb.memory.ref().data) + pb.memory.numel() * 4;
    (args.*member).data = bank_end - 4;
    expect_rejects<ValueError>(validating(), name, {"shares memory with memory"});
  }
}

TEST_F(OverlapRules, InputSharingTheReadingsIsRefused) {
  args.q_val.data = readings.data;
  expect_rejects<ValueError>(validating(), "q_val", {"shares memory with readings"});
}

TEST_F(OverlapRules, ReadingsInsideTheBankAreRefused) {
  ProblemSpec spec = small_spec();
  spec.extra_rows = 8;  // 16 x 4 floats = 64 >= the 40 of readings
  pb = make_problem(spec);
  args = pb.args();
  readings.data = pb.memory.ref().data;
  expect_rejects<ValueError>(validating(), "memory", {"shares memory with readings"});
}

TEST_F(OverlapRules, AdjacentTensorsDoNotOverlap) {
  // v placed right after the bank's last byte: touching is not sharing.
  HostTensor joint(DType::f32, {8 * 4 + 2 * 5 * 4});
  args.memory.data = joint.ref().data;
  args.v.data = static_cast<float*>(joint.ref().data) + 8 * 4;
  EXPECT_NO_THROW(validating()());
}

TEST_F(OverlapRules, GradientOutputSharingAnInputOrAnotherGradientIsRefused) {
  const WriteReadShape shape = validate_write_read(args, TensorRef{}, options, BankDTypes::engine);
  const HostTensor dy = pb.make_readings(DType::f32);
  HostTensor grad_bank(DType::f32, {8, 4}), grad_k_val(DType::f32, {2, 5, 3}), grad_v(DType::f32, {2, 5, 4});
  WriteReadGrads grads;
  grads.memory = grad_bank.ref();
  grads.k_val = grad_k_val.ref();
  grads.v = grad_v.ref();
  auto backward = [&] { validate_write_read_backward(args, shape, dy.ref(), TensorRef{}, grads); };
  EXPECT_NO_THROW(backward());

  grads.v.data = args.v.data;  // grad_v written over v
  expect_rejects<ValueError>(backward, "v", {"shares memory with grad_v"});
  grads.v = grad_v.ref();
  grads.k_val.data = grads.memory.data;  // two gradients in one buffer
  expect_rejects<ValueError>(backward, "grad_k_val", {"shares memory with grad_memory"});
  grads.k_val = grad_k_val.ref();
  grads.memory.data = dy.ref().data;  // the bank gradient over grad_readings
  expect_rejects<ValueError>(backward, "grad_readings", {"shares memory with grad_memory"});
}

TEST_F(OverlapRules, DecodeInputThatViewsTheBankIsRefused) {
  ProblemSpec spec = small_spec();
  spec.T = 1;
  spec.beta_3d = true;
  Problem one = make_problem(spec);
  WriteReadArgs decode_args = one.args();
  decode_args.k_val.data = decode_args.memory.data;
  const HostTensor out = one.make_readings(DType::f32);
  expect_rejects<ValueError>(
      [&] { validate_decode(decode_args, out.ref(), DecodeOptions{}, BankDTypes::engine); }, "k_val",
      {"shares memory with memory (the bank)"});
}

}  // namespace
}  // namespace sdm::core

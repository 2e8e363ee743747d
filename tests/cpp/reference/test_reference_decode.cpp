// The float64 reference decode step (src/cpu/reference): T single steps (one token of every
// stream per step) against one reference forward of T tokens, and its rounding contract
// (docs/spec.md §9).
#include <gtest/gtest.h>

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "sdm/reference.hpp"
#include "support/problem.hpp"

namespace sdm::testing {
namespace {

ProblemSpec spec_of(std::int64_t P, std::int64_t T, std::int64_t W, std::int64_t R, std::int64_t hd,
                    std::int64_t slots_per_stream, std::int64_t G, DType bank, std::uint64_t seed) {
  ProblemSpec s;
  s.P = P, s.T = T, s.W = W, s.R = R, s.hd = hd, s.slots_per_stream = slots_per_stream, s.G = G, s.seed = seed;
  s.bank = bank;
  s.input = bank == DType::f64 ? DType::f64 : DType::f32;
  return s;
}

// Token t of a [P, T, ...] tensor as a [lead..., last] tensor (lead multiplies out to P).
HostTensor token_slice(const HostTensor& x, std::int64_t P, std::int64_t T, std::int64_t t,
                       std::vector<std::int64_t> lead) {
  const std::int64_t last = x.numel() / (P * T);
  lead.push_back(last);
  HostTensor out(x.dtype(), lead);
  for (std::int64_t p = 0; p < P; ++p) {
    for (std::int64_t i = 0; i < last; ++i) out.set(p * last + i, x.get((p * T + t) * last + i));
  }
  return out;
}

// The inputs of decode step t: one token per stream.
struct StepInputs {
  HostTensor k_idx, k_val, v, beta, g, q_idx, q_val;
  WriteReadArgs args(const HostTensor& bank) const {
    return {bank.ref(), k_idx.ref(), k_val.ref(), v.ref(), beta.ref(), g.ref(), q_idx.ref(), q_val.ref()};
  }
};

StepInputs step_inputs(const Problem& pb, std::int64_t t, const std::vector<std::int64_t>& lead) {
  const std::int64_t P = pb.spec.P, T = pb.spec.T;
  return {token_slice(pb.k_idx, P, T, t, lead), token_slice(pb.k_val, P, T, t, lead),
          token_slice(pb.v, P, T, t, lead),     token_slice(pb.beta, P, T, t, lead),
          token_slice(pb.g, P, T, t, lead),     token_slice(pb.q_idx, P, T, t, lead),
          token_slice(pb.q_val, P, T, t, lead)};
}

DecodeOptions decode_options(const Problem& pb) {
  DecodeOptions options;
  options.slots_per_stream = pb.spec.slots_per_stream;
  return options;
}

struct Config {
  const char* name;
  ProblemSpec spec;
  std::vector<std::int64_t> lead;  // the streams' leading dims
};
void PrintTo(const Config& c, std::ostream* os) { *os << c.name; }

class DecodeSteps : public ::testing::TestWithParam<Config> {};

// Bitwise in float64: the forward and the decode step run the same compiled write_token and
// read_token (src/cpu/reference/recurrence.cpp) on the same float64 values in the same order:
// an f64 bank stores and loads rows unchanged, the inputs are not rounded for an f64 bank, and
// streams own private rows, so running them stream-major (forward) or token-major (decode)
// changes no value.
TEST_P(DecodeSteps, EqualOneForwardBitwise) {
  const Problem pb = make_problem(GetParam().spec);
  const std::int64_t P = pb.spec.P, T = pb.spec.T, hd = pb.spec.hd;

  HostTensor forward_bank = pb.memory, forward_readings = pb.make_readings(DType::f64);
  WriteReadArgs args = pb.args();
  args.memory = forward_bank.ref();
  WriteReadOptions options;
  options.slots_per_stream = pb.spec.slots_per_stream;
  reference::write_read_forward(args, forward_readings.ref(), options);

  HostTensor decode_bank = pb.memory, decode_readings = pb.make_readings(DType::f64);
  for (std::int64_t t = 0; t < T; ++t) {
    const StepInputs in = step_inputs(pb, t, GetParam().lead);
    std::vector<std::int64_t> y_sizes = GetParam().lead;
    y_sizes.push_back(hd);
    HostTensor y(DType::f64, y_sizes);
    reference::decode_step(in.args(decode_bank), y.ref(), decode_options(pb));
    for (std::int64_t p = 0; p < P; ++p) {
      for (std::int64_t c = 0; c < hd; ++c) decode_readings.set((p * T + t) * hd + c, y.get(p * hd + c));
    }
  }
  EXPECT_TRUE(decode_bank.bitwise_equal(forward_bank));
  EXPECT_TRUE(decode_readings.bitwise_equal(forward_readings));
  EXPECT_FALSE(decode_bank.bitwise_equal(pb.memory));
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, DecodeSteps,
    ::testing::Values(Config{"p3_g1", spec_of(3, 11, 3, 2, 5, 6, 1, DType::f64, 1), {3}},
                      Config{"p3_gW", spec_of(3, 11, 4, 5, 7, 9, 4, DType::f64, 2), {3}},
                      Config{"b2_h3_gW", spec_of(6, 8, 2, 3, 3, 4, 2, DType::f64, 3), {2, 3}}),
    [](const auto& param_info) { return std::string(param_info.param.name); });

// A narrow bank: each step stores the written rows rounded once (as one forward token does)
// and the readings read the rounded rows: y = sum_r q_val_r * bank_after[q_idx_r].
TEST(Decode, NarrowBankRoundsWrittenRowsOncePerStep) {
  for (const DType bank_dtype : {DType::bf16, DType::f32}) {
    SCOPED_TRACE(dtype_name(bank_dtype));
    const Problem pb = make_problem(spec_of(2, 6, 3, 3, 5, 5, 3, bank_dtype, 4));
    const std::int64_t P = pb.spec.P, hd = pb.spec.hd, R = pb.spec.R;
    HostTensor bank = pb.memory;
    for (std::int64_t t = 0; t < pb.spec.T; ++t) {
      const StepInputs in = step_inputs(pb, t, {P});
      // One forward token ([P, 1, ...] inputs) from the same bank.
      HostTensor forward_bank = bank;
      WriteReadOptions options;
      options.slots_per_stream = pb.spec.slots_per_stream;
      reference::write_read_forward(step_inputs(pb, t, {P, 1}).args(forward_bank), TensorRef{}, options);

      HostTensor y(DType::f64, {P, hd});
      reference::decode_step(in.args(bank), y.ref(), decode_options(pb));
      ASSERT_TRUE(bank.bitwise_equal(forward_bank)) << "step " << t;
      for (std::int64_t p = 0; p < P; ++p) {
        for (std::int64_t c = 0; c < hd; ++c) {
          double expected = 0.0;
          for (std::int64_t r = 0; r < R; ++r) {
            const double rho = in.q_val.to(bank_dtype).get(p * R + r);
            expected += rho * bank.get(static_cast<std::int64_t>(in.q_idx.get(p * R + r)) * hd + c);
          }
          EXPECT_EQ(y.get(p * hd + c), expected) << "step " << t << " stream " << p << " column " << c;
        }
      }
    }
  }
}

// With validate = false an index outside the bank (slots_per_stream = 0) is masked: the same
// as a write lane with k_val = g = 0.
TEST(Decode, MaskedEntryIsANoOp) {
  const Problem pb = make_problem(spec_of(2, 1, 3, 2, 4, 5, 3, DType::f64, 5));
  StepInputs masked = step_inputs(pb, 0, {2}), zeroed = step_inputs(pb, 0, {2});
  masked.k_idx.set(4, static_cast<double>(pb.bank_rows() + 1));  // stream 1, lane 1
  zeroed.k_val.set(4, 0.0);
  zeroed.g.set(4, 0.0);
  HostTensor masked_bank = pb.memory, zeroed_bank = pb.memory;
  HostTensor masked_y(DType::f64, {2, 4}), zeroed_y(DType::f64, {2, 4});
  DecodeOptions options;
  options.validate = false;
  reference::decode_step(masked.args(masked_bank), masked_y.ref(), options);
  reference::decode_step(zeroed.args(zeroed_bank), zeroed_y.ref(), DecodeOptions{});
  EXPECT_EQ(rel_error(masked_bank, zeroed_bank), 0.0);
  EXPECT_EQ(rel_error(masked_y, zeroed_y), 0.0);
  EXPECT_FALSE(masked_bank.bitwise_equal(pb.memory));
}

}  // namespace
}  // namespace sdm::testing

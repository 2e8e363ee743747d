// The CPU decode step (sdm::decode_step on a CPU bank, src/cpu/engine/decode.cpp) against
// the float64 reference: one step at a time, T steps against the reference forward,
// thread-count invariance, leading dims, and masked out-of-range entries (docs/spec.md §8, §9,
// Z.10).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>
#include <ostream>
#include <set>
#include <string>
#include <vector>

#include "core/validate.hpp"
#include "cpu/engine/decode.hpp"
#include "sdm/sdm.hpp"
#include "support/host_tensor.hpp"
#include "support/problem.hpp"
#include "support/scoped_env.hpp"

namespace sdm {
namespace {

using testing::HostTensor;
using testing::Problem;
using testing::ProblemSpec;
using testing::make_problem;
using testing::rel_error;

// Relative error tolerances against the float64 reference for one decode step (docs/spec.md §3:
// f32 arithmetic, written rows and readings rounded once to the bank dtype). bf16: the
// engine's f32 row can round to the neighbouring bf16 value of the reference's (2^-8).
constexpr double kStepTolF32 = 1e-6;
constexpr double kStepTolBf16 = 1e-2;

double step_tolerance(DType bank) { return bank == DType::f32 ? kStepTolF32 : kStepTolBf16; }

// Token t of every stream of `pb`, as decode inputs with leading dims [P, 1].
struct TokenInputs {
  HostTensor k_idx, k_val, v, beta, g, q_idx, q_val;

  WriteReadArgs args(const TensorRef& memory) const {
    return {memory, k_idx.ref(), k_val.ref(), v.ref(), beta.ref(), g.ref(), q_idx.ref(), q_val.ref()};
  }
};

HostTensor token_slice(const HostTensor& x, std::int64_t t) {
  const auto& sz = x.sizes();
  const std::int64_t P = sz[0], T = sz[1], last = sz.size() == 3 ? sz[2] : 1;
  HostTensor out(x.dtype(), {P, 1, last});
  for (std::int64_t p = 0; p < P; ++p) {
    for (std::int64_t l = 0; l < last; ++l) out.set(p * last + l, x.get((p * T + t) * last + l));
  }
  return out;
}

TokenInputs token_inputs(const Problem& pb, std::int64_t t) {
  return {token_slice(pb.k_idx, t), token_slice(pb.k_val, t), token_slice(pb.v, t), token_slice(pb.beta, t),
          token_slice(pb.g, t),     token_slice(pb.q_idx, t), token_slice(pb.q_val, t)};
}

HostTensor step_readings(const Problem& pb, DType dtype) { return HostTensor(dtype, {pb.spec.P, 1, pb.spec.hd}); }

// Rows of `bank` [S, hd] listed in `rows`, flattened, as doubles.
std::vector<double> gather_rows(const HostTensor& bank, const std::set<std::int64_t>& rows) {
  const std::int64_t hd = bank.sizes()[1];
  std::vector<double> out;
  for (std::int64_t row : rows) {
    for (std::int64_t c = 0; c < hd; ++c) out.push_back(bank.get(row * hd + c));
  }
  return out;
}

std::set<std::int64_t> written_rows(const TokenInputs& tok) {
  std::set<std::int64_t> rows;
  for (std::int64_t i = 0; i < tok.k_idx.numel(); ++i) rows.insert(static_cast<std::int64_t>(tok.k_idx.get(i)));
  return rows;
}

// True when every row of `a` outside `except` is bit-identical to the same row of `b`.
bool other_rows_bitwise_equal(const HostTensor& a, const HostTensor& b, const std::set<std::int64_t>& except) {
  const std::int64_t rows = a.sizes()[0], hd = a.sizes()[1];
  for (std::int64_t row = 0; row < rows; ++row) {
    if (except.count(row)) continue;
    for (std::int64_t c = 0; c < hd; ++c) {
      const double x = a.get(row * hd + c), y = b.get(row * hd + c);
      if (std::memcmp(&x, &y, sizeof x) != 0) return false;
    }
  }
  return true;
}

struct StepCase {
  const char* name;
  ProblemSpec spec;
  std::int64_t options_slots_per_stream;  // DecodeOptions::slots_per_stream (0 or spec's)
  bool q_idx_i64 = false;                 // q_idx int64 while k_idx is int32
};

// The shared spec_of with the decode tests' extras: index and input dtypes, beta [P, T, 1] up to 0.9.
ProblemSpec decode_spec(std::int64_t P, std::int64_t T, std::int64_t W, std::int64_t R, std::int64_t hd,
                        std::int64_t sps, std::int64_t G, DType bank, DType index, DType input, std::uint64_t seed) {
  ProblemSpec s = sdm::testing::spec_of(P, T, W, R, hd, sps, G, bank, seed);
  s.index = index;
  s.input = input;
  s.beta_3d = true;
  s.beta_max = 0.9;
  return s;
}

void PrintTo(const StepCase& c, std::ostream* os) { *os << c.name; }

class DecodeStep : public ::testing::TestWithParam<StepCase> {};

// Each step starts the reference from the engine's bank, so every step is measured alone.
TEST_P(DecodeStep, MatchesReferenceStepByStep) {
  const StepCase& c = GetParam();
  Problem pb = make_problem(c.spec);
  if (c.q_idx_i64) pb.q_idx = pb.q_idx.to(DType::i64);
  const double tol = step_tolerance(c.spec.bank);
  DecodeOptions options;
  options.slots_per_stream = c.options_slots_per_stream;
  HostTensor bank = pb.memory;
  for (std::int64_t t = 0; t < c.spec.T; ++t) {
    const TokenInputs tok = token_inputs(pb, t);
    if (c.q_idx_i64) {
      ASSERT_EQ(tok.q_idx.dtype(), DType::i64);
    }
    HostTensor ref_bank = bank;
    const HostTensor before = bank;
    HostTensor readings = step_readings(pb, c.spec.bank), ref_readings = step_readings(pb, DType::f64);
    decode_step(tok.args(bank.ref()), readings.ref(), options);
    reference::decode_step(tok.args(ref_bank.ref()), ref_readings.ref(), options);

    const auto rows = written_rows(tok);
    const double readings_err = rel_error(readings.to_f64(), ref_readings.to_f64());
    const double rows_err = rel_error(gather_rows(bank, rows), gather_rows(ref_bank, rows));
    EXPECT_LE(readings_err, tol) << "step " << t;
    EXPECT_LE(rows_err, tol) << "step " << t;
    EXPECT_GT(rel_error(gather_rows(bank, rows), gather_rows(before, rows)), 0.0) << "rows were not written";
    EXPECT_TRUE(other_rows_bitwise_equal(bank, before, rows)) << "an unwritten row changed at step " << t;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cases, DecodeStep,
    ::testing::Values(
        StepCase{"f32_hd5_G1_i32_f32in", decode_spec(3, 4, 4, 3, 5, 16, 1, DType::f32, DType::i32, DType::f32, 11), 16},
        StepCase{"f32_hd70_GW_i64_bf16in", decode_spec(2, 3, 3, 5, 70, 32, 3, DType::f32, DType::i64, DType::bf16, 12),
                 32},
        StepCase{"f32_hd1_W1_R1_f16in", decode_spec(1, 5, 1, 1, 1, 4, 1, DType::f32, DType::i32, DType::f16, 13), 4},
        StepCase{"f32_W64_R48_hd64", decode_spec(2, 2, 64, 48, 64, 256, 64, DType::f32, DType::i32, DType::f32, 14), 256},
        StepCase{"f32_mixed_index_sps0", decode_spec(2, 3, 6, 2, 9, 8, 6, DType::f32, DType::i32, DType::f32, 15), 0,
                 true},
        StepCase{"bf16_hd130_GW_i32_f32in", decode_spec(4, 3, 8, 6, 130, 64, 8, DType::bf16, DType::i32, DType::f32, 16),
                 64},
        StepCase{"bf16_hd33_G1_i64_f16in_sps0", decode_spec(3, 4, 5, 4, 33, 16, 1, DType::bf16, DType::i64, DType::f16, 17),
                 0},
        StepCase{"bf16_hd3_bf16in", decode_spec(2, 4, 2, 7, 3, 8, 2, DType::bf16, DType::i32, DType::bf16, 18), 8}),
    [](const ::testing::TestParamInfo<StepCase>& param) { return std::string(param.param.name); });

// Runs every token of `pb` as one decode step per token on `bank`; returns readings [P, T, hd].
HostTensor run_decode_steps(const Problem& pb, HostTensor& bank, const DecodeOptions& options) {
  const auto& s = pb.spec;
  HostTensor all(s.bank, {s.P, s.T, s.hd});
  for (std::int64_t t = 0; t < s.T; ++t) {
    const TokenInputs tok = token_inputs(pb, t);
    HostTensor readings = step_readings(pb, s.bank);
    decode_step(tok.args(bank.ref()), readings.ref(), options);
    for (std::int64_t p = 0; p < s.P; ++p) {
      for (std::int64_t c = 0; c < s.hd; ++c) all.set((p * s.T + t) * s.hd + c, readings.get(p * s.hd + c));
    }
  }
  return all;
}

// T decode steps on an f32 bank against the float64 forward over the same T tokens. The
// engine rounds the bank to f32 after every token, the reference once at the end; over
// T = 48 steps with every slot revisited many times the measured error is ~1.4e-7.
TEST(DecodeSteps, EqualTheReferenceForward) {
  constexpr double kTol = 2e-6;
  for (std::int64_t G : {1, 4}) {
    const Problem pb = make_problem(decode_spec(2, 48, 4, 3, 9, 8, G, DType::f32, DType::i32, DType::f32, 21 + G));
    DecodeOptions options;
    options.slots_per_stream = pb.spec.slots_per_stream;
    HostTensor bank = pb.memory;
    const HostTensor readings = run_decode_steps(pb, bank, options);

    HostTensor ref_bank = pb.memory;
    HostTensor ref_readings = pb.make_readings(DType::f64);
    WriteReadOptions fwd;
    fwd.slots_per_stream = pb.spec.slots_per_stream;
    WriteReadArgs args = pb.args();
    args.memory = ref_bank.ref();
    reference::write_read_forward(args, ref_readings.ref(), fwd);

    EXPECT_LE(rel_error(readings.to_f64(), ref_readings.to_f64()), kTol) << "G=" << G;
    EXPECT_LE(rel_error(bank, ref_bank), kTol) << "G=" << G;
    EXPECT_GT(rel_error(bank, pb.memory), 0.0) << "the bank did not change";
  }
}

// Runs every token of `pb` on `bank` through the engine with exactly `threads` workers.
HostTensor run_decode_steps_on_threads(const Problem& pb, HostTensor& bank, const DecodeOptions& options,
                                       int threads) {
  const auto& s = pb.spec;
  HostTensor all(s.bank, {s.P, s.T, s.hd});
  for (std::int64_t t = 0; t < s.T; ++t) {
    const TokenInputs tok = token_inputs(pb, t);
    HostTensor readings = step_readings(pb, s.bank);
    const WriteReadArgs args = tok.args(bank.ref());
    const core::DecodeShape shape = core::validate_decode(args, readings.ref(), options, core::BankDTypes::engine);
    cpu::decode_step_on_threads(args, readings.ref(), shape, options, threads);
    for (std::int64_t p = 0; p < s.P; ++p) {
      for (std::int64_t c = 0; c < s.hd; ++c) all.set((p * s.T + t) * s.hd + c, readings.get(p * s.hd + c));
    }
  }
  return all;
}

// hd = 200 makes 4 column tiles per stream, 12 items in all, which 1, 2, 3, 4 and 7
// workers split differently.
TEST(DecodeSteps, BitwiseIndependentOfWorkerCount) {
  for (DType bank_dtype : {DType::f32, DType::bf16}) {
    const Problem pb = make_problem(decode_spec(3, 4, 6, 5, 200, 16, 6, bank_dtype, DType::i32, DType::f32, 31));
    DecodeOptions options;
    options.slots_per_stream = pb.spec.slots_per_stream;
    HostTensor first_bank = pb.memory;
    const HostTensor first_readings = run_decode_steps_on_threads(pb, first_bank, options, 1);
    for (int threads : {2, 3, 4, 7}) {
      HostTensor bank = pb.memory;
      const HostTensor readings = run_decode_steps_on_threads(pb, bank, options, threads);
      EXPECT_TRUE(bank.bitwise_equal(first_bank)) << dtype_name(bank_dtype) << " threads=" << threads;
      EXPECT_TRUE(readings.bitwise_equal(first_readings)) << dtype_name(bank_dtype) << " threads=" << threads;
    }
  }
}

// Through the public entry point: a step large enough (4 streams x 192 rows of 1 KiB) to
// be split over the configured threads gives the same bits for SDM_NUM_THREADS 1, 2, 4.
TEST(DecodeSteps, BitwiseIndependentOfSdmNumThreads) {
  const Problem pb = make_problem(decode_spec(4, 2, 64, 64, 256, 256, 1, DType::f32, DType::i64, DType::f32, 32));
  DecodeOptions options;
  options.slots_per_stream = pb.spec.slots_per_stream;
  std::optional<HostTensor> first_bank, first_readings;
  for (const char* threads : {"1", "2", "4"}) {
    const testing::ScopedEnv env("SDM_NUM_THREADS", threads);
    HostTensor bank = pb.memory;
    const HostTensor readings = run_decode_steps(pb, bank, options);
    if (!first_bank) {
      first_bank = bank;
      first_readings = readings;
      continue;
    }
    EXPECT_TRUE(bank.bitwise_equal(*first_bank)) << "SDM_NUM_THREADS=" << threads;
    EXPECT_TRUE(readings.bitwise_equal(*first_readings)) << "SDM_NUM_THREADS=" << threads;
  }
}

// Leading dims [B, H] = [2, 3] give the same bits as the flattened [6] streams.
TEST(DecodeSteps, LeadingDimsEqualFlattenedStreams) {
  for (DType bank_dtype : {DType::f32, DType::bf16}) {
    const Problem pb = make_problem(decode_spec(6, 1, 3, 4, 10, 8, 1, bank_dtype, DType::i64, DType::f32, 41));
    const std::int64_t W = 3, R = 4, hd = 10;
    DecodeOptions options;
    options.slots_per_stream = 8;

    HostTensor flat_bank = pb.memory, flat_readings(bank_dtype, {6, hd});
    auto view = [](const HostTensor& t, std::initializer_list<std::int64_t> sizes) {
      return TensorRef::contiguous(t.ref().data, t.dtype(), sizes);
    };
    const WriteReadArgs flat{flat_bank.ref(),    view(pb.k_idx, {6, W}), view(pb.k_val, {6, W}),
                             view(pb.v, {6, hd}), view(pb.beta, {6, 1}), view(pb.g, {6, 1}),
                             view(pb.q_idx, {6, R}), view(pb.q_val, {6, R})};
    decode_step(flat, flat_readings.ref(), options);

    HostTensor nested_bank = pb.memory, nested_readings(bank_dtype, {2, 3, hd});
    const WriteReadArgs nested{nested_bank.ref(),       view(pb.k_idx, {2, 3, W}), view(pb.k_val, {2, 3, W}),
                               view(pb.v, {2, 3, hd}),  view(pb.beta, {2, 3, 1}), view(pb.g, {2, 3, 1}),
                               view(pb.q_idx, {2, 3, R}), view(pb.q_val, {2, 3, R})};
    decode_step(nested, nested_readings.ref(), options);

    EXPECT_TRUE(nested_bank.bitwise_equal(flat_bank)) << dtype_name(bank_dtype);
    EXPECT_EQ(nested_readings.to_f64(), flat_readings.to_f64()) << dtype_name(bank_dtype);
    EXPECT_GT(rel_error(flat_bank, pb.memory), 0.0);
  }
}

// The rounding contract made exact (docs/spec.md §1) with bf16 ties. Every exact product below is
// a midpoint between two bf16 values, so it rounds to even; each input is sent 2^-12 below
// its bf16 value (which rounds back to that value), so an input used unrounded moves the
// product below the midpoint and the result to the odd neighbour. With g = 0, written rows
// of 0, beta = 1.5 and k_val = 1 - 2^-12 (rounds to 1): new row = rnd(1.5 * rnd(v)). The
// read lane reads an unwritten row u with q_val = 1.5 * (1 - 2^-12): y = rnd(1.5 * u).
TEST(DecodeSteps, RoundsKValVAndQValToTheBankDtype) {
  const std::int64_t P = 2, hd = 10, sps = 4;
  const Problem pb = make_problem(decode_spec(P, 1, 1, 1, hd, sps, 1, DType::bf16, DType::i32, DType::f32, 71));
  TokenInputs tok = token_inputs(pb, 0);
  HostTensor bank = pb.memory;
  const double below = 1.0 - 1.0 / 4096.0;
  HostTensor expected_rows(DType::bf16, {P, 1, hd}), expected_readings(DType::bf16, {P, 1, hd});
  for (std::int64_t p = 0; p < P; ++p) {
    const std::int64_t write_row = p * sps, read_row = p * sps + 1;
    tok.k_idx.set(p, static_cast<double>(write_row));
    tok.q_idx.set(p, static_cast<double>(read_row));
    tok.k_val.set(p, below);
    tok.q_val.set(p, 1.5 * below);
    tok.beta.set(p, 1.5);
    tok.g.set(p, 0.0);
    for (std::int64_t c = 0; c < hd; ++c) {
      const double sign = (p + c) % 2 == 0 ? 1.0 : -1.0;
      const double x = sign * (1.0 + 1.0 / 128.0) * std::ldexp(1.0, static_cast<int>(c % 5) - 2);  // bf16
      tok.v.set(p * hd + c, x * below);
      bank.set(write_row * hd + c, 0.0);
      bank.set(read_row * hd + c, x);
      expected_rows.set(p * hd + c, 1.5 * x);      // a midpoint: rounds to even
      expected_readings.set(p * hd + c, 1.5 * x);
    }
  }
  HostTensor readings = step_readings(pb, DType::bf16);
  DecodeOptions options;
  options.slots_per_stream = sps;
  decode_step(tok.args(bank.ref()), readings.ref(), options);
  EXPECT_TRUE(readings.bitwise_equal(expected_readings));
  for (std::int64_t p = 0; p < P; ++p) {
    for (std::int64_t c = 0; c < hd; ++c) {
      EXPECT_EQ(bank.get(p * sps * hd + c), expected_rows.get(p * hd + c)) << "stream " << p << " col " << c;
    }
  }
}

// ---- Out-of-range entries with validate = false (docs/spec.md §8) ------------------------------

// The bank lives inside a larger buffer with kGuardRows rows of random data on each side.
constexpr std::int64_t kGuardRows = 3;

struct GuardedBank {
  HostTensor buffer;  // [kGuardRows + S + kGuardRows, hd]
  std::int64_t S, hd;

  GuardedBank(const HostTensor& bank, std::uint64_t seed) : S(bank.sizes()[0]), hd(bank.sizes()[1]) {
    buffer = HostTensor(bank.dtype(), {S + 2 * kGuardRows, hd});
    std::uint64_t state = seed;
    for (std::int64_t i = 0; i < buffer.numel(); ++i) {
      state = state * 6364136223846793005ULL + 1442695040888963407ULL;
      buffer.set(i, static_cast<double>(state >> 40) / 16777216.0 - 0.5);
    }
    for (std::int64_t i = 0; i < bank.numel(); ++i) buffer.set(kGuardRows * hd + i, bank.get(i));
  }
  TensorRef bank_ref() const {
    auto* base = static_cast<unsigned char*>(buffer.ref().data);
    const auto offset = static_cast<std::size_t>(kGuardRows * hd) * dtype_size(buffer.dtype());
    return TensorRef::contiguous(base + offset, buffer.dtype(), {S, hd});
  }
  HostTensor bank() const {  // a copy of the bank part
    HostTensor out(buffer.dtype(), {S, hd});
    for (std::int64_t i = 0; i < out.numel(); ++i) out.set(i, buffer.get(kGuardRows * hd + i));
    return out;
  }
  std::vector<double> guards() const {
    std::vector<double> out;
    const std::int64_t after = (kGuardRows + S) * hd;
    for (std::int64_t i = 0; i < kGuardRows * hd; ++i) out.push_back(buffer.get(i));
    for (std::int64_t i = after; i < buffer.numel(); ++i) out.push_back(buffer.get(i));
    return out;
  }
};

struct MaskedEntry {
  bool write;  // k_idx lane (else q_idx lane)
  std::int64_t stream, lane, bad_index;
};

// Masked entries against an equivalent in-range problem: a masked write lane becomes an
// unused slot of its stream with k_val = 0 and g = 0 (no decay, nothing added: the row
// keeps its bits), a masked read lane reads the stream's first row with q_val = 0. Needs
// G = W. The engine must give the same bits; the guard rows must keep theirs.
void check_masked_entries(DType bank_dtype, DType index_dtype, std::int64_t options_sps,
                          const std::vector<MaskedEntry>& entries) {
  const std::int64_t P = 2, W = 4, R = 4, hd = 7, sps = 8;
  const Problem pb = make_problem(decode_spec(P, 1, W, R, hd, sps, W, bank_dtype, index_dtype, DType::f32, 51));
  DecodeOptions options;
  options.slots_per_stream = options_sps;

  TokenInputs masked = token_inputs(pb, 0), equivalent = token_inputs(pb, 0);
  for (const MaskedEntry& e : entries) {
    if (e.write) {
      const std::int64_t at = e.stream * W + e.lane;
      std::set<std::int64_t> used;  // the stream's slots, earlier replacements included
      for (std::int64_t w = 0; w < W; ++w) {
        used.insert(static_cast<std::int64_t>(equivalent.k_idx.get(e.stream * W + w)));
      }
      std::int64_t unused = e.stream * sps;
      while (used.count(unused)) ++unused;
      masked.k_idx.set(at, static_cast<double>(e.bad_index));
      equivalent.k_idx.set(at, static_cast<double>(unused));
      equivalent.k_val.set(at, 0.0);
      equivalent.g.set(at, 0.0);
    } else {
      const std::int64_t at = e.stream * R + e.lane;
      masked.q_idx.set(at, static_cast<double>(e.bad_index));
      equivalent.q_idx.set(at, static_cast<double>(e.stream * sps));
      equivalent.q_val.set(at, 0.0);
    }
  }

  GuardedBank guarded(pb.memory, 61);
  const std::vector<double> guards_before = guarded.guards();
  HostTensor readings = step_readings(pb, bank_dtype);
  DecodeOptions unchecked = options;
  unchecked.validate = false;
  decode_step(masked.args(guarded.bank_ref()), readings.ref(), unchecked);

  HostTensor expected_bank = pb.memory, expected_readings = step_readings(pb, bank_dtype);
  decode_step(equivalent.args(expected_bank.ref()), expected_readings.ref(), options);
  HostTensor ref_bank = pb.memory, ref_readings = step_readings(pb, DType::f64);
  reference::decode_step(equivalent.args(ref_bank.ref()), ref_readings.ref(), options);

  EXPECT_EQ(guarded.guards(), guards_before) << "a guard row outside the bank changed";
  EXPECT_TRUE(guarded.bank().bitwise_equal(expected_bank));
  EXPECT_TRUE(readings.bitwise_equal(expected_readings));
  EXPECT_LE(rel_error(readings.to_f64(), ref_readings.to_f64()), step_tolerance(bank_dtype));
  EXPECT_LE(rel_error(guarded.bank(), ref_bank), step_tolerance(bank_dtype));
}

TEST(DecodeMasking, OutOfBankEntriesLeaveGuardRowsUntouched) {
  const std::int64_t S = 16;  // P * sps
  const std::vector<MaskedEntry> entries = {
      {true, 0, 1, -1},         {true, 0, 3, S + 2},          {true, 1, 0, -kGuardRows},
      {false, 0, 0, S},         {false, 1, 3, -2},            {false, 1, 1, S + kGuardRows - 1},
  };
  for (DType bank : {DType::f32, DType::bf16}) {
    for (DType index : {DType::i32, DType::i64}) {
      for (std::int64_t sps : {0, 8}) {
        SCOPED_TRACE(std::string(dtype_name(bank)) + " " + dtype_name(index) + " sps=" + std::to_string(sps));
        check_masked_entries(bank, index, sps, entries);
      }
    }
  }
}

TEST(DecodeMasking, FarOutOfRangeInt64EntriesAreMasked) {
  const std::int64_t far = std::int64_t{1} << 40;
  check_masked_entries(DType::f32, DType::i64, 8,
                       {{true, 0, 0, far}, {true, 1, 2, -far}, {false, 0, 3, far}, {false, 1, 0, -far}});
}

// With slots_per_stream set, a row of another stream is out of range for this stream.
TEST(DecodeMasking, OtherStreamsRowsAreMaskedWhenSlotsPerStreamIsSet) {
  check_masked_entries(DType::bf16, DType::i32, 8, {{true, 1, 2, 0}, {true, 0, 1, 15}, {false, 0, 2, 8}});
}

}  // namespace
}  // namespace sdm

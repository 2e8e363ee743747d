// The float64 reference rejects bad input before any work (docs/spec.md §8): for each class of
// error (dtype, shape, device, index range, repeated write slot) write_read_forward and
// decode_step throw the right sdm::Error naming the argument, and the bank and readings
// buffers are bit-identical to what they held before the call. Index errors are planted in
// the last stream's last token, after everything a careless implementation would already
// have written.
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "sdm/error.hpp"
#include "sdm/reference.hpp"
#include "support/problem.hpp"

namespace sdm {
namespace {

using testing::HostTensor;
using testing::make_problem;
using testing::Problem;
using testing::ProblemSpec;

// Fills `t` with random non-zero values so that any store into it shows.
void scribble(HostTensor& t, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> value(0.5, 1.5);
  for (std::int64_t i = 0; i < t.numel(); ++i) t.set(i, value(rng));
}

// A problem, its readings buffer and a way to break one argument.
struct Fixture {
  Problem pb;
  HostTensor readings;
  WriteReadArgs args;
};

struct RejectCase {
  const char* what;
  ErrorKind kind;
  const char* argument;
  std::function<void(Fixture&)> spoil;
};

// The last token of the last stream, lane `lane`, of an index tensor [P, T, width].
std::int64_t last_token_entry(const HostTensor& idx, std::int64_t lane) {
  const std::int64_t width = idx.sizes()[2];
  return idx.numel() - width + lane;
}

std::vector<RejectCase> reject_cases() {
  return {
      {"dtype", ErrorKind::type, "k_val", [](Fixture& f) { f.args.k_val.dtype = DType::i32; }},
      {"readings dtype", ErrorKind::type, "readings", [](Fixture& f) { f.readings = f.readings.to(DType::i64); }},
      {"shape", ErrorKind::value, "v", [](Fixture& f) { f.args.v.sizes[2] -= 1; }},
      {"device", ErrorKind::value, "q_val", [](Fixture& f) { f.args.q_val.device = Device{DeviceType::cuda, 0}; }},
      {"index range", ErrorKind::value, "q_idx",
       [](Fixture& f) {
         f.pb.q_idx.set(last_token_entry(f.pb.q_idx, f.pb.spec.R - 1), static_cast<double>(f.pb.bank_rows()));
       }},
      {"index of another stream", ErrorKind::value, "k_idx",
       [](Fixture& f) { f.pb.k_idx.set(last_token_entry(f.pb.k_idx, 0), 0.0); }},
      {"repeated write slot", ErrorKind::value, "k_idx",
       [](Fixture& f) {
         const std::int64_t first = last_token_entry(f.pb.k_idx, 0);
         f.pb.k_idx.set(first + f.pb.spec.W - 1, f.pb.k_idx.get(first));
       }},
  };
}

// Runs `call` on a spoiled fixture and checks the error and that nothing was written.
void expect_rejected_untouched(const RejectCase& c, Fixture& f, const std::function<void(Fixture&)>& call) {
  SCOPED_TRACE(c.what);
  scribble(f.readings, 7);
  f.args = f.pb.args();
  c.spoil(f);
  const HostTensor bank_before = f.pb.memory;
  const HostTensor readings_before = f.readings;
  try {
    call(f);
    ADD_FAILURE() << "no exception";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), c.kind) << e.message();
    EXPECT_EQ(e.argument(), c.argument) << e.message();
    EXPECT_NE(std::string(e.message()).find(c.argument), std::string::npos) << e.message();
  }
  EXPECT_TRUE(f.pb.memory.bitwise_equal(bank_before));
  EXPECT_TRUE(f.readings.bitwise_equal(readings_before));
}

ProblemSpec forward_spec(DType bank) {
  ProblemSpec spec;
  spec.P = 3;
  spec.T = 7;
  spec.W = 3;
  spec.R = 2;
  spec.hd = 5;
  spec.slots_per_stream = 8;
  spec.bank = bank;
  return spec;
}

WriteReadOptions forward_options(const ProblemSpec& spec) {
  WriteReadOptions options;
  options.slots_per_stream = spec.slots_per_stream;
  options.chunk_size = 3;
  return options;
}

void run_forward(Fixture& f) {
  // Readings are re-viewed here so that a case may replace the buffer.
  reference::write_read_forward(f.args, f.readings.ref(), forward_options(f.pb.spec));
}

TEST(ReferenceRejects, ForwardLeavesBankAndReadingsUntouched) {
  for (DType bank : {DType::f32, DType::bf16, DType::f64}) {
    SCOPED_TRACE(dtype_name(bank));
    for (const RejectCase& c : reject_cases()) {
      Fixture f{make_problem(forward_spec(bank)), HostTensor(bank, {3, 7, 5}), {}};
      expect_rejected_untouched(c, f, run_forward);
    }
  }
}

// The control: a valid call does write both buffers, so the comparisons above can fail.
TEST(ReferenceRejects, ValidForwardWritesBankAndReadings) {
  Fixture f{make_problem(forward_spec(DType::f32)), HostTensor(DType::f32, {3, 7, 5}), {}};
  scribble(f.readings, 7);
  f.args = f.pb.args();
  const HostTensor bank_before = f.pb.memory, readings_before = f.readings;
  run_forward(f);
  EXPECT_FALSE(f.pb.memory.bitwise_equal(bank_before));
  EXPECT_FALSE(f.readings.bitwise_equal(readings_before));
}

// Decode: one token per stream, [P, 1, ...] tensors whose leading dims are the streams.
ProblemSpec decode_spec(DType bank) {
  ProblemSpec spec = forward_spec(bank);
  spec.T = 1;
  spec.beta_3d = true;
  return spec;
}

void run_decode(Fixture& f) {
  DecodeOptions options;
  options.slots_per_stream = f.pb.spec.slots_per_stream;
  reference::decode_step(f.args, f.readings.ref(), options);
}

TEST(ReferenceRejects, DecodeLeavesBankAndReadingsUntouched) {
  for (DType bank : {DType::f32, DType::bf16, DType::f64}) {
    SCOPED_TRACE(dtype_name(bank));
    for (const RejectCase& c : reject_cases()) {
      Fixture f{make_problem(decode_spec(bank)), HostTensor(bank, {3, 1, 5}), {}};
      expect_rejected_untouched(c, f, run_decode);
    }
  }
}

TEST(ReferenceRejects, ValidDecodeWritesBankAndReadings) {
  Fixture f{make_problem(decode_spec(DType::f32)), HostTensor(DType::f32, {3, 1, 5}), {}};
  scribble(f.readings, 7);
  f.args = f.pb.args();
  const HostTensor bank_before = f.pb.memory, readings_before = f.readings;
  run_decode(f);
  EXPECT_FALSE(f.pb.memory.bitwise_equal(bank_before));
  EXPECT_FALSE(f.readings.bitwise_equal(readings_before));
}

}  // namespace
}  // namespace sdm

// The CPU engine's chunked forward (docs/spec.md §2, §3) against the float64 token recurrence
// (sdm::reference), through the public entry points, on fresh random problems of awkward
// shapes: T not a multiple of C, odd hd, W != R, G = 1 and G = W, P in {1, 3}, f32 and
// bf16 banks, f32 / bf16 / f16 inputs, int32 / int64 indices.
//
// Metric: rel error max|engine - reference| / max|reference| over the readings and over the
// final bank. Tolerances:
//   f32 bank  1e-4  (f32 arithmetic against float64; measured <= 2.7e-7 on these shapes)
//   bf16 bank 2e-2  (readings and bank rows are rounded to bf16: 2^-9 ~ 2e-3 per rounding,
//                    compounded over the chunks; measured <= 6.1e-3 on these shapes)
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "support/engine_run.hpp"

namespace sdm::testing {
namespace {

constexpr double kTolF32 = 1e-4;
constexpr double kTolBf16 = 2e-2;

struct ForwardCase {
  std::string name;
  ProblemSpec spec;
  std::int64_t chunk = 64;
};

std::vector<ForwardCase> forward_cases() {
  std::vector<ForwardCase> cases;
  auto add = [&](std::string name, ProblemSpec spec, std::int64_t chunk) {
    cases.push_back({std::move(name), spec, chunk});
  };
  for (DType bank : {DType::f32, DType::bf16}) {
    const std::string b = bank == DType::f32 ? "f32" : "bf16";
    add(b + "_T1_C1", spec_of(1, 1, 2, 3, 3, 8, 1, bank, 11), 1);
    add(b + "_T5_C7_gW_p3", spec_of(3, 5, 3, 2, 7, 10, 3, bank, 12), 7);
    add(b + "_T64_C16_g1", spec_of(1, 64, 4, 4, 16, 24, 1, bank, 13), 16);
    add(b + "_T200_C64_gW_p3", spec_of(3, 200, 3, 5, 9, 40, 3, bank, 14), 64);
    add(b + "_T200_C256_hot_slots", spec_of(1, 200, 2, 3, 5, 6, 1, bank, 15), 256);
    add(b + "_T64_C1_p3_hd33", spec_of(3, 64, 5, 2, 33, 32, 5, bank, 16), 1);
    add(b + "_T200_C7_W1_R1", spec_of(1, 200, 1, 1, 4, 5, 1, bank, 17), 7);
  }
  ForwardCase i64 = {"f32_i64_indices_C16", spec_of(3, 64, 3, 4, 6, 12, 3, DType::f32, 18), 16};
  i64.spec.index = DType::i64;
  cases.push_back(i64);
  ForwardCase f16 = {"f32_f16_inputs_beta3d_C16", spec_of(1, 64, 3, 3, 7, 12, 1, DType::f32, 19), 16};
  f16.spec.input = DType::f16;
  f16.spec.beta_3d = true;
  cases.push_back(f16);
  ForwardCase bf16_inputs = {"bf16_bf16_inputs_C64", spec_of(3, 100, 4, 3, 10, 16, 4, DType::bf16, 20), 64};
  bf16_inputs.spec.input = DType::bf16;
  cases.push_back(bf16_inputs);
  ForwardCase f32_bank_bf16_inputs = {"f32_bf16_inputs_C16", spec_of(1, 50, 2, 5, 8, 9, 2, DType::f32, 21), 16};
  f32_bank_bf16_inputs.spec.input = DType::bf16;
  cases.push_back(f32_bank_bf16_inputs);
  ForwardCase full_256 = {"f32_T300_C256_full_chunks", spec_of(3, 300, 3, 2, 5, 24, 1, DType::f32, 22), 256};
  cases.push_back(full_256);
  ForwardCase wide = {"bf16_W256_R256", spec_of(1, 9, 256, 256, 3, 300, 256, DType::bf16, 23), 4};
  cases.push_back(wide);
  ForwardCase wide32 = {"f32_W256_R256", spec_of(1, 9, 256, 256, 3, 300, 1, DType::f32, 24), 4};
  cases.push_back(wide32);
  return cases;
}

std::string format_error(double e) {
  char text[32];
  std::snprintf(text, sizeof text, "%.3g", e);
  return text;
}

class ForwardVsReference : public ::testing::TestWithParam<ForwardCase> {};

TEST_P(ForwardVsReference, ReadingsAndFinalBank) {
  const ForwardCase& c = GetParam();
  const Problem pb = make_problem(c.spec);
  WriteReadOptions options;
  options.slots_per_stream = c.spec.slots_per_stream;
  options.chunk_size = c.chunk;
  const ForwardRun engine = engine_forward(pb, options);
  const ForwardRun reference = reference_forward(pb, options);
  const double tol = c.spec.bank == DType::f32 ? kTolF32 : kTolBf16;
  const double readings_error = rel_error(engine.readings, reference.readings);
  const double bank_error = rel_error(engine.final_bank, reference.final_bank);
  EXPECT_LE(readings_error, tol) << c.name;
  EXPECT_LE(bank_error, tol) << c.name;
  RecordProperty("readings_rel_error", format_error(readings_error));
  RecordProperty("bank_rel_error", format_error(bank_error));
}

INSTANTIATE_TEST_SUITE_P(Shapes, ForwardVsReference, ::testing::ValuesIn(forward_cases()),
                         [](const auto& param_info) { return param_info.param.name; });

// The readings are in the bank dtype and the bank really changes (the comparison above
// would be vacuous on an all-zero or untouched result).
TEST(EngineForward, ProducesNonTrivialOutputs) {
  const Problem pb = make_problem(spec_of(3, 40, 3, 2, 5, 12, 1, DType::bf16, 31));
  WriteReadOptions options;
  options.slots_per_stream = 12;
  options.chunk_size = 16;
  const ForwardRun run = engine_forward(pb, options);
  EXPECT_EQ(run.readings.dtype(), DType::bf16);
  EXPECT_FALSE(run.final_bank.bitwise_equal(pb.memory));
  double max_abs = 0.0;
  for (double y : run.readings.to_f64()) max_abs = std::max(max_abs, std::abs(y));
  EXPECT_GT(max_abs, 1e-3);
}

}  // namespace
}  // namespace sdm::testing

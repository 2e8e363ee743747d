// The CPU engine at extreme log-decays (docs/numerics.md, "Decay factors"): g = -inf (the
// written row is erased) and finite g far below the normal range (-1e5 ... -1e30), mixed with
// normal g, against the float64 reference: no-grad forward, saving forward, backward, every
// snapshot mode, f32 and bf16 banks, G = 1 and G = W, chunk sizes 1, 3, 64, 256 with T = 301
// (a multiple of none but 1). Slots are hot (6 rows per stream, W = 2), so a chunk's slot
// groups are long and hold normal decays after extreme ones, where differences of f32 prefix
// sums lose the span's own magnitude.
//
// Metric and tolerances as tests/cpp/engine/test_engine_backward.cpp (rel error max|a - b| /
// max|b| against the reference): f32 bank 1e-4, bf16 bank 2e-2; lossy snapshots the gradient
// tolerances of the SnapshotModes test (bf16 1e-2, fp8 8e-2, int4 2e-1). Every output and
// gradient must also be finite. Measured after the fix: f32 <= ~1e-6, bf16 <= ~1e-2.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <ostream>
#include <string>
#include <vector>

#include "support/engine_run.hpp"
#include "support/extreme_decay.hpp"

namespace sdm::testing {
namespace {

constexpr double kTolF32 = 1e-4;
constexpr double kTolBf16 = 2e-2;
constexpr double kInf = std::numeric_limits<double>::infinity();

std::string format_error(double e) {
  char text[32];
  std::snprintf(text, sizeof text, "%.3g", e);
  return text;
}

struct ExtremeCase {
  std::string name;
  ProblemSpec spec;
  std::int64_t chunk;
  DecayPattern pattern;
};

std::vector<ExtremeCase> extreme_cases() {
  std::vector<ExtremeCase> cases;
  std::uint64_t seed = 500;
  for (DType bank : {DType::f32, DType::bf16}) {
    for (std::int64_t G : {1, 2}) {
      for (std::int64_t C : {1, 3, 64, 256}) {
        for (DecayPattern pattern : kDecayPatterns) {
          ExtremeCase c;
          c.spec = spec_of(2, 301, 2, 3, 5, 6, G, bank, ++seed);
          c.chunk = C;
          c.pattern = pattern;
          c.name = std::string(dtype_name(bank)) + "_G" + std::to_string(G) + "_C" + std::to_string(C) + "_" +
                   decay_pattern_name(pattern);
          cases.push_back(c);
        }
      }
    }
  }
  return cases;
}

void PrintTo(const ExtremeCase& c, std::ostream* os) { *os << c.name; }

class ExtremeDecay : public ::testing::TestWithParam<ExtremeCase> {};

TEST_P(ExtremeDecay, ForwardSavingBackwardEverySnapshotMode) {
  const ExtremeCase& c = GetParam();
  Problem pb = make_problem(c.spec);
  place_extreme_decays(pb, c.pattern, c.chunk);
  WriteReadOptions options;
  options.slots_per_stream = c.spec.slots_per_stream;
  options.chunk_size = c.chunk;
  const double tol = c.spec.bank == DType::f32 ? kTolF32 : kTolBf16;

  const ForwardRun reference = reference_forward(pb, options);
  const ForwardRun plain = engine_forward(pb, options);
  EXPECT_TRUE(all_finite(plain.readings) && all_finite(plain.final_bank)) << c.name;
  const double readings_error = rel_error(plain.readings, reference.readings);
  const double bank_error = rel_error(plain.final_bank, reference.final_bank);
  EXPECT_LE(readings_error, tol) << c.name << ": readings";
  EXPECT_LE(bank_error, tol) << c.name << ": final bank";
  RecordProperty("forward_rel_error", format_error(std::max(readings_error, bank_error)));

  const HostTensor dy = random_tensor({c.spec.P, c.spec.T, c.spec.hd}, 1.0, c.spec.seed + 100);
  const HostTensor d_final = random_tensor({pb.bank_rows(), c.spec.hd}, 1.0, c.spec.seed + 200);
  const GradRun want = reference_backward(pb, dy, d_final, options);
  struct ModeTol {
    SnapshotQuant mode;
    double grad_tol;
  };
  const ModeTol modes[] = {{SnapshotQuant::none, tol},
                           {SnapshotQuant::bf16, c.spec.bank == DType::bf16 ? tol : 1e-2},
                           {SnapshotQuant::fp8, 8e-2},
                           {SnapshotQuant::int4, 2e-1}};
  for (const ModeTol& m : modes) {
    options.snapshot_quant = m.mode;
    const std::string what = c.name + ", snapshot " + snapshot_quant_name(m.mode);
    const ForwardRun saving = engine_forward_saving(pb, options);
    EXPECT_TRUE(saving.readings.bitwise_equal(plain.readings)) << what << ": saving readings";
    EXPECT_TRUE(saving.final_bank.bitwise_equal(plain.final_bank)) << what << ": saving final bank";
    const GradRun got = engine_backward(pb, saving, dy, d_final, options, DType::f32);
    const struct {
      const char* name;
      const HostTensor& got;
      const HostTensor& want;
    } grads[] = {{"memory", got.memory, want.memory}, {"k_val", got.k_val, want.k_val},
                 {"v", got.v, want.v},                {"beta", got.beta, want.beta},
                 {"g", got.g, want.g},                {"q_val", got.q_val, want.q_val}};
    double worst = 0.0;
    for (const auto& grad : grads) {
      EXPECT_TRUE(all_finite(grad.got)) << what << ": gradient of " << grad.name << " is not finite";
      const double error = rel_error(grad.got, grad.want);
      EXPECT_LE(error, m.grad_tol) << what << ": gradient of " << grad.name;
      worst = std::max(worst, error);
    }
    RecordProperty(std::string("grad_rel_error_") + snapshot_quant_name(m.mode), format_error(worst));
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, ExtremeDecay, ::testing::ValuesIn(extreme_cases()),
                         [](const auto& param_info) { return param_info.param.name; });

// The example: one slot written by three tokens, g = [-0.1, -inf, -0.1]: token 2 reads
// the row erased at token 1 and rewritten at tokens 1 and 2 (the reference, and decode_step,
// give finite values), at every chunk size.
TEST(ExtremeDecay, EraseOneRowEveryChunkSize) {
  for (DType bank : {DType::f32, DType::bf16}) {
    ProblemSpec spec = spec_of(1, 3, 1, 1, 4, 1, 1, bank, 7);
    Problem pb = make_problem(spec);
    const double g[] = {-0.1, -kInf, -0.1};
    for (std::int64_t t = 0; t < 3; ++t) pb.g.set(t, g[t]);
    for (std::int64_t C = 1; C <= 3; ++C) {
      WriteReadOptions options;
      options.slots_per_stream = 1;
      options.chunk_size = C;
      const std::string what = std::string(dtype_name(bank)) + " C = " + std::to_string(C);
      const ForwardRun want = reference_forward(pb, options);
      const ForwardRun got = engine_forward(pb, options);
      ASSERT_TRUE(all_finite(got.readings)) << what;
      EXPECT_LE(rel_error(got.readings, want.readings), bank == DType::f32 ? kTolF32 : kTolBf16) << what;
      const HostTensor dy = random_tensor({1, 3, 4}, 1.0, 8);
      const HostTensor d_final = random_tensor({1, 4}, 1.0, 9);
      const GradRun ref = reference_backward(pb, dy, d_final, options);
      const GradRun eng = engine_backward(pb, engine_forward_saving(pb, options), dy, d_final, options, DType::f32);
      EXPECT_TRUE(all_finite(eng.g) && all_finite(eng.k_val) && all_finite(eng.memory)) << what;
      EXPECT_LE(rel_error(eng.g, ref.g), bank == DType::f32 ? kTolF32 : kTolBf16) << what;
      EXPECT_LE(rel_error(eng.k_val, ref.k_val), bank == DType::f32 ? kTolF32 : kTolBf16) << what;
    }
  }
}

// One large finite decay, then small ones: g = -1e4 at token 0, then -1e-3 on every later token
// of the same slot (prefix sums near -1e4 while the spans that matter are ~1e-3 each).
TEST(ExtremeDecay, SmallSpansAfterALargeDecay) {
  ProblemSpec spec = spec_of(1, 256, 1, 1, 3, 1, 1, DType::f32, 11);
  Problem pb = make_problem(spec);
  for (std::int64_t t = 0; t < 256; ++t) pb.g.set(t, t == 0 ? -1e4 : -1e-3);
  WriteReadOptions options;
  options.slots_per_stream = 1;
  options.chunk_size = 256;
  const ForwardRun want = reference_forward(pb, options);
  const ForwardRun got = engine_forward(pb, options);
  EXPECT_LE(rel_error(got.readings, want.readings), kTolF32);
  EXPECT_LE(rel_error(got.final_bank, want.final_bank), kTolF32);
}

}  // namespace
}  // namespace sdm::testing

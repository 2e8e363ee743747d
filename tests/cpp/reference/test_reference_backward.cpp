// The float64 reference backward (src/cpu/reference) against central finite differences of
// the reference forward, f64 bank and inputs, loss L = <readings, Wr> + <final bank, Wb> with
// random weights: every differentiable input (bank, k_val, v, beta, g with G = 1 and G = W,
// q_val) to < 1e-6 relative (max|a - b| / max|b|).
#include <gtest/gtest.h>

#include <cstdio>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "sdm/reference.hpp"
#include "support/problem.hpp"

namespace sdm::testing {
namespace {

constexpr double kTolerance = 1e-6;
constexpr double kStep = 1e-5;  // central differences: error ~ kStep^2 * L''' + eps * L / kStep

ProblemSpec f64_spec(std::int64_t P, std::int64_t T, std::int64_t W, std::int64_t R, std::int64_t hd,
                     std::int64_t slots_per_stream, std::int64_t G, std::uint64_t seed) {
  ProblemSpec s;
  s.P = P, s.T = T, s.W = W, s.R = R, s.hd = hd, s.slots_per_stream = slots_per_stream, s.G = G, s.seed = seed;
  s.bank = s.input = DType::f64;
  s.beta_max = 0.8;
  return s;
}

// Loss weights: standard normal values shaped like t.
HostTensor random_like(const HostTensor& t, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  HostTensor out(DType::f64, t.sizes());
  for (std::int64_t i = 0; i < t.numel(); ++i) out.set(i, normal(rng));
  return out;
}

WriteReadOptions options_for(const Problem& pb, bool validate = true) {
  WriteReadOptions options;
  options.slots_per_stream = pb.spec.slots_per_stream;
  options.validate = validate;
  return options;
}

struct Weights {
  HostTensor readings, final_bank;  // final_bank undefined: no final-bank term
};

double loss(const Problem& pb, const Weights& wt, bool validate = true) {
  HostTensor bank = pb.memory.to(DType::f64), readings = pb.make_readings(DType::f64);
  WriteReadArgs args = pb.args();
  args.memory = bank.ref();
  reference::write_read_forward(args, readings.ref(), options_for(pb, validate));
  double sum = 0.0;
  for (std::int64_t i = 0; i < readings.numel(); ++i) sum += readings.get(i) * wt.readings.get(i);
  for (std::int64_t i = 0; wt.final_bank.defined() && i < bank.numel(); ++i) {
    sum += bank.get(i) * wt.final_bank.get(i);
  }
  return sum;
}

// The differentiable inputs, in the order of WriteReadGrads.
struct Input {
  const char* name;
  HostTensor Problem::*tensor;
};
const Input kInputs[] = {{"memory", &Problem::memory}, {"k_val", &Problem::k_val}, {"v", &Problem::v},
                         {"beta", &Problem::beta},     {"g", &Problem::g},         {"q_val", &Problem::q_val}};

std::vector<HostTensor> analytic_gradients(const Problem& pb, const Weights& wt, DType dtype = DType::f64,
                                           bool validate = true) {
  std::vector<HostTensor> grads;
  for (const Input& input : kInputs) grads.emplace_back(dtype, (pb.*input.tensor).sizes());
  const HostTensor initial = pb.memory;
  reference::write_read_backward(pb.args(), wt.readings.ref(), wt.final_bank.ref(),
                                 {grads[0].ref(), grads[1].ref(), grads[2].ref(), grads[3].ref(), grads[4].ref(),
                                  grads[5].ref()},
                                 options_for(pb, validate));
  EXPECT_TRUE(pb.memory.bitwise_equal(initial)) << "the backward modified the initial bank";
  return grads;
}

HostTensor numeric_gradient(Problem pb, HostTensor Problem::*tensor, const Weights& wt) {
  HostTensor& x = pb.*tensor;
  HostTensor grad(DType::f64, x.sizes());
  for (std::int64_t i = 0; i < x.numel(); ++i) {
    const double x0 = x.get(i);
    x.set(i, x0 + kStep);
    const double up = loss(pb, wt);
    x.set(i, x0 - kStep);
    const double down = loss(pb, wt);
    x.set(i, x0);
    grad.set(i, (up - down) / (2.0 * kStep));
  }
  return grad;
}

struct Config {
  const char* name;
  ProblemSpec spec;
  bool final_bank_weighted;
};
void PrintTo(const Config& c, std::ostream* os) { *os << c.name; }

class BackwardVsFiniteDifferences : public ::testing::TestWithParam<Config> {};

TEST_P(BackwardVsFiniteDifferences, EveryInput) {
  const Problem pb = make_problem(GetParam().spec);
  Weights wt{random_like(pb.make_readings(DType::f64), 101), {}};
  if (GetParam().final_bank_weighted) wt.final_bank = random_like(pb.memory, 102);
  const auto analytic = analytic_gradients(pb, wt);
  std::string line;
  for (std::size_t k = 0; k < std::size(kInputs); ++k) {
    const HostTensor numeric = numeric_gradient(pb, kInputs[k].tensor, wt);
    const double e = rel_error(analytic[k], numeric);
    char buffer[64];
    std::snprintf(buffer, sizeof buffer, " %s %.3g", kInputs[k].name, e);
    line += buffer;
    EXPECT_LE(e, kTolerance) << "gradient of " << kInputs[k].name;
  }
  std::printf("[%s] rel error vs finite differences:%s\n", GetParam().name, line.c_str());
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, BackwardVsFiniteDifferences,
    ::testing::Values(Config{"p2_g1_hd5", f64_spec(2, 7, 3, 2, 5, 6, 1, 1), true},
                      Config{"p2_gW_hd3", f64_spec(2, 6, 3, 4, 3, 5, 3, 2), true},
                      Config{"p1_g1_hot_slots", f64_spec(1, 9, 2, 3, 4, 3, 1, 3), true},
                      Config{"p2_gW_no_final_bank_term", f64_spec(2, 6, 2, 2, 3, 4, 2, 4), false}),
    [](const auto& param_info) { return std::string(param_info.param.name); });

// Gradients stored into f32 tensors are the float64 gradients rounded once.
TEST(Backward, NarrowGradientsAreRoundedOnce) {
  const Problem pb = make_problem(f64_spec(2, 5, 2, 3, 4, 4, 2, 5));
  const Weights wt{random_like(pb.make_readings(DType::f64), 7), random_like(pb.memory, 8)};
  const auto wide = analytic_gradients(pb, wt);
  const auto narrow = analytic_gradients(pb, wt, DType::f32);
  for (std::size_t k = 0; k < wide.size(); ++k) {
    EXPECT_TRUE(narrow[k].bitwise_equal(wide[k].to(DType::f32))) << kInputs[k].name;
  }
}

// With validate = false a masked entry (index outside its stream's rows, docs/spec.md §8) gets zero
// gradients and leaves the others as for a no-op entry (write: k_val = g = 0; read: q_val = 0).
TEST(Backward, MaskedEntriesGetZeroGradients) {
  const Problem pb = make_problem(f64_spec(2, 6, 3, 2, 3, 5, 3, 6));
  const Weights wt{random_like(pb.make_readings(DType::f64), 9), random_like(pb.memory, 10)};
  const std::int64_t write = (1 * 6 + 2) * 3 + 2;  // stream 1, token 2, lane 2
  const std::int64_t read = (0 * 6 + 3) * 2 + 1;   // stream 0, token 3, lane 1
  Problem masked = pb, zeroed = pb;
  masked.k_idx.set(write, -1.0);
  masked.q_idx.set(read, 7.0);  // a row of stream 1
  zeroed.k_val.set(write, 0.0);
  zeroed.g.set(write, 0.0);
  zeroed.q_val.set(read, 0.0);
  auto got = analytic_gradients(masked, wt, DType::f64, false);
  auto expected = analytic_gradients(zeroed, wt);
  EXPECT_EQ(got[1].get(write), 0.0);  // k_val
  EXPECT_EQ(got[4].get(write), 0.0);  // g
  EXPECT_EQ(got[5].get(read), 0.0);   // q_val
  EXPECT_NE(expected[1].get(write), 0.0);
  EXPECT_NE(expected[5].get(read), 0.0);
  for (HostTensor* t : {&expected[1], &expected[4]}) t->set(write, 0.0);
  expected[5].set(read, 0.0);
  for (std::size_t k = 0; k < got.size(); ++k) EXPECT_EQ(rel_error(got[k], expected[k]), 0.0) << kInputs[k].name;
}

}  // namespace
}  // namespace sdm::testing

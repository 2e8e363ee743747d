// The float64 reference forward (src/cpu/reference) against an independent float64
// implementation of the chunked formulas of docs/spec.md §2-B.2 written here, for chunk sizes
// {1, 3, 16, T}; plus its rounding contract (docs/spec.md §1), masked entries (docs/spec.md §8) and checks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <ostream>
#include <string>
#include <vector>

#include "sdm/error.hpp"
#include "sdm/reference.hpp"
#include "support/problem.hpp"

namespace sdm::testing {
namespace {

constexpr double kTolerance = 1e-12;

struct Outputs {
  HostTensor readings, bank;
};

// The reference on a copy of the problem's bank.
Outputs run_reference(const Problem& pb, std::int64_t chunk_size, DType readings_dtype = DType::f64) {
  Outputs out{pb.make_readings(readings_dtype), pb.memory.to(pb.memory.dtype())};
  WriteReadArgs args = pb.args();
  args.memory = out.bank.ref();
  WriteReadOptions options;
  options.slots_per_stream = pb.spec.slots_per_stream;
  options.chunk_size = chunk_size;
  reference::write_read_forward(args, out.readings.ref(), options);
  return out;
}

// ---- An independent float64 implementation of docs/spec.md §2-B.2 ---------------------------

// The problem's values as float64 (an f64 problem: nothing to round).
struct Values {
  explicit Values(const Problem& pb)
      : s(pb.spec), k_idx(pb.k_idx.to_f64()), k_val(pb.k_val.to_f64()), v(pb.v.to_f64()), beta(pb.beta.to_f64()),
        g(pb.g.to_f64()), q_idx(pb.q_idx.to_f64()), q_val(pb.q_val.to_f64()) {}
  std::size_t tok(std::int64_t p, std::int64_t t) const { return static_cast<std::size_t>(p * s.T + t); }
  std::int64_t slot(std::size_t n, std::int64_t w) const { return static_cast<std::int64_t>(k_idx[n * s.W + w]); }
  double kappa(std::size_t n, std::int64_t w) const { return k_val[n * s.W + w]; }
  double gamma(std::size_t n, std::int64_t w) const { return g[n * s.G + (s.G == 1 ? 0 : w)]; }
  std::int64_t sigma(std::size_t n, std::int64_t r) const { return static_cast<std::int64_t>(q_idx[n * s.R + r]); }
  double rho(std::size_t n, std::int64_t r) const { return q_val[n * s.R + r]; }

  ProblemSpec s;
  std::vector<double> k_idx, k_val, v, beta, g, q_idx, q_val;
};

using Matrix = std::vector<std::vector<double>>;

// One chunk of stream p, tokens [t0, t0 + n): reads M0 = `bank`, writes readings and M_C.
void chunk_forward(const Values& x, std::int64_t p, std::int64_t t0, std::int64_t n, std::vector<double>& bank,
                   std::vector<double>& readings) {
  const auto& s = x.s;
  const auto hd = static_cast<std::size_t>(s.hd);
  const auto N = static_cast<std::size_t>(n);
  auto tok = [&](std::size_t i) { return x.tok(p, t0 + static_cast<std::int64_t>(i)); };
  auto row = [&](std::int64_t slot) { return &bank[static_cast<std::size_t>(slot) * hd]; };

  // B.1: per-slot cumulative log decays, inclusive of token i; reads come after the writes.
  std::map<std::int64_t, double> lambda;  // Lambda_s(i) while scanning, Lambda_s afterwards
  Matrix L(N, std::vector<double>(static_cast<std::size_t>(s.W)));
  Matrix Lq(N, std::vector<double>(static_cast<std::size_t>(s.R)));
  for (std::size_t i = 0; i < N; ++i) {
    for (std::int64_t w = 0; w < s.W; ++w) lambda[x.slot(tok(i), w)] += x.gamma(tok(i), w);
    for (std::int64_t w = 0; w < s.W; ++w) L[i][static_cast<std::size_t>(w)] = lambda[x.slot(tok(i), w)];
    for (std::int64_t r = 0; r < s.R; ++r) {
      const auto it = lambda.find(x.sigma(tok(i), r));
      Lq[i][static_cast<std::size_t>(r)] = it == lambda.end() ? 0.0 : it->second;
    }
  }
  // A (strictly lower) and QK (lower, with the diagonal): pairs of entries on the same slot.
  Matrix A(N, std::vector<double>(N, 0.0)), QK(N, std::vector<double>(N, 0.0));
  for (std::size_t i = 0; i < N; ++i) {
    for (std::size_t j = 0; j <= i; ++j) {
      for (std::int64_t b = 0; b < s.W; ++b) {
        const std::int64_t slot_j = x.slot(tok(j), b);
        const double kappa_j = x.kappa(tok(j), b), L_j = L[j][static_cast<std::size_t>(b)];
        for (std::int64_t a = 0; a < s.W && j < i; ++a) {
          if (x.slot(tok(i), a) != slot_j) continue;
          A[i][j] += x.kappa(tok(i), a) * kappa_j * std::exp(L[i][static_cast<std::size_t>(a)] - L_j);
        }
        for (std::int64_t r = 0; r < s.R; ++r) {
          if (x.sigma(tok(i), r) != slot_j) continue;
          QK[i][j] += x.rho(tok(i), r) * kappa_j * std::exp(Lq[i][static_cast<std::size_t>(r)] - L_j);
        }
      }
    }
  }
  // B.2: gathers from M0, residual, unit-lower-triangular solve, readings.
  Matrix delta(N, std::vector<double>(hd)), inter(N, std::vector<double>(hd, 0.0));
  for (std::size_t i = 0; i < N; ++i) {
    std::vector<double> ret(hd, 0.0);
    for (std::int64_t w = 0; w < s.W; ++w) {
      const double k_eff = x.kappa(tok(i), w) * std::exp(L[i][static_cast<std::size_t>(w)]);
      for (std::size_t c = 0; c < hd; ++c) ret[c] += k_eff * row(x.slot(tok(i), w))[c];
    }
    for (std::int64_t r = 0; r < s.R; ++r) {
      const double q_w = x.rho(tok(i), r) * std::exp(Lq[i][static_cast<std::size_t>(r)]);
      for (std::size_t c = 0; c < hd; ++c) inter[i][c] += q_w * row(x.sigma(tok(i), r))[c];
    }
    // (I + diag(beta) A) delta = diag(beta) (v - ret), by forward substitution.
    const double beta = x.beta[tok(i)];
    for (std::size_t c = 0; c < hd; ++c) {
      double sum = 0.0;
      for (std::size_t j = 0; j < i; ++j) sum += A[i][j] * delta[j][c];
      delta[i][c] = beta * (x.v[tok(i) * hd + c] - ret[c]) - beta * sum;
    }
  }
  for (std::size_t i = 0; i < N; ++i) {
    for (std::size_t c = 0; c < hd; ++c) {
      double y = inter[i][c];
      for (std::size_t j = 0; j <= i; ++j) y += QK[i][j] * delta[j][c];
      readings[tok(i) * hd + c] = y;
    }
  }
  // The write: M_C[s] = exp(Lambda_s) M0[s] + sum_{e on s} kappa_e exp(P_e) delta_{i_e}.
  std::map<std::int64_t, std::vector<double>> written;
  for (const auto& [slot, total] : lambda) {
    auto& out = written[slot];
    for (std::size_t c = 0; c < hd; ++c) out.push_back(std::exp(total) * row(slot)[c]);
  }
  for (std::size_t i = 0; i < N; ++i) {
    for (std::int64_t w = 0; w < s.W; ++w) {
      const std::int64_t slot = x.slot(tok(i), w);
      const double coeff = x.kappa(tok(i), w) * std::exp(lambda[slot] - L[i][static_cast<std::size_t>(w)]);
      for (std::size_t c = 0; c < hd; ++c) written[slot][c] += coeff * delta[i][c];
    }
  }
  for (const auto& [slot, values] : written) std::copy(values.begin(), values.end(), row(slot));
}

Outputs chunked_forward(const Problem& pb, std::int64_t C) {
  const Values x(pb);
  std::vector<double> bank = pb.memory.to_f64();
  std::vector<double> readings(static_cast<std::size_t>(pb.spec.P * pb.spec.T * pb.spec.hd));
  for (std::int64_t p = 0; p < pb.spec.P; ++p) {
    for (std::int64_t t0 = 0; t0 < pb.spec.T; t0 += C) {
      chunk_forward(x, p, t0, std::min(C, pb.spec.T - t0), bank, readings);
    }
  }
  Outputs out{pb.make_readings(DType::f64), HostTensor(DType::f64, pb.memory.sizes())};
  for (std::size_t i = 0; i < readings.size(); ++i) out.readings.set(static_cast<std::int64_t>(i), readings[i]);
  for (std::size_t i = 0; i < bank.size(); ++i) out.bank.set(static_cast<std::int64_t>(i), bank[i]);
  return out;
}

double max_abs(const HostTensor& t) {
  double m = 0.0;
  for (double x : t.to_f64()) m = std::max(m, std::fabs(x));
  return m;
}

// ---- Reference == chunked formulas -----------------------------------------------------

struct Config {
  const char* name;
  ProblemSpec spec;
};
void PrintTo(const Config& c, std::ostream* os) { *os << c.name; }

ProblemSpec f64_spec(std::int64_t P, std::int64_t T, std::int64_t W, std::int64_t R, std::int64_t hd,
                     std::int64_t slots_per_stream, std::int64_t G, std::uint64_t seed) {
  ProblemSpec s;
  s.P = P, s.T = T, s.W = W, s.R = R, s.hd = hd, s.slots_per_stream = slots_per_stream, s.G = G, s.seed = seed;
  s.bank = s.input = DType::f64;
  return s;
}

class ForwardVsChunked : public ::testing::TestWithParam<Config> {};

TEST_P(ForwardVsChunked, AgreesForEveryChunkSize) {
  const Problem pb = make_problem(GetParam().spec);
  const Outputs ref = run_reference(pb, 64);
  ASSERT_GT(max_abs(ref.readings), 1e-2) << "degenerate problem: readings near zero";
  ASSERT_FALSE(ref.bank.bitwise_equal(pb.memory)) << "degenerate problem: the bank did not change";
  for (const std::int64_t C : {std::int64_t{1}, std::int64_t{3}, std::int64_t{16}, pb.spec.T}) {
    SCOPED_TRACE("chunk size " + std::to_string(C));
    const Outputs chunked = chunked_forward(pb, C);
    const double e_readings = rel_error(ref.readings, chunked.readings);
    const double e_bank = rel_error(ref.bank, chunked.bank);
    std::printf("[%s C=%lld] rel error vs chunked: readings %.3g, final bank %.3g\n", GetParam().name,
                static_cast<long long>(C), e_readings, e_bank);
    EXPECT_LE(e_readings, kTolerance);
    EXPECT_LE(e_bank, kTolerance);
  }
}

Config with(Config c, void (*edit)(ProblemSpec&)) {
  edit(c.spec);
  return c;
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, ForwardVsChunked,
    ::testing::Values(
        // Three streams, slots repeated heavily across tokens, odd hd, W != R, spare bank rows.
        with({"p3_g1_hd5", f64_spec(3, 37, 3, 2, 5, 6, 1, 11)}, [](ProblemSpec& s) { s.extra_rows = 2; }),
        // Per-write decays, R > W, int64 indices, beta [P, T, 1].
        with({"p3_gW_hd7", f64_spec(3, 37, 4, 5, 7, 9, 4, 12)},
             [](ProblemSpec& s) {
               s.index = DType::i64;
               s.beta_3d = true;
             }),
        // hd = 1, three hot slots, one stream.
        Config{"p1_g1_hd1", f64_spec(1, 45, 2, 3, 1, 3, 1, 13)},
        // Wide tokens, strong writes (beta up to 1) to stress the solve.
        with({"p2_gW_wide", f64_spec(2, 20, 8, 6, 6, 12, 8, 14)}, [](ProblemSpec& s) { s.beta_max = 1.0; })),
    [](const auto& param_info) { return std::string(param_info.param.name); });

// ---- Rounding contract (docs/spec.md §1) ----------------------------------------------------

// A bf16 / f32 bank equals an f64 bank holding the same values with k_val, v, q_val
// pre-rounded to the bank dtype and beta, g pre-rounded to f32 (the f64 bank rounds nothing),
// the final bank then rounded to the bank dtype: bitwise, readings, final bank and gradients.
struct RoundingCase {
  DType bank, input;
};
void PrintTo(const RoundingCase& c, std::ostream* os) {
  *os << dtype_name(c.bank) << " bank, " << dtype_name(c.input) << " inputs";
}

class Rounding : public ::testing::TestWithParam<RoundingCase> {};

Problem exact_twin(const Problem& pb) {
  const DType bank = pb.spec.bank;
  Problem twin = pb;
  twin.memory = pb.memory.to(DType::f64);
  twin.k_val = pb.k_val.to(bank).to(DType::f64);
  twin.v = pb.v.to(bank).to(DType::f64);
  twin.q_val = pb.q_val.to(bank).to(DType::f64);
  twin.beta = pb.beta.to(DType::f32).to(DType::f64);
  twin.g = pb.g.to(DType::f32).to(DType::f64);
  return twin;
}

TEST_P(Rounding, ForwardEqualsF64BankOnRoundedInputs) {
  ProblemSpec spec = f64_spec(2, 13, 3, 4, 5, 7, 3, 21);
  spec.bank = GetParam().bank;
  spec.input = GetParam().input;
  const Problem pb = make_problem(spec);
  const Problem twin = exact_twin(pb);
  for (const DType readings_dtype : {DType::f32, DType::bf16, DType::f64}) {
    SCOPED_TRACE(dtype_name(readings_dtype));
    const Outputs narrow = run_reference(pb, 4, readings_dtype);
    const Outputs exact = run_reference(twin, 4, readings_dtype);
    EXPECT_TRUE(narrow.readings.bitwise_equal(exact.readings));
    EXPECT_TRUE(narrow.bank.bitwise_equal(exact.bank.to(spec.bank)));
  }
  // The rounding matters: the f64 bank on the unrounded inputs gives other readings.
  Problem unrounded = pb;
  unrounded.memory = pb.memory.to(DType::f64);
  EXPECT_FALSE(run_reference(unrounded, 4).readings.bitwise_equal(run_reference(twin, 4).readings));
}

TEST_P(Rounding, BackwardEqualsF64BankOnRoundedInputs) {
  ProblemSpec spec = f64_spec(2, 13, 3, 4, 5, 7, 1, 22);
  spec.bank = GetParam().bank;
  spec.input = GetParam().input;
  const Problem pb = make_problem(spec);
  const Problem twin = exact_twin(pb);
  const Problem weights = make_problem([&] {
    ProblemSpec w = spec;
    w.seed = 99;
    return w;
  }());
  const HostTensor grad_readings = weights.v;         // [P, T, hd]
  const HostTensor grad_final_bank = weights.memory;  // [S, hd]
  auto gradients = [&](const Problem& problem) {
    std::vector<HostTensor> g;  // memory, k_val, v, beta, g, q_val
    for (const HostTensor* input : {&problem.memory, &problem.k_val, &problem.v, &problem.beta, &problem.g,
                                    &problem.q_val}) {
      g.emplace_back(DType::f64, input->sizes());
    }
    WriteReadOptions options;
    options.slots_per_stream = spec.slots_per_stream;
    reference::write_read_backward(problem.args(), grad_readings.ref(), grad_final_bank.ref(),
                                   {g[0].ref(), g[1].ref(), g[2].ref(), g[3].ref(), g[4].ref(), g[5].ref()},
                                   options);
    return g;
  };
  const auto narrow = gradients(pb), exact = gradients(twin);
  for (std::size_t i = 0; i < narrow.size(); ++i) {
    EXPECT_TRUE(narrow[i].bitwise_equal(exact[i])) << "gradient " << i;
    EXPECT_GT(max_abs(narrow[i]), 0.0) << "gradient " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, Rounding,
                         ::testing::Values(RoundingCase{DType::bf16, DType::f32},
                                           RoundingCase{DType::bf16, DType::f64},
                                           RoundingCase{DType::f32, DType::f64}),
                         [](const auto& param_info) {
                           return std::string(dtype_name(param_info.param.bank)) + "_bank_" +
                                  dtype_name(param_info.param.input) + "_inputs";
                         });

// ---- Masked entries and argument checks -----------------------------------------------

// With validate = false an index outside its stream's rows is masked (docs/spec.md §8): the same as
// a write lane with k_val = 0 and g = 0, or a read lane with q_val = 0.
TEST(Forward, MaskedEntriesAreNoOps) {
  const Problem pb = make_problem(f64_spec(2, 9, 3, 2, 4, 5, 3, 31));
  const std::int64_t write = (1 * 9 + 4) * 3 + 1;  // stream 1, token 4, lane 1
  const std::int64_t read = (0 * 9 + 6) * 2 + 0;   // stream 0, token 6, lane 0
  Problem masked = pb, zeroed = pb;
  masked.k_idx.set(write, 2.0);                      // a row of stream 0
  masked.q_idx.set(read, static_cast<double>(pb.bank_rows() + 3));  // outside the bank
  zeroed.k_val.set(write, 0.0);
  zeroed.g.set(write, 0.0);
  zeroed.q_val.set(read, 0.0);

  Outputs got{masked.make_readings(DType::f64), masked.memory.to(DType::f64)};
  WriteReadArgs args = masked.args();
  args.memory = got.bank.ref();
  WriteReadOptions options;
  options.slots_per_stream = 5;
  options.validate = false;
  reference::write_read_forward(args, got.readings.ref(), options);
  const Outputs expected = run_reference(zeroed, 64);
  EXPECT_EQ(rel_error(got.readings, expected.readings), 0.0);
  EXPECT_EQ(rel_error(got.bank, expected.bank), 0.0);
  EXPECT_GT(rel_error(got.readings, run_reference(pb, 64).readings), 1e-6);  // masking changed something

  // With validation on, the same call is refused before anything is written; the first
  // violation in (stream, token, lane) order is the read of stream 0.
  options.validate = true;
  HostTensor bank = masked.memory.to(DType::f64);
  args.memory = bank.ref();
  try {
    reference::write_read_forward(args, got.readings.ref(), options);
    ADD_FAILURE() << "expected sdm::ValueError";
  } catch (const ValueError& e) {
    EXPECT_EQ(e.argument(), "q_idx");
    EXPECT_NE(std::string(e.what()).find("q_idx[stream 0, token 6, lane 0]"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(bank.bitwise_equal(masked.memory));
}

TEST(Forward, RefusesABankOffTheCpu) {
  const Problem pb = make_problem(f64_spec(1, 3, 2, 2, 4, 4, 1, 41));
  HostTensor bank = pb.memory, readings = pb.make_readings(DType::f64);
  WriteReadArgs args = pb.args();
  args.memory = bank.ref();
  TensorRef out = readings.ref();
  for (TensorRef* t : {&args.memory, &args.k_idx, &args.k_val, &args.v, &args.beta, &args.g, &args.q_idx,
                       &args.q_val, &out}) {
    t->device = Device{DeviceType::cuda, 0};
  }
  WriteReadOptions options;
  options.slots_per_stream = 4;
  try {
    reference::write_read_forward(args, out, options);
    ADD_FAILURE() << "expected sdm::ValueError";
  } catch (const ValueError& e) {
    EXPECT_EQ(e.argument(), "memory");
    EXPECT_NE(std::string(e.what()).find("cuda:0"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(bank.bitwise_equal(pb.memory));
}

TEST(Forward, ChecksArgumentsBeforeWriting) {
  const Problem pb = make_problem(f64_spec(1, 3, 2, 2, 4, 4, 1, 42));
  HostTensor bank = pb.memory, readings = pb.make_readings(DType::f64);
  WriteReadArgs args = pb.args();
  args.memory = bank.ref();
  const HostTensor wrong_v(DType::f64, {1, 3, 5});
  args.v = wrong_v.ref();
  WriteReadOptions options;
  options.slots_per_stream = 4;
  try {
    reference::write_read_forward(args, readings.ref(), options);
    ADD_FAILURE() << "expected sdm::ValueError";
  } catch (const ValueError& e) {
    EXPECT_EQ(e.argument(), "v");
  }
  EXPECT_TRUE(bank.bitwise_equal(pb.memory));
}

}  // namespace
}  // namespace sdm::testing

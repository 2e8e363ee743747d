#include "problem.hpp"

#include <algorithm>
#include <numeric>
#include <random>
#include <stdexcept>

namespace sdm::testing {

namespace {

// W distinct slots of stream p's rows, in random order.
void draw_distinct(std::mt19937_64& rng, std::int64_t base, std::int64_t range, std::int64_t count,
                   HostTensor& out, std::int64_t offset) {
  std::vector<std::int64_t> picked;
  std::uniform_int_distribution<std::int64_t> pick(0, range - 1);
  while (static_cast<std::int64_t>(picked.size()) < count) {
    const std::int64_t s = pick(rng);
    if (std::find(picked.begin(), picked.end(), s) == picked.end()) picked.push_back(s);
  }
  for (std::int64_t i = 0; i < count; ++i) out.set(offset + i, static_cast<double>(base + picked[static_cast<std::size_t>(i)]));
}

}  // namespace

Problem make_problem(const ProblemSpec& s) {
  if (s.W > s.slots_per_stream || s.R > s.slots_per_stream) {
    throw std::invalid_argument("make_problem: W and R must not exceed slots_per_stream");
  }
  Problem pb;
  pb.spec = s;
  std::mt19937_64 rng(s.seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::uniform_real_distribution<double> unit(0.0, 1.0);

  pb.memory = HostTensor(s.bank, {pb.bank_rows(), s.hd});
  for (std::int64_t i = 0; i < pb.memory.numel(); ++i) pb.memory.set(i, 0.1 * normal(rng));

  pb.k_idx = HostTensor(s.index, {s.P, s.T, s.W});
  pb.q_idx = HostTensor(s.index, {s.P, s.T, s.R});
  for (std::int64_t p = 0; p < s.P; ++p) {
    for (std::int64_t t = 0; t < s.T; ++t) {
      draw_distinct(rng, p * s.slots_per_stream, s.slots_per_stream, s.W, pb.k_idx, (p * s.T + t) * s.W);
      draw_distinct(rng, p * s.slots_per_stream, s.slots_per_stream, s.R, pb.q_idx, (p * s.T + t) * s.R);
    }
  }
  auto fill = [&](HostTensor& t, auto&& gen) {
    for (std::int64_t i = 0; i < t.numel(); ++i) t.set(i, gen());
  };
  pb.k_val = HostTensor(s.input, {s.P, s.T, s.W});
  fill(pb.k_val, [&] { return 0.3 * normal(rng); });
  pb.v = HostTensor(s.input, {s.P, s.T, s.hd});
  fill(pb.v, [&] { return 0.1 * normal(rng); });
  pb.beta = s.beta_3d ? HostTensor(s.input, {s.P, s.T, 1}) : HostTensor(s.input, {s.P, s.T});
  fill(pb.beta, [&] { return s.beta_max * unit(rng); });
  pb.g = HostTensor(s.input, {s.P, s.T, s.G});
  fill(pb.g, [&] { return -0.01 - 0.49 * unit(rng); });
  pb.q_val = HostTensor(s.input, {s.P, s.T, s.R});
  fill(pb.q_val, [&] { return 0.3 * normal(rng); });
  return pb;
}

ProblemSpec spec_of(std::int64_t P, std::int64_t T, std::int64_t W, std::int64_t R, std::int64_t hd,
                    std::int64_t slots_per_stream, std::int64_t G, DType bank, std::uint64_t seed) {
  ProblemSpec s;
  s.P = P;
  s.T = T;
  s.W = W;
  s.R = R;
  s.hd = hd;
  s.slots_per_stream = slots_per_stream;
  s.G = G;
  s.bank = bank;
  s.seed = seed;
  return s;
}

HostTensor Problem::make_readings(DType dtype) const { return HostTensor(dtype, {spec.P, spec.T, spec.hd}); }

}  // namespace sdm::testing

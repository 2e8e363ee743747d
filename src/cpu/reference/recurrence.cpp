#include "recurrence.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>

#include "core/tensor_access.hpp"
#include "sdm/error.hpp"

namespace sdm::reference::detail {

namespace {

// count values of t, each passed through `as_used`.
template <typename F>
std::vector<double> load_as(const TensorRef& t, std::int64_t count, F as_used) {
  std::vector<double> out(at(count));
  for (std::int64_t i = 0; i < count; ++i) out[at(i)] = as_used(core::load_f64(t, i));
  return out;
}

// The [P, T, width] indices of t, each outside its stream's rows replaced by kMasked; for write
// slots (`writes`), also each lane that names the same row as an earlier lane of its token (the
// first lane writes, docs/spec.md §8; only reachable with validate = false).
std::vector<std::int64_t> load_indices(const TensorRef& t, const core::WriteReadShape& shape,
                                       std::int64_t width, bool writes) {
  std::vector<std::int64_t> out(at(shape.P * shape.T * width));
  for (std::int64_t p = 0; p < shape.P; ++p) {
    const std::int64_t lo = shape.slots_per_stream > 0 ? p * shape.slots_per_stream : 0;
    const std::int64_t hi = shape.slots_per_stream > 0 ? std::min(shape.S, lo + shape.slots_per_stream) : shape.S;
    for (std::int64_t i = p * shape.T * width; i < (p + 1) * shape.T * width; ++i) {
      const std::int64_t slot = core::load_index(t, i);
      out[at(i)] = slot >= lo && slot < hi ? slot : Inputs::kMasked;
    }
  }
  if (!writes) return out;
  for (std::int64_t token = 0; token < shape.P * shape.T; ++token) {
    std::int64_t* lanes = &out[at(token * width)];
    for (std::int64_t w = width - 1; w > 0; --w) {
      if (std::find(lanes, lanes + w, lanes[w]) != lanes + w) lanes[w] = Inputs::kMasked;
    }
  }
  return out;
}

}  // namespace

void require_cpu(const TensorRef& memory) {
  if (memory.device.type != DeviceType::cpu) {
    throw ValueError("memory", "the float64 reference runs on the CPU; memory is on " +
                                   device_name(memory.device));
  }
}

Inputs load_inputs(const WriteReadArgs& args, const core::WriteReadShape& shape) {
  const bool exact = shape.bank == DType::f64;
  auto as_bank = [&shape](double x) { return core::round_to(shape.bank, x); };
  auto as_f32 = [exact](double x) { return exact ? x : static_cast<double>(static_cast<float>(x)); };
  Inputs in;
  in.tokens = shape.P * shape.T;
  in.W = shape.W;
  in.R = shape.R;
  in.G = shape.G;
  in.hd = shape.hd;
  in.k_idx = load_indices(args.k_idx, shape, shape.W, true);
  in.q_idx = load_indices(args.q_idx, shape, shape.R, false);
  in.k_val = load_as(args.k_val, in.tokens * in.W, as_bank);
  in.v = load_as(args.v, in.tokens * in.hd, as_bank);
  in.beta = load_as(args.beta, in.tokens, as_f32);
  in.g = load_as(args.g, in.tokens * in.G, as_f32);
  in.q_val = load_as(args.q_val, in.tokens * in.R, as_bank);
  return in;
}

std::vector<double> load_values(const TensorRef& t) {
  return load_as(t, t.numel(), [](double x) { return x; });
}

void store_values(const std::vector<double>& values, const TensorRef& t) {
  for (std::int64_t i = 0; i < t.numel(); ++i) core::store_f64(t, i, values[at(i)]);
}

void write_token(const Inputs& in, std::int64_t n, std::span<double* const> rows,
                 std::span<double> retrieved, std::span<double> delta) {
  const std::int64_t hd = in.hd;
  for (std::int64_t c = 0; c < hd; ++c) retrieved[at(c)] = 0.0;
  for (std::int64_t w = 0; w < in.W; ++w) {
    double* row = rows[at(w)];
    if (row == nullptr) continue;
    const double decay = std::exp(in.gamma(n, w));
    const double kappa = in.k_val[at(n * in.W + w)];
    for (std::int64_t c = 0; c < hd; ++c) {
      row[c] = decay * row[c];
      retrieved[at(c)] += kappa * row[c];
    }
  }
  const double beta = in.beta[at(n)];
  for (std::int64_t c = 0; c < hd; ++c) {
    delta[at(c)] = beta * (in.v[at(n * hd + c)] - retrieved[at(c)]);
  }
  for (std::int64_t w = 0; w < in.W; ++w) {
    double* row = rows[at(w)];
    if (row == nullptr) continue;
    const double kappa = in.k_val[at(n * in.W + w)];
    for (std::int64_t c = 0; c < hd; ++c) row[c] += kappa * delta[at(c)];
  }
}

void read_token(const Inputs& in, std::int64_t n, std::span<const double* const> rows,
                std::span<double> y) {
  for (std::int64_t c = 0; c < in.hd; ++c) y[at(c)] = 0.0;
  for (std::int64_t r = 0; r < in.R; ++r) {
    if (rows[at(r)] == nullptr) continue;
    const double rho = in.q_val[at(n * in.R + r)];
    for (std::int64_t c = 0; c < in.hd; ++c) y[at(c)] += rho * rows[at(r)][c];
  }
}

}  // namespace sdm::reference::detail

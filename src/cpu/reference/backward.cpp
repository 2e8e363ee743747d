// backward.cpp - sdm::reference::write_read_backward: exact reverse-mode gradients of the token
// recurrence (docs/spec.md §1, §4) in float64, token by token.
// Loss L = <readings, grad_readings> + <final bank, grad_final_bank> (absent: 0); gradients with
// respect to the inputs as used (the rounding of §1 counts as the identity): initial bank, k_val,
// v, beta, g (G = 1: summed over the token's W writes), q_val, each stored once rounded to its
// tensor's dtype. args.memory is the initial bank and is not modified.
// Method: recompute the forward keeping each token's pre-write rows m_w, retrieved and delta; walk
// the tokens in reverse carrying dM (the bank gradient after the token) and a float64 bank rolled
// back one token at a time. Per token, in reverse order of its steps (d_w = exp(gamma_w), r_w = d_w m_w):
//   read      y = sum_r rho_r M[q_r]         d rho_r = <dy, M[q_r]>;  dM[q_r] += rho_r dy
//   write     M[s_w] = r_w + kappa_w delta   d kappa_w = <dM[s_w], delta>;  d delta = sum_w kappa_w dM[s_w]
//   delta     delta = beta (v - ret)         d beta = <d delta, v - ret>;  dv = beta d delta;  d ret = -beta d delta
//   retrieve  ret = sum_w kappa_w r_w        d kappa_w += <d ret, r_w>;  d r_w = dM[s_w] + kappa_w d ret
//   decay     r_w = d_w m_w                  d gamma_w = <d r_w, r_w>;  dM[s_w] = d_w d r_w
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/validate.hpp"
#include "recurrence.hpp"
#include "sdm/reference.hpp"

namespace sdm::reference {

using detail::at;

namespace {

double dot(const double* a, const double* b, std::int64_t n) {
  double sum = 0.0;
  for (std::int64_t c = 0; c < n; ++c) sum += a[c] * b[c];
  return sum;
}

void store_if_defined(const std::vector<double>& values, const TensorRef& t) {
  if (t.defined()) detail::store_values(values, t);
}

}  // namespace

void write_read_backward(const WriteReadArgs& args, const TensorRef& grad_readings,
                         const TensorRef& grad_final_bank, const WriteReadGrads& grads,
                         const WriteReadOptions& options) {
  const auto shape = core::validate_write_read(args, TensorRef{}, options, core::BankDTypes::reference);
  core::validate_write_read_backward(args, shape, grad_readings, grad_final_bank, grads);
  detail::require_cpu(args.memory);
  core::NamedTensors required = core::named_args(args), optional = core::named_grads(grads);
  required.push_back({grad_readings, "grad_readings"});
  optional.push_back({grad_final_bank, "grad_final_bank"});
  core::check_engine_data(required, optional);
  if (options.validate) core::check_write_read_indices(args, shape);

  const std::int64_t tokens = shape.P * shape.T, W = shape.W, R = shape.R, hd = shape.hd;
  const detail::Inputs in = detail::load_inputs(args, shape);
  std::vector<double> bank = detail::load_values(args.memory);

  // Forward, keeping each token's pre-write rows, retrieved and delta.
  std::vector<double> pre_rows(at(tokens * W * hd)), retrieved(at(tokens * hd)), delta(at(tokens * hd));
  std::vector<double*> rows(at(W));
  for (std::int64_t n = 0; n < tokens; ++n) {
    for (std::int64_t w = 0; w < W; ++w) {
      rows[at(w)] = detail::row_of(bank, in.write_slot(n, w), hd);
      if (rows[at(w)] != nullptr) std::copy_n(rows[at(w)], hd, &pre_rows[at((n * W + w) * hd)]);
    }
    detail::write_token(in, n, rows, std::span(retrieved).subspan(at(n * hd), at(hd)),
                        std::span(delta).subspan(at(n * hd), at(hd)));
  }

  // Backward over the tokens in reverse. `bank` holds the state after token n and
  // `grad_bank` dL/d(that state); masked entries get zero gradients.
  std::vector<double> grad_bank = grad_final_bank.defined() ? detail::load_values(grad_final_bank)
                                                            : std::vector<double>(bank.size(), 0.0);
  const std::vector<double> dy = detail::load_values(grad_readings);
  std::vector<double> d_k_val(at(tokens * W), 0.0), d_v(at(tokens * hd)), d_beta(at(tokens));
  std::vector<double> d_g(at(tokens * shape.G), 0.0), d_q_val(at(tokens * R), 0.0);
  std::vector<double> d_delta(at(hd)), d_ret(at(hd)), residual(at(hd)), decayed(at(hd));
  for (std::int64_t n = tokens - 1; n >= 0; --n) {
    const double* dy_n = &dy[at(n * hd)];
    const double* delta_n = &delta[at(n * hd)];
    const double beta = in.beta[at(n)];

    // Read after write.
    for (std::int64_t r = 0; r < R; ++r) {
      const double* row = detail::row_of(bank, in.read_slot(n, r), hd);
      if (row == nullptr) continue;
      double* g_row = detail::row_of(grad_bank, in.read_slot(n, r), hd);
      const double rho = in.q_val[at(n * R + r)];
      d_q_val[at(n * R + r)] = dot(dy_n, row, hd);
      for (std::int64_t c = 0; c < hd; ++c) g_row[c] += rho * dy_n[c];
    }
    // Write: grad_bank's row s_w is the gradient of the new row r_w + kappa_w delta.
    std::fill(d_delta.begin(), d_delta.end(), 0.0);
    for (std::int64_t w = 0; w < W; ++w) {
      const double* g_row = detail::row_of(grad_bank, in.write_slot(n, w), hd);
      if (g_row == nullptr) continue;
      const double kappa = in.k_val[at(n * W + w)];
      d_k_val[at(n * W + w)] = dot(g_row, delta_n, hd);
      for (std::int64_t c = 0; c < hd; ++c) d_delta[at(c)] += kappa * g_row[c];
    }
    // Delta.
    for (std::int64_t c = 0; c < hd; ++c) {
      residual[at(c)] = in.v[at(n * hd + c)] - retrieved[at(n * hd + c)];
      d_v[at(n * hd + c)] = beta * d_delta[at(c)];
      d_ret[at(c)] = -beta * d_delta[at(c)];
    }
    d_beta[at(n)] = dot(d_delta.data(), residual.data(), hd);
    // Retrieve from the decayed rows, then the decay: grad_bank's row s_w turns from
    // dL/d(new row) into dL/d r_w, then into dL/d m_w; the bank row is rolled back to m_w.
    for (std::int64_t w = 0; w < W; ++w) {
      double* g_row = detail::row_of(grad_bank, in.write_slot(n, w), hd);
      if (g_row == nullptr) continue;
      const double decay = std::exp(in.gamma(n, w));
      const double kappa = in.k_val[at(n * W + w)];
      const double* m = &pre_rows[at((n * W + w) * hd)];
      for (std::int64_t c = 0; c < hd; ++c) decayed[at(c)] = decay * m[c];
      d_k_val[at(n * W + w)] += dot(d_ret.data(), decayed.data(), hd);
      for (std::int64_t c = 0; c < hd; ++c) g_row[c] += kappa * d_ret[at(c)];
      d_g[at(n * shape.G + (shape.G == 1 ? 0 : w))] += dot(g_row, decayed.data(), hd);
      for (std::int64_t c = 0; c < hd; ++c) g_row[c] *= decay;
      std::copy_n(m, hd, detail::row_of(bank, in.write_slot(n, w), hd));
    }
  }

  store_if_defined(grad_bank, grads.memory);
  store_if_defined(d_k_val, grads.k_val);
  store_if_defined(d_v, grads.v);
  store_if_defined(d_beta, grads.beta);
  store_if_defined(d_g, grads.g);
  store_if_defined(d_q_val, grads.q_val);
}

}  // namespace sdm::reference

// decode.cpp - sdm::reference::decode_step: one token per stream (docs/spec.md §9) in float64.
//
// Inputs (leading dims of k_idx = the streams): k_idx, k_val [..., W]; v [..., hd];
// beta [..., 1]; g [..., 1 or W]; q_idx, q_val [..., R]; readings shaped like v (any float
// dtype). Streams run one after another; per stream the W written rows are loaded from the
// bank, run through the same write_token as the forward (float64), and stored back rounded
// once to the bank dtype; the R read rows are then loaded from the updated bank and read with
// the same read_token. Inputs are rounded as in the forward (docs/spec.md §1). With an f64 bank
// nothing is rounded, so T decode steps reproduce a T-token forward bit for bit.
#include <vector>

#include "core/tensor_access.hpp"
#include "core/validate.hpp"
#include "recurrence.hpp"
#include "sdm/reference.hpp"

namespace sdm::reference {

using detail::at;

namespace {

void load_row(const TensorRef& memory, std::int64_t slot, double* out, std::int64_t hd) {
  for (std::int64_t c = 0; c < hd; ++c) out[c] = core::load_f64(memory, slot * hd + c);
}

}  // namespace

void decode_step(const WriteReadArgs& args, const TensorRef& readings, const DecodeOptions& options) {
  const auto shape = core::validate_decode(args, readings, options, core::BankDTypes::reference);
  detail::require_cpu(args.memory);
  core::check_engine_data(core::named_args(args), {{readings, "readings"}});
  if (options.validate) core::check_decode_indices(args, shape, options);

  const std::int64_t W = shape.W, R = shape.R, hd = shape.hd;
  core::WriteReadShape as_tokens;  // the decode call as one token of `streams` streams
  as_tokens.P = shape.streams;
  as_tokens.T = 1;
  as_tokens.W = W;
  as_tokens.R = R;
  as_tokens.G = shape.G;
  as_tokens.hd = hd;
  as_tokens.S = shape.S;
  as_tokens.slots_per_stream = options.slots_per_stream;
  as_tokens.bank = shape.bank;
  const detail::Inputs in = detail::load_inputs(args, as_tokens);
  std::vector<double> write_values(at(W * hd)), read_values(at(R * hd));
  std::vector<double> y(at(shape.streams * hd)), retrieved(at(hd)), delta(at(hd));
  std::vector<double*> write_rows(at(W));
  std::vector<const double*> read_rows(at(R));

  // Stream n's token: load the written rows, write, store them (rounded once), then load the
  // read rows from the updated bank and read. Masked slots get nullptr rows (skipped).
  for (std::int64_t n = 0; n < shape.streams; ++n) {
    for (std::int64_t w = 0; w < W; ++w) {
      const std::int64_t slot = in.write_slot(n, w);
      write_rows[at(w)] = slot == detail::Inputs::kMasked ? nullptr : &write_values[at(w * hd)];
      if (slot != detail::Inputs::kMasked) load_row(args.memory, slot, write_rows[at(w)], hd);
    }
    detail::write_token(in, n, write_rows, retrieved, delta);
    for (std::int64_t w = 0; w < W; ++w) {
      const std::int64_t slot = in.write_slot(n, w);
      if (slot == detail::Inputs::kMasked) continue;
      for (std::int64_t c = 0; c < hd; ++c) core::store_f64(args.memory, slot * hd + c, write_rows[at(w)][c]);
    }
    for (std::int64_t r = 0; r < R; ++r) {
      const std::int64_t slot = in.read_slot(n, r);
      read_rows[at(r)] = slot == detail::Inputs::kMasked ? nullptr : &read_values[at(r * hd)];
      if (slot != detail::Inputs::kMasked) load_row(args.memory, slot, &read_values[at(r * hd)], hd);
    }
    detail::read_token(in, n, read_rows, std::span(y).subspan(at(n * hd), at(hd)));
  }
  if (readings.defined()) detail::store_values(y, readings);
}

}  // namespace sdm::reference

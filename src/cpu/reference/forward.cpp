// forward.cpp - sdm::reference::write_read_forward: the token recurrence of docs/spec.md §1 in float64.
//
// Inputs: the chunked op's arguments (include/sdm/ops.hpp; bank f64, f32 or bf16), readings
// [P, T, hd] of any float dtype. Streams run one after another, each token in order: decay
// the written rows, retrieve from them, delta, write, read after the write (recurrence.hpp).
// k_val, v, q_val are rounded to the bank dtype on entry, beta and g to f32 (nothing for an
// f64 bank); all arithmetic is float64. The final bank is stored into `memory` once and the
// readings once, each value rounded once to its tensor's dtype. options.chunk_size is
// validated but does not change the result.
#include <vector>

#include "core/validate.hpp"
#include "recurrence.hpp"
#include "sdm/reference.hpp"

namespace sdm::reference {

using detail::at;

void write_read_forward(const WriteReadArgs& args, const TensorRef& readings,
                        const WriteReadOptions& options) {
  const auto shape = core::validate_write_read(args, readings, options, core::BankDTypes::reference);
  detail::require_cpu(args.memory);
  core::check_engine_data(core::named_args(args), {{readings, "readings"}});
  if (options.validate) core::check_write_read_indices(args, shape);

  const std::int64_t tokens = shape.P * shape.T, hd = shape.hd;
  const detail::Inputs in = detail::load_inputs(args, shape);
  std::vector<double> bank = detail::load_values(args.memory);
  std::vector<double> y(at(tokens * hd)), retrieved(at(hd)), delta(at(hd));
  std::vector<double*> write_rows(at(shape.W));
  std::vector<const double*> read_rows(at(shape.R));

  // Token n = p*T + t: stream p's tokens in order, then stream p + 1's.
  for (std::int64_t n = 0; n < tokens; ++n) {
    for (std::int64_t w = 0; w < shape.W; ++w) write_rows[at(w)] = detail::row_of(bank, in.write_slot(n, w), hd);
    detail::write_token(in, n, write_rows, retrieved, delta);
    for (std::int64_t r = 0; r < shape.R; ++r) read_rows[at(r)] = detail::row_of(bank, in.read_slot(n, r), hd);
    detail::read_token(in, n, read_rows, std::span(y).subspan(at(n * hd), at(hd)));
  }
  if (readings.defined()) detail::store_values(y, readings);
  detail::store_values(bank, args.memory);
}

}  // namespace sdm::reference

// recurrence.hpp - the pieces shared by the float64 reference's forward, backward and decode
// step: the inputs as the op uses them (docs/spec.md §1), float64 copies of tensors, and one token of
// the recurrence (docs/spec.md §1). Each piece exists once, so every entry point does the identical
// arithmetic in the identical order (the decode test relies on it: decode == forward bitwise).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "core/validate.hpp"
#include "sdm/ops.hpp"

namespace sdm::reference::detail {

inline std::size_t at(std::int64_t i) { return static_cast<std::size_t>(i); }

// Throws sdm::ValueError naming `memory` unless the bank is a CPU tensor.
void require_cpu(const TensorRef& memory);

// The per-token inputs of P*T tokens in float64, stream-major (token n = p*T + t), as the op
// uses them (docs/spec.md §1): k_val, v and q_val rounded to the bank dtype, beta and g rounded to
// f32; for an f64 bank nothing is rounded. An index outside its stream's rows (outside the
// bank when slots_per_stream is 0) is kMasked (reachable only with validation off, docs/spec.md §8):
// the entry is skipped (no decay, no write, 0 in sums and gradients), as the engines do; so is
// a write lane naming the same row as an earlier lane of its token (the first lane writes).
struct Inputs {
  static constexpr std::int64_t kMasked = -1;

  std::int64_t tokens = 0, W = 0, R = 0, G = 1, hd = 0;
  std::vector<std::int64_t> k_idx, q_idx;  // [tokens, W], [tokens, R]
  std::vector<double> k_val;               // [tokens, W]
  std::vector<double> v;                   // [tokens, hd]
  std::vector<double> beta;                // [tokens]
  std::vector<double> g;                   // [tokens, G]
  std::vector<double> q_val;               // [tokens, R]

  std::int64_t write_slot(std::int64_t n, std::int64_t w) const { return k_idx[at(n * W + w)]; }
  std::int64_t read_slot(std::int64_t n, std::int64_t r) const { return q_idx[at(n * R + r)]; }
  // Log-decay of write lane w of token n: g[n, 0] when G = 1, else g[n, w].
  double gamma(std::int64_t n, std::int64_t w) const { return g[at(n * G + (G == 1 ? 0 : w))]; }
};

// shape: the validated geometry (for the decode step: P = streams, T = 1, slots_per_stream as
// in its options).
Inputs load_inputs(const WriteReadArgs& args, const core::WriteReadShape& shape);

// The row of `slot` in a float64 bank of width hd, or nullptr for a masked slot.
inline double* row_of(std::vector<double>& bank, std::int64_t slot, std::int64_t hd) {
  return slot == Inputs::kMasked ? nullptr : &bank[at(slot * hd)];
}

// All elements of a contiguous float tensor as float64, and back (rounded once per element).
std::vector<double> load_values(const TensorRef& t);
void store_values(const std::vector<double>& values, const TensorRef& t);

// docs/spec.md §1 steps 1-4 for token n. rows[w] points to the hd values of slot k_idx[n, w] (the W
// slots are distinct), or is nullptr for a masked slot (skipped). In place:
//   r_w = exp(gamma_w) * M[s_w];  ret = sum_w k_val_w * r_w;  delta = beta * (v - ret);
//   M[s_w] = r_w + k_val_w * delta.
// Writes ret and delta ([hd] each).
void write_token(const Inputs& in, std::int64_t n, std::span<double* const> rows,
                 std::span<double> retrieved, std::span<double> delta);

// docs/spec.md §1 step 5 for token n: y = sum_r q_val_r * M[q_idx[n, r]], from the rows after the
// token's write. rows[r] points to the hd values of slot q_idx[n, r] (nullptr: masked,
// skipped); writes y ([hd]).
void read_token(const Inputs& in, std::int64_t n, std::span<const double* const> rows,
                std::span<double> y);

}  // namespace sdm::reference::detail

// repeated_writes.hpp - what an engine does with a write slot repeated within one token when the
// index checks are off (validate = false, docs/spec.md §8): the token's first lane naming the row
// writes it; every later lane naming the same row is masked like an out-of-range entry (no decay,
// no write, no contribution to retrievals or readings, zero gradient). The CPU decode step applies
// it here, the CPU engine's Phase 1 through its dense row table (src/cpu/engine/chunk_plan.cpp);
// the CUDA engine applies the same rule in its kernels (phase1.cu, decode_step.cu).
#pragma once

#include <cstdint>

namespace sdm::core {

// rows[0, width): the rows of one token's write lanes, `masked` for masked lanes. Replaces each
// lane that repeats an earlier lane's row by `masked`. O(width^2) compares, no allocation.
template <typename Row>
inline void mask_repeated_writes(Row* rows, std::int64_t width, Row masked) {
  for (std::int64_t w = 1; w < width; ++w) {
    if (rows[w] == masked) continue;
    for (std::int64_t e = 0; e < w; ++e) {
      if (rows[e] == rows[w]) {
        rows[w] = masked;
        break;
      }
    }
  }
}

}  // namespace sdm::core

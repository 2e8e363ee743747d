// write_groups.hpp - the exact snapshot's tests on both engines (tests/cpp/engine/
// test_exact_snapshot.cpp, tests/gpu/test_cuda_exact_snapshot.cpp): masked write entries, and the
// call's write groups counted by their definition (docs/spec.md §4), written out on the host.
#pragma once

#include <cstdint>

#include "problem.hpp"

namespace sdm::testing {

// Every third token's lane 1 leaves the stream's rows (masked), every fourth token's last lane
// repeats lane 0 (masked under validate=false). Needs W >= 2 and spec.extra_rows >= P.
void mask_some_writes(Problem& pb);

// Distinct in-range write rows of each chunk (`chunk` tokens of one stream), summed.
std::int64_t distinct_rows_per_chunk(const Problem& pb, std::int64_t chunk);

// One snapshot row per write entry: N*C*W, C = min(chunk, T).
std::int64_t worst_rows(const Problem& pb, std::int64_t chunk);

}  // namespace sdm::testing

// group_rows.cuh - a write group's snapshot row on the device, for the group writer (store) and
// the backward's slot walks (read), by core/snapshot_row_rule.hpp from Phase 1's numbering
// (group_rows.cu): group_first[n] + group_ordinal[n*C*W + q], q the group's first sorted position.
#pragma once

#include <cstdint>

#include "core/snapshot_row_rule.hpp"

namespace sdm::cuda {

// The numbering: Phase1Buffers' group_first [N + 1] and group_ordinal (sorted [N*C*W]).
struct GroupNumbers {
  const std::int64_t* first;
  const std::int32_t* ordinal;
};

// The row of the group starting at sorted position q of chunk n (may be >= the buffer's rows).
__device__ __forceinline__ std::int64_t group_row(GroupNumbers numbers, std::int64_t n, int CW, int q) {
  return core::group_snapshot_row(numbers.first[n], numbers.ordinal[n * CW + q]);
}

// The row a reader loads for that group: inside a buffer of `rows` rows whatever the indices.
__device__ __forceinline__ std::int64_t group_row_read(GroupNumbers numbers, std::int64_t n, int CW, int q,
                                                       std::int64_t rows) {
  return core::snapshot_row_read(group_row(numbers, n, CW, q), rows);
}

}  // namespace sdm::cuda

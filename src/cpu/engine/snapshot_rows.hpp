// snapshot_rows.hpp - where the CPU engine stores each write group's snapshot row, by the rule both
// engines share (core/snapshot_row_rule.hpp, docs/spec.md §4): group ordinal k (groups in ascending
// bank row) of chunk n = ti*P + p (time-major) at row first[n] + k, first[n] the exclusive scan, in
// n order, of the chunks' write-group counts. A
// chunk's count is the number of distinct in-range rows among its write entries (a lane repeating
// an earlier lane's row in its token is masked but its row is still the first lane's group), which
// equals chunk_plan.hpp's groups.size() for every chunk. The rows are packed: `saved` needs only
// `total` snapshot rows (write_groups_count), at most N*C*W.
#pragma once

#include <cstdint>
#include <vector>

#include "core/snapshot_row_rule.hpp"
#include "core/validate.hpp"
#include "sdm/ops.hpp"

namespace sdm::cpu {

struct SnapshotRowStarts {
  std::vector<std::int64_t> first;  // [N]: first snapshot row of chunk n
  std::int64_t total = 0;           // the call's write groups: the snapshot rows in use

  std::int64_t row(std::int64_t time_chunk, std::int64_t stream, std::int64_t streams, std::int64_t group) const {
    return core::group_snapshot_row(first[static_cast<std::size_t>(core::write_chunk(time_chunk, stream, streams))],
                                    group);
  }
};

// The starts of every chunk of the call; the chunks are counted in parallel over `threads`.
SnapshotRowStarts snapshot_row_starts(const WriteReadArgs& args, const core::WriteReadShape& shape, int threads);

// Throws sdm::ValueError naming `saved` when the call's `total` write groups exceed the `rows` its
// buffer was planned for (options.snapshot_rows), before anything is written.
void check_snapshot_rows(const SnapshotRowStarts& starts, std::int64_t rows);

}  // namespace sdm::cpu

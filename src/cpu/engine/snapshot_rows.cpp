// snapshot_rows.cpp - the write-group counts of the chunks and their exclusive scan
// (snapshot_rows.hpp).
#include "snapshot_rows.hpp"

#include <algorithm>

#include "core/snapshot_row_rule.hpp"
#include "core/tensor_access.hpp"
#include "thread_pool.hpp"

namespace sdm::cpu {
namespace {

// Distinct rows of stream `stream`'s range among the write entries of chunk `time_chunk`
// (`rows`: scratch).
std::int64_t chunk_write_groups(const WriteReadArgs& args, const core::WriteReadShape& shape, std::int64_t stream,
                                std::int64_t time_chunk, std::vector<std::int64_t>& rows) {
  const std::int64_t lo = stream * shape.slots_per_stream, hi = lo + shape.slots_per_stream;
  const std::int64_t t0 = time_chunk * shape.C, n = std::min(shape.C, shape.T - t0);
  const std::int64_t first_entry = (stream * shape.T + t0) * shape.W;
  rows.clear();
  for (std::int64_t e = 0; e < n * shape.W; ++e) {
    const std::int64_t row = core::load_index(args.k_idx, first_entry + e);
    if (row >= lo && row < hi) rows.push_back(row);
  }
  std::sort(rows.begin(), rows.end());
  return static_cast<std::int64_t>(std::unique(rows.begin(), rows.end()) - rows.begin());
}

}  // namespace

SnapshotRowStarts snapshot_row_starts(const WriteReadArgs& args, const core::WriteReadShape& shape, int threads) {
  const std::int64_t steps = shape.num_time_chunks(), chunks = steps * shape.P;
  SnapshotRowStarts starts;
  starts.first.assign(static_cast<std::size_t>(chunks), 0);
  // Each stream counts its own chunks into first[n]; the scan below runs in n order.
  parallel_for(shape.P, threads, [&](std::int64_t p) {
    std::vector<std::int64_t> rows;
    for (std::int64_t ti = 0; ti < steps; ++ti) {
      starts.first[static_cast<std::size_t>(core::write_chunk(ti, p, shape.P))] = chunk_write_groups(args, shape, p, ti, rows);
    }
  });
  for (std::int64_t& first : starts.first) {
    const std::int64_t count = first;
    first = starts.total;
    starts.total += count;
  }
  return starts;
}

void check_snapshot_rows(const SnapshotRowStarts& starts, std::int64_t rows) {
  core::check_write_groups_fit(starts.total, rows);
}

}  // namespace sdm::cpu

// walk_plan.hpp - the task plan of a slot walk over recorded slots, built on the host: what the
// walk floor benchmark (bench/cuda/walk_floor.cu) replays to measure the planned reuse-proof walk
// of issue 24 (the design's M1, ../shared/design/ENGINE-V3.md §4.2-4.3) before it is built.
//
// Per chunk n = ti * P + p (tokens [ti*C, ti*C + C) of stream p; tokens past T write and read
// nothing) the chunk's write entries (token i, lane w) and read entries (i, r) are merged into one
// slot-major record stream: for each slot the chunk touches, in ascending slot order, its write
// records in (token, lane) order, then its read records in (token, lane) order. A group is one
// slot's records; a written group's M0 is its snapshot row (a dense ordinal over the call's
// written groups), a read-only group's the bank row. Tiles cut a chunk's C (W + R) record
// positions at multiples of L, each bound snapped back to the start of the group holding it, so a
// group is never split and a tile holds at most L groups. Every chunk gets the same number of
// tiles, ceil(C (W + R) / L) (some may be empty). With max_group > 0 a slot's records are cut into
// groups of at most max_group records (the sub-tiles the design keeps in reserve for long groups;
// a written slot's groups share its snapshot row), so that tiles can balance heavy reuse.
#pragma once

#include <cstdint>
#include <vector>

namespace sdm::bench {

struct WalkGroup {  // one slot's records in a chunk (or, with max_group, a piece of them)
  std::int32_t slot = 0;       // absolute bank row
  std::int32_t first = 0;      // first record (within the chunk's records)
  std::int32_t writes = 0;     // write records, then `reads` read records
  std::int32_t reads = 0;
};

struct WalkRecord {
  std::int32_t token = 0;  // i in [0, C)
  std::int32_t lane = 0;   // w or r
};

struct WalkPlan {
  std::int64_t chunks = 0, records_per_chunk = 0, tiles_per_chunk = 0, tile_len = 0;
  std::vector<std::int64_t> group_begin;   // [chunks + 1]: chunk n's groups are [begin[n], begin[n+1])
  std::vector<WalkGroup> groups;           // all chunks' groups, chunk-major
  std::vector<std::int32_t> m0_row;        // per group: its slot's snapshot row if the chunk writes it, else -1
  std::vector<WalkRecord> records;         // [chunks, records_per_chunk]; a short chunk's tail unused
  std::vector<std::int32_t> tile_groups;   // [chunks, tiles_per_chunk + 1]: tile t = groups [t, t+1) (chunk-local)
  std::int64_t written_groups = 0, read_only_groups = 0;  // slots (snapshot rows), not pieces
};

// The plan of a call with slots writes [P, T, W] and reads [P, T, R] (absolute rows) at chunk C,
// tile length L (>= 1) and groups of at most max_group records (0: whole slots).
WalkPlan make_walk_plan(const std::vector<std::int32_t>& writes, const std::vector<std::int32_t>& reads,
                        std::int64_t P, std::int64_t T, std::int64_t W, std::int64_t R, std::int64_t C,
                        std::int64_t L, std::int64_t max_group = 0);

}  // namespace sdm::bench

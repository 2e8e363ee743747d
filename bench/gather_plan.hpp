// gather_plan.hpp - the plan of a gather by distinct rows over recorded slots, built on the host:
// what the gather floor benchmark (bench/cuda/gather_floor.cu) replays to measure the design's
// gather_groups (issue 24 milestone 4, ../shared/design/ENGINE-V3.md §4.5b; its review §3 (b) asks
// for this number first) before it is built into the engine.
//
// The forward's gather sums, for every chunk token, W bank rows (its writes' slots) and R bank rows
// (its reads'), each entry loading its row on its own: a chunk of C tokens requests C (W + R) rows,
// of which under reuse only a fraction are distinct (heavy reuse about 0.1). A gather by distinct
// rows copies each distinct row of a block of tokens on chip once and lets every entry read it
// there. The plan cuts each chunk n = ti * P + p (tokens [ti*C, ti*C + C) of stream p; tokens past
// T read nothing) into blocks of consecutive tokens whose rows (writes' and reads' together) number
// at most max_rows, greedily in token order; a block's rows are its distinct slots in ascending
// order, and each entry gets its row's index in its block (its ordinal).
//
// Entries sit in the engine's Phase-1 layout: chunk token n*C + i, then the lane (k: W, q: R).
// Slots < 0 (masked) and tokens past T have no row: ordinal -1, slot -1.
#pragma once

#include <cstdint>
#include <vector>

namespace sdm::bench {

struct GatherBlock {
  std::int32_t chunk = 0;      // n = ti * P + p
  std::int32_t first = 0;      // chunk tokens [first, first + count)
  std::int32_t count = 0;
  std::int32_t row_first = 0;  // its rows: GatherPlan::rows[row_first, row_first + rows)
  std::int32_t rows = 0;
};

struct GatherPlan {
  std::int64_t chunks = 0, steps = 0, max_rows = 0;
  std::vector<GatherBlock> blocks;        // chunk-major, so step ti's are contiguous
  std::vector<std::int64_t> step_begin;   // [steps + 1]: step ti's blocks are [step_begin[ti], step_begin[ti + 1])
  std::vector<std::int32_t> rows;         // every block's distinct rows (absolute), ascending within a block
  std::vector<std::int32_t> k_slot, q_slot;  // [chunks * C, W] / [chunks * C, R]: the entry's row, -1 for none
  std::vector<std::int16_t> k_ord, q_ord;    // the same entries' ordinals in their blocks, -1 for none
  std::int64_t entries_with_rows = 0;     // entries with a row (the rows a per-entry gather requests)
};

// The plan of a call with slots writes [P, T, W] and reads [P, T, R] (absolute rows, < 0: masked) at
// chunk C, blocks of at most max_rows distinct rows (1 <= max_rows <= 32767, and at least any one
// token's distinct rows: std::invalid_argument otherwise).
GatherPlan make_gather_plan(const std::vector<std::int32_t>& writes, const std::vector<std::int32_t>& reads,
                            std::int64_t P, std::int64_t T, std::int64_t W, std::int64_t R, std::int64_t C,
                            std::int64_t max_rows);

}  // namespace sdm::bench

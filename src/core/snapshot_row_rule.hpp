// snapshot_row_rule.hpp - where both engines store a write group's snapshot row (docs/spec.md §4),
// written once: the CPU engine (cpu/engine/snapshot_rows.hpp) and the CUDA engine
// (cuda/forward/group_rows.cu, cuda/saved/group_rows.cuh) place and find rows by these functions
// alone, so a call's rows are numbered the same on either engine.
//
// A chunk's write groups are its distinct in-range write rows (a padding token, an index outside
// the stream's rows and a lane repeating an earlier lane's row in its token start none). Chunk n =
// ti*P + p (time-major). Group ordinal k: the group's place among chunk n's groups in ascending
// bank row. first[n]: the exclusive scan, in n order, of the chunks' group counts. The group's
// row is first[n] + k; the call's rows in use are the total (write_groups_count). fp8 / int4
// scales follow the row: scale index = row (their region keeps the worst case's N*C*W entries).
// A row >= the buffer's rows (a too-small `saved` under validate=False) is never stored; a reader
// that meets one reads the buffer's last row instead (no access past the buffer; the gradients of
// such a call are unspecified).
#pragma once

#include <cstdint>

#include "core/host_device.hpp"

namespace sdm::core {

SDM_HOST_DEVICE std::int64_t write_chunk(std::int64_t time_chunk, std::int64_t stream, std::int64_t streams) {
  return time_chunk * streams + stream;
}

SDM_HOST_DEVICE std::int64_t group_snapshot_row(std::int64_t chunk_first_row, std::int64_t ordinal) {
  return chunk_first_row + ordinal;
}

// Whether `row` lies in a buffer of `rows` snapshot rows (the writers store only those).
SDM_HOST_DEVICE bool snapshot_row_stored(std::int64_t row, std::int64_t rows) { return row < rows; }

// The row a reader uses for `row`: itself when stored, else the buffer's last (rows >= 1).
SDM_HOST_DEVICE std::int64_t snapshot_row_read(std::int64_t row, std::int64_t rows) {
  return snapshot_row_stored(row, rows) ? row : rows - 1;
}

// The layouts' invariant (cpu/engine/saved_layout.cpp, cuda/saved/layout.cu call it where they are
// made): a buffer holds rows >= 1 snapshot rows, so snapshot_row_read's rows - 1 is a row. Throws
// sdm::RuntimeError (an internal error: the plan never gives fewer) otherwise.
void check_layout_rows(std::int64_t rows);

// Throws sdm::ValueError naming `saved` when a call's `groups` write groups exceed the `rows` its
// buffer was planned for (options.snapshot_rows); both engines call it before writing anything.
void check_write_groups_fit(std::int64_t groups, std::int64_t rows);

}  // namespace sdm::core

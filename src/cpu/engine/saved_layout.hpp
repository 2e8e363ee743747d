// saved_layout.hpp - the byte layout of the saving forward's buffer (`saved`, u8), a
// function of the plan only (its shape and effective snapshot mode; write_read_saved_bytes).
//
// Regions, each starting at a multiple of kSavedAlign bytes from the buffer start (every
// access goes through memcpy, so the buffer itself needs no alignment):
//   delta     [P*T, hd] f32   delta_i of every token (stream-major, token p*T + t)
//   residual  [P*T, hd] f32   v_i - ret_i
//   scales    [N*C*W] f32     per-row quantiser scale (fp8 / int4 only; else empty): the worst case
//                             whatever the rows, 4 bytes a write entry
//   payload   [rows, row_bytes]  pre-write row of each write group, at the row snapshot_rows.hpp
//             gives (chunk n = ti*P + p, time-major, group ordinal k: row first[n] + k); encoded as
//             snapshot_codec.hpp says. rows = plan.snapshot_rows (N*C*W worst case, or the call's
//             write-group count): last, so a buffer for fewer rows is the worst-case one cut short.
// Written by the saving forward: delta and residual whole, and the snapshot row and scale of each
// write group. Never written, never read: the padding before each region's start and the snapshot
// rows (and scales) past the call's group count; they keep the caller's bytes.
//
// What is NOT saved, and why: the Phase-1 plan (groups, L, P, Lambda, k_eff, q_w, A, QK, X).
// The backward rebuilds it from the inputs with the same code (chunk_plan.hpp), which gives
// bit-identical values because Phase 1 is a deterministic function of the chunk's inputs.
// That keeps the layout to four flat regions with no record formats to keep in sync, costs
// no N*C*C matrices of memory, and adds one Phase 1 per chunk (no bank traffic) to the
// backward.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/validate.hpp"
#include "sdm/options.hpp"
#include "snapshot_codec.hpp"

namespace sdm::cpu {

inline constexpr std::size_t kSavedAlign = 64;

struct SavedLayout {
  SnapshotFormat snapshot;
  std::size_t delta = 0, residual = 0, scales = 0, payload = 0;  // region offsets
  std::size_t total = 0;

  // Byte offset of f32 element (token, column) in the delta / residual region.
  std::size_t token_offset(std::size_t region, std::int64_t token, std::int64_t hd, std::int64_t col) const {
    return region + static_cast<std::size_t>(token * hd + col) * sizeof(float);
  }
  // Byte offsets of snapshot row `row`'s payload and scale.
  std::size_t row_payload(std::int64_t row) const { return payload + static_cast<std::size_t>(row) * snapshot.row_bytes; }
  std::size_t row_scale(std::int64_t row) const { return scales + static_cast<std::size_t>(row) * sizeof(float); }
};

// Of the plan's shape and effective snapshot mode.
SavedLayout saved_layout(const WriteReadPlan& plan);

}  // namespace sdm::cpu

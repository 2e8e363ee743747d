// bank_at_chunk.cuh - the bank row M0[s] at the start of the chunk the backward walks, found
// without writing the bank (docs/spec.md §4: the backward never restores in place while it walks).
//
// The backward walks chunks in reverse. A chunk leaves a row it does not write unchanged, so the
// row at the start of chunk n is the pre-write row of the earliest chunk n' >= n that writes it
// (its saved snapshot row, decoded), or the final bank row when no chunk >= n writes it.
// row_source[s] (one per bank row of the streams, P*sps) names that snapshot row (the write group's
// row group_first[n'] + its ordinal, saved/group_rows.cuh, saved/snapshot_rows.cuh) or holds -1: set to -1 before the walk, and
// to chunk n's snapshot row by the worker of chunk n's write group of s. Within chunk n the
// read-only groups read row_source only at slots chunk n does not write (a written slot's reads are
// its write group's, M0 = its decoded pre), so no group of a chunk reads an entry another writes.
// The decoded values are those a restored bank row holds (snapshot_rows.cuh: exact in E, the saved
// bits in mode "none"), so every result keeps the bits of a walk over a bank restored chunk by
// chunk. restore_initial_bank (restore.cu) writes each row's last source back when the caller asks
// for the initial bank.
#pragma once

#include <cstdint>

#include "cuda/backward/backward.hpp"
#include "cuda/common/prefetch.cuh"
#include "cuda/common/rows.cuh"
#include "cuda/saved/snapshot_rows.cuh"

namespace sdm::cuda {

constexpr std::int64_t kFinalBankRow = -1;  // row_source: the row is the final bank's

// Where one lane's pieces of M0[s] come from: E values at `row` (the final bank row, or in mode
// "none" the snapshot row, whose payload is the row's E bits), else (quantised modes) the snapshot
// row `snapshot` (payload and scale moved to it: row 0) decoded.
template <typename E, SnapshotQuant kMode>
struct BankRow {
  const E* row = nullptr;
  SnapshotRows snapshot;

  // The piece at column c0 (c0 < hd) as f32; returns how many columns are real (load_piece's).
  template <bool kVec>
  __device__ __forceinline__ int load(std::int64_t c0, std::int64_t hd, float (&x)[kLaneCols]) const {
    if constexpr (kMode != SnapshotQuant::none) {
      if (row == nullptr) {
        load_snapshot_piece<kVec, E>(snapshot, 0, c0, hd, x);
        return kVec || hd - c0 >= kLaneCols ? kLaneCols : static_cast<int>(hd - c0);
      }
    }
    return load_piece<kVec>(row, c0, hd, x);
  }

  // Asks L2 for the row (prefetch_row_l2; a hint, no value changes).
  __device__ __forceinline__ void prefetch(std::int64_t hd, int lane) const {
    if constexpr (kMode != SnapshotQuant::none) {
      if (row == nullptr) {
        prefetch_row_l2(static_cast<const unsigned char*>(snapshot.payload), snapshot.row_bytes, lane);
        return;
      }
    }
    prefetch_row_l2(reinterpret_cast<const unsigned char*>(row), hd * static_cast<std::int64_t>(sizeof(E)), lane);
  }
};

// M0[slot] at the start of the chunk being walked, given the slot's row source (row_source[slot],
// read by the caller: the staged walk loads a batch's sources with its tasks, one load per lane).
template <typename E, SnapshotQuant kMode>
__device__ __forceinline__ BankRow<E, kMode> bank_row_of(const BackwardBuffers& bb, std::int64_t slot,
                                                         std::int64_t source, std::int64_t hd) {
  BankRow<E, kMode> m0;
  if (source == kFinalBankRow) {
    m0.row = static_cast<const E*>(bb.bank) + slot * hd;
    return m0;
  }
  const unsigned char* payload = static_cast<const unsigned char*>(bb.snapshot.payload) + source * bb.snapshot.row_bytes;
  if constexpr (kMode == SnapshotQuant::none) {
    m0.row = reinterpret_cast<const E*>(payload);
  } else {
    m0.snapshot = snapshot_row<kMode>(bb.snapshot, payload, source);
  }
  return m0;
}

// M0[slot] at the start of the chunk being walked (row_source read once; all lanes the same).
template <typename E, SnapshotQuant kMode>
__device__ __forceinline__ BankRow<E, kMode> bank_row_at_chunk(const BackwardBuffers& bb, std::int64_t slot,
                                                               std::int64_t hd) {
  return bank_row_of<E, kMode>(bb, slot, bb.row_source[slot], hd);
}

}  // namespace sdm::cuda

// phase1.hpp - Phase 1 of the chunked forward on the device, for all N chunks at once
// (docs/spec.md §2, per-chunk quantities); it does not touch the bank.
//
// Inputs: the op's k_idx, k_val, g, beta, q_idx, q_val (Inputs). Outputs: the arrays of
// Phase1Buffers below, each field stating its shape; "sorted" arrays are indexed by n*C*W + q,
// q the in-chunk sorted position of a write entry (slot groups in token order, masked last).
// Math: per slot group the f64 inclusive scan of the floored log-decays (core/log_decay.hpp: every
// factor is expf(f32(.)) of an f64 L or a difference of two), the pair matrices A and QK, and the
// solve X = (I + diag(beta) A)^-1 with QX = tril(QK) X. Decomposition: phase1.cu's launches.
// Determinism: a stable sort of unique integer keys; every f32 sum in a fixed order (scan: token
// order within a slot group; A and QK rows: from +0, lanes ascending, then group entries by
// descending token, each term fmaf(coef kappa, exp(..), acc); solve: from +0, j ascending, fmaf).
// No atomics; the no-grad and the saving forward run the same kernels on the same inputs, so their
// Phase 1 arrays are bitwise equal. The backward runs none of these kernels: it reads the saving
// forward's arrays.
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime.h>

#include "cuda/common/geometry.hpp"
#include "cuda/common/workspace.hpp"

namespace sdm::cuda {

// Padding and masked entries hold 0 (f32 / f64), -1 (slots, positions) unless stated otherwise.
struct Phase1Buffers {
  // Read by the backward too (plan_phase1_kept / bind_saved_phase1).
  std::uint64_t* keys = nullptr;      // u64 sorted: the write keys (sort/entry_keys.hpp)
  double* L = nullptr;                // f64 sorted: L_e, the per-slot inclusive cumulative log-decay
  float* kappa = nullptr;             // f32 sorted: k_val rounded to the bank dtype
  float* wcoef = nullptr;             // f32 sorted: kappa_e exp(Lambda_s - L_e) (coef_e of docs/spec.md §2)
  float* gdecay = nullptr;            // f32 sorted: exp(Lambda_s) of the entry's group (total decay of the slot)
  std::int32_t* inv_pos = nullptr;    // i32 [N, C, W]: in-chunk sorted position of entry (n, i, w), masked too
  std::int32_t* k_slot = nullptr;     // i32 [N, C, W]: absolute bank row of entry (n, i, w)
  float* k_eff = nullptr;             // f32 [N, C, W]: kappa exp(L_e)
  std::int32_t* q_slot = nullptr;     // i32 [N, C, R]: absolute row of read (n, i, r)
  std::int32_t* q_pos = nullptr;      // i32 [N, C, R]: sorted position of the read's last visible write; -1 if none
  float* q_rho = nullptr;             // f32 [N, C, R]: q_val rounded to the bank dtype
  float* q_w = nullptr;               // f32 [N, C, R]: rho exp(Lq), Lq = L at q_pos (0 if none)
  float* A = nullptr;                 // f32 [N, C, C]: strictly lower, zeros elsewhere
  float* QK = nullptr;                // f32 [N, C, C]: lower incl. the diagonal, zeros elsewhere
  float* X = nullptr;                 // f32 [N, C, C]: (I + diag(beta) A)^-1, zeros above the diagonal
  // The saving call's alone (in `saved`, bind_saved_phase1; null in a no-grad call, which skips them):
  // where each write group's snapshot row is (core/snapshot_row_rule.hpp, group_rows.cu).
  std::int32_t* group_ordinal = nullptr;  // i32 sorted: at a group's first position its ordinal among the
                                          // chunk's groups (ascending slot); -1 at every other position
  std::int64_t* group_first = nullptr;    // i64 [N + 1]: chunk n's first snapshot row (exclusive scan of the
                                          // chunks' group counts, n ascending); [N]: the call's write groups
  // The forward's alone (plan_phase1_forward_only; null in the backward).
  std::uint64_t* keys_unsorted = nullptr;  // u64 [N, C, W]: the write keys in entry order (scratch)
  std::int32_t* prev_pos = nullptr;   // i32 [N, C, W]: sorted position of the write before entry (n, i, w)
                                      // in its slot group (its own position - 1); -1 for a group's first
                                      // entry; read only by pair_products
  float* QX = nullptr;                // f32 [N, C, C]: tril(QK) X, zeros above the diagonal
  void* sort_temp = nullptr;          // the write-key sort's device storage (0 bytes when every chunk is
  std::size_t sort_temp_bytes = 0;    // sorted by one CTA: sort/chunk_sort.hpp)
};

// Where Phase 1's arrays live: those the backward reads (plan_phase1_kept) sit in the workspace of
// a no-grad forward and in the caller's `saved` buffer in a saving forward and its backward
// (bind_saved_phase1, saved/layout.hpp); the rest (plan_phase1_forward_only) always in the
// forward's workspace. Both plan in `ws` before ws.allocate().
void plan_phase1_kept(const Geometry& geo, Workspace& ws, Phase1Buffers& buf);
void plan_phase1_forward_only(const Geometry& geo, Workspace& ws, Phase1Buffers& buf);

// Runs Phase 1 into every array of `buf` (all planned or bound; the group numbering only when
// group_first is bound).
void run_phase1(const Geometry& geo, const Inputs& in, bool bf16_bank, const Phase1Buffers& buf,
                cudaStream_t stream);

}  // namespace sdm::cuda

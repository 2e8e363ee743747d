// phase1.hpp - Phase 1 of the chunked forward on the device, for all N chunks at once
// (docs/spec.md §2, per-chunk quantities); it does not touch the bank.
//
// Outputs (per chunk n; "sorted" arrays are indexed by n*C*W + q, q the sorted position):
//   keys      u64 [N*C*W] sorted write keys (sort/entry_keys.hpp): slot groups in token order
//   L         f64 sorted   L_e = per-slot inclusive cumulative log-decay (segmented f64 scan of the
//                          floored gammas, core/log_decay.hpp: every factor is expf(f32(.)) of an
//                          f64 L or difference of two); 0 for padding / masked
//   kappa     f32 sorted   k_val rounded to the bank dtype; 0 for padding / masked
//   wcoef     f32 sorted   kappa_e * exp(Lambda_s - L_e)    (write coefficient, coef_e of docs/spec.md §2); 0 for padding / masked
//   gdecay    f32 sorted   exp(Lambda_s) of the entry's group (total decay of the slot); 0 for padding / masked
//   inv_pos   i32 [N, C, W] in-chunk sorted position of entry (n, i, w)
//   k_slot    i32 [N, C, W] absolute bank row of entry (n, i, w); -1 for padding / masked
//   prev_pos  i32 [N, C, W] in-chunk sorted position of the write before entry (n, i, w) in its
//                           slot group (its own position - 1); -1 for a group's first entry and for
//                           padding / masked entries
//   k_eff     f32 [N, C, W] kappa * exp(L_e); 0 where k_slot < 0
//   q_slot    i32 [N, C, R] absolute row of read (n, i, r); -1 for padding / masked
//   q_pos     i32 [N, C, R] in-chunk sorted position of the read's last visible write; -1 if none
//   q_rho     f32 [N, C, R] q_val rounded to the bank dtype; 0 for padding / masked
//   q_w       f32 [N, C, R] rho * exp(Lq), Lq = Lambda_sigma(i) (0 if sigma unwritten so far)
//   A, QK     f32 [N, C, C] A strictly lower, QK lower incl. the diagonal, zeros elsewhere
//   X, QX     f32 [N, C, C] X = (I + diag(beta) A)^-1, QX = tril(QK) X, zeros above the diagonal
// Scratch: keys_unsorted, the sort's temp storage; prev_pos is read only inside Phase 1 (pair_products).
//
// Determinism: a stable radix sort on unique keys; every f32 sum runs in a fixed order (scan:
// token order within a slot group; A and QK rows: from +0, lanes ascending, then group entries by
// descending token, each term fmaf(coef kappa, exp(..), acc); solve: from +0, j ascending, fmaf).
// No atomics; the no-grad and the saving forward run the same kernels on the same inputs, so their
// Phase 1 arrays are bitwise equal.
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime.h>

#include "cuda/common/geometry.hpp"
#include "cuda/common/workspace.hpp"

namespace sdm::cuda {

struct Phase1Buffers {
  // Read by the backward too (plan_phase1_kept / bind_saved_phase1).
  std::uint64_t* keys = nullptr;
  double* L = nullptr;
  float* kappa = nullptr;
  float* wcoef = nullptr;
  float* gdecay = nullptr;
  std::int32_t* inv_pos = nullptr;
  std::int32_t* k_slot = nullptr;
  float* k_eff = nullptr;
  std::int32_t* q_slot = nullptr;
  std::int32_t* q_pos = nullptr;
  float* q_rho = nullptr;
  float* q_w = nullptr;
  float* A = nullptr;
  float* QK = nullptr;
  float* X = nullptr;
  // The forward's alone (plan_phase1_forward_only; null in the backward).
  std::uint64_t* keys_unsorted = nullptr;
  std::int32_t* prev_pos = nullptr;
  float* QX = nullptr;
  void* sort_temp = nullptr;         // the write-key sort's device storage (chunk_sort.hpp; 0 bytes
  std::size_t sort_temp_bytes = 0;   // when every chunk is sorted by one CTA)
};

// Where Phase 1's arrays live: those the backward reads (keys, L, kappa, wcoef, gdecay, inv_pos, k_slot,
// k_eff, q_slot, q_pos, q_rho, q_w, A, QK, X: plan_phase1_kept) sit in the workspace of a no-grad
// forward and in the caller's `saved` buffer in a saving forward and its backward
// (bind_saved_phase1, saved/layout.hpp); the rest (keys_unsorted, prev_pos, QX, sort temp:
// plan_phase1_forward_only) always in the forward's workspace. The backward runs none of these
// kernels: it reads the saving forward's arrays.
// Plan Phase 1 buffers in `ws` (before ws.allocate()): the arrays the backward reads (a no-grad
// forward; a saving forward binds them in `saved` instead), and the forward's own.
void plan_phase1_kept(const Geometry& geo, Workspace& ws, Phase1Buffers& buf);
void plan_phase1_forward_only(const Geometry& geo, Workspace& ws, Phase1Buffers& buf);

// Runs Phase 1 into every array of `buf` (all planned or bound).
void run_phase1(const Geometry& geo, const Inputs& in, bool bf16_bank, const Phase1Buffers& buf,
                cudaStream_t stream);

}  // namespace sdm::cuda

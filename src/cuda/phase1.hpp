// phase1.hpp - Phase 1 of the chunked forward on the device, for all N chunks at once
// (SPEC B.1, B.4); it does not touch the bank.
//
// Outputs (per chunk n; "sorted" arrays are indexed by n*C*W + q, q the sorted position):
//   keys      u64 [N*C*W] sorted write keys (chunk_plan.hpp): slot groups in token order
//   L         f32 sorted   L_e = per-slot inclusive cumulative log-decay (segmented f32 scan)
//   kappa     f32 sorted   k_val rounded to the bank dtype
//   wcoef     f32 sorted   kappa_e * exp(Lambda_s - L_e)    (write coefficient, B.2); 0 for padding / masked
//   gdecay    f32 sorted   exp(Lambda_s) of the entry's group (total decay of the slot); 0 for padding / masked
//   k_slot    i32 [N, C, W] absolute bank row of entry (n, i, w); -1 for padding / masked
//   prev_pos  i32 [N, C, W] in-chunk sorted position of the write before entry (n, i, w) in its
//                           slot group (its own position - 1); -1 for a group's first entry and for
//                           padding / masked entries
//   k_eff     f32 [N, C, W] kappa * exp(L_e); 0 where k_slot < 0
//   q_slot    i32 [N, C, R] absolute row of read (n, i, r); -1 for padding / masked
//   q_w       f32 [N, C, R] rho * exp(Lq), Lq = Lambda_sigma(i) (0 if sigma unwritten so far)
//   X, QX     f32 [N, C, C] X = (I + diag(beta) A)^-1, QX = tril(QK) X, zeros above the diagonal
// Scratch: keys_unsorted, inv_pos / q_pos (i32 [N,C,W] / [N,C,R]), q_rho, A, QK, sort temp.
//
// Determinism: a stable radix sort on unique keys; every f32 sum runs in a fixed order (scan:
// token order within a slot group; A and QK rows: from +0, lanes ascending, then group entries by
// descending token, each term fmaf(coef kappa, exp(..), acc); solve: from +0, j ascending, fmaf).
// No atomics; the forward and the backward run these same kernels, so their Phase 1 is bitwise
// equal.
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime.h>

#include "chunk_plan.hpp"
#include "workspace.hpp"

namespace sdm::cuda {

struct Phase1Buffers {
  std::uint64_t* keys_unsorted = nullptr;
  std::uint64_t* keys = nullptr;
  float* L = nullptr;
  float* kappa = nullptr;
  float* wcoef = nullptr;
  float* gdecay = nullptr;
  std::int32_t* inv_pos = nullptr;
  std::int32_t* k_slot = nullptr;
  std::int32_t* prev_pos = nullptr;
  float* k_eff = nullptr;
  std::int32_t* q_slot = nullptr;
  std::int32_t* q_pos = nullptr;
  float* q_rho = nullptr;
  float* q_w = nullptr;
  float* A = nullptr;
  float* QK = nullptr;
  float* X = nullptr;
  float* QX = nullptr;
  void* sort_temp = nullptr;         // the write-key sort's device storage (chunk_sort.hpp; 0 bytes
  std::size_t sort_temp_bytes = 0;   // when every chunk is sorted by one CTA)
};

// The lowest key bit the sorts of Phase 1's write keys and the backward's read keys sort on (the
// chunk and slot bits above it; chunk_sort.hpp sorts each chunk on its slot bits). Exact for keys
// generated in entry order, n*C*X + i*X + x: they arrive in ascending (token, lane) order within
// each chunk, and the sort is stable.
int sorted_bits_begin(const KeyLayout& layout);

// Plans every Phase 1 buffer in `ws` (before ws.allocate()).
void plan_phase1(const Geometry& geo, Workspace& ws, Phase1Buffers& buf);

void run_phase1(const Geometry& geo, const Inputs& in, bool bf16_bank, const Phase1Buffers& buf,
                cudaStream_t stream);

}  // namespace sdm::cuda

// phase1_kernels.hpp - the launchers of Phase 1's kernels after the write-key sort, in the order
// run_phase1 (phase1.cu) runs them; each kernel's file states its work and order of sums.
//
//   number_groups  group_rows.cu     (saving calls) group_ordinal, group_first: the snapshot rows
//   scan_groups    scan_groups.cu    per-slot scans: L, kappa, k_eff, wcoef, gdecay, inv_pos, prev_pos
//   lookup_reads   lookup_reads.cu   each read's last visible write: q_slot, q_pos, q_rho, q_w
//   pair_products  pair_products.cu  A and QK
//   solve          solve.cu          X = (I + diag(beta) A)^-1 and QX = tril(QK) X
#pragma once

#include <cuda_runtime.h>

#include "cuda/common/geometry.hpp"
#include "cuda/forward/phase1.hpp"

namespace sdm::cuda {

// group_ordinal may be null (only the counts and their scan into group_first [N + 1]).
void launch_number_groups(const Geometry& geo, const std::uint64_t* keys, std::int32_t* ordinal,
                          std::int64_t* group_first, cudaStream_t stream);
void launch_scan_groups(const Geometry& geo, const Inputs& in, bool bf16_bank, const Phase1Buffers& buf,
                        cudaStream_t stream);
void launch_lookup_reads(const Geometry& geo, const Inputs& in, bool bf16_bank, const Phase1Buffers& buf,
                         cudaStream_t stream);
void launch_pair_products(const Geometry& geo, const Phase1Buffers& buf, cudaStream_t stream);
void launch_solve(const Geometry& geo, const Inputs& in, const Phase1Buffers& buf, cudaStream_t stream);

}  // namespace sdm::cuda

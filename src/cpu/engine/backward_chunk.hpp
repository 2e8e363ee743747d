// backward_chunk.hpp - the backward of one chunk (docs/spec.md §4), given its Phase-1 plan.
//
// On entry: the bank row at the chunk's END is, for each of the chunk's rows, the final bank
// row or the snapshot row that job.row_source names (the pre-write row of the earliest later
// chunk writing it); the gradient bank G holds dLoss/dM at the chunk's end. On exit: the chunk's
// written rows name their snapshot rows in row_source (so the chunk's start M0 is found the same
// way; the bank is only read), G holds dLoss/dM0 for the chunk's rows, and the chunk's tokens
// have their gradients written.
// Reads: saved delta, residual [n, hd] f32 and snapshot rows; grad_readings dy [n, hd].
//
// The math and its orders: stated above backward_chunk below. Dots use row_math.hpp's fixed
// lane order; the chunk runs on one thread, so every sum has one fixed order: results are
// bitwise reproducible and independent of the thread count.
#pragma once

#include <cstdint>
#include <vector>

#include "chunk_plan.hpp"
#include "core/validate.hpp"
#include "element_io.hpp"
#include "saved_layout.hpp"
#include "snapshot_rows.hpp"
#include "sdm/ops.hpp"

namespace sdm::cpu {

struct BackwardJob {
  const WriteReadArgs& args;
  const TensorRef& grad_readings;
  const WriteReadGrads& grads;
  const core::WriteReadShape& shape;
  const SavedLayout& layout;
  const SnapshotRowStarts& snapshot_rows;  // where each write group's snapshot row is
  const unsigned char* saved;
  RowMatrix bank;       // the final bank (only read)
  RowMatrix grad_bank;  // G
  // Per bank row of the streams (P*sps): the snapshot row holding it at the chunk being walked,
  // or kFinalBankRow (the final bank's row). Streams own disjoint rows.
  std::int64_t* row_source;
};

inline constexpr std::int64_t kFinalBankRow = -1;

// Writes the initial bank into job.bank from the row sources after the walk (stream p's rows):
// every row some chunk writes gets the snapshot row of the first chunk writing it.
void restore_initial_rows(const BackwardJob& job, std::int64_t p);

// Per-worker scratch, reused across chunks.
struct BackwardScratch {
  ChunkPlan plan;
  std::vector<float> dy, delta, res, ddelta, du, dret;  // [C, hd]
  std::vector<float> g_rows;                            // [groups, hd]: G, then G'
  std::vector<float> row, acc;                          // [hd]
  std::vector<float> decoded;                           // [hd]: a decoded snapshot row (M0 of a read)
  std::vector<unsigned char> bank_row;                  // the same restored in the bank dtype
  std::vector<const float*> row_list;                   // the rows of one weighted sum
  std::vector<float> weight_list;                       // and their weights
  std::vector<float> dqk, dms;                          // [C, C]
  std::vector<unsigned char> a_pair, qk_pair;           // [C, C]: entries of dms, dqk in use
  std::vector<float> dk_eff, dc, dkappa, dL, dP, dgamma;  // [C*W]
  std::vector<float> dq_w, drho, dLq;                   // [C*R]
  std::vector<float> dbeta, dlambda;                    // [C], [groups]
  std::vector<std::int32_t> read_group_of;              // write group -> read group or -1
};

// Math (f32), with G the incoming rows, pre the decoded snapshot rows (= M0 at written rows):
//   GWR   D_i      = sum_w coef_(i,w) G[s_(i,w)]                           (w ascending)
//         ddelta_j = D_j + sum_{i>=j} QK[i][j] dy_i                       (i ascending)
//         dU_j     = sum_{i>=j} X[i][j] ddelta_i                          (i ascending)
//         dv_i = beta_i dU_i;  dret_i = -beta_i dU_i
//         dMs[i][j] = -<dU_i, delta_j> (j < i);  dA[i][j] = beta_i dMs[i][j]
//         dQK[i][j] = <dy_i, delta_j> (j <= i)
//         dbeta_i = <res_i, dU_i> + sum_{j<i} A[i][j] dMs[i][j]
//   PA    per write group s: dLambda_s = decay_s <G[s], pre_s>;  per entry e of the group:
//         dc_e = <delta_{i_e}, G[s]>, dk_eff_e = <dret_{i_e}, pre_s>;
//         G'[s] = decay_s G[s] + sum_{e, sorted} k_eff_e dret_{i_e};  row_source[s] <- snapshot
//   GDS   per valid read q = (i, r) of row sigma: dq_w = <dy_i, M0[sigma]> (M0: the row source's
//         row, restored as the bank dtype holds it); per read group: G[sigma] <- rnd(base + sum_{q sorted} q_w dy_i) with
//         base = G'[sigma] if sigma is written in the chunk, else G[sigma]; written rows not
//         read store rnd(G'[s]). One rounding per touched row per chunk (docs/spec.md §4).
//   Phase B (C.2 steps 9-11): through A (pairs of each group) and QK (each read against the
//         writes it sees) to dkappa, drho, dL, dLq; collect dkappa += e^L dk_eff + e^P dc,
//         dL += k_eff dk_eff, dP = coef dc, drho += e^Lq dq_w, dLq += q_w dq_w; per group
//         dgamma_e = (sum_{e' >= e} dL_e' + sum_{reads at tokens >= i_e} dLq)
//                    + sum_{e' < e} dP_e' + dLambda_s, sums in the group's (token) order.
//         dg = dgamma (G = W) or sum_w dgamma_(i,w) (G = 1, w ascending).
// Only the dMs and dQK entries that Phase B reads are computed: dMs[i][j] for the pairs of
// A (tokens j < i writing one row), dQK[i][j] for the pairs of QK (a read of token i seeing a
// write of token j); elsewhere A and QK are structural zeros and the dbeta sum skips those
// terms (each would add 0 * dMs = +-0 to a sum that starts at +0: no bit changes while dMs
// is finite). The weighted sums and triangular products run in row_kernels.hpp's kernels in
// the orders above (their structural-zero rule is stated there).
// Dots use row_math.hpp's fixed lane order. The chunk runs on one thread, so every sum has
// one fixed order: results are bitwise reproducible and independent of the thread count.
//
// Backward of the chunk whose plan is scratch.plan (already built for `time_chunk`).
void backward_chunk(const BackwardJob& job, std::int64_t time_chunk, BackwardScratch& scratch);

}  // namespace sdm::cpu

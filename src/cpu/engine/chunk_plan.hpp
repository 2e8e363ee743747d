// chunk_plan.hpp - Phase 1 of one chunk (docs/spec.md §2): everything the chunk needs that
// does not depend on the bank.
//
// Input: one chunk = tokens [t0, t0 + n) of stream p (n <= C; only the last chunk of a
// stream is partial). Per write entry e = (i, w), e = i*W + w, and read entry q = (i, r),
// q = i*R + r, of the chunk:
//   kappa_e = f32(rnd_E(k_val))   gamma_e = floor_log_decay(f32(g[., 0 or w]))   beta_i = f32(beta)
//   rho_q   = f32(rnd_E(q_val))
// (floor_log_decay: max(gamma, -128), core/log_decay.hpp; it changes no f32 result.)
// An index outside stream p's rows [p*sps, (p+1)*sps) is masked (only reachable with
// validation off, docs/spec.md §8): the entry gets kMaskedRow, no group, and takes no part in any
// sum below (no decay, no write, nothing read, zero gradient). So is a write lane repeating an
// earlier lane's row within its token (core/repeated_writes.hpp): the first lane writes.
//
// Write groups, the scans, reads and the C x C matrices: stated above ChunkPlan below. Everything
// is a deterministic function of the chunk's inputs (sequential, fixed orders), so the backward
// recomputes a plan bit-identical to the forward's.
#pragma once

#include <cstdint>
#include <vector>

#include "core/validate.hpp"
#include "sdm/ops.hpp"

namespace sdm::cpu {

inline constexpr std::int64_t kMaskedRow = -1;

// A sort key of the grouping: (bank row, entry index).
struct SortKey {
  std::int64_t row = 0;
  std::int32_t entry = 0;
};

// The valid write entries of one bank row in one chunk: sorted positions [begin, end).
struct WriteGroup {
  std::int32_t begin = 0, end = 0;
  std::int64_t row = 0;
  float decay = 1.0f;  // expf(Lambda_s), Lambda_s = the sum of the group's gammas
};

// The valid read entries of one bank row in one chunk, sorted by (token, lane): read-sorted
// positions [begin, end); write_group is the row's write group, or -1 if it is not written.
struct ReadGroup {
  std::int32_t begin = 0, end = 0;
  std::int64_t row = 0;
  std::int32_t write_group = -1;
};

// Write groups: the valid write entries sorted by (row, token, lane); a group is the run of
// one row. Within a group (entries in token order), float64 segmented scans from +0
// (docs/spec.md §2; float64 so that differences of two sums are exact, core/log_decay.hpp):
//   L_e        = sum of gamma over the group's entries up to and including e   (f64)
//   Lambda_s   = L of the group's last entry;  decay_s = expf(f32(Lambda_s))
//   P_e        = f32(Lambda_s - L_e), the sum of gamma over the group's entries after e
//   k_eff_e    = kappa_e * expf(f32(L_e))      coef_e = kappa_e * expf(P_e)
// Reads: Lq_q = L of the last entry of the read row's group with token <= i (0 if none:
// reads come after the token's writes), q_w = rho_q * expf(f32(Lq_q)) (one f32 rounding, SPEC
// B.1). q_end marks that entry: entries [group.begin, q_end) are the writes the read sees.
// Matrices (C x C, row-major, rows and columns >= n unused), f32, docs/spec.md §2; each decay
// factor is expf of the float64 difference rounded to f32 (core::decay_factor):
//   A[i][j]  = sum over groups (ascending row) of kappa_e kappa_e' expf(f32(L_e - L_e')),
//              e in token i, e' in token j < i
//   QK[i][j] = sum over the reads of token i (ascending r), then the entries e' <= i of the
//              read row's group (token order), of rho_q kappa_e' expf(f32(Lq_q - L_e')), j <= i
//   X        = (I + diag(beta) A)^-1, unit lower triangular, by forward substitution
//              X[i][j] = -beta_i * sum_{k=j}^{i-1} A[i][k] X[k][j] (k ascending), skipping
//              the terms with A[i][k] = +-0 (tokens i and k share no row): they add +-0 to
//              a sum that starts at +0 and so is never -0, which changes no bit while X is
//              finite.
// exp(0) is taken as exactly 1 without the call (the value expf returns). expf(f32(L_e)) is
// computed once per entry and reused where the same argument recurs (Lambda_s is the L of the
// group's last entry, Lq_q the L of an entry): the same value, one call.
struct ChunkPlan {
  std::int64_t stream = 0, t0 = 0, n = 0;  // tokens [t0, t0 + n) of `stream`
  std::int64_t C = 0, W = 0, R = 0;

  // Write entries e = i*W + w, i < n.
  std::vector<std::int64_t> k_row;   // absolute bank row or kMaskedRow
  std::vector<std::int32_t> k_group;  // index into groups, -1 if masked
  std::vector<float> kappa, gamma, P, k_eff, coef;
  std::vector<float> decay_L;  // expf(f32(L_e)), computed once per entry (k_eff, decay, q_w)
  std::vector<double> L;  // f64 cumulative log-decays (chunk_plan.hpp's header)
  std::vector<std::int32_t> write_order;  // valid entries sorted by (row, token, lane)
  std::vector<WriteGroup> groups;         // ascending row

  // Read entries q = i*R + r, i < n.
  std::vector<std::int64_t> q_row;    // absolute bank row or kMaskedRow
  std::vector<std::int32_t> q_group;  // the read row's write group, -1 if none (or masked)
  std::vector<std::int32_t> q_end;    // write_order position after the last write seen
  std::vector<float> rho, q_w;
  std::vector<double> Lq;

  std::vector<float> beta;   // [n]
  std::vector<float> A, QK, X;  // [C, C]

  // Filled by build_read_groups (the backward's single-writer read side).
  std::vector<std::int32_t> read_order;  // valid reads sorted by (row, token, lane)
  std::vector<ReadGroup> read_groups;    // ascending row
  std::vector<SortKey> sort_keys, sort_scratch;  // scratch of the sorts
  // Write group of bank row row_group_base + x, or -1 ([slots_per_stream], chunk_plan.cpp).
  std::vector<std::int32_t> row_group;
  std::int64_t row_group_base = 0;

  std::int64_t token_of_write(std::int32_t e) const { return e / W; }
  std::int64_t token_of_read(std::int32_t q) const { return q / R; }
  float a(std::int64_t i, std::int64_t j) const { return A[static_cast<std::size_t>(i * C + j)]; }
  float qk(std::int64_t i, std::int64_t j) const { return QK[static_cast<std::size_t>(i * C + j)]; }
  float x(std::int64_t i, std::int64_t j) const { return X[static_cast<std::size_t>(i * C + j)]; }
};

// Builds the plan of chunk `time_chunk` of `stream` (vectors are reused across calls).
void build_chunk_plan(const WriteReadArgs& args, const core::WriteReadShape& shape, std::int64_t stream,
                      std::int64_t time_chunk, ChunkPlan& plan);

// Groups the plan's valid reads by row (sorted by row, token, lane) and links each read
// group to the write group of the same row.
void build_read_groups(ChunkPlan& plan);

}  // namespace sdm::cpu

// backward_chunk.cpp - the backward of one chunk; math and orders in backward_chunk.hpp.
#include "backward_chunk.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/log_decay.hpp"
#include "row_kernels.hpp"
#include "row_math.hpp"
#include "snapshot_codec.hpp"

namespace sdm::cpu {
namespace {

using std::size_t;

inline size_t at(std::int64_t i) { return static_cast<size_t>(i); }

// Prefetch distance (rows) of the bank and gradient-bank row loops; hints only.
constexpr std::size_t kRowsAhead = 4;

// Views of the scratch as [rows, hd] f32 matrices.
struct Rows {
  std::vector<float>& m;
  std::int64_t hd;
  float* operator()(std::int64_t i) const { return &m[at(i * hd)]; }
};

void size_scratch(const core::WriteReadShape& sh, BackwardScratch& ws) {
  const size_t tokens = at(sh.C * sh.hd);
  for (auto* v : {&ws.dy, &ws.delta, &ws.res, &ws.ddelta, &ws.du, &ws.dret}) v->resize(tokens);
  // The longest weighted sum: a write group (<= C * W entries) or a read group (<= C * R).
  const std::int64_t terms = std::max(sh.C * sh.W, sh.C * sh.R);
  ws.row_list.resize(at(terms));
  ws.weight_list.resize(at(terms));
  ws.g_rows.resize(at(std::max<std::int64_t>(1, static_cast<std::int64_t>(ws.plan.groups.size())) * sh.hd));
  ws.row.resize(at(sh.hd));
  ws.acc.resize(at(sh.hd));
  ws.decoded.resize(at(sh.hd));
  ws.bank_row.resize(at(sh.hd) * dtype_size(sh.bank));
  ws.dqk.assign(at(sh.C * sh.C), 0.0f);
  ws.dms.assign(at(sh.C * sh.C), 0.0f);
  for (auto* v : {&ws.dk_eff, &ws.dc, &ws.dkappa, &ws.dL, &ws.dP, &ws.dgamma}) v->assign(at(sh.C * sh.W), 0.0f);
  for (auto* v : {&ws.dq_w, &ws.drho, &ws.dLq}) v->assign(at(sh.C * sh.R), 0.0f);
  ws.dbeta.assign(at(sh.C), 0.0f);
  ws.dlambda.assign(ws.plan.groups.size(), 0.0f);
  ws.read_group_of.assign(ws.plan.groups.size(), -1);
}

// dy from grad_readings; delta and residual from the saved buffer.
void load_token_rows(const BackwardJob& job, BackwardScratch& ws) {
  const auto& sh = job.shape;
  const ChunkPlan& plan = ws.plan;
  const std::int64_t token0 = plan.stream * sh.T + plan.t0;
  const SavedLayout& layout = job.layout;
  const size_t bytes = at(sh.hd) * sizeof(float);
  for (std::int64_t i = 0; i < plan.n; ++i) {
    const std::int64_t token = token0 + i;
    load_elements(job.grad_readings, token * sh.hd, sh.hd, &ws.dy[at(i * sh.hd)]);
    std::memcpy(&ws.delta[at(i * sh.hd)], job.saved + layout.token_offset(layout.delta, token, sh.hd, 0), bytes);
    std::memcpy(&ws.res[at(i * sh.hd)], job.saved + layout.token_offset(layout.residual, token, sh.hd, 0), bytes);
  }
}

// Marks the (i, j) pairs of A and of QK, the dMs and dQK entries Phase B reads.
void mark_pairs(BackwardScratch& ws) {
  const ChunkPlan& plan = ws.plan;
  const std::int64_t C = plan.C;
  ws.a_pair.assign(at(C * C), 0);
  ws.qk_pair.assign(at(C * C), 0);
  for (const WriteGroup& group : plan.groups) {
    for (std::int32_t s = group.begin; s < group.end; ++s) {
      const std::int64_t i = plan.token_of_write(plan.write_order[at(s)]);
      for (std::int32_t s2 = group.begin; s2 < s; ++s2) {
        const std::int64_t j = plan.token_of_write(plan.write_order[at(s2)]);
        if (j < i) ws.a_pair[at(i * C + j)] = 1;
      }
    }
  }
  for (std::int64_t i = 0; i < plan.n; ++i) {
    for (std::int64_t r = 0; r < plan.R; ++r) {
      const size_t q = at(i * plan.R + r);
      if (plan.q_group[q] < 0) continue;
      for (std::int32_t s = plan.groups[at(plan.q_group[q])].begin; s < plan.q_end[q]; ++s) {
        ws.qk_pair[at(i * C + plan.token_of_write(plan.write_order[at(s)]))] = 1;
      }
    }
  }
}

// GWR, the transposed solve and the per-token scalars: ddelta, dU, dret, dv, dMs, dQK, dbeta.
void solve_side(const BackwardJob& job, BackwardScratch& ws) {
  const ChunkPlan& plan = ws.plan;
  const std::int64_t n = plan.n, hd = job.shape.hd, C = plan.C;
  const Rows dy{ws.dy, hd}, delta{ws.delta, hd}, res{ws.res, hd}, ddelta{ws.ddelta, hd}, du{ws.du, hd},
      dret{ws.dret, hd}, g_rows{ws.g_rows, hd};

  for (size_t k = 0; k < plan.groups.size(); ++k) {
    if (k + kRowsAhead < plan.groups.size()) job.grad_bank.prefetch(plan.groups[k + kRowsAhead].row);
    job.grad_bank.load(plan.groups[k].row, g_rows(at(k)));
  }
  // ddelta_j = sum_w coef_(j,w) G[s_(j,w)] (w ascending) + sum_{i>=j} QK[i][j] dy_i (i ascending).
  triangular_product<false>(plan.QK.data(), C, ws.dy.data(), ws.dret.data(), n, hd);  // dret: scratch here
  const float** rows = ws.row_list.data();
  float* weights = ws.weight_list.data();
  for (std::int64_t j = 0; j < n; ++j) {
    std::int64_t terms = 0;
    for (std::int64_t w = 0; w < plan.W; ++w) {
      const size_t e = at(j * plan.W + w);
      if (plan.k_group[e] < 0) continue;
      rows[terms] = g_rows(plan.k_group[e]);
      weights[terms++] = plan.coef[e];
    }
    float* d = ddelta(j);
    weighted_rows<float>(rows, weights, terms, nullptr, 0.0f, d, hd);
    const float* qk_dy = dret(j);
    for (std::int64_t c = 0; c < hd; ++c) d[c] += qk_dy[c];
  }
  triangular_product<false>(plan.X.data(), C, ws.ddelta.data(), ws.du.data(), n, hd);
  for (std::int64_t i = 0; i < n; ++i) {
    const float beta = plan.beta[at(i)];
    float* dr = dret(i);
    const float* u = du(i);
    for (std::int64_t c = 0; c < hd; ++c) dr[c] = -beta * u[c];
    float a_dms = 0.0f;
    for (std::int64_t j = 0; j < i; ++j) {
      if (!ws.a_pair[at(i * C + j)]) continue;
      const float dms = -dot(u, delta(j), hd);
      ws.dms[at(i * C + j)] = dms;
      a_dms += plan.a(i, j) * dms;
    }
    for (std::int64_t j = 0; j <= i; ++j) {
      if (ws.qk_pair[at(i * C + j)]) ws.dqk[at(i * C + j)] = dot(dy(i), delta(j), hd);
    }
    ws.dbeta[at(i)] = dot(res(i), u, hd) + a_dms;
  }
}

// PA: per write group, the dots against G and the pre-write row, G'; the group's snapshot row
// becomes its row's source.
void write_side(const BackwardJob& job, std::int64_t time_chunk, BackwardScratch& ws) {
  const ChunkPlan& plan = ws.plan;
  const std::int64_t hd = job.shape.hd;
  const SavedLayout& layout = job.layout;
  const Rows delta{ws.delta, hd}, dret{ws.dret, hd}, g_rows{ws.g_rows, hd};
  float* pre = ws.row.data();
  for (size_t k = 0; k < plan.groups.size(); ++k) {
    const WriteGroup& group = plan.groups[k];
    const std::int64_t snap = job.snapshot_rows.row(time_chunk, plan.stream, job.shape.P, static_cast<std::int64_t>(k));
    const unsigned char* payload = job.saved + layout.row_payload(snap);
    const unsigned char* scale = job.saved + layout.row_scale(snap);
    decode_snapshot_row(layout.snapshot, payload, scale, pre);
    float* g = g_rows(at(k));
    ws.dlambda[k] = group.decay * dot(g, pre, hd);
    for (std::int32_t s = group.begin; s < group.end; ++s) {
      const size_t e = at(plan.write_order[at(s)]);
      const std::int64_t i = plan.token_of_write(static_cast<std::int32_t>(e));
      ws.dc[e] = dot(delta(i), g, hd);
      ws.dk_eff[e] = dot(dret(i), pre, hd);
    }
    // G'[s] = decay_s G[s] + sum_e k_eff_e dret_{i_e}, in place (each element reads its own
    // G value before writing it).
    std::int64_t terms = 0;
    for (std::int32_t s = group.begin; s < group.end; ++s) {
      const std::int32_t e = plan.write_order[at(s)];
      ws.row_list[at(terms)] = dret(plan.token_of_write(e));
      ws.weight_list[at(terms++)] = plan.k_eff[at(e)];
    }
    weighted_rows<float>(ws.row_list.data(), ws.weight_list.data(), terms, g, group.decay, g, hd);
    job.row_source[group.row] = snap;
  }
}

// Snapshot row `source` as the bank dtype holds it, into `out` (one bank row; `decoded`: hd floats
// of scratch): the values a bank restored from it holds (snapshot_codec.hpp).
void restore_source_row(const BackwardJob& job, std::int64_t source, float* decoded, void* out) {
  const SavedLayout& layout = job.layout;
  const unsigned char* payload = job.saved + layout.row_payload(source);
  decode_snapshot_row(layout.snapshot, payload, job.saved + layout.row_scale(source), decoded);
  restore_snapshot_row(layout.snapshot, payload, decoded, out);
}

// dot(x, M0[row]) in RowMatrix::dot's order, M0 as the bank dtype holds it: the final bank row,
// or the row source's snapshot row (its saved bits for "none", else restored into ws.bank_row:
// the values a bank restored chunk by chunk would hold).
float bank_row_dot(const BackwardJob& job, BackwardScratch& ws, std::int64_t row, const float* x) {
  const std::int64_t source = job.row_source[row];
  if (source == kFinalBankRow) return job.bank.dot(row, x);
  const SavedLayout& layout = job.layout;
  const unsigned char* payload = job.saved + layout.row_payload(source);
  if (layout.snapshot.mode == SnapshotQuant::none) {
    return RowMatrix{const_cast<unsigned char*>(payload), job.bank.dtype, job.bank.width}.dot(0, x);
  }
  restore_source_row(job, source, ws.decoded.data(), ws.bank_row.data());
  return RowMatrix{ws.bank_row.data(), job.bank.dtype, job.bank.width}.dot(0, x);
}


// GDS: the read dots against M0 and the single-writer update of every touched G row.
void read_side(const BackwardJob& job, BackwardScratch& ws) {
  const ChunkPlan& plan = ws.plan;
  const std::int64_t hd = job.shape.hd;
  const Rows dy{ws.dy, hd}, g_rows{ws.g_rows, hd};
  float* row = ws.row.data();
  float* acc = ws.acc.data();
  const size_t reads = plan.read_order.size();
  for (size_t s = 0; s < reads; ++s) {
    if (s + kRowsAhead < reads) job.bank.prefetch(plan.q_row[at(plan.read_order[s + kRowsAhead])]);
    const std::int32_t q = plan.read_order[s];
    ws.dq_w[at(q)] = bank_row_dot(job, ws, plan.q_row[at(q)], dy(plan.token_of_read(q)));
  }
  for (size_t rg = 0; rg < plan.read_groups.size(); ++rg) {
    const ReadGroup& group = plan.read_groups[rg];
    if (rg + kRowsAhead < plan.read_groups.size()) job.grad_bank.prefetch(plan.read_groups[rg + kRowsAhead].row);
    std::int64_t terms = 0;
    for (std::int32_t s = group.begin; s < group.end; ++s) {
      const std::int32_t q = plan.read_order[at(s)];
      ws.row_list[at(terms)] = dy(plan.token_of_read(q));
      ws.weight_list[at(terms++)] = plan.q_w[at(q)];
    }
    weighted_rows<float>(ws.row_list.data(), ws.weight_list.data(), terms, nullptr, 0.0f, acc, hd);
    const float* base = row;
    if (group.write_group >= 0) {
      base = g_rows(group.write_group);
      ws.read_group_of[at(group.write_group)] = static_cast<std::int32_t>(rg);
    } else {
      job.grad_bank.load(group.row, row);
    }
    job.grad_bank.store_sum(group.row, base, acc);
  }
  for (size_t k = 0; k < plan.groups.size(); ++k) {
    if (ws.read_group_of[k] < 0) job.grad_bank.store(plan.groups[k].row, g_rows(at(k)));
  }
}

// Phase B: through A and QK, the elementwise chain, the per-group scans to dgamma.
void phase_b(BackwardScratch& ws) {
  const ChunkPlan& plan = ws.plan;
  const std::int64_t C = plan.C;
  for (const WriteGroup& group : plan.groups) {
    for (std::int32_t s = group.begin; s < group.end; ++s) {
      const size_t e = at(plan.write_order[at(s)]);
      const std::int64_t i = plan.token_of_write(static_cast<std::int32_t>(e));
      for (std::int32_t s2 = group.begin; s2 < s; ++s2) {
        const size_t e2 = at(plan.write_order[at(s2)]);
        const std::int64_t j = plan.token_of_write(static_cast<std::int32_t>(e2));
        if (j >= i) continue;
        const float da = plan.beta[at(i)] * ws.dms[at(i * C + j)];
        const float decay = core::decay_factor(plan.L[e] - plan.L[e2]);
        ws.dkappa[e] += da * plan.kappa[e2] * decay;
        ws.dkappa[e2] += da * plan.kappa[e] * decay;
        const float dl = da * plan.kappa[e] * plan.kappa[e2] * decay;
        ws.dL[e] += dl;
        ws.dL[e2] -= dl;
      }
    }
  }
  for (std::int64_t i = 0; i < plan.n; ++i) {
    for (std::int64_t r = 0; r < plan.R; ++r) {
      const size_t q = at(i * plan.R + r);
      if (plan.q_group[q] < 0) continue;
      const WriteGroup& group = plan.groups[at(plan.q_group[q])];
      for (std::int32_t s = group.begin; s < plan.q_end[q]; ++s) {
        const size_t e = at(plan.write_order[at(s)]);
        const std::int64_t j = plan.token_of_write(static_cast<std::int32_t>(e));
        const float d = ws.dqk[at(i * C + j)];
        const float decay = core::decay_factor(plan.Lq[q] - plan.L[e]);
        ws.drho[q] += d * plan.kappa[e] * decay;
        ws.dkappa[e] += d * plan.rho[q] * decay;
        const float dl = d * plan.rho[q] * plan.kappa[e] * decay;
        ws.dLq[q] += dl;
        ws.dL[e] -= dl;
      }
    }
  }
  for (std::int32_t e : plan.write_order) {
    const size_t x = at(e);
    ws.dkappa[x] += core::decay_factor(plan.L[x]) * ws.dk_eff[x] + core::decay_factor(plan.P[x]) * ws.dc[x];
    ws.dL[x] += plan.k_eff[x] * ws.dk_eff[x];
    ws.dP[x] = plan.coef[x] * ws.dc[x];
  }
  for (std::int32_t q : plan.read_order) {
    const size_t x = at(q);
    ws.drho[x] += core::decay_factor(plan.Lq[x]) * ws.dq_w[x];
    ws.dLq[x] += plan.q_w[x] * ws.dq_w[x];
  }
  for (size_t k = 0; k < plan.groups.size(); ++k) {
    const WriteGroup& group = plan.groups[k];
    const std::int32_t rg = ws.read_group_of[k];
    std::int32_t read = rg >= 0 ? plan.read_groups[at(rg)].end - 1 : -1;
    const std::int32_t read_begin = rg >= 0 ? plan.read_groups[at(rg)].begin : 0;
    float suffix = 0.0f;
    for (std::int32_t s = group.end - 1; s >= group.begin; --s) {
      const size_t e = at(plan.write_order[at(s)]);
      const std::int64_t i = plan.token_of_write(static_cast<std::int32_t>(e));
      suffix += ws.dL[e];
      for (; read >= read_begin && plan.token_of_read(plan.read_order[at(read)]) >= i; --read) {
        suffix += ws.dLq[at(plan.read_order[at(read)])];
      }
      ws.dgamma[e] = suffix;
    }
    float prefix = 0.0f;
    for (std::int32_t s = group.begin; s < group.end; ++s) {
      const size_t e = at(plan.write_order[at(s)]);
      ws.dgamma[e] = ws.dgamma[e] + prefix + ws.dlambda[k];
      prefix += ws.dP[e];
    }
  }
}

// Writes the chunk's token gradients (defined outputs only; masked entries give 0).
void store_token_grads(const BackwardJob& job, BackwardScratch& ws) {
  const auto& sh = job.shape;
  const ChunkPlan& plan = ws.plan;
  const WriteReadGrads& grads = job.grads;
  const std::int64_t token0 = plan.stream * sh.T + plan.t0;
  for (std::int64_t i = 0; i < plan.n; ++i) {
    const std::int64_t token = token0 + i;
    if (grads.v.defined()) {
      float* dv = ws.row.data();
      const float* u = &ws.du[at(i * sh.hd)];
      const float beta = plan.beta[at(i)];
      for (std::int64_t c = 0; c < sh.hd; ++c) dv[c] = beta * u[c];
      store_elements(grads.v, token * sh.hd, sh.hd, dv);
    }
    if (grads.beta.defined()) store_elements(grads.beta, token, 1, &ws.dbeta[at(i)]);
    if (grads.k_val.defined()) store_elements(grads.k_val, token * sh.W, sh.W, &ws.dkappa[at(i * sh.W)]);
    if (grads.q_val.defined()) store_elements(grads.q_val, token * sh.R, sh.R, &ws.drho[at(i * sh.R)]);
    if (grads.g.defined()) {
      const float* dgamma = &ws.dgamma[at(i * sh.W)];
      if (sh.G == 1) {
        float sum = 0.0f;
        for (std::int64_t w = 0; w < sh.W; ++w) sum += dgamma[w];
        store_elements(grads.g, token, 1, &sum);
      } else {
        store_elements(grads.g, token * sh.W, sh.W, dgamma);
      }
    }
  }
}

}  // namespace

void backward_chunk(const BackwardJob& job, std::int64_t time_chunk, BackwardScratch& ws) {
  build_read_groups(ws.plan);
  size_scratch(job.shape, ws);
  load_token_rows(job, ws);
  mark_pairs(ws);
  solve_side(job, ws);
  write_side(job, time_chunk, ws);
  read_side(job, ws);
  phase_b(ws);
  store_token_grads(job, ws);
}

void restore_initial_rows(const BackwardJob& job, std::int64_t p) {
  const std::int64_t sps = job.shape.slots_per_stream, hd = job.shape.hd;
  const size_t row_bytes = at(hd) * dtype_size(job.bank.dtype);
  std::vector<float> decoded(at(hd));
  auto* bank = static_cast<unsigned char*>(job.bank.data);
  for (std::int64_t row = p * sps; row < (p + 1) * sps; ++row) {
    const std::int64_t source = job.row_source[row];
    if (source == kFinalBankRow) continue;
    restore_source_row(job, source, decoded.data(), bank + at(row) * row_bytes);
  }
}

}  // namespace sdm::cpu

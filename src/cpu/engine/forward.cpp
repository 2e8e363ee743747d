// forward.cpp - the chunked forward, no-grad and saving (docs/spec.md §2, §11).
//
// Inputs (validated, contiguous): memory [S, hd] bf16 / f32, updated in place; k_idx, k_val
// [P, T, W]; v [P, T, hd]; beta [P, T(, 1)]; g [P, T, G]; q_idx, q_val [P, T, R]. Output: readings
// [P, T, hd] in the bank dtype E; with saving, `saved` (saved_layout.hpp): delta, residual and the
// snapshot of every write group's pre-write row. Per chunk of a stream, M0 its rows at the start:
//   plan    Phase 1 (chunk_plan.hpp); when saving, the snapshot of each write group's row
//   gather  ret_i = sum_w k_eff_(i,w) M0[s_(i,w)],  inter_i = sum_r q_w(i,r) M0[sigma_(i,r)]
//   dual    res_i = f32(rnd_E(v_i)) - ret_i;  U_i = beta_i res_i;  delta_i = sum_{j<=i} X[i][j] U_j
//           y_i = rnd_E(inter_i + sum_{j<=i} QK[i][j] delta_j)
//   writer  per group: M[s] = rnd_E(decay_s M0[s] + sum_{e in group, sorted} coef_e delta_{i_e})
// All sums f32 in ascending order, in row_kernels.hpp's kernels; one rounding to E per chunk
// (docs/spec.md §3). Threads: with P >= threads, one pass over the streams, each running its
// chunks in time order (streams share no row); else per step one pass over (stream, column tile),
// the first tile's item building the stream's next plan (double buffered: Phase 1 reads no bank
// row), plus the snapshot pass when saving. Every operation is column-separable, so the tiling
// changes no bit: results are bitwise identical for any thread count, run to run, and between the
// no-grad and the saving forward. Masked entries (chunk_plan.hpp) are skipped everywhere; no
// access leaves the stream's rows.
#include <algorithm>
#include <cstring>
#include <vector>

#include "chunk_plan.hpp"
#include "element_io.hpp"
#include "engine.hpp"
#include "row_kernels.hpp"
#include "saved_layout.hpp"
#include "snapshot_rows.hpp"
#include "worker_split.hpp"

namespace sdm::cpu {
namespace {

using std::size_t;

inline size_t at(std::int64_t i) { return static_cast<size_t>(i); }

// Narrowest column tile when streams alone cannot occupy the threads.
constexpr std::int64_t kMinTileCols = 32;

struct ForwardJob {
  const WriteReadArgs& args;
  const TensorRef& readings;
  const core::WriteReadShape& shape;
  const SavedLayout* layout;  // nullptr for the no-grad forward
  const SnapshotRowStarts* snapshot_rows;  // the saving forward's group rows (nullptr: no-grad)
  unsigned char* saved;
  int threads;
};

struct ColumnTiling {
  std::int64_t tiles = 1, width = 0;
};

ColumnTiling column_tiling(const core::WriteReadShape& shape, int threads) {
  ColumnTiling t;
  t.tiles = 1;
  if (shape.P < threads) {
    const std::int64_t wanted = (threads + shape.P - 1) / shape.P;
    t.tiles = std::max<std::int64_t>(1, std::min(wanted, shape.hd / kMinTileCols));
  }
  t.width = (shape.hd + t.tiles - 1) / t.tiles;
  t.tiles = (shape.hd + t.width - 1) / t.width;
  return t;
}

// Per-worker scratch of pass 2: f32 [C, width] matrices; the chunk's gathered rows (token i's
// write sum, then its read sum, i ascending: 2C sums, sum_start[s] .. sum_start[s + 1]) with
// their weights; the row lists of one writer sum.
template <typename Elem>
struct ColumnScratch {
  std::vector<float> ret, inter, res, u, delta, acc;
  std::vector<const Elem*> bank_rows;
  std::vector<float> bank_weights;
  std::vector<std::int64_t> sum_start;
  std::vector<const float*> token_rows;
  std::vector<float> weights;
  void reserve(std::int64_t C, std::int64_t W, std::int64_t R, std::int64_t width) {
    for (auto* v : {&ret, &inter, &res, &u, &delta, &acc}) v->assign(at(C * width), 0.0f);
    bank_rows.resize(at(C * (W + R)));
    bank_weights.resize(at(C * (W + R)));
    sum_start.resize(at(2 * C + 1));
    token_rows.resize(at(C * W));  // a group has <= C * W entries
    weights.resize(at(C * W));
  }
};

// Pass 1 extra of the saving forward: the pre-write row of every write group.
void save_snapshot(const ForwardJob& job, const ChunkPlan& plan, std::int64_t time_chunk) {
  const SavedLayout& layout = *job.layout;
  const auto* bank = static_cast<const unsigned char*>(job.args.memory.data);
  const size_t bank_row_bytes = at(job.shape.hd) * dtype_size(job.shape.bank);
  constexpr size_t kAhead = 4;  // prefetch hints only
  for (size_t k = 0; k < plan.groups.size(); ++k) {
    if (k + kAhead < plan.groups.size()) {
      prefetch_row(bank + at(plan.groups[k + kAhead].row) * bank_row_bytes, bank_row_bytes);
    }
    const std::int64_t row =
        job.snapshot_rows->row(time_chunk, plan.stream, job.shape.P, static_cast<std::int64_t>(k));
    encode_snapshot_row(layout.snapshot, bank + at(plan.groups[k].row) * bank_row_bytes,
                        job.saved + layout.row_payload(row), job.saved + layout.row_scale(row));
  }
}

// Pass 2 on columns [col0, col0 + nc) of one chunk.
template <typename Elem>
void forward_columns(const ForwardJob& job, const ChunkPlan& plan, std::int64_t col0, std::int64_t nc,
                     ColumnScratch<Elem>& ws) {
  const auto& sh = job.shape;
  const std::int64_t n = plan.n, hd = sh.hd;
  Elem* bank = job.args.memory.data_as<Elem>();
  auto bank_cols = [&](std::int64_t row) { return bank + row * hd + col0; };
  auto tile = [&](std::vector<float>& m, std::int64_t i) { return &m[at(i * nc)]; };
  const std::int64_t token0 = plan.stream * sh.T + plan.t0;

  // The gathers: ret_i = sum_k weight_k * M0[row_k] over token i's unmasked write entries, k
  // ascending, and inter_i over its read entries. The rows of the whole chunk are listed
  // first, so the kernel of each sum can hint, term by term, the row listed kRowsAhead places
  // later into the cache (a steady stream of prefetches, not a burst per token).
  std::int64_t listed = 0, sums = 0;
  auto list = [&](const std::vector<std::int64_t>& rows, const std::vector<float>& weight, std::int64_t first,
                  std::int64_t count) {
    ws.sum_start[at(sums++)] = listed;
    for (std::int64_t k = first; k < first + count; ++k) {
      if (rows[at(k)] == kMaskedRow) continue;
      ws.bank_rows[at(listed)] = bank_cols(rows[at(k)]);
      ws.bank_weights[at(listed++)] = weight[at(k)];
    }
  };
  for (std::int64_t i = 0; i < n; ++i) {
    list(plan.k_row, plan.k_eff, i * sh.W, sh.W);
    list(plan.q_row, plan.q_w, i * sh.R, sh.R);
  }
  ws.sum_start[at(sums)] = listed;
  constexpr std::int64_t kRowsAhead = 32;  // prefetch hints only (no effect on any value)
  const std::size_t row_bytes = at(nc) * sizeof(Elem);
  for (std::int64_t k = 0; k < std::min(kRowsAhead, listed); ++k) prefetch_row(ws.bank_rows[at(k)], row_bytes);
  for (std::int64_t s = 0; s < sums; ++s) {
    const std::int64_t first = ws.sum_start[at(s)], count = ws.sum_start[at(s + 1)] - first;
    const std::int64_t ahead = std::clamp<std::int64_t>(listed - first - kRowsAhead, 0, count);
    const Elem* const* rows = ws.bank_rows.data() + first;
    weighted_rows<Elem>(rows, ws.bank_weights.data() + first, count, nullptr, 0.0f,
                        tile(s % 2 == 0 ? ws.ret : ws.inter, s / 2), nc, ahead > 0 ? rows + kRowsAhead : nullptr,
                        ahead);
  }

  for (std::int64_t i = 0; i < n; ++i) {
    float* res = tile(ws.res, i);
    float* u = tile(ws.u, i);
    const float* ret = tile(ws.ret, i);
    load_elements(job.args.v, (token0 + i) * hd + col0, nc, res);
    round_row_to_bank(res, nc, static_cast<const Elem*>(nullptr));  // f32(rnd_E(v_i))
    const float beta = plan.beta[at(i)];
    for (std::int64_t c = 0; c < nc; ++c) {
      res[c] = res[c] - ret[c];
      u[c] = beta * res[c];
    }
  }
  triangular_product<true>(plan.X.data(), plan.C, ws.u.data(), ws.delta.data(), n, nc);
  triangular_product<true>(plan.QK.data(), plan.C, ws.delta.data(), ws.acc.data(), n, nc);
  Elem* readings = job.readings.data_as<Elem>();
  for (std::int64_t i = 0; i < n; ++i) {
    store_row(readings + (token0 + i) * hd + col0, tile(ws.inter, i), tile(ws.acc, i), nc);
  }

  float* acc = ws.acc.data();  // free again: one row of the writer
  constexpr std::size_t kGroupsAhead = 4;
  for (std::size_t k = 0; k < std::min(kGroupsAhead, plan.groups.size()); ++k) {
    prefetch_row(bank_cols(plan.groups[k].row), row_bytes);
  }
  for (std::size_t k = 0; k < plan.groups.size(); ++k) {
    const WriteGroup& group = plan.groups[k];
    if (k + kGroupsAhead < plan.groups.size()) prefetch_row(bank_cols(plan.groups[k + kGroupsAhead].row), row_bytes);
    Elem* m = bank_cols(group.row);
    std::int64_t terms = 0;
    for (std::int32_t s = group.begin; s < group.end; ++s) {
      const std::int32_t e = plan.write_order[at(s)];
      ws.token_rows[at(terms)] = tile(ws.delta, plan.token_of_write(e));
      ws.weights[at(terms++)] = plan.coef[at(e)];
    }
    weighted_rows_into_row<Elem>(ws.token_rows.data(), ws.weights.data(), terms, m, group.decay, acc, nc);
  }

  if (job.layout) {
    const SavedLayout& layout = *job.layout;
    const size_t bytes = at(nc) * sizeof(float);
    for (std::int64_t i = 0; i < n; ++i) {
      std::memcpy(job.saved + layout.token_offset(layout.delta, token0 + i, hd, col0), tile(ws.delta, i), bytes);
      std::memcpy(job.saved + layout.token_offset(layout.residual, token0 + i, hd, col0), tile(ws.res, i), bytes);
    }
  }
}

template <typename Elem>
void run_forward(const ForwardJob& job) {
  const auto& sh = job.shape;
  const ColumnTiling tiling = column_tiling(sh, job.threads);
  const std::int64_t steps = sh.num_time_chunks();
  // Double-buffered plans: step ti uses plans[(ti % 2) * P + p].
  std::vector<ChunkPlan> plans(at(2 * sh.P));
  auto plan = [&](std::int64_t ti, std::int64_t p) -> ChunkPlan& { return plans[at((ti % 2) * sh.P + p)]; };
  const std::int64_t items = sh.P * tiling.tiles;
  const std::int64_t workers = worker_count(items, job.threads);
  std::vector<ColumnScratch<Elem>> scratch(at(workers));
  for (auto& ws : scratch) ws.reserve(sh.C, sh.W, sh.R, tiling.width);

  if (tiling.tiles == 1) {
    // One worker per stream for the whole call: a stream's chunks run in time order on its
    // worker, exactly the operations of the per-step schedule below, and streams share no
    // bank row, token or snapshot row, so one parallel pass replaces one (two when saving)
    // per time step and its barrier.
    for_each_item(sh.P, workers, job.threads, [&](std::int64_t p, std::int64_t worker) {
      build_chunk_plan(job.args, sh, p, 0, plan(0, p));
      for (std::int64_t ti = 0; ti < steps; ++ti) {
        if (job.layout) save_snapshot(job, plan(ti, p), ti);
        forward_columns<Elem>(job, plan(ti, p), 0, sh.hd, scratch[at(worker)]);
        if (ti + 1 < steps) build_chunk_plan(job.args, sh, p, ti + 1, plan(ti + 1, p));
      }
    });
    return;
  }
  parallel_for(sh.P, job.threads, [&](std::int64_t p) { build_chunk_plan(job.args, sh, p, 0, plan(0, p)); });
  for (std::int64_t ti = 0; ti < steps; ++ti) {
    if (job.layout) {
      parallel_for(sh.P, job.threads, [&](std::int64_t p) { save_snapshot(job, plan(ti, p), ti); });
    }
    for_each_item(items, workers, job.threads, [&](std::int64_t item, std::int64_t worker) {
      const std::int64_t p = item / tiling.tiles;
      const std::int64_t col0 = (item % tiling.tiles) * tiling.width;
      forward_columns<Elem>(job, plan(ti, p), col0, std::min(tiling.width, sh.hd - col0), scratch[at(worker)]);
      // Phase 1 reads no bank row, so the next step's plan of the stream is built here.
      if (col0 == 0 && ti + 1 < steps) build_chunk_plan(job.args, sh, p, ti + 1, plan(ti + 1, p));
    });
  }
}

void dispatch_forward(const ForwardJob& job) {
  if (job.shape.bank == DType::bf16) {
    run_forward<std::uint16_t>(job);
  } else {
    run_forward<float>(job);
  }
}

}  // namespace

void write_read_forward(const WriteReadArgs& args, const TensorRef& readings, const WriteReadPlan& plan,
                        const WriteReadOptions& options) {
  dispatch_forward({args, readings, plan.shape, nullptr, nullptr, nullptr, resolve_num_threads(options.num_threads)});
}

void write_read_forward_saving(const WriteReadArgs& args, const TensorRef& readings, const TensorRef& saved,
                               const WriteReadPlan& plan, const WriteReadOptions& options) {
  const int threads = resolve_num_threads(options.num_threads);
  const SavedLayout layout = saved_layout(plan);
  const SnapshotRowStarts starts = snapshot_row_starts(args, plan.shape, threads);
  check_snapshot_rows(starts, plan.snapshot_rows);  // before any write
  dispatch_forward({args, readings, plan.shape, &layout, &starts, saved.data_as<unsigned char>(), threads});
}

}  // namespace sdm::cpu

// chunk_plan.cpp - Phase 1 of one chunk; the math and orders are stated in chunk_plan.hpp.
#include "chunk_plan.hpp"

#include <algorithm>
#include <cmath>

#include "core/log_decay.hpp"
#include "core/tensor_access.hpp"
#include "element_io.hpp"

namespace sdm::cpu {
namespace {

using std::size_t;

inline size_t at(std::int64_t i) { return static_cast<size_t>(i); }

// plan.row_group: the write group of each row of the stream, -1 for a row no valid entry
// writes. A dense table of slots_per_stream entries, so a lookup is one load; between
// chunks only the previous chunk's groups are reset (plan.groups still holds them here), so
// a chunk costs O(its groups), not O(slots_per_stream). Which group a row maps to is a
// function of the groups alone, so nothing downstream depends on the table.
void reset_row_groups(const core::WriteReadShape& shape, ChunkPlan& plan) {
  if (plan.row_group.size() != at(shape.slots_per_stream)) {
    plan.row_group.assign(at(shape.slots_per_stream), -1);
  } else {
    for (const WriteGroup& group : plan.groups) plan.row_group[at(group.row - plan.row_group_base)] = -1;
  }
  plan.row_group_base = plan.stream * shape.slots_per_stream;
}

void fill_row_groups(ChunkPlan& plan) {
  for (std::size_t k = 0; k < plan.groups.size(); ++k) {
    plan.row_group[at(plan.groups[k].row - plan.row_group_base)] = static_cast<std::int32_t>(k);
  }
}

// Stages kappa, gamma, rho, beta and the (masked) rows of the chunk's entries. The chunk's
// tokens are consecutive, so every per-token tensor is one contiguous run of elements.
// A write lane repeating an earlier lane's row within its token is masked (the rule of
// core/repeated_writes.hpp, found here through plan.row_group, reset on entry: a lane marks
// its row with -2 - i, token i's mark, so a later lane of token i finding that mark repeats
// it. Every marked row is an unmasked write row, hence a group row after group_writes, so
// fill_row_groups overwrites every mark.)
void stage_entries(const WriteReadArgs& args, const core::WriteReadShape& shape, ChunkPlan& plan) {
  const std::int64_t lo = plan.stream * shape.slots_per_stream;
  const std::int64_t hi = lo + shape.slots_per_stream;
  auto masked = [&](std::int64_t row) { return row >= lo && row < hi ? row : kMaskedRow; };
  const std::int64_t token0 = plan.stream * shape.T + plan.t0;  // flat token of i = 0
  const std::int64_t writes = plan.n * shape.W, reads = plan.n * shape.R;
  for (std::int64_t i = 0; i < plan.n; ++i) {
    const auto mark = static_cast<std::int32_t>(-2 - i);
    for (std::int64_t w = 0; w < shape.W; ++w) {
      const std::int64_t e = i * shape.W + w;
      std::int64_t row = masked(core::load_index(args.k_idx, token0 * shape.W + e));
      if (row != kMaskedRow) {
        std::int32_t& seen = plan.row_group[at(row - lo)];
        if (seen == mark) {
          row = kMaskedRow;
        } else {
          seen = mark;
        }
      }
      plan.k_row[at(e)] = row;
    }
  }
  for (std::int64_t q = 0; q < reads; ++q) {
    plan.q_row[at(q)] = masked(core::load_index(args.q_idx, token0 * shape.R + q));
  }
  load_elements(args.k_val, token0 * shape.W, writes, plan.kappa.data());
  load_elements(args.q_val, token0 * shape.R, reads, plan.rho.data());
  if (shape.bank == DType::bf16) {
    for (std::int64_t e = 0; e < writes; ++e) plan.kappa[at(e)] = core::round_to_bf16(plan.kappa[at(e)]);
    for (std::int64_t q = 0; q < reads; ++q) plan.rho[at(q)] = core::round_to_bf16(plan.rho[at(q)]);
  }
  load_elements(args.beta, token0, plan.n, plan.beta.data());
  if (shape.G == 1) {
    load_elements(args.g, token0, plan.n, plan.P.data());  // P: scratch until group_writes
    for (std::int64_t i = 0; i < plan.n; ++i) {
      const float gamma = core::floor_log_decay(plan.P[at(i)]);
      std::fill_n(&plan.gamma[at(i * shape.W)], shape.W, gamma);
    }
  } else {
    load_elements(args.g, token0 * shape.W, writes, plan.gamma.data());
    for (std::int64_t e = 0; e < writes; ++e) plan.gamma[at(e)] = core::floor_log_decay(plan.gamma[at(e)]);
  }
}

// Sorts keys (in ascending entry order on entry) by row, stably, so the result is ordered by
// (row, entry): a least-significant-digit radix sort on 8-bit digits of row - min row.
void radix_sort_by_row(std::vector<SortKey>& keys, std::vector<SortKey>& scratch) {
  if (keys.size() < 2) return;
  std::int64_t lo = keys[0].row, hi = keys[0].row;
  for (const SortKey& k : keys) {
    lo = std::min(lo, k.row);
    hi = std::max(hi, k.row);
  }
  const auto range = static_cast<std::uint64_t>(hi - lo);
  scratch.resize(keys.size());
  for (int shift = 0; shift < 64 && (range >> shift) != 0; shift += 8) {
    std::size_t start[257] = {};
    auto digit = [&](const SortKey& k) { return (static_cast<std::uint64_t>(k.row - lo) >> shift) & 0xffu; };
    for (const SortKey& k : keys) ++start[digit(k) + 1];
    for (int d = 0; d < 256; ++d) start[d + 1] += start[d];
    for (const SortKey& k : keys) scratch[start[digit(k)]++] = k;
    keys.swap(scratch);
  }
}

// Orders the unmasked entries [0, count) of `rows` by (row, entry index) into `order` and
// calls on_run(begin, end, row) for each run of equal rows. Entry indices are token-major
// (e = i*width + lane), so the order is (row, token, lane). `keys`, `scratch`: scratch.
template <typename OnRun>
void sort_into_groups(const std::vector<std::int64_t>& rows, std::int64_t count, std::vector<SortKey>& keys,
                      std::vector<SortKey>& scratch, std::vector<std::int32_t>& order, OnRun&& on_run) {
  keys.clear();
  for (std::int32_t e = 0; e < count; ++e) {
    if (rows[at(e)] != kMaskedRow) keys.push_back({rows[at(e)], e});
  }
  radix_sort_by_row(keys, scratch);
  order.resize(keys.size());
  for (size_t k = 0; k < keys.size(); ++k) order[k] = keys[k].entry;
  const auto sorted = static_cast<std::int32_t>(keys.size());
  for (std::int32_t begin = 0; begin < sorted;) {
    const std::int64_t row = keys[at(begin)].row;
    std::int32_t end = begin + 1;
    while (end < sorted && keys[at(end)].row == row) ++end;
    on_run(begin, end, row);
    begin = end;
  }
}

// Sorts the valid write entries by (row, token, lane), cuts them into groups and runs the
// per-group scans (L, P, Lambda) and the effective weights.
void group_writes(ChunkPlan& plan) {
  const std::int64_t entries = plan.n * plan.W;
  for (std::int64_t e = 0; e < entries; ++e) plan.k_group[at(e)] = -1;
  plan.groups.clear();
  auto on_group = [&](std::int32_t begin, std::int32_t end, std::int64_t row) {
    WriteGroup group;
    group.begin = begin;
    group.end = end;
    group.row = row;
    const auto index = static_cast<std::int32_t>(plan.groups.size());
    double running = 0.0;
    for (std::int32_t s = group.begin; s < group.end; ++s) {
      const size_t e = at(plan.write_order[at(s)]);
      running += plan.gamma[e];
      plan.L[e] = running;
      plan.k_group[e] = index;
    }
    for (std::int32_t s = group.begin; s < group.end; ++s) {
      const size_t e = at(plan.write_order[at(s)]);
      plan.P[e] = static_cast<float>(running - plan.L[e]);
      plan.decay_L[e] = core::decay_factor(plan.L[e]);
      plan.k_eff[e] = plan.kappa[e] * plan.decay_L[e];
      plan.coef[e] = plan.kappa[e] * core::decay_factor(plan.P[e]);
    }
    // running is the L of the group's last entry: decay_factor(running), already computed.
    group.decay = plan.decay_L[at(plan.write_order[at(group.end - 1)])];
    plan.groups.push_back(group);
  };
  sort_into_groups(plan.k_row, entries, plan.sort_keys, plan.sort_scratch, plan.write_order, on_group);
}

// The write group of `row` (a row of the plan's stream), or -1.
std::int32_t find_group(const ChunkPlan& plan, std::int64_t row) { return plan.row_group[at(row - plan.row_group_base)]; }

// Lq, q_w and the visible write range of every read (reads follow the token's writes).
void place_reads(ChunkPlan& plan) {
  for (std::int64_t i = 0; i < plan.n; ++i) {
    for (std::int64_t r = 0; r < plan.R; ++r) {
      const size_t q = at(i * plan.R + r);
      plan.q_group[q] = -1;
      plan.q_end[q] = 0;
      plan.Lq[q] = 0.0;
      plan.q_w[q] = 0.0f;
      if (plan.q_row[q] == kMaskedRow) continue;
      const std::int32_t g = find_group(plan, plan.q_row[q]);
      std::int32_t end = 0;
      if (g >= 0) {
        // The group's entries are in token order: the first one after token i ends the range.
        const WriteGroup& group = plan.groups[at(g)];
        const auto first = plan.write_order.begin() + group.begin;
        const auto after = std::partition_point(first, plan.write_order.begin() + group.end,
                                                [&](std::int32_t e) { return plan.token_of_write(e) <= i; });
        end = static_cast<std::int32_t>(after - plan.write_order.begin());
      }
      plan.q_group[q] = g;
      plan.q_end[q] = end;
      // decay_factor(Lq_q): that of the last entry seen (Lq_q is its L), else of 0, i.e. 1.
      float decay = 1.0f;
      if (g >= 0 && end > plan.groups[at(g)].begin) {
        const size_t last = at(plan.write_order[at(end - 1)]);
        plan.Lq[q] = plan.L[last];
        decay = plan.decay_L[last];
      }
      plan.q_w[q] = plan.rho[q] * decay;
    }
  }
}

void build_a_and_qk(ChunkPlan& plan) {
  const std::int64_t C = plan.C;
  std::fill(plan.A.begin(), plan.A.end(), 0.0f);
  std::fill(plan.QK.begin(), plan.QK.end(), 0.0f);
  for (const WriteGroup& group : plan.groups) {
    for (std::int32_t s = group.begin; s < group.end; ++s) {
      const std::int32_t e = plan.write_order[at(s)];
      const std::int64_t i = plan.token_of_write(e);
      for (std::int32_t s2 = group.begin; s2 < s; ++s2) {
        const std::int32_t e2 = plan.write_order[at(s2)];
        const std::int64_t j = plan.token_of_write(e2);
        if (j >= i) continue;  // a repeated slot within one token (a violated precondition)
        plan.A[at(i * C + j)] +=
            plan.kappa[at(e)] * plan.kappa[at(e2)] * core::decay_factor(plan.L[at(e)] - plan.L[at(e2)]);
      }
    }
  }
  for (std::int64_t i = 0; i < plan.n; ++i) {
    for (std::int64_t r = 0; r < plan.R; ++r) {
      const size_t q = at(i * plan.R + r);
      if (plan.q_group[q] < 0) continue;
      const WriteGroup& group = plan.groups[at(plan.q_group[q])];
      for (std::int32_t s = group.begin; s < plan.q_end[q]; ++s) {
        const std::int32_t e = plan.write_order[at(s)];
        const std::int64_t j = plan.token_of_write(e);
        plan.QK[at(i * C + j)] += plan.rho[q] * plan.kappa[at(e)] * core::decay_factor(plan.Lq[q] - plan.L[at(e)]);
      }
    }
  }
}

// X = (I + diag(beta) A)^-1 row by row: row i = -beta_i * sum_{k<i} A[i][k] * row k.
void solve_unit_lower(ChunkPlan& plan) {
  const std::int64_t C = plan.C;
  std::fill(plan.X.begin(), plan.X.end(), 0.0f);
  for (std::int64_t i = 0; i < plan.n; ++i) {
    float* xi = &plan.X[at(i * C)];
    for (std::int64_t k = 0; k < i; ++k) {
      const float aik = plan.A[at(i * C + k)];
      if (aik == 0.0f) continue;  // a structural zero (chunk_plan.hpp)
      const float* xk = &plan.X[at(k * C)];
      for (std::int64_t j = 0; j <= k; ++j) xi[j] += aik * xk[j];
    }
    const float scale = -plan.beta[at(i)];
    for (std::int64_t j = 0; j < i; ++j) xi[j] *= scale;
    xi[i] = 1.0f;
  }
}

}  // namespace

void build_chunk_plan(const WriteReadArgs& args, const core::WriteReadShape& shape, std::int64_t stream,
                      std::int64_t time_chunk, ChunkPlan& plan) {
  plan.stream = stream;
  plan.C = shape.C;
  plan.W = shape.W;
  plan.R = shape.R;
  plan.t0 = time_chunk * shape.C;
  plan.n = std::min(shape.C, shape.T - plan.t0);

  const size_t writes = at(shape.C * shape.W), reads = at(shape.C * shape.R);
  for (auto* v : {&plan.kappa, &plan.gamma, &plan.P, &plan.k_eff, &plan.coef, &plan.decay_L}) v->resize(writes);
  plan.L.resize(writes);
  plan.k_row.resize(writes);
  plan.k_group.resize(writes);
  for (auto* v : {&plan.rho, &plan.q_w}) v->resize(reads);
  plan.Lq.resize(reads);
  plan.q_row.resize(reads);
  plan.q_group.resize(reads);
  plan.q_end.resize(reads);
  plan.beta.resize(at(shape.C));
  for (auto* m : {&plan.A, &plan.QK, &plan.X}) m->resize(at(shape.C * shape.C));
  plan.read_order.clear();
  plan.read_groups.clear();

  reset_row_groups(shape, plan);
  stage_entries(args, shape, plan);
  group_writes(plan);
  fill_row_groups(plan);
  place_reads(plan);
  build_a_and_qk(plan);
  solve_unit_lower(plan);
}

void build_read_groups(ChunkPlan& plan) {
  plan.read_groups.clear();
  auto on_group = [&](std::int32_t begin, std::int32_t end, std::int64_t row) {
    ReadGroup group;
    group.begin = begin;
    group.end = end;
    group.row = row;
    group.write_group = find_group(plan, row);
    plan.read_groups.push_back(group);
  };
  sort_into_groups(plan.q_row, plan.n * plan.R, plan.sort_keys, plan.sort_scratch, plan.read_order, on_group);
}

}  // namespace sdm::cpu

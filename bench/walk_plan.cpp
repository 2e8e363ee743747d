#include "walk_plan.hpp"

#include <algorithm>
#include <stdexcept>
#include <tuple>

namespace sdm::bench {

namespace {

struct Entry {
  std::int32_t slot, token, lane;
  bool operator<(const Entry& o) const { return std::tie(slot, token, lane) < std::tie(o.slot, o.token, o.lane); }
};

// Chunk (ti, p)'s entries of slots [P, T, width], sorted by (slot, token, lane).
std::vector<Entry> chunk_entries(const std::vector<std::int32_t>& slots, std::int64_t T, std::int64_t width,
                                 std::int64_t C, std::int64_t ti, std::int64_t p) {
  std::vector<Entry> out;
  for (std::int64_t i = 0; i < C && ti * C + i < T; ++i) {
    const std::int32_t* row = slots.data() + (p * T + ti * C + i) * width;
    for (std::int64_t w = 0; w < width; ++w) {
      out.push_back({row[w], static_cast<std::int32_t>(i), static_cast<std::int32_t>(w)});
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

WalkPlan make_walk_plan(const std::vector<std::int32_t>& writes, const std::vector<std::int32_t>& reads,
                        std::int64_t P, std::int64_t T, std::int64_t W, std::int64_t R, std::int64_t C,
                        std::int64_t L, std::int64_t max_group) {
  if (P < 1 || T < 1 || W < 1 || R < 1 || C < 1 || L < 1 || max_group < 0) {
    throw std::invalid_argument("make_walk_plan: sizes must be >= 1 (max_group >= 0)");
  }
  if (static_cast<std::int64_t>(writes.size()) != P * T * W || static_cast<std::int64_t>(reads.size()) != P * T * R) {
    throw std::invalid_argument("make_walk_plan: writes / reads must be [P, T, W] / [P, T, R]");
  }
  WalkPlan plan;
  const std::int64_t Nt = (T + C - 1) / C;
  plan.chunks = Nt * P;
  plan.records_per_chunk = C * (W + R);
  plan.tile_len = L;
  plan.tiles_per_chunk = (plan.records_per_chunk + L - 1) / L;
  plan.records.resize(static_cast<std::size_t>(plan.chunks * plan.records_per_chunk));
  plan.tile_groups.resize(static_cast<std::size_t>(plan.chunks * (plan.tiles_per_chunk + 1)));
  plan.group_begin.push_back(0);
  std::int32_t next_snapshot = 0;
  for (std::int64_t n = 0; n < plan.chunks; ++n) {
    const std::int64_t ti = n / P, p = n % P;
    const std::vector<Entry> w = chunk_entries(writes, T, W, C, ti, p), r = chunk_entries(reads, T, R, C, ti, p);
    WalkRecord* rec = plan.records.data() + n * plan.records_per_chunk;
    std::vector<std::int32_t> group_of_record;  // chunk-local group of each record
    const std::int64_t chunk_first_group = static_cast<std::int64_t>(plan.groups.size());
    std::size_t a = 0, b = 0;
    std::int32_t at = 0;
    while (a < w.size() || b < r.size()) {
      const std::int32_t slot = a < w.size() && (b >= r.size() || w[a].slot <= r[b].slot) ? w[a].slot : r[b].slot;
      const std::int32_t first = at;
      std::int32_t slot_writes = 0;
      for (; a < w.size() && w[a].slot == slot; ++a, ++slot_writes) rec[at++] = {w[a].token, w[a].lane};
      for (; b < r.size() && r[b].slot == slot; ++b) rec[at++] = {r[b].token, r[b].lane};
      const std::int32_t m0 = slot_writes > 0 ? next_snapshot++ : -1;
      (slot_writes > 0 ? plan.written_groups : plan.read_only_groups) += 1;
      // The slot's records as groups of at most max_group (all of them when 0), writes first.
      const std::int32_t piece = max_group > 0 ? static_cast<std::int32_t>(max_group) : at - first;
      for (std::int32_t from = first; from < at; from += piece) {
        WalkGroup g;
        g.slot = slot;
        g.first = from;
        const std::int32_t to = std::min(at, from + piece), write_end = first + slot_writes;
        g.writes = std::max(0, std::min(to, write_end) - from);
        g.reads = to - from - g.writes;
        const auto local = static_cast<std::int32_t>(plan.groups.size() - chunk_first_group);
        group_of_record.insert(group_of_record.end(), static_cast<std::size_t>(to - from), local);
        plan.m0_row.push_back(m0);
        plan.groups.push_back(g);
      }
    }
    const auto groups = static_cast<std::int32_t>(plan.groups.size() - chunk_first_group);
    std::int32_t* tiles = plan.tile_groups.data() + n * (plan.tiles_per_chunk + 1);
    for (std::int64_t t = 0; t <= plan.tiles_per_chunk; ++t) {
      const std::int64_t bound = t * L;
      // The group holding record `bound` starts the tile (the bound snapped back to its start, so
      // a group is never split); past the records, the chunk's group count.
      tiles[t] = bound < at ? group_of_record[static_cast<std::size_t>(bound)] : groups;
    }
    plan.group_begin.push_back(static_cast<std::int64_t>(plan.groups.size()));
  }
  return plan;
}

}  // namespace sdm::bench

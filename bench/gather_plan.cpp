#include "gather_plan.hpp"

#include <algorithm>
#include <iterator>
#include <stdexcept>
#include <string>
#include <utility>

namespace sdm::bench {

namespace {

// The rows of chunk token i (stream p, time t; t >= T: none) on both sides, unsorted, masked ones left out.
void token_rows(const std::vector<std::int32_t>& writes, const std::vector<std::int32_t>& reads, std::int64_t T,
                std::int64_t W, std::int64_t R, std::int64_t p, std::int64_t t, std::vector<std::int32_t>& out) {
  out.clear();
  if (t >= T) return;
  for (std::int64_t w = 0; w < W; ++w) {
    const std::int32_t slot = writes[static_cast<std::size_t>((p * T + t) * W + w)];
    if (slot >= 0) out.push_back(slot);
  }
  for (std::int64_t r = 0; r < R; ++r) {
    const std::int32_t slot = reads[static_cast<std::size_t>((p * T + t) * R + r)];
    if (slot >= 0) out.push_back(slot);
  }
}

// a's and b's distinct values together (both sorted and distinct).
std::vector<std::int32_t> merged(const std::vector<std::int32_t>& a, const std::vector<std::int32_t>& b) {
  std::vector<std::int32_t> out;
  out.reserve(a.size() + b.size());
  std::set_union(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(out));
  return out;
}

}  // namespace

GatherPlan make_gather_plan(const std::vector<std::int32_t>& writes, const std::vector<std::int32_t>& reads,
                            std::int64_t P, std::int64_t T, std::int64_t W, std::int64_t R, std::int64_t C,
                            std::int64_t max_rows) {
  if (P < 1 || T < 1 || W < 1 || R < 1 || C < 1) throw std::invalid_argument("make_gather_plan: sizes must be >= 1");
  if (max_rows < 1 || max_rows > 32767) throw std::invalid_argument("make_gather_plan: max_rows must be in 1..32767");
  if (static_cast<std::int64_t>(writes.size()) != P * T * W || static_cast<std::int64_t>(reads.size()) != P * T * R) {
    throw std::invalid_argument("make_gather_plan: writes / reads must be [P, T, W] / [P, T, R]");
  }
  GatherPlan plan;
  plan.steps = (T + C - 1) / C;
  plan.chunks = plan.steps * P;
  plan.max_rows = max_rows;
  const auto tokens = static_cast<std::size_t>(plan.chunks * C);
  plan.k_slot.assign(tokens * static_cast<std::size_t>(W), -1);
  plan.q_slot.assign(tokens * static_cast<std::size_t>(R), -1);
  plan.k_ord.assign(plan.k_slot.size(), -1);
  plan.q_ord.assign(plan.q_slot.size(), -1);
  std::vector<std::int32_t> mine;
  for (std::int64_t n = 0; n < plan.chunks; ++n) {
    if (n % P == 0) plan.step_begin.push_back(static_cast<std::int64_t>(plan.blocks.size()));
    const std::int64_t ti = n / P, p = n % P;
    // Greedy blocks: a token joins the open block unless the union would pass max_rows.
    std::vector<std::pair<std::int32_t, std::vector<std::int32_t>>> cut;  // (first token, rows)
    for (std::int64_t i = 0; i < C; ++i) {
      token_rows(writes, reads, T, W, R, p, ti * C + i, mine);
      std::sort(mine.begin(), mine.end());
      mine.erase(std::unique(mine.begin(), mine.end()), mine.end());
      if (static_cast<std::int64_t>(mine.size()) > max_rows) {
        throw std::invalid_argument("make_gather_plan: a token has " + std::to_string(mine.size()) +
                                    " distinct rows, more than max_rows " + std::to_string(max_rows));
      }
      std::vector<std::int32_t> joined = cut.empty() ? mine : merged(cut.back().second, mine);
      if (cut.empty() || static_cast<std::int64_t>(joined.size()) > max_rows) {
        cut.emplace_back(static_cast<std::int32_t>(i), mine);
      } else {
        cut.back().second = std::move(joined);
      }
    }
    for (std::size_t b = 0; b < cut.size(); ++b) {
      GatherBlock block;
      block.chunk = static_cast<std::int32_t>(n);
      block.first = cut[b].first;
      block.count = static_cast<std::int32_t>(b + 1 < cut.size() ? cut[b + 1].first : C) - block.first;
      block.row_first = static_cast<std::int32_t>(plan.rows.size());
      block.rows = static_cast<std::int32_t>(cut[b].second.size());
      const std::vector<std::int32_t>& rows = cut[b].second;
      plan.rows.insert(plan.rows.end(), rows.begin(), rows.end());
      for (std::int32_t i = block.first; i < block.first + block.count; ++i) {
        const std::int64_t t = ti * C + i, token = n * C + i;
        if (t >= T) continue;
        const auto fill = [&](const std::vector<std::int32_t>& slots, std::int64_t width, std::vector<std::int32_t>& slot,
                              std::vector<std::int16_t>& ord) {
          for (std::int64_t w = 0; w < width; ++w) {
            const std::int32_t s = slots[static_cast<std::size_t>((p * T + t) * width + w)];
            if (s < 0) continue;
            const auto at = static_cast<std::size_t>(token * width + w);
            slot[at] = s;
            ord[at] = static_cast<std::int16_t>(std::lower_bound(rows.begin(), rows.end(), s) - rows.begin());
            ++plan.entries_with_rows;
          }
        };
        fill(writes, W, plan.k_slot, plan.k_ord);
        fill(reads, R, plan.q_slot, plan.q_ord);
      }
      plan.blocks.push_back(block);
    }
  }
  plan.step_begin.push_back(static_cast<std::int64_t>(plan.blocks.size()));
  return plan;
}

}  // namespace sdm::bench

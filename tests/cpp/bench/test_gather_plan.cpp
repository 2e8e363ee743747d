// The gather plan of recorded slots (bench/gather_plan.hpp): blocks of consecutive tokens within
// the row budget, each block's distinct rows ascending, every entry's ordinal naming its own row, on
// a hand-checked call and on random calls of awkward shapes (T not a multiple of C, W != R, masked
// slots, budgets from one token's rows up).
#include "gather_plan.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

using sdm::bench::GatherBlock;
using sdm::bench::GatherPlan;
using sdm::bench::make_gather_plan;

TEST(GatherPlan, HandCheckedChunks) {
  // P 1, T 3, C 2 (a short last chunk), W 2, R 1, at most 3 rows a block. Tokens write {5, 3},
  // {3, 9}, {4, -1}; read {9}, {7}, {4}.
  const std::vector<std::int32_t> writes = {5, 3, 3, 9, 4, -1}, reads = {9, 7, 4};
  const GatherPlan plan = make_gather_plan(writes, reads, 1, 3, 2, 1, 2, 3);
  ASSERT_EQ(plan.chunks, 2);
  ASSERT_EQ(plan.steps, 2);
  // Chunk 0: token 0's rows {3, 5, 9}; token 1 adds 7: 4 rows, so a block of its own {3, 7, 9}.
  // Chunk 1: token 2 {4}; token 3 is past T (no rows), so it joins.
  ASSERT_EQ(plan.blocks.size(), 3u);
  const auto block = [&](std::size_t b) {
    const GatherBlock& x = plan.blocks[b];
    return std::vector<int>{x.chunk, x.first, x.count, x.row_first, x.rows};
  };
  EXPECT_EQ(block(0), (std::vector<int>{0, 0, 1, 0, 3}));
  EXPECT_EQ(block(1), (std::vector<int>{0, 1, 1, 3, 3}));
  EXPECT_EQ(block(2), (std::vector<int>{1, 0, 2, 6, 1}));
  EXPECT_EQ(plan.step_begin, (std::vector<std::int64_t>{0, 2, 3}));
  EXPECT_EQ(plan.rows, (std::vector<std::int32_t>{3, 5, 9, 3, 7, 9, 4}));
  EXPECT_EQ(plan.k_slot, (std::vector<std::int32_t>{5, 3, 3, 9, 4, -1, -1, -1}));
  EXPECT_EQ(plan.k_ord, (std::vector<std::int16_t>{1, 0, 0, 2, 0, -1, -1, -1}));
  EXPECT_EQ(plan.q_slot, (std::vector<std::int32_t>{9, 7, 4, -1}));
  EXPECT_EQ(plan.q_ord, (std::vector<std::int16_t>{2, 1, 0, -1}));
  EXPECT_EQ(plan.entries_with_rows, 8);
}

TEST(GatherPlan, RefusesBadShapesAndBudgets) {
  // Each refusal names what is wrong.
  const auto message = [](auto&& call) {
    try {
      call();
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(message([] { make_gather_plan({1}, {1}, 0, 1, 1, 1, 1, 4); }), "make_gather_plan: sizes must be >= 1");
  EXPECT_EQ(message([] { make_gather_plan({1}, {1}, 1, 1, 1, 1, 1, 0); }), "make_gather_plan: max_rows must be in 1..32767");
  EXPECT_EQ(message([] { make_gather_plan({1}, {1}, 1, 1, 1, 1, 1, 32768); }),
            "make_gather_plan: max_rows must be in 1..32767");
  EXPECT_EQ(message([] { make_gather_plan({1, 2}, {1}, 1, 1, 1, 1, 1, 4); }),
            "make_gather_plan: writes / reads must be [P, T, W] / [P, T, R]");
  // One token reads 3 distinct rows: a budget of 2 cannot hold it.
  EXPECT_EQ(message([] { make_gather_plan({1, 2}, {3}, 1, 1, 2, 1, 1, 2); }),
            "make_gather_plan: a token has 3 distinct rows, more than max_rows 2");
  EXPECT_NO_THROW(make_gather_plan({1, 2}, {3}, 1, 1, 2, 1, 1, 3));
}

TEST(GatherPlan, RandomCallsNameEveryRowOnceAndKeepTheBudget) {
  std::mt19937_64 rng(20261208);
  for (int trial = 0; trial < 60; ++trial) {
    const std::int64_t P = 1 + rng() % 3, T = 1 + rng() % 23, W = 1 + rng() % 5, R = 1 + rng() % 4, C = 1 + rng() % 8,
                       sps = 1 + rng() % 12;
    std::vector<std::int32_t> writes(P * T * W), reads(P * T * R);
    const auto draw = [&](std::int64_t k, std::int64_t width) {
      return rng() % 9 == 0 ? -1 : static_cast<std::int32_t>(k / (T * width) * sps + rng() % sps);
    };
    for (std::int64_t k = 0; k < P * T * W; ++k) writes[k] = draw(k, W);
    for (std::int64_t k = 0; k < P * T * R; ++k) reads[k] = draw(k, R);
    const std::int64_t max_rows = std::min(W + R, sps) + static_cast<std::int64_t>(rng() % 10);
    SCOPED_TRACE("trial " + std::to_string(trial) + ", max_rows " + std::to_string(max_rows));
    const GatherPlan plan = make_gather_plan(writes, reads, P, T, W, R, C, max_rows);
    ASSERT_EQ(plan.chunks, (T + C - 1) / C * P);
    ASSERT_EQ(static_cast<std::int64_t>(plan.step_begin.size()), plan.steps + 1);
    std::int64_t with_rows = 0;
    std::size_t b = 0;
    for (std::int64_t n = 0; n < plan.chunks; ++n) {
      const std::int64_t ti = n / P, p = n % P;
      if (p == 0) {
        ASSERT_EQ(plan.step_begin[ti], static_cast<std::int64_t>(b)) << "step " << ti << "'s blocks start here";
      }
      std::int32_t next_token = 0;
      for (; b < plan.blocks.size() && plan.blocks[b].chunk == n; ++b) {
        const GatherBlock& x = plan.blocks[b];
        ASSERT_EQ(x.first, next_token) << "blocks cover the chunk's tokens in order";
        ASSERT_GE(x.count, 1);
        ASSERT_LE(x.rows, max_rows);
        next_token = x.first + x.count;
        const std::vector<std::int32_t> rows(plan.rows.begin() + x.row_first, plan.rows.begin() + x.row_first + x.rows);
        ASSERT_TRUE(std::is_sorted(rows.begin(), rows.end()));
        ASSERT_EQ(std::adjacent_find(rows.begin(), rows.end()), rows.end()) << "distinct";
        // The block's rows are exactly its tokens' unmasked slots, and each entry's ordinal names its slot.
        std::set<std::int32_t> used;
        for (std::int32_t i = x.first; i < x.first + x.count; ++i) {
          const std::int64_t t = ti * C + i, token = n * C + i;
          const auto check = [&](const std::vector<std::int32_t>& slots, std::int64_t width,
                                 const std::vector<std::int32_t>& slot, const std::vector<std::int16_t>& ord) {
            for (std::int64_t w = 0; w < width; ++w) {
              const std::int32_t want = t < T ? slots[(p * T + t) * width + w] : -1;
              const std::int64_t at = token * width + w;
              ASSERT_EQ(slot[at], want < 0 ? -1 : want);
              if (want < 0) {
                ASSERT_EQ(ord[at], -1);
                continue;
              }
              ASSERT_GE(ord[at], 0);
              ASSERT_LT(ord[at], x.rows);
              ASSERT_EQ(rows[ord[at]], want);
              used.insert(want);
              ++with_rows;
            }
          };
          check(writes, W, plan.k_slot, plan.k_ord);
          check(reads, R, plan.q_slot, plan.q_ord);
        }
        ASSERT_EQ(used, std::set<std::int32_t>(rows.begin(), rows.end()));
        // Greedy: the next token of the chunk would have passed the budget.
        if (x.first + x.count < C && b + 1 < plan.blocks.size() && plan.blocks[b + 1].chunk == n) {
          std::set<std::int32_t> joined(rows.begin(), rows.end());
          const std::int64_t t = ti * C + x.first + x.count;
          for (std::int64_t w = 0; w < W && t < T; ++w) {
            if (writes[(p * T + t) * W + w] >= 0) joined.insert(writes[(p * T + t) * W + w]);
          }
          for (std::int64_t r = 0; r < R && t < T; ++r) {
            if (reads[(p * T + t) * R + r] >= 0) joined.insert(reads[(p * T + t) * R + r]);
          }
          EXPECT_GT(static_cast<std::int64_t>(joined.size()), max_rows) << "block " << b << " closed early";
        }
      }
      ASSERT_EQ(next_token, C) << "chunk " << n;
    }
    ASSERT_EQ(b, plan.blocks.size());
    EXPECT_EQ(plan.entries_with_rows, with_rows);
  }
}

}  // namespace

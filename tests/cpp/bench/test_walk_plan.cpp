// The walk plan of recorded slots (bench/walk_plan.hpp): the slot-major record stream, the M0 rows
// and the tiles snapped back to group starts, on a hand-checked call and on random calls of awkward
// shapes (T not a multiple of C, W != R, repeated slots across tokens).
#include "walk_plan.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <random>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

namespace {

using sdm::bench::make_walk_plan;
using sdm::bench::WalkPlan;

TEST(WalkPlan, HandCheckedChunk) {
  // P 1, T 3, C 2 (a short last chunk), W 2, R 1. Tokens write {5, 3}, {3, 9}, {4, 5}; read {9}, {7}, {4}.
  const std::vector<std::int32_t> writes = {5, 3, 3, 9, 4, 5}, reads = {9, 7, 4};
  const WalkPlan plan = make_walk_plan(writes, reads, 1, 3, 2, 1, 2, 2);
  ASSERT_EQ(plan.chunks, 2);
  EXPECT_EQ(plan.records_per_chunk, 6);
  EXPECT_EQ(plan.tiles_per_chunk, 3);
  // Chunk 0: slot 3 (writes (0,1), (1,0)), slot 5 (write (0,0)), slot 7 (read (1,0)), slot 9 (write (1,1), read (0,0)).
  ASSERT_EQ(plan.group_begin, (std::vector<std::int64_t>{0, 4, 6}));
  const std::vector<std::tuple<int, int, int, int>> want = {{3, 0, 2, 0}, {5, 2, 1, 0}, {7, 3, 0, 1}, {9, 4, 1, 1},
                                                            {4, 0, 1, 1}, {5, 2, 1, 0}};
  for (std::size_t g = 0; g < want.size(); ++g) {
    const auto& x = plan.groups[g];
    EXPECT_EQ(std::make_tuple(x.slot, x.first, x.writes, x.reads), want[g]) << "group " << g;
  }
  EXPECT_EQ(plan.m0_row, (std::vector<std::int32_t>{0, 1, -1, 2, 3, 4}));
  EXPECT_EQ(plan.written_groups, 5);
  EXPECT_EQ(plan.read_only_groups, 1);
  const std::vector<std::pair<int, int>> records0 = {{0, 1}, {1, 0}, {0, 0}, {1, 0}, {1, 1}, {0, 0}};
  for (std::size_t r = 0; r < records0.size(); ++r) {
    EXPECT_EQ(std::make_pair(plan.records[r].token, plan.records[r].lane), records0[r]) << "record " << r;
  }
  // Tiles of L = 2 over chunk 0's records 0..5: bounds 0, 2, 4, 6 -> groups holding records 0, 2, 4, end.
  EXPECT_EQ(std::vector<std::int32_t>(plan.tile_groups.begin(), plan.tile_groups.begin() + 4),
            (std::vector<std::int32_t>{0, 1, 3, 4}));
  // Chunk 1 (token 2 only): 3 records; bounds 0, 2 -> groups 0 (slot 4, records 0-1), 1 (slot 5, record 2).
  EXPECT_EQ(std::vector<std::int32_t>(plan.tile_groups.begin() + 4, plan.tile_groups.end()),
            (std::vector<std::int32_t>{0, 1, 2, 2}));
}

TEST(WalkPlan, RefusesBadShapes) {
  EXPECT_THROW(make_walk_plan({1}, {1}, 1, 1, 1, 1, 1, 0), std::invalid_argument);
  EXPECT_THROW(make_walk_plan({1, 2}, {1}, 1, 1, 1, 1, 1, 1), std::invalid_argument);
}

TEST(WalkPlan, RandomCallsKeepEveryEntryOnceAndSnapTiles) {
  std::mt19937_64 rng(20261206);
  for (int trial = 0; trial < 40; ++trial) {
    const std::int64_t P = 1 + rng() % 3, T = 1 + rng() % 23, W = 1 + rng() % 5, R = 1 + rng() % 4, C = 1 + rng() % 8,
                       L = 1 + rng() % 9, sps = 1 + rng() % 12;
    std::vector<std::int32_t> writes(P * T * W), reads(P * T * R);
    for (std::int64_t k = 0; k < P * T * W; ++k) writes[k] = static_cast<std::int32_t>(k / (T * W) * sps + rng() % sps);
    for (std::int64_t k = 0; k < P * T * R; ++k) reads[k] = static_cast<std::int32_t>(k / (T * R) * sps + rng() % sps);
    for (const std::int64_t max_group : {std::int64_t{0}, static_cast<std::int64_t>(1 + rng() % 5)}) {
      SCOPED_TRACE("trial " + std::to_string(trial) + ", max_group " + std::to_string(max_group));
      const WalkPlan plan = make_walk_plan(writes, reads, P, T, W, R, C, L, max_group);
      ASSERT_EQ(plan.chunks, (T + C - 1) / C * P);
      std::int32_t next_snapshot = 0;
      for (std::int64_t n = 0; n < plan.chunks; ++n) {
        const std::int64_t ti = n / P, p = n % P, tokens = std::min(C, T - ti * C);
        // Every write / read entry of the chunk exactly once, in its slot's group(s).
        std::map<std::tuple<int, int, int, int>, int> expected;  // (kind, slot, token, lane) -> count
        for (std::int64_t i = 0; i < tokens; ++i) {
          for (std::int64_t w = 0; w < W; ++w) ++expected[{0, writes[(p * T + ti * C + i) * W + w], i, w}];
          for (std::int64_t r = 0; r < R; ++r) ++expected[{1, reads[(p * T + ti * C + i) * R + r], i, r}];
        }
        std::map<std::tuple<int, int, int, int>, int> seen;
        std::int32_t at = 0, previous_slot = -1;
        for (std::int64_t g = plan.group_begin[n]; g < plan.group_begin[n + 1]; ++g) {
          const auto& grp = plan.groups[g];
          ASSERT_EQ(grp.first, at) << "groups are contiguous";
          ASSERT_GT(grp.writes + grp.reads, 0);
          if (max_group > 0) {
            ASSERT_LE(grp.writes + grp.reads, max_group);
          }
          if (grp.slot == previous_slot) {  // a further piece of the slot: the one before it is full
            const auto& before = plan.groups[g - 1];
            ASSERT_GT(max_group, 0) << "whole slots: one group a slot";
            ASSERT_EQ(before.writes + before.reads, max_group);
            if (grp.writes > 0) {
              ASSERT_EQ(before.reads, 0) << "a slot's writes come before its reads";
            }
            EXPECT_EQ(plan.m0_row[g], plan.m0_row[g - 1]);
          } else {
            ASSERT_GT(grp.slot, previous_slot) << "slots in ascending order";
            EXPECT_EQ(plan.m0_row[g], grp.writes > 0 ? next_snapshot++ : -1);
          }
          for (int m = 0; m < grp.writes + grp.reads; ++m) {
            const auto& rec = plan.records[n * plan.records_per_chunk + at + m];
            if (m > 0 && m != grp.writes) {  // (token, lane) ascending within each kind
              const auto& prev = plan.records[n * plan.records_per_chunk + at + m - 1];
              ASSERT_LT(std::make_pair(prev.token, prev.lane), std::make_pair(rec.token, rec.lane));
            }
            ++seen[{m < grp.writes ? 0 : 1, grp.slot, rec.token, rec.lane}];
          }
          previous_slot = grp.slot, at += grp.writes + grp.reads;
        }
        ASSERT_EQ(seen, expected) << "chunk " << n;
        // Tiles: nondecreasing group bounds; tile t starts at the group holding record t L; at most L groups a tile.
        const std::int32_t* tiles = plan.tile_groups.data() + n * (plan.tiles_per_chunk + 1);
        const auto groups = static_cast<std::int32_t>(plan.group_begin[n + 1] - plan.group_begin[n]);
        EXPECT_EQ(tiles[plan.tiles_per_chunk], groups);
        for (std::int64_t t = 0; t < plan.tiles_per_chunk; ++t) {
          ASSERT_LE(tiles[t], tiles[t + 1]);
          EXPECT_LE(tiles[t + 1] - tiles[t], L);
          const std::int64_t bound = t * L;
          if (bound < at) {
            const auto& grp = plan.groups[plan.group_begin[n] + tiles[t]];
            EXPECT_LE(grp.first, bound);
            EXPECT_GT(grp.first + grp.writes + grp.reads, bound);
          } else {
            EXPECT_EQ(tiles[t], groups);
          }
        }
      }
      EXPECT_EQ(plan.written_groups, next_snapshot);
    }
  }
}

TEST(WalkPlan, LongGroupsCutIntoPieces) {
  // Three tokens in one chunk (P 1, T 3, C 3, W 1, R 2), each writing slot 4; reads {4, 2}, {4, 4},
  // {4, 4}: slot 2 holds 1 read (record 0), slot 4 3 writes and 5 reads (records 1-8); pieces of 4
  // records: {3 writes, 1 read}, {4 reads}.
  const std::vector<std::int32_t> writes = {4, 4, 4}, reads = {4, 2, 4, 4, 4, 4};
  const WalkPlan plan = make_walk_plan(writes, reads, 1, 3, 1, 2, 3, 4, 4);
  const std::vector<std::tuple<int, int, int, int>> want = {{2, 0, 0, 1}, {4, 1, 3, 1}, {4, 5, 0, 4}};
  ASSERT_EQ(plan.groups.size(), want.size());
  for (std::size_t g = 0; g < want.size(); ++g) {
    const auto& x = plan.groups[g];
    EXPECT_EQ(std::make_tuple(x.slot, x.first, x.writes, x.reads), want[g]) << "group " << g;
  }
  EXPECT_EQ(plan.m0_row, (std::vector<std::int32_t>{-1, 0, 0}));
  EXPECT_EQ(plan.written_groups, 1);
  EXPECT_EQ(plan.read_only_groups, 1);
  EXPECT_THROW(make_walk_plan(writes, reads, 1, 3, 1, 2, 3, 4, -1), std::invalid_argument);
}

}  // namespace

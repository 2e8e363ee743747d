// The benchmarks' slot generators (bench/slot_patterns.hpp): the addressing rules the op relies on,
// the reuse each pattern promises (the distinct fraction of a chunk's writes, the ranges the header
// states), and the reads' tie to the writes (a layer's reads land on the rows its chunk writes,
// the more so under heavy reuse).
#include "slot_patterns.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdint>
#include <vector>

namespace {

using sdm::bench::SlotPattern;

// readme's slots per stream and widths, 2 streams of 640 tokens (10 chunks of 64).
constexpr std::int64_t kP = 2, kT = 640, kSps = 36864, kW = 64, kR = 48, kC = 64;

sdm::bench::WriteReadSlots draw(SlotPattern pattern, std::uint64_t seed = 7) {
  return sdm::bench::make_write_read_slots(pattern, kP, kT, kW, kR, kSps, seed);
}

void expect_op_contract(const std::vector<std::int32_t>& slots, std::int64_t width) {
  ASSERT_EQ(slots.size(), static_cast<std::size_t>(kP * kT * width));
  for (std::int64_t token = 0; token < kP * kT; ++token) {
    const std::int64_t p = token / kT;
    const std::int32_t* row = slots.data() + token * width;
    for (std::int64_t w = 0; w < width; ++w) {
      ASSERT_GE(row[w], p * kSps) << "token " << token << " lane " << w << " outside its stream";
      ASSERT_LT(row[w], (p + 1) * kSps) << "token " << token << " lane " << w << " outside its stream";
    }
    std::vector<std::int32_t> sorted(row, row + width);
    std::sort(sorted.begin(), sorted.end());
    ASSERT_EQ(std::adjacent_find(sorted.begin(), sorted.end()), sorted.end()) << "token " << token << " repeats a slot";
  }
}

TEST(SlotPatterns, EveryPatternFollowsTheOpContract) {
  for (const SlotPattern pattern : {SlotPattern::strided, SlotPattern::product_key, SlotPattern::heavy_reuse}) {
    SCOPED_TRACE(sdm::bench::slot_pattern_name(pattern));
    const sdm::bench::WriteReadSlots slots = draw(pattern);
    expect_op_contract(slots.writes, kW);
    expect_op_contract(slots.reads, kR);
  }
}

TEST(SlotPatterns, SameSeedSameSlotsOtherSeedOtherSlots) {
  const sdm::bench::WriteReadSlots a = draw(SlotPattern::heavy_reuse), b = draw(SlotPattern::heavy_reuse);
  EXPECT_EQ(a.writes, b.writes);
  EXPECT_EQ(a.reads, b.reads);
  EXPECT_NE(a.writes, draw(SlotPattern::heavy_reuse, 8).writes);
  EXPECT_NE(a.reads, draw(SlotPattern::heavy_reuse, 8).reads);
}

TEST(SlotPatterns, HeavyReuseReusesMoreThanProductKeys) {
  const double pk = sdm::bench::distinct_fraction(draw(SlotPattern::product_key).writes, kP, kT, kW, kC);
  const double heavy = sdm::bench::distinct_fraction(draw(SlotPattern::heavy_reuse).writes, kP, kT, kW, kC);
  EXPECT_GE(pk, 0.4);
  EXPECT_LE(pk, 0.55);
  EXPECT_GE(heavy, 0.15);
  EXPECT_LE(heavy, 0.22);
}

// A layer's write and read keys are two projections of one token over the same keys: under heavy
// reuse the shared key biases crowd both onto the same few slots, so most reads land on rows the
// chunk writes, far more than reads drawn on their own would (the benchmark's inputs before stop 44).
TEST(SlotPatterns, ReadsLandOnTheChunksWrittenRows) {
  const auto read_written = [](SlotPattern pattern) {
    return sdm::bench::read_written_fraction(draw(pattern), kP, kT, kW, kR, kC);
  };
  const double strided = read_written(SlotPattern::strided), pk = read_written(SlotPattern::product_key),
               heavy = read_written(SlotPattern::heavy_reuse);
  // The same pattern's reads from another draw (another latent, other key biases).
  const double unrelated = sdm::bench::read_written_fraction(
      {draw(SlotPattern::heavy_reuse).writes, draw(SlotPattern::heavy_reuse, 8).reads}, kP, kT, kW, kR, kC);
  std::printf("read entries on written rows: strided %.3f, product_key %.3f, heavy_reuse %.3f (reads of another "
              "draw %.3f)\n", strided, pk, heavy, unrelated);
  EXPECT_GT(heavy, pk);
  EXPECT_GT(heavy, 0.5);
  EXPECT_GT(heavy, 2 * unrelated);
}

TEST(SlotPatterns, ReadWrittenFractionCountsPerChunk) {
  // One stream, 4 tokens, W = R = 1, chunks of 2: reads {0, 9} of writes {0, 1}, reads {2, 3} of {3, 4}.
  const sdm::bench::WriteReadSlots slots{{0, 1, 3, 4}, {0, 9, 2, 3}};
  EXPECT_DOUBLE_EQ(sdm::bench::read_written_fraction(slots, 1, 4, 1, 1, 2), (0.5 + 0.5) / 2);
}

}  // namespace

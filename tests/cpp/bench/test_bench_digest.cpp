// test_bench_digest.cpp - the GPU benchmark's buffer digests (bench/digest.hpp): the same bytes
// give the same value whatever the thread count and the pieces they arrive in; a flipped bit
// anywhere, two swapped blocks or another length change it; a piece cut inside a block is refused.
#include <gtest/gtest.h>

#include <cstdint>
#include <stdexcept>
#include <utility>
#include <vector>

#include "digest.hpp"

namespace {

using sdm::bench::BlockDigest;

std::vector<unsigned char> bytes_of(std::size_t n, std::uint64_t seed) {
  std::vector<unsigned char> out(n);
  std::uint64_t x = seed;
  for (auto& b : out) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    b = static_cast<unsigned char>(x >> 56);
  }
  return out;
}

std::uint64_t digest(const std::vector<unsigned char>& data, unsigned threads = 0) {
  BlockDigest d;
  d.add(data.data(), data.size(), threads);
  return d.value();
}

constexpr std::size_t kBlock = BlockDigest::kBlockBytes;

TEST(BenchDigest, IndependentOfThreadsAndPieces) {
  const auto data = bytes_of(5 * kBlock + 12345, 1);
  const std::uint64_t whole = digest(data, 1);
  for (unsigned threads : {2u, 3u, 7u, 64u, 0u}) EXPECT_EQ(digest(data, threads), whole) << threads << " threads";
  BlockDigest pieces;
  pieces.add(data.data(), 2 * kBlock, 3);
  pieces.add(data.data() + 2 * kBlock, kBlock, 1);
  pieces.add(data.data() + 3 * kBlock, data.size() - 3 * kBlock, 5);
  EXPECT_EQ(pieces.value(), whole);
}

TEST(BenchDigest, EveryChangeShows) {
  const auto data = bytes_of(3 * kBlock + 7, 2);
  const std::uint64_t base = digest(data);
  for (const std::size_t at : {std::size_t{0}, kBlock - 1, kBlock, 2 * kBlock + 5, data.size() - 1}) {
    for (const int bit : {0, 7}) {
      auto changed = data;
      changed[at] ^= static_cast<unsigned char>(1u << bit);
      EXPECT_NE(digest(changed), base) << "byte " << at << " bit " << bit;
    }
  }
  auto swapped = data;
  for (std::size_t i = 0; i < kBlock; ++i) std::swap(swapped[i], swapped[kBlock + i]);
  EXPECT_NE(digest(swapped), base) << "two blocks swapped";
  auto longer = data;
  longer.push_back(0);
  EXPECT_NE(digest(longer), base) << "a trailing zero byte";
  EXPECT_NE(digest({}), digest(std::vector<unsigned char>(kBlock, 0))) << "empty vs one zero block";
}

TEST(BenchDigest, RefusesAPieceAfterAPartialBlock) {
  const auto data = bytes_of(2 * kBlock, 3);
  BlockDigest d;
  d.add(data.data(), kBlock + 1);
  EXPECT_THROW(d.add(data.data() + kBlock + 1, kBlock - 1), std::logic_error);
}

TEST(BenchDigest, CombineIsOrdered) {
  const std::uint64_t a = digest(bytes_of(100, 4)), b = digest(bytes_of(100, 5));
  EXPECT_NE(sdm::bench::combine_digests({a, b}), sdm::bench::combine_digests({b, a}));
  EXPECT_EQ(sdm::bench::combine_digests({a, b}), sdm::bench::combine_digests({a, b}));
}

}  // namespace

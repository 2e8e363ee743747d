// pair_table.cuh - the candidate rank pairs of a product-key stage, in order of (i + 1) * (j + 1).
//
// A stage keeping c pairs considers the pairs (i, j) with (i + 1) * (j + 1) <= c (the rule:
// include/sdm/product_key_topk.hpp). Listed by increasing product, the pairs of any c <= kRank are
// the first pair_count(c) entries of one table, so one table serves every c: entry t holds
// payload << 16 | i << 8 | j with the pair's tie payload (i + j) << 8 | i (i + j < 256).
// pair_count(c) >= c (the pairs (0, j), j < c, are in it).
#pragma once

#include <cstdint>

namespace sdm::cuda::topk {

inline constexpr int kPairTableRank = 128;
// Tie codes payload + 1 of the table's pairs are below kPairCodes (i + j < kPairTableRank).
inline constexpr std::uint32_t kPairCodes = (kPairTableRank << 8) + 1u;

__host__ __device__ constexpr int pair_count(int c) {
  int n = 0;
  for (int i = 1; i <= c; ++i) n += c / i;
  return n;
}

struct PairTable {
  std::uint32_t code[pair_count(kPairTableRank)];
};

constexpr PairTable make_pair_table() {
  PairTable table{};
  int t = 0;
  for (int product = 1; product <= kPairTableRank; ++product) {
    for (int i = 0; i < product; ++i) {
      if (product % (i + 1) == 0) {
        const int j = product / (i + 1) - 1;
        table.code[t++] = static_cast<std::uint32_t>(((i + j) << 8 | i) << 16 | i << 8 | j);
      }
    }
  }
  return table;
}

// In global memory (read through the L1): the lanes of a warp read 32 different entries at once,
// which the constant cache would serialise.
__device__ constexpr PairTable kPairTable = make_pair_table();

}  // namespace sdm::cuda::topk

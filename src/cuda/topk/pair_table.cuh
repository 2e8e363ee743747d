// pair_table.cuh - the candidate rank pairs of a product-key stage, in order of (i + 1) * (j + 1).
//
// A stage keeping c pairs considers the pairs (i, j) with (i + 1) * (j + 1) <= c (the rule:
// include/sdm/product_key_topk.hpp). Listed by increasing product, the pairs of any c <= KMAX are
// the first count[c] = pair_count(c) entries of one table, so one table per KMAX serves every
// c <= KMAX, and the pairs of product exactly c are the entries count[c - 1] .. count[c] - 1.
// pair_count(c) >= c (the pairs (0, j), j < c, are in it). Entry t is the ranks (i, j) (8 bytes,
// one load a candidate) and, apart, the pair's tie payload (i + j) << 8 | i (i + j < 256; read
// after the cut search, so it holds no register through it). The table is padded to whole warps
// (32 entries for each candidate of a lane) with entries (0, 0): every entry's i and j index the [KMAX]
// lists, and the padding lies past count[c] for every c <= KMAX.
#pragma once

#include <vector_types.h>

#include <cstdint>

namespace sdm::cuda::topk {

inline constexpr int kPairTableRank = 128;  // the largest KMAX
// Tie codes payload + 1 of the pairs are below kPairCodes (i + j < kPairTableRank).
inline constexpr std::uint32_t kPairCodes = (kPairTableRank << 8) + 1u;

__host__ __device__ constexpr int pair_count(int c) {
  int n = 0;
  for (int i = 1; i <= c; ++i) n += c / i;
  return n;
}

template <int KMAX>
struct PairTable {
  static_assert(KMAX <= kPairTableRank);
  static constexpr int kLanes = (pair_count(KMAX) + 31) / 32;  // candidates a lane
  uint2 rank[kLanes * 32];  // (i, j)
  std::uint32_t payload[kLanes * 32];
  std::uint32_t count[KMAX + 1];  // count[c] = pair_count(c)
};

template <int KMAX>
constexpr PairTable<KMAX> make_pair_table() {
  PairTable<KMAX> table{};
  int t = 0;
  for (int product = 1; product <= KMAX; ++product) {
    for (int i = 0; i < product; ++i) {
      if (product % (i + 1) == 0) {
        const int j = product / (i + 1) - 1;
        table.rank[t] = {static_cast<std::uint32_t>(i), static_cast<std::uint32_t>(j)};
        table.payload[t++] = static_cast<std::uint32_t>((i + j) << 8 | i);
      }
    }
    table.count[product] = static_cast<std::uint32_t>(t);
  }
  return table;  // the padding past count[KMAX]: zeros
}

// In global memory (read through the L1): the lanes of a warp read 32 different entries at once,
// which the constant cache would serialise (count[c] is read once a stage).
template <int KMAX>
__device__ constexpr PairTable<KMAX> kPairTable = make_pair_table<KMAX>();

}  // namespace sdm::cuda::topk

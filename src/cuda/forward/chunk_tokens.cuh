// chunk_tokens.cuh - what Phase 1's per-chunk kernels (scan_groups, lookup_reads: one CTA per
// chunk) share: a chunk's tokens in the inputs and whether its write entries are staged in
// shared memory.
//
// A chunk of at most kMaxStagedEntries write entries is staged in shared memory (the kernels'
// kStaged instantiation), so the gathers and scatters that follow the sort's permutation hit shared
// memory and global memory sees coalesced accesses only; a larger chunk runs the same code on
// global memory.
#pragma once

#include <cstdint>

#include "cuda/common/geometry.hpp"

namespace sdm::cuda {

inline constexpr std::int64_t kMaxStagedEntries = 16384;

inline bool staged_chunk(const Geometry& geo) { return geo.C * geo.W <= kMaxStagedEntries; }

// Entry u = i*W + w of chunk n: its tokens' place in the inputs. Token i of chunk n is input token
// p*T + t0 + i; entries of tokens inside T are the chunk's first valid_tokens*W.
struct ChunkTokens {
  std::int64_t p, t0, first_token;  // first_token = p*T + t0
  int valid_tokens;                 // tokens of the chunk inside T (>= 1: t0 < T)
};

__device__ __forceinline__ ChunkTokens chunk_tokens(const Geometry& geo, std::int64_t n) {
  const std::int64_t p = n % geo.P, t0 = (n / geo.P) * geo.C;
  return {p, t0, p * geo.T + t0, static_cast<int>(geo.T - t0 < geo.C ? geo.T - t0 : geo.C)};
}

}  // namespace sdm::cuda

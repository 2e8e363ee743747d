// entry_key_rules.hpp - the key layout and the per-thread rules of the entry-key kernel
// (entry_keys.cu), plain C++ for host and device so that a host test replays the kernel entry by
// entry (tests/cpp/cuda_host/test_entry_key_rules.cpp).
//
// Grid: a CTA of kKeyThreads threads covers whole tokens of one chunk, tokens_per_cta =
// kKeyThreads / lanes of them (lanes <= kMaxWidth <= kKeyThreads), so a token never straddles two
// CTAs. Thread u of CTA b of chunk n holds entry (n, i, x): i = b * tokens_per_cta + u / lanes,
// x = u % lanes, when i < C and u < tokens_per_cta * lanes (the other threads hold none).
// A write entry's repeat word: for a candidate (a real token, its index inside its stream's rows)
// key(n, local, i, lane 0), equal for two lanes of one token exactly when they name one slot; for
// any other entry its masked key (slot field sps), which no candidate's word equals.
#pragma once

#include <cstdint>
#include <string>

#include "cuda/common/geometry.hpp"
#include "sdm/error.hpp"
#include "sdm/options.hpp"

namespace sdm::cuda {

// The key layout of entries with `lanes` lanes (geo.keys: the writes' one; the reads' has R).
// Throws sdm::RuntimeError when the key needs more than 64 bits.
inline KeyLayout entry_key_layout(const Geometry& geo, std::int64_t lanes) {
  KeyLayout layout;
  layout.lane_bits = bits_for(static_cast<std::uint64_t>(lanes - 1));
  layout.token_bits = bits_for(static_cast<std::uint64_t>(geo.C - 1));
  layout.slot_bits = bits_for(static_cast<std::uint64_t>(geo.sps));
  layout.chunk_bits = bits_for(static_cast<std::uint64_t>(geo.N - 1));
  if (layout.total_bits() > 64) {
    const std::string sizes = "chunks " + std::to_string(geo.N) + ", slots_per_stream " + std::to_string(geo.sps) +
                              ", chunk_size " + std::to_string(geo.C) + ", lanes " + std::to_string(lanes);
    throw RuntimeError("sdm CUDA engine: this call needs a " + std::to_string(layout.total_bits()) +
                       "-bit sort key (" + sizes +
                       "), more than the 64 bits supported on CUDA so far; split the call over time or streams");
  }
  return layout;
}

inline constexpr int kKeyThreads = 256;
static_assert(kMaxWidth <= kKeyThreads, "a token's lanes fit one key CTA");

struct KeyGrid {
  int lanes = 0;                // W (writes) or R (reads)
  int tokens_per_cta = 0;
  unsigned ctas_per_chunk = 0;  // ceil(C / tokens_per_cta)
};

inline KeyGrid key_grid(std::int64_t C, std::int64_t lanes) {
  KeyGrid grid;
  grid.lanes = static_cast<int>(lanes);
  grid.tokens_per_cta = kKeyThreads / grid.lanes;
  grid.ctas_per_chunk = static_cast<unsigned>((C + grid.tokens_per_cta - 1) / grid.tokens_per_cta);
  return grid;
}

// The entry of thread u of a chunk's CTA `cta`.
struct KeyThread {
  std::int64_t i = 0;   // token of the chunk
  int lane = 0;         // x
  int token_first = 0;  // the thread holding lane 0 of the token
  bool inside = false;  // the thread holds an entry
};

SDM_HOST_DEVICE KeyThread key_thread(const KeyGrid& grid, std::int64_t C, unsigned cta, int u) {
  const int token = u / grid.lanes;
  KeyThread th;
  th.i = static_cast<std::int64_t>(cta) * grid.tokens_per_cta + token;
  th.lane = u - token * grid.lanes;
  th.token_first = token * grid.lanes;
  th.inside = token < grid.tokens_per_cta && th.i < C;
  return th;
}

// The local slot of index `idx` of an entry at `at`: idx - p*sps, or sps (masked) for a padding
// token or an index outside stream p's rows.
SDM_HOST_DEVICE std::int64_t local_slot_of_index(const Geometry& geo, const EntryPlace& at, std::int64_t idx) {
  const std::int64_t local = idx - at.p * geo.sps;
  return at.t < geo.T && local >= 0 && local < geo.sps ? local : geo.sps;
}

// The local slot of an absolute bank row of stream p (Phase 1's q_slot; -1: masked -> sps).
SDM_HOST_DEVICE std::int64_t local_slot_of_row(const Geometry& geo, const EntryPlace& at, std::int32_t row) {
  return row < 0 ? geo.sps : row - at.p * geo.sps;
}

// The absolute bank row of a local slot (-1 for sps: masked).
SDM_HOST_DEVICE std::int32_t row_of_local_slot(const Geometry& geo, const EntryPlace& at, std::int64_t local) {
  return local == geo.sps ? -1 : static_cast<std::int32_t>(local + at.p * geo.sps);
}

SDM_HOST_DEVICE std::uint64_t repeat_word(const Geometry& geo, const KeyLayout& layout, std::int64_t n,
                                          std::int64_t local, const KeyThread& th) {
  return local == geo.sps ? layout.encode(n, geo.sps, th.i, th.lane) : layout.encode(n, local, th.i, 0);
}

// The first thread of u's warp: the lanes of u's token below it, [token_first, warp_first(u)),
// are in earlier warps.
SDM_HOST_DEVICE int warp_first(int u) { return u & ~31; }

}  // namespace sdm::cuda

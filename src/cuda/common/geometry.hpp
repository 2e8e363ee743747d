// geometry.hpp - the geometry of one chunked call on the device, the raw input views the
// kernels read, and the 64-bit sort key of a write entry (docs/spec.md §2).
//
// Chunks are time-major: chunk n = ti * P + p covers tokens [ti*C, ti*C + C) of stream p;
// tokens at or beyond T are padding (no write, no read, readings not stored). A write entry
// (n, i, w) is token i of chunk n, lane w. Its sort key, most significant first:
//   chunk n | local slot (idx - p*sps, or sps for padding / masked entries) | token i | lane w
// so one global radix sort gives, per chunk, the entries grouped by slot in token order
// (invalid entries last); chunk n's sorted entries are [n*C*W, (n+1)*C*W).
#pragma once

#include <cstdint>

#include "core/host_device.hpp"
#include "core/validate.hpp"
#include "sdm/types.hpp"

namespace sdm::cuda {

// Bits needed to represent every value in [0, x].
SDM_HOST_DEVICE int bits_for(std::uint64_t x) {
  int bits = 0;
  while (x >> bits) ++bits;
  return bits;
}

struct KeyLayout {
  int lane_bits = 0, token_bits = 0, slot_bits = 0, chunk_bits = 0;

  SDM_HOST_DEVICE std::uint64_t encode(std::int64_t n, std::int64_t local, std::int64_t i, std::int64_t w) const {
    std::uint64_t key = static_cast<std::uint64_t>(n);
    key = (key << slot_bits) | static_cast<std::uint64_t>(local);
    key = (key << token_bits) | static_cast<std::uint64_t>(i);
    return (key << lane_bits) | static_cast<std::uint64_t>(w);
  }
  SDM_HOST_DEVICE std::int64_t lane(std::uint64_t key) const {
    return static_cast<std::int64_t>(key & ((std::uint64_t{1} << lane_bits) - 1));
  }
  SDM_HOST_DEVICE std::int64_t token(std::uint64_t key) const {
    return static_cast<std::int64_t>((key >> lane_bits) & ((std::uint64_t{1} << token_bits) - 1));
  }
  SDM_HOST_DEVICE std::int64_t local_slot(std::uint64_t key) const {
    return static_cast<std::int64_t>((key >> (lane_bits + token_bits)) & ((std::uint64_t{1} << slot_bits) - 1));
  }
  int total_bits() const { return lane_bits + token_bits + slot_bits + chunk_bits; }
};

// The local slots along a chunk's sorted keys (keys: the chunk's first sorted key).
struct KeySlots {
  using Slot = std::int64_t;
  const std::uint64_t* keys;
  KeyLayout layout;
  SDM_HOST_DEVICE Slot operator[](int q) const { return layout.local_slot(keys[q]); }
};

// Whether sorted position q, of local slot `local`, starts the group of a real slot: `local` is not
// the sentinel sps of padding / masked entries and differs from position q - 1's slot. `slots`:
// KeySlots, or any array of the chunk's slots in sorted order.
template <typename Slots>
SDM_HOST_DEVICE bool starts_group(const Slots& slots, int q, std::int64_t local, std::int64_t sps) {
  return local != sps && (q == 0 || slots[q - 1] != local);
}

struct Geometry {
  std::int64_t P = 0, T = 0, W = 0, R = 0, G = 1, hd = 0, C = 0, sps = 0;
  std::int64_t Nt = 0;  // time steps ceil(T / C)
  std::int64_t N = 0;   // chunks Nt * P
  KeyLayout keys;
  // The streams a per-step launch covers: p in [p_first, p_first + p_count) (make_geometry: all P;
  // step_streams.hpp gives each of two CUDA streams half of them).
  std::int64_t p_first = 0, p_count = 0;

  SDM_HOST_DEVICE std::int64_t write_entries() const { return N * C * W; }
  SDM_HOST_DEVICE std::int64_t read_entries() const { return N * C * R; }
};

Geometry make_geometry(const core::WriteReadShape& shape);

// a / b for a >= 0, b > 0; in 32 bits when both fit (the same quotient, a fraction of the 64-bit
// division's work on the device).
SDM_HOST_DEVICE std::int64_t index_div(std::int64_t a, std::int64_t b) {
  constexpr std::int64_t kU32 = 0xffffffff;
  if (a <= kU32 && b <= kU32) return static_cast<std::uint32_t>(a) / static_cast<std::uint32_t>(b);
  return a / b;
}

// Where token i of chunk n sits in the inputs: stream p, time t in the stream (t >= T: padding)
// and the flat token p*T + t of the [P, T, ...] inputs.
struct EntryPlace {
  std::int64_t n, p, t, token;
};

SDM_HOST_DEVICE EntryPlace entry_place(const Geometry& geo, std::int64_t n, std::int64_t i) {
  const std::int64_t ti = index_div(n, geo.P), p = n - ti * geo.P, t = ti * geo.C + i;
  return {n, p, t, p * geo.T + t};
}

// Raw views of the op's inputs, stream-major [P, T, ...] (or [streams, ...] for decode).
struct Inputs {
  const void* k_idx = nullptr;
  const void* q_idx = nullptr;
  bool k_index64 = false;  // k_idx is int64 (else int32)
  bool q_index64 = false;  // q_idx is int64 (else int32); the two may differ
  const void* k_val = nullptr;
  const void* v = nullptr;
  const void* beta = nullptr;
  const void* g = nullptr;
  const void* q_val = nullptr;
  DType k_val_dtype = DType::f32, v_dtype = DType::f32, beta_dtype = DType::f32, g_dtype = DType::f32,
        q_val_dtype = DType::f32;
  // True when the device index check ran (validate = true, not capturing): the W write slots of
  // every token are distinct. Otherwise the kernels that read k_idx (make_entry_keys, decode_token)
  // mask a write lane that repeats an earlier lane's slot of its token (docs/spec.md §8: the first
  // lane writes), as the CPU engine does (core/repeated_writes.hpp).
  bool distinct_writes = false;
};

Inputs make_inputs(const sdm::WriteReadArgs& args);

}  // namespace sdm::cuda

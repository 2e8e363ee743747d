// saved_header.hpp - the stamp at the start of the saving forward's `saved` buffer: what the
// buffer was made for, so that the backward can refuse a buffer of another call by name
// (docs/spec.md §11).
//
// The first kSavedHeaderBytes (256) of `saved` hold a SavedHeader; the engine's own regions follow
// (their offsets, from the byte after the header, keep their alignment). The header records the
// format (magic, version), the engine whose layout follows (cpu / cuda), the call's shape and
// options that fix that layout and its contents (P, T, W, R, G, hd, S, slots_per_stream, C, bank
// dtype, effective snapshot mode, snapshot rows), and a 64-bit hash of the index values (k_idx,
// q_idx). The saving forward always writes it (CPU: the host; CUDA: one kernel, no sync); the backward checks
// it when options.validate is set (CUDA: one host sync, skipped under graph capture).
//
// The index hash is a sum mod 2^64 of one mixed term per index (index_hash_term), so any
// partition of the sum gives the same value: the CUDA kernel adds per-warp partial sums with
// integer atomics and stays deterministic.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/host_device.hpp"
#include "sdm/ops.hpp"
#include "sdm/plan.hpp"

namespace sdm::core {

inline constexpr std::size_t kSavedHeaderBytes = 256;
inline constexpr std::uint64_t kSavedMagic = 0x3156534d4453ull;  // "SDMSV1" little-endian
inline constexpr std::uint64_t kSavedVersion = 2;  // 2: the snapshot payload last, its rows recorded
inline constexpr int kSavedFields = 28;

enum class SavedEngine : std::uint64_t { cpu = 1, cuda = 2 };

struct SavedHeader {
  std::uint64_t magic = 0, version = 0, engine = 0, index_hash = 0;
  std::int64_t fields[kSavedFields] = {};
};
static_assert(sizeof(SavedHeader) == kSavedHeaderBytes, "the header fills its 256 bytes");

// The term of index number `position` (k_idx entries 0.., q_idx entries tagged by `tensor` = 1)
// of value `value`: a splitmix64 finaliser of both.
SDM_HOST_DEVICE std::uint64_t index_hash_term(std::uint64_t tensor, std::uint64_t position, std::int64_t value) {
  std::uint64_t x = (position * 2 + tensor) * 0x9e3779b97f4a7c15ull ^ static_cast<std::uint64_t>(value);
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// The header of a call of `plan` on `engine`, index_hash 0 (the engine adds the hash).
SavedHeader make_saved_header(const WriteReadPlan& plan, SavedEngine engine);

// The index hash of args.k_idx and args.q_idx (host data).
std::uint64_t index_hash_on_host(const WriteReadArgs& args);

// Throws sdm::ValueError naming `saved` unless `found` (read from the buffer) equals `expected`
// (made for this call) and `index_hash` (of this call's indices) equals found.index_hash; the
// message names the first field that differs and both values.
void check_saved_header(const SavedHeader& expected, const SavedHeader& found, std::uint64_t index_hash);

// The CPU engine's side: writes `header` with the index hash of args into host `saved`; checks
// host `saved`'s stamp against `expected` and args' indices (check_saved_header).
void stamp_saved_on_host(SavedHeader header, const WriteReadArgs& args, const TensorRef& saved);
void check_saved_on_host(const SavedHeader& expected, const WriteReadArgs& args, const TensorRef& saved);

// `saved` without its header: the engine's regions.
TensorRef saved_body(const TensorRef& saved);

}  // namespace sdm::core

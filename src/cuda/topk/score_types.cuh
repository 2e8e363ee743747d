// score_types.cuh - storage <-> float of the top-k's score dtypes on the device (the conversions of
// core/float_convert.hpp, the CPU kernels' bits), and the factor ranking keys of the register
// forward.
//
// A factor column c ranks by (score_key(value), c), larger first in both. FactorKeys packs it into
// one 32-bit key, score_key(value) with its low kBits replaced by c: bf16 and f16 values keep all
// their information above the low 16 / 13 bits of their score_key (those are all 0 or all 1 by
// sign; NaN maps to -inf's key), so their keys are exact. An f32 key keeps only the score key's
// bits above the column's (its "bucket"): exact between different buckets and between equal
// scores, but columns of one bucket with different scores rank by column alone, so the register
// forward checks its f32 lists (bucket_mixed, bucket_above) and re-ranks a factor where they may
// differ, with F32WideScores' 64-bit keys score_key << 32 | c. Every real key is > 0
// (score_key(-inf) = 0x007fffff and kBits <= 16), so 0 pads below all of them.
#pragma once

#include <cstdint>

#include "core/float_convert.hpp"
#include "core/product_key_plan.hpp"

namespace sdm::cuda::topk {

// kLowBits: the low bits of score_key(load(x)) that are the same for every x of a sign (0: none).
struct F32Scores {
  using Storage = float;
  using Key = std::uint32_t;
  static constexpr int kLowBits = 0;
  __device__ static float load(float x) { return x; }
  __device__ static float store(float x) { return x; }
  __device__ static float round(float x) { return x; }
};
struct BF16Scores {
  using Storage = std::uint16_t;
  using Key = std::uint32_t;
  static constexpr int kLowBits = 16;
  __device__ static float load(std::uint16_t x) { return core::bf16_to_float(x); }
  __device__ static std::uint16_t store(float x) { return core::bf16_from_float(x); }
  __device__ static float round(float x) { return core::round_to_bf16(x); }
};
struct F16Scores {  // f16 values are floats with 11 significant bits and exponents in [-24, 15]
  using Storage = std::uint16_t;
  using Key = std::uint32_t;
  static constexpr int kLowBits = 13;
  __device__ static float load(std::uint16_t x) { return core::f16_to_float(x); }
  __device__ static std::uint16_t store(float x) { return core::f16_from_float(x); }
  __device__ static float round(float x) { return core::round_to_f16(x); }
};
// f32 scores ranked by exact 64-bit keys: the re-rank of a factor whose 32-bit keys may misrank it.
struct F32WideScores : F32Scores {
  using Key = std::uint64_t;
};

// The factor keys of S for columns below 2^kColumnBits: the column in the low kBits of a 32-bit
// key (kBits = max(S::kLowBits, kColumnBits)), or below the score key in a 64-bit one.
template <typename S, int kColumnBits>
struct FactorKeys {
  using Key = typename S::Key;
  static constexpr bool kWide = sizeof(Key) == 8;
  static constexpr int kBits = kWide ? 16 : (S::kLowBits > kColumnBits ? S::kLowBits : kColumnBits);
  static constexpr std::uint32_t kColumnMask = (1u << kBits) - 1u;
  static constexpr bool kExact = kWide || S::kLowBits >= kColumnBits;  // else: f32 buckets of 2^kBits keys
  __device__ static Key key(float v, std::uint32_t c) {
    if constexpr (kWide) return static_cast<Key>(core::score_key(v)) << 32 | c;
    else return (core::score_key(v) & ~kColumnMask) | c;
  }
  __device__ static std::uint32_t column(Key k) { return static_cast<std::uint32_t>(k) & kColumnMask; }
};

// bf16 factor keys from the raw bits (FactorKeys<BF16Scores, b>, b <= 16: score_key's high half,
// the column in the low 16 bits). bf16_to_float(h) has the bits h << 16, whose score_key's high
// half is h ^ 0xffff for a negative h and h ^ 0x8000 otherwise: for the half in the high 16 bits
// of w, (w ^ (w >>s 31 | 0x80000000)) & 0xffff0000 (an arithmetic shift, one LOP3 for the flip, one
// for the mask and the column; the low half of a word of two: its key of w << 16). A NaN half
// (h & 0x7fff > 0x7f80) keys as -inf, kBF16NanKey (score_key(-inf) = 0x007fffff), which this
// formula does not give: bf16_nan_carry sets bit 15 / 31 of its result exactly where the low /
// high half of w is a NaN ((h & 0x7fff) + 0x7f reaches 0x8000 exactly for h & 0x7fff >= 0x7f81,
// and no sum carries into the other half), so the keys are fixed only where the OR over a lane's
// words has one of them set.
inline constexpr std::uint32_t kBF16NanKey = 0x007f0000u;
__host__ __device__ inline std::uint32_t bf16_high_key(std::uint32_t w, std::uint32_t column) {
  const std::uint32_t flip = static_cast<std::uint32_t>(static_cast<std::int32_t>(w) >> 31) | 0x80000000u;
  return ((w ^ flip) & 0xffff0000u) | column;
}
__host__ __device__ inline std::uint32_t bf16_nan_carry(std::uint32_t w) { return (w & 0x7fff7fffu) + 0x007f007fu; }

// The two checks of truncated f32 keys (buckets of mask + 1 score keys, mask = 2^b - 1, b <= 16),
// on the scores' raw bits. Within a sign, score_key is the raw bits with the sign bit set
// (x >= +0) or all bits flipped (x <= -0), and no bucket holds keys of both signs (-0's key is
// 0x7fffffff, +0's 0x80000000), so:
//   bucket_mixed(a, b): a and b are in one bucket with different keys (0 < a ^ b <= mask: the
//     key xor of two scores of a sign is their bits' xor; scores of different signs differ in
//     bit 31). Only NaNs (keyed as -inf, raw bits apart) make it differ from the keys' test:
//     two NaNs of near payloads read as mixed, which only costs a re-rank.
//   bucket_above(key, mask): the raw bits x with key < score_key(x) <= (key | mask), one range:
//     x - base < span. A NaN's bits fall in it only for +inf's bucket (false alarm, a re-rank);
//     the +0 that pads a lane's columns past the width never does (+0's own key is its bucket's
//     least).
__host__ __device__ inline bool bucket_mixed(std::uint32_t a, std::uint32_t b, std::uint32_t mask) {
  return (a ^ b) - 1u < mask;
}
struct BitsRange {
  std::uint32_t base, span;
};
__host__ __device__ inline BitsRange bucket_above(std::uint32_t key, std::uint32_t mask) {
  const std::uint32_t top = key | mask;
  if (key & 0x80000000u) return {(key & 0x7fffffffu) + 1u, top - key};
  return {~top, top - key};
}

}  // namespace sdm::cuda::topk

// snapshot_rows.cuh - the saved snapshot rows of the CUDA engine (docs/spec.md §5): where they are and
// how the backward reads one lane's piece of a row back.
//
// A saving forward stores the pre-write bank row of each write group at snapshot row
// group_first[n] + group_ordinal[n*C*W + q] (q = the sorted position of the group's first entry;
// core/snapshot_row_rule.hpp, saved/group_rows.cuh, saved/layout.hpp), in the effective mode
// ("bf16" on a bf16 bank is "none"):
//   none  hd elements of the bank dtype E, bit for bit
//   bf16  (f32 bank) hd bf16 values rnd_bf16(x)
//   fp8   hd e4m3 bytes, plus one f32 scale per row in `scales`
//   int4  ceil(hd / 2) bytes, element 2k in the high nibble of byte k, plus one f32 scale
// The codes and scales are those of the shared quantiser (core/snapshot_quant.hpp), so the CPU
// and CUDA engines store the same bytes for the same row.
//
// Decoding (load_snapshot_piece) gives the f32 values of the row the backward restores into
// the bank, each exactly representable in E: x' = rnd_E(f32(q) * f32(rnd_E(scale))) for fp8 /
// int4, the bf16 value for bf16, the element for none. restore_snapshot_piece writes them back;
// for "none" it copies the saved bits, so that restore is exact (NaN payloads included).
// Pieces follow the backward's column ownership (common/rows.cuh; the decoding section says how
// they are accessed). Encoding (the saving forward's writer, group_writer.cu) and the per-value
// codec: their sections below; codes, scales and restored values are bitwise core's.
#pragma once

#include <cstdint>

#include "cuda/common/rows.cuh"
#include "core/snapshot_quant.hpp"
#include "cuda/common/values.cuh"
#include "sdm/options.hpp"
#include "sdm/types.hpp"

namespace sdm::cuda {

struct SnapshotRows {
  void* payload = nullptr;                   // [rows, row_bytes]
  float* scales = nullptr;                   // [N*C*W] f32 (fp8 / int4; the worst case's entries, a row's
                                             // scale at the row's index), else null
  SnapshotQuant mode = SnapshotQuant::none;  // effective mode
  std::int64_t row_bytes = 0;                // core::snapshot_payload_bytes(mode, bank, hd)
  std::int64_t rows = 0;                     // rows the payload holds (the backward's; saved/group_rows.cuh)
};

// `rows` moved to row `row` in the compile-time mode kMode (decoders then keep one branch), the
// row's bytes at `payload` (the row itself, or a copy of it): row 0 of the result reads that row
// with its scale.
template <SnapshotQuant kMode>
__device__ __forceinline__ SnapshotRows snapshot_row(const SnapshotRows& rows, const void* payload, std::int64_t row) {
  SnapshotRows at = rows;
  at.mode = kMode;
  at.payload = const_cast<void*>(payload);
  if constexpr (kMode == SnapshotQuant::fp8 || kMode == SnapshotQuant::int4) at.scales += row;
  return at;
}

// A quantised row's scale and its reciprocal (fp8 / int4); unused for none / bf16.
struct SnapshotScale {
  float scale = 0.0f, reciprocal = 0.0f;
};

// ---- the per-value codec (docs/spec.md §5, steps 1, 3-5) -----------------------------------------
// The per-value codec computes core's quantiser (core/snapshot_quant.hpp: the fast quotient
// on bf16 rows, the IEEE division on f32 rows, as core::quantize_row) with the hardware's
// conversions instead of core's integer code, branch-free: rnd_bf16 by cvt.rn.bf16x2.f32, e4m3 by
// cvt.rn.satfinite.e4m3x2.f32 and cvt.rn.f16x2.e4m3x2 (sm_89+), int4 by an f32 clamp and the
// 1.5 * 2^23 rounding trick, so CPU and CUDA store the same bytes and restore the same rows.
// Bitwise the amax, codes and restored values of core::quant_amax_update, quant_encode and
// quant_restore(quant_decode(..)) (restored NaNs: NaN, payload aside), with the hardware's
// conversions in place of core's integer code: checked for every bf16 value and a set of scales by
// the GPU test "snapshot quantiser: device == host, exhaustive". The fp8 conversions need sm_89+;
// older architectures use core's functions.

// max(amax, |x|), amax unchanged for a NaN x (core::quant_amax_update): max.f32 returns the
// non-NaN operand, and |x| >= +0 leaves no sign of zero to differ.
__device__ __forceinline__ float snapshot_amax_update(float amax, float x) { return fmaxf(amax, fabsf(x)); }

// x / scale before its rounding (docs/spec.md §5, step 3), bitwise core's: on bf16 rows (kFast)
// the reciprocal multiply with one FMA correction (core::quant_quotient_fast, its test "err is 0
// or not finite" written as the two compares !(0 < |err| < inf)), on f32 rows the IEEE division.
template <bool kFast>
__device__ __forceinline__ float snapshot_quotient(float x, const SnapshotScale& s) {
  if constexpr (kFast) {
    const float q0 = __fmul_rn(x, s.reciprocal);
    const float err = fmaf(-q0, s.scale, x);
    const float magnitude = fabsf(err);
    return magnitude > 0.0f && magnitude < __int_as_float(0x7f800000) ? fmaf(err, s.reciprocal, q0) : q0;
  } else {
    return core::quant_quotient(x, s.scale);
  }
}

// rnd_bf16 of two quotients by one cvt.rn.bf16x2.f32 (bf16x2_rn: bitwise core::round_to_bf16 on
// non-NaN values; a NaN stays a NaN, and no code depends on its payload).
__device__ __forceinline__ void round_pair_to_bf16(float a, float b, float& qa, float& qb) {
  const std::uint32_t packed = bf16x2_rn(a, b);
  qa = __uint_as_float(packed << 16);
  qb = __uint_as_float(packed & 0xffff0000u);
}

// The e4m3 codes of four rounded quotients, byte k = code of q_k (core::e4m3_from_float):
// cvt.rn.satfinite.e4m3x2.f32 rounds to nearest even, gives +-448 for |q| >= 448 and for +-inf,
// and 0x7f or 0xff for a NaN; then every byte whose low 7 bits are all set (a NaN's only) becomes
// 0x7f: adding 1 to the low 7 bits of each byte carries into bit 7 exactly there.
__device__ __forceinline__ std::uint32_t e4m3x4(float q0, float q1, float q2, float q3) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 890
  return std::uint32_t{core::e4m3_from_float(q0)} | (std::uint32_t{core::e4m3_from_float(q1)} << 8) |
         (std::uint32_t{core::e4m3_from_float(q2)} << 16) | (std::uint32_t{core::e4m3_from_float(q3)} << 24);
#else
  unsigned short lo, hi;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(lo) : "f"(q1), "f"(q0));
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(hi) : "f"(q3), "f"(q2));
  const std::uint32_t w = std::uint32_t{lo} | (std::uint32_t{hi} << 16);
  const std::uint32_t nan_signs = ((w & 0x7f7f7f7fu) + 0x01010101u) & 0x80808080u;
  return w & ~nan_signs;
#endif
}

// The int4 nibble of a rounded quotient (core::int4_from_float): clamp(rint(q), -8, 7) & 0xf,
// NaN -> 0. The clamp comes first, in f32 (the bounds are integers, so it commutes with rint);
// adding 1.5 * 2^23 then rounds to the nearest even integer, held in two's complement by the low
// mantissa bits.
__device__ __forceinline__ std::uint32_t int4_nibble(float q) {
  const float clamped = fminf(fmaxf(q, -8.0f), 7.0f);
  const std::uint32_t nibble = __float_as_uint(__fadd_rn(clamped, 12582912.0f)) & 0xfu;
  return isnan(q) ? 0u : nibble;
}

// Payload bytes (fp8) of 4 consecutive row values: byte k = code of x[k].
template <bool kFast>
__device__ __forceinline__ std::uint32_t encode_fp8x4(const float* x, const SnapshotScale& s) {
  float q[4];
  round_pair_to_bf16(snapshot_quotient<kFast>(x[0], s), snapshot_quotient<kFast>(x[1], s), q[0], q[1]);
  round_pair_to_bf16(snapshot_quotient<kFast>(x[2], s), snapshot_quotient<kFast>(x[3], s), q[2], q[3]);
  return e4m3x4(q[0], q[1], q[2], q[3]);
}

// Payload bytes (int4) of 8 consecutive row values from an even column: byte k = nibble of x[2k]
// << 4 | nibble of x[2k + 1].
template <bool kFast>
__device__ __forceinline__ std::uint32_t encode_int4x8(const float* x, const SnapshotScale& s) {
  std::uint32_t w = 0u;
#pragma unroll
  for (int k = 3; k >= 0; --k) {
    float high, low;
    round_pair_to_bf16(snapshot_quotient<kFast>(x[2 * k], s), snapshot_quotient<kFast>(x[2 * k + 1], s), high, low);
    w = (w << 8) | (int4_nibble(high) << 4) | int4_nibble(low);
  }
  return w;
}

// The code of one row value (the element path): the fp8 byte or the int4 nibble.
template <SnapshotQuant kMode, bool kFast>
__device__ __forceinline__ std::uint32_t encode_one(float x, const SnapshotScale& s) {
  float q, unused;
  round_pair_to_bf16(snapshot_quotient<kFast>(x, s), 0.0f, q, unused);
  if constexpr (kMode == SnapshotQuant::fp8) {
    return e4m3x4(q, 0.0f, 0.0f, 0.0f) & 0xffu;
  } else {
    return int4_nibble(q);
  }
}

// The f32 values of the e4m3 codes in bits 0-7 and 8-15 of w (core::e4m3_to_float, exact; a NaN
// code gives a NaN): cvt.rn.f16x2.e4m3x2 (every e4m3 value is an f16 value), then f16 -> f32.
__device__ __forceinline__ void e4m3x2_values(std::uint32_t w, float& q0, float& q1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 890
  q0 = core::e4m3_to_float(static_cast<std::uint8_t>(w));
  q1 = core::e4m3_to_float(static_cast<std::uint8_t>(w >> 8));
#else
  asm("{\n\t.reg .b32 f16x2;\n\t.reg .b16 f16lo, f16hi;\n\t"
      "cvt.rn.f16x2.e4m3x2 f16x2, %2;\n\t"
      "mov.b32 {f16lo, f16hi}, f16x2;\n\t"
      "cvt.f32.f16 %0, f16lo;\n\t"
      "cvt.f32.f16 %1, f16hi;\n\t}"
      : "=f"(q0), "=f"(q1)
      : "h"(static_cast<unsigned short>(w & 0xffffu)));
#endif
}

// The f32 value of the nibble in bits 0-3 of n (core::int4_to_float): (n ^ 8) - 8, computed
// exactly as (2^23 + (n ^ 8)) - (2^23 + 8).
__device__ __forceinline__ float int4_value(std::uint32_t n) {
  return __fadd_rn(__uint_as_float(0x4b000000u | ((n & 0xfu) ^ 0x8u)), -8388616.0f);
}

// The restore factor of a row, f32(rnd_E(scale)) (core::quant_restore's).
template <typename E>
__device__ __forceinline__ float restore_factor(float scale) {
  if constexpr (sizeof(E) == 2) {
    return core::round_to_bf16(scale);
  } else {
    return scale;
  }
}

// x' = rnd_E(q * factor) of two decoded values (core::quant_restore): core's product, rounded to
// bf16 by one cvt.rn.bf16x2.f32 on a bf16 bank (a NaN product stays a NaN).
template <typename E>
__device__ __forceinline__ void restore_pair(float q0, float q1, float factor, float& x0, float& x1) {
  const float p0 = core::mul_rn(q0, factor), p1 = core::mul_rn(q1, factor);
  if constexpr (sizeof(E) == 2) {
    round_pair_to_bf16(p0, p1, x0, x1);
  } else {
    x0 = p0, x1 = p1;
  }
}

// ---- decoding (the backward) ------------------------------------------------------------------
// Pieces follow the backward's column ownership (common/rows.cuh): lane l owns the kLaneCols = 8
// consecutive columns c0 .. c0+7 (c0 = 256 s + 8 l). With kVec (hd % 8 == 0 and a 16-byte aligned
// saved buffer) a piece is one vector access: 16 or 32 bytes (none, bf16), 8 bytes (fp8) or
// 4 bytes (int4; c0 even, so the piece starts at byte c0 / 2); otherwise element by element.

// Decoded values of the piece of snapshot row `row` at column c0 (c0 < hd, c0 % 8 == 0) of a bank
// of dtype E; columns beyond hd read as 0. fp8 / int4: the piece's codes are gathered into words
// as the payload holds them (one 8- or 4-byte load with kVec), decoded two at a time.
template <bool kVec, typename E>
__device__ __forceinline__ void load_snapshot_piece(const SnapshotRows& s, std::int64_t row, std::int64_t c0,
                                                    std::int64_t hd, float (&x)[kLaneCols]) {
  const auto* base = static_cast<const unsigned char*>(s.payload) + row * s.row_bytes;
  switch (s.mode) {
    case SnapshotQuant::none: load_piece<kVec>(reinterpret_cast<const E*>(base), c0, hd, x); return;
    case SnapshotQuant::bf16: load_piece<kVec>(reinterpret_cast<const Bf16Bits*>(base), c0, hd, x); return;
    default: break;
  }
  const float factor = restore_factor<E>(s.scales[row]);
  const int valid = kVec || hd - c0 >= kLaneCols ? kLaneCols : static_cast<int>(hd - c0);
  float q[kLaneCols];
  if (s.mode == SnapshotQuant::fp8) {
    std::uint32_t w[2] = {0u, 0u};
    if constexpr (kVec) {
      const uint2 u = *reinterpret_cast<const uint2*>(base + c0);
      w[0] = u.x, w[1] = u.y;
    } else {
      for (int k = 0; k < valid; ++k) w[k / 4] |= std::uint32_t{base[c0 + k]} << (8 * (k % 4));
    }
#pragma unroll
    for (int k = 0; k < kLaneCols; k += 2) e4m3x2_values(w[k / 4] >> (8 * (k % 4)), q[k], q[k + 1]);
  } else {
    std::uint32_t w = 0u;
    if constexpr (kVec) {
      w = *reinterpret_cast<const std::uint32_t*>(base + c0 / 2);
    } else {
      // c0 is even: byte j holds columns c0 + 2j (high nibble) and c0 + 2j + 1.
      for (int j = 0; 2 * j < valid; ++j) w |= std::uint32_t{base[c0 / 2 + j]} << (8 * j);
    }
#pragma unroll
    for (int k = 0; k < kLaneCols; k += 2) {
      const std::uint32_t byte = w >> (4 * k);
      q[k] = int4_value(byte >> 4);
      q[k + 1] = int4_value(byte);
    }
  }
#pragma unroll
  for (int k = 0; k < kLaneCols; k += 2) restore_pair<E>(q[k], q[k + 1], factor, x[k], x[k + 1]);
#pragma unroll
  for (int k = 0; k < kLaneCols; ++k) x[k] = k < valid ? x[k] : 0.0f;
}

// Writes the piece back into the bank row `bank` (hd elements of E): the saved bits for "none",
// else the decoded values `x` from load_snapshot_piece (exact in E). A bf16 bank takes their top
// halves, which are their bf16 bits (core::bf16_from_float's, the NaN of a NaN code included: the
// decoded NaN is a quiet one with a zero low half).
template <bool kVec, typename E>
__device__ __forceinline__ void restore_snapshot_piece(const SnapshotRows& s, std::int64_t row, std::int64_t c0,
                                                       std::int64_t hd, const float (&x)[kLaneCols], E* bank) {
  if (s.mode == SnapshotQuant::none) {
    const auto* saved = reinterpret_cast<const E*>(static_cast<const unsigned char*>(s.payload) + row * s.row_bytes);
    copy_piece<kVec>(saved, bank, c0, hd);
  } else if constexpr (sizeof(E) == 2) {
    if constexpr (kVec) {
      std::uint32_t w[4];
#pragma unroll
      for (int k = 0; k < 4; ++k) w[k] = __byte_perm(__float_as_uint(x[2 * k]), __float_as_uint(x[2 * k + 1]), 0x7632);
      *reinterpret_cast<uint4*>(bank + c0) = make_uint4(w[0], w[1], w[2], w[3]);
    } else {
      const int valid = hd - c0 < kLaneCols ? static_cast<int>(hd - c0) : kLaneCols;
#pragma unroll
      for (int k = 0; k < kLaneCols; ++k) {
        if (k < valid) bank[c0 + k] = static_cast<Bf16Bits>(__float_as_uint(x[k]) >> 16);
      }
    }
  } else {
    store_piece<kVec>(bank, c0, hd, x);
  }
}

// ---- encoding (the saving forward) ----------------------------------------------------------
// Encoding (the saving forward's writer, group_writer.cu) follows the writer's ownership instead:
// lane l owns the kVec columns c0 = 32 kVec s + kVec l .. c0 + kVec - 1 (kVec 8 or 1) of piece s.
// The byte layout of a row does not depend on who writes it, so any ownership decodes the same.
// fp8 / int4 first need the row's scale, from the row's amax over its pre-write values: the
// forward's gather, which loads every written row piece by piece before the step's writer runs,
// takes each piece's amax (snapshot_piece_amax: the lane's columns, then a warp max) and the writer
// takes the max of a row's piece amaxes (snapshot_scale_of_parts). A max is exact and its order
// free, so that amax, and the scale from it, are core::quantize_row's whoever took which part.
// encode_snapshot_piece then stores one piece, given as loaded (PackedRow): kVec 8 -> 16 / 32 bytes
// (none: the loaded bits unchanged; bf16), 8 bytes at c0 (fp8), 4 bytes at c0 / 2 (int4); kVec 1
// -> one element, one byte (fp8), or for int4 the even lane stores the byte of columns (c0, c0 + 1)
// with the odd neighbour's nibble fetched by a shuffle (odd hd: the last low nibble is 0). A piece
// starts at an even column and ends at an even column or at hd, so no int4 byte spans two pieces:
// the pieces of a row can be encoded by different warps.

// The max of the 32 lanes' amax values (each from snapshot_amax_update, so in [+0, +inf], never a
// NaN): such floats order as their bit patterns do as unsigned integers, so one redux.sync max on
// the bits (sm_80+; a shuffle butterfly before) gives the exact max. Called by all 32 lanes; every
// lane gets it.
__device__ __forceinline__ float warp_amax(float lane_amax) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
  float amax = lane_amax;
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) {
    amax = snapshot_amax_update(amax, __shfl_xor_sync(0xffffffffu, amax, offset));
  }
  return amax;
#else
  return __uint_as_float(__reduce_max_sync(0xffffffffu, __float_as_uint(lane_amax)));
#endif
}

// The amax of one piece of a row, x = the lane's kVec elements of it as loaded (load_packed; all
// zero for columns past hd or a lane without columns: 0 leaves a max from +0 as it is), from their
// bits: an element's magnitude bits (sign cleared; bf16: the top half of an f32) are the f32 bits of
// |x|, which order as the values do; a NaN's, above the infinity's, count 0 (ignored). So the lane's
// max is bitwise the max of snapshot_amax_update over its values, in integer min / max
// instructions (bf16: two elements a 16x2 operation) and fewer registers than on unpacked floats;
// then warp_amax. Called by all 32 lanes; every lane gets it.
template <typename E, int kVec>
__device__ __forceinline__ float snapshot_piece_amax(const PackedRow<E, kVec>& x) {
  std::uint32_t top = 0u;  // the lane's max, as f32 bits
  if constexpr (sizeof(E) == 2 && kVec == 8) {
    std::uint32_t m = 0u;  // two bf16 magnitudes
#pragma unroll
    for (int k = 0; k < PackedRow<E, kVec>::kWords; ++k) {
      const std::uint32_t magnitude = x.w[k] & 0x7fff7fffu;
      m = __vmaxu2(m, magnitude & ~__vcmpgtu2(magnitude, 0x7f807f80u));
    }
    top = max(m & 0xffffu, m >> 16) << 16;
  } else {
    constexpr std::uint32_t kMagnitude = sizeof(E) == 2 ? 0x7fffu : 0x7fffffffu;
    constexpr std::uint32_t kInf = sizeof(E) == 2 ? 0x7f80u : 0x7f800000u;
#pragma unroll
    for (int k = 0; k < PackedRow<E, kVec>::kWords; ++k) {
      const std::uint32_t magnitude = x.w[k] & kMagnitude;
      top = max(top, magnitude > kInf ? 0u : magnitude);
    }
    if constexpr (sizeof(E) == 2) top <<= 16;
  }
  return warp_amax(__uint_as_float(top));
}

// The row's scale in mode kMode (fp8 / int4) from the lanes' partial amaxes (each a max of
// |values| of the row from +0): their warp max, then core::quant_scale. Called by all 32 lanes of
// a warp; every lane gets it.
template <SnapshotQuant kMode>
__device__ __forceinline__ SnapshotScale snapshot_scale_of(float lane_amax) {
  static_assert(kMode == SnapshotQuant::fp8 || kMode == SnapshotQuant::int4, "quantised modes only");
  const float amax = warp_amax(lane_amax);
  SnapshotScale s;
  s.scale = core::quant_scale(amax, core::quant_qmax(kMode));
  s.reciprocal = core::quant_reciprocal(s.scale);
  return s;
}

// The row's scale in mode kMode (fp8 / int4) from the amaxes of its `pieces` pieces (parts[0 ..
// pieces), snapshot_piece_amax's): lane l takes the max of parts l, l + 32, ..., then
// snapshot_scale_of. Called by all 32 lanes of a warp; every lane gets it.
template <SnapshotQuant kMode>
__device__ __forceinline__ SnapshotScale snapshot_scale_of_parts(const float* parts, int pieces, int lane) {
  float amax = 0.0f;
#pragma unroll 1
  for (int s = lane; s < pieces; s += 32) amax = snapshot_amax_update(amax, parts[s]);  // one pass at hd <= 8192
  return snapshot_scale_of<kMode>(amax);
}

// Stores the piece x (columns c0 .. c0 + kVec - 1 of a bank row of E, as loaded by load_packed)
// into the snapshot payload row `payload` (row_bytes bytes) in mode kMode (effective; "bf16" only
// on an f32 bank). "none" stores the loaded bits unchanged. Called by all 32 lanes of a warp (int4
// with kVec 1 shuffles); `active` = c0 < hd, and inactive lanes store nothing. kVec 8 needs
// hd % 8 == 0 and a payload aligned as the layout guarantees (saved/layout.hpp).
template <SnapshotQuant kMode, int kVec, typename E>
__device__ __forceinline__ void encode_snapshot_piece(unsigned char* payload, std::int64_t c0, bool active,
                                                      const PackedRow<E, kVec>& x, const SnapshotScale& s) {
  constexpr bool kFast = sizeof(E) == 2;  // bf16 rows: the fast quotient (core::quantize_row)
  if constexpr (kMode == SnapshotQuant::none) {
    if (!active) return;
    E* out = reinterpret_cast<E*>(payload) + c0;
    if constexpr (kVec == 8) {
#pragma unroll
      for (int k = 0; k < PackedRow<E, kVec>::kWords / 4; ++k) {
        reinterpret_cast<uint4*>(out)[k] = make_uint4(x.w[4 * k], x.w[4 * k + 1], x.w[4 * k + 2], x.w[4 * k + 3]);
      }
    } else if constexpr (sizeof(E) == 4) {
      out[0] = __uint_as_float(x.w[0]);
    } else {
      out[0] = static_cast<E>(x.w[0]);
    }
  } else {
    float v[kVec];
    unpack(x, v);
    if constexpr (kMode == SnapshotQuant::bf16) {
      static_assert(sizeof(E) == 4, "snapshot bf16 on a bf16 bank is \"none\"");
      if (active) store_row<kVec>(reinterpret_cast<Bf16Bits*>(payload) + c0, v);
    } else if constexpr (kVec == 8) {
      if (!active) return;
      if constexpr (kMode == SnapshotQuant::fp8) {
        *reinterpret_cast<uint2*>(payload + c0) = make_uint2(encode_fp8x4<kFast>(v, s), encode_fp8x4<kFast>(v + 4, s));
      } else {
        *reinterpret_cast<std::uint32_t*>(payload + c0 / 2) = encode_int4x8<kFast>(v, s);
      }
    } else {
      const std::uint32_t code = active ? encode_one<kMode, kFast>(v[0], s) : 0u;
      if constexpr (kMode == SnapshotQuant::fp8) {
        if (active) payload[c0] = static_cast<std::uint8_t>(code);
      } else {
        // Column c0 + 1 lives in the next lane (c0 even <=> lane even); an inactive neighbour
        // (c0 + 1 == hd) contributes nibble 0.
        const std::uint32_t low = __shfl_down_sync(0xffffffffu, code, 1);
        if (active && c0 % 2 == 0) payload[c0 / 2] = static_cast<std::uint8_t>((code << 4) | low);
      }
    }
  }
}

}  // namespace sdm::cuda

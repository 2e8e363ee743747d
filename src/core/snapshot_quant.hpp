// snapshot_quant.hpp - the snapshot quantisers of docs/spec.md §5, shared by CPU and CUDA.
//
// A saving forward stores each pre-write bank row (hd values of the bank dtype E, bf16 or
// f32) for the backward. Modes fp8 and int4 store it as one f32 scale plus hd e4m3 bytes or
// ceil(hd / 2) bytes of signed nibbles; the backward restores the row from them. Per row:
//   1. amax  = max |x| in f32, from +0; NaN values are ignored, +-inf kept
//   2. scale = f32(rnd_bf16(max(amax * f32(1 / qmax), 1e-12)))      qmax: fp8 448, int4 7
//   3. q     = rnd_bf16(x / scale)   (IEEE f32 division, or the reciprocal multiply with one
//              FMA correction, equal through the final byte / nibble: tested exhaustively)
//   4. fp8:  byte = e4m3(q), round to nearest even, saturating to +-448 (inf too); every NaN
//            -> 0x7f (the sign of a NaN quotient differs between x86 and CUDA). int4: nibble = clamp(rint(q), -8, 7) & 0xf with rint
//            half to even (NaN -> 0, a choice of this project); byte i = element 2i in the
//            high nibble, 2i + 1 in the low nibble; odd hd: the last low nibble is 0
//   5. decode: e4m3 S EEEE MMM -> (-1)^S 2^(E-7) (1 + M/8) (E != 0), (-1)^S M 2^-9 (E = 0),
//            S 1111 111 -> NaN, by integer bit manipulation; nibble n -> (n ^ 8) - 8;
//            restored x' = rnd_E(f32(q) * f32(rnd_E(scale)))
// Every function is a pure function of its arguments with IEEE f32 round-to-nearest
// arithmetic (no contraction: explicit __fmul_rn / __fdiv_rn on the device), so CPU and
// CUDA produce the same codes and scales (checked on an H200 for every bf16 value against 839
// scales); restored NaNs may differ in sign.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "float_convert.hpp"
#include "host_device.hpp"
#include "sdm/options.hpp"
#include "sdm/types.hpp"

namespace sdm::core {

inline constexpr float kFp8QMax = 448.0f;
inline constexpr float kInt4QMax = 7.0f;
inline constexpr float kMinQuantScale = 1e-12f;
inline constexpr std::uint8_t kE4m3MaxCode = 0x7e;  // +448
inline constexpr std::uint8_t kE4m3NanCode = 0x7f;

// ---- f32 arithmetic without contraction -------------------------------------------------

SDM_HOST_DEVICE float mul_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}

SDM_HOST_DEVICE float div_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}

SDM_HOST_DEVICE bool is_nan_bits(std::uint32_t bits) { return (bits & 0x7fffffffu) > 0x7f800000u; }
SDM_HOST_DEVICE bool is_finite_bits(std::uint32_t bits) { return (bits & 0x7f800000u) != 0x7f800000u; }

// ---- 1-2. amax and scale ----------------------------------------------------------------

// max(amax, |x|), leaving amax unchanged for a NaN x; start a row from +0.
SDM_HOST_DEVICE float quant_amax_update(float amax, float x) {
  const std::uint32_t magnitude = float_bits(x) & 0x7fffffffu;
  if (magnitude > 0x7f800000u) return amax;
  const float m = bits_float(magnitude);
  return m > amax ? m : amax;
}

SDM_HOST_DEVICE float quant_qmax(SnapshotQuant mode) { return mode == SnapshotQuant::int4 ? kInt4QMax : kFp8QMax; }

// scale = f32(rnd_bf16(max(amax * f32(1 / qmax), 1e-12))). amax = inf gives scale = inf.
SDM_HOST_DEVICE float quant_scale(float amax, float qmax) {
  const float inv_qmax = div_rn(1.0f, qmax);
  const float scaled = mul_rn(amax, inv_qmax);
  return round_to_bf16(scaled > kMinQuantScale ? scaled : kMinQuantScale);
}

// ---- 3. the quotient x / scale, before its rounding to bf16 ----------------------------

SDM_HOST_DEVICE float quant_quotient(float x, float scale) { return div_rn(x, scale); }

// The reciprocal the fast quotient multiplies by: f32(1 / scale).
SDM_HOST_DEVICE float quant_reciprocal(float scale) { return div_rn(1.0f, scale); }

// x * r corrected once with an FMA: q0 = x r, err = fma(-q0, scale, x), q = fma(err, r, q0).
// q0 is returned as is where err is 0 (q0 exact; this keeps the sign of -0 / scale) or not
// finite (x or q0 infinite, scale infinite: q0 is already the IEEE quotient's +-inf, +-0 or
// NaN). The result encodes to the same e4m3 byte / int4 nibble as x / scale for every bf16
// x (exhaustive test), though not always to the same f32.
SDM_HOST_DEVICE float quant_quotient_fast(float x, float scale, float reciprocal) {
  const float q0 = mul_rn(x, reciprocal);
  const float err = fmaf(-q0, scale, x);
  if (err == 0.0f || !is_finite_bits(float_bits(err))) return q0;
  return fmaf(err, reciprocal, q0);
}

// ---- 4-5. e4m3 -------------------------------------------------------------------------

// f32 -> e4m3 (OCP E4M3FN: bias 7, no infinities), round to nearest even, saturating
// (|q| >= 448, inf included, gives +-448). Every NaN gives 0x7f: x86 and CUDA disagree on the
// sign of NaNs that arithmetic produces (inf / inf), and the byte must not.
SDM_HOST_DEVICE std::uint8_t e4m3_from_float(float q) {
  const std::uint32_t bits = float_bits(q);
  const auto sign = static_cast<std::uint8_t>((bits >> 24) & 0x80u);
  const std::uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude > 0x7f800000u) return kE4m3NanCode;
  if (magnitude >= 0x43e00000u) return static_cast<std::uint8_t>(sign | kE4m3MaxCode);  // >= 448
  if (magnitude < 0x3c800000u) {
    // Below 2^-6: subnormal codes in units of 2^-9 (the scaling is exact; rintf is RNE).
    // The result 8 is the smallest normal code, 2^-6, so the carry needs no special case.
    return static_cast<std::uint8_t>(sign | static_cast<std::uint32_t>(rintf(bits_float(magnitude) * 512.0f)));
  }
  // Normal: keep 3 of the 23 mantissa bits, RNE on the other 20; a carry moves into the
  // exponent. Rebias the exponent from 127 to 7: (127 - 7) << 3 = 960.
  const std::uint32_t rounded = (magnitude + 0x7ffffu + ((magnitude >> 20) & 1u)) >> 20;
  return static_cast<std::uint8_t>(sign | (rounded - 960u));
}

// e4m3 -> f32 by integer bit manipulation only (exact).
SDM_HOST_DEVICE float e4m3_to_float(std::uint8_t code) {
  const std::uint32_t sign = std::uint32_t{code & 0x80u} << 24;
  const std::uint32_t exponent = (code >> 3) & 0xfu;
  std::uint32_t mantissa = code & 0x7u;
  if (exponent == 0xfu && mantissa == 0x7u) return bits_float(sign | 0x7fc00000u);
  if (exponent != 0) return bits_float(sign | ((exponent + 120u) << 23) | (mantissa << 20));
  if (mantissa == 0) return bits_float(sign);
  // Subnormal M * 2^-9 = (M / 8) * 2^-6: shift the leading one into place.
  std::uint32_t f32_exponent = 127u - 6u;
  while (mantissa < 8u) {
    mantissa <<= 1;
    --f32_exponent;
  }
  return bits_float(sign | (f32_exponent << 23) | ((mantissa & 0x7u) << 20));
}

// ---- 4-5. int4 -------------------------------------------------------------------------

// clamp(rint(q), -8, 7) & 0xf, rint half to even; NaN -> 0.
SDM_HOST_DEVICE std::uint8_t int4_from_float(float q) {
  if (is_nan_bits(float_bits(q))) return 0;
  const float r = rintf(q);
  const float clamped = r < -8.0f ? -8.0f : (r > 7.0f ? 7.0f : r);
  return static_cast<std::uint8_t>(static_cast<std::int32_t>(clamped) & 0xf);
}

SDM_HOST_DEVICE float int4_to_float(std::uint8_t nibble) {
  return static_cast<float>(static_cast<std::int32_t>((nibble & 0xfu) ^ 0x8u) - 8);
}

// ---- per value: quantise and restore ------------------------------------------------------

// The code of x in `mode` (fp8: the e4m3 byte; int4: the nibble) given its row's scale, with
// the IEEE quotient (fast = false) or the reciprocal multiply (reciprocal = quant_reciprocal).
SDM_HOST_DEVICE std::uint8_t quant_encode(SnapshotQuant mode, float x, float scale, float reciprocal, bool fast) {
  const float q = round_to_bf16(fast ? quant_quotient_fast(x, scale, reciprocal) : quant_quotient(x, scale));
  return mode == SnapshotQuant::int4 ? int4_from_float(q) : e4m3_from_float(q);
}

SDM_HOST_DEVICE float quant_decode(SnapshotQuant mode, std::uint8_t code) {
  return mode == SnapshotQuant::int4 ? int4_to_float(code) : e4m3_to_float(code);
}

// The restored value x' = rnd_E(f32(q) * f32(rnd_E(scale))), E = bank (bf16 or f32).
SDM_HOST_DEVICE float quant_restore(float q, float scale, DType bank) {
  if (bank == DType::bf16) return round_to_bf16(mul_rn(q, round_to_bf16(scale)));
  return mul_rn(q, scale);
}

// ---- sizes -----------------------------------------------------------------------------------

// The mode a snapshot row is stored in (both engines): "bf16" on a bf16 bank stores the rows as
// they are ("none").
SDM_HOST_DEVICE SnapshotQuant effective_snapshot_mode(SnapshotQuant mode, DType bank) {
  return mode == SnapshotQuant::bf16 && bank == DType::bf16 ? SnapshotQuant::none : mode;
}

// Payload bytes of one snapshot row (without the scale): none hd * sizeof(E), bf16 2 hd,
// fp8 hd, int4 ceil(hd / 2).
SDM_HOST_DEVICE std::size_t snapshot_payload_bytes(SnapshotQuant mode, DType bank, std::int64_t hd) {
  const auto n = static_cast<std::size_t>(hd);
  switch (mode) {
    case SnapshotQuant::none: return n * (bank == DType::f32 ? 4u : 2u);
    case SnapshotQuant::bf16: return n * 2u;
    case SnapshotQuant::fp8: return n;
    case SnapshotQuant::int4: return (n + 1u) / 2u;
  }
  return 0;
}

// Scale bytes of one snapshot row: one f32 for fp8 / int4, none otherwise.
SDM_HOST_DEVICE std::size_t snapshot_scale_bytes(SnapshotQuant mode) {
  return (mode == SnapshotQuant::fp8 || mode == SnapshotQuant::int4) ? sizeof(float) : 0u;
}

// ---- whole rows (fp8 / int4) ---------------------------------------------------------------

// Element c of a bank row (bf16 bits or f32) as f32.
SDM_HOST_DEVICE float bank_row_value(const void* row, DType bank, std::int64_t c) {
  if (bank == DType::bf16) return bf16_to_float(static_cast<const std::uint16_t*>(row)[c]);
  return static_cast<const float*>(row)[c];
}

// Quantises the bank row `row` (hd values of `bank`, bf16 or f32) in mode fp8 or int4:
// writes snapshot_payload_bytes(mode, bank, hd) bytes to `payload` and returns the scale.
// bf16 rows use the fast quotient, f32 rows the IEEE division (docs/spec.md §5 step 3).
SDM_HOST_DEVICE float quantize_row(SnapshotQuant mode, DType bank, const void* row, std::int64_t hd,
                                   std::uint8_t* payload) {
  float amax = 0.0f;
  for (std::int64_t c = 0; c < hd; ++c) amax = quant_amax_update(amax, bank_row_value(row, bank, c));
  const float scale = quant_scale(amax, quant_qmax(mode));
  const float reciprocal = quant_reciprocal(scale);
  const bool fast = bank == DType::bf16;
  if (mode == SnapshotQuant::fp8) {
    for (std::int64_t c = 0; c < hd; ++c) payload[c] = quant_encode(mode, bank_row_value(row, bank, c), scale, reciprocal, fast);
    return scale;
  }
  for (std::int64_t c = 0; c < hd; c += 2) {
    const std::uint8_t high = quant_encode(mode, bank_row_value(row, bank, c), scale, reciprocal, fast);
    const std::uint8_t low = c + 1 < hd ? quant_encode(mode, bank_row_value(row, bank, c + 1), scale, reciprocal, fast) : 0;
    payload[c / 2] = static_cast<std::uint8_t>((high << 4) | low);
  }
  return scale;
}

// The code of element c of a quantised row (fp8: byte c; int4: nibble c).
SDM_HOST_DEVICE std::uint8_t quantized_code(SnapshotQuant mode, const std::uint8_t* payload, std::int64_t c) {
  if (mode == SnapshotQuant::fp8) return payload[c];
  const std::uint8_t byte = payload[c / 2];
  return static_cast<std::uint8_t>((c % 2 == 0) ? (byte >> 4) : (byte & 0xfu));
}

// Restores a row quantised by quantize_row: out[c] = rnd_E(f32(q_c) * f32(rnd_E(scale))),
// f32 values that the bank dtype represents exactly.
SDM_HOST_DEVICE void dequantize_row(SnapshotQuant mode, DType bank, const std::uint8_t* payload, float scale,
                                    std::int64_t hd, float* out) {
  for (std::int64_t c = 0; c < hd; ++c) out[c] = quant_restore(quant_decode(mode, quantized_code(mode, payload, c)), scale, bank);
}

}  // namespace sdm::core

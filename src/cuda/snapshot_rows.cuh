// snapshot_rows.cuh - the saved snapshot rows of the CUDA engine (SPEC D, Z.7): where they are and
// how the backward reads one lane's piece of a row back.
//
// A saving forward stores the pre-write bank row of each write group at snapshot row
// n*C*W + q (q = the sorted position of the group's first entry, saved_layout.hpp), in the
// effective mode ("bf16" on a bf16 bank is "none"):
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
//
// Pieces follow the backward's column ownership (backward_rows.cuh): lane l owns the kLaneCols = 8
// consecutive columns c0 .. c0+7 (c0 = 256 s + 8 l). With kVec (hd % 8 == 0 and a 16-byte aligned
// saved buffer) a piece is one vector access: 16 or 32 bytes (none, bf16), 8 bytes (fp8) or
// 4 bytes (int4; c0 even, so the piece starts at byte c0 / 2); otherwise element by element.
//
// Encoding (the saving forward's writer, group_writer.cu) follows the writer's ownership instead:
// lane l owns the kVec columns c0 = 32 kVec s + kVec l .. c0 + kVec - 1 (kVec 8 or 1). The byte
// layout of a row does not depend on who writes it, so any ownership decodes the same. fp8 / int4
// first need the row's scale: each lane takes the amax of its own columns (from the row pieces
// the writer holds in registers, or by snapshot_row_scale reading the row), then
// snapshot_scale_of takes a warp max; a max is exact, so the order changes nothing and the scale
// equals core::quantize_row's. encode_snapshot_piece then stores one piece, given as loaded
// (PackedRow): kVec 8 -> 16 / 32 bytes (none: the loaded bits unchanged; bf16), 8 bytes at c0
// (fp8), 4 bytes at c0 / 2 (int4); kVec 1 -> one
// element, one byte (fp8), or for int4 the even lane stores the byte of columns (c0, c0 + 1) with
// the odd neighbour's nibble fetched by a shuffle (odd hd: the last low nibble is 0). Codes use
// core::quant_encode with the fast quotient on bf16 rows and the IEEE division on f32 rows, as
// core::quantize_row does, so CPU and CUDA store the same bytes and scales for the same row.
#pragma once

#include <cstdint>

#include "backward_rows.cuh"
#include "core/snapshot_quant.hpp"
#include "device_values.cuh"
#include "sdm/options.hpp"
#include "sdm/types.hpp"

namespace sdm::cuda {

struct SnapshotRows {
  void* payload = nullptr;                   // [rows, row_bytes]
  float* scales = nullptr;                   // [rows] f32 (fp8 / int4), else null
  SnapshotQuant mode = SnapshotQuant::none;  // effective mode
  std::int64_t row_bytes = 0;                // core::snapshot_payload_bytes(mode, bank, hd)
};

// The effective mode: "bf16" on a bf16 bank stores the rows as they are.
inline SnapshotQuant effective_snapshot_mode(SnapshotQuant mode, DType bank) {
  return mode == SnapshotQuant::bf16 && bank == DType::bf16 ? SnapshotQuant::none : mode;
}

// Decoded values of the piece of snapshot row `row` at column c0 (c0 < hd) of a bank of dtype E;
// columns beyond hd read as 0.
template <bool kVec, typename E>
__device__ __forceinline__ void load_snapshot_piece(const SnapshotRows& s, std::int64_t row, std::int64_t c0,
                                                    std::int64_t hd, float (&x)[kLaneCols]) {
  const auto* base = static_cast<const unsigned char*>(s.payload) + row * s.row_bytes;
  switch (s.mode) {
    case SnapshotQuant::none: load_piece<kVec>(reinterpret_cast<const E*>(base), c0, hd, x); return;
    case SnapshotQuant::bf16: load_piece<kVec>(reinterpret_cast<const Bf16Bits*>(base), c0, hd, x); return;
    default: break;
  }
  constexpr DType kBank = sizeof(E) == 2 ? DType::bf16 : DType::f32;
  const float scale = s.scales[row];
  const int valid = kVec || hd - c0 >= kLaneCols ? kLaneCols : static_cast<int>(hd - c0);
  std::uint8_t codes[kLaneCols] = {};
  if (s.mode == SnapshotQuant::fp8) {
    if constexpr (kVec) {
      const uint2 u = *reinterpret_cast<const uint2*>(base + c0);
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        codes[k] = static_cast<std::uint8_t>(u.x >> (8 * k));
        codes[4 + k] = static_cast<std::uint8_t>(u.y >> (8 * k));
      }
    } else {
      for (int k = 0; k < valid; ++k) codes[k] = base[c0 + k];
    }
  } else {
    if constexpr (kVec) {
      const std::uint32_t u = *reinterpret_cast<const std::uint32_t*>(base + c0 / 2);
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const std::uint32_t byte = (u >> (8 * k)) & 0xffu;
        codes[2 * k] = static_cast<std::uint8_t>(byte >> 4);
        codes[2 * k + 1] = static_cast<std::uint8_t>(byte & 0xfu);
      }
    } else {
      for (int k = 0; k < valid; ++k) codes[k] = core::quantized_code(SnapshotQuant::int4, base, c0 + k);
    }
  }
#pragma unroll
  for (int k = 0; k < kLaneCols; ++k) {
    x[k] = k < valid ? core::quant_restore(core::quant_decode(s.mode, codes[k]), scale, kBank) : 0.0f;
  }
}

// Writes the piece back into the bank row `bank` (hd elements of E): the saved bits for "none",
// else the decoded values `x` from load_snapshot_piece (exact in E).
template <bool kVec, typename E>
__device__ __forceinline__ void restore_snapshot_piece(const SnapshotRows& s, std::int64_t row, std::int64_t c0,
                                                       std::int64_t hd, const float (&x)[kLaneCols], E* bank) {
  if (s.mode == SnapshotQuant::none) {
    const auto* saved = reinterpret_cast<const E*>(static_cast<const unsigned char*>(s.payload) + row * s.row_bytes);
    copy_piece<kVec>(saved, bank, c0, hd);
  } else {
    store_piece<kVec>(bank, c0, hd, x);
  }
}

// ---- encoding (the saving forward) ----------------------------------------------------------

// A quantised row's scale and its reciprocal (fp8 / int4); unused for none / bf16.
struct SnapshotScale {
  float scale = 0.0f, reciprocal = 0.0f;
};

// The row's scale in mode kMode (fp8 / int4) from each lane's partial amax (core::quant_amax_update
// over the lane's columns, from +0): a warp max (exact in any order), then core::quant_scale.
// Called by all 32 lanes of a warp; every lane gets it.
template <SnapshotQuant kMode>
__device__ __forceinline__ SnapshotScale snapshot_scale_of(float lane_amax) {
  static_assert(kMode == SnapshotQuant::fp8 || kMode == SnapshotQuant::int4, "quantised modes only");
  float amax = lane_amax;
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) {
    amax = core::quant_amax_update(amax, __shfl_xor_sync(0xffffffffu, amax, offset));
  }
  SnapshotScale s;
  s.scale = core::quant_scale(amax, core::quant_qmax(kMode));
  s.reciprocal = core::quant_reciprocal(s.scale);
  return s;
}

// The scale of the bank row `row` (hd elements of E) in mode kMode, reading the row: for rows the
// writer does not hold in registers. Called by all 32 lanes of a warp; every lane gets it. For
// none / bf16 it reads nothing and returns zeros.
template <SnapshotQuant kMode, int kVec, typename E>
__device__ __forceinline__ SnapshotScale snapshot_row_scale(const E* row, std::int64_t hd, int lane) {
  if constexpr (kMode != SnapshotQuant::fp8 && kMode != SnapshotQuant::int4) {
    return {};
  } else {
    float amax = 0.0f;
    for (std::int64_t c0 = static_cast<std::int64_t>(lane) * kVec; c0 < hd; c0 += 32 * kVec) {
      float x[kVec];
      load_row<kVec>(row + c0, x);
#pragma unroll
      for (int k = 0; k < kVec; ++k) amax = core::quant_amax_update(amax, x[k]);
    }
    return snapshot_scale_of<kMode>(amax);
  }
}

// Stores the piece x (columns c0 .. c0 + kVec - 1 of a bank row of E, as loaded by load_packed)
// into the snapshot payload row `payload` (row_bytes bytes) in mode kMode (effective; "bf16" only
// on an f32 bank). "none" stores the loaded bits unchanged. Called by all 32 lanes of a warp (int4
// with kVec 1 shuffles); `active` = c0 < hd, and inactive lanes store nothing. kVec 8 needs
// hd % 8 == 0 and a payload aligned as the layout guarantees (saved_layout.hpp).
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
    } else {
      std::uint8_t codes[kVec];
#pragma unroll
      for (int k = 0; k < kVec; ++k) {
        codes[k] = active ? core::quant_encode(kMode, v[k], s.scale, s.reciprocal, kFast) : std::uint8_t{0};
      }
      if constexpr (kMode == SnapshotQuant::fp8) {
        if constexpr (kVec == 8) {
          std::uint32_t w[2] = {0u, 0u};
#pragma unroll
          for (int k = 0; k < 8; ++k) w[k / 4] |= std::uint32_t{codes[k]} << (8 * (k % 4));
          if (active) *reinterpret_cast<uint2*>(payload + c0) = make_uint2(w[0], w[1]);
        } else {
          if (active) payload[c0] = codes[0];
        }
      } else {
        if constexpr (kVec == 8) {
          std::uint32_t w = 0u;
#pragma unroll
          for (int k = 0; k < 4; ++k) w |= std::uint32_t((codes[2 * k] << 4) | codes[2 * k + 1]) << (8 * k);
          if (active) *reinterpret_cast<std::uint32_t*>(payload + c0 / 2) = w;
        } else {
          // Column c0 + 1 lives in the next lane (c0 even <=> lane even); an inactive neighbour
          // (c0 + 1 == hd) contributes nibble 0.
          const std::uint32_t low = __shfl_down_sync(0xffffffffu, std::uint32_t{codes[0]}, 1);
          if (active && c0 % 2 == 0) payload[c0 / 2] = static_cast<std::uint8_t>((codes[0] << 4) | low);
        }
      }
    }
  }
}

}  // namespace sdm::cuda

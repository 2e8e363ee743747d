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

}  // namespace sdm::cuda

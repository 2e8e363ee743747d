// snapshot_codec_runs.hpp - device runs of the CUDA snapshot codec (src/cuda/saved/snapshot_rows.cuh),
// for the GPU test "snapshot quantiser: device == host, exhaustive" (test_cuda_engine.cpp), which
// compares them with the host quantiser core/snapshot_quant.hpp. Host buffers in and out; each
// run allocates, launches, synchronises and copies back, throwing on a CUDA error.
#pragma once

#include <cstdint>
#include <vector>

#include "sdm/options.hpp"
#include "sdm/types.hpp"

namespace sdm::testing {

// The payload rows [scales.size(), row_bytes] of encode_snapshot_piece (the writer's encoder) in
// mode fp8 / int4 with kVec = vec (8 or 1), one row per scale: the n values of `bank` at `values`
// (bf16 bits or f32; n % 256 == 0) with that scale and its reciprocal core::quant_reciprocal.
std::vector<std::uint8_t> device_encode(SnapshotQuant mode, DType bank, const void* values, std::int64_t n,
                                        const std::vector<float>& scales, int vec);

// load_snapshot_piece (the backward's decoder) and restore_snapshot_piece over the rows
// [scales.size(), row_bytes] of `payload` (row r has scale scales[r]) of a bank row of hd columns:
// decoded [rows, hd8] f32 (hd8 = hd rounded up to 8, the piece's columns past hd included) and the
// restored bank rows [rows, hd8] (bf16 bits as std::uint16_t or f32 bits as std::uint32_t; columns
// past hd stay 0). vec: the 8-byte / 4-byte vector path (hd % 8 == 0), else element by element.
struct DecodedRows {
  std::vector<float> values;
  std::vector<std::uint32_t> restored;  // bank element bits, widened
};
DecodedRows device_decode(SnapshotQuant mode, DType bank, const std::vector<std::uint8_t>& payload,
                          std::int64_t row_bytes, std::int64_t hd, const std::vector<float>& scales, bool vec);

// The scale of each of the `count` bank rows [count, hd] at `rows` as the saving forward takes it,
// with kVec = vec (8: hd % 8 == 0, or 1): snapshot_piece_amax per piece of 32 * kVec columns (the
// gather's tile amaxes), then snapshot_scale_of_parts (the group writer's reduction).
std::vector<float> device_row_scales(SnapshotQuant mode, DType bank, const void* rows, std::int64_t count,
                                     std::int64_t hd, int vec);

// How many of the 2^32 f32 bit patterns the codec's hardware rounding to bf16 (round_pair_to_bf16)
// rounds differently from core::round_to_bf16 (bitwise; a NaN result only needs to be a NaN),
// counted on the device.
std::uint64_t device_bf16_rounding_mismatches();

}  // namespace sdm::testing

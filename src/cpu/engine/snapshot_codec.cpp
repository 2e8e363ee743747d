// snapshot_codec.cpp - encode / decode / restore of one snapshot row per mode. The fp8 and
// int4 arithmetic is the shared quantiser's (src/core/snapshot_quant.hpp, docs/spec.md §5).
#include "snapshot_codec.hpp"

#include <cstring>

#include "core/float_convert.hpp"
#include "core/snapshot_quant.hpp"
#include "row_kernels.hpp"

namespace sdm::cpu {
namespace {

std::size_t count(std::int64_t hd) { return static_cast<std::size_t>(hd); }

bool is_quantised(SnapshotQuant mode) { return mode == SnapshotQuant::fp8 || mode == SnapshotQuant::int4; }

}  // namespace

SnapshotFormat snapshot_format(DType bank, SnapshotQuant mode, std::int64_t hd) {
  SnapshotFormat f;
  f.bank = bank;
  f.hd = hd;
  f.mode = mode;
  f.row_bytes = core::snapshot_payload_bytes(f.mode, bank, hd);
  f.has_scale = core::snapshot_scale_bytes(f.mode) > 0;
  return f;
}

void encode_snapshot_row(const SnapshotFormat& format, const void* row, unsigned char* payload,
                         unsigned char* scale) {
  if (format.mode == SnapshotQuant::none) {
    std::memcpy(payload, row, format.row_bytes);
  } else if (is_quantised(format.mode)) {
    const float s = core::quantize_row(format.mode, format.bank, row, format.hd, payload);
    std::memcpy(scale, &s, sizeof s);
  } else {  // bf16 of an f32 row
    const auto* values = static_cast<const float*>(row);
    for (std::int64_t c = 0; c < format.hd; ++c) {
      const std::uint16_t bits = core::bf16_from_float(values[c]);
      std::memcpy(payload + 2 * count(c), &bits, 2);
    }
  }
}

void decode_snapshot_row(const SnapshotFormat& format, const unsigned char* payload,
                         const unsigned char* scale, float* out) {
  if (format.mode == SnapshotQuant::none && format.bank == DType::f32) {
    std::memcpy(out, payload, format.row_bytes);
  } else if (is_quantised(format.mode)) {
    float s;
    std::memcpy(&s, scale, sizeof s);
    core::dequantize_row(format.mode, format.bank, payload, s, format.hd, out);
  } else {  // bf16 payload: a bf16 bank's "none", or "bf16" of an f32 bank
    for (std::int64_t c = 0; c < format.hd; ++c) {
      std::uint16_t bits;
      std::memcpy(&bits, payload + 2 * count(c), 2);
      out[c] = core::bf16_to_float(bits);
    }
  }
}

void restore_snapshot_row(const SnapshotFormat& format, const unsigned char* payload,
                          const float* decoded, void* row) {
  if (format.mode == SnapshotQuant::none) {
    std::memcpy(row, payload, format.row_bytes);
  } else if (format.bank == DType::bf16) {
    store_row(static_cast<std::uint16_t*>(row), decoded, nullptr, format.hd);
  } else {
    std::memcpy(row, decoded, count(format.hd) * sizeof(float));
  }
}

}  // namespace sdm::cpu

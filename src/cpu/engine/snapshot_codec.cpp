// snapshot_codec.cpp - encode / decode / restore of one snapshot row per mode.
#include "snapshot_codec.hpp"

#include <cstring>
#include <string>

#include "core/float_convert.hpp"
#include "sdm/error.hpp"

namespace sdm::cpu {
namespace {

std::size_t count(std::int64_t hd) { return static_cast<std::size_t>(hd); }

void store_bank_row(DType bank, const float* in, std::int64_t hd, void* row) {
  if (bank == DType::bf16) {
    auto* bits = static_cast<std::uint16_t*>(row);
    for (std::int64_t c = 0; c < hd; ++c) bits[c] = core::bf16_from_float(in[c]);
  } else {
    std::memcpy(row, in, count(hd) * sizeof(float));
  }
}

}  // namespace

SnapshotFormat snapshot_format(DType bank, SnapshotQuant mode, std::int64_t hd) {
  SnapshotFormat f;
  f.bank = bank;
  f.hd = hd;
  f.mode = (mode == SnapshotQuant::bf16 && bank == DType::bf16) ? SnapshotQuant::none : mode;
  switch (f.mode) {
    case SnapshotQuant::none: f.row_bytes = count(hd) * dtype_size(bank); break;
    case SnapshotQuant::bf16: f.row_bytes = count(hd) * 2; break;
    case SnapshotQuant::fp8:
    case SnapshotQuant::int4:
      throw RuntimeError(std::string("snapshot_quant \"") + snapshot_quant_name(mode) +
                         "\" is not implemented by the CPU engine yet");
  }
  return f;
}

void encode_snapshot_row(const SnapshotFormat& format, const void* row, unsigned char* payload,
                         unsigned char* /*scale*/) {
  if (format.mode == SnapshotQuant::none) {
    std::memcpy(payload, row, format.row_bytes);
    return;
  }
  // bf16 of an f32 row.
  const auto* values = static_cast<const float*>(row);
  for (std::int64_t c = 0; c < format.hd; ++c) {
    const std::uint16_t bits = core::bf16_from_float(values[c]);
    std::memcpy(payload + 2 * count(c), &bits, 2);
  }
}

void decode_snapshot_row(const SnapshotFormat& format, const unsigned char* payload,
                         const unsigned char* /*scale*/, float* out) {
  if (format.mode == SnapshotQuant::none) {
    if (format.bank == DType::f32) {
      std::memcpy(out, payload, format.row_bytes);
      return;
    }
  }
  // bf16 payload (a bf16 bank's "none", or "bf16" of an f32 bank).
  for (std::int64_t c = 0; c < format.hd; ++c) {
    std::uint16_t bits;
    std::memcpy(&bits, payload + 2 * count(c), 2);
    out[c] = core::bf16_to_float(bits);
  }
}

void restore_snapshot_row(const SnapshotFormat& format, const unsigned char* payload,
                          const float* decoded, void* row) {
  if (format.mode == SnapshotQuant::none) {
    std::memcpy(row, payload, format.row_bytes);
    return;
  }
  store_bank_row(format.bank, decoded, format.hd, row);
}

}  // namespace sdm::cpu

// snapshot_codec.hpp - one pre-write bank row in and out of the saved snapshot (docs/spec.md §5).
//
// Modes (the effective mode: "bf16" on a bf16 bank is "none"):
//   none  hd elements of the bank dtype, copied bit for bit; decoding is exact
//   bf16  f32 bank only: hd bf16 values, each rnd_bf16 of the f32 element; decoded exactly
//         to f32
//   fp8   hd e4m3 bytes + one f32 scale      } the shared quantiser of docs/spec.md §5
//   int4  ceil(hd/2) bytes of two nibbles    } (src/core/snapshot_quant.hpp); decoded to
//         + one f32 scale                    } rnd_E(f32(q) * f32(rnd_E(scale)))
// Decoding yields the f32 values of the row the backward restores into the bank (already
// representable in the bank dtype). Readings never depend on the mode: the forward's writer
// uses the exact bank rows; only the backward sees decoded rows.
#pragma once

#include <cstddef>
#include <cstdint>

#include "sdm/options.hpp"
#include "sdm/types.hpp"

namespace sdm::cpu {

struct SnapshotFormat {
  SnapshotQuant mode = SnapshotQuant::none;  // effective mode
  DType bank = DType::f32;
  std::int64_t hd = 0;
  std::size_t row_bytes = 0;  // payload bytes per row
  bool has_scale = false;     // one f32 scale per row (fp8 / int4)
};

// mode: the effective snapshot mode (the plan's).
SnapshotFormat snapshot_format(DType bank, SnapshotQuant mode, std::int64_t hd);

// Encodes the bank row `row` (hd elements of format.bank) into `payload` (row_bytes) and,
// when format.has_scale, its scale into `scale` (4 bytes, f32).
void encode_snapshot_row(const SnapshotFormat& format, const void* row, unsigned char* payload,
                         unsigned char* scale);

// Decodes a snapshot row into f32 values of the bank dtype (hd values).
void decode_snapshot_row(const SnapshotFormat& format, const unsigned char* payload,
                         const unsigned char* scale, float* out);

// Writes a snapshot row back into the bank row `row` (hd elements of format.bank), given
// its payload and its decoded values (decode_snapshot_row). For "none" this copies the
// saved bytes, so the restore is bit-exact (NaN payloads included); otherwise it stores the
// decoded values, which the bank dtype represents exactly.
void restore_snapshot_row(const SnapshotFormat& format, const unsigned char* payload,
                          const float* decoded, void* row);

}  // namespace sdm::cpu

// sdm/options.hpp - options of the chunked op and of the decode step.
//
// Limits (docs/spec.md §7): chunk_size, and the widths W (k_idx.shape[-1]) and R
// (q_idx.shape[-1]) of every call, are in 1..kMaxWidth / kMaxChunk; bank rows <= kMaxBankRows;
// no tensor or working array of a call above kMaxElements elements. Violations raise
// sdm::ValueError naming the argument. These constants and kDefaultChunk are the only copy:
// the torch schemas and the Python package read them (torch.ops.sdm.limits()).
#pragma once

#include <cstdint>
#include <string_view>

namespace sdm {

inline constexpr std::int64_t kMaxWidth = 256;                              // W, R
inline constexpr std::int64_t kMaxChunk = 256;                              // chunk_size
inline constexpr std::int64_t kMaxBankRows = (std::int64_t{1} << 31) - 1;   // memory.shape[0]
// 2^52 elements is far beyond any memory; the bound lets every engine form its byte sizes and
// offsets (elements x <= 16 bytes, summed over a few dozen regions) in 64 bits without a wrap.
inline constexpr std::int64_t kMaxElements = std::int64_t{1} << 52;
inline constexpr std::int64_t kDefaultChunk = 64;                           // chunk_size's default

// How the saving forward stores the pre-write rows that the backward restores (docs/spec.md §5).
enum class SnapshotQuant : std::uint8_t { none, bf16, fp8, int4 };

const char* snapshot_quant_name(SnapshotQuant mode);
// Parses "none" / "bf16" / "fp8" / "int4"; throws sdm::ValueError naming `snapshot_quant`.
SnapshotQuant parse_snapshot_quant(std::string_view name);

struct WriteReadOptions {
  std::int64_t slots_per_stream = 0;  // rows owned by one stream (required, >= 1)
  std::int64_t chunk_size = kDefaultChunk;  // C in 1..kMaxChunk; clamped to T
  SnapshotQuant snapshot_quant = SnapshotQuant::none;
  bool grad_bank_fp32 = false;        // bf16 bank: keep bank-gradient rows in f32 (docs/spec.md §4)
  std::int64_t snapshot_rows = 0;     // saving forward and backward: the snapshot rows `saved` holds, one per
                                      // write group (write_groups_count); 0: the worst case, one per write
                                      // entry N*C*W (docs/spec.md §4); the backward takes the forward's value
  bool validate = true;               // check index ranges and distinct write slots (docs/spec.md §8);
                                      // false: out-of-range entries and write lanes repeating an
                                      // earlier lane's slot in their token are masked (no write)
  bool restore_bank = true;           // write_read_backward only: true: args.memory (the final bank
                                      // on entry) leaves as the initial bank (bit for bit with snapshot
                                      // "none"); false: it is only read and keeps the final bank
  int num_threads = 0;                // CPU threads; 0 = $SDM_NUM_THREADS, else the hardware's
  void* cuda_stream = nullptr;        // CUDA banks: the cudaStream_t to run on (nullptr: the legacy
                                      // default stream); ignored on the CPU. void*: no CUDA header needed.
};

struct DecodeOptions {
  // Rows owned by one stream. 0: indices are only checked against the bank's rows;
  // >= 1: stream p's indices must lie in [p * slots_per_stream, (p + 1) * slots_per_stream).
  std::int64_t slots_per_stream = 0;
  bool validate = true;         // as WriteReadOptions::validate
  void* cuda_stream = nullptr;  // as WriteReadOptions::cuda_stream
};

}  // namespace sdm

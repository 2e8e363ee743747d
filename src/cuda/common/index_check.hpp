// index_check.hpp - the device-side index check of docs/spec.md §8 (validate=True).
//
// One kernel scans every token's k_idx and q_idx, then one host sync reads back the first
// violation in (stream, token, tensor, lane) order, with the same precedence and message as
// the host check (core/validate_indices.cpp): k_idx out of range, then k_idx repeats within the
// token, then q_idx out of range. Throws sdm::ValueError naming the tensor, stream, token
// (absent for the decode step) and lane. Skipped by the callers while the stream is being
// captured into a CUDA graph (no syncs there); then out-of-range entries are masked by the
// kernels instead.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include "cuda/common/geometry.hpp"

namespace sdm::cuda {

struct IndexCheck {
  std::int64_t streams = 0, tokens_per_stream = 0, W = 0, R = 0;
  std::int64_t slots_per_stream = 0;  // 0: rows [0, bank_rows) for every stream
  std::int64_t bank_rows = 0;
  bool name_token = true;             // false for the decode step
};

// `scratch`: one device word (unsigned long long) of workspace. `also` (optional): a device word
// that work already queued on `stream` writes, copied into *also_host in the same sync (read only
// when no violation is thrown).
void check_indices_on_device(const Inputs& in, const IndexCheck& check, unsigned long long* scratch,
                             cudaStream_t stream, const std::int64_t* also = nullptr,
                             std::int64_t* also_host = nullptr);

}  // namespace sdm::cuda

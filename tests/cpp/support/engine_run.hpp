// engine_run.hpp - runs the chunked op (engine and float64 reference) on a Problem through
// the public entry points, on copies of the bank, and returns owned results. Used by the
// engine tests (tests/cpp/engine).
#pragma once

#include <cstdint>

#include "host_tensor.hpp"
#include "problem.hpp"
#include "sdm/ops.hpp"
#include "sdm/reference.hpp"

namespace sdm::testing {

struct ForwardRun {
  HostTensor readings;    // [P, T, hd]
  HostTensor final_bank;  // [S, hd]
  HostTensor saved;       // u8, only for a saving run
};

// The six gradients of the op, shaped like their inputs.
struct GradRun {
  HostTensor memory, k_val, v, beta, g, q_val;
  HostTensor bank_after;  // the working bank after the engine backward (engine only)
};

// Engine no-grad forward (sdm::write_read_forward) on a copy of pb.memory.
ForwardRun engine_forward(const Problem& pb, const WriteReadOptions& options);

// Engine saving forward (sdm::write_read_forward_saving) on a copy of pb.memory.
ForwardRun engine_forward_saving(const Problem& pb, const WriteReadOptions& options);

// Engine backward of a saving run: the working bank starts as run.final_bank (copied). Every
// gradient is requested; grad_memory_dtype picks the bank gradient's dtype. grad_final_bank
// may be an undefined HostTensor (absent).
GradRun engine_backward(const Problem& pb, const ForwardRun& run, const HostTensor& grad_readings,
                        const HostTensor& grad_final_bank, const WriteReadOptions& options,
                        DType grad_memory_dtype);

// Float64 reference forward: readings in f64, final bank in the bank dtype.
ForwardRun reference_forward(const Problem& pb, const WriteReadOptions& options);

// Float64 reference gradients (all f64).
GradRun reference_backward(const Problem& pb, const HostTensor& grad_readings, const HostTensor& grad_final_bank,
                           const WriteReadOptions& options);

// A random f32 tensor (normal * scale) for upstream gradients.
HostTensor random_tensor(std::vector<std::int64_t> sizes, double scale, std::uint64_t seed);

}  // namespace sdm::testing

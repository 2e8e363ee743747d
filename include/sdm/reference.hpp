// sdm/reference.hpp - the float64 oracle (docs/spec.md §1): the token-by-token recurrence,
// written for clarity and never optimised. Every other path is tested against it.
//
// The bank may be bf16, f32 or f64 (the engines take bf16 / f32; an f64 bank makes the
// reference an exact oracle for finite differences and golden vectors). Inputs take any
// float dtype; as in the engines (docs/spec.md §1), k_val, v and q_val are first rounded to the
// bank dtype and beta and g to f32 — except on an f64 bank, where nothing is rounded. All
// arithmetic is float64. Arguments are validated as for the engines; with
// options.validate == false an out-of-range index is masked (no write, contributes 0).
#pragma once

#include "sdm/ops.hpp"

namespace sdm::reference {

// Runs the recurrence over all T tokens in float64; writes `readings` (any float dtype,
// rounded once from float64) and stores the final bank into `memory` (rounded once).
// `options.chunk_size` is validated but does not change the result.
void write_read_forward(const WriteReadArgs& args, const TensorRef& readings,
                        const WriteReadOptions& options);

// Exact reverse-mode gradients of the recurrence, token by token, for the loss
// L = <readings, grad_readings> + <final bank, grad_final_bank> (grad_final_bank optional).
// `args.memory` is the INITIAL bank and is not modified (the forward is recomputed inside).
// Writes every defined tensor of `grads` (any float dtype, rounded once from float64).
void write_read_backward(const WriteReadArgs& args, const TensorRef& grad_readings,
                         const TensorRef& grad_final_bank, const WriteReadGrads& grads,
                         const WriteReadOptions& options);

// One token per stream in float64 (docs/spec.md §9); the written rows are rounded to the bank
// dtype once, readings rounded once.
void decode_step(const WriteReadArgs& args, const TensorRef& readings, const DecodeOptions& options);

}  // namespace sdm::reference

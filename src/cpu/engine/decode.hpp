// decode.hpp - the CPU decode step with an explicit worker count (decode.cpp).
//
// sdm::cpu::decode_step (engine.hpp) picks the worker count from the size of the step and
// calls this; tests call it directly to check that every split gives the same bits.
#pragma once

#include "core/validate.hpp"
#include "sdm/ops.hpp"

namespace sdm::cpu {

// Contract of sdm::decode_step (include/sdm/ops.hpp) on validated arguments, run by at most
// `threads` workers of the pool (>= 1). Results do not depend on `threads`.
void decode_step_on_threads(const WriteReadArgs& args, const TensorRef& readings,
                            const core::DecodeShape& shape, const DecodeOptions& options, int threads);

}  // namespace sdm::cpu

// slots_staged.hpp - which kernel runs the backward's slot side (backward.hpp launch_slot_side):
// the staged walk (slots_staged.cu, the chunk's token rows of a column step in shared memory)
// where its rows fit one CTA, else the per-position kernel (slots.cu). Both give the same bits.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include "cuda/backward/backward.hpp"
#include "cuda/backward/slot_split.hpp"

namespace sdm::cuda {

// Whether launch_slot_side takes the staged walk: it fits and slot_walk() does not forbid it.
bool use_staged_slot_walk(const Geometry& geo);
void launch_staged_slot_side(const Geometry& geo, const Inputs& in, const Phase1Buffers& p1,
                             const BackwardBuffers& bb, std::int64_t ti, cudaStream_t stream);

}  // namespace sdm::cuda

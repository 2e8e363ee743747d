// alignment.hpp - byte alignment in the CUDA engine's host code: sizes rounded up to whole
// 256-byte blocks (each workspace piece, workspace.hpp, and each region of the saved buffer,
// saved_layout.cu, starts at a multiple of 256 bytes).
#pragma once

#include <cstddef>

namespace sdm::cuda {

// `bytes` rounded up to a multiple of 256.
constexpr std::size_t align256(std::size_t bytes) { return (bytes + 255) / 256 * 256; }

}  // namespace sdm::cuda

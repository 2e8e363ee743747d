// alignment.hpp - byte alignment in the CUDA engine: sizes rounded up to whole 256-byte blocks
// (each workspace piece, workspace.hpp, and each region of the saved buffer, saved/layout.cu,
// starts at a multiple of 256 bytes), and whether a pointer allows 16-byte vector accesses.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/host_device.hpp"

namespace sdm::cuda {

// `bytes` rounded up to a multiple of 256.
constexpr std::size_t align256(std::size_t bytes) { return (bytes + 255) / 256 * 256; }

// Whether p is 16-byte aligned: float4 / uint4 loads and stores from p are allowed.
SDM_HOST_DEVICE bool aligned16(const void* p) { return (reinterpret_cast<std::uintptr_t>(p) & 15u) == 0; }

}  // namespace sdm::cuda

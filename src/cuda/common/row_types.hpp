// row_types.hpp - the element types of a bank row on the device: `float` (f32 bank) or
// Bf16Bits, the raw bits of a bf16 value (bf16 bank; converted by common/values.cuh).
#pragma once

#include <cstdint>

namespace sdm::cuda {

using Bf16Bits = std::uint16_t;

}  // namespace sdm::cuda

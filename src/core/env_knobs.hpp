// env_knobs.hpp - the engine's knobs read from the environment: SDM_NUM_THREADS (the CPU engine's
// threads) and the CUDA engine's A/B and test knobs (SDM_CUDA_*, SDM_TOPK_BWD; docs/cuda.md).
//
// A knob is a value among named choices or a count. Each user reads its knob once per process.
// A value the knob does not take is refused with sdm::ValueError naming the variable and what it
// takes, so a misspelt knob never silently measures or tests the default.
#pragma once

#include <cstdint>
#include <initializer_list>

namespace sdm::core {

// -1 when `variable` is unset, else the index of its value in `choices` (an empty value is refused).
int env_choice(const char* variable, std::initializer_list<const char*> choices);

// 0 when `variable` is unset, else its value: digits only, an integer in [1, most].
std::int64_t env_count(const char* variable, std::int64_t most);

}  // namespace sdm::core

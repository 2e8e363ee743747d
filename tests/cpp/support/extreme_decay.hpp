// extreme_decay.hpp - problems with extreme log-decays (g = -inf and finite g far below the
// normal range) for the extreme-decay tests of the CPU engine (tests/cpp/engine/
// test_extreme_decay.cpp) and the CUDA engine (tests/gpu/test_cuda_backward.cpp).
#pragma once

#include <cstdint>

#include "problem.hpp"

namespace sdm::testing {

// Where the extreme values go (the other g keep make_problem's normal values).
enum class DecayPattern {
  edges,      // g = -inf at the first and last token of the first two chunks, of the last chunk
              // and of the sequence
  mixed,      // a quarter of the g entries drawn from {-1e5, -1e6, -1e10, -1e30, -inf}
  each_1e5,   // every 7th token (from token 3 + stream) -1e5
  each_1e10,  // the same with -1e10
  each_inf,   // the same with -inf
};

inline constexpr DecayPattern kDecayPatterns[] = {DecayPattern::edges, DecayPattern::mixed, DecayPattern::each_1e5,
                                                  DecayPattern::each_1e10, DecayPattern::each_inf};

const char* decay_pattern_name(DecayPattern pattern);

// Overwrites pb.g with the pattern's extreme values for chunk size C (deterministic: seeded by
// pb.spec.seed).
void place_extreme_decays(Problem& pb, DecayPattern pattern, std::int64_t C);

// True when every element of t is finite.
bool all_finite(const HostTensor& t);

}  // namespace sdm::testing

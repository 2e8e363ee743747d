// row_math.hpp - the f32 dot product of the chunked engine, with a fixed operation order
// (the engine's determinism rests on it: same inputs, same bits, any thread count). The
// other row kernels are in row_kernels.hpp.
//
//   dot(x, y, n):       sum_c x[c] * y[c]                       see below
//
// dot keeps kDotLanes partial sums, lane l accumulating columns c = l (mod kDotLanes) in
// ascending c, then combines the lanes by a fixed pairwise tree. The order depends only on
// n, never on threads or on the caller's column split; the lanes also make the sum more
// accurate than one running sum (error ~ n / kDotLanes ulps instead of n) and vectorise.
#pragma once

#include <cstdint>

namespace sdm::cpu {

inline constexpr int kDotLanes = 8;

inline float dot(const float* x, const float* y, std::int64_t n) {
  float lane[kDotLanes] = {};
  std::int64_t c = 0;
  for (; c + kDotLanes <= n; c += kDotLanes) {
    for (int l = 0; l < kDotLanes; ++l) lane[l] += x[c + l] * y[c + l];
  }
  for (int l = 0; c < n; ++c, ++l) lane[l] += x[c] * y[c];
  return ((lane[0] + lane[4]) + (lane[2] + lane[6])) + ((lane[1] + lane[5]) + (lane[3] + lane[7]));
}

}  // namespace sdm::cpu

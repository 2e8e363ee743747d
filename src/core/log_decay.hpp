// log_decay.hpp - how the chunked engines (CPU and CUDA) turn log-decays gamma into decay
// factors, exactly for any gamma in [-inf, 0] (docs/numerics.md, "Decay factors").
//
// 1. Floor: gamma is used as max(gamma, kMinLogDecay) (kMinLogDecay = -128; NaN stays NaN).
//    Every factor exp(sum of gamma over a span) whose span holds a floored entry is then
//    expf(x) with x <= -128 (the other gammas are <= 0), which is +0 in f32 (expf(x) = 0 for
//    x < -103.98), and the exact factor, below exp(-128) ~ 2.6e-56, rounds to 0 in f32 as well:
//    the floor changes no factor, and no gradient (d/dgamma of a factor is the factor: 0). It
//    removes -inf - (-inf) = NaN and keeps every per-slot sum within C * 128 <= 32768 in
//    magnitude.
// 2. Sums in float64: the per-slot cumulative log-decays L, Lq and Lambda of a chunk are summed
//    in float64, from +0 in token order. Float64 sums of at most 256 floored f32 terms are exact
//    to ~2^-53 * 32768 * 256 ~ 1e-9, so every difference of two of them (the span sums of A, QK,
//    the post-decay Lambda - L and their gradients) is the exact span sum to f32 precision,
//    whatever the magnitude of the sums around it. (In f32 a difference of two sums of magnitude
//    M loses ~M * 6e-8 absolute: 6e-3 at M = 1e5.)
// 3. Factors: every decay factor is expf(f32(x)) of an exponent x formed in float64 (a sum, or
//    a difference of two sums) and rounded once to f32; no factor is a product exp(a) * exp(-b).
#pragma once

#include <cmath>

#include "host_device.hpp"

namespace sdm::core {

inline constexpr float kMinLogDecay = -128.0f;

// max(gamma, kMinLogDecay), NaN preserved.
SDM_HOST_DEVICE float floor_log_decay(float gamma) { return gamma < kMinLogDecay ? kMinLogDecay : gamma; }

// The decay factor exp(x) of a float64 exponent, rounded once to f32 first (x = +-0 gives 1).
SDM_HOST_DEVICE float decay_factor(double x) {
  const float xf = static_cast<float>(x);
#if defined(__CUDA_ARCH__)
  return expf(xf);
#else
  return xf == 0.0f ? 1.0f : std::exp(xf);
#endif
}

}  // namespace sdm::core

// extreme_decay.cpp - see extreme_decay.hpp.
#include "extreme_decay.hpp"

#include <cmath>
#include <limits>
#include <random>

namespace sdm::testing {

const char* decay_pattern_name(DecayPattern pattern) {
  switch (pattern) {
    case DecayPattern::edges: return "edges";
    case DecayPattern::mixed: return "mixed";
    case DecayPattern::each_1e5: return "each_1e5";
    case DecayPattern::each_1e10: return "each_1e10";
    case DecayPattern::each_inf: return "each_inf";
  }
  return "?";
}

void place_extreme_decays(Problem& pb, DecayPattern pattern, std::int64_t C) {
  const ProblemSpec& s = pb.spec;
  constexpr double kInf = std::numeric_limits<double>::infinity();
  std::mt19937_64 rng(s.seed + 1000);
  const double extremes[] = {-1e5, -1e6, -1e10, -1e30, -kInf};
  auto set_token = [&](std::int64_t p, std::int64_t t, double value) {
    for (std::int64_t w = 0; w < s.G; ++w) pb.g.set((p * s.T + t) * s.G + w, value);
  };
  for (std::int64_t p = 0; p < s.P; ++p) {
    switch (pattern) {
      case DecayPattern::edges: {
        const std::int64_t last_chunk = (s.T - 1) / C * C;
        for (std::int64_t t : {std::int64_t{0}, C - 1, C, 2 * C - 1, last_chunk, s.T - 1}) {
          if (t < s.T) set_token(p, t, -kInf);
        }
        break;
      }
      case DecayPattern::mixed:
        for (std::int64_t t = 0; t < s.T; ++t) {
          for (std::int64_t w = 0; w < s.G; ++w) {
            if (rng() % 4 == 0) pb.g.set((p * s.T + t) * s.G + w, extremes[rng() % 5]);
          }
        }
        break;
      case DecayPattern::each_1e5:
      case DecayPattern::each_1e10:
      case DecayPattern::each_inf: {
        const double value =
            pattern == DecayPattern::each_1e5 ? -1e5 : pattern == DecayPattern::each_1e10 ? -1e10 : -kInf;
        for (std::int64_t t = 3 + p; t < s.T; t += 7) set_token(p, t, value);
        break;
      }
    }
  }
}

bool all_finite(const HostTensor& t) {
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    if (!std::isfinite(t.get(i))) return false;
  }
  return true;
}

}  // namespace sdm::testing

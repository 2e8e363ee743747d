// write_groups.cpp - masked writes and the host count of write groups (write_groups.hpp).
#include "write_groups.hpp"

#include <algorithm>
#include <set>

namespace sdm::testing {

void mask_some_writes(Problem& pb) {
  const ProblemSpec& s = pb.spec;
  for (std::int64_t p = 0; p < s.P; ++p) {
    for (std::int64_t t = 0; t < s.T; ++t) {
      const std::int64_t token = p * s.T + t;
      if (t % 3 == 0) pb.k_idx.set(token * s.W + 1, static_cast<double>(pb.bank_rows() - 1 - p));
      if (t % 4 == 1) pb.k_idx.set(token * s.W + s.W - 1, pb.k_idx.get(token * s.W));
    }
  }
}

std::int64_t distinct_rows_per_chunk(const Problem& pb, std::int64_t chunk) {
  const ProblemSpec& s = pb.spec;
  std::int64_t total = 0;
  for (std::int64_t p = 0; p < s.P; ++p) {
    for (std::int64_t t0 = 0; t0 < s.T; t0 += chunk) {
      std::set<std::int64_t> rows;
      for (std::int64_t t = t0; t < std::min(s.T, t0 + chunk); ++t) {
        for (std::int64_t w = 0; w < s.W; ++w) {
          const auto row = static_cast<std::int64_t>(pb.k_idx.get((p * s.T + t) * s.W + w));
          if (row >= p * s.slots_per_stream && row < (p + 1) * s.slots_per_stream) rows.insert(row);
        }
      }
      total += static_cast<std::int64_t>(rows.size());
    }
  }
  return total;
}

std::int64_t worst_rows(const Problem& pb, std::int64_t chunk) {
  const std::int64_t C = std::min(chunk, pb.spec.T);
  return pb.spec.P * ((pb.spec.T + C - 1) / C) * C * pb.spec.W;
}

}  // namespace sdm::testing

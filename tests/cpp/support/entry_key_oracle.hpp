// entry_key_oracle.hpp - the CUDA engine's write and read keys entry by entry, as the two kernels
// computed them before one kernel built both (make_write_keys of forward/phase1.cu, make_read_keys
// of backward/reads.cu, commit 67d0cb6), and random indices to feed them. The oracle of the host
// replay (tests/cpp/cuda_host/test_entry_key_rules.cpp) and of the GPU test
// (tests/gpu/test_entry_keys.cu), and the cases both run; header-only, plain C++
// (src/cuda/common/geometry.hpp's types).
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "cuda/common/geometry.hpp"

namespace sdm::testing {

// The sizes of one case (C is clamped to T, as the op does).
struct KeyShape {
  std::int64_t P, T, C, W, R, sps;
};

// The cases of both tests: W 1..256 (a token's lanes inside a warp, across warps, straddling warps)
// on five shapes (T % C != 0, C 1..256, sps 1..100: repeats frequent), then R 1..256.
inline std::vector<KeyShape> entry_key_shapes() {
  const std::int64_t widths[] = {1, 2, 3, 7, 16, 31, 32, 33, 48, 64, 100, 128, 255, 256};
  std::vector<KeyShape> shapes;
  for (const std::int64_t W : widths) {
    for (const KeyShape& s : {KeyShape{1, 5, 5, W, 1, 1}, KeyShape{2, 37, 8, W, 7, 5}, KeyShape{3, 100, 64, W, 33, 100},
                              KeyShape{2, 70, 7, W, 64, 3}, KeyShape{1, 300, 256, W, 256, 50}}) {
      shapes.push_back(s);
    }
  }
  for (const std::int64_t R : widths) shapes.push_back({2, 40, 16, 5, R, 4});
  return shapes;
}

struct OracleKeys {
  std::vector<std::uint64_t> keys;  // entry order
  std::vector<std::int32_t> slots;  // k_slot (writes)
};

// The write keys (layout geo.keys) and k_slot of every entry; k_idx [P, T, W].
inline OracleKeys oracle_write_keys(const cuda::Geometry& geo, const std::vector<std::int64_t>& k_idx,
                                    bool distinct_writes) {
  OracleKeys out{std::vector<std::uint64_t>(static_cast<std::size_t>(geo.write_entries())),
                 std::vector<std::int32_t>(static_cast<std::size_t>(geo.write_entries()))};
  for (std::int64_t n = 0; n < geo.N; ++n) {
    for (std::int64_t i = 0; i < geo.C; ++i) {
      for (std::int64_t w = 0; w < geo.W; ++w) {
        const std::int64_t e = n * geo.C * geo.W + i * geo.W + w;
        const std::int64_t p = n % geo.P, ti = n / geo.P, t = ti * geo.C + i;
        std::int64_t local = geo.sps;
        std::int32_t slot = -1;
        if (t < geo.T) {
          const std::int64_t lane0 = (p * geo.T + t) * geo.W;
          const std::int64_t idx = k_idx[static_cast<std::size_t>(lane0 + w)];
          const std::int64_t l = idx - p * geo.sps;
          bool repeat = false;
          if (!distinct_writes) {
            for (std::int64_t e2 = 0; e2 < w; ++e2) repeat |= k_idx[static_cast<std::size_t>(lane0 + e2)] == idx;
          }
          if (l >= 0 && l < geo.sps && !repeat) {
            local = l;
            slot = static_cast<std::int32_t>(idx);
          }
        }
        out.keys[static_cast<std::size_t>(e)] = geo.keys.encode(n, local, i, w);
        out.slots[static_cast<std::size_t>(e)] = slot;
      }
    }
  }
  return out;
}

// The read keys (layout with R lanes) of every entry from Phase 1's q_slot [N, C, R].
inline std::vector<std::uint64_t> oracle_read_keys(const cuda::Geometry& geo, const cuda::KeyLayout& layout,
                                                   const std::vector<std::int32_t>& q_slot) {
  std::vector<std::uint64_t> keys(static_cast<std::size_t>(geo.read_entries()));
  for (std::int64_t n = 0; n < geo.N; ++n) {
    for (std::int64_t i = 0; i < geo.C; ++i) {
      for (std::int64_t r = 0; r < geo.R; ++r) {
        const std::int64_t e = n * geo.C * geo.R + i * geo.R + r;
        const std::int32_t slot = q_slot[static_cast<std::size_t>(e)];
        const std::int64_t local = slot < 0 ? geo.sps : slot - (n % geo.P) * geo.sps;
        keys[static_cast<std::size_t>(e)] = layout.encode(n, local, i, r);
      }
    }
  }
  return keys;
}

// Indices [P, T, lanes]: mostly inside the token's stream (repeating within a token when sps is
// small), some in other streams, negative or past the bank, some far away (+-2^40, or +-2^30 when
// they must fit int32).
inline std::vector<std::int64_t> oracle_indices(const cuda::Geometry& geo, std::int64_t lanes, bool fit_i32,
                                                std::mt19937_64& rng) {
  std::vector<std::int64_t> idx(static_cast<std::size_t>(geo.P * geo.T * lanes));
  std::uniform_int_distribution<std::int64_t> in_stream(0, geo.sps - 1), any_row(-3, geo.P * geo.sps + 3);
  const std::int64_t far = std::int64_t{1} << (fit_i32 ? 30 : 40);
  for (std::int64_t p = 0; p < geo.P; ++p) {
    for (std::int64_t k = 0; k < geo.T * lanes; ++k) {
      const std::uint64_t pick = rng() % 16;
      std::int64_t v = p * geo.sps + in_stream(rng);
      if (pick == 0) v = any_row(rng);
      if (pick == 1) v = rng() % 2 == 0 ? far : -far;
      idx[static_cast<std::size_t>(p * geo.T * lanes + k)] = v;
    }
  }
  return idx;
}

// Phase 1's q_slot [N, C, R] as lookup_reads stores it: the row of a real token's read inside its
// stream's rows, -1 otherwise.
inline std::vector<std::int32_t> oracle_q_slots(const cuda::Geometry& geo, const std::vector<std::int64_t>& q_idx) {
  std::vector<std::int32_t> q_slot(static_cast<std::size_t>(geo.read_entries()));
  for (std::int64_t n = 0; n < geo.N; ++n) {
    const std::int64_t p = n % geo.P, t0 = (n / geo.P) * geo.C;
    for (std::int64_t x = 0; x < geo.C * geo.R; ++x) {
      const std::int64_t t = t0 + x / geo.R;
      std::int32_t slot = -1;
      if (t < geo.T) {
        const std::int64_t idx = q_idx[static_cast<std::size_t>((p * geo.T + t) * geo.R + x % geo.R)];
        if (idx >= p * geo.sps && idx < (p + 1) * geo.sps) slot = static_cast<std::int32_t>(idx);
      }
      q_slot[static_cast<std::size_t>(n * geo.C * geo.R + x)] = slot;
    }
  }
  return q_slot;
}

}  // namespace sdm::testing

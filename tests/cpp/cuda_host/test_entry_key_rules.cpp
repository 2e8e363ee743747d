// test_entry_key_rules.cpp - the CUDA entry-key kernel (src/cuda/sort/entry_keys.cu,
// make_entry_keys) replayed on the host, thread by thread, through its rules
// (src/cuda/sort/entry_key_rules.hpp), against the two kernels it replaced (make_write_keys of
// forward/phase1.cu, make_read_keys of backward/reads.cu, commit 67d0cb6, entry by entry in
// support/entry_key_oracle.hpp): every key and k_slot bitwise equal, every entry written once.
// The replay stands for the device's two warp votes by their definitions: __match_any_sync (the
// warp's lanes holding the same 64-bit word) and __ballot_sync (the lanes whose predicate holds).
// Cases: entry_key_oracle.hpp's shapes, indices outside the stream's rows, negative and large,
// int64; with and without the repeat mask (Inputs::distinct_writes).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "cuda/common/geometry.hpp"
#include "cuda/sort/entry_key_rules.hpp"
#include "support/entry_key_oracle.hpp"

namespace {

using sdm::cuda::EntryPlace;
using sdm::cuda::Geometry;
using sdm::cuda::KeyLayout;

using sdm::testing::KeyShape;

// Geometry as make_geometry (src/cuda/forward/write_read.cu, not part of sdm_core) builds it.
Geometry geometry_of(const KeyShape& s) {
  Geometry g;
  g.P = s.P, g.T = s.T, g.W = s.W, g.R = s.R, g.C = std::min(s.C, s.T), g.sps = s.sps;
  g.Nt = (g.T + g.C - 1) / g.C;
  g.N = g.Nt * g.P;
  g.p_count = g.P;
  g.keys = sdm::cuda::entry_key_layout(g, g.W);
  return g;
}

struct Keys {
  std::vector<std::uint64_t> keys;
  std::vector<std::int32_t> slots;  // k_slot (writes only)
  std::vector<int> writes;          // how often each entry was written
};

// ---- make_entry_keys replayed -----------------------------------------------------------------

enum class Kind { writes, reads };

// One CTA of the kernel: every thread's entry and local slot, the repeat test over the staged
// words (one phase per __syncthreads), then the stores.
void replay_cta(const Geometry& geo, const KeyLayout& layout, Kind kind, const std::vector<std::int64_t>& k_idx,
                bool mask_repeats, const std::vector<std::int32_t>& q_slot, std::int64_t n, unsigned cta, Keys& out) {
  const std::int64_t lanes = kind == Kind::writes ? geo.W : geo.R;
  const sdm::cuda::KeyGrid grid = sdm::cuda::key_grid(geo.C, lanes);
  constexpr int kThreads = sdm::cuda::kKeyThreads;
  std::vector<sdm::cuda::KeyThread> th(kThreads);
  std::vector<EntryPlace> at(kThreads);
  std::vector<std::int64_t> local(kThreads), e(kThreads);
  std::vector<std::uint64_t> staged(kThreads);
  std::vector<bool> candidate(kThreads);
  for (int u = 0; u < kThreads; ++u) {
    th[u] = sdm::cuda::key_thread(grid, geo.C, cta, u);
    at[u] = sdm::cuda::entry_place(geo, n, th[u].i);
    e[u] = (n * geo.C + th[u].i) * grid.lanes + th[u].lane;
    local[u] = geo.sps;
    if (th[u].inside && kind == Kind::writes) {
      const std::int64_t idx = at[u].t < geo.T ? k_idx[static_cast<std::size_t>(at[u].token * geo.W + th[u].lane)] : 0;
      local[u] = sdm::cuda::local_slot_of_index(geo, at[u], idx);
    } else if (th[u].inside) {
      local[u] = sdm::cuda::local_slot_of_row(geo, at[u], q_slot[static_cast<std::size_t>(e[u])]);
    }
    candidate[u] = th[u].inside && local[u] != geo.sps;
    staged[u] = sdm::cuda::repeat_word(geo, layout, n, local[u], th[u]);
  }
  std::vector<std::int64_t> final_local = local;
  if (kind == Kind::writes && mask_repeats) {
    for (int u = 0; u < kThreads; ++u) {
      bool repeat = false;
      for (int v = u - u % 32; v < u; ++v) repeat |= candidate[v] && staged[v] == staged[u];  // the match
      for (int v = th[u].token_first; v < sdm::cuda::warp_first(u); ++v) repeat |= staged[v] == staged[u];
      if (candidate[u] && repeat) final_local[u] = geo.sps;
    }
  }
  for (int u = 0; u < kThreads; ++u) {
    if (!th[u].inside) continue;
    const auto at_e = static_cast<std::size_t>(e[u]);
    out.keys[at_e] = layout.encode(n, final_local[u], th[u].i, th[u].lane);
    if (kind == Kind::writes) out.slots[at_e] = sdm::cuda::row_of_local_slot(geo, at[u], final_local[u]);
    ++out.writes[at_e];
  }
}

Keys replay(const Geometry& geo, const KeyLayout& layout, Kind kind, const std::vector<std::int64_t>& k_idx,
            bool mask_repeats, const std::vector<std::int32_t>& q_slot) {
  const std::int64_t count = kind == Kind::writes ? geo.write_entries() : geo.read_entries();
  const auto size = static_cast<std::size_t>(count);
  Keys out{std::vector<std::uint64_t>(size), std::vector<std::int32_t>(size), std::vector<int>(size)};
  const sdm::cuda::KeyGrid grid = sdm::cuda::key_grid(geo.C, kind == Kind::writes ? geo.W : geo.R);
  for (std::int64_t n = 0; n < geo.N; ++n) {
    for (unsigned cta = 0; cta < grid.ctas_per_chunk; ++cta) {
      replay_cta(geo, layout, kind, k_idx, mask_repeats, q_slot, n, cta, out);
    }
  }
  return out;
}

void expect_equal(const Keys& got, const std::vector<std::uint64_t>& keys, const std::vector<std::int32_t>* slots,
                  const std::string& what) {
  ASSERT_EQ(got.keys.size(), keys.size()) << what;
  for (std::size_t e = 0; e < keys.size(); ++e) {
    ASSERT_EQ(got.writes[e], 1) << what << ": entry " << e << " written " << got.writes[e] << " times";
    ASSERT_EQ(got.keys[e], keys[e]) << what << ": key of entry " << e;
    if (slots != nullptr) {
      ASSERT_EQ(got.slots[e], (*slots)[e]) << what << ": k_slot of entry " << e;
    }
  }
}

void check_shape(const KeyShape& s, std::uint64_t seed) {
  const Geometry geo = geometry_of(s);
  const KeyLayout read_layout = sdm::cuda::entry_key_layout(geo, geo.R);
  std::mt19937_64 rng(seed);
  const std::vector<std::int64_t> k_idx = sdm::testing::oracle_indices(geo, geo.W, false, rng);
  const std::vector<std::int32_t> q_slot =
      sdm::testing::oracle_q_slots(geo, sdm::testing::oracle_indices(geo, geo.R, false, rng));
  const std::string what = "P " + std::to_string(s.P) + " T " + std::to_string(s.T) + " C " + std::to_string(geo.C) +
                           " W " + std::to_string(s.W) + " R " + std::to_string(s.R) + " sps " + std::to_string(s.sps);
  for (const bool distinct : {false, true}) {
    const sdm::testing::OracleKeys want = sdm::testing::oracle_write_keys(geo, k_idx, distinct);
    expect_equal(replay(geo, geo.keys, Kind::writes, k_idx, !distinct, q_slot), want.keys, &want.slots,
                 what + (distinct ? " writes, distinct" : " writes, repeats masked"));
  }
  expect_equal(replay(geo, read_layout, Kind::reads, k_idx, false, q_slot),
               sdm::testing::oracle_read_keys(geo, read_layout, q_slot), nullptr, what + " reads");
}

TEST(EntryKeyRules, SameKeysAsTheReplacedKernels) {
  std::uint64_t seed = 1;
  for (const KeyShape& s : sdm::testing::entry_key_shapes()) check_shape(s, seed++);
}

// The grid: whole tokens per CTA, every entry of a chunk covered once (the replay counts writes),
// a token's lanes in one CTA.
TEST(EntryKeyRules, GridCoversWholeTokens) {
  for (const std::int64_t C : {1, 7, 64, 256}) {
    for (std::int64_t lanes = 1; lanes <= sdm::kMaxWidth; ++lanes) {
      const sdm::cuda::KeyGrid grid = sdm::cuda::key_grid(C, lanes);
      ASSERT_GE(grid.tokens_per_cta, 1);
      ASSERT_LE(grid.tokens_per_cta * lanes, sdm::cuda::kKeyThreads);
      std::vector<int> seen(static_cast<std::size_t>(C * lanes));
      for (unsigned cta = 0; cta < grid.ctas_per_chunk; ++cta) {
        for (int u = 0; u < sdm::cuda::kKeyThreads; ++u) {
          const sdm::cuda::KeyThread th = sdm::cuda::key_thread(grid, C, cta, u);
          if (!th.inside) continue;
          ASSERT_EQ(th.token_first + th.lane, u);
          ++seen[static_cast<std::size_t>(th.i * lanes + th.lane)];
        }
      }
      for (const int count : seen) ASSERT_EQ(count, 1) << "C " << C << " lanes " << lanes;
    }
  }
}

TEST(EntryKeyRules, LayoutBeyond64BitsThrows) {
  Geometry geo = geometry_of({2, 64, 64, 64, 64, 36864});
  EXPECT_EQ(sdm::cuda::entry_key_layout(geo, 64).total_bits(), 6 + 6 + 16 + 1);  // lanes, tokens, slots, chunks
  geo.N = std::int64_t{1} << 40;
  EXPECT_THROW(sdm::cuda::entry_key_layout(geo, 256), sdm::RuntimeError);
}

}  // namespace

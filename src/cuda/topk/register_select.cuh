// register_select.cuh - one row of the product-key top-k forward, by one warp, keys in registers
// (the device code of register_forward.cu; the rule: include/sdm/product_key_topk.hpp).
//
// Math, per row (F >= 2 factors, every width <= 512, k <= 128):
//   factor f: its m = min(k, n_f) best columns by (score_key(value), larger column on ties),
//     best first, with their values re-read from the row;
//   stage f = 1..F-1: c = min(k, n * m); candidate pairs (i, j), (i + 1)(j + 1) <= c, i < n, j < m,
//     keyed (score_key(running[i] + factor[j]), (i + j) << 8 | i); the c largest keys are kept:
//     an intermediate stage sorts them into the next running list (sums rounded to a 16-bit
//     input dtype), the last one sorts them by slot id and stores (id, sum rounded to the dtype).
// Decomposition: one warp per row.
//   - The factor ranks (register_rank.cuh): keys in registers, sorted by register networks
//     (register_sort.cuh), stage 1's two factors at once by the two half-warps where they fit.
//   - A stage holds ceil(pair_count(KMAX) / 32) candidates per lane from the constant pair table
//     (pair_table.cuh; no branch: every entry's sum is formed, key 0 where it is no candidate):
//     32-bit sum keys and 16-bit tie payloads in registers. The c-th largest key
//     is found by bisection with warp-wide counts (__reduce_add_sync, two instructions a key),
//     between the largest key(i, j) with (i + 1)(j + 1) == c (at least c keys are at or above it:
//     the sums are monotone in both ranks; 0 where no such pair is a candidate) and key(0, 0),
//     the largest; it stops as soon as exactly c keys are at or above the probe, and walks up
//     from the smallest key once few extra keys remain (find_cut: 4 for 16-bit inputs, 2 for
//     f32; cut_search.cuh). Only when the c-th key ties with others are the tied ones split by
//     payload: the need-th largest payload by up to 4 rounds of warp max (the usual 1-3 tied keys
//     needed), else by bisection. The kept candidates are compacted into shared memory (each
//     lane's from its exclusive prefix sum of the lanes' kept counts), loaded back KMAX / 32 per
//     lane and sorted by one register network (the last stage's id sort with every merge
//     unrolled at KMAX 128).
//   - Shared memory per warp: the running and factor lists (value, id) and the kept keys.
// Numerics: sums are __fadd_rn in float32 in factor order, one rounding per stored value; the
// keys and the tie rule are the CPU kernel's, so the selected slots and values are the same bits
// (a NaN stays a NaN; its payload is the hardware's). Deterministic: no atomics.
#pragma once

#include <cstdint>

#include "core/float_convert.hpp"
#include "core/product_key_plan.hpp"
#include "cuda/topk/cut_search.cuh"
#include "cuda/topk/pair_table.cuh"
#include "cuda/topk/register_rank.cuh"
#include "cuda/topk/register_sort.cuh"
#include "cuda/topk/score_types.cuh"

namespace sdm::cuda::topk {

inline constexpr int kRegisterMaxWidth = 512;
inline constexpr int kRegisterMaxK = 128;
template <int KMAX>
struct alignas(16) StageLists {
  float run_val[KMAX];
  std::uint32_t run_id[KMAX];
  float fac_val[KMAX];
  std::uint32_t fac_col[KMAX];
  std::uint64_t kept[KMAX];  // score_key << 32 | payload of the kept candidates
};

// The last stage: the c kept pairs sorted by slot id (Key holds id << 8 | kept position), stored.
// At KMAX 128 with 32-bit keys every merge of the sort is unrolled (RUN = KMAX): with the run-time
// loop NVVM keeps KMAX 128's merges as a loop (10 static shuffles) whose counters and moves cost
// about as much as the network; unrolled they spill the pair stage's candidates at 64 registers,
// so the KMAX 128 kernel runs at 80 (register_forward.cu).
template <typename S, typename Key, int KMAX>
__device__ void store_by_id(const StageLists<KMAX>& s, int c, std::uint32_t width, typename S::Storage* out_values,
                            std::int64_t* out_slots, int lane) {
  constexpr int M = KMAX / 32;
  Key key[M];
#pragma unroll
  for (int r = 0; r < M; ++r) {
    const int g = lane * M + r;
    key[r] = ~Key{0};
    if (g < c) {
      const auto pay = static_cast<std::uint32_t>(s.kept[g]);
      const std::uint32_t i = pay & 0xffu, j = (pay >> 8) - i;
      const std::uint32_t id = s.run_id[i] * width + s.fac_col[j];
      key[r] = static_cast<Key>(id) << 8 | static_cast<Key>(g);
    }
  }
  if constexpr (KMAX == 128 && sizeof(Key) == 4) sort_runs<M, KMAX>(key, KMAX, false, lane);
  else sort_runs(key, KMAX, false, lane);
#pragma unroll
  for (int r = 0; r < M; ++r) {
    const int g = lane * M + r;
    if (g < c) {
      const auto at = static_cast<int>(key[r] & 0xffu);
      const auto pay = static_cast<std::uint32_t>(s.kept[at]);
      const std::uint32_t i = pay & 0xffu, j = (pay >> 8) - i;
      out_slots[g] = static_cast<std::int64_t>(key[r] >> 8);
      out_values[g] = S::store(__fadd_rn(s.run_val[i], s.fac_val[j]));
    }
  }
}

// An intermediate stage: the c kept pairs, best first, become the running list.
template <typename S, int KMAX>
__device__ void next_running(StageLists<KMAX>& s, int c, std::uint32_t width, int lane) {
  constexpr int M = KMAX / 32;
  std::uint64_t key[M];
#pragma unroll
  for (int r = 0; r < M; ++r) {
    const int g = lane * M + r;
    key[r] = g < c ? s.kept[g] : 0;
  }
  sort_runs(key, KMAX, true, lane);
  float val[M];
  std::uint32_t id[M];
#pragma unroll
  for (int r = 0; r < M; ++r) {
    const auto pay = static_cast<std::uint32_t>(key[r]);
    const std::uint32_t i = pay & 0xffu, j = (pay >> 8) - i;
    if (lane * M + r < c) {
      val[r] = S::round(__fadd_rn(s.run_val[i], s.fac_val[j]));
      id[r] = s.run_id[i] * width + s.fac_col[j];
    }
  }
  __syncwarp();
#pragma unroll
  for (int r = 0; r < M; ++r) {
    const int g = lane * M + r;
    if (g < c) {
      s.run_val[g] = val[r];
      s.run_id[g] = id[r];
    }
  }
  __syncwarp();
}

// Stage: running list (n) x factor list (m) -> the c best candidate pairs.
template <typename S, int KMAX>
__device__ void pair_stage(StageLists<KMAX>& s, int n, int m, int c, std::uint32_t width, bool last, bool wide_ids,
                           typename S::Storage* out_values, std::int64_t* out_slots, int lane) {
  constexpr int C = PairTable<KMAX>::kLanes;
  const PairTable<KMAX>& table = kPairTable<KMAX>;
  std::uint32_t sk[C];
  std::uint32_t exact_key = 0;
  // Entry t is a candidate where t < count[c] (its product <= c), i < n and j < m; its product is
  // c where t >= count[c - 1].
  const auto in_c = static_cast<int>(table.count[c]), below_c = static_cast<int>(table.count[c - 1]);
  const auto un = static_cast<std::uint32_t>(n), um = static_cast<std::uint32_t>(m);
#pragma unroll
  for (int q = 0; q < C; ++q) {
    // No branch: every entry's i, j index the lists (pair_table.cuh), so both loads are always in
    // range; an entry that is no candidate gets key 0.
    const int t = q * 32 + lane;
    const uint2 e = table.rank[t];
    const std::uint32_t key = core::score_key(__fadd_rn(s.run_val[e.x], s.fac_val[e.y]));
    sk[q] = t < in_c && e.x < un && e.y < um ? key : 0u;
    if (t >= below_c) exact_key = max(exact_key, sk[q]);
  }
  // Invariant: count(lo) >= c > count(hi) (hi_count = count(hi)). The sums are monotone in both
  // ranks, so key(i, j) has at least (i + 1)(j + 1) candidates at or above it (the pairs
  // (i' <= i, j' <= j)): any candidate with (i + 1)(j + 1) == c bounds the c-th key from below
  // (where none is a candidate, 0: every slot counts); key(0, 0) is the largest key.
  const std::uint32_t lo = __reduce_max_sync(kFullMask, exact_key);
  const std::uint32_t hi = core::score_key(__fadd_rn(s.run_val[0], s.fac_val[0])) + 1u;
  constexpr unsigned kExtract = sizeof(typename S::Storage) == 2 ? 4u : 2u;  // find_cut's walk-up
  const Cut cut = find_cut<kExtract>(sk, static_cast<unsigned>(c), lo, hi);
  std::uint32_t pay[C];  // read after the search: no register holds them through it
#pragma unroll
  for (int q = 0; q < C; ++q) pay[q] = table.payload[q * 32 + lane];
  // Kept: key > cut.key, or == cut.key and payload + 1 >= tie_code.
  std::uint32_t tie_code = 0xffffffffu;
  if (!cut.exact) {
    // The c - cut.above best of the candidates tied at cut.key, by payload.
    std::uint32_t tie[C];
#pragma unroll
    for (int q = 0; q < C; ++q) tie[q] = sk[q] == cut.key ? pay[q] + 1u : 0u;
    tie_code = nth_largest_tie(tie, static_cast<unsigned>(c) - cut.above);
  }
  // The same test on (key, payload) as one 64-bit number, key in the high word (a register pair: no
  // shifts, no branch): >= (cut.key, tie_code - 1). pay < 2^16, so payload + 1 >= tie_code is
  // payload >= tie_code - 1 for tie_code >= 1, and both hold for every payload when tie_code = 0.
  const std::uint64_t least = static_cast<std::uint64_t>(cut.key) << 32 | (max(tie_code, 1u) - 1u);
  // The kept candidates go to s.kept lane by lane (a lane's in q order) from the lane's exclusive
  // prefix sum of the warp's kept counts: positions 0 .. c - 1, in an order both consumers make
  // immaterial (they sort the kept pairs by unique keys: slot ids, or (key, payload)).
  static_assert(C <= 32);
  unsigned keep_bits = 0;
#pragma unroll
  for (int q = 0; q < C; ++q) {
    keep_bits |= static_cast<unsigned>((static_cast<std::uint64_t>(sk[q]) << 32 | pay[q]) >= least) << q;
  }
  std::uint64_t* to = s.kept + warp_exclusive_sum(static_cast<unsigned>(__popc(keep_bits)), lane);
#pragma unroll
  for (int q = 0; q < C; ++q) {
    if (keep_bits >> q & 1u) *to++ = static_cast<std::uint64_t>(sk[q]) << 32 | pay[q];
  }
  __syncwarp();
  if (!last) return next_running<S>(s, c, width, lane);
  if (wide_ids) return store_by_id<S, std::uint64_t, KMAX>(s, c, width, out_values, out_slots, lane);
  store_by_id<S, std::uint32_t, KMAX>(s, c, width, out_values, out_slots, lane);
}

struct RegisterRow {
  const std::uint32_t* dims;  // factor widths
  int factors;
  int k;
  bool wide_ids;  // prod(dims) > 2^24: the last sort's keys need 64 bits
};

template <typename S, int KMAX>
__device__ void select_row(const RegisterRow& p, const typename S::Storage* x, typename S::Storage* out_values,
                           std::int64_t* out_slots, StageLists<KMAX>& s, int lane) {
  int width = static_cast<int>(p.dims[0]);
  int n = min(p.k, width);
  const int w1 = static_cast<int>(p.dims[1]);
  const bool paired =
      rank_two<S, KMAX>(x, width, w1, n, min(p.k, w1), s.run_val, s.run_id, s.fac_val, s.fac_col, lane);
  if (!paired) rank_factor<S, KMAX>(x, width, n, s.run_val, s.run_id, lane);
  const typename S::Storage* factor = x + width;  // factor f's columns
  for (int f = 1; f < p.factors; ++f) {
    width = static_cast<int>(p.dims[f]);
    const int m = min(p.k, width);
    if (f > 1 || !paired) rank_factor<S, KMAX>(factor, width, m, s.fac_val, s.fac_col, lane);
    factor += width;
    const int c = static_cast<int>(min(static_cast<std::int64_t>(p.k), static_cast<std::int64_t>(n) * m));
    pair_stage<S, KMAX>(s, n, m, c, static_cast<std::uint32_t>(width), f + 1 == p.factors, p.wide_ids, out_values,
                        out_slots, lane);
    n = c;
  }
}

}  // namespace sdm::cuda::topk

// register_select.cuh - one row of the product-key top-k forward, by one warp, keys in registers
// (the device code of register_forward.cu; the rule: include/sdm/product_key_topk.hpp).
//
// Math, per row (F >= 2 factors, every width <= 512, k <= 128):
//   factor f: its m = min(k, n_f) best columns by FactorKey (score_key(value), larger column on
//     ties), best first, with their values re-read from the row;
//   stage f = 1..F-1: c = min(k, n * m); candidate pairs (i, j), (i + 1)(j + 1) <= c, i < n, j < m,
//     keyed (score_key(running[i] + factor[j]), (i + j) << 8 | i); the c largest keys are kept:
//     an intermediate stage sorts them into the next running list (sums rounded to a 16-bit
//     input dtype), the last one sorts them by slot id and stores (id, sum rounded to the dtype).
// Decomposition: one warp per row.
//   - A factor of width w sits in registers, M = pow2(ceil(w / 32)) keys per lane (one vector load
//     per lane where the row allows); stage 1's two factors are ranked at once, one per half-warp
//     (rank_two: 32-bit keys, widths <= 256, 16 lanes x pow2(w / 16) keys); sort_runs builds sorted runs of pow2(m) keys and
//     keep_top_half folds them into the top run (register_sort.cuh).
//   - A stage holds ceil(pair_count(KMAX) / 32) candidates per lane from the constant pair table
//     (pair_table.cuh): 32-bit sum keys and 16-bit tie payloads in registers. The c-th largest key
//     is found by bisection with warp-wide counts (__reduce_add_sync): first over the sum keys,
//     between the largest key(i, j) with (i + 1)(j + 1) == c (at least c keys are at or above it:
//     the sums are monotone in both ranks; the smallest key of the first c table entries where no
//     such pair is a candidate) and key(0, 0), the largest; it stops as soon as exactly c keys are at or above the probe.
//     Only when the c-th key ties with others does a second bisection split the tied sum key by
//     payload. The kept candidates are compacted (ballot + popc) into shared memory, loaded back
//     KMAX / 32 per lane and sorted by one register network.
//   - Shared memory per warp: the running and factor lists (value, id) and the kept keys.
// Numerics: sums are __fadd_rn in float32 in factor order, one rounding per stored value; the
// keys and the tie rule are the CPU kernel's, so the selected slots and values are the same bits
// (a NaN stays a NaN; its payload is the hardware's). Deterministic: no atomics.
#pragma once

#include <cstdint>

#include "core/float_convert.hpp"
#include "core/product_key_plan.hpp"
#include "cuda/topk/pair_table.cuh"
#include "cuda/topk/register_sort.cuh"
#include "cuda/topk/score_types.cuh"

namespace sdm::cuda::topk {

inline constexpr int kRegisterMaxWidth = 512;
inline constexpr int kRegisterMaxK = 128;
#ifndef SDM_TOPK_HALF_WARP_RANK
#define SDM_TOPK_HALF_WARP_RANK 1
#endif
// Stage 1's factors ranked by the two half-warps at once (rank_two); 0: one after the other.
inline constexpr bool kHalfWarpRank = SDM_TOPK_HALF_WARP_RANK != 0;
#ifndef SDM_TOPK_TIGHT_BOUNDS
#define SDM_TOPK_TIGHT_BOUNDS 1
#endif
// The c-th key's bisection starts from [max key(i, j) with (i + 1)(j + 1) == c, key(0, 0)].
inline constexpr bool kTightBounds = SDM_TOPK_TIGHT_BOUNDS != 0;

template <int KMAX>
struct StageLists {
  float run_val[KMAX];
  std::uint32_t run_id[KMAX];
  float fac_val[KMAX];
  std::uint32_t fac_col[KMAX];
  std::uint64_t kept[KMAX];  // score_key << 16 | payload of the kept candidates, in pick order
};

__device__ __forceinline__ int pow2_at_least(int x) {
  int p = 1;
  while (p < x) p *= 2;
  return p;
}

// The M scores of lane `lane` (columns lane * M + r of x[0..width)), as floats; one 16-byte load
// per 16 bytes where the whole warp's columns lie in the row and x is 16-byte aligned.
template <typename S, int M, int LANES = 32>
__device__ __forceinline__ void load_scores(const typename S::Storage* x, int width, int lane, float (&v)[M]) {
  using Storage = typename S::Storage;
  constexpr int kBytes = M * static_cast<int>(sizeof(Storage));
  if constexpr (kBytes % 16 == 0) {
    if (width == LANES * M && (reinterpret_cast<std::uintptr_t>(x) & 15u) == 0) {
      uint4 chunk[kBytes / 16];
      const auto* from = reinterpret_cast<const uint4*>(x + lane * M);
#pragma unroll
      for (int q = 0; q < kBytes / 16; ++q) chunk[q] = from[q];
      Storage s[M];
      __builtin_memcpy(s, chunk, kBytes);
#pragma unroll
      for (int r = 0; r < M; ++r) v[r] = S::load(s[r]);
      return;
    }
  }
#pragma unroll
  for (int r = 0; r < M; ++r) {
    const int c = lane * M + r;
    v[r] = c < width ? S::load(x[c]) : 0.0f;
  }
}

// val / col [0..m): the m best columns of x[0..width), best first (width <= LANES * M, m <= KMAX),
// ranked by LANES lanes of the warp (`sub`: this lane's index among them) with M keys each. The
// sorted runs hold pow2(run_m) keys (run_m >= m; the same on every lane of the warp, whose shuffle
// networks run together).
template <typename S, int M, int KMAX, int LANES>
__device__ __forceinline__ void rank_columns(const typename S::Storage* x, int width, int m, int run_m, float* val,
                                             std::uint32_t* col, int sub, int lane) {
  using Key = typename S::Key;
  float v[M];
  load_scores<S, M, LANES>(x, width, sub, v);
  Key key[M];
#pragma unroll
  for (int r = 0; r < M; ++r) {
    const int c = sub * M + r;
    key[r] = c < width ? S::key(v[r], static_cast<std::uint32_t>(c)) : Key{0};
  }
  // The usual run (run_m > KMAX / 2) is a constant of the instantiation.
  constexpr int kRun = KMAX < LANES * M ? KMAX : LANES * M;
  const int run = max(M, pow2_at_least(run_m));
  if (run == kRun) {
    sort_runs(key, kRun, true, lane);
    keep_top_half<M, LANES>(key, kRun, lane);
  } else {
    sort_runs(key, run, true, lane);
    keep_top_half<M, LANES>(key, run, lane);
  }
#pragma unroll
  for (int r = 0; r < M; ++r) {
    const int g = sub * M + r;
    if (g < m) {
      const auto c = static_cast<std::uint32_t>(key[r] & 0xffffu);
      col[g] = c;
      val[g] = S::load(x[c]);
    }
  }
  __syncwarp();
}

// The whole warp ranks one factor.
template <typename S, int M, int KMAX>
__device__ void rank_factor_in(const typename S::Storage* x, int width, int m, float* val, std::uint32_t* col,
                               int lane) {
  rank_columns<S, M, KMAX, 32>(x, width, m, m, val, col, lane, lane);
}

template <typename S, int KMAX>
__device__ void rank_factor(const typename S::Storage* x, int width, int m, float* val, std::uint32_t* col, int lane) {
  if (width <= 32) return rank_factor_in<S, 1, KMAX>(x, width, m, val, col, lane);
  if (width <= 64) return rank_factor_in<S, 2, KMAX>(x, width, m, val, col, lane);
  if (width <= 128) return rank_factor_in<S, 4, KMAX>(x, width, m, val, col, lane);
  if (width <= 256) return rank_factor_in<S, 8, KMAX>(x, width, m, val, col, lane);
  return rank_factor_in<S, 16, KMAX>(x, width, m, val, col, lane);
}

// Both factors of stage 1 at once, one per half-warp (32-bit keys, widths <= 256): half h ranks
// factor h (columns of x + h * w0) with M = pow2(max width / 16) keys per lane, so a factor's
// network runs 16 lanes wide: half the shuffles of the whole-warp rank per factor, and the two
// factors' networks overlap. Half 0 writes the running list (val0 / col0), half 1 the factor list.
template <typename S, int M, int KMAX>
__device__ void rank_two_in(const typename S::Storage* x, int w0, int w1, int m0, int m1, float* val0,
                            std::uint32_t* col0, float* val1, std::uint32_t* col1, int lane) {
  const int half = lane >> 4;
  rank_columns<S, M, KMAX, 16>(half ? x + w0 : x, half ? w1 : w0, half ? m1 : m0, max(m0, m1), half ? val1 : val0,
                               half ? col1 : col0, lane & 15, lane);
}

// Stage 1's two factors by half-warps when that fits (true), else nothing done (false).
template <typename S, int KMAX>
__device__ bool rank_two(const typename S::Storage* x, int w0, int w1, int m0, int m1, float* val0, std::uint32_t* col0,
                         float* val1, std::uint32_t* col1, int lane) {
  if constexpr (sizeof(typename S::Key) != 4 || !kHalfWarpRank) {
    return false;
  } else {
    const int w = max(w0, w1);
    if (w > 256) return false;
    if (w <= 16) rank_two_in<S, 1, KMAX>(x, w0, w1, m0, m1, val0, col0, val1, col1, lane);
    else if (w <= 32) rank_two_in<S, 2, KMAX>(x, w0, w1, m0, m1, val0, col0, val1, col1, lane);
    else if (w <= 64) rank_two_in<S, 4, KMAX>(x, w0, w1, m0, m1, val0, col0, val1, col1, lane);
    else if (w <= 128) rank_two_in<S, 8, KMAX>(x, w0, w1, m0, m1, val0, col0, val1, col1, lane);
    else rank_two_in<S, 16, KMAX>(x, w0, w1, m0, m1, val0, col0, val1, col1, lane);
    return true;
  }
}

// The number of candidates with key >= (t, p): sum key above t, or equal to t with payload >= p.
template <int C>
__device__ __forceinline__ unsigned count_at_least(const std::uint32_t (&sk)[C], std::uint32_t t) {
  unsigned local = 0;
#pragma unroll
  for (int q = 0; q < C; ++q) local += sk[q] >= t ? 1u : 0u;
  return __reduce_add_sync(kFullMask, local);
}

template <int C>
__device__ __forceinline__ unsigned count_tied_at_least(const std::uint32_t (&sk)[C], const std::uint32_t (&pay)[C],
                                                        std::uint32_t t, std::uint32_t p) {
  unsigned local = 0;
#pragma unroll
  for (int q = 0; q < C; ++q) local += sk[q] == t && pay[q] >= p ? 1u : 0u;
  return __reduce_add_sync(kFullMask, local);
}

// The last stage: the c kept pairs sorted by slot id (Key holds id << 8 | kept position), stored.
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
      const auto pay = static_cast<std::uint32_t>(s.kept[g] & 0xffffu);
      const std::uint32_t i = pay & 0xffu, j = (pay >> 8) - i;
      const std::uint32_t id = s.run_id[i] * width + s.fac_col[j];
      key[r] = static_cast<Key>(id) << 8 | static_cast<Key>(g);
    }
  }
  sort_runs(key, KMAX, false, lane);
#pragma unroll
  for (int r = 0; r < M; ++r) {
    const int g = lane * M + r;
    if (g < c) {
      const auto at = static_cast<int>(key[r] & 0xffu);
      const auto pay = static_cast<std::uint32_t>(s.kept[at] & 0xffffu);
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
    const auto pay = static_cast<std::uint32_t>(key[r] & 0xffffu);
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
  constexpr int kTable = pair_count(kPairTableRank);
  constexpr int C = (pair_count(KMAX) + 31) / 32;
  std::uint32_t sk[C], pay[C];
  std::uint32_t first_min = 0xffffffffu, top = 0, exact_key = 0;
#pragma unroll
  for (int q = 0; q < C; ++q) {
    const int t = q * 32 + lane;
    const std::uint32_t code = t < kTable ? kPairTable.code[t] : 0xffffu;
    const int i = static_cast<int>(code >> 8), j = static_cast<int>(code & 0xffu);
    sk[q] = 0;
    if (t < kTable && (i + 1) * (j + 1) <= c && i < n && j < m) {
      sk[q] = core::score_key(__fadd_rn(s.run_val[i], s.fac_val[j]));
    }
    pay[q] = static_cast<std::uint32_t>((i + j) << 8 | i);
    if (t < c) first_min = min(first_min, sk[q]);
    if ((i + 1) * (j + 1) == c) exact_key = max(exact_key, sk[q]);
    top = max(top, sk[q]);
  }
  // Invariant: count(lo) >= c > count(hi) (hi_count = count(hi)).
  std::uint32_t lo, hi;
  if constexpr (kTightBounds) {
    // The sums are monotone in both ranks, so key(i, j) has at least (i + 1)(j + 1) candidates at
    // or above it (the pairs (i' <= i, j' <= j)): any candidate with (i + 1)(j + 1) == c bounds
    // the c-th key from below, and key(0, 0) is the largest key.
    const std::uint32_t exact_max = __reduce_max_sync(kFullMask, exact_key);
    lo = exact_max != 0 ? exact_max : __reduce_min_sync(kFullMask, first_min);
#ifdef SDM_TOPK_MUTANT_LO
    lo += 1u;  // mutant: the lower bound one above (the tests must fail)
#endif
    hi = core::score_key(__fadd_rn(s.run_val[0], s.fac_val[0])) + 1u;
  } else {
    lo = __reduce_min_sync(kFullMask, first_min);
    hi = __reduce_max_sync(kFullMask, top) + 1u;
  }
  unsigned hi_count = 0;
  std::uint32_t tie_key = 0, tie_payload = 0x10000u;  // kept: key > tie_key, or == tie_key and payload >= tie_payload
  bool exact = false;
  while (hi - lo > 1u) {
    const std::uint32_t mid = lo + (hi - lo) / 2u;
    const unsigned count = count_at_least(sk, mid);
    if (count == static_cast<unsigned>(c)) {
      tie_key = mid - 1u;
      exact = true;
      break;
    }
    if (count > static_cast<unsigned>(c)) {
      lo = mid;
    } else {
      hi = mid;
      hi_count = count;
    }
  }
  if (!exact) {
    // The c-th key is lo: the c - hi_count best of the candidates tied at lo, by payload.
    tie_key = lo;
    const unsigned need = static_cast<unsigned>(c) - hi_count;
    std::uint32_t plo = 0, phi = KMAX << 8;  // payloads are < KMAX << 8: i + j < c <= KMAX
    while (phi - plo > 1u) {
      const std::uint32_t mid = plo + (phi - plo) / 2u;
      const unsigned count = count_tied_at_least(sk, pay, lo, mid);
      if (count == need) {
        plo = mid;
        break;
      }
      if (count > need) plo = mid;
      else phi = mid;
    }
    tie_payload = plo;
  }
  int base = 0;
#pragma unroll
  for (int q = 0; q < C; ++q) {
    const bool keep = sk[q] > tie_key || (sk[q] == tie_key && pay[q] >= tie_payload);
    const unsigned ballot = __ballot_sync(kFullMask, keep);
    if (keep) s.kept[base + __popc(ballot & ((1u << lane) - 1u))] = static_cast<std::uint64_t>(sk[q]) << 16 | pay[q];
    base += __popc(ballot);
  }
  __syncwarp();
  if (!last) return next_running<S>(s, c, width, lane);
  if (wide_ids) return store_by_id<S, std::uint64_t>(s, c, width, out_values, out_slots, lane);
  store_by_id<S, std::uint32_t>(s, c, width, out_values, out_slots, lane);
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
  const bool paired = rank_two<S, KMAX>(x, width, w1, n, min(p.k, w1), s.run_val, s.run_id, s.fac_val, s.fac_col, lane);
  if (!paired) rank_factor<S, KMAX>(x, width, n, s.run_val, s.run_id, lane);
  std::int64_t offset = width;
  for (int f = 1; f < p.factors; ++f) {
    width = static_cast<int>(p.dims[f]);
    const int m = min(p.k, width);
    if (f > 1 || !paired) rank_factor<S, KMAX>(x + offset, width, m, s.fac_val, s.fac_col, lane);
    offset += width;
    const int c = static_cast<int>(min(static_cast<std::int64_t>(p.k), static_cast<std::int64_t>(n) * m));
    pair_stage<S, KMAX>(s, n, m, c, static_cast<std::uint32_t>(width), f + 1 == p.factors, p.wide_ids, out_values,
                        out_slots, lane);
    n = c;
  }
}

}  // namespace sdm::cuda::topk

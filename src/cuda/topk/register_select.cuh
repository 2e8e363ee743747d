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
//   - A factor of width w sits in registers as 32-bit keys (score_types.cuh: FactorKeys), M =
//     pow2(ceil(w / 32)) keys per lane (one vector load per lane where the row allows); stage 1's
//     two factors are ranked at once, one per half-warp (rank_two: widths <= 256, 16 lanes x
//     pow2(w / 16) keys); sort_runs builds sorted runs of pow2(m) keys and keep_top_half folds
//     them into the top run (register_sort.cuh). The first lanes store the top run's keys (16-byte stores), then every
//     lane turns its share of the m entries into (column, value re-read from the row). At 16 keys
//     a lane, half-warps and runs of 64 (widths 129..256, k 33..64), the folds keep 8 and then 4
//     keys a lane (fold_halve, halve_top64) and each lane stores its 4 columns and values.
//     f32 keys hold only the score's upper bits (the column takes the low 6-9): a list they may
//     have misranked (f32_rank_inexact: two scores of one bucket next to each other, or a better
//     score in the last entry's bucket; about 4 % of the factors of normal scores) is ranked again
//     with 64-bit keys by the whole warp (rank_factor_wide, out of line).
//   - A stage holds ceil(pair_count(KMAX) / 32) candidates per lane from the constant pair table
//     (pair_table.cuh): 32-bit sum keys and 16-bit tie payloads in registers. The c-th largest key
//     is found by bisection with warp-wide counts (__reduce_add_sync, two instructions a key),
//     between the largest key(i, j) with (i + 1)(j + 1) == c (at least c keys are at or above it:
//     the sums are monotone in both ranks; 0 where no such pair is a candidate) and key(0, 0),
//     the largest; it stops as soon as exactly c keys are at or above the probe, and for 16-bit
//     inputs walks up from the smallest key once few extra keys remain (find_cut). Only when the
//     c-th key ties with others are the tied ones split by payload: the need-th largest payload
//     by up to 4 rounds of warp max (the usual 1-3 tied keys needed), else by bisection. The kept
//     candidates are compacted (ballot + popc) into shared memory, loaded back KMAX / 32 per lane
//     and sorted by one register network.
//   - Shared memory per warp: the running and factor lists (value, id) and the kept keys.
// Numerics: sums are __fadd_rn in float32 in factor order, one rounding per stored value; the
// keys and the tie rule are the CPU kernel's, so the selected slots and values are the same bits
// (a NaN stays a NaN; its payload is the hardware's). Deterministic: no atomics.
#pragma once

#include <cstdint>
#include <type_traits>

#include "core/float_convert.hpp"
#include "core/product_key_plan.hpp"
#include "cuda/topk/pair_table.cuh"
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
  std::uint64_t kept[KMAX + 1];  // score_key << 32 | payload of the kept candidates, in pick order;
                                // [KMAX]: where the dropped ones write (no branch)
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

// Top-run positions at .. at + N - 1 <- the keys k (in reverse order where rev): each key's column
// (Keys::column) and its value re-read from the row, 16-byte stores (at a multiple of 4).
template <typename S, typename Keys, int N, typename Key>
__device__ __forceinline__ void store_top_part(const Key (&k)[N], bool rev, int at, const typename S::Storage* x,
                                               float* val, std::uint32_t* col) {
  static_assert(N % 4 == 0);
#pragma unroll
  for (int q = 0; q < N / 4; ++q) {  // four at a time (register pressure)
    std::uint32_t c[4];
    float v[4];
#pragma unroll
    for (int t = 0; t < 4; ++t) {
      c[t] = Keys::column(rev ? k[N - 1 - 4 * q - t] : k[4 * q + t]);
      v[t] = S::load(x[c[t]]);
    }
    reinterpret_cast<uint4*>(col + at)[q] = make_uint4(c[0], c[1], c[2], c[3]);
    reinterpret_cast<float4*>(val + at)[q] = make_float4(v[0], v[1], v[2], v[3]);
  }
}

// Every group of run / M lanes holds the top run of keys: the first group stores them into
// col[0..run) (run <= KMAX), then the LANES lanes turn the first m into columns and values.
template <typename S, typename Keys, int M, int LANES, typename Key>
__device__ __forceinline__ void store_run(const Key (&key)[M], const typename S::Storage* x, int m, int run,
                                          float* val, std::uint32_t* col, int sub) {
  if (sub < run / M) {
    if constexpr (M % 4 == 0) {
      auto* to = reinterpret_cast<uint4*>(col + sub * M);
#pragma unroll
      for (int q = 0; q < M / 4; ++q) {
        to[q] = make_uint4(static_cast<std::uint32_t>(key[4 * q]), static_cast<std::uint32_t>(key[4 * q + 1]),
                           static_cast<std::uint32_t>(key[4 * q + 2]), static_cast<std::uint32_t>(key[4 * q + 3]));
      }
    } else {
#pragma unroll
      for (int r = 0; r < M; ++r) col[sub * M + r] = static_cast<std::uint32_t>(key[r]);
    }
  }
  __syncwarp();
  for (int g = sub; g < m; g += LANES) {
    const std::uint32_t c = Keys::column(col[g]);
    col[g] = c;
    val[g] = S::load(x[c]);
  }
  __syncwarp();
}

__host__ __device__ constexpr int log2_of(int x) { return x > 1 ? 1 + log2_of(x / 2) : 0; }

// Whether the list val[0..m) of an f32 factor ranked by truncated keys (FactorKeys: buckets of
// mask + 1 score keys) may differ from its exact rank, by the LANES lanes (`sub`: this lane's
// index) that ranked it: the list may differ where any of them returns true. It is exact when (W) no two
// neighbours in it are in one bucket with different scores and (B) no column of the row is in the
// last entry's bucket with a key above the last entry's (L): every bucket that meets the list then
// holds one score there, which the truncated keys order as the exact ones do (by column), and the
// columns of the last bucket left out rank below the last entry (a lower key, or L and a lower
// column). One pass over the list and one over the lane's columns (reloaded: the sort overwrote
// them), on raw bits (bucket_mixed, bucket_above).
template <int M, int LANES>
__device__ __forceinline__ bool f32_rank_inexact(const float* x, int width, int m, const float* val,
                                                 std::uint32_t mask, int sub) {
  bool inexact = false;
  for (int g = sub; g + 1 < m; g += LANES) {
    inexact |= bucket_mixed(core::float_bits(val[g]), core::float_bits(val[g + 1]), mask);
  }
  const BitsRange above = bucket_above(core::score_key(val[m - 1]), mask);
  float v[M];
  load_scores<F32Scores, M, LANES>(x, width, sub, v);  // +0 past the width: never above (bucket_above)
#pragma unroll
  for (int r = 0; r < M; ++r) inexact |= core::float_bits(v[r]) - above.base < above.span;
  return inexact;
}

// f32_rank_inexact where S's keys are truncated (f32), else false.
template <typename S, typename Keys, int M, int LANES>
__device__ __forceinline__ bool rank_inexact(const typename S::Storage* x, int width, int m, const float* val,
                                             int sub) {
  if constexpr (Keys::kExact) {
    return false;
  } else {
    return f32_rank_inexact<M, LANES>(x, width, m, val, Keys::kColumnMask, sub);
  }
}

// val / col [0..m): the m best columns of x[0..width), best first (width <= LANES * M, m <= KMAX),
// ranked by LANES lanes of the warp (`sub`: this lane's index among them) with M keys each. The
// sorted runs hold pow2(run_m) keys (run_m >= m; the same on every lane of the warp, whose shuffle
// networks run together). Returns f32_rank_inexact's answer for f32 scores (whose 32-bit keys are
// truncated), false for the others.
template <typename S, int M, int KMAX, int LANES>
__device__ __forceinline__ bool rank_columns(const typename S::Storage* x, int width, int m, int run_m, float* val,
                                             std::uint32_t* col, int sub, int lane) {
  using Keys = FactorKeys<S, log2_of(LANES * M)>;
  using Key = typename Keys::Key;
  float v[M];
  load_scores<S, M, LANES>(x, width, sub, v);
  Key key[M];
#pragma unroll
  for (int r = 0; r < M; ++r) key[r] = Keys::key(v[r], static_cast<std::uint32_t>(sub * M + r));
  if (width < (sub + 1) * M) {  // columns past the width: key 0, below every real key
#pragma unroll
    for (int r = 0; r < M; ++r) key[r] = sub * M + r < width ? key[r] : Key{0};
  }
  // The usual run (run_m > KMAX / 2) is a constant of the instantiation.
  constexpr int kRun = KMAX < LANES * M ? KMAX : LANES * M;
  const int run = run_m > kRun / 2 ? kRun : max(M, pow2_at_least(run_m));
  // Half-warps of 16 keys a lane folding runs of 64 keep only the top run's keys, spread over all
  // 16 lanes (fold_halve, halve_top64); every lane turns its share into columns and values from its
  // registers. (Runs of 128, one fold_halve<16>, made ptxas spill at KMAX 128: not taken.)
  constexpr bool kHalving = M == 16 && LANES == 16 && sizeof(Key) == 4 && kRun == 64;
  if (run == kRun) {
    sort_runs<M, kHalving ? kRun : 0>(key, kRun, true, lane);  // every merge unrolled on the halving path
    if constexpr (kHalving) {
      Key z[8], w[4];
      fold_halve<8>(key, z, sub);
      halve_top64(z, w, sub);
      const int q = (4 - sub / 4) & 3;
      const bool rev = q >= 2;
      const int g = rev ? 3 - sub % 4 : sub % 4;
      store_top_part<S, Keys>(w, rev, 16 * g + 4 * q, x, val, col);
      __syncwarp();
      return rank_inexact<S, Keys, M, LANES>(x, width, m, val, sub);
    } else {
      keep_top_half<M, LANES>(key, kRun, lane);
    }
  } else {
    sort_runs(key, run, true, lane);
    keep_top_half<M, LANES>(key, run, lane);
  }
  store_run<S, Keys, M, LANES>(key, x, m, run, val, col, sub);
  return rank_inexact<S, Keys, M, LANES>(x, width, m, val, sub);
}

// The whole warp ranks one factor; a lane returns true where the list may differ from the exact
// rank (f32).
template <typename S, int M, int KMAX>
__device__ bool rank_factor_in(const typename S::Storage* x, int width, int m, float* val, std::uint32_t* col,
                               int lane) {
  return rank_columns<S, M, KMAX, 32>(x, width, m, m, val, col, lane, lane);
}

template <typename S, int KMAX>
__device__ bool rank_factor_once(const typename S::Storage* x, int width, int m, float* val, std::uint32_t* col,
                                 int lane) {
  if (width <= 32) return rank_factor_in<S, 1, KMAX>(x, width, m, val, col, lane);
  if (width <= 64) return rank_factor_in<S, 2, KMAX>(x, width, m, val, col, lane);
  if (width <= 128) return rank_factor_in<S, 4, KMAX>(x, width, m, val, col, lane);
  if (width <= 256) return rank_factor_in<S, 8, KMAX>(x, width, m, val, col, lane);
  return rank_factor_in<S, 16, KMAX>(x, width, m, val, col, lane);
}

// An f32 factor whose 32-bit keys may have misranked it (f32_rank_inexact), ranked again with
// 64-bit keys by the whole warp. Rare on scores that are not crowded into a few buckets (a bucket
// spans 2^-15 .. 2^-14 of a score's magnitude at widths 129..512), so it stays out of line: the
// hot path's registers are not spent on its 64-bit networks.
template <int KMAX>
__device__ __noinline__ void rank_factor_wide(const float* x, int width, int m, float* val, std::uint32_t* col,
                                              int lane) {
  rank_factor_once<F32WideScores, KMAX>(x, width, m, val, col, lane);
}

template <typename S, int KMAX>
__device__ void rank_factor(const typename S::Storage* x, int width, int m, float* val, std::uint32_t* col, int lane) {
  const bool inexact = rank_factor_once<S, KMAX>(x, width, m, val, col, lane);
  if constexpr (std::is_same_v<S, F32Scores>) {
    if (__any_sync(kFullMask, inexact)) rank_factor_wide<KMAX>(x, width, m, val, col, lane);
  }
}

// Both factors of stage 1 at once, one per half-warp (widths <= 256): half h ranks factor h
// (columns of x + h * w0) with M = pow2(max width / 16) keys per lane, so a factor's network runs
// 16 lanes wide: half the shuffles of the whole-warp rank per factor, and the two factors'
// networks overlap. Half 0 writes the running list (val0 / col0), half 1 the factor list. Returns
// whether this lane's half may have misranked its factor (f32).
template <typename S, int M, int KMAX>
__device__ bool rank_two_in(const typename S::Storage* x, int w0, int w1, int m0, int m1, float* val0,
                            std::uint32_t* col0, float* val1, std::uint32_t* col1, int lane) {
  const int half = lane >> 4;
  return rank_columns<S, M, KMAX, 16>(half ? x + w0 : x, half ? w1 : w0, half ? m1 : m0, max(m0, m1),
                                      half ? val1 : val0, half ? col1 : col0, lane & 15, lane);
}

// Stage 1's two factors by half-warps when that fits (true), else nothing done (false).
template <typename S, int KMAX>
__device__ bool rank_two(const typename S::Storage* x, int w0, int w1, int m0, int m1, float* val0, std::uint32_t* col0,
                         float* val1, std::uint32_t* col1, int lane) {
  const int w = max(w0, w1);
  if (w > 256) return false;
  bool inexact;
  if (w <= 16) inexact = rank_two_in<S, 1, KMAX>(x, w0, w1, m0, m1, val0, col0, val1, col1, lane);
  else if (w <= 32) inexact = rank_two_in<S, 2, KMAX>(x, w0, w1, m0, m1, val0, col0, val1, col1, lane);
  else if (w <= 64) inexact = rank_two_in<S, 4, KMAX>(x, w0, w1, m0, m1, val0, col0, val1, col1, lane);
  else if (w <= 128) inexact = rank_two_in<S, 8, KMAX>(x, w0, w1, m0, m1, val0, col0, val1, col1, lane);
  else inexact = rank_two_in<S, 16, KMAX>(x, w0, w1, m0, m1, val0, col0, val1, col1, lane);
  if constexpr (std::is_same_v<S, F32Scores>) {
    const unsigned redo = __ballot_sync(kFullMask, inexact);
    if (redo & 0xffffu) rank_factor_wide<KMAX>(x, w0, m0, val0, col0, lane);
    if (redo >> 16) rank_factor_wide<KMAX>(x + w0, w1, m1, val1, col1, lane);
  }
  return true;
}

// The number of keys >= t over the warp. The predicated add keeps it at two instructions a key
// (a compare and an add; `local += key >= t` compiles to three).
template <int C>
__device__ __forceinline__ unsigned count_at_least(const std::uint32_t (&key)[C], std::uint32_t t) {
  unsigned local = 0;
#pragma unroll
  for (int q = 0; q < C; ++q) {
    asm("{\n .reg .pred p;\n setp.ge.u32 p, %1, %2;\n @p add.u32 %0, %0, 1;\n}" : "+r"(local) : "r"(key[q]), "r"(t));
  }
  return __reduce_add_sync(kFullMask, local);
}

// Where the c-th largest of the warp's keys lies: exact (exactly c keys are > key), or key is
// the c-th largest and `above` (< c) keys are > it, the rest of the c tied with it.
struct Cut {
  std::uint32_t key;
  unsigned above;
  bool exact;
};

// Bisection over [lo, hi) with count(lo) >= c > count(hi) (count(hi) = 0), stopping at an exact
// count. kExtract > 0: once count(lo) - c <= kExtract, the keys >= lo are walked up from the
// smallest instead (at most kExtract + 1 rounds of a warp min and a count): the sums of 16-bit
// inputs leave wide gaps between distinct keys, which the bisection otherwise halves one probe at
// a time (simulated at 2x256 k 64 bf16: 13.2 probes a row; with the walk, about 40 % fewer
// instructions in this search).
template <int kExtract, int C>
__device__ __forceinline__ Cut find_cut(const std::uint32_t (&key)[C], unsigned c, std::uint32_t lo, std::uint32_t hi) {
  unsigned lo_count = 0xffffffffu, hi_count = 0;
  while (hi - lo > 1u) {
    if constexpr (kExtract > 0) {
      if (lo_count - c <= static_cast<unsigned>(kExtract)) {
        for (;;) {
          std::uint32_t local = 0xffffffffu;
#pragma unroll
          for (int q = 0; q < C; ++q) local = min(local, key[q] >= lo ? key[q] : 0xffffffffu);
          const std::uint32_t v = __reduce_min_sync(kFullMask, local);
          const unsigned above = count_at_least(key, v + 1u);
          if (above <= c) return {v, above, above == c};
          lo = v + 1u;
        }
      }
    }
    const std::uint32_t mid = lo + (hi - lo) / 2u;
    const unsigned count = count_at_least(key, mid);
    if (count == c) return {mid - 1u, c, true};
    if (count > c) {
      lo = mid;
      lo_count = count;
    } else {
      hi = mid;
      hi_count = count;
    }
  }
  return {lo, hi_count, false};
}

// The need-th largest of the warp's tie codes (distinct where nonzero; 0 = not tied; at least
// `need` nonzero): a few rounds of "largest below the last one" when need is small (ties at the
// c-th key are mostly 2-4 candidates), else a bisection over the codes (< kPairCodes).
inline constexpr int kTieRounds = 4;
inline constexpr std::uint32_t kPairCodes = (kRegisterMaxK << 8) + 1u;
template <int C>
__device__ __forceinline__ std::uint32_t nth_largest_tie(const std::uint32_t (&tie)[C], unsigned need) {
  if (need <= static_cast<unsigned>(kTieRounds)) {
    std::uint32_t last = kPairCodes;
    for (unsigned round = 0; round < need; ++round) {
      std::uint32_t local = 0;
#pragma unroll
      for (int q = 0; q < C; ++q) local = max(local, tie[q] < last ? tie[q] : 0u);
      last = __reduce_max_sync(kFullMask, local);
    }
    return last;
  }
  std::uint32_t lo = 1, hi = kPairCodes;  // count(lo) >= need > count(hi)
  while (hi - lo > 1u) {
    const std::uint32_t mid = lo + (hi - lo) / 2u;
    const unsigned count = count_at_least(tie, mid);
    if (count == need) return mid;
    if (count > need) lo = mid;
    else hi = mid;
  }
  return lo;
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
      const auto pay = static_cast<std::uint32_t>(s.kept[g]);
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
  constexpr int kTable = pair_count(kPairTableRank);
  constexpr int C = (pair_count(KMAX) + 31) / 32;
  std::uint32_t sk[C], pay[C];
  std::uint32_t exact_key = 0;
#pragma unroll
  for (int q = 0; q < C; ++q) {
    const int t = q * 32 + lane;
    const bool in_table = (q + 1) * 32 <= kTable || t < kTable;  // a constant but for the last q
    const std::uint32_t code = in_table ? kPairTable.code[t] : 0xffffffffu;
    const int i = static_cast<int>(code >> 8 & 0xffu), j = static_cast<int>(code & 0xffu);
    const int product = (i + 1) * (j + 1);
    sk[q] = 0;
    if (in_table && product <= c && i < n && j < m) {
      sk[q] = core::score_key(__fadd_rn(s.run_val[i], s.fac_val[j]));
    }
    pay[q] = code >> 16;
    if (product == c) exact_key = max(exact_key, sk[q]);
  }
  // Invariant: count(lo) >= c > count(hi) (hi_count = count(hi)). The sums are monotone in both
  // ranks, so key(i, j) has at least (i + 1)(j + 1) candidates at or above it (the pairs
  // (i' <= i, j' <= j)): any candidate with (i + 1)(j + 1) == c bounds the c-th key from below
  // (where none is a candidate, 0: every slot counts); key(0, 0) is the largest key.
  const std::uint32_t lo = __reduce_max_sync(kFullMask, exact_key);
  const std::uint32_t hi = core::score_key(__fadd_rn(s.run_val[0], s.fac_val[0])) + 1u;
  constexpr int kExtract = sizeof(typename S::Storage) == 2 ? 4 : 0;
  const Cut cut = find_cut<kExtract>(sk, static_cast<unsigned>(c), lo, hi);
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
  int base = 0;
  const unsigned below = (1u << lane) - 1u;
#pragma unroll
  for (int q = 0; q < C; ++q) {
    const std::uint64_t kept = static_cast<std::uint64_t>(sk[q]) << 32 | pay[q];
    const bool keep = kept >= least;
    const unsigned ballot = __ballot_sync(kFullMask, keep);
    s.kept[keep ? base + __popc(ballot & below) : KMAX] = kept;
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

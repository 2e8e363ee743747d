// register_rank.cuh - the factor ranks of the product-key top-k forward (register_select.cuh):
// a factor's m best columns by (score_key(value), larger column on ties), best first, as (value,
// column) lists in shared memory, by one warp or by its two half-warps.
//
// A factor of width w sits in registers as 32-bit keys (score_types.cuh: FactorKeys), M =
// pow2(ceil(w / 32)) keys per lane (one vector load per lane where the row allows); stage 1's two
// factors are ranked at once, one per half-warp (rank_two: widths <= 256, 16 lanes x pow2(w / 16)
// keys); sort_runs builds sorted runs of pow2(m) keys and keep_top_half folds them into the top
// run (register_sort.cuh). The first lanes store the top run's keys (16-byte stores), then every
// lane turns its share of the m entries into (column, value re-read from the row). At 16 keys a
// lane, half-warps and runs of 64 (widths 129..256, k 33..64), the folds keep 8 and then 4 keys a
// lane (fold_halve, halve_top64) and each lane stores its 4 columns and values; widths 257..512 at
// k 33..64 stream two tiles of 256 columns through that path per half-warp and merge the two top
// runs (rank_two_tiles, merge_top64). On the half-warp paths of 16 keys a lane (widths 129..512),
// bf16 keys come from the raw halves of the loaded words (bf16_keys: no float conversion). f32
// keys hold only the score's upper bits (the column takes the low 6-9): a list they may have
// misranked (f32_rank_inexact: two scores of one bucket next to each other, or a better score in
// the last entry's bucket; about 4 % of the factors of normal scores) is ranked again with 64-bit
// keys by the whole warp (rank_factor_wide, out of line).
#pragma once

#include <cstdint>
#include <type_traits>

#include "core/float_convert.hpp"
#include "cuda/topk/register_sort.cuh"
#include "cuda/topk/score_types.cuh"

namespace sdm::cuda::topk {

__device__ __forceinline__ int pow2_at_least(int x) {
  int p = 1;
  while (p < x) p *= 2;
  return p;
}

// The M stored scores of lane `lane` (columns lane * M + r of x[0..width); 0, which loads as +0,
// past the width) as the words of `out` (Word: Storage, or 32 bits holding two 16-bit scores);
// one 16-byte load per 16 bytes where all LANES lanes' columns lie in the row and x is 16-byte
// aligned.
template <typename Storage, int M, int LANES = 32, typename Word = Storage>
__device__ __forceinline__ void load_raw(const Storage* x, int width, int lane,
                                         Word (&out)[M * sizeof(Storage) / sizeof(Word)]) {
  constexpr int kBytes = M * static_cast<int>(sizeof(Storage));
  if constexpr (kBytes % 16 == 0) {
    if (width >= LANES * M && (reinterpret_cast<std::uintptr_t>(x) & 15u) == 0) {
      uint4 chunk[kBytes / 16];
      const auto* from = reinterpret_cast<const uint4*>(x + lane * M);
#pragma unroll
      for (int q = 0; q < kBytes / 16; ++q) chunk[q] = from[q];
      __builtin_memcpy(out, chunk, kBytes);
      return;
    }
  }
  Storage s[M];
#pragma unroll
  for (int r = 0; r < M; ++r) {
    const int c = lane * M + r;
    s[r] = c < width ? x[c] : Storage{0};
  }
  __builtin_memcpy(out, s, kBytes);
}

// The M scores of lane `lane` as floats (load_raw: 0 past the width, which may be <= 0).
template <typename S, int M, int LANES = 32>
__device__ __forceinline__ void load_scores(const typename S::Storage* x, int width, int lane, float (&v)[M]) {
  typename S::Storage s[M];
  load_raw<typename S::Storage, M, LANES>(x, width, lane, s);
#pragma unroll
  for (int r = 0; r < M; ++r) v[r] = S::load(s[r]);
}

// The bf16 factor keys of the 2 W raw halves in w (columns column0 + r, half r % 2 of word r / 2,
// low first), FactorKeys<BF16Scores, b>'s bits (b <= 16) by bf16_high_key; a NaN half's key is
// fixed only where one packed test over the words (bf16_nan_carry) finds a NaN.
template <int W>
__device__ __forceinline__ void bf16_keys(const std::uint32_t (&w)[W], std::uint32_t column0,
                                          std::uint32_t (&key)[2 * W]) {
  std::uint32_t nan = 0;
#pragma unroll
  for (int p = 0; p < W; ++p) {
    key[2 * p] = bf16_high_key(w[p] << 16, column0 + 2 * p);
    key[2 * p + 1] = bf16_high_key(w[p], column0 + 2 * p + 1);
    nan |= bf16_nan_carry(w[p]);
  }
  if (nan & 0x80008000u) {
#pragma unroll
    for (int p = 0; p < W; ++p) {
      const std::uint32_t at = bf16_nan_carry(w[p]);
      if (at & 0x8000u) key[2 * p] = kBF16NanKey | (column0 + 2 * p);
      if (at & 0x80000000u) key[2 * p + 1] = kBF16NanKey | (column0 + 2 * p + 1);
    }
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

// The M factor keys of lane `sub`'s columns (column0 + r; load_raw's columns of x[0..width), whose
// scores past the width load as +0: the caller masks them): bf16 half-warps of 16 keys a lane take
// them from the raw halves (bf16_keys: no float conversion), every other shape from the floats.
template <typename S, typename Keys, int M, int LANES>
__device__ __forceinline__ void factor_keys(const typename S::Storage* x, int width, int sub, std::uint32_t column0,
                                            typename Keys::Key (&key)[M]) {
  if constexpr (M == 16 && LANES == 16 && std::is_same_v<S, BF16Scores>) {
    std::uint32_t w[M / 2];
    load_raw<std::uint16_t, M, LANES>(x, width, sub, w);
    bf16_keys(w, column0, key);
  } else {
    float v[M];
    load_scores<S, M, LANES>(x, width, sub, v);
#pragma unroll
    for (int r = 0; r < M; ++r) key[r] = Keys::key(v[r], column0 + static_cast<std::uint32_t>(r));
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
// them; TILES tiles of LANES * M columns), on raw bits (bucket_mixed, bucket_above).
template <int M, int LANES, int TILES = 1>
__device__ __forceinline__ bool f32_rank_inexact(const float* x, int width, int m, const float* val,
                                                 std::uint32_t mask, int sub) {
  bool inexact = false;
  for (int g = sub; g + 1 < m; g += LANES) {
    inexact |= bucket_mixed(core::float_bits(val[g]), core::float_bits(val[g + 1]), mask);
  }
  const BitsRange above = bucket_above(core::score_key(val[m - 1]), mask);
#pragma unroll
  for (int t = 0; t < TILES; ++t) {
    float v[M];
    // +0 past the width: never above (bucket_above)
    load_scores<F32Scores, M, LANES>(x + t * LANES * M, width - t * LANES * M, sub, v);
#pragma unroll
    for (int r = 0; r < M; ++r) inexact |= core::float_bits(v[r]) - above.base < above.span;
  }
  return inexact;
}

// f32_rank_inexact where S's keys are truncated (f32), else false.
template <typename S, typename Keys, int M, int LANES, int TILES = 1>
__device__ __forceinline__ bool rank_inexact(const typename S::Storage* x, int width, int m, const float* val,
                                             int sub) {
  if constexpr (Keys::kExact) {
    return false;
  } else {
    return f32_rank_inexact<M, LANES, TILES>(x, width, m, val, Keys::kColumnMask, sub);
  }
}

// The top 64 keys in clean_top64's layout (16 lanes x 4, `sub`: this lane's index) -> val / col
// [0..64): each lane's 4 columns and values.
template <typename S, typename Keys, typename Key>
__device__ __forceinline__ void store_top64(const Key (&w)[4], const typename S::Storage* x, float* val,
                                            std::uint32_t* col, int sub) {
  const int q = (4 - sub / 4) & 3;
  const bool rev = q >= 2;
  const int g = rev ? 3 - sub % 4 : sub % 4;
  store_top_part<S, Keys>(w, rev, 16 * g + 4 * q, x, val, col);
  __syncwarp();
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
  // Half-warps of 16 keys a lane folding runs of 64 keep only the top run's keys, spread over all
  // 16 lanes (fold_halve, halve_top64); every lane turns its share into columns and values from its
  // registers. (Runs of 128, one fold_halve<16>, made ptxas spill at KMAX 128: not taken.)
  constexpr int kRun = KMAX < LANES * M ? KMAX : LANES * M;
  constexpr bool kHalving = M == 16 && LANES == 16 && sizeof(Key) == 4 && kRun == 64;
  Key key[M];
  factor_keys<S, Keys, M, LANES>(x, width, sub, static_cast<std::uint32_t>(sub * M), key);
  if (width < (sub + 1) * M) {  // columns past the width: key 0, below every real key
#pragma unroll
    for (int r = 0; r < M; ++r) key[r] = sub * M + r < width ? key[r] : Key{0};
  }
  // The usual run (run_m > KMAX / 2) is a constant of the instantiation.
  const int run = run_m > kRun / 2 ? kRun : max(M, pow2_at_least(run_m));
  if (run == kRun) {
    sort_runs<M, kHalving ? kRun : 0>(key, kRun, true, lane);  // every merge unrolled on the halving path
    if constexpr (kHalving) {
      Key z[8], w[4];
      fold_halve<8>(key, z, sub);
      halve_top64(z, w, sub);
      store_top64<S, Keys>(w, x, val, col, sub);
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

// The top 64 keys of columns base .. base + 255 of x[0..width) (columns past the width: key 0), by
// the 16 lanes of a half-warp (`sub`), 16 keys a lane: sorted runs of 64, then fold_halve and
// halve_top64, as 4 keys a lane in clean_top64's layout. Keys carry the column (< 512).
template <typename S, typename Keys>
__device__ __forceinline__ void tile_top64(const typename S::Storage* x, int width, int base, int sub, int lane,
                                           typename Keys::Key (&w)[4]) {
  using Key = typename Keys::Key;
  Key key[16];
  factor_keys<S, Keys, 16, 16>(x + base, width - base, sub, static_cast<std::uint32_t>(base + sub * 16), key);
#pragma unroll
  for (int r = 0; r < 16; ++r) key[r] = base + sub * 16 + r < width ? key[r] : Key{0};
  sort_runs<16, 64>(key, 64, true, lane);
  Key z[8];
  fold_halve<8>(key, z, sub);
  halve_top64(z, w, sub);
}

// Stage 1's two factors of widths up to 512 at k 33..64 (KMAX 64), one per half-warp, in tiles of
// 256 columns: each tile's top 64 (tile_top64), the two merged (merge_top64), so a factor costs
// two of the 2x256 path's ranks and one merge, not the whole warp's networks over 512 keys.
// Half 0 writes the running list (val0 / col0), half 1 the factor list; returns whether this
// lane's half may have misranked its factor (f32).
template <typename S>
__device__ bool rank_two_tiles(const typename S::Storage* x, int w0, int w1, int m0, int m1, float* val0,
                               std::uint32_t* col0, float* val1, std::uint32_t* col1, int lane) {
  using Keys = FactorKeys<S, 9>;
  using Key = typename Keys::Key;
  const int half = lane >> 4, sub = lane & 15;
  const typename S::Storage* f = half ? x + w0 : x;
  const int width = half ? w1 : w0;
  float* val = half ? val1 : val0;
  std::uint32_t* col = half ? col1 : col0;
  Key top[4], next[4];
  tile_top64<S, Keys>(f, width, 0, sub, lane, top);
  tile_top64<S, Keys>(f, width, 256, sub, lane, next);
  merge_top64(top, next, sub);
  store_top64<S, Keys>(top, f, val, col, sub);
  return rank_inexact<S, Keys, 16, 16, 2>(f, width, half ? m1 : m0, val, sub);
}

// Stage 1's two factors by half-warps when that fits (true), else nothing done (false): widths up
// to 256, and 257..512 at KMAX 64 by rank_two_tiles (measured on the H100 at 2x512 k 64: the
// forward 1.2x faster than with the whole warp ranking each factor, bf16 and f32, docs/performance.md
// "Product-key top-k, stop 48"). Wider factors at KMAX 32 / 128, and every factor after stage 1's
// two, are ranked by the whole warp (rank_factor).
template <typename S, int KMAX>
__device__ bool rank_two(const typename S::Storage* x, int w0, int w1, int m0, int m1, float* val0, std::uint32_t* col0,
                         float* val1, std::uint32_t* col1, int lane) {
  const int w = max(w0, w1);
  bool inexact;
  if (w > 256) {
    if constexpr (KMAX != 64) {
      return false;
    } else {
      inexact = rank_two_tiles<S>(x, w0, w1, m0, m1, val0, col0, val1, col1, lane);
    }
  } else if (w <= 16) inexact = rank_two_in<S, 1, KMAX>(x, w0, w1, m0, m1, val0, col0, val1, col1, lane);
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

}  // namespace sdm::cuda::topk

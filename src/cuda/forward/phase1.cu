// phase1.cu - Phase 1 of the chunked forward (see phase1.hpp for the outputs and contracts).
//
// Kernels, in launch order:
//   (the write keys and their per-chunk sort: sort/entry_keys.hpp)
//   scan_groups      one CTA per chunk: the per-slot scans (L, k_eff, wcoef, gdecay) and the
//                    sorted / previous positions of every write entry
//   lookup_reads     one CTA per chunk: each read's last visible write of its slot, Lq and q_w
//   pair_products    one warp per chunk row i: A[i, :] and QK[i, :]
//   solve            one CTA per chunk: X = (I + diag(beta) A)^-1 fused with QX = tril(QK) X
// Each kernel's decomposition and order of sums is stated above its definition.
#include "cuda/forward/phase1.hpp"

#include "cuda/sort/entry_keys.hpp"
#include "core/log_decay.hpp"
#include "cuda/common/cuda_check.hpp"
#include "cuda/common/values.cuh"
#include "cuda/common/launch_bounds.cuh"

namespace sdm::cuda {
namespace {

// scan_groups and lookup_reads: one CTA per chunk. A chunk of at most
// kMaxStagedEntries write entries is staged in shared memory (kStaged), so the gathers and scatters
// that follow the sort's permutation hit shared memory and global memory sees coalesced accesses only;
// a larger chunk runs the same code on global memory.
constexpr int kChunkThreads = 1024;  // lookup_reads (<= 32 registers: 2 CTAs per SM)
constexpr int kScanThreads = 512;    // scan_groups (2 CTAs per SM: 50 registers, no spill; 40 spilled)
constexpr std::int64_t kMaxStagedEntries = 16384;
constexpr std::uint32_t kAfterPrev = 0x80000000u;  // scan_groups' staged place: "entry before it in its group"

bool staged_chunk(const Geometry& geo) { return geo.C * geo.W <= kMaxStagedEntries; }

// Entry u = i*W + w of chunk n: its tokens' place in the inputs. Token i of chunk n is input token
// p*T + t0 + i; entries of tokens inside T are the chunk's first valid_tokens*W.
struct ChunkTokens {
  std::int64_t p, t0, first_token;  // first_token = p*T + t0
  int valid_tokens;                 // tokens of the chunk inside T (>= 1: t0 < T)
};

__device__ __forceinline__ ChunkTokens chunk_tokens(const Geometry& geo, std::int64_t n) {
  const std::int64_t p = n % geo.P, t0 = (n / geo.P) * geo.C;
  return {p, t0, p * geo.T + t0, static_cast<int>(geo.T - t0 < geo.C ? geo.T - t0 : geo.C)};
}

constexpr int kStageItems = 2;  // staged elements per thread loaded before the first shared store

// scan_groups: one CTA of 512 threads per chunk; thread t takes sorted positions t, t + 512, ...
// (inv_pos and prev_pos of its entry); the first entry of each slot group walks the
// group in token order: L (f64 running sum of the floored log-decays, core/log_decay.hpp), k_eff =
// kappa expf(f32(L)), then wcoef = kappa expf(f32(Lambda - L)) and gdecay = expf(f32(Lambda)).
// Chunks of <= 16384
// entries first stage their kappa and gamma (coalesced, in entry order) in shared
// memory and collect inv_pos / prev_pos / k_eff there (each entry read and then
// overwritten by its group's walker alone), stored coalesced at the end; larger
// chunks gather and scatter in global memory.
// Dynamic shared memory (kStaged): coef[C*W] f32 (kappa of entry u, then its k_eff), code[C*W] u32
// (gamma of entry u when G = W, then its place: sorted position | kAfterPrev), token_gamma[C] f32
// (G = 1). Entry u is read and then overwritten by one thread only (the walker of its group).
template <bool kStaged>
__global__ void __launch_bounds__(kScanThreads, min_blocks(kScanThreads, 2)) scan_groups(Geometry geo, Inputs in, bool bf16_bank,
                                                             Phase1Buffers buf) {
  extern __shared__ std::uint32_t scan_words[];
  const int W = static_cast<int>(geo.W), CW = static_cast<int>(geo.C) * W;
  const std::int64_t n = blockIdx.x, base = n * CW;
  const ChunkTokens ct = chunk_tokens(geo, n);
  const bool per_lane_gamma = geo.G != 1;  // G = W
  float* coef = reinterpret_cast<float*>(scan_words);
  std::uint32_t* code = scan_words + CW;
  float* token_gamma = reinterpret_cast<float*>(scan_words + 2 * CW);
  const int tid = static_cast<int>(threadIdx.x);
  if constexpr (kStaged) {
    // Entry u's k_val and g (G = W) sit at input index first_token*W + u: coalesced.
    const int staged = ct.valid_tokens * W;
    const std::int64_t first = ct.first_token * geo.W;
    for (int u0 = tid; u0 < staged; u0 += kStageItems * kScanThreads) {
      float k_in[kStageItems], g_in[kStageItems];
#pragma unroll
      for (int b = 0; b < kStageItems; ++b) {
        const int u = u0 + b * kScanThreads;
        k_in[b] = u < staged ? load_input(in.k_val, in.k_val_dtype, first + u) : 0.0f;
        g_in[b] = u < staged && per_lane_gamma ? load_input(in.g, in.g_dtype, first + u) : 0.0f;
      }
#pragma unroll
      for (int b = 0; b < kStageItems; ++b) {
        const int u = u0 + b * kScanThreads;
        if (u < staged) {
          coef[u] = round_to_bank(k_in[b], bf16_bank);
          if (per_lane_gamma) code[u] = __float_as_uint(core::floor_log_decay(g_in[b]));
        }
      }
    }
    if (!per_lane_gamma) {
      for (int i = tid; i < ct.valid_tokens; i += kScanThreads) {
        token_gamma[i] = core::floor_log_decay(load_input(in.g, in.g_dtype, ct.first_token + i));
      }
    }
    __syncthreads();
  }
  // Entry u's gamma and kappa (a real entry: its token is inside T), and where its place goes.
  const auto gamma_kappa = [&](int u, int i, float& gamma, float& kappa) {
    if constexpr (kStaged) {
      gamma = per_lane_gamma ? __uint_as_float(code[u]) : token_gamma[i];
      kappa = coef[u];
    } else {
      const std::int64_t token = ct.first_token + i;
      gamma = core::floor_log_decay(load_input(in.g, in.g_dtype, per_lane_gamma ? token * geo.W + (u - i * W) : token));
      kappa = round_to_bank(load_input(in.k_val, in.k_val_dtype, token * geo.W + (u - i * W)), bf16_bank);
    }
  };
  const auto place = [&](int u, int s, bool after_prev, float k_eff) {
    if constexpr (kStaged) {
      coef[u] = k_eff;
      code[u] = static_cast<std::uint32_t>(s) | (after_prev ? kAfterPrev : 0u);
    } else {
      buf.inv_pos[base + u] = s;
      buf.prev_pos[base + u] = after_prev ? s - 1 : -1;
      buf.k_eff[base + u] = k_eff;
    }
  };

  const std::uint64_t* keys = buf.keys + base;
  for (int q = tid; q < CW; q += kScanThreads) {
    // The entry's key and its neighbours' (coalesced), issued together.
    const std::uint64_t key = keys[q];
    const std::uint64_t prev_key = q > 0 ? keys[q - 1] : 0, next_key = q + 1 < CW ? keys[q + 1] : 0;
    const std::int64_t local = geo.keys.local_slot(key);
    if (local == geo.sps) {
      // Padding / masked entries join no group; their sorted coefficients are defined as 0 so that
      // kernels that load a warp's coefficients before testing membership read initialised memory
      // (and L, kappa too: the saving forward writes every byte of `saved`, saved/layout.hpp).
      const int i = static_cast<int>(geo.keys.token(key));
      place(i * W + static_cast<int>(geo.keys.lane(key)), q, false, 0.0f);
      buf.wcoef[base + q] = 0.0f;
      buf.gdecay[base + q] = 0.0f;
      buf.L[base + q] = 0.0;
      buf.kappa[base + q] = 0.0f;
      continue;
    }
    if (q > 0 && geo.keys.local_slot(prev_key) == local) continue;  // its group's first entry places it

    // The group's first entry walks it in token order (sorted order).
    double lambda = 0.0;  // running Lambda_s(i): f64, token order, this chunk only (segmented scan)
    double first_L = 0.0;  // entry q's, kept for the second pass
    float first_kappa = 0.0f;
    int end = q;
    for (; end < CW; ++end) {
      const std::uint64_t k = end == q ? key : end == q + 1 ? next_key : keys[end];
      if (geo.keys.local_slot(k) != local) break;
      const int i = static_cast<int>(geo.keys.token(k)), u = i * W + static_cast<int>(geo.keys.lane(k));
      float gamma, kappa;
      gamma_kappa(u, i, gamma, kappa);
      lambda += gamma;
      buf.L[base + end] = lambda;
      buf.kappa[base + end] = kappa;
      place(u, end, end > q, kappa * core::decay_factor(lambda));
      if (end == q) first_L = lambda, first_kappa = kappa;
    }
    const float total_decay = core::decay_factor(lambda);
    for (int s = q; s < end; ++s) {
      const double L_s = s == q ? first_L : buf.L[base + s];
      const float kappa_s = s == q ? first_kappa : buf.kappa[base + s];
      buf.wcoef[base + s] = kappa_s * core::decay_factor(lambda - L_s);
      buf.gdecay[base + s] = total_decay;
    }
  }
  if constexpr (kStaged) {
    __syncthreads();
    for (int u = tid; u < CW; u += kScanThreads) {
      const std::uint32_t c = code[u];
      const std::int32_t s = static_cast<std::int32_t>(c & ~kAfterPrev);
      buf.inv_pos[base + u] = s;
      buf.prev_pos[base + u] = (c & kAfterPrev) != 0 ? s - 1 : -1;
      buf.k_eff[base + u] = coef[u];
    }
  }
}

constexpr int kReadItems = 2;  // reads per thread whose inputs are loaded before the first search

// lookup_reads: one CTA of 1024 threads per chunk; thread t takes reads t, t + 1024, ...: binary
// search of the last write of its slot at or before its token (reads come after the
// token's writes), Lq and q_w = rho expf(f32(Lq)). The inputs of 2 reads are loaded before the
// first search. Chunks of <= 16384 write entries search their sorted keys (and read f32(L))
// staged in shared memory, larger ones in global memory.
// Dynamic shared memory (kStaged): the chunk's sorted keys u64 [C*W], then f32(L) [C*W] (staged at
// group positions only: L is written there alone).
template <bool kStaged>
__global__ void __launch_bounds__(kChunkThreads, min_blocks(kChunkThreads, 2)) lookup_reads(Geometry geo, Inputs in, bool bf16_bank,
                                                              Phase1Buffers buf) {
  extern __shared__ std::uint64_t lookup_keys[];
  const int R = static_cast<int>(geo.R), CW = static_cast<int>(geo.C * geo.W), CR = static_cast<int>(geo.C) * R;
  const std::int64_t n = blockIdx.x;
  const ChunkTokens ct = chunk_tokens(geo, n);
  const int tid = static_cast<int>(threadIdx.x);
  const std::uint64_t* keys = buf.keys + n * CW;
  const double* L = buf.L + n * CW;
  float* staged_L = reinterpret_cast<float*>(lookup_keys + CW);  // kStaged only
  if constexpr (kStaged) {
    for (int q = tid; q < CW; q += kChunkThreads) {
      const std::uint64_t key = keys[q];
      lookup_keys[q] = key;
      if (geo.keys.local_slot(key) != geo.sps) staged_L[q] = static_cast<float>(L[q]);
    }
    __syncthreads();
    keys = lookup_keys;
  }
  const int valid_reads = ct.valid_tokens * R;  // reads of tokens inside T: the chunk's first ones
  const std::int64_t first = ct.first_token * geo.R;
  for (int x0 = tid; x0 < CR; x0 += kReadItems * kChunkThreads) {
    std::int64_t idx[kReadItems];
    float q_in[kReadItems];
#pragma unroll
    for (int b = 0; b < kReadItems; ++b) {
      const int x = x0 + b * kChunkThreads;
      idx[b] = x < valid_reads ? load_index(in.q_idx, in.q_index64, first + x) : -1;
      q_in[b] = x < valid_reads ? load_input(in.q_val, in.q_val_dtype, first + x) : 0.0f;
    }
#pragma unroll
    for (int b = 0; b < kReadItems; ++b) {
      const int x = x0 + b * kChunkThreads;
      if (x >= CR) break;
      const int i = x / R;
      std::int32_t slot = -1, pos = -1;
      float rho = 0.0f, weight = 0.0f;
      const std::int64_t local = idx[b] - ct.p * geo.sps;
      if (x < valid_reads && local >= 0 && local < geo.sps) {
        slot = static_cast<std::int32_t>(idx[b]);
        rho = round_to_bank(q_in[b], bf16_bank);
        // Count the chunk's keys <= (local, i, last lane): the last one is the latest write of
        // this slot at or before token i, if its slot matches.
        const std::uint64_t bound = geo.keys.encode(n, local, i, (std::int64_t{1} << geo.keys.lane_bits) - 1);
        int lo = 0, hi = CW;
        while (lo < hi) {
          const int mid = (lo + hi) / 2;
          if (keys[mid] <= bound) lo = mid + 1;
          else hi = mid;
        }
        float lq = 0.0f;
        if (lo > 0 && geo.keys.local_slot(keys[lo - 1]) == local) {
          pos = lo - 1;
          lq = kStaged ? staged_L[pos] : static_cast<float>(L[pos]);
        }
        weight = rho * expf(lq);
      }
      const std::int64_t e = n * CR + x;
      buf.q_slot[e] = slot;
      buf.q_pos[e] = pos;
      buf.q_rho[e] = rho;
      buf.q_w[e] = weight;
    }
  }
}

// ---- pair_products -------------------------------------------------------------------------

constexpr unsigned kFullMask = 0xffffffffu;
constexpr int kPairWarps = 8;  // chunk rows per pair_products CTA

// One chunk's sorted write records (Phase 1's keys, L, kappa of chunk n).
struct ChunkRecords {
  const std::uint64_t* keys;
  const double* L;
  const float* kappa;
  KeyLayout layout;
};

// One lane's walk down a slot group: it visits the entries at sorted positions s, s - 1, ...
// while they hold slot `local` and adds, for each with token j < limit,
//   row[j] = fmaf(coef * kappa_s, expf(f32(log_w - L_s)), row[j])   (log_w = L[anchor], L_s f64).
// The first term (token j, weight = coef * kappa_s, decay = expf(f32(log_w - L_s))) is evaluated when
// the walk is gathered; the rest (rare: a slot written again in the chunk) reload log_w from L.
// Only f32 values and positions are kept per item (no f64 in registers across the batch).
// s < 0: no walk.
struct Walk {
  int s = -1, local = 0, j = 0;  // in-chunk position, local slot (< 2^31: slots are i32), token
  int anchor = 0;                // sorted position whose L is log_w
  float coef = 0.0f, weight = 0.0f, decay = 0.0f;
  bool more = false;  // entry s - 1 holds the same slot
};

constexpr int kPairBatch = 4;  // walk items per lane gathered before any of them is added

// Item k of row `row` for this lane: k < ceil(W / 32) is write lane w = 32 k + lane (A: entry
// (i, w) walks its group from the entry before it, prev_pos), then read lane r = 32 (k - ceil(W /
// 32)) + lane (QK: read (i, r) walks its group from its last visible write, q_pos). A walk is
// gathered in two rounds of loads, each issued for every item of a batch before any result is
// used: the walk's start s (coalesced; s < 0, the common case: no walk and no further load), then
// the records of a walking lane (load_walk).
struct ItemStart {
  int s = -1;  // sorted position where the walk starts; -1: no walk
  float rho = 0.0f;
};

__device__ __forceinline__ ItemStart item_start(const Geometry& geo, const Phase1Buffers& buf, std::int64_t row,
                                                int item, int write_items, int lane) {
  ItemStart at;
  if (item < write_items) {
    const std::int64_t w = 32 * static_cast<std::int64_t>(item) + lane;
    if (w < geo.W) at.s = buf.prev_pos[row * geo.W + w];
  } else {
    const std::int64_t r = 32 * static_cast<std::int64_t>(item - write_items) + lane;
    if (r < geo.R) {
      at.s = buf.q_pos[row * geo.R + r];
      at.rho = buf.q_rho[row * geo.R + r];
    }
  }
  return at;
}

// The walk of an item starting at s: key and kappa at s, the key at s - 1 (slot test only), and
// the walk's anchor: a write walks from the entry after s (coef = its kappa, log_w = its L), a
// read from its last visible write s itself (coef = rho, log_w = L_s). The first term's exponent
// log_w - L_s is formed in f64 and rounded once to f32 (decay_factor).
__device__ __forceinline__ Walk load_walk(const ChunkRecords& rec, const ItemStart& at, bool is_read) {
  Walk walk;
  const int s = at.s;
  if (s < 0) return walk;
  const std::uint64_t key = rec.keys[s];
  const std::uint64_t key_before = s > 0 ? rec.keys[s - 1] : 0;
  walk.s = s;
  walk.anchor = is_read ? s : s + 1;
  walk.coef = is_read ? at.rho : rec.kappa[s + 1];
  walk.weight = walk.coef * rec.kappa[s];
  walk.decay = core::decay_factor(rec.L[walk.anchor] - rec.L[s]);
  walk.local = static_cast<int>(rec.layout.local_slot(key));
  walk.j = static_cast<int>(rec.layout.token(key));
  walk.more = s > 0 && rec.layout.local_slot(key_before) == walk.local;
  return walk;
}

// Adds the walks of one item, lane by lane in ascending lane order, each lane finishing its whole
// walk (further terms, rare, loaded on the way) before the next lane starts. So row[j] receives
// its terms in (lane ascending, sorted position descending) order, whatever the timing.
__device__ __forceinline__ void add_walks(const ChunkRecords& rec, const Walk& walk, std::int64_t limit, float* row,
                                          int lane) {
  for (unsigned todo = __ballot_sync(kFullMask, walk.s >= 0); todo != 0; todo &= todo - 1) {
    if (lane == __ffs(static_cast<int>(todo)) - 1) {
      if (walk.j < limit) row[walk.j] = fmaf(walk.weight, walk.decay, row[walk.j]);
      const double log_w = walk.more ? rec.L[walk.anchor] : 0.0;
      for (int t = walk.s - 1; walk.more && t >= 0 && rec.layout.local_slot(rec.keys[t]) == walk.local;
           --t) {
        const int jt = static_cast<int>(rec.layout.token(rec.keys[t]));
        if (jt < limit) row[jt] = fmaf(walk.coef * rec.kappa[t], core::decay_factor(log_w - rec.L[t]), row[jt]);
      }
    }
    __syncwarp();
  }
}

// pair_products: one warp per chunk row i (8 rows per CTA): A[i, :] (strictly lower) and QK[i, :]
// (lower incl. diagonal) accumulated in shared memory, then stored whole (zeros
// included). Lane l takes token i's write lanes w = l, l+32, ... (then its reads
// r = l, l+32, ...); each walks its slot group backwards (add_walks). The terms of
// a row are added in the order: lanes w ascending (then reads r ascending), within
// one lane the group entries by descending sorted position (descending token).
// The walk starts (prev_pos / q_pos, coalesced) of up to 4 items (w or r blocks
// of 32) per lane are loaded first, then the first terms of the lanes that walk
// (few: most entries are alone in their slot within a chunk), each round issued
// for all items before any result is used (latency, not order).
// 4 CTAs per SM: 64 registers; a latency-bound kernel, occupancy first.
__global__ void __launch_bounds__(kPairWarps * 32, min_blocks(kPairWarps * 32, 4)) pair_products(Geometry geo, Phase1Buffers buf) {
  extern __shared__ float pair_rows[];  // per warp: its A row [C], then its QK row [C]
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const std::int64_t C = geo.C, CW = C * geo.W;
  const std::int64_t row = static_cast<std::int64_t>(blockIdx.x) * kPairWarps + warp;  // n*C + i
  if (row >= geo.N * C) return;  // whole warps; no CTA barrier below
  const std::int64_t n = row / C, i = row % C;
  float* a_row = pair_rows + 2 * C * warp;
  float* qk_row = a_row + C;
  for (std::int64_t j = lane; j < C; j += 32) a_row[j] = 0.0f, qk_row[j] = 0.0f;
  __syncwarp();
  const ChunkRecords rec{buf.keys + n * CW, buf.L + n * CW, buf.kappa + n * CW, geo.keys};

  // A[i, j] = sum over slots shared by tokens i > j of kappa_e kappa_e' expf(f32(L_e - L_e')): the
  // write items, w ascending. QK[i, j] = sum over reads of token i and writes of token j <= i to
  // the same slot of rho kappa_e' expf(f32(Lq - L_e')): then the read items, r ascending.
  const int write_items = static_cast<int>((geo.W + 31) / 32);
  const int items = write_items + static_cast<int>((geo.R + 31) / 32);
  for (int first = 0; first < items; first += kPairBatch) {
    ItemStart at[kPairBatch];
#pragma unroll
    for (int k = 0; k < kPairBatch; ++k) {
      if (first + k < items) at[k] = item_start(geo, buf, row, first + k, write_items, lane);
    }
    Walk walks[kPairBatch];
#pragma unroll
    for (int k = 0; k < kPairBatch; ++k) walks[k] = load_walk(rec, at[k], first + k >= write_items);
#pragma unroll
    for (int k = 0; k < kPairBatch; ++k) {
      if (first + k >= items) break;  // warp-uniform
      const bool is_read = first + k >= write_items;
      add_walks(rec, walks[k], is_read ? i + 1 : i, is_read ? qk_row : a_row, lane);
    }
  }
  __syncwarp();
  for (std::int64_t j = lane; j < C; j += 32) {
    buf.A[row * C + j] = a_row[j];
    buf.QK[row * C + j] = qk_row[j];
  }
}

// ---- solve -----------------------------------------------------------------------------------

constexpr int kSolveWarps = 16;       // columns in flight per chunk
constexpr int kStagedMaxChunk = 64;   // C up to this: A, QK, X, QX of the chunk in shared memory
constexpr int kStageBatch = 8;        // elements per thread and matrix loaded at once when staging

// Column k of X and QX for one chunk, by one warp; lane l owns rows l, l + 32, ... (kRows of them,
// 32 * kRows >= C). Right-looking forward substitution: at step j = k, k+1, ..., the owner of row
// j finalises x_j = X[j, k] (1 at j == k, else -(beta_j s_j), 0 for a padding row), broadcasts it
// by a shuffle, and every row i > j adds s_i = fmaf(A[i, j], x_j, s_i) and every row i >= j adds
// q_i = fmaf(QK[i, j], x_j, q_i). So s_i = sum_{j in [k, i)} and q_i = QX[i, k] = sum_{j in [k, i]},
// each from +0 in j ascending order: the sums of the textbook left-looking column solve, bit for
// bit. A, QK: row stride lda; X, QX: row stride ldx (shared or global memory).
template <int kRows>
__device__ __forceinline__ void solve_column(const float* A, const float* QK, int lda, float* X, float* QX, int ldx,
                                             int C, int k, int lane, const float (&beta)[kRows],
                                             const bool (&valid)[kRows]) {
  float s[kRows], q[kRows];
#pragma unroll
  for (int m = 0; m < kRows; ++m) s[m] = 0.0f, q[m] = 0.0f;
#pragma unroll
  for (int mj = 0; mj < kRows; ++mj) {  // the block of 32 rows holding step j
    const int base = 32 * mj, own_row = base + lane;
    const int jj_end = C - base < 32 ? C - base : 32;
    for (int jj = k - base > 0 ? k - base : 0; jj < jj_end; ++jj) {  // warp-uniform bounds
      const int j = base + jj;
      const float own = own_row == k ? 1.0f : (valid[mj] ? -(beta[mj] * s[mj]) : 0.0f);
      const float x = __shfl_sync(kFullMask, own, jj);
      if (lane >= jj && own_row < C) {
        if (lane > jj) s[mj] = fmaf(A[own_row * lda + j], x, s[mj]);
        q[mj] = fmaf(QK[own_row * lda + j], x, q[mj]);
      }
#pragma unroll
      for (int m = mj + 1; m < kRows; ++m) {  // rows all > j
        const int i = 32 * m + lane;
        if (i < C) {
          s[m] = fmaf(A[i * lda + j], x, s[m]);
          q[m] = fmaf(QK[i * lda + j], x, q[m]);
        }
      }
    }
  }
#pragma unroll
  for (int m = 0; m < kRows; ++m) {
    const int i = 32 * m + lane;
    if (i >= C) break;
    X[i * ldx + k] = i < k ? 0.0f : i == k ? 1.0f : (valid[m] ? -(beta[m] * s[m]) : 0.0f);
    QX[i * ldx + k] = q[m];
  }
}

static_assert(8 * 32 >= core::kMaxChunk, "solve's global-memory instantiation covers every chunk size");

// solve: one CTA per chunk, one warp per column k (zig-zag over 16 warps), lanes over
// rows: right-looking forward substitution for column k of X = (I + diag(beta)
// A)^-1 fused with QX = tril(QK) X (solve_column); every sum from +0 over j
// ascending, bitwise the left-looking column solve. C <= 64: A, QK, X, QX staged
// in shared memory (odd row stride), X / QX stored coalesced; larger C: the same
// code on global memory.
template <int kRows, bool kStaged>
__global__ void __launch_bounds__(kSolveWarps * 32) solve(Geometry geo, Inputs in, Phase1Buffers buf) {
  extern __shared__ float solve_tiles[];  // kStaged: A, QK, X, QX, each [C][C | 1]
  const int C = static_cast<int>(geo.C);
  const std::int64_t n = blockIdx.x, cc = static_cast<std::int64_t>(C) * C;
  const std::int64_t p = n % geo.P, t0 = (n / geo.P) * C;
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int warps = static_cast<int>(blockDim.x) / 32;
  float beta[kRows];
  bool valid[kRows];
#pragma unroll
  for (int m = 0; m < kRows; ++m) {
    const int i = 32 * m + lane;
    valid[m] = i < C && t0 + i < geo.T;
    beta[m] = valid[m] ? load_input(in.beta, in.beta_dtype, p * geo.T + t0 + i) : 0.0f;
  }
  const float* A = buf.A + n * cc;
  const float* QK = buf.QK + n * cc;
  float* X = buf.X + n * cc;
  float* QX = buf.QX + n * cc;
  int ld = C;
  if constexpr (kStaged) {  // odd row stride: a warp's 32 rows of one column hit 32 banks
    ld = C | 1;
    float* As = solve_tiles;
    float* QKs = As + C * ld;
    // All of a thread's loads (kStageBatch per matrix) are issued before its first shared store.
    const int threads = static_cast<int>(blockDim.x);
    for (int o0 = static_cast<int>(threadIdx.x); o0 < C * C; o0 += kStageBatch * threads) {
      float a[kStageBatch], qk[kStageBatch];
#pragma unroll
      for (int b = 0; b < kStageBatch; ++b) {
        const int o = o0 + b * threads;
        a[b] = o < C * C ? A[o] : 0.0f;
        qk[b] = o < C * C ? QK[o] : 0.0f;
      }
#pragma unroll
      for (int b = 0; b < kStageBatch; ++b) {
        const int o = o0 + b * threads;
        if (o < C * C) As[o / C * ld + o % C] = a[b], QKs[o / C * ld + o % C] = qk[b];
      }
    }
    __syncthreads();
    A = As, QK = QKs, X = QKs + C * ld, QX = X + C * ld;
  }
  // Columns zig-zag over the warps (round r: warp w takes r*warps + w, or r*warps + warps-1-w when
  // r is odd) so that the long (left) and short (right) columns even out.
  for (int round = 0; round * warps < C; ++round) {
    const int k = round * warps + (round % 2 == 0 ? warp : warps - 1 - warp);
    if (k < C) solve_column<kRows>(A, QK, ld, X, QX, ld, C, k, lane, beta, valid);
  }
  if constexpr (kStaged) {
    __syncthreads();
    float* Xg = buf.X + n * cc;
    float* QXg = buf.QX + n * cc;
    for (int o = static_cast<int>(threadIdx.x); o < C * C; o += static_cast<int>(blockDim.x)) {
      Xg[o] = X[o / C * ld + o % C];
      QXg[o] = QX[o / C * ld + o % C];
    }
  }
}

template <int kRows, bool kStaged>
void launch_solve(const Geometry& geo, const Inputs& in, const Phase1Buffers& buf, cudaStream_t stream) {
  const auto kernel = solve<kRows, kStaged>;
  const std::size_t smem = kStaged ? 4 * static_cast<std::size_t>(geo.C * (geo.C | 1)) * sizeof(float) : 0;
  if (smem > 48 * 1024) {
    check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)),
               "cudaFuncSetAttribute (solve shared memory)");
  }
  const unsigned threads = 32u * static_cast<unsigned>(geo.C < kSolveWarps ? geo.C : kSolveWarps);
  kernel<<<static_cast<unsigned>(geo.N), threads, smem, stream>>>(geo, in, buf);
  check_launch("solve");
}

// One CTA of `threads` per chunk with `smem` bytes of dynamic shared memory (scan_groups,
// lookup_reads).
using ChunkKernel = void (*)(Geometry, Inputs, bool, Phase1Buffers);
void launch_per_chunk(ChunkKernel kernel, int threads, std::size_t smem, const char* name, const Geometry& geo, const Inputs& in,
                      bool bf16_bank, const Phase1Buffers& buf, cudaStream_t stream) {
  if (smem > 48 * 1024) {
    check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)),
               "cudaFuncSetAttribute (Phase 1 shared memory)");
  }
  kernel<<<static_cast<unsigned>(geo.N), static_cast<unsigned>(threads), smem, stream>>>(geo, in, bf16_bank, buf);
  check_launch(name);
}

}  // namespace

void plan_phase1_kept(const Geometry& geo, Workspace& ws, Phase1Buffers& buf) {
  const std::int64_t ew = geo.write_entries(), er = geo.read_entries(), cc = geo.N * geo.C * geo.C;
  ws.plan(&buf.keys, ew);
  ws.plan(&buf.L, ew);
  ws.plan(&buf.kappa, ew);
  ws.plan(&buf.wcoef, ew);
  ws.plan(&buf.gdecay, ew);
  ws.plan(&buf.inv_pos, ew);
  ws.plan(&buf.k_slot, ew);
  ws.plan(&buf.k_eff, ew);
  ws.plan(&buf.q_slot, er);
  ws.plan(&buf.q_pos, er);
  ws.plan(&buf.q_rho, er);
  ws.plan(&buf.q_w, er);
  ws.plan(&buf.A, cc);
  ws.plan(&buf.QK, cc);
  ws.plan(&buf.X, cc);
}

void plan_phase1_forward_only(const Geometry& geo, Workspace& ws, Phase1Buffers& buf) {
  ws.plan(&buf.keys_unsorted, geo.write_entries());
  ws.plan(&buf.prev_pos, geo.write_entries());
  ws.plan(&buf.QX, geo.N * geo.C * geo.C);
  buf.sort_temp_bytes = entry_key_sort_bytes(geo, geo.keys, geo.W);
  ws.plan_bytes(&buf.sort_temp, buf.sort_temp_bytes);
}

void run_phase1(const Geometry& geo, const Inputs& in, bool bf16_bank, const Phase1Buffers& buf,
                cudaStream_t stream) {
  sort_write_keys(geo, in, buf.keys_unsorted, buf.keys, buf.k_slot, buf.sort_temp, stream);
  const bool staged = staged_chunk(geo);
  launch_per_chunk(staged ? scan_groups<true> : scan_groups<false>, kScanThreads,
                   staged ? static_cast<std::size_t>(2 * geo.C * geo.W + geo.C) * sizeof(std::uint32_t) : 0,
                   "scan_groups", geo, in, bf16_bank, buf, stream);
  launch_per_chunk(staged ? lookup_reads<true> : lookup_reads<false>, kChunkThreads,
                   staged ? static_cast<std::size_t>(geo.C * geo.W) * (sizeof(std::uint64_t) + sizeof(float)) : 0,
                   "lookup_reads", geo, in, bf16_bank, buf, stream);
  const std::int64_t chunk_rows = geo.N * geo.C;
  const std::size_t pair_smem = 2 * static_cast<std::size_t>(geo.C) * kPairWarps * sizeof(float);
  pair_products<<<static_cast<unsigned>((chunk_rows + kPairWarps - 1) / kPairWarps), kPairWarps * 32, pair_smem,
                  stream>>>(geo, buf);
  check_launch("pair_products");
  if (geo.C <= kStagedMaxChunk) launch_solve<2, true>(geo, in, buf, stream);
  else launch_solve<8, false>(geo, in, buf, stream);
}

}  // namespace sdm::cuda

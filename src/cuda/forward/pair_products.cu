// pair_products.cu - Phase 1's pair matrices per chunk (docs/spec.md §2), from the sorted write
// records (keys, L, kappa), prev_pos, q_pos and q_rho:
//   A[i, j]  = sum over slots written by tokens i > j of kappa_e kappa_e' expf(f32(L_e - L_e'))
//   QK[i, j] = sum over reads of token i and writes of token j <= i to the same slot of
//              rho kappa_e' expf(f32(Lq - L_e'))
// A f32 [N, C, C] strictly lower, QK f32 [N, C, C] lower incl. the diagonal; zeros elsewhere.
// One warp per chunk row i (pair_products, below); every term one fmaf from +0, added in lane
// order, then by descending token within a slot group, whatever the timing. No atomics.
#include "core/log_decay.hpp"
#include "cuda/common/cuda_check.hpp"
#include "cuda/common/launch_bounds.cuh"
#include "cuda/forward/phase1_kernels.hpp"

namespace sdm::cuda {
namespace {

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
// the walk is gathered; the rest (a slot written again in the chunk) are taken by the whole warp
// (add_walks), with log_w reloaded from L.
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

// Adds the walks of one item, lane by lane in ascending lane order, each lane's whole walk before
// the next lane's. A walk's further entries (a slot written again in the chunk) are taken by the
// whole warp, 32 at a time: lane l takes sorted position top - l, and the entries up to the first
// one of another slot add their terms at once. Within one walk every entry has another token (a
// token writes a slot at most once), so no two of those adds touch the same row element, and
// row[j] still receives its terms in (lane ascending, sorted position descending) order.
__device__ __forceinline__ void add_walks(const ChunkRecords& rec, const Walk& walk, std::int64_t limit, float* row,
                                          int lane) {
  for (unsigned todo = __ballot_sync(kFullMask, walk.s >= 0); todo != 0; todo &= todo - 1) {
    const int owner = __ffs(static_cast<int>(todo)) - 1;
    if (lane == owner && walk.j < limit) row[walk.j] = fmaf(walk.weight, walk.decay, row[walk.j]);
    if (__shfl_sync(kFullMask, walk.more, owner)) {
      const int s = __shfl_sync(kFullMask, walk.s, owner), local = __shfl_sync(kFullMask, walk.local, owner);
      const float coef = __shfl_sync(kFullMask, walk.coef, owner);
      const double log_w = rec.L[__shfl_sync(kFullMask, walk.anchor, owner)];
      for (int top = s - 1;; top -= 32) {
        const int t = top - lane;
        const std::uint64_t key = t >= 0 ? rec.keys[t] : 0;
        const bool same_slot = t >= 0 && rec.layout.local_slot(key) == local;
        const unsigned match = __ballot_sync(kFullMask, same_slot);
        // The walk's entries: the lanes before the first one of another slot.
        const bool in_walk = match == kFullMask || lane < __ffs(static_cast<int>(~match)) - 1;
        if (in_walk) {
          const int jt = static_cast<int>(rec.layout.token(key));
          if (jt < limit) row[jt] = fmaf(coef * rec.kappa[t], core::decay_factor(log_w - rec.L[t]), row[jt]);
        }
        if (match != kFullMask) break;
      }
    }
    __syncwarp();
  }
}

// pair_products: one warp per chunk row i (8 rows per CTA): A[i, :] (strictly lower) and QK[i, :]
// (lower incl. diagonal) accumulated in shared memory, then stored whole (zeros
// included). Lane l takes token i's write lanes w = l, l+32, ... (then its reads
// r = l, l+32, ...); each walks its slot group backwards (add_walks: the warp takes a walk's
// further entries 32 at a time). The terms of
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

}  // namespace

void launch_pair_products(const Geometry& geo, const Phase1Buffers& buf, cudaStream_t stream) {
  const std::int64_t chunk_rows = geo.N * geo.C;
  const std::size_t smem = 2 * static_cast<std::size_t>(geo.C) * kPairWarps * sizeof(float);
  pair_products<<<static_cast<unsigned>((chunk_rows + kPairWarps - 1) / kPairWarps), kPairWarps * 32, smem, stream>>>(
      geo, buf);
  check_launch("pair_products");
}

}  // namespace sdm::cuda

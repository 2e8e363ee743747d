// gather.cu - per-step weighted sums of gathered rows: the forward's gather of bank rows (ret and
// inter, docs/spec.md §2) and the backward's GWR (D_w, docs/spec.md §4), one kernel.
//
// Inputs:  rows [S, hd] (E: the bank M0, or the gradient bank G); two sides (GatherSide), each
//          `count` entries per chunk token: slot (absolute row, -1 for nothing) and weight, at
//          chunk-token n*C + i times count. Forward: k side (k_slot, k_eff, W), q side (q_slot,
//          q_w, R). Backward: k side only (k_slot, the write coefficients in entry order, W).
// Outputs: k_sums, q_sums f32 [P*C, hd] (step rows p*C + i of step ti; q_sums absent when the
//          q side has no entries).
// Math:    retrieved[i] = sum_w k_eff(i,w) M0[k_slot(i,w)];  inter[i] = sum_r q_w(i,r) M0[q_slot(i,r)];
//          backward D_w[i] = sum_w wcoef(i,w) G[k_slot(i,w)].
// Parallel decomposition: one CTA of 8 warps per (step row, column tile of 32*kVec columns), the
//   tiles of a row in adjacent CTAs (1-D grid). Lane l owns columns [l*kVec, l*kVec + kVec) of the
//   tile (16-byte loads when kVec == 8). Warp k sums the k entries k, k+8, k+16, ... in that order,
//   then the q entries k, k+8, ... in that order; the 8 warp partials are then added in warp
//   order through shared memory.
// Row dots (backward only, vector path: GatherDots, step_kernels.hpp): with the rows of a warp's
//   k entries in registers anyway, each entry's dot <x_t, row> over the tile is taken along: the
//   lane's fmaf chain over its 8 columns, then a transposed warp_sum per window of entries
//   (common/rows.cuh) - the backward slot kernels' dc in their dot order, so its bits are theirs.
// Row amaxes (the saving forward with an fp8 / int4 snapshot: GatherAmax, step_kernels.hpp): the
//   gather loads, tile by tile, the pre-write row M0 of every write entry of the step before the
//   step's group writer changes it, and the writer needs each written row's amax over M0 for the
//   row's snapshot scale (docs/spec.md §5 step 1). So each k entry's amax over the tile is taken
//   along from the row piece in registers: the lane's max of |x| over its kVec columns (NaN
//   ignored, from +0; columns past hd count 0), then one warp max (snapshot_piece_amax), stored by
//   the lane holding the entry (where it has a row) at the entry (step row, lane w) and the tile;
//   group_writer.cu takes the max over a row's tiles. Exact: a max, in any order.
// Numerics: f32 accumulation; the order above is a function of (W, R, hd) only. Masked entries
//   (slot -1: padding or an index outside the stream's rows) load nothing and add nothing (and
//   store no amax). The row amaxes change no sum: the sums' bits are the same with or without them.
#include "cuda/common/cuda_check.hpp"
#include "cuda/common/dependent_launch.cuh"
#include "cuda/common/dispatch.hpp"
#include "cuda/common/values.cuh"
#include "cuda/common/launch_bounds.cuh"
#include "cuda/common/rows.cuh"
#include "cuda/common/step_kernels.hpp"
#include "cuda/saved/snapshot_rows.cuh"

namespace sdm::cuda {
namespace {

constexpr int kWarps = 8;
// Row loads a warp keeps in flight: rows are held as loaded (PackedRow), so a bf16 row piece takes
// half the registers of an f32 one and twice as many fit in the same budget.
template <typename E>
constexpr int kWindow = sizeof(E) == 2 ? 8 : 4;

// One side's entries of a warp, one per lane: lane l holds entry warp + 8 l's slot and weight
// (slot -1 and weight 0 past the count or where the entry is masked).
struct SideEntries {
  std::int32_t slot = -1;
  float weight = 0.0f;
  int count = 0;   // the warp's entries of this side (<= 32)
  int padded = 0;  // count rounded up to the window: the adds of this side's sum
};

template <typename E>
__device__ __forceinline__ SideEntries load_side(const std::int32_t* __restrict__ slots,
                                                 const float* __restrict__ weights, int total, int warp,
                                                 int lane) {
  if (total == 0) return {};
  SideEntries side;
  const int mine = warp + kWarps * lane;
  if (mine < total) {
    const std::int32_t slot = slots[mine];
    const float weight = weights[mine];
    side.slot = slot;
    side.weight = slot >= 0 ? weight : 0.0f;
  }
  side.count = total > warp ? (total - warp + kWarps - 1) / kWarps : 0;
  side.padded = (side.count + kWindow<E> - 1) / kWindow<E> * kWindow<E>;
  return side;
}

// The row piece of position j of the warp's entry stream (the k side's padded entries, then the
// q side's): loaded when the entry exists, has a slot and the lane has columns, else zero.
// Called by all 32 lanes with the same j (shuffles).
template <typename E, int kVec>
__device__ __forceinline__ void issue_row(const E* __restrict__ bank_lane, std::int64_t hd, bool active,
                                          const SideEntries& k_side, const SideEntries& q_side, int j,
                                          PackedRow<E, kVec>& row) {
  const bool in_k = j < k_side.padded;
  const int idx = in_k ? j : j - k_side.padded;
  const std::int32_t slot = __shfl_sync(0xffffffffu, in_k ? k_side.slot : q_side.slot, idx & 31);
  row = {};
  if (slot >= 0 && active) load_packed(bank_lane + static_cast<std::int64_t>(slot) * hd, row);
}

// The k side's row dots as one lane takes them (kDots): its piece of the token's x row (zero past
// hd), the sorted position of its k entry (entry warp + 8 lane), and the planes moved to this
// tile's step and the token's chunk.
struct LaneDots {
  float x[kLaneCols] = {};
  std::int32_t sorted = 0;
  float* plane = nullptr;
};

// The dots of window positions first .. first + kCount - 1 of the k side, summed over the warp
// (transposed, bitwise warp_sum's) and stored by one lane each where the entry has a row.
template <int kCount>
__device__ __forceinline__ void store_window_dots(const float (&dot)[kCount], int first, const SideEntries& k_side,
                                                  const LaneDots& dots, int lane) {
  static_assert(kCount == 8 || kCount == 4, "a window is 8 (bf16 rows) or 4 (f32) entries");
  float total;
  int v;
  bool holder;
  if constexpr (kCount == 8) {
    total = warp_sum8_to_lanes(dot, lane), v = (lane >> 2) & 7, holder = (lane & 3) == 0;
  } else {
    total = warp_sum4_to_lanes(dot[0], dot[1], dot[2], dot[3], lane), v = (lane >> 3) & 3, holder = (lane & 7) == 0;
  }
  const int from = (first + v) & 31;  // the lane holding the entry (a side has at most 32 a warp)
  const std::int32_t slot = __shfl_sync(0xffffffffu, k_side.slot, from);
  const std::int32_t sorted = __shfl_sync(0xffffffffu, dots.sorted, from);
  if (holder && slot >= 0) dots.plane[sorted] = total;
}

// Adds window positions base .. base + kWindow - 1 (all of one side; weights from side_weight,
// starting at the side's entry first) into acc in that order, each as soon as its row is needed,
// and refills each freed register with the row of position base + kWindow + b, so that kWindow
// row loads stay in flight across windows and sides. kDots and a k window: each row's dot with
// the lane's x piece too (the fmaf chain over the lane's columns), then store_window_dots.
// kAmax and a k window: each row's amax over the tile, stored by the lane holding its entry.
template <typename E, int kVec, bool kDots, bool kAmax>
__device__ __forceinline__ void add_window(const E* __restrict__ bank_lane, std::int64_t hd, bool active,
                                           const SideEntries& k_side, const SideEntries& q_side, float side_weight,
                                           bool k_window, int first, int base, int total,
                                           PackedRow<E, kVec> (&rows)[kWindow<E>], float (&acc)[kVec],
                                           const LaneDots& dots, float* __restrict__ amax_parts, int tiles,
                                           int lane) {
  float dot[kWindow<E>];
#pragma unroll
  for (int b = 0; b < kWindow<E>; ++b) {
    const float w = __shfl_sync(0xffffffffu, side_weight, (first + b) & 31);
    float x[kVec];
    unpack(rows[b], x);
#pragma unroll
    for (int k = 0; k < kVec; ++k) acc[k] = fmaf(w, x[k], acc[k]);
    if constexpr (kDots) {
      float d = 0.0f;
#pragma unroll
      for (int k = 0; k < kVec; ++k) d = fmaf(dots.x[k], x[k], d);
      dot[b] = d;
    }
    if constexpr (kAmax) {
      if (k_window) {  // warp-uniform
        const float tile_amax = snapshot_piece_amax(rows[b]);
        // Stored by the lane holding the entry (lane first + b: a side has at most 32 entries a
        // warp), whose write lane is w = warp + 8 lane (load_side); padding and masked entries
        // (slot -1) store nothing.
        if (lane == ((first + b) & 31) && k_side.slot >= 0) {
          amax_parts[static_cast<std::int64_t>(threadIdx.x / 32 + kWarps * lane) * tiles] = tile_amax;
        }
      }
    }
    const int next = base + kWindow<E> + b;
    if (next < total) issue_row<E, kVec>(bank_lane, hd, active, k_side, q_side, next, rows[b]);
  }
  if constexpr (kDots) {
    if (k_window) store_window_dots(dot, first, k_side, dots, lane);
  }
}

// The warp's sum of its k entries (warp, warp + 8, ... < W) into sums[0] and of its q entries into
// sums[1], each side in that order, in one accumulator (the k sum is stored when the q side
// starts); padding positions up to the window add w = 0 times a zero row, as every masked entry
// does. Every lane runs every step (shuffles); only lanes with active columns load rows.
template <typename E, int kVec, bool kDots, bool kAmax>
__device__ __forceinline__ void accumulate_rows(const E* __restrict__ bank_lane, std::int64_t hd, bool active,
                                                const SideEntries& k_side, const SideEntries& q_side,
                                                float* __restrict__ k_sum, float* __restrict__ q_sum,
                                                const LaneDots& dots, float* __restrict__ amax_parts, int tiles,
                                                int lane) {
  constexpr int kRows = kWindow<E>;
  const int total = k_side.padded + q_side.padded;
  PackedRow<E, kVec> rows[kRows];
#pragma unroll
  for (int b = 0; b < kRows; ++b) issue_row<E, kVec>(bank_lane, hd, active, k_side, q_side, b, rows[b]);
  float acc[kVec] = {};
  for (int base = 0; base < total; base += kRows) {
    const bool in_k = base < k_side.padded;
    if (base == k_side.padded) {
#pragma unroll
      for (int k = 0; k < kVec; ++k) k_sum[k] = acc[k], acc[k] = 0.0f;
    }
    add_window<E, kVec, kDots, kAmax>(bank_lane, hd, active, k_side, q_side, in_k ? k_side.weight : q_side.weight,
                                      in_k, in_k ? base : base - k_side.padded, base, total, rows, acc, dots,
                                      amax_parts, tiles, lane);
  }
  const bool q_summed = k_side.padded < total;
#pragma unroll
  for (int k = 0; k < kVec; ++k) {
    q_sum[k] = q_summed ? acc[k] : 0.0f;
    if (!q_summed) k_sum[k] = acc[k];
  }
}

// The slots and weights of both sides are loaded first (one per lane and side, one round trip),
// then the two sides form one stream of row loads with a rolling window of 8 (bf16 bank) or 4
// (f32) rows in flight: the register freed by an add is refilled at once with the row kWindow
// positions ahead, across the k / q boundary. Rows are held as loaded (PackedRow); one
// accumulator (the k sum goes to shared memory when the q side starts): 62 registers, 4 CTAs per
// SM, no spills; with row dots (the x piece and a window of dot partials more) 3 CTAs. Row amaxes
// (kAmax) add a store address per lane and a redux per k entry: still 4 CTAs.
template <typename E, int kVec, bool kDots, bool kAmax>
__global__ void __launch_bounds__(kWarps * 32, min_blocks(kWarps * 32, kDots ? 3 : 4))
    gather_rows(Geometry geo, const E* __restrict__ bank, GatherSide k, GatherSide q, std::int64_t ti,
                unsigned tiles, float* __restrict__ k_sums, float* __restrict__ q_sums, GatherDots dots,
                GatherAmax amax) {
  static_assert(!kDots || kVec == kLaneCols, "row dots need the tile to be a 256-column step");
  static_assert(!(kDots && kAmax), "row dots (backward) and row amaxes (saving forward) are never taken together");
  constexpr int kTile = 32 * kVec;
  __shared__ float partial[kWarps][2][kTile];
  wait_for_predecessor();
  const unsigned row32 = blockIdx.x / tiles;               // the column tiles of a row are adjacent
  const std::int64_t row = geo.p_first * geo.C + row32;    // step row p*C + i
  const std::int64_t token = ti * geo.P * geo.C + row;     // chunk-token n*C + i
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const unsigned tile = blockIdx.x - row32 * tiles;
  const std::int64_t tile0 = static_cast<std::int64_t>(tile) * kTile;
  const std::int64_t c0 = tile0 + lane * kVec;
  const bool active = c0 < geo.hd;
  LaneDots lane_dots;
  if constexpr (kDots) {
    if (active) load_row<kLaneCols>(dots.x + token * geo.hd + c0, lane_dots.x);
    const int mine = warp + kWarps * lane;
    if (mine < k.count) lane_dots.sorted = dots.sorted[token * k.count + mine];
    lane_dots.plane = dots.planes + tile * dots.stride + token / geo.C * geo.C * k.count;
  }
  // The row's amaxes, at entry (row, w) and this tile (GatherAmax); the lane adds w * tiles.
  float* const amax_parts = kAmax ? amax.parts + row * k.count * tiles + tile : nullptr;
  const SideEntries k_side =
      load_side<E>(k.slot + token * k.count, k.weight + token * k.count, static_cast<int>(k.count), warp, lane);
  const SideEntries q_side =
      load_side<E>(q.slot + token * q.count, q.weight + token * q.count, static_cast<int>(q.count), warp, lane);
  accumulate_rows<E, kVec, kDots, kAmax>(bank + c0, geo.hd, active, k_side, q_side, &partial[warp][0][lane * kVec],
                                         &partial[warp][1][lane * kVec], lane_dots, amax_parts,
                                         static_cast<int>(tiles), lane);
  __syncthreads();
  const int sides = q_sums != nullptr ? 2 : 1;
  for (int o = static_cast<int>(threadIdx.x); o < sides * kTile; o += kWarps * 32) {
    const int which = o / kTile, col = o % kTile;
    const std::int64_t c = tile0 + col;
    if (c >= geo.hd) continue;
    float sum = partial[0][which][col];
#pragma unroll
    for (int w = 1; w < kWarps; ++w) sum += partial[w][which][col];
    (which == 0 ? k_sums : q_sums)[row * geo.hd + c] = sum;
  }
}

template <typename E, int kVec, bool kDots, bool kAmax>
void launch(const Geometry& geo, const void* rows, GatherSide k, GatherSide q, std::int64_t ti, float* k_sums,
            float* q_sums, GatherDots dots, GatherAmax amax, cudaStream_t stream) {
  const auto tiles = static_cast<unsigned>(row_tiles(geo.hd, kVec == 8));
  const dim3 grid(static_cast<unsigned>(geo.p_count * geo.C) * tiles);
  launch_dependent(gather_rows<E, kVec, kDots, kAmax>, grid, dim3(kWarps * 32), 0, stream, "gather_rows", geo,
                   static_cast<const E*>(rows), k, q, ti, tiles, k_sums, q_sums, dots, amax);
}

// The gather on (rows, k, q) taking along the dots or (exclusive) the amaxes that are asked for.
void gather(const Geometry& geo, const void* rows, bool bf16_rows, bool vec8, GatherSide k, GatherSide q,
            std::int64_t ti, float* k_sums, float* q_sums, GatherDots dots, GatherAmax amax, cudaStream_t stream) {
  const bool with_dots = dots.planes != nullptr, with_amax = amax.parts != nullptr;
  dispatch(
      [&](auto row, auto vec, auto take_dots, auto take_amax) {
        constexpr int kVec = decltype(vec)::value;
        constexpr bool kDots = decltype(take_dots)::value, kAmax = decltype(take_amax)::value;
        if constexpr ((!kDots || kVec == kLaneCols) && !(kDots && kAmax)) {
          launch<typename decltype(row)::type, kVec, kDots, kAmax>(geo, rows, k, q, ti, k_sums, q_sums, dots, amax,
                                                                   stream);
        }
      },
      Rows{bf16_rows}, VecWidth{vec8}, Flag{with_dots}, Flag{with_amax});
}

}  // namespace

void launch_weighted_gather(const Geometry& geo, const void* rows, bool bf16_rows, bool vec8, GatherSide k,
                            GatherSide q, std::int64_t ti, float* k_sums, float* q_sums, cudaStream_t stream,
                            GatherDots dots) {
  if (dots.planes != nullptr && !vec8) {
    throw RuntimeError("sdm CUDA engine: the gather's row dots need the vector path");
  }
  gather(geo, rows, bf16_rows, vec8, k, q, ti, k_sums, q_sums, dots, GatherAmax{}, stream);
}

void launch_gather(const Geometry& geo, const Phase1Buffers& p1, const StepBuffers& sb, std::int64_t ti,
                   cudaStream_t stream) {
  gather(geo, sb.bank, sb.bf16_bank, sb.vec8, GatherSide{p1.k_slot, p1.k_eff, geo.W},
         GatherSide{p1.q_slot, p1.q_w, geo.R}, ti, sb.retrieved, sb.inter, GatherDots{},
         GatherAmax{sb.row_amax_parts}, stream);
}

}  // namespace sdm::cuda

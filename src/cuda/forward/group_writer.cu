// group_writer.cu - per-step decay-and-write of every slot group (docs/spec.md §2, the row update
// of "Per-chunk computation"), and in a saving call the encoding of each group's pre-write row
// into the snapshot (docs/spec.md §5).
//
// Inputs:  Phase 1's sorted keys, wcoef, gdecay; delta f32 (step rows, or chunk-token rows in a
//          saving call); the bank, which still holds M0 for this step's written rows; fp8 / int4:
//          the step gather's row amaxes per column tile (StepBuffers::row_amax_parts).
// Outputs: the bank rows written in the step's chunks, in place; in a saving call also the
//          pre-write row of each group into snapshot row e = group_first[n] + group_ordinal at the
//          group's first sorted position (saved/group_rows.cuh, core/snapshot_row_rule.hpp),
//          encoded in the effective mode kMode (snapshot_rows.cuh), and for fp8 / int4 its scale
//          into scales[e]; a row e >= the buffer's rows (a too-small `saved` under validate=False)
//          is not written, the bank update is the same.
// Math:    M[s] = rnd_E( exp(Lambda_s) M0[s] + sum_{e in group(s)} wcoef_e delta[i_e] ).
//          Snapshot: none M0[s] bit for bit; bf16 rnd_bf16(M0[s]); fp8 / int4 the shared quantiser
//          core/snapshot_quant.hpp (scale from the row's amax, codes from the fast quotient on bf16
//          rows, the IEEE division on f32 rows): the bytes and scale core::quantize_row gives.
//          amax(M0[s]) = max over the row's tiles of the gather's tile amaxes, read at the warp's
//          own entry (every entry of a group names the same row s, so any of them gives these).
// Which writer: write_walk.cu's walk over staged delta rows where it runs (the vector path, hd a
//   multiple of 256) and pays (a warp of its grid walks at least two batches: write_walk.hpp's
//   measured rule; SDM_CUDA_WRITER forces either), else this one; both give the same bits.
// Parallel decomposition: one warp per sorted write position of the step (a 1-D grid of P blocks
//   of ceil(C*W / kWarps) CTAs). The row is cut into pieces of 32*kVec columns (lane l owns columns
//   l*kVec of each, 16-byte accesses when kVec == 8); a group of g entries in the chunk shares
//   them among its first w = min(g, pieces, split limit) warps: the warp at the group's j-th
//   position (j < w) owns pieces j, j + w, j + 2w, ... and walks the whole group for them; the
//   group's other warps exit at once. In every snapshot mode: an fp8 / int4 scale needs the amax of
//   the whole pre-write row, which the other warps are overwriting, so no warp takes it from the
//   bank; each of the w warps reduces the gather's tile amaxes of the row (hd / (32*kVec) floats),
//   which the gather stored from the same M0 (it runs before the writer in the step's stream order,
//   and no kernel between them writes the bank: step_kernels.hpp), and encodes its own pieces with
//   that scale; the warp at j = 0 stores it. A piece starts at an even column, so an int4 byte
//   (columns 2k, 2k + 1) never spans two warps' pieces.
// Numerics: per element, f32 in group order (ascending token) starting from exp(Lambda) M0, one
//   rounding to E per chunk, whichever warp owns the element: the bits do not depend on w. The
//   update always uses the exact M0, so readings and the final bank do not depend on the snapshot
//   mode. Each element has a single writer, which reads it before writing it: the in-place update
//   is safe and deterministic; padding and masked entries (local slot == sps) form no group. The
//   snapshot: the scale is a function of amax(M0[s]) alone, and a max of |values| (NaN ignored,
//   from +0) is exact in any grouping and order, so tile amaxes reduced by any warp give
//   core::quantize_row's amax, scale and codes: the snapshot bytes and scales (hence the restored
//   rows and every gradient) do not depend on w, nor on how the amax is split into parts (before
//   the split, w = 1 took it from the held pieces or a first read of the row: the same values).
#include <atomic>
#include <type_traits>

#include "cuda/common/cuda_check.hpp"
#include "cuda/common/dependent_launch.cuh"
#include "cuda/common/dispatch.hpp"
#include "cuda/common/launch_bounds.cuh"
#include "cuda/common/prefetch.cuh"
#include "cuda/common/resident_warps.hpp"
#include "cuda/common/values.cuh"
#include "cuda/saved/group_rows.cuh"
#include "cuda/saved/snapshot_rows.cuh"
#include "cuda/common/step_kernels.hpp"
#include "cuda/forward/write_walk.hpp"

namespace sdm::cuda {
namespace {

// 4 warps a CTA: a CTA holds its SM's warp slots until its slowest warp is done, and most
// positions exit after one load (docs/performance.md).
constexpr int kWarps = 4;
constexpr int kMinBlocks = 24 / kWarps;  // at most 80 registers a thread: 24 warps an SM

// Row pieces (of 32*kVec columns) a warp holds in registers at once.
template <int kVec>
constexpr int kHeldPieces = kVec == 8 ? 4 : 8;
// In a group of two or more entries a warp writes one piece of the row at a time and loads the
// delta pieces of this many entries at once (more spill past the 80 registers of 3 CTAs per SM).
constexpr int kEntriesAtOnce = 2;

// One batch of up to 32 consecutive entries of a group, one per lane: the entry's delta row
// offset (token * hd) and coefficient; count = how many of the batch belong to the group (lanes
// 0 .. count-1: a chunk's entries are sorted by slot, so a group is contiguous).
struct EntryBatch {
  std::int64_t offset = 0;
  float coef = 0.0f;
  int count = 0;
};

// The batch of the entries at chunk positions first .. first + 31 (< CW) that have local slot
// `local`, from this lane's key and coefficient at position first + lane (any values past CW).
// Called by all 32 lanes of a warp (ballot).
__device__ __forceinline__ EntryBatch batch_of(std::uint64_t key, float coef, int first, int CW, std::int64_t local,
                                               const KeyLayout& layout, std::int64_t hd, int lane) {
  const bool member = first + lane < CW && layout.local_slot(key) == local;
  const unsigned members = __ballot_sync(0xffffffffu, member);
  EntryBatch batch;
  batch.count = members == 0xffffffffu ? 32 : __ffs(~members) - 1;
  batch.offset = member ? layout.token(key) * hd : 0;
  batch.coef = member ? coef : 0.0f;
  return batch;
}

// batch_of for the positions first + lane, loading their keys and coefficients.
__device__ __forceinline__ EntryBatch load_entries(const std::uint64_t* __restrict__ keys,
                                                   const float* __restrict__ wcoef, int first, int CW,
                                                   std::int64_t local, const KeyLayout& layout, std::int64_t hd,
                                                   int lane) {
  const int mine = first + lane;
  const std::uint64_t key = mine < CW ? keys[mine] : 0;
  const float coef = mine < CW ? wcoef[mine] : 0.0f;
  return batch_of(key, coef, first, CW, local, layout, hd, lane);
}

// The row of the write group (if any) that starts at the step's sorted write position `later` (in
// the grid's order: stream p's positions at p * ctas_per_stream * kWarps): asks L2 for it. The
// warp whose position that is runs about one wave later (`ahead` = the host's count of resident
// warps), so it finds its row in L2 or on its way there. A hint only: no value depends on it.
template <typename E>
__device__ __forceinline__ void prefetch_later_row(const Geometry& geo, const Phase1Buffers& p1, const StepBuffers& sb,
                                                   std::int64_t ti, std::int64_t later, unsigned ctas_per_stream,
                                                   int lane) {
  const int CW = static_cast<int>(geo.C * geo.W);
  const std::int64_t per_stream = static_cast<std::int64_t>(ctas_per_stream) * kWarps;
  const std::int64_t launch_p = later / per_stream;
  const int q = static_cast<int>(later - launch_p * per_stream);
  if (launch_p >= geo.p_count || q >= CW) return;
  const std::int64_t p = geo.p_first + launch_p;
  const std::int64_t local = geo.keys.local_slot(p1.keys[(ti * geo.P + p) * CW + q]);
  if (local == geo.sps) return;
  const std::int64_t row_bytes = geo.hd * static_cast<std::int64_t>(sizeof(E));
  prefetch_row_l2(static_cast<const char*>(sb.bank) + (p * geo.sps + local) * row_bytes, row_bytes, lane);
}

// The group position of the warp at sorted position q (> 0) of slot `local`, whose predecessor
// holds the same slot: j = how many positions before q hold it (looked at 32 back, so at most 32:
// enough, since at most 32 warps share a row). Called by all 32 lanes (ballot).
__device__ __forceinline__ int position_in_group(const std::uint64_t* __restrict__ keys, int q, std::int64_t local,
                                                 const KeyLayout& layout, int lane) {
  const int back = q - 1 - lane;
  const bool same = back >= 0 && layout.local_slot(keys[back]) == local;
  const unsigned run = __ballot_sync(0xffffffffu, same);
  return run == 0xffffffffu ? 32 : __ffs(static_cast<int>(~run)) - 1;  // the run of ones from lane 0
}

// The writer (write_groups). Stream p and position q come from 32-bit block arithmetic. Every
// warp first asks L2 for the row of the group (if any) at the position one wave of resident warps
// later (prefetch_later_row, resident_warps.hpp), whose warp then finds its row on its way: the
// gather read the step's rows, but at large steps (flagship: 126 MB of written rows) they have
// left L2 by the writer's turn. The group's entries are read 32 at a time, one per lane (key,
// delta row offset, coefficient: one coalesced load), and then broadcast by shuffles; nearly every
// group fits in one such batch. The first batch's keys and coefficients, the previous key and the
// decay are loaded in one round trip before the warp knows whether it writes, and the first
// entry's delta pieces are prefetched into L1 while the row's loads fly. The only writer of a
// one-entry group processes the row in blocks of kHeld pieces (kVec 8: 4 pieces of 256 columns;
// kVec 1: 8 of 32): a block's row pieces are all loaded first (loads in flight together) and kept
// as loaded (PackedRow) for the snapshot and the update, then for each entry all of the block's
// delta pieces are loaded together. In a longer group each of the w warps takes its pieces (j,
// j + w, ...) one at a time and the entries kEntriesAtOnce at a time (their delta loads in flight
// together), so the chain of dependent loads per warp is (pieces / w) * (entries / kEntriesAtOnce)
// long instead of blocks * entries. fp8 / int4: in each block or piece step, once its row loads
// are issued, the warp reads the row's tile amaxes (lane l tiles l, l + 32, ...: one load a lane
// at hd <= 8192 resp. 1024), so they fly with the row's loads, and takes their warp max and the
// scale (snapshot_scale_of_parts); lane 0 of the warp holding piece 0 stores the scale. int4 with
// kVec == 1 pairs the adjacent columns of lanes 2j, 2j+1 by a shuffle.
template <typename E, int kVec, SnapshotQuant kMode>
__global__ void __launch_bounds__(kWarps * 32, min_blocks(kWarps * 32, kMinBlocks))
    write_groups(Geometry geo, Phase1Buffers p1, StepBuffers sb, std::int64_t ti, std::int64_t ahead, int split_limit) {
  constexpr int kHeld = kHeldPieces<kVec>;
  constexpr int kPiece = 32 * kVec;  // columns of one piece (the whole warp)
  constexpr bool kQuantised = kMode == SnapshotQuant::fp8 || kMode == SnapshotQuant::int4;
  wait_for_predecessor();
  const int CW = static_cast<int>(geo.C * geo.W);  // <= kMaxChunk * kMaxWidth
  const unsigned ctas_per_stream = static_cast<unsigned>((CW + kWarps - 1) / kWarps);
  const unsigned stream = blockIdx.x / ctas_per_stream;
  const int q = static_cast<int>(blockIdx.x - stream * ctas_per_stream) * kWarps + static_cast<int>(threadIdx.x) / 32;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  if (q >= CW) return;
  const std::int64_t p = geo.p_first + stream, n = ti * geo.P + p;
  const std::uint64_t* __restrict__ keys = p1.keys + n * CW;  // the chunk's sorted keys
  const float* __restrict__ wcoef = p1.wcoef + n * CW;
  // One round trip for the warp's metadata: the keys and coefficients of positions q .. q + 31,
  // the previous key and the decay (the group's: every position of it holds the same), all loaded
  // before the warp knows whether it writes.
  const int mine = q + lane;
  const std::uint64_t my_key = mine < CW ? keys[mine] : 0;
  const float my_coef = mine < CW ? wcoef[mine] : 0.0f;
  const std::uint64_t prev_key = q > 0 ? keys[q - 1] : 0;
  const float decay = p1.gdecay[n * CW + q];
  prefetch_later_row<E>(geo, p1, sb, ti, static_cast<std::int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32 + ahead,
                        ctas_per_stream, lane);
  const std::uint64_t key = __shfl_sync(0xffffffffu, my_key, 0);  // the warp's entry
  const std::int64_t local = geo.keys.local_slot(key);
  if (local == geo.sps) return;

  const std::int64_t hd = geo.hd;
  const int pieces = static_cast<int>((hd + kPiece - 1) / kPiece);
  const int most = min(min(pieces, split_limit), 32);  // warps that may share the row
  int j = 0;  // this warp's position in its group
  if (q > 0 && geo.keys.local_slot(prev_key) == local) {
    if (most == 1) return;
    j = position_in_group(keys, q, local, geo.keys, lane);
    if (j >= most) return;
  }
  const EntryBatch here = batch_of(my_key, my_coef, q, CW, local, geo.keys, hd, lane);
  // here.count = min(32, g - j) entries from q on, so min(most, j + here.count) = min(most, g).
  const int w = min(most, j + here.count);
  const int group_first = q - j;
  const EntryBatch head = j == 0 ? here : load_entries(keys, wcoef, group_first, CW, local, geo.keys, hd, lane);
  // The group's snapshot row (saving calls; saved/group_rows.cuh): stored only inside the buffer.
  const std::int64_t e = sb.snapshot != nullptr ? group_row(GroupNumbers{p1.group_first, p1.group_ordinal}, n, CW, group_first) : 0;
  const bool stores_snapshot = sb.snapshot != nullptr && core::snapshot_row_stored(e, sb.snapshot_rows);

  E* __restrict__ row = static_cast<E*>(sb.bank) + (p * geo.sps + local) * hd;
  // kMode none: a saving call stores the exact row, a no-grad call (snapshot null) nothing.
  constexpr DType kBank = sizeof(E) == 2 ? DType::bf16 : DType::f32;
  const auto row_bytes = static_cast<std::int64_t>(core::snapshot_payload_bytes(kMode, kBank, hd));
  unsigned char* __restrict__ snapshot =
      stores_snapshot ? static_cast<unsigned char*>(sb.snapshot) + e * row_bytes : nullptr;
  const float* __restrict__ delta = sb.delta + (sb.delta_per_chunk ? n * geo.C : p * geo.C) * hd;
  // The group's first entry (lane 0 of the head batch is always a member).
  const std::int64_t offset0 = __shfl_sync(0xffffffffu, head.offset, 0);

  // add(offset[], coef[], count) for every entry of the group, in group order (ascending token),
  // kE entries at a time (count <= kE of them real: the rest add nothing), so that their delta
  // loads are issued together before the first of their sums (order of the sums unchanged).
  const auto for_each_entry = [&](auto entries_at_once, auto&& add) {
    constexpr int kE = decltype(entries_at_once)::value;
    EntryBatch batch = head;
    for (int first = group_first;;) {
#pragma unroll 1
      for (int k = 0; k < batch.count; k += kE) {
        std::int64_t offset[kE];
        float coef[kE];
#pragma unroll
        for (int u = 0; u < kE; ++u) {
          offset[u] = __shfl_sync(0xffffffffu, batch.offset, (k + u) & 31);
          coef[u] = __shfl_sync(0xffffffffu, batch.coef, (k + u) & 31);
        }
        add(offset, coef, min(kE, batch.count - k));
      }
      if (batch.count < 32) break;
      first += 32;
      batch = load_entries(keys, wcoef, first, CW, local, geo.keys, hd, lane);
    }
  };

  // fp8 / int4: the gather's tile amaxes of the row (step_kernels.hpp), each warp reading those at
  // its own entry (token i, lane w): every entry of the group names the row.
  const float* row_amaxes = nullptr;
  if constexpr (kQuantised) {
    row_amaxes = sb.row_amax_parts + ((p * geo.C + geo.keys.token(key)) * geo.W + geo.keys.lane(key)) * pieces;
  }
  // Writes kN pieces, piece s from column first(s) (< 2^31: hd is), the group's entries kE at a
  // time: piece s is the warp's when first(s) < hd, this lane's when first(s) + lane kVec < hd too;
  // pieces that are not load and store nothing. Every lane runs every piece step (the shuffles
  // need the whole warp).
  const int hd32 = static_cast<int>(hd), lane_col = lane * kVec;
  const auto write_pieces = [&](auto held_count, auto entries_at_once, auto first) {
    constexpr int kN = decltype(held_count)::value, kE = decltype(entries_at_once)::value;
    PackedRow<E, kVec> held[kN] = {};
#pragma unroll
    for (int s = 0; s < kN; ++s) {
      if (first(s) + lane_col < hd32) load_packed(row + first(s) + lane_col, held[s]);
    }
    // The first entry's delta pieces are fetched into L1 while the row's loads fly (no registers
    // held): its adds below then wait for an L1 hit instead of a second round trip.
#pragma unroll
    for (int s = 0; s < kN; ++s) {
      if (first(s) + lane_col < hd32) prefetch_l1(delta + offset0 + first(s) + lane_col);
    }
    // fp8 / int4: the row's scale, its amaxes loaded while the row's loads fly (a warp with several
    // blocks or pieces takes the same scale again in each: a few L1 hits instead of two registers
    // held across the steps).
    SnapshotScale quant;
    if constexpr (kQuantised) {
      if (stores_snapshot) {
        quant = snapshot_scale_of_parts<kMode>(row_amaxes, pieces, lane);
        if (first(0) == 0 && lane == 0) sb.snapshot_scales[e] = quant.scale;
      }
    }
    if (snapshot != nullptr) {
#pragma unroll
      for (int s = 0; s < kN; ++s) {
        if (first(s) < hd32) {
          encode_snapshot_piece<kMode, kVec, E>(snapshot, first(s) + lane_col, first(s) + lane_col < hd32, held[s],
                                                quant);
        }
      }
    }
    float acc[kN][kVec];
#pragma unroll
    for (int s = 0; s < kN; ++s) {
      float base[kVec];
      unpack(held[s], base);
#pragma unroll
      for (int k = 0; k < kVec; ++k) acc[s][k] = decay * base[k];
    }
    for_each_entry(entries_at_once, [&](const std::int64_t* offset, const float* coef, int count) {
      if constexpr (kE == 1) {  // piece by piece: 8 registers of delta at a time
#pragma unroll
        for (int s = 0; s < kN; ++s) {
          if (first(s) + lane_col < hd32) {
            float dv[kVec];
            load_row<kVec>(delta + offset[0] + lane_col + first(s), dv);
#pragma unroll
            for (int k = 0; k < kVec; ++k) acc[s][k] = fmaf(coef[0], dv[k], acc[s][k]);
          }
        }
      } else {  // kE entries' loads, then their sums in order
        float dv[kE][kN][kVec];
#pragma unroll
        for (int u = 0; u < kE; ++u) {
#pragma unroll
          for (int s = 0; s < kN; ++s) {
            if (u < count && first(s) + lane_col < hd32) load_row<kVec>(delta + offset[u] + lane_col + first(s), dv[u][s]);
          }
        }
#pragma unroll
        for (int u = 0; u < kE; ++u) {
#pragma unroll
          for (int s = 0; s < kN; ++s) {
            if (u < count && first(s) + lane_col < hd32) {
#pragma unroll
              for (int k = 0; k < kVec; ++k) acc[s][k] = fmaf(coef[u], dv[u][s][k], acc[s][k]);
            }
          }
        }
      }
    });
#pragma unroll
    for (int s = 0; s < kN; ++s) {
      if (first(s) + lane_col < hd32) store_row<kVec>(row + first(s) + lane_col, acc[s]);
    }
  };
  using One = std::integral_constant<int, 1>;
  if (j == 0 && here.count == 1) {
    // A group of one entry (nearly all at low reuse): the group's only writer, the row in blocks
    // of kHeld consecutive pieces.
    for (int b = 0; b < hd32; b += kHeld * kPiece) {
      write_pieces(std::integral_constant<int, kHeld>{}, One{}, [&](int s) { return b + s * kPiece; });
    }
  } else {  // pieces j, j + w, ..., one at a time, the entries kEntriesAtOnce at a time
    for (int piece = j; piece < pieces; piece += w) {
      write_pieces(One{}, std::integral_constant<int, kEntriesAtOnce>{}, [&](int) { return piece * kPiece; });
    }
  }
}

std::atomic<int> split_limit{kMaxGroupWriterSplit};

template <typename E, int kVec, SnapshotQuant kMode>
void launch(const Geometry& geo, const Phase1Buffers& p1, const StepBuffers& sb, std::int64_t ti,
            cudaStream_t stream) {
  constexpr auto kernel = write_groups<E, kVec, kMode>;
  const std::int64_t ctas = geo.p_count * ((geo.C * geo.W + kWarps - 1) / kWarps);
  const std::int64_t ahead = resident_warps<kernel>(kWarps * 32, "write_groups");
  launch_dependent(kernel, dim3(static_cast<unsigned>(ctas)), dim3(kWarps * 32), 0, stream, "write_groups", geo, p1,
                   sb, ti, ahead, split_limit.load(std::memory_order_relaxed));
}

}  // namespace

void set_group_writer_split(int warps) {
  split_limit.store(warps < 1 ? 1 : warps > kMaxGroupWriterSplit ? kMaxGroupWriterSplit : warps,
                    std::memory_order_relaxed);
}

void launch_group_writer(const Geometry& geo, const Phase1Buffers& p1, const StepBuffers& sb, std::int64_t ti,
                         cudaStream_t stream) {
  if (use_write_walk(geo, sb)) {
    launch_write_walk(geo, p1, sb, ti, stream);
    return;
  }
  dispatch(
      [&](auto row, auto vec, auto mode) {
        launch<typename decltype(row)::type, decltype(vec)::value, decltype(mode)::value>(geo, p1, sb, ti, stream);
      },
      Rows{sb.bf16_bank}, VecWidth{sb.vec8}, Snapshot{sb.snapshot_mode});
}

}  // namespace sdm::cuda

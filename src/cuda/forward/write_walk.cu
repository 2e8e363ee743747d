// write_walk.cu - the group writer of one step (step_kernels.hpp, docs/spec.md §2's row update and
// §5's snapshot) as a walk over delta rows staged in shared memory: the same rows, snapshot bytes
// and scales as group_writer.cu's per-position writer, bit for bit.
//
// Math:    M[s] = rnd_E( exp(Lambda_s) M0[s] + sum_{e in group(s)} wcoef_e delta[i_e] ), and in a
//          saving call the group's pre-write row M0[s] encoded into its snapshot row (none / bf16
//          / fp8 / int4; fp8 / int4 scales from the gather's tile amaxes: group_writer.cu).
// Parallel decomposition: grid (streams of the launch, column steps of 256, shares). CTA (p, s, j)
//   1. copies the 256 columns of step s of chunk n's C delta rows (f32) into shared memory (cp.async,
//      every copy in flight at once), each row's 16-byte words swizzled (word w at w ^ (w >> 3 & 1))
//      so that a warp's loads of its lanes' two words per row hit every bank once;
//   2. walks the write groups whose first sorted position lies in share j of the chunk's C*W
//      positions: its 8 (C <= 64) or 16 warps take batches of 32 positions (warp w's first is
//      batch w, loaded while the copies fly; the later ones from a shared counter); lane l holds
//      position q0 + l's slot, token and coefficient, the group starts are a ballot, and a warp
//      loads the pre-write row pieces (lane l: columns 256 s + 8 l .. + 7), decays and (fp8 / int4)
//      tile amaxes of up to kAhead of the batch's groups at once, then walks each group's members
//      in sorted order: their tokens and coefficients by shuffle from the batch (a group that runs
//      past the batch reads its further members 32 at a time), their delta pieces from shared memory;
//   3. stores each row piece once (and its snapshot piece; fp8 / int4: the scale from the row's
//      tile amaxes, stored by the CTA of step 0).
// Each (group, column step) has one CTA and one warp: every bank and snapshot element has a single
// writer, which reads M0 before it writes the row. The shared counter only decides which warp.
// Numerics: per element acc = exp(Lambda) * M0, then acc = fmaf(wcoef_e, delta[i_e], acc) over the
//   group's entries in sorted (ascending token) order, one rounding to E: group_writer.cu's chain,
//   so the same bits whatever the grid, shares or warps. No atomics on values.
// Shared memory: C x 256 f32 (C 64: 64 KiB, C 128: 128 KiB) and a counter. Registers 66-91 (sm_90;
// the bf16 / none 8-warp variant keeps one value in 8 bytes of stack, reloaded once a batch).
#include "cuda/forward/write_walk.hpp"

#include <atomic>

#include "core/env_knobs.hpp"
#include "cuda/common/async_copy.cuh"
#include "cuda/common/dependent_launch.cuh"
#include "cuda/common/device_limits.hpp"
#include "cuda/common/dispatch.hpp"
#include "cuda/common/values.cuh"
#include "core/snapshot_row_rule.hpp"
#include "cuda/saved/snapshot_rows.cuh"

namespace sdm::cuda {
namespace {

// Warps a CTA: 8 where three CTAs share an SM (C <= 64: 3 x 64 KiB staged, at most 85 registers a
// thread), 16 where one CTA holds it (C > 64: 128 KiB staged), so an SM keeps 24 resp. 16 warps.
template <int kWarps>
constexpr int kMinBlocks = kWarps == 8 ? 3 : 1;
int walk_warps(std::int64_t C) { return C <= 64 ? 8 : 16; }
constexpr int kStepCols = 256;             // a column step: 8 columns a lane
constexpr int kStepWords = kStepCols / 4;  // 16-byte words of a staged row
// Groups of a batch whose row pieces a warp loads before it walks the first of them (f32 rows
// take twice the registers; four spill there at 85 registers).
template <typename E>
constexpr int kAhead = sizeof(E) == 2 ? 4 : 2;
constexpr unsigned kFull = 0xffffffffu;

// Where word w (4 columns) of a staged row lives: words 8..15 of every 16 swap pairwise, so lane l's
// words 2l and 2l + 1, read by the warp in two instructions, fall on distinct banks in each phase.
__device__ __forceinline__ int staged_word(int w) { return w ^ ((w >> 3) & 1); }

// The lane's 8 columns of token `token`'s staged delta row.
__device__ __forceinline__ void staged_piece(const float4* staged, int token, int word0, int word1, float (&dv)[8]) {
  const float4 a = staged[token * kStepWords + word0];
  const float4 b = staged[token * kStepWords + word1];
  dv[0] = a.x, dv[1] = a.y, dv[2] = a.z, dv[3] = a.w;
  dv[4] = b.x, dv[5] = b.y, dv[6] = b.z, dv[7] = b.w;
}

template <typename E, SnapshotQuant kMode, int kWarps>
__global__ void __launch_bounds__(kWarps * 32, kMinBlocks<kWarps>)
    write_walk(Geometry geo, Phase1Buffers p1, StepBuffers sb, std::int64_t ti, int shares) {
  constexpr bool kQuantised = kMode == SnapshotQuant::fp8 || kMode == SnapshotQuant::int4;
  constexpr int kGroups = kAhead<E>;
  constexpr DType kBank = sizeof(E) == 2 ? DType::bf16 : DType::f32;
  extern __shared__ float4 staged[];
  __shared__ int next_batch;
  const int lane = static_cast<int>(threadIdx.x) % 32, warp = static_cast<int>(threadIdx.x) / 32;
  const std::int64_t p = geo.p_first + blockIdx.x, n = ti * geo.P + p;
  const int step = static_cast<int>(blockIdx.y), share = static_cast<int>(blockIdx.z);
  const int C = static_cast<int>(geo.C), CW = static_cast<int>(geo.C * geo.W);
  const std::int64_t hd = geo.hd, sps = geo.sps;
  const int q_begin = static_cast<int>(static_cast<std::int64_t>(CW) * share / shares);
  const int q_end = static_cast<int>(static_cast<std::int64_t>(CW) * (share + 1) / shares);
  if (threadIdx.x == 0) next_batch = kWarps;  // warp w's first batch is w, later ones from the counter
  wait_for_predecessor();

  // 1. the step's delta columns of the chunk's C tokens
  const float* delta = sb.delta + (sb.delta_per_chunk ? n * C : p * C) * hd + step * kStepCols;
  for (int x = static_cast<int>(threadIdx.x); x < C * kStepWords; x += kWarps * 32) {  // copies in flight together
    const int token = x / kStepWords, word = x % kStepWords;
    copy_async<16>(&staged[token * kStepWords + staged_word(word)], delta + token * hd + 4 * word);
  }
  commit_async_copies();

  // 2. the walk. A batch's metadata, one position a lane: local slot, token and entry, coefficient,
  // group ordinal (saving calls), and the slot of the position before the batch.
  const std::uint64_t* __restrict__ keys = p1.keys + n * CW;
  const float* __restrict__ wcoef = p1.wcoef + n * CW;
  struct Batch {
    std::int64_t local, before;
    int token, entry;  // the position's token i and its entry i * W + w (the gather's amax index)
    float coef;
    std::int32_t ordinal;  // saving calls: the group's ordinal among the chunk's groups (at its first position)
  };
  const auto load_batch = [&](int q0) {
    const int q = q0 + lane;
    Batch b;
    const std::uint64_t key = q < CW ? keys[q] : 0;
    b.local = q < CW ? geo.keys.local_slot(key) : sps;
    b.token = static_cast<int>(geo.keys.token(key));
    b.entry = static_cast<int>(b.token * geo.W + geo.keys.lane(key));
    b.coef = q < CW ? wcoef[q] : 0.0f;
    b.before = q0 > 0 ? geo.keys.local_slot(keys[q0 - 1]) : -1;
    b.ordinal = sb.snapshot != nullptr && q < CW ? p1.group_ordinal[n * CW + q] : -1;
    return b;
  };
  // Saving calls: the chunk's first snapshot row (core/snapshot_row_rule.hpp).
  const std::int64_t chunk_first_row = sb.snapshot != nullptr ? p1.group_first[n] : 0;
  // The warp's first batch is loaded while the copies fly.
  int q0 = q_begin + 32 * warp;
  Batch batch = q0 < q_end ? load_batch(q0) : Batch{};
  wait_async_groups<0>();
  __syncthreads();
  const int col = step * kStepCols + 8 * lane;
  const int word0 = staged_word(2 * lane), word1 = staged_word(2 * lane + 1);
  const int pieces = static_cast<int>(hd / kStepCols);
  const auto row_bytes = static_cast<std::int64_t>(core::snapshot_payload_bytes(kMode, kBank, hd));
  // acc += the members held by lanes first .. last - 1 (token and coefficient, one a lane), in
  // lane order: acc = fmaf(coef, delta piece, acc) with the delta piece from shared memory.
  const auto add_members = [&](float (&acc)[8], int token_of_lane, float coef_of_lane, int first, int last) {
#pragma unroll 1
    for (int m = first; m < last; ++m) {
      const int i = __shfl_sync(kFull, token_of_lane, m);
      const float c = __shfl_sync(kFull, coef_of_lane, m);
      float dv[8];
      staged_piece(staged, i, word0, word1, dv);
#pragma unroll
      for (int k = 0; k < 8; ++k) acc[k] = fmaf(c, dv[k], acc[k]);
    }
  };
  while (q0 < q_end) {
    const int q = q0 + lane;
    const std::int64_t local = batch.local;
    const float coef = batch.coef;
    const std::int64_t up = __shfl_up_sync(kFull, local, 1);  // every lane shuffles, then lane 0 takes `before`
    const std::int64_t prev = lane == 0 ? batch.before : up;
    const int token = batch.token;
    // Lane l continues lane l - 1's group; lane l starts a group (and this share owns it).
    const unsigned continues = __ballot_sync(kFull, lane > 0 && local != sps && local == prev);
    unsigned starts = __ballot_sync(kFull, q < q_end && local != sps && local != prev);
    while (starts != 0u) {
      // Up to kGroups groups: their starts, rows, decays and pre-write pieces, loads in flight together.
      // fp8 / int4 saving calls: also each lane's max over its share of the row's tile amaxes
      // (tiles l, l + 32, ...: snapshot_scale_of_parts's split), loads in flight with the rows.
      int first[kGroups];
      PackedRow<E, 8> held[kGroups];
      float decay[kGroups], lane_amax[kGroups];
      int count = 0;
#pragma unroll
      for (int u = 0; u < kGroups; ++u) {
        first[u] = starts != 0u ? __ffs(static_cast<int>(starts)) - 1 : -1;
        if (first[u] < 0) continue;
        starts &= starts - 1u;
        count = u + 1;
        const std::int64_t slot = __shfl_sync(kFull, local, first[u]);
        load_packed(static_cast<const E*>(sb.bank) + (p * sps + slot) * hd + col, held[u]);
        decay[u] = p1.gdecay[n * CW + q0 + first[u]];  // exp(Lambda) of the group
        lane_amax[u] = 0.0f;
        if constexpr (kQuantised) {
          const int head = __shfl_sync(kFull, batch.entry, first[u]);
          if (sb.snapshot != nullptr) {
            const float* parts = sb.row_amax_parts + (p * geo.C * geo.W + head) * pieces;
#pragma unroll 1
            for (int t = lane; t < pieces; t += 32) lane_amax[u] = snapshot_amax_update(lane_amax[u], parts[t]);
          }
        }
      }
#pragma unroll
      for (int u = 0; u < kGroups; ++u) {
        if (u >= count) break;
        const int a = first[u];
        const std::int64_t slot = __shfl_sync(kFull, local, a);
        // The group's snapshot row (saving calls), stored only inside the buffer.
        if (sb.snapshot != nullptr) {
          const std::int64_t e = core::group_snapshot_row(chunk_first_row, __shfl_sync(kFull, batch.ordinal, a));
          if (core::snapshot_row_stored(e, sb.snapshot_rows)) {
            SnapshotScale quant;
            if constexpr (kQuantised) {
              quant = snapshot_scale_of<kMode>(lane_amax[u]);
              if (step == 0 && lane == 0) sb.snapshot_scales[e] = quant.scale;
            }
            encode_snapshot_piece<kMode, 8, E>(static_cast<unsigned char*>(sb.snapshot) + e * row_bytes, col, true,
                                               held[u], quant);
          }
        }
        float acc[8];
        unpack(held[u], acc);
#pragma unroll
        for (int k = 0; k < 8; ++k) acc[k] = decay[u] * acc[k];
        // The members in this batch: lanes a .. end - 1.
        const unsigned after = a == 31 ? 0u : (~continues >> (a + 1)) << (a + 1);
        const int end = after == 0u ? 32 : __ffs(static_cast<int>(after)) - 1;
        add_members(acc, token, coef, a, end);
        // A group that reaches the batch's end continues 32 positions at a time.
        for (int next = q0 + 32; end == 32 && next < CW; next += 32) {
          const int mq = next + lane;
          const std::uint64_t mkey = mq < CW ? keys[mq] : 0;
          const bool member = mq < CW && geo.keys.local_slot(mkey) == slot;
          const float mcoef = member ? wcoef[mq] : 0.0f;
          const unsigned members = __ballot_sync(kFull, member);
          const int more = members == kFull ? 32 : __ffs(static_cast<int>(~members)) - 1;
          const int mtoken = static_cast<int>(geo.keys.token(mkey));
          add_members(acc, mtoken, mcoef, 0, more);
          if (more < 32) break;
        }
        store_row<8>(static_cast<E*>(sb.bank) + (p * sps + slot) * hd + col, acc);
      }
    }
    int next = 0;
    if (lane == 0) next = atomicAdd(&next_batch, 1);
    q0 = q_begin + 32 * __shfl_sync(kFull, next, 0);
    if (q0 < q_end) batch = load_batch(q0);
  }
}

// A chunk's write positions cut into shares: about two CTAs an SM over both step streams'
// launches of a step (P x steps x shares CTAs), and at least a batch for every warp of a share.
int walk_shares(std::int64_t P, std::int64_t C, std::int64_t W, std::int64_t steps, int multiprocessors) {
  const std::int64_t wanted = (2 * multiprocessors + P * steps - 1) / (P * steps);
  const std::int64_t most = (C * W) / (walk_warps(C) * 32);
  return static_cast<int>(wanted < 1 ? 1 : wanted > most ? (most < 1 ? 1 : most) : wanted);
}

std::size_t staged_bytes(std::int64_t C) { return static_cast<std::size_t>(C) * kStepCols * sizeof(float); }

std::atomic<GroupWriter>& writer_choice() {
  static std::atomic<GroupWriter> writer{[] {
    constexpr GroupWriter kWriters[] = {GroupWriter::automatic, GroupWriter::per_position, GroupWriter::walk};
    const int named = core::env_choice("SDM_CUDA_WRITER", {"automatic", "positions", "walk"});
    return named < 0 ? GroupWriter::automatic : kWriters[named];
  }()};
  return writer;
}

template <typename E, SnapshotQuant kMode, int kWarps>
void launch(const Geometry& geo, const Phase1Buffers& p1, const StepBuffers& sb, std::int64_t ti,
            cudaStream_t stream) {
  constexpr auto kernel = write_walk<E, kMode, kWarps>;
  const std::size_t smem = staged_bytes(geo.C);
  allow_dynamic_shared_memory(kernel, smem, "cudaFuncSetAttribute (write_walk shared memory)");
  const std::int64_t steps = geo.hd / kStepCols;
  const int shares = walk_shares(geo.P, geo.C, geo.W, steps, multiprocessor_count());
  const dim3 grid(static_cast<unsigned>(geo.p_count), static_cast<unsigned>(steps), static_cast<unsigned>(shares));
  launch_dependent(kernel, grid, dim3(kWarps * 32), smem, stream, "write_walk", geo, p1, sb, ti, shares);
}

}  // namespace

namespace {
std::atomic<std::int64_t> walk_launches{0};
}  // namespace

GroupWriter group_writer_choice() { return writer_choice().load(std::memory_order_relaxed); }
std::int64_t write_walk_launches() { return walk_launches.load(std::memory_order_relaxed); }
void set_group_writer(GroupWriter writer) { writer_choice().store(writer, std::memory_order_relaxed); }

bool write_walk_fits(std::int64_t hd, std::int64_t C, bool vec8) {
  // 2 KiB beside the staged rows: the counter and the static shared memory of the included helpers.
  return vec8 && hd % kStepCols == 0 && staged_bytes(C) + 2048 <= shared_memory_optin();
}

bool write_walk_runs(const Geometry& geo, const StepBuffers& sb) { return write_walk_fits(geo.hd, geo.C, sb.vec8); }

double write_walk_batches_per_warp(std::int64_t hd, std::int64_t C, std::int64_t W, std::int64_t P,
                                   int multiprocessors) {
  const int shares = walk_shares(P, C, W, hd / kStepCols, multiprocessors);
  return static_cast<double>(C * W) / (static_cast<double>(shares) * walk_warps(C) * 32);
}

bool write_walk_pays(const Geometry& geo) {
  return write_walk_batches_per_warp(geo.hd, geo.C, geo.W, geo.P, multiprocessor_count()) >= kWalkMinBatches;
}

bool use_write_walk(const Geometry& geo, const StepBuffers& sb) {
  const GroupWriter writer = group_writer_choice();
  if (writer == GroupWriter::per_position || !write_walk_runs(geo, sb)) return false;
  return writer == GroupWriter::walk || write_walk_pays(geo);
}

void launch_write_walk(const Geometry& geo, const Phase1Buffers& p1, const StepBuffers& sb, std::int64_t ti,
                       cudaStream_t stream) {
  walk_launches.fetch_add(1, std::memory_order_relaxed);
  dispatch(
      [&](auto row, auto mode) {
        using E = typename decltype(row)::type;
        constexpr SnapshotQuant kMode = decltype(mode)::value;
        if (walk_warps(geo.C) == 8) launch<E, kMode, 8>(geo, p1, sb, ti, stream);
        else launch<E, kMode, 16>(geo, p1, sb, ti, stream);
      },
      Rows{sb.bf16_bank}, Snapshot{sb.snapshot_mode});
}

}  // namespace sdm::cuda

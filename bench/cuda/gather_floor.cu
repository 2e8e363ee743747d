// gather_floor.cu - the forward's gather by distinct rows (issue 24 milestone 4; the design's
// gather_groups, ../shared/design/ENGINE-V3.md §4.5b, whose review §3 (b) asks for its staging
// alone first), measured against the engine's gather before it is built into the engine:
//
//   sdm_gpu_gather_floor [--configs readme,big,flagship] [--slots product_key,heavy_reuse]
//                        [--chunks 64,128] [--stage-kib 96] [--ctas-a-chunk N] [--reps N] [--plan-only]
//
// On a recorded call (the benchmark's slot patterns, seed 7; k_eff / q_w weights and a bf16 bank
// drawn at random), the forward gather of every step, four ways:
//   rows    the engine's gather_rows (launch_weighted_gather): every entry loads its row piece
//           from L2 or DRAM, C (W + R) row requests a chunk;
//   stage   the gather by distinct rows' phase A alone: a CTA per (block of tokens, column slice
//           of kCols columns) copies its block's distinct rows' pieces into shared memory
//           (cp.async, 16 bytes a copy) and stops;
//   groups  phase A, then phase B: lane (token, 8-column part, chain c) sums the token's k entries
//           c, c + 8, c + 16, ... from +0 (fmaf, weight times the row piece read from shared
//           memory; +0 added for an entry without a row and where gather_rows pads the chain to
//           its window, as its w = 0 times a zero row does), then its q entries the same way; the 8
//           chains of a (token, column) are added in chain order through shared memory. That is
//           gather_rows' order (warp c of its CTA holds chain c), so the sums are its bits:
//           checked at every step and element against rows' (the "bits" column);
//   groups, device plan   the same with the plan built on the GPU (gather_plan_device.cuh: one CTA a
//           chunk, the host plan's greedy blocks), whose blocks, row sets and ordinals are checked
//           against the host plan's first, and whose own time a call is the last row.
// Blocks (bench/gather_plan.hpp): the chunk's consecutive tokens whose rows fit --stage-kib of
// shared memory (a list: one plan each); slices of 16 and 32 columns (32- / 64-byte pieces).
// Reports ms a call, us a step, the GB of row pieces each moves (rows: entries x hd x 2; stage /
// groups: the blocks' distinct rows x hd x 2) and its rate.
// --ctas-a-chunk N: the CTAs a chunk and slice, each taking every N-th of the chunk's blocks (the
// engine, which cannot read the device plan's block counts back, would fix it; 0, the default: the
// most blocks any chunk has, one block a CTA).
// --plan-only prints the plans alone (blocks a chunk, staged rows over requested rows), on any
// machine. Otherwise exits 0 with a message without a GPU.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "bench_config.hpp"
#include "cuda/common/async_copy.cuh"
#include "cuda/common/geometry.hpp"
#include "cuda/common/step_kernels.hpp"
#include "device_array.hpp"
#include "device_fill.cuh"
#include "device_timing.hpp"
#include "gather_plan.hpp"
#include "gather_plan_device.cuh"
#include "parse_list.hpp"
#include "slot_patterns.hpp"

namespace {

using namespace sdm;
using sdm::bench::fill;
using sdm::bench::median_ms;
using sdm::testing::cuda_ok;
using sdm::testing::CudaStream;
using sdm::testing::DeviceArray;

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kChains = 8;  // gather_rows' warps: chain c holds a side's entries c, c + 8, ...

struct GroupArgs {
  int C, hd, P, W, R;
  int ctas_a_chunk;                   // grid y = P * ctas_a_chunk; CTA j of a chunk takes its blocks j, j + ctas_a_chunk, ...
  const bench::GatherBlock* blocks;   // [chunks, C]: chunk n's blocks from n * C
  const std::int32_t* block_count;    // [chunks]
  const std::int32_t* rows;
  const std::int16_t *k_ord, *q_ord;  // [chunk tokens, W] / [.., R]
  const float *k_w, *q_w;
  const std::uint16_t* bank;          // [P * sps, hd] bf16 bits
  float *k_sums, *q_sums;             // [P * C, hd]: step rows p * C + i
  float* sink;                        // stage: one value a CTA, so that nothing is left unused
};

template <int kCols>
struct GroupShape {
  static constexpr int kParts = kCols / 8;                      // 16-byte pieces of a row slice
  static constexpr int kTokensPerWarp = 32 / (kChains * kParts);
  static constexpr int kTokensPerPass = kWarps * kTokensPerWarp;
  static constexpr std::size_t kPartialBytes = std::size_t{kTokensPerPass} * 2 * kChains * kCols * 4;
  static std::size_t smem(std::int64_t max_rows) {
    return kPartialBytes + static_cast<std::size_t>(max_rows) * kCols * 2;
  }
};

// +0 added to each column of acc: gather_rows' fmaf(0, 0, acc) of an entry without a row or of its
// padding (it turns a chain's -0, a sum of products that underflowed, into +0; nothing else).
__device__ __forceinline__ void add_zero(float (&acc)[8]) {
#pragma unroll
  for (int k = 0; k < 8; ++k) acc[k] = __fadd_rn(acc[k], 0.0f);
}

// acc += weight * piece (8 bf16 columns, one 16-byte shared load) for each of the side's entries
// chain, chain + 8, ... that has a row, +0 for each that has none, and +0 once more at the end
// where gather_rows pads the chain (its entries not a multiple of its window of 8 rows).
__device__ __forceinline__ void add_chain(const std::int16_t* ord, const float* weight, int count, int chain,
                                          const std::uint16_t* rows_s, int row_stride, float (&acc)[8]) {
  const int entries = chain < count ? (count - chain + kChains - 1) / kChains : 0;
#pragma unroll 4
  for (int e = chain; e < count; e += kChains) {
    const int o = ord[e];
    if (o < 0) {
      add_zero(acc);
      continue;
    }
    const uint4 u = *reinterpret_cast<const uint4*>(rows_s + o * row_stride);
    const float w = weight[e];
    const unsigned words[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      acc[2 * k] = fmaf(w, __uint_as_float(words[k] << 16), acc[2 * k]);
      acc[2 * k + 1] = fmaf(w, __uint_as_float(words[k] & 0xffff0000u), acc[2 * k + 1]);
    }
  }
  if (entries % 8 != 0) add_zero(acc);
}

// CTA (slice blockIdx.x, y = p * ctas_a_chunk + j) of step ti: the blocks j, j + ctas_a_chunk, ... of
// chunk ti * P + p, one after the other; see the file's comment.
template <int kCols, bool kStageOnly>
__global__ void __launch_bounds__(kThreads) gather_groups(GroupArgs a, int ti) {
  using Shape = GroupShape<kCols>;
  extern __shared__ float4 smem[];
  float* partial = reinterpret_cast<float*>(smem);  // [kTokensPerPass][2][kChains][kCols]
  std::uint16_t* rows_s = reinterpret_cast<std::uint16_t*>(reinterpret_cast<unsigned char*>(smem) + Shape::kPartialBytes);
  const int p = static_cast<int>(blockIdx.y) / a.ctas_a_chunk, j = static_cast<int>(blockIdx.y) % a.ctas_a_chunk;
  const std::int64_t chunk = static_cast<std::int64_t>(ti) * a.P + p;
  const int col0 = static_cast<int>(blockIdx.x) * kCols;
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  // The parts of a row piece in adjacent lanes: a quarter-warp's 16-byte shared loads then fall on
  // the kParts bank groups of each of 8 / kParts rows (the chains'), not on one group of 8 rows.
  const int part = lane % Shape::kParts, chain = lane / Shape::kParts % kChains, sub = lane / (kChains * Shape::kParts);
  float sink = 0.0f;
  for (int k = j; k < a.block_count[chunk]; k += a.ctas_a_chunk) {
    const bench::GatherBlock b = a.blocks[chunk * a.C + k];
    for (int at = static_cast<int>(threadIdx.x); at < b.rows * Shape::kParts; at += kThreads) {
      const int r = at / Shape::kParts, piece = at % Shape::kParts;
      sdm::cuda::copy_async<16>(rows_s + r * kCols + piece * 8,
                                a.bank + static_cast<std::int64_t>(a.rows[b.row_first + r]) * a.hd + col0 + piece * 8);
    }
    sdm::cuda::commit_async_copies();
    sdm::cuda::wait_async_groups<0>();
    __syncthreads();
    if constexpr (kStageOnly) {
      if (threadIdx.x == 0 && b.rows > 0) sink += static_cast<float>(rows_s[0]);
    } else {
      for (int t0 = 0; t0 < b.count; t0 += Shape::kTokensPerPass) {
        const int mine = warp * Shape::kTokensPerWarp + sub;  // this lane's token of the pass
        float acc[2][8] = {};
        if (t0 + mine < b.count) {
          const std::int64_t token = chunk * a.C + b.first + t0 + mine;
          const std::uint16_t* piece = rows_s + part * 8;
          add_chain(a.k_ord + token * a.W, a.k_w + token * a.W, a.W, chain, piece, kCols, acc[0]);
          add_chain(a.q_ord + token * a.R, a.q_w + token * a.R, a.R, chain, piece, kCols, acc[1]);
        }
#pragma unroll
        for (int side = 0; side < 2; ++side) {
          float* to = partial + ((mine * 2 + side) * kChains + chain) * kCols + part * 8;
          reinterpret_cast<float4*>(to)[0] = make_float4(acc[side][0], acc[side][1], acc[side][2], acc[side][3]);
          reinterpret_cast<float4*>(to)[1] = make_float4(acc[side][4], acc[side][5], acc[side][6], acc[side][7]);
        }
        __syncwarp();
        for (int o = lane; o < Shape::kTokensPerWarp * 2 * kCols; o += 32) {
          const int tok = warp * Shape::kTokensPerWarp + o / (2 * kCols), side = o / kCols % 2, col = o % kCols;
          if (t0 + tok >= b.count) continue;
          const float* from = partial + (tok * 2 + side) * kChains * kCols + col;
          float sum = from[0];
#pragma unroll
          for (int c = 1; c < kChains; ++c) sum += from[c * kCols];
          const std::int64_t row = static_cast<std::int64_t>(p) * a.C + b.first + t0 + tok;
          (side == 0 ? a.k_sums : a.q_sums)[row * a.hd + col0 + col] = sum;
        }
        __syncwarp();
      }
    }
    __syncthreads();  // every read of this block's rows before the next block's copies
  }
  if constexpr (kStageOnly) {
    if (threadIdx.x == 0) a.sink[blockIdx.y * gridDim.x + blockIdx.x] = sink;
  }
}

// A plan's blocks as the kernel reads them: chunk n's at [n * C, n * C + block_count[n]).
struct ChunkBlocks {
  std::vector<bench::GatherBlock> blocks;
  std::vector<std::int32_t> count;
  int most = 1;  // blocks of the chunk that has the most
};

ChunkBlocks by_chunk(const bench::GatherPlan& plan, std::int64_t C) {
  ChunkBlocks out;
  out.blocks.resize(static_cast<std::size_t>(plan.chunks * C));
  out.count.assign(static_cast<std::size_t>(plan.chunks), 0);
  for (const bench::GatherBlock& b : plan.blocks) {
    std::int32_t& k = out.count[static_cast<std::size_t>(b.chunk)];
    out.blocks[static_cast<std::size_t>(b.chunk * C + k)] = b;
    out.most = std::max(out.most, ++k);
  }
  return out;
}

struct Recorded {
  bench::GatherPlan plan;
  ChunkBlocks chunk_blocks;
  DeviceArray<bench::GatherBlock> blocks;
  DeviceArray<std::int32_t> block_count, rows, k_slot, q_slot;
  DeviceArray<std::int16_t> k_ord, q_ord;
  Recorded(bench::GatherPlan p, std::int64_t C)
      : plan(std::move(p)), chunk_blocks(by_chunk(plan, C)), blocks(chunk_blocks.blocks), block_count(chunk_blocks.count),
        rows(plan.rows), k_slot(plan.k_slot), q_slot(plan.q_slot), k_ord(plan.k_ord), q_ord(plan.q_ord) {}
};

template <int kCols, bool kStageOnly>
void launch_groups(const GroupArgs& args, std::int64_t ti, std::size_t smem, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(args.hd / kCols), static_cast<unsigned>(args.P * args.ctas_a_chunk));
  gather_groups<kCols, kStageOnly><<<grid, kThreads, smem, stream>>>(args, static_cast<int>(ti));
}

// Every element of both sums bitwise equal at every step: the count of those that are not.
std::int64_t compare_steps(const std::vector<float>& want, const std::vector<float>& got) {
  std::int64_t differ = 0;
  for (std::size_t k = 0; k < want.size(); ++k) differ += std::memcmp(&want[k], &got[k], sizeof(float)) != 0;
  return differ;
}

// The device plan against the host plan: the same blocks (tokens and row counts) and row sets, and
// every entry's ordinal naming its own slot. "equal", or the first difference.
std::string compare_plans(const bench::GatherPlan& host, const ChunkBlocks& host_blocks, std::int64_t C,
                          std::int64_t W, std::int64_t R, const DeviceArray<bench::GatherBlock>& blocks,
                          const DeviceArray<std::int32_t>& count, const DeviceArray<std::int32_t>& rows,
                          const DeviceArray<std::int16_t>& k_ord, const DeviceArray<std::int16_t>& q_ord) {
  const std::vector<bench::GatherBlock> b = blocks.to_host();
  const std::vector<std::int32_t> n_blocks = count.to_host(), r = rows.to_host();
  const std::vector<std::int16_t> ko = k_ord.to_host(), qo = q_ord.to_host();
  for (std::int64_t n = 0; n < host.chunks; ++n) {
    const std::string at = "chunk " + std::to_string(n);
    if (n_blocks[n] != host_blocks.count[n]) return at + ": " + std::to_string(n_blocks[n]) + " blocks, host " + std::to_string(host_blocks.count[n]);
    for (std::int32_t k = 0; k < n_blocks[n]; ++k) {
      const bench::GatherBlock& d = b[n * C + k];
      const bench::GatherBlock& h = host_blocks.blocks[n * C + k];
      if (d.first != h.first || d.count != h.count || d.rows != h.rows) return at + " block " + std::to_string(k) + " differs";
      std::vector<std::int32_t> dr(r.begin() + d.row_first, r.begin() + d.row_first + d.rows);
      std::sort(dr.begin(), dr.end());
      if (!std::equal(dr.begin(), dr.end(), host.rows.begin() + h.row_first)) return at + " block " + std::to_string(k) + ": rows differ";
      for (std::int32_t i = d.first; i < d.first + d.count; ++i) {
        const std::int64_t token = n * C + i;
        for (std::int64_t w = 0; w < W + R; ++w) {
          const bool k_side = w < W;
          const std::int64_t e = k_side ? token * W + w : token * R + (w - W);
          const std::int32_t slot = k_side ? host.k_slot[e] : host.q_slot[e];
          const std::int16_t o = k_side ? ko[e] : qo[e];
          if (slot < 0 ? o != -1 : (o < 0 || o >= d.rows || r[d.row_first + o] != slot)) {
            return at + " token " + std::to_string(i) + " entry " + std::to_string(w) + ": ordinal " + std::to_string(o);
          }
        }
      }
    }
  }
  return "equal";
}

template <int kCols>
void measure_slices(const bench::BenchConfig& c, bench::SlotPattern pattern, std::int64_t C,
                    const bench::WriteReadSlots& slots, std::int64_t stage_kib, const DeviceArray<std::uint16_t>& bank,
                    const DeviceArray<float>& k_w, const DeviceArray<float>& q_w, const cuda::Geometry& geo, int reps,
                    int ctas_a_chunk, cudaStream_t stream, bool with_rows) {
  using Shape = GroupShape<kCols>;
  if (c.hd % kCols != 0) return;
  const std::int64_t max_rows = std::min<std::int64_t>(stage_kib * 1024 / (kCols * 2), 32767);
  const std::size_t smem = Shape::smem(max_rows);
  int capacity = 1;
  while (capacity < 2 * max_rows) capacity *= 2;
  const std::size_t plan_smem = bench::device_plan_smem(capacity);
  int device = 0, optin = 0;
  cuda_ok(cudaGetDevice(&device), "cudaGetDevice");
  cuda_ok(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device), "cudaDeviceGetAttribute");
  if (std::max(smem, plan_smem) > static_cast<std::size_t>(optin) || c.W + c.R > bench::kPlanThreads) {
    std::printf("%s: %lld KiB of staged rows need %zu / %zu bytes of shared memory a CTA (gather / plan), this device "
                "has %d, or W + R > %d: skipped\n", c.name.c_str(), static_cast<long long>(stage_kib), smem, plan_smem,
                optin, bench::kPlanThreads);
    return;
  }
  const Recorded rec(bench::make_gather_plan(slots.writes, slots.reads, c.P, c.T, c.W, c.R, C, max_rows), C);
  const bench::GatherPlan& plan = rec.plan;
  const std::int64_t Nt = plan.steps, step_rows = c.P * C, entries = plan.chunks * C * (c.W + c.R);
  DeviceArray<float> k_ref(static_cast<std::size_t>(step_rows * c.hd)), q_ref(static_cast<std::size_t>(step_rows * c.hd));
  DeviceArray<float> k_out(static_cast<std::size_t>(step_rows * c.hd)), q_out(static_cast<std::size_t>(step_rows * c.hd));
  const int ctas = ctas_a_chunk > 0 ? ctas_a_chunk : rec.chunk_blocks.most;
  DeviceArray<float> sink(static_cast<std::size_t>(c.P * ctas * (c.hd / kCols)));
  GroupArgs args{static_cast<int>(C), static_cast<int>(c.hd), static_cast<int>(c.P), static_cast<int>(c.W),
                 static_cast<int>(c.R), ctas, rec.blocks.get(), rec.block_count.get(), rec.rows.get(),
                 rec.k_ord.get(), rec.q_ord.get(), k_w.get(), q_w.get(), bank.get(), k_out.get(), q_out.get(), sink.get()};
  for (const auto kernel : {gather_groups<kCols, false>, gather_groups<kCols, true>}) {
    cuda_ok(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)),
            "cudaFuncSetAttribute (gather_groups)");
  }
  cuda_ok(cudaFuncSetAttribute(bench::plan_gather_blocks, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               static_cast<int>(plan_smem)), "cudaFuncSetAttribute (plan_gather_blocks)");
  const auto rows_step = [&](std::int64_t ti, float* k_sums, float* q_sums) {
    cuda::launch_weighted_gather(geo, bank.get(), true, true, cuda::GatherSide{rec.k_slot.get(), k_w.get(), c.W},
                                 cuda::GatherSide{rec.q_slot.get(), q_w.get(), c.R}, ti, k_sums, q_sums, stream);
  };
  // Bits: every step's sums against rows', with a plan's arrays.
  const auto count_differing = [&](const GroupArgs& with) {
    std::int64_t differ = 0;
    for (std::int64_t ti = 0; ti < Nt; ++ti) {
      rows_step(ti, k_ref.get(), q_ref.get());
      launch_groups<kCols, false>(with, ti, smem, stream);
      cuda_ok(cudaStreamSynchronize(stream), "gather_floor (bits)");
      differ += compare_steps(k_ref.to_host(), k_out.to_host()) + compare_steps(q_ref.to_host(), q_out.to_host());
    }
    return differ;
  };
  const auto verdict = [](std::int64_t differ) { return differ == 0 ? std::string("equal") : std::to_string(differ) + " differ"; };
  const std::int64_t differ = count_differing(args);
  // The same plan built on the GPU (gather_plan_device.cuh), checked against the host's and used.
  DeviceArray<bench::GatherBlock> d_blocks(static_cast<std::size_t>(plan.chunks * C));
  DeviceArray<std::int32_t> d_count(static_cast<std::size_t>(plan.chunks)), d_rows(static_cast<std::size_t>(entries));
  DeviceArray<std::int16_t> d_k_ord(plan.k_ord.size()), d_q_ord(plan.q_ord.size());
  const bench::DevicePlanArgs plan_args{static_cast<int>(C), static_cast<int>(c.W), static_cast<int>(c.R),
                                        static_cast<int>(max_rows), capacity, rec.k_slot.get(), rec.q_slot.get(),
                                        d_blocks.get(), d_count.get(), d_rows.get(), d_k_ord.get(), d_q_ord.get()};
  const auto plan_call = [&] {
    bench::plan_gather_blocks<<<static_cast<unsigned>(plan.chunks), bench::kPlanThreads, plan_smem, stream>>>(plan_args);
    cuda_ok(cudaGetLastError(), "plan_gather_blocks");
  };
  const double plan_ms = median_ms(reps, plan_call);
  cuda_ok(cudaDeviceSynchronize(), "plan_gather_blocks");
  const std::string plans = compare_plans(plan, rec.chunk_blocks, C, c.W, c.R, d_blocks, d_count, d_rows, d_k_ord, d_q_ord);
  GroupArgs device_args = args;
  device_args.blocks = d_blocks.get(), device_args.block_count = d_count.get(), device_args.rows = d_rows.get();
  device_args.k_ord = d_k_ord.get(), device_args.q_ord = d_q_ord.get();
  const std::int64_t device_differ = plans == "equal" ? count_differing(device_args) : -1;
  std::int64_t block_rows = 0;
  for (const bench::GatherBlock& b : plan.blocks) block_rows += b.rows;
  const double entry_gb = static_cast<double>(plan.entries_with_rows) * static_cast<double>(c.hd) * 2e-9;
  const double staged_gb = static_cast<double>(block_rows) * static_cast<double>(c.hd) * 2e-9;
  const double blocks_a_chunk = static_cast<double>(plan.blocks.size()) / static_cast<double>(plan.chunks);
  const auto report = [&](const char* way, double ms, double gb, const std::string& bits) {
    std::printf("| %s | %s | %lld | %s | %d | %lld | %.2f | %.3f | %.3f | %.2f | %.3f | %.2f | %s |\n", c.name.c_str(),
                bench::slot_pattern_name(pattern), static_cast<long long>(C), way, kCols, static_cast<long long>(stage_kib),
                blocks_a_chunk, staged_gb / entry_gb, ms, 1e3 * ms / static_cast<double>(Nt), gb, gb / (ms * 1e-3) * 1e-3,
                bits.c_str());
    std::fflush(stdout);  // each row kept should a time limit stop the run
  };
  if (with_rows) {
    const double ms = median_ms(reps, [&] {
      for (std::int64_t ti = 0; ti < Nt; ++ti) rows_step(ti, k_ref.get(), q_ref.get());
    });
    report("rows", ms, entry_gb, "-");
  }
  const double stage_ms = median_ms(reps, [&] {
    for (std::int64_t ti = 0; ti < Nt; ++ti) launch_groups<kCols, true>(args, ti, smem, stream);
  });
  report("stage", stage_ms, staged_gb, "-");
  const double groups_ms = median_ms(reps, [&] {
    for (std::int64_t ti = 0; ti < Nt; ++ti) launch_groups<kCols, false>(args, ti, smem, stream);
  });
  report("groups", groups_ms, staged_gb, verdict(differ));
  const double device_ms = median_ms(reps, [&] {
    for (std::int64_t ti = 0; ti < Nt; ++ti) launch_groups<kCols, false>(device_args, ti, smem, stream);
  });
  report("groups, device plan", device_ms, staged_gb, device_differ < 0 ? "plan: " + plans : verdict(device_differ));
  report("device plan (a call)", plan_ms, 0.0, plans);
  cuda_ok(cudaDeviceSynchronize(), "gather_floor");
}

void measure(const bench::BenchConfig& c, bench::SlotPattern pattern, std::int64_t C,
             const std::vector<std::int64_t>& stage_kib, int reps, int ctas_a_chunk) {
  const bench::WriteReadSlots slots = bench::make_write_read_slots(pattern, c.P, c.T, c.W, c.R, c.slots_per_stream, 7);
  const std::int64_t Nt = (c.T + C - 1) / C, tokens = Nt * c.P * C, bank_rows = c.P * c.slots_per_stream;
  DeviceArray<std::uint16_t> bank(static_cast<std::size_t>(bank_rows * c.hd));
  DeviceArray<float> k_w(static_cast<std::size_t>(tokens * c.W)), q_w(static_cast<std::size_t>(tokens * c.R));
  fill(bank, bank_rows * c.hd, 4);
  fill(k_w, tokens * c.W, 5, 0.01f, 1.0f);
  fill(q_w, tokens * c.R, 6, 0.01f, 1.0f);
  cuda::Geometry geo;
  geo.P = c.P, geo.T = c.T, geo.W = c.W, geo.R = c.R, geo.hd = c.hd, geo.C = C, geo.sps = c.slots_per_stream;
  geo.Nt = Nt, geo.N = Nt * c.P, geo.p_first = 0, geo.p_count = c.P;
  const CudaStream stream;  // blocking: ordered with the legacy stream median_ms times on
  bool first = true;
  for (const std::int64_t kib : stage_kib) {
    measure_slices<16>(c, pattern, C, slots, kib, bank, k_w, q_w, geo, reps, ctas_a_chunk, stream.get(), first);
    measure_slices<32>(c, pattern, C, slots, kib, bank, k_w, q_w, geo, reps, ctas_a_chunk, stream.get(), false);
    first = false;
  }
}

// --plan-only (no GPU needed): the plans' blocks and staged rows against the rows a per-entry
// gather requests, per config, slot pattern, chunk, budget and slice width.
void print_plans(const std::vector<std::string>& configs, const std::vector<bench::SlotPattern>& patterns,
                 const std::vector<std::int64_t>& chunks, const std::vector<std::int64_t>& stage_kib) {
  std::printf("| config | slots | C | stage KiB | slice cols | rows a block at most | blocks a chunk | "
              "staged / requested |\n|---|---|---|---|---|---|---|---|\n");
  for (const std::string& name : configs) {
    const bench::BenchConfig& c = bench::find_config(name);
    for (const bench::SlotPattern pattern : patterns) {
      const bench::WriteReadSlots slots = bench::make_write_read_slots(pattern, c.P, c.T, c.W, c.R, c.slots_per_stream, 7);
      for (const std::int64_t C : chunks) {
        for (const std::int64_t kib : stage_kib) {
          for (const int cols : {16, 32}) {
            const std::int64_t max_rows = std::min<std::int64_t>(kib * 1024 / (cols * 2), 32767);
            const bench::GatherPlan plan = bench::make_gather_plan(slots.writes, slots.reads, c.P, c.T, c.W, c.R, C, max_rows);
            std::int64_t rows = 0;
            for (const bench::GatherBlock& b : plan.blocks) rows += b.rows;
            std::printf("| %s | %s | %lld | %lld | %d | %lld | %.2f | %.3f |\n", c.name.c_str(),
                        bench::slot_pattern_name(pattern), static_cast<long long>(C), static_cast<long long>(kib), cols,
                        static_cast<long long>(max_rows),
                        static_cast<double>(plan.blocks.size()) / static_cast<double>(plan.chunks),
                        static_cast<double>(rows) / static_cast<double>(plan.entries_with_rows));
            std::fflush(stdout);
          }
        }
      }
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> configs = {"readme", "big", "flagship"};
  std::vector<bench::SlotPattern> patterns = {bench::SlotPattern::product_key, bench::SlotPattern::heavy_reuse};
  std::vector<std::int64_t> chunks = {64, 128}, stage_kib = {96};
  int reps = 5, ctas_a_chunk = 0;
  bool plan_only = false;
  const auto integer = [](const std::string& x) { return static_cast<std::int64_t>(std::stoll(x)); };
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const bool has_value = i + 1 < argc;
    if (arg == "--configs" && has_value) configs = bench::parse_list(argv[++i], [](const std::string& x) { return x; });
    else if (arg == "--slots" && has_value) patterns = bench::parse_list(argv[++i], bench::parse_slot_pattern);
    else if (arg == "--chunks" && has_value) chunks = bench::parse_list(argv[++i], integer);
    else if (arg == "--stage-kib" && has_value) stage_kib = bench::parse_list(argv[++i], integer);
    else if (arg == "--reps" && has_value) reps = std::max(1, std::atoi(argv[++i]));
    else if (arg == "--ctas-a-chunk" && has_value) ctas_a_chunk = std::max(0, std::atoi(argv[++i]));
    else if (arg == "--plan-only") plan_only = true;
    else {
      std::fprintf(stderr, "sdm_gpu_gather_floor: unknown argument %s\n", arg.c_str());
      return 2;
    }
  }
  if (plan_only) {
    print_plans(configs, patterns, chunks, stage_kib);
    return 0;
  }
  int sms = 0;
  double copy_bw = 0.0;
  if (!bench::print_device("sdm_gpu_gather_floor", &sms, &copy_bw)) return 0;
  std::printf("\n| config | slots | C | way | slice cols | stage KiB | blocks a chunk | staged / requested | ms a call | "
              "us a step | GB row pieces | TB/s | bits vs rows |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (const std::string& name : configs) {
    const bench::BenchConfig& c = bench::find_config(name);
    for (const bench::SlotPattern pattern : patterns) {
      for (const std::int64_t C : chunks) measure(c, pattern, C, stage_kib, reps, ctas_a_chunk);
    }
  }
  return 0;
}

// walk_floor.cu - what the planned reuse-proof slot walk of issue 24 (the design's M1,
// ../shared/design/ENGINE-V3.md §4.3; its review §3 asks for these numbers first) stands on,
// measured before it is built:
//
//   sdm_gpu_walk_floor [--configs readme,big,flagship] [--slots product_key,heavy_reuse]
//                      [--tiles 32,64,128] [--pieces 0,64] [--reps N]
//
// (1) PDL chain: 6 kernels x 128 steps linked by programmatic dependent launch (as the engine
//     launches a step's kernels), each CTA (one an SM) waiting for its predecessor, loading 48 KiB
//     the predecessor stored and storing 48 KiB; against the same chain launched plainly. Gives
//     the per-kernel floor of a dependent step on this device.
// (2) Walk skeleton on a recorded call (the benchmark's slot patterns, seeds 7 / 8 as
//     sdm_gpu_bench; bench/walk_plan.hpp: slot-major record stream, tiles of L positions snapped
//     back to group starts). One launch a step over its P chunks: CTA = kWarps warps over one
//     chunk and one column slice of SW = 32 x kCols columns (grid: tile blocks, slices, streams);
//     the CTA stages the chunk's dU and dy slices (f32) with cp.async; each warp walks one tile's
//     groups: the group's G and M0 slices (bf16; M0: the written group's snapshot row, else the
//     bank row) come through a per-warp cp.async ring kRing groups ahead; each member does the
//     walk's on-chip work (write: ret = a u, acc += b ret, dot ret . M0; read: sum += b y,
//     dot y . M0) and its dot partial goes through a per-warp transpose in shared memory to one
//     plane value per (record, slice); at the group's end G = acc + sum is stored (bf16).
//     --pieces: groups cut into pieces of at most that many records (0: whole slots), each piece
//     walked as a group (the design's sub-tiles for long groups; the pieces of a slot store G in
//     turn, and the combine a real walk needs is not timed).
//     Reports ms a call, the bank-row bytes (groups x (G read + G write + M0 read)), and those
//     plus staging, record and plane bytes as a rate against the copy bandwidth of the same run.
// Numerics are not the engine's: this is a timing skeleton (the values only keep the work live).
// Exits 0 with a message without a GPU.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench_config.hpp"
#include "cuda/common/async_copy.cuh"
#include "cuda/common/dependent_launch.cuh"
#include "device_array.hpp"
#include "device_fill.cuh"
#include "device_timing.hpp"
#include "parse_list.hpp"
#include "slot_patterns.hpp"
#include "walk_plan.hpp"

namespace {

using namespace sdm;
using sdm::testing::cuda_ok;
using sdm::testing::DeviceArray;
using sdm::bench::bf16_bits;
using sdm::bench::fill;
using sdm::bench::median_ms;
using sdm::cuda::commit_async_copies;
using sdm::cuda::copy_async;
using sdm::cuda::launch_with_pdl;
using sdm::cuda::wait_async_groups;
using sdm::cuda::wait_for_predecessor;

// ---- (1) the PDL chain ----------------------------------------------------------------------------

constexpr int kChainThreads = 256;
constexpr int kChainFloats = 48 * 1024 / 4;  // 48 KiB a CTA

__global__ void __launch_bounds__(kChainThreads) chain_kernel(const float4* in, float4* out) {
  wait_for_predecessor();
  const std::int64_t base = static_cast<std::int64_t>(blockIdx.x) * (kChainFloats / 4);
  for (int k = static_cast<int>(threadIdx.x); k < kChainFloats / 4; k += kChainThreads) {
    float4 x = in[base + k];
    x.x += 1.0f;
    out[base + k] = x;
  }
}

void pdl_chain(int sms, int reps) {
  constexpr int kKernels = 6, kSteps = 128;
  DeviceArray<float4> a(static_cast<std::size_t>(sms) * kChainFloats / 4), b(static_cast<std::size_t>(sms) * kChainFloats / 4);
  a.fill_bytes(0);
  b.fill_bytes(0);
  cudaStream_t stream;
  cuda_ok(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  for (const bool pdl : {true, false}) {
    const double ms = median_ms(reps, [&] {
      for (int k = 0; k < kKernels * kSteps; ++k) {
        const float4* in = (k % 2 == 0 ? a : b).get();
        float4* out = (k % 2 == 0 ? b : a).get();
        launch_with_pdl(pdl, chain_kernel, dim3(static_cast<unsigned>(sms)), dim3(kChainThreads), 0, stream,
                        "chain_kernel", in, out);
      }
      cuda_ok(cudaStreamSynchronize(stream), "chain");
    });
    std::printf("pdl chain (%s): %d kernels x %d steps, %d CTAs of 48 KiB each: %.3f ms, %.2f us a kernel\n",
                pdl ? "PDL" : "plain", kKernels, kSteps, sms, ms, 1e3 * ms / (kKernels * kSteps));
  }
  cudaStreamDestroy(stream);
}

// ---- (2) the walk skeleton ------------------------------------------------------------------------

struct WalkArgs {
  int C, hd, P, E, TU, L;
  std::int64_t chunks;
  const int4* groups;               // {slot, first, writes | reads << 16, m0 row or -1}
  const std::int64_t* group_begin;  // [chunks + 1]
  const int4* records;              // [chunks, E] {token, lane, a, b (float bits)}
  const int* tile_groups;           // [chunks, TU + 1]
  const float* du;                  // [chunks * C, hd]
  const float* dy;
  std::uint16_t* grad;              // [P * sps, hd] bf16
  const std::uint16_t* bank;        // [P * sps, hd] bf16
  const std::uint16_t* snapshot;    // [written groups, hd] bf16
  float* planes;                    // [slices, chunks * E]
};

template <int kCols>
struct WalkShape {
  static constexpr int kSliceCols = 32 * kCols;
  static constexpr int kWarps = kCols == 4 ? 16 : 8;
  static constexpr int kRing = 4;
  static std::size_t smem(int C, int L) {
    const std::size_t per_warp = kRing * 2 * kSliceCols * 2 + 32 * 32 * 4 + static_cast<std::size_t>(L) * 16;
    return 2 * static_cast<std::size_t>(C) * kSliceCols * 4 + kWarps * per_warp;
  }
};

template <int kCols>
__device__ __forceinline__ void load_bf16(const std::uint16_t* p, float (&x)[kCols]) {
  if constexpr (kCols == 4) {
    const uint2 u = *reinterpret_cast<const uint2*>(p);
    x[0] = __uint_as_float(u.x << 16), x[1] = __uint_as_float(u.x & 0xffff0000u);
    x[2] = __uint_as_float(u.y << 16), x[3] = __uint_as_float(u.y & 0xffff0000u);
  } else {
    const uint4 u = *reinterpret_cast<const uint4*>(p);
    const unsigned w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int k = 0; k < 4; ++k) x[2 * k] = __uint_as_float(w[k] << 16), x[2 * k + 1] = __uint_as_float(w[k] & 0xffff0000u);
  }
}

template <int kCols>
__device__ __forceinline__ void load_f32(const float* p, float (&x)[kCols]) {
#pragma unroll
  for (int k = 0; k < kCols; k += 4) {
    const float4 v = *reinterpret_cast<const float4*>(p + k);
    x[k] = v.x, x[k + 1] = v.y, x[k + 2] = v.z, x[k + 3] = v.w;
  }
}

template <int kCols>
__device__ __forceinline__ void store_bf16(std::uint16_t* p, const float (&x)[kCols]) {
  unsigned w[kCols / 2];
#pragma unroll
  for (int k = 0; k < kCols / 2; ++k) w[k] = bf16_bits(x[2 * k]) | (static_cast<unsigned>(bf16_bits(x[2 * k + 1])) << 16);
  if constexpr (kCols == 4) *reinterpret_cast<uint2*>(p) = make_uint2(w[0], w[1]);
  else *reinterpret_cast<uint4*>(p) = make_uint4(w[0], w[1], w[2], w[3]);
}

template <int kCols>
__global__ void __launch_bounds__(WalkShape<kCols>::kWarps * 32, 1) walk_skeleton(WalkArgs a, int ti) {
  using Shape = WalkShape<kCols>;
  constexpr int SW = Shape::kSliceCols, kRing = Shape::kRing;
  extern __shared__ float4 smem[];
  float* du_s = reinterpret_cast<float*>(smem);
  float* dy_s = du_s + a.C * SW;
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  unsigned char* warp_area = reinterpret_cast<unsigned char*>(dy_s + a.C * SW) +
                             static_cast<std::size_t>(warp) * (kRing * 2 * SW * 2 + 32 * 32 * 4 + a.L * 16);
  std::uint16_t* ring = reinterpret_cast<std::uint16_t*>(warp_area);           // [kRing][G | M0][SW]
  float* transpose = reinterpret_cast<float*>(warp_area + kRing * 2 * SW * 2);  // [32][32], swizzled
  int4* infos = reinterpret_cast<int4*>(transpose + 32 * 32);                   // the tile's groups
  const int p = static_cast<int>(blockIdx.z), s = static_cast<int>(blockIdx.y), col0 = s * SW;
  const std::int64_t n = static_cast<std::int64_t>(ti) * a.P + p;

  // 1. stage the chunk's dU and dy slices
  const float* du = a.du + n * a.C * a.hd + col0;
  const float* dy = a.dy + n * a.C * a.hd + col0;
  const int pieces = a.C * SW / 4;
  for (int at = static_cast<int>(threadIdx.x); at < 2 * pieces; at += static_cast<int>(blockDim.x)) {
    const int which = at / pieces, rest = at - which * pieces, i = rest / (SW / 4), c = (rest % (SW / 4)) * 4;
    copy_async<16>((which == 0 ? du_s : dy_s) + i * SW + c, (which == 0 ? du : dy) + static_cast<std::int64_t>(i) * a.hd + c);
  }
  commit_async_copies();
  const int tile = static_cast<int>(blockIdx.x) * Shape::kWarps + warp;
  const int* tiles = a.tile_groups + n * (a.TU + 1);
  const int g0 = tile < a.TU ? tiles[tile] : 0, g1 = tile < a.TU ? tiles[tile + 1] : 0;
  const std::int64_t gbase = a.group_begin[n];
  for (int g = g0 + lane; g < g1; g += 32) infos[g - g0] = a.groups[gbase + g];
  wait_async_groups<0>();
  __syncthreads();
  if (g0 >= g1) return;

  const int4* records = a.records + n * a.E;
  float* plane = a.planes + static_cast<std::int64_t>(s) * a.chunks * a.E + n * a.E;
  const int lane_col = lane * kCols;
  const auto issue = [&](int g) {  // group g's G and M0 slices into ring slot (g - g0) % kRing
    if (g < g1) {
      const int4 info = infos[g - g0];
      const std::uint16_t* from_g = a.grad + static_cast<std::int64_t>(info.x) * a.hd + col0 + lane_col;
      const std::uint16_t* from_m0 = (info.w >= 0 ? a.snapshot + static_cast<std::int64_t>(info.w) * a.hd
                                                  : a.bank + static_cast<std::int64_t>(info.x) * a.hd) +
                                     col0 + lane_col;
      std::uint16_t* slot = ring + ((g - g0) % kRing) * 2 * SW;
      copy_async<kCols * 2>(slot + lane_col, from_g);
      copy_async<kCols * 2>(slot + SW + lane_col, from_m0);
    }
    commit_async_copies();
  };
#pragma unroll
  for (int k = 0; k < kRing; ++k) issue(g0 + k);

  // Records come 32 at a time (lane j holds record r0 + j of the window); partials go through the
  // transpose: row m % 32, column lane ^ (m % 32).
  const int r_first = infos[0].y;
  int window = -1;
  int4 held = make_int4(0, 0, 0, 0);
  const auto flush = [&](int r_end) {  // the window's plane values, records [window*32 + r_first, r_end)
    __syncwarp();
    const int r = r_first + window * 32 + lane;
    if (r < r_end) {
      float total = 0.0f;
#pragma unroll 8
      for (int k = 0; k < 32; ++k) total += transpose[lane * 32 + (k ^ lane)];
      plane[r] = total;
    }
    __syncwarp();
  };
  for (int g = g0; g < g1; ++g) {
    const int4 info = infos[g - g0];
    const int writes = info.z & 0xffff, reads = info.z >> 16;
    wait_async_groups<kRing - 1>();
    const std::uint16_t* slot = ring + ((g - g0) % kRing) * 2 * SW;
    float grad[kCols], m0[kCols], acc[kCols], sum[kCols];
    load_bf16<kCols>(slot + lane_col, grad);
    load_bf16<kCols>(slot + SW + lane_col, m0);
#pragma unroll
    for (int k = 0; k < kCols; ++k) acc[k] = writes > 0 ? 0.97f * grad[k] : grad[k], sum[k] = 0.0f;
    for (int m = 0; m < writes + reads; ++m) {
      const int r = info.y + m, rel = r - r_first;
      if (rel / 32 != window) {
        if (window >= 0) flush(r);
        window = rel / 32;
        held = records[r_first + window * 32 + lane < a.E ? r_first + window * 32 + lane : a.E - 1];
      }
      const int token = __shfl_sync(0xffffffffu, held.x, rel % 32);
      const float x = __int_as_float(__shfl_sync(0xffffffffu, held.z, rel % 32));
      const float y = __int_as_float(__shfl_sync(0xffffffffu, held.w, rel % 32));
      float piece[kCols], dot = 0.0f;
      if (m < writes) {
        load_f32<kCols>(du_s + token * SW + lane_col, piece);
#pragma unroll
        for (int k = 0; k < kCols; ++k) {
          const float ret = x * piece[k];
          acc[k] = fmaf(y, ret, acc[k]);
          dot = fmaf(ret, m0[k], dot);
        }
      } else {
        load_f32<kCols>(dy_s + token * SW + lane_col, piece);
#pragma unroll
        for (int k = 0; k < kCols; ++k) {
          sum[k] = fmaf(y, piece[k], sum[k]);
          dot = fmaf(piece[k], m0[k], dot);
        }
      }
      transpose[(rel % 32) * 32 + (lane ^ (rel % 32))] = dot;
    }
#pragma unroll
    for (int k = 0; k < kCols; ++k) acc[k] += sum[k];
    store_bf16<kCols>(a.grad + static_cast<std::int64_t>(info.x) * a.hd + col0 + lane_col, acc);
    issue(g + kRing);
  }
  const int4 last = infos[g1 - g0 - 1];
  flush(last.y + (last.z & 0xffff) + (last.z >> 16));
}

// The plan's arrays on the device (records carry two random scalars each: a, b).
struct DevicePlan {
  DeviceArray<int4> groups, records;
  DeviceArray<std::int64_t> group_begin;
  DeviceArray<int> tile_groups;
  explicit DevicePlan(const bench::WalkPlan& plan)
      : groups(pack_groups(plan)), records(pack_records(plan)), group_begin(plan.group_begin),
        tile_groups(plan.tile_groups) {}
  static std::vector<int4> pack_groups(const bench::WalkPlan& plan) {
    std::vector<int4> out(plan.groups.size());
    for (std::size_t g = 0; g < out.size(); ++g) {
      const bench::WalkGroup& x = plan.groups[g];
      if (x.writes > 0xffff || x.reads > 0x7fff) throw std::runtime_error("walk_floor: a group too long to pack");
      out[g] = make_int4(x.slot, x.first, x.writes | (x.reads << 16), plan.m0_row[g]);
    }
    return out;
  }
  static std::vector<int4> pack_records(const bench::WalkPlan& plan) {
    std::vector<int4> out(plan.records.size());
    for (std::size_t r = 0; r < out.size(); ++r) {
      const float a = -0.1f - 0.2f * static_cast<float>(r % 7) / 7.0f, b = 0.3f + 0.1f * static_cast<float>(r % 5) / 5.0f;
      out[r] = make_int4(plan.records[r].token, plan.records[r].lane, static_cast<int>(__builtin_bit_cast(unsigned, a)),
                         static_cast<int>(__builtin_bit_cast(unsigned, b)));
    }
    return out;
  }
};

template <int kCols>
void walk_config(const bench::BenchConfig& c, bench::SlotPattern pattern, const std::vector<std::int64_t>& tile_lens,
                 const std::vector<std::int64_t>& pieces, int reps, double copy_bw) {
  using Shape = WalkShape<kCols>;
  const bench::WriteReadSlots slots = bench::make_write_read_slots(pattern, c.P, c.T, c.W, c.R, c.slots_per_stream, 7);
  const std::vector<std::int32_t>& writes = slots.writes;
  const std::vector<std::int32_t>& reads = slots.reads;
  const std::int64_t C = c.C, Nt = (c.T + C - 1) / C, N = Nt * c.P, rows = c.P * c.slots_per_stream;
  if (c.hd % Shape::kSliceCols != 0) {
    std::printf("%s: hd %lld is not a multiple of %d columns, skipped\n", c.name.c_str(), static_cast<long long>(c.hd),
                Shape::kSliceCols);
    return;
  }
  const int slices = static_cast<int>(c.hd / Shape::kSliceCols);
  DeviceArray<float> du(static_cast<std::size_t>(N * C * c.hd)), dy(static_cast<std::size_t>(N * C * c.hd));
  DeviceArray<std::uint16_t> grad(static_cast<std::size_t>(rows * c.hd)), bank(static_cast<std::size_t>(rows * c.hd));
  fill(du, N * C * c.hd, 1);
  fill(dy, N * C * c.hd, 2);
  fill(grad, rows * c.hd, 3);
  fill(bank, rows * c.hd, 4);
  for (const std::int64_t max_group : pieces) {
    for (const std::int64_t L : tile_lens) {
      const bench::WalkPlan plan = bench::make_walk_plan(writes, reads, c.P, c.T, c.W, c.R, C, L, max_group);
      const DevicePlan device(plan);
      DeviceArray<std::uint16_t> snapshot(static_cast<std::size_t>(std::max<std::int64_t>(plan.written_groups, 1) * c.hd));
      fill(snapshot, plan.written_groups * c.hd, 5);
      DeviceArray<float> planes(static_cast<std::size_t>(slices * N * plan.records_per_chunk));
      WalkArgs args{static_cast<int>(C), static_cast<int>(c.hd), static_cast<int>(c.P),
                    static_cast<int>(plan.records_per_chunk), static_cast<int>(plan.tiles_per_chunk), static_cast<int>(L),
                    N, device.groups.get(), device.group_begin.get(), device.records.get(), device.tile_groups.get(),
                    du.get(), dy.get(), grad.get(), bank.get(), snapshot.get(), planes.get()};
      const std::size_t smem = Shape::smem(static_cast<int>(C), static_cast<int>(L));
      cuda_ok(cudaFuncSetAttribute(walk_skeleton<kCols>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)),
              "cudaFuncSetAttribute (walk_skeleton)");
      const dim3 grid(static_cast<unsigned>((plan.tiles_per_chunk + Shape::kWarps - 1) / Shape::kWarps),
                      static_cast<unsigned>(slices), static_cast<unsigned>(c.P));
      const double ms = median_ms(reps, [&] {
        for (std::int64_t ti = 0; ti < Nt; ++ti) {
          walk_skeleton<kCols><<<grid, Shape::kWarps * 32, smem>>>(args, static_cast<int>(ti));
        }
        cuda_ok(cudaGetLastError(), "walk_skeleton");
      });
      cuda_ok(cudaDeviceSynchronize(), "walk_skeleton");
      const double groups = static_cast<double>(plan.groups.size()), entries = static_cast<double>(N * plan.records_per_chunk);
      const double row_bytes = groups * 3.0 * static_cast<double>(c.hd) * 2.0;
      const double ctas = static_cast<double>(grid.x) * grid.y * grid.z * static_cast<double>(Nt);
      const double staging = ctas * 2.0 * static_cast<double>(C * Shape::kSliceCols) * 4.0;
      const double other = entries * slices * (16.0 + 4.0);  // records read and plane values stored per slice
      std::printf("| %s | %s | %d | %lld | %lld | %.3f | %.3f | %.1f | %.3f | %.2f | %.2f | %.3f |\n", c.name.c_str(),
                  bench::slot_pattern_name(pattern), Shape::kSliceCols, static_cast<long long>(L),
                  static_cast<long long>(max_group),
                  plan.written_groups / static_cast<double>(N * C * c.W), ms, 1e3 * ms / static_cast<double>(Nt),
                  row_bytes * 1e-9, row_bytes / (ms * 1e-3) * 1e-12, (row_bytes + staging + other) / (ms * 1e-3) * 1e-12,
                  (row_bytes + staging + other) / (ms * 1e-3) / copy_bw);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> configs = {"readme", "big", "flagship"};
  std::vector<bench::SlotPattern> patterns = {bench::SlotPattern::product_key, bench::SlotPattern::heavy_reuse};
  std::vector<std::int64_t> tile_lens = {32, 64, 128}, pieces = {0};
  int reps = 5;
  const auto integer = [](const std::string& x) { return static_cast<std::int64_t>(std::stoll(x)); };
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const bool has_value = i + 1 < argc;
    if (arg == "--configs" && has_value) configs = bench::parse_list(argv[++i], [](const std::string& x) { return x; });
    else if (arg == "--slots" && has_value) patterns = bench::parse_list(argv[++i], bench::parse_slot_pattern);
    else if (arg == "--tiles" && has_value) tile_lens = bench::parse_list(argv[++i], integer);
    else if (arg == "--pieces" && has_value) pieces = bench::parse_list(argv[++i], integer);
    else if (arg == "--reps" && has_value) reps = std::max(1, std::atoi(argv[++i]));
    else {
      std::fprintf(stderr, "sdm_gpu_walk_floor: unknown argument %s\n", arg.c_str());
      return 2;
    }
  }
  int sms = 0;
  double copy_bw = 0.0;
  if (!bench::print_device("sdm_gpu_walk_floor", &sms, &copy_bw)) return 0;
  pdl_chain(sms, reps);
  std::printf("\n| config | slots | slice cols | L | pieces <= | written groups / write entries | ms a call | us a step | "
              "GB bank rows | TB/s bank rows | TB/s all | of copy bw |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (const std::string& name : configs) {
    const bench::BenchConfig& c = bench::find_config(name);
    for (const bench::SlotPattern pattern : patterns) {
      walk_config<4>(c, pattern, tile_lens, pieces, reps, copy_bw);
      walk_config<8>(c, pattern, tile_lens, pieces, reps, copy_bw);
    }
  }
  return 0;
}

// lookup_reads.cu - Phase 1's read records (docs/spec.md §2): for every read entry (n, i, r) of
// every chunk, its absolute slot q_slot (-1 for padding / masked), the sorted position q_pos of the
// last write of its slot at or before its token (-1 if none), q_rho = q_val rounded to the bank
// dtype and q_w = rho expf(f32(Lq)), Lq = L at q_pos (0 if none). Reads come after the token's
// writes. Needs the sorted write keys and L (scan_groups).
//
// lookup_reads: one CTA of 1024 threads per chunk; thread t takes reads t, t + 1024, ...: a binary
// search of the chunk's sorted keys for the last key <= (slot, token i, last lane). The inputs of
// 2 reads are loaded before the first search. Chunks of <= 16384 write entries (chunk_tokens.cuh)
// search their sorted keys (and read f32(L)) staged in shared memory, larger ones global memory.
// Dynamic shared memory (kStaged): the chunk's sorted keys u64 [C*W], then f32(L) [C*W] (staged at
// group positions only: L is written there alone). Integer searches and one product per read.
#include "cuda/common/cuda_check.hpp"
#include "cuda/common/device_limits.hpp"
#include "cuda/common/launch_bounds.cuh"
#include "cuda/common/values.cuh"
#include "cuda/forward/chunk_tokens.cuh"
#include "cuda/forward/phase1_kernels.hpp"

namespace sdm::cuda {
namespace {

constexpr int kChunkThreads = 1024;  // <= 32 registers: 2 CTAs per SM
constexpr int kReadItems = 2;        // reads per thread whose inputs are loaded before the first search

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

}  // namespace

void launch_lookup_reads(const Geometry& geo, const Inputs& in, bool bf16_bank, const Phase1Buffers& buf,
                         cudaStream_t stream) {
  const bool staged = staged_chunk(geo);
  const auto kernel = staged ? lookup_reads<true> : lookup_reads<false>;
  const std::size_t smem =
      staged ? static_cast<std::size_t>(geo.C * geo.W) * (sizeof(std::uint64_t) + sizeof(float)) : 0;
  allow_dynamic_shared_memory(kernel, smem, "cudaFuncSetAttribute (Phase 1 shared memory)");
  kernel<<<static_cast<unsigned>(geo.N), kChunkThreads, smem, stream>>>(geo, in, bf16_bank, buf);
  check_launch("lookup_reads");
}

}  // namespace sdm::cuda

// scan_groups.cu - Phase 1's per-slot scans (docs/spec.md §2, per-chunk quantities), after the
// write-key sort: for every sorted write position L, kappa, wcoef, gdecay, and for every entry its
// in-chunk sorted position inv_pos, prev_pos and k_eff (phase1.hpp has the arrays).
//
// scan_groups: one CTA of 512 threads per chunk; thread t takes sorted positions t, t + 512, ...
// (inv_pos and prev_pos of its entry); the first entry of each slot group walks the group in token
// order: L (f64 running sum of the floored log-decays, core/log_decay.hpp), k_eff =
// kappa expf(f32(L)), then wcoef = kappa expf(f32(Lambda - L)) and gdecay = expf(f32(Lambda)).
// Chunks of <= 16384 entries (chunk_tokens.cuh) first stage their kappa and gamma (coalesced, in
// entry order) in shared memory and collect inv_pos / prev_pos / k_eff there (each entry read and
// then overwritten by its group's walker alone), stored coalesced at the end; larger chunks gather
// and scatter in global memory. Every sum runs in token order within a slot group; no atomics.
// Dynamic shared memory (kStaged): coef[C*W] f32 (kappa of entry u, then its k_eff), code[C*W] u32
// (gamma of entry u when G = W, then its place: sorted position | kAfterPrev), token_gamma[C] f32
// (G = 1).
#include "core/log_decay.hpp"
#include "cuda/common/cuda_check.hpp"
#include "cuda/common/device_limits.hpp"
#include "cuda/common/launch_bounds.cuh"
#include "cuda/common/values.cuh"
#include "cuda/forward/chunk_tokens.cuh"
#include "cuda/forward/phase1_kernels.hpp"

namespace sdm::cuda {
namespace {

constexpr int kScanThreads = 512;                  // 2 CTAs per SM: 50 registers, no spill (40 spilled)
constexpr std::uint32_t kAfterPrev = 0x80000000u;  // a staged place: "entry before it in its group"
constexpr int kStageItems = 2;                     // staged elements per thread loaded before the first shared store

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
      // (and L, kappa too: Phase 1's arrays in `saved` are written whole, saved/layout.hpp).
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

}  // namespace

void launch_scan_groups(const Geometry& geo, const Inputs& in, bool bf16_bank, const Phase1Buffers& buf,
                        cudaStream_t stream) {
  const bool staged = staged_chunk(geo);
  const auto kernel = staged ? scan_groups<true> : scan_groups<false>;
  const std::size_t smem = staged ? static_cast<std::size_t>(2 * geo.C * geo.W + geo.C) * sizeof(std::uint32_t) : 0;
  allow_dynamic_shared_memory(kernel, smem, "cudaFuncSetAttribute (Phase 1 shared memory)");
  kernel<<<static_cast<unsigned>(geo.N), kScanThreads, smem, stream>>>(geo, in, bf16_bank, buf);
  check_launch("scan_groups");
}

}  // namespace sdm::cuda

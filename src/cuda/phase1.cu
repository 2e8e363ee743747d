// phase1.cu - Phase 1 of the chunked forward (see phase1.hpp for the outputs and contracts).
//
// Kernels, in launch order:
//   make_write_keys  one thread per write entry (n, i, w): sort key and absolute slot
//   (cub radix sort of all keys, only the bits the geometry needs)
//   scan_groups      one thread per sorted entry; the first entry of each slot group walks the
//                    group in token order: L (f32 running sum of log-decays), k_eff, then
//                    wcoef = kappa exp(Lambda - L) and gdecay = exp(Lambda)
//   lookup_reads     one thread per read entry: binary search of the last write of its slot at or
//                    before its token (reads come after the token's writes), Lq and q_w
//   pair_products    one thread per chunk row i: A[i, :] (strictly lower) and QK[i, :] (lower incl.
//                    diagonal) by walking the slot groups backwards from token i's entries
//   solve            one thread per chunk column k: forward substitution for column k of X, then QX
#include "phase1.hpp"

#include <cub/device/device_radix_sort.cuh>

#include "cuda_check.hpp"
#include "device_values.cuh"

namespace sdm::cuda {
namespace {

constexpr int kThreads = 256;

unsigned blocks_for(std::int64_t items) { return static_cast<unsigned>((items + kThreads - 1) / kThreads); }

struct EntryPlace {
  std::int64_t n, p, ti, t;
};

__device__ __forceinline__ EntryPlace place_of(const Geometry& geo, std::int64_t n, std::int64_t i) {
  const std::int64_t p = n % geo.P, ti = n / geo.P;
  return {n, p, ti, ti * geo.C + i};
}

__global__ void make_write_keys(Geometry geo, Inputs in, std::uint64_t* keys, std::int32_t* k_slot) {
  const std::int64_t e = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= geo.write_entries()) return;
  const std::int64_t CW = geo.C * geo.W;
  const std::int64_t n = e / CW, i = (e % CW) / geo.W, w = e % geo.W;
  const EntryPlace at = place_of(geo, n, i);
  std::int64_t local = geo.sps;  // padding / masked: sorts after every real slot of the chunk
  std::int32_t slot = -1;
  if (at.t < geo.T) {
    const std::int64_t idx = load_index(in.k_idx, in.index64, (at.p * geo.T + at.t) * geo.W + w);
    const std::int64_t l = idx - at.p * geo.sps;
    if (l >= 0 && l < geo.sps) {
      local = l;
      slot = static_cast<std::int32_t>(idx);
    }
  }
  keys[e] = geo.keys.encode(n, local, i, w);
  k_slot[e] = slot;
}

__global__ void scan_groups(Geometry geo, Inputs in, bool bf16_bank, Phase1Buffers buf) {
  const std::int64_t e = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= geo.write_entries()) return;
  const std::int64_t CW = geo.C * geo.W;
  const std::int64_t n = e / CW, q = e % CW, chunk_end = (n + 1) * CW;
  const std::uint64_t key = buf.keys[e];
  const std::int64_t local = geo.keys.local_slot(key);
  const std::int64_t own = n * CW + geo.keys.token(key) * geo.W + geo.keys.lane(key);
  buf.inv_pos[own] = static_cast<std::int32_t>(q);
  if (local == geo.sps) {
    buf.k_eff[own] = 0.0f;
    return;
  }
  if (q > 0 && geo.keys.local_slot(buf.keys[e - 1]) == local) return;  // not the group's first entry

  float lambda = 0.0f;  // running Lambda_s(i): f32, token order, this chunk only (segmented scan)
  std::int64_t end = e;
  for (; end < chunk_end; ++end) {
    const std::uint64_t k = buf.keys[end];
    if (geo.keys.local_slot(k) != local) break;
    const std::int64_t i = geo.keys.token(k), w = geo.keys.lane(k);
    const EntryPlace at = place_of(geo, n, i);
    const std::int64_t token = at.p * geo.T + at.t;
    const float gamma = load_input(in.g, in.g_dtype, token * geo.G + (geo.G == 1 ? 0 : w));
    const float kappa = round_to_bank(load_input(in.k_val, in.k_val_dtype, token * geo.W + w), bf16_bank);
    lambda += gamma;
    buf.L[end] = lambda;
    buf.kappa[end] = kappa;
    buf.k_eff[n * CW + i * geo.W + w] = kappa * expf(lambda);
  }
  const float total_decay = expf(lambda);
  for (std::int64_t s = e; s < end; ++s) {
    buf.wcoef[s] = buf.kappa[s] * expf(lambda - buf.L[s]);
    buf.gdecay[s] = total_decay;
  }
}

__global__ void lookup_reads(Geometry geo, Inputs in, bool bf16_bank, Phase1Buffers buf) {
  const std::int64_t e = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= geo.read_entries()) return;
  const std::int64_t CR = geo.C * geo.R, CW = geo.C * geo.W;
  const std::int64_t n = e / CR, i = (e % CR) / geo.R, r = e % geo.R;
  const EntryPlace at = place_of(geo, n, i);
  std::int32_t slot = -1, pos = -1;
  float rho = 0.0f, weight = 0.0f;
  if (at.t < geo.T) {
    const std::int64_t token = at.p * geo.T + at.t;
    const std::int64_t idx = load_index(in.q_idx, in.index64, token * geo.R + r);
    const std::int64_t local = idx - at.p * geo.sps;
    if (local >= 0 && local < geo.sps) {
      slot = static_cast<std::int32_t>(idx);
      rho = round_to_bank(load_input(in.q_val, in.q_val_dtype, token * geo.R + r), bf16_bank);
      // Count the chunk's keys <= (local, i, last lane): the last one is the latest write of
      // this slot at or before token i, if its slot matches.
      const std::uint64_t bound = geo.keys.encode(n, local, i, (std::int64_t{1} << geo.keys.lane_bits) - 1);
      const std::uint64_t* keys = buf.keys + n * CW;
      std::int64_t lo = 0, hi = CW;
      while (lo < hi) {
        const std::int64_t mid = (lo + hi) / 2;
        if (keys[mid] <= bound) lo = mid + 1;
        else hi = mid;
      }
      float lq = 0.0f;
      if (lo > 0 && geo.keys.local_slot(keys[lo - 1]) == local) {
        pos = static_cast<std::int32_t>(lo - 1);
        lq = buf.L[n * CW + pos];
      }
      weight = rho * expf(lq);
    }
  }
  buf.q_slot[e] = slot;
  buf.q_pos[e] = pos;
  buf.q_rho[e] = rho;
  buf.q_w[e] = weight;
}

__global__ void pair_products(Geometry geo, Phase1Buffers buf) {
  const std::int64_t n = blockIdx.x, i = threadIdx.x;
  if (i >= geo.C) return;
  const std::int64_t C = geo.C, CW = C * geo.W;
  float* a_row = buf.A + (n * C + i) * C;
  float* qk_row = buf.QK + (n * C + i) * C;
  for (std::int64_t j = 0; j < C; ++j) a_row[j] = 0.0f, qk_row[j] = 0.0f;
  const std::uint64_t* keys = buf.keys + n * CW;
  const float* L = buf.L + n * CW;
  const float* kappa = buf.kappa + n * CW;

  // A[i, j] = sum over slots shared by tokens i > j of kappa_e kappa_e' exp(L_e - L_e').
  for (std::int64_t w = 0; w < geo.W; ++w) {
    const std::int64_t entry = (n * C + i) * geo.W + w;
    if (buf.k_slot[entry] < 0) continue;
    const std::int64_t q = buf.inv_pos[entry];
    const std::int64_t local = geo.keys.local_slot(keys[q]);
    const float l_e = L[q], kappa_e = kappa[q];
    for (std::int64_t s = q - 1; s >= 0 && geo.keys.local_slot(keys[s]) == local; --s) {
      const std::int64_t j = geo.keys.token(keys[s]);
      if (j < i) a_row[j] += kappa_e * kappa[s] * expf(l_e - L[s]);
    }
  }
  // QK[i, j] = sum over reads of token i and writes of token j <= i to the same slot of
  // rho kappa_e' exp(Lq - L_e').
  for (std::int64_t r = 0; r < geo.R; ++r) {
    const std::int64_t entry = (n * C + i) * geo.R + r;
    const std::int64_t q = buf.q_pos[entry];
    if (q < 0) continue;
    const std::int64_t local = geo.keys.local_slot(keys[q]);
    const float lq = L[q], rho = buf.q_rho[entry];
    for (std::int64_t s = q; s >= 0 && geo.keys.local_slot(keys[s]) == local; --s) {
      qk_row[geo.keys.token(keys[s])] += rho * kappa[s] * expf(lq - L[s]);
    }
  }
}

__global__ void solve(Geometry geo, Inputs in, Phase1Buffers buf) {
  const std::int64_t n = blockIdx.x, k = threadIdx.x;
  if (k >= geo.C) return;
  const std::int64_t C = geo.C;
  const std::int64_t p = n % geo.P, t0 = (n / geo.P) * C;
  const float* __restrict__ A = buf.A + n * C * C;
  const float* __restrict__ QK = buf.QK + n * C * C;
  float* __restrict__ X = buf.X + n * C * C;
  float* __restrict__ QX = buf.QX + n * C * C;
  // Column k of X: X[i, k] = [i == k] - beta_i sum_{j in [k, i)} A[i, j] X[j, k]. Thread k
  // reads back only its own column.
  for (std::int64_t i = 0; i < C; ++i) {
    float x = i == k ? 1.0f : 0.0f;
    if (i > k && t0 + i < geo.T) {
      float s = 0.0f;
      for (std::int64_t j = k; j < i; ++j) s = fmaf(A[i * C + j], X[j * C + k], s);
      x = -load_input(in.beta, in.beta_dtype, p * geo.T + t0 + i) * s;
    }
    X[i * C + k] = x;
  }
  // Column k of QX = tril(QK) X: QX[i, k] = sum_{j in [k, i]} QK[i, j] X[j, k].
  for (std::int64_t i = 0; i < C; ++i) {
    float s = 0.0f;
    for (std::int64_t j = k; j <= i; ++j) s = fmaf(QK[i * C + j], X[j * C + k], s);
    QX[i * C + k] = s;
  }
}

}  // namespace

void plan_phase1(const Geometry& geo, Workspace& ws, Phase1Buffers& buf) {
  const std::int64_t ew = geo.write_entries(), er = geo.read_entries(), cc = geo.N * geo.C * geo.C;
  ws.plan(&buf.keys_unsorted, ew);
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
  ws.plan(&buf.QX, cc);
  buf.sort_temp_bytes = 0;
  check_cuda(cub::DeviceRadixSort::SortKeys(nullptr, buf.sort_temp_bytes, buf.keys_unsorted, buf.keys, ew, 0,
                                            geo.keys.total_bits()),
             "cub::DeviceRadixSort::SortKeys (size query)");
  ws.plan_bytes(&buf.sort_temp, buf.sort_temp_bytes);
}

void run_phase1(const Geometry& geo, const Inputs& in, bool bf16_bank, const Phase1Buffers& buf,
                cudaStream_t stream) {
  const std::int64_t ew = geo.write_entries(), er = geo.read_entries();
  make_write_keys<<<blocks_for(ew), kThreads, 0, stream>>>(geo, in, buf.keys_unsorted, buf.k_slot);
  check_launch("make_write_keys");
  std::size_t temp_bytes = buf.sort_temp_bytes;
  check_cuda(cub::DeviceRadixSort::SortKeys(buf.sort_temp, temp_bytes, buf.keys_unsorted, buf.keys, ew, 0,
                                            geo.keys.total_bits(), stream),
             "cub::DeviceRadixSort::SortKeys");
  scan_groups<<<blocks_for(ew), kThreads, 0, stream>>>(geo, in, bf16_bank, buf);
  check_launch("scan_groups");
  lookup_reads<<<blocks_for(er), kThreads, 0, stream>>>(geo, in, bf16_bank, buf);
  check_launch("lookup_reads");
  const unsigned chunk_threads = static_cast<unsigned>((geo.C + 31) / 32 * 32);
  pair_products<<<static_cast<unsigned>(geo.N), chunk_threads, 0, stream>>>(geo, buf);
  check_launch("pair_products");
  solve<<<static_cast<unsigned>(geo.N), chunk_threads, 0, stream>>>(geo, in, buf);
  check_launch("solve");
}

}  // namespace sdm::cuda

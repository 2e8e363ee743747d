// backward_entries.cu - the per-entry gradients of the CUDA backward (SPEC C.2 steps 9-11), batched
// over all N chunks after the reverse loop. Inputs: Phase 1 (sorted keys, L, kappa, wcoef, k_eff,
// q_pos, q_rho, q_w, A), the read records, and what the steps left: dMs, dQK, rdot, dk_eff, dc,
// dlambda, dq_w. With da(i, j) = beta_i dMs[i][j] and E(x, y) = exp(x - y). Kernels, in order:
//
//   write_entry_grads  one thread per sorted write entry e (token i, slot group of e):
//       dkappa_e = sum_{e' in group, i' < i} da(i, i') kappa_e' E(L_e, L_e')
//                + sum_{e' in group, i' > i} da(i', i) kappa_e' E(L_e', L_e)
//                + sum_{reads q of the slot, token i_q >= i} dQK[i_q][i] rho_q E(Lq_q, L_e)
//                + exp(L_e) dk_eff_e + exp(Lambda - L_e) dc_e
//       dL_e     = the same pair terms times kappa_e, with signs + (i' < i), - (i' > i), - (reads)
//                + k_eff_e dk_eff_e
//       dP_e     = wcoef_e dc_e.  Group entries in sorted (token) order, then reads in sorted order.
//       Writes grad_k_val (0 for masked entries) and dL, dP; dgamma = 0 for masked entries.
//   read_entry_grads   one thread per read entry q (token i, seeing the group's writes up to q_pos;
//                      a CTA covers one slice of one chunk's reads, 32-bit index math):
//       drho_q = sum_{e' in group, pos <= q_pos} dQK[i][i_e'] kappa_e' E(Lq, L_e') + exp(Lq) dq_w
//       dLq_q  = sum (same) rho_q kappa_e' E(Lq, L_e') + q_w dq_w.   Writes grad_q_val, dLq.
//   group_scans        one thread per write group (its first entry), the CPU engine's scans:
//       dgamma_e = (sum_{e' >= e} dL_e' + sum_{reads at tokens >= i_e} dLq) + sum_{e' < e} dP_e'
//                  + dLambda, the first sum built from the group's last entry backwards.
//   token_grads        one warp per token: grad_beta = rdot_i + sum_{j<i} A[i][j] dMs[i][j]
//                      (j ascending); grad_g = dgamma (G = W) or sum_w dgamma_(i,w) (w ascending).
//                      Rows are loaded 32 columns at a time, one per lane; every lane runs the
//                      serial sums on shuffled values (the one-thread order); G = W stores by lanes.
//                      The first 32 columns, rdot and the first 32 dgamma are loaded before the sums.
// Every sum has one thread and a fixed order; no atomics.
//
// write_entry_grads and group_scans find the first read of their slot (at or after a token) with
// warp_lower_bounds: the lanes of a warp hold consecutive sorted write entries, so their bounds
// ascend with the lane; the warp searches lane 0's bound once and every lane then takes its own
// position from one coalesced window of 32 read keys (a per-lane search only when the window does
// not cover lane 31's bound). The positions are exactly lower_bound_key's; the key at the position
// comes from the window too, so the first read of the slot costs no further load.
#include "backward.hpp"
#include "backward_rows.cuh"
#include "cuda_check.hpp"

namespace sdm::cuda {
namespace {

constexpr int kThreads = 128;

unsigned blocks_for(std::int64_t items) { return static_cast<unsigned>((items + kThreads - 1) / kThreads); }

struct EntryPlace {
  std::int64_t n, p, t, token;  // chunk, stream, time in the stream, flat token p*T + t
};

__device__ __forceinline__ EntryPlace place(const Geometry& geo, std::int64_t n, std::int64_t i) {
  const std::int64_t p = n % geo.P, t = (n / geo.P) * geo.C + i;
  return {n, p, t, p * geo.T + t};
}

// For each lane, the first position in keys[0, count) whose key is >= its bound (keys ascending),
// when the 32 lanes' bounds do not decrease with the lane index and lane 0's position lies in
// [first_begin, first_end] (first_end - first_begin < 2^31). All 32 lanes call it. Lane 0's bound
// is searched by the whole warp; if some key of the window keys[lo, lo + 32) (keys past count read
// as ~0) is >= lane 31's bound, every lane's position is in [lo, lo + 31] and is found by a binary
// search over the window held one key per lane (shuffles); otherwise each lane searches [lo, count).
// *key_at receives the key at the lane's position (~0 past count), from the window when it covers it.
__device__ __forceinline__ std::int64_t warp_lower_bounds(const std::uint64_t* keys, std::int64_t count,
                                                          std::int64_t first_begin, std::int64_t first_end,
                                                          std::uint64_t bound, int lane, std::uint64_t* key_at) {
  constexpr unsigned kAll = 0xffffffffu;
  const std::uint64_t first_bound = __shfl_sync(kAll, bound, 0), last_bound = __shfl_sync(kAll, bound, 31);
  std::uint64_t key_at_lo = 0;
  const std::int64_t lo =
      first_begin + warp_lower_bound_key(keys + first_begin, static_cast<int>(first_end - first_begin), first_bound,
                                         lane, &key_at_lo);
  const std::int64_t at = lo + lane;
  const std::uint64_t window = at < count ? keys[at] : ~std::uint64_t{0};
  if (__ballot_sync(kAll, window < last_bound) == kAll) {
    const std::int64_t at_bound = lo + lower_bound_key(keys + lo, count - lo, bound);
    *key_at = at_bound < count ? keys[at_bound] : ~std::uint64_t{0};
    return at_bound;
  }
  int below = 0;  // window keys < bound: the largest prefix whose last key is below the bound
  for (int step = 32; step > 0; step /= 2) {
    const int candidate = below + step;
    const std::uint64_t key = __shfl_sync(kAll, window, (candidate - 1) & 31);
    if (candidate <= 32 && key < bound) below = candidate;
  }
  // Some window key is >= lane 31's bound >= this lane's, so below < 32: the window holds the key.
  *key_at = __shfl_sync(kAll, window, below & 31);
  return lo + below;
}

// 8 CTAs per SM: 64 registers (16 bytes spilled).
__global__ void __launch_bounds__(kThreads, 8)
    write_entry_grads(Geometry geo, Inputs in, Phase1Buffers p1, BackwardBuffers bb, AnyFloat grad_k) {
  const std::int64_t e = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::int64_t total = geo.write_entries();
  if (e - static_cast<std::int64_t>(threadIdx.x % 32) >= total) return;  // whole warps from here on
  const std::int64_t C = geo.C, CW = C * geo.W, CR = C * geo.R;
  const KeyLayout& rl = bb.read_layout;
  const bool in_range = e < total;
  std::int64_t n = 0, local = 0, i = 0, w = 0;
  std::uint64_t bound = ~std::uint64_t{0};  // past the end: after every read key
  if (in_range) {
    const std::uint64_t key = p1.keys[e];
    n = e / CW, local = geo.keys.local_slot(key), i = geo.keys.token(key), w = geo.keys.lane(key);
    bound = rl.encode(n, local, i, 0);
  }
  const std::int64_t chunk0 = n * CW, chunk_end = chunk0 + CW;
  const EntryPlace at = place(geo, n, i);
  const std::int64_t entry = chunk0 + i * geo.W + w;
  const bool real = in_range && local != geo.sps;
  // The entry's own records, loaded before the search so that their latency overlaps it.
  std::uint64_t prev_key = 0, next_key = 0;
  float L_e = 0.0f, kappa_e = 0.0f, beta_i = 0.0f, dk_eff = 0.0f, dc = 0.0f, wcoef = 0.0f, k_eff = 0.0f;
  if (real) {
    if (e > chunk0) prev_key = p1.keys[e - 1];
    if (e + 1 < chunk_end) next_key = p1.keys[e + 1];
    L_e = p1.L[e], kappa_e = p1.kappa[e], beta_i = load_input(in.beta, in.beta_dtype, at.token);
    dk_eff = bb.dk_eff[e], dc = bb.dc[e], wcoef = p1.wcoef[e], k_eff = p1.k_eff[entry];
  }
  const std::int64_t first_chunk = __shfl_sync(0xffffffffu, n, 0);
  std::uint64_t first_read_key = 0;
  const std::int64_t first_read =
      warp_lower_bounds(bb.read_keys, geo.read_entries(), first_chunk * CR, (first_chunk + 1) * CR, bound,
                        static_cast<int>(threadIdx.x % 32), &first_read_key);
  if (!in_range) return;
  if (!real) {  // padding or masked
    bb.dgamma[entry] = 0.0f;
    if (at.t < geo.T && grad_k.data != nullptr) store_any(grad_k.data, grad_k.dtype, at.token * geo.W + w, 0.0f);
    return;
  }
  std::int64_t begin = e, end = e + 1;
  if (e > chunk0 && geo.keys.local_slot(prev_key) == local) {
    for (--begin; begin > chunk0 && geo.keys.local_slot(p1.keys[begin - 1]) == local;) --begin;
  }
  if (e + 1 < chunk_end && geo.keys.local_slot(next_key) == local) {
    for (++end; end < chunk_end && geo.keys.local_slot(p1.keys[end]) == local;) ++end;
  }

  const float* dms = bb.dms + n * C * C;
  const float* dqk = bb.dqk + n * C * C;
  float dkappa = 0.0f, dL = 0.0f;
  for (std::int64_t s = begin; s < end; ++s) {
    const std::int64_t j = geo.keys.token(p1.keys[s]);
    if (j < i) {
      const float da = beta_i * dms[i * C + j];
      const float decay = expf(L_e - p1.L[s]);
      dkappa += da * p1.kappa[s] * decay;
      dL += da * kappa_e * p1.kappa[s] * decay;
    } else if (j > i) {
      const float da = load_input(in.beta, in.beta_dtype, at.token + (j - i)) * dms[j * C + i];
      const float decay = expf(p1.L[s] - L_e);
      dkappa += da * p1.kappa[s] * decay;
      dL -= da * p1.kappa[s] * kappa_e * decay;
    }
  }
  const std::uint64_t* reads = bb.read_keys;
  for (std::int64_t s = first_read; s < (n + 1) * CR; ++s) {
    const std::uint64_t read_key = s == first_read ? first_read_key : reads[s];
    if (rl.local_slot(read_key) != local) break;
    const std::int64_t iq = rl.token(read_key);
    const std::int64_t read = n * CR + iq * geo.R + rl.lane(read_key);
    const float rho = p1.q_rho[read];
    const float decay = expf(p1.L[chunk0 + p1.q_pos[read]] - L_e);
    const float d = dqk[iq * C + i];
    dkappa += d * rho * decay;
    dL -= d * rho * kappa_e * decay;
  }
  dkappa += expf(L_e) * dk_eff + expf((end - 1 == e ? L_e : p1.L[end - 1]) - L_e) * dc;
  dL += k_eff * dk_eff;
  bb.dL[e] = dL;
  bb.dP[e] = wcoef * dc;
  if (grad_k.data != nullptr) store_any(grad_k.data, grad_k.dtype, at.token * geo.W + w, dkappa);
}

__global__ void read_entry_grads(Geometry geo, Phase1Buffers p1, BackwardBuffers bb, AnyFloat grad_q, unsigned slices) {
  const std::int64_t n = blockIdx.x / slices;
  const int q = static_cast<int>((blockIdx.x % slices) * kThreads + threadIdx.x), R = static_cast<int>(geo.R);
  if (q >= static_cast<int>(geo.C) * R) return;
  const std::int64_t C = geo.C, CW = C * geo.W, CR = C * geo.R;
  const std::int64_t i = q / R, r = q % R, read = n * CR + q;
  const EntryPlace at = place(geo, n, i);
  if (at.t >= geo.T) return;
  float drho = 0.0f, dLq = 0.0f;
  if (p1.q_slot[read] >= 0) {
    const std::int64_t chunk0 = n * CW, pos = p1.q_pos[read];
    const float rho = p1.q_rho[read];
    float Lq = 0.0f;
    if (pos >= 0) {
      const std::int64_t local = geo.keys.local_slot(p1.keys[chunk0 + pos]);
      std::int64_t begin = pos;
      while (begin > 0 && geo.keys.local_slot(p1.keys[chunk0 + begin - 1]) == local) --begin;
      Lq = p1.L[chunk0 + pos];
      const float* dqk = bb.dqk + (n * C + i) * C;
      for (std::int64_t s = chunk0 + begin; s <= chunk0 + pos; ++s) {
        const float d = dqk[geo.keys.token(p1.keys[s])];
        const float decay = expf(Lq - p1.L[s]);
        drho += d * p1.kappa[s] * decay;
        dLq += d * rho * p1.kappa[s] * decay;
      }
    }
    const float dq_w = bb.dq_w[read];
    drho += expf(Lq) * dq_w;
    dLq += p1.q_w[read] * dq_w;
  }
  bb.dLq[read] = dLq;
  if (grad_q.data != nullptr) store_any(grad_q.data, grad_q.dtype, at.token * geo.R + r, drho);
}

__global__ void group_scans(Geometry geo, Phase1Buffers p1, BackwardBuffers bb) {
  const std::int64_t e = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::int64_t total = geo.write_entries();
  if (e - static_cast<std::int64_t>(threadIdx.x % 32) >= total) return;  // whole warps from here on
  const std::int64_t CW = geo.C * geo.W, CR = geo.C * geo.R;
  const KeyLayout& rl = bb.read_layout;
  const bool in_range = e < total;
  std::int64_t n = 0, local = 0;
  std::uint64_t key = 0, bound = ~std::uint64_t{0};  // past the end: after every read key
  if (in_range) {
    key = p1.keys[e];
    n = e / CW, local = geo.keys.local_slot(key);
    bound = rl.encode(n, local, 0, 0);
  }
  const std::int64_t chunk0 = n * CW, chunk_end = chunk0 + CW;
  // The entry's own records, loaded before the search so that their latency overlaps it.
  std::uint64_t prev_key = 0, next_key = 0;
  float dL_e = 0.0f;
  const bool real = in_range && local != geo.sps;
  if (real) {
    if (e > chunk0) prev_key = p1.keys[e - 1];
    if (e + 1 < chunk_end) next_key = p1.keys[e + 1];
    dL_e = bb.dL[e];
  }
  const std::int64_t first_chunk = __shfl_sync(0xffffffffu, n, 0);
  std::uint64_t first_read_key = 0;
  const std::int64_t read_begin =
      warp_lower_bounds(bb.read_keys, geo.read_entries(), first_chunk * CR, (first_chunk + 1) * CR, bound,
                        static_cast<int>(threadIdx.x % 32), &first_read_key);
  if (!real) return;
  if (e > chunk0 && geo.keys.local_slot(prev_key) == local) return;  // not the group's first entry
  const float dlambda = bb.dlambda[e];  // written at group-first positions only
  std::int64_t end = e + 1;
  if (e + 1 < chunk_end && geo.keys.local_slot(next_key) == local) {
    for (++end; end < chunk_end && geo.keys.local_slot(p1.keys[end]) == local;) ++end;
  }

  const std::uint64_t* reads = bb.read_keys;
  std::int64_t read = read_begin;
  while (read < (n + 1) * CR && rl.local_slot(read == read_begin ? first_read_key : reads[read]) == local) ++read;
  --read;  // the slot's last read (reads are in token order)
  const auto entry_of = [&](std::uint64_t k) { return chunk0 + geo.keys.token(k) * geo.W + geo.keys.lane(k); };

  // Suffix sums from the group's last entry back to e; entry e's (the last one formed) stays in
  // a register, the others go to dgamma and are read back below.
  float suffix = 0.0f;
  for (std::int64_t s = end - 1; s >= e; --s) {
    const std::uint64_t k = s == e ? key : p1.keys[s];
    const std::int64_t i = geo.keys.token(k);
    suffix += s == e ? dL_e : bb.dL[s];
    for (; read >= read_begin && rl.token(reads[read]) >= i; --read) {
      suffix += bb.dLq[n * CR + rl.token(reads[read]) * geo.R + rl.lane(reads[read])];
    }
    if (s > e) bb.dgamma[entry_of(k)] = suffix;
  }
  float prefix = 0.0f;
  for (std::int64_t s = e; s < end; ++s) {
    const std::int64_t entry = entry_of(s == e ? key : p1.keys[s]);
    bb.dgamma[entry] = (s == e ? suffix : bb.dgamma[entry]) + prefix + dlambda;
    prefix += bb.dP[s];
  }
}

__global__ void token_grads(Geometry geo, Phase1Buffers p1, BackwardBuffers bb, AnyFloat grad_beta, AnyFloat grad_g) {
  constexpr unsigned kAll = 0xffffffffu;
  const int lane = static_cast<int>(threadIdx.x % 32);
  const std::int64_t ci = (static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;  // n*C + i
  if (ci >= geo.N * geo.C) return;  // whole warps
  const std::int64_t C = geo.C, n = ci / C, i = ci % C;
  const EntryPlace at = place(geo, n, i);
  if (at.t >= geo.T) return;
  // Every load before the first store (the stores may alias them for all the compiler knows): the
  // first 32 columns of A / dMs, rdot, and the first 32 dgamma of the token.
  const bool beta_out = grad_beta.data != nullptr, g_out = grad_g.data != nullptr;
  const float* a = p1.A + ci * C;
  const float* dms = bb.dms + ci * C;
  const float* dgamma = bb.dgamma + ci * geo.W;
  const bool first_mine = beta_out && lane < i;
  const float a_first = first_mine ? a[lane] : 0.0f, dms_first = first_mine ? dms[lane] : 0.0f;
  const float rdot = beta_out && lane == 0 ? bb.rdot[ci] : 0.0f;
  const float dgamma_first = g_out && lane < geo.W ? dgamma[lane] : 0.0f;
  if (beta_out) {
    float a_dms = 0.0f;
    for (std::int64_t j0 = 0; j0 < i; j0 += 32) {
      const bool mine = j0 + lane < i;
      const float a_lane = j0 == 0 ? a_first : mine ? a[j0 + lane] : 0.0f;
      const float dms_lane = j0 == 0 ? dms_first : mine ? dms[j0 + lane] : 0.0f;
      const int count = i - j0 < 32 ? static_cast<int>(i - j0) : 32;
      for (int k = 0; k < count; ++k) {
        const float a_j = __shfl_sync(kAll, a_lane, k), dms_j = __shfl_sync(kAll, dms_lane, k);
        a_dms += a_j * dms_j;
      }
    }
    if (lane == 0) store_any(grad_beta.data, grad_beta.dtype, at.token, rdot + a_dms);
  }
  if (g_out) {
    if (geo.G == 1) {
      float sum = 0.0f;
      for (std::int64_t w0 = 0; w0 < geo.W; w0 += 32) {
        const float lane_value = w0 == 0 ? dgamma_first : w0 + lane < geo.W ? dgamma[w0 + lane] : 0.0f;
        const int count = geo.W - w0 < 32 ? static_cast<int>(geo.W - w0) : 32;
        for (int k = 0; k < count; ++k) sum += __shfl_sync(kAll, lane_value, k);
      }
      if (lane == 0) store_any(grad_g.data, grad_g.dtype, at.token, sum);
    } else {
      for (std::int64_t w = lane; w < geo.W; w += 32) {
        store_any(grad_g.data, grad_g.dtype, at.token * geo.W + w, w == lane ? dgamma_first : dgamma[w]);
      }
    }
  }
}

}  // namespace

void launch_entry_grads(const Geometry& geo, const Inputs& in, const Phase1Buffers& p1, const BackwardBuffers& bb,
                        const TokenGrads& out, cudaStream_t stream) {
  const std::int64_t writes = geo.write_entries(), tokens = geo.N * geo.C;
  write_entry_grads<<<blocks_for(writes), kThreads, 0, stream>>>(geo, in, p1, bb, out.k_val);
  check_launch("write_entry_grads");
  const unsigned read_slices = static_cast<unsigned>((geo.C * geo.R + kThreads - 1) / kThreads);
  read_entry_grads<<<static_cast<unsigned>(geo.N) * read_slices, kThreads, 0, stream>>>(geo, p1, bb, out.q_val,
                                                                                        read_slices);
  check_launch("read_entry_grads");
  group_scans<<<blocks_for(writes), kThreads, 0, stream>>>(geo, p1, bb);
  check_launch("group_scans");
  token_grads<<<blocks_for(32 * tokens), kThreads, 0, stream>>>(geo, p1, bb, out.beta, out.g);
  check_launch("token_grads");
}

}  // namespace sdm::cuda

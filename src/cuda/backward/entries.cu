// entries.cu - the per-entry gradients of the CUDA backward (docs/spec.md §4: through A, QK, the
// exponentials and the per-slot scans), batched over all N chunks after the reverse loop.
//
// Inputs: Phase 1 (sorted keys, L, kappa, wcoef, k_eff, q_pos, q_rho, q_w, A), the read records,
// the slot kernel's tasks, and what the steps left: dMs, dQK, rdot, and the row dots dk_eff, dc,
// dlambda, dq_w as per-step planes (backward.hpp: DotPlanes), each summed in step order
// (sum_steps) where it is read.
// Outputs: grad_k_val, grad_q_val, grad_beta, grad_g (those requested) and the scratch dL, dP, dLq,
// dgamma. Notation: da(i, j) = beta_i dMs[i][j]; E(x, y) = expf(f32(x - y)) of the f64 L's
// (core/log_decay.hpp); exp(x) = expf(f32(x)). Kernels, in order (each one's math above it):
//   write_entry_grads  one thread per sorted write entry: dkappa (grad_k_val), dL, dP
//   read_entry_grads   one thread per read entry: drho (grad_q_val), dLq
//   group_scans        one thread per write group: dgamma, the CPU engine's scans
//   token_grads        one warp per token: grad_beta, grad_g
// Every sum has one thread and a fixed order; no atomics. Groups and reads come from the slot
// kernel's tasks, with no searches (see write_entry_grads).
#include "cuda/backward/backward.hpp"
#include "cuda/common/rows.cuh"
#include "core/log_decay.hpp"
#include "cuda/common/cuda_check.hpp"
#include "cuda/common/launch_bounds.cuh"

namespace sdm::cuda {
namespace {

constexpr int kThreads = 128;
constexpr unsigned kAll = 0xffffffffu;

unsigned blocks_for(std::int64_t items) { return static_cast<unsigned>((items + kThreads - 1) / kThreads); }

__device__ __forceinline__ int task_write_size(std::int32_t sizes) { return sizes & ((1 << kReadSizeShift) - 1); }
__device__ __forceinline__ int task_read_size(std::int32_t sizes) { return sizes >> kReadSizeShift; }

// write_entry_grads, for sorted write entry e (token i, slot group of e):
//   dkappa_e = sum_{e' in group, i' < i} da(i, i') kappa_e' E(L_e, L_e')
//            + sum_{e' in group, i' > i} da(i', i) kappa_e' E(L_e', L_e)
//            + sum_{reads q of the slot, token i_q >= i} dQK[i_q][i] rho_q E(Lq_q, L_e)
//            + exp(L_e) dk_eff_e + exp(Lambda - L_e) dc_e
//   dL_e     = the same pair terms times kappa_e, with signs + (i' < i), - (i' > i), - (reads)
//            + k_eff_e dk_eff_e
//   dP_e     = wcoef_e dc_e.  Group entries in sorted (token) order, then reads in sorted order.
// Writes grad_k_val (0 for masked entries) and dL, dP; dgamma = 0 for masked entries.
// Groups and reads without searches: the slot kernel's tasks (bb.slot_tasks, backward/slot_tasks.cu:
// found once per call before the loop, which does not change them) hold at every write group's
// first sorted position the group's size, the first sorted read position of its slot in the chunk
// and the slot's read count; every other write position (inside a group, padding / masked) holds
// kSlotIdle. write_entry_grads and group_scans load the task at their own position together with
// their key. In write_entry_grads the group starts of a warp (whose lanes hold consecutive sorted
// entries) are a ballot of the roles; a lane inside a group takes its start's position and task by
// shuffles from the start's lane, and when the group began in an earlier warp lane 0 walks the
// roles back to the start. The reads of the entry's slot are the task's read range; reads at tokens
// before the entry's are skipped, which leaves the reads a search for the first read at or after
// the token would walk, in the same order. Index divisions run in 32 bits whenever the operands
// fit (the same quotients).
// 8 CTAs per SM (at most 64 registers).
__global__ void __launch_bounds__(kThreads, min_blocks(kThreads, 8))
    write_entry_grads(Geometry geo, Inputs in, Phase1Buffers p1, BackwardBuffers bb, AnyFloat grad_k) {
  const std::int64_t e = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int lane = static_cast<int>(threadIdx.x % 32);
  const std::int64_t total = geo.write_entries();
  if (e - lane >= total) return;  // whole warps from here on
  const std::int64_t C = geo.C, CW = C * geo.W, CR = C * geo.R;
  const KeyLayout& rl = bb.read_layout;
  const bool in_range = e < total;
  const std::int64_t n = index_div(e, CW), chunk0 = n * CW;
  const SlotTask* tasks = bb.slot_tasks + n * CR;  // tasks[s]: the task of chunk n's sorted position s - chunk0
  std::uint64_t key = 0;
  SlotTask own{};
  if (in_range) key = p1.keys[e], own = tasks[e];
  const std::int64_t local = geo.keys.local_slot(key), i = geo.keys.token(key), w = geo.keys.lane(key);
  const bool real = in_range && local != geo.sps;
  const EntryPlace at = entry_place(geo, n, i);
  const std::int64_t entry = chunk0 + i * geo.W + w;
  // The entry's own records, issued before its group is known so that their latency overlaps it.
  double L_e = 0.0;
  float kappa_e = 0.0f, beta_i = 0.0f, dk_eff = 0.0f, dc = 0.0f, wcoef = 0.0f, k_eff = 0.0f;
  if (real) {
    L_e = p1.L[e], kappa_e = p1.kappa[e], beta_i = load_input(in.beta, in.beta_dtype, at.token);
    dk_eff = sum_steps(bb.dk_eff, bb.dot_steps, e), dc = sum_steps(bb.dc, bb.dot_steps, e);
    wcoef = p1.wcoef[e], k_eff = p1.k_eff[entry];
  }
  // The group: a real entry with a role starts one (position 0 of a chunk does, when real). The
  // lanes from a start up to the next start or unreal lane are its group's entries in this warp;
  // lanes before the warp's first start continue lane 0's group, whose start lane 0 walks back to.
  const unsigned starts = __ballot_sync(kAll, real && own.role != kSlotIdle);
  std::int64_t start = e;
  if (lane == 0 && real && own.role == kSlotIdle) {
    do {
      own = tasks[--start];
    } while (own.role == kSlotIdle);
  }
  const unsigned starts_upto = starts & (kAll >> (31 - lane));
  const int source = starts_upto != 0 ? 31 - __clz(starts_upto) : 0;
  const std::int64_t begin = __shfl_sync(kAll, start, source);
  const std::int32_t first_read = __shfl_sync(kAll, own.role, source), sizes = __shfl_sync(kAll, own.sizes, source);
  if (!in_range) return;
  if (!real) {  // padding or masked
    bb.dgamma[entry] = 0.0f;
    if (at.t < geo.T && grad_k.data != nullptr) store_any(grad_k.data, grad_k.dtype, at.token * geo.W + w, 0.0f);
    return;
  }
  const std::int64_t end = begin + task_write_size(sizes);

  const float* dms = bb.dms + n * C * C;
  const float* dqk = bb.dqk + n * C * C;
  float dkappa = 0.0f, dL = 0.0f;
  for (std::int64_t s = begin; s < end; ++s) {
    if (s == e) continue;  // token i itself: no pair term
    const std::int64_t j = geo.keys.token(p1.keys[s]);
    if (j < i) {
      const float da = beta_i * dms[i * C + j];
      const float decay = core::decay_factor(L_e - p1.L[s]);
      dkappa += da * p1.kappa[s] * decay;
      dL += da * kappa_e * p1.kappa[s] * decay;
    } else if (j > i) {
      const float da = load_input(in.beta, in.beta_dtype, at.token + (j - i)) * dms[j * C + i];
      const float decay = core::decay_factor(p1.L[s] - L_e);
      dkappa += da * p1.kappa[s] * decay;
      dL -= da * p1.kappa[s] * kappa_e * decay;
    }
  }
  if (first_read >= 0) {
    const std::uint64_t* reads = bb.read_keys + n * CR + first_read;
    const int read_count = task_read_size(sizes);
    for (int s = 0; s < read_count; ++s) {
      const std::uint64_t read_key = reads[s];
      const std::int64_t iq = rl.token(read_key);
      if (iq < i) continue;  // a read before token i (the slot's reads ascend by token)
      const std::int64_t read = n * CR + iq * geo.R + rl.lane(read_key);
      const float rho = p1.q_rho[read];
      const float decay = core::decay_factor(p1.L[chunk0 + p1.q_pos[read]] - L_e);
      const float d = dqk[iq * C + i];
      dkappa += d * rho * decay;
      dL -= d * rho * kappa_e * decay;
    }
  }
  dkappa += core::decay_factor(L_e) * dk_eff + core::decay_factor((end - 1 == e ? L_e : p1.L[end - 1]) - L_e) * dc;
  dL += k_eff * dk_eff;
  bb.dL[e] = dL;
  bb.dP[e] = wcoef * dc;
  if (grad_k.data != nullptr) store_any(grad_k.data, grad_k.dtype, at.token * geo.W + w, dkappa);
}

// read_entry_grads, for read entry q (token i, seeing the group's writes up to q_pos; a CTA covers
// one slice of one chunk's reads, 32-bit index math):
//   drho_q = sum_{e' in group, pos <= q_pos} dQK[i][i_e'] kappa_e' E(Lq, L_e') + exp(Lq) dq_w
//   dLq_q  = sum (same) rho_q kappa_e' E(Lq, L_e') + q_w dq_w.   Writes grad_q_val, dLq.
__global__ void read_entry_grads(Geometry geo, Phase1Buffers p1, BackwardBuffers bb, AnyFloat grad_q, unsigned slices) {
  const std::int64_t n = blockIdx.x / slices;
  const int q = static_cast<int>((blockIdx.x % slices) * kThreads + threadIdx.x), R = static_cast<int>(geo.R);
  if (q >= static_cast<int>(geo.C) * R) return;
  const std::int64_t C = geo.C, CW = C * geo.W, CR = C * geo.R;
  const std::int64_t i = q / R, r = q % R, read = n * CR + q;
  const EntryPlace at = entry_place(geo, n, i);
  if (at.t >= geo.T) return;
  // Phase 1 writes the four records of every read entry: one round of loads.
  const std::int32_t slot = p1.q_slot[read], pos = p1.q_pos[read];
  const float rho = p1.q_rho[read], q_w = p1.q_w[read];
  float drho = 0.0f, dLq = 0.0f;
  if (slot >= 0) {
    const float dq_w = sum_steps(bb.dq_w, bb.dot_steps, read);
    double Lq = 0.0;
    if (pos >= 0) {
      // Position pos (the latest write of the slot at or before token i) and the one before it,
      // loaded together: the group starts at pos unless that one is of the same slot.
      const std::uint64_t* keys = p1.keys + n * CW;
      const double* L = p1.L + n * CW;
      const float* kappa = p1.kappa + n * CW;
      const std::uint64_t key = keys[pos], key_before = pos > 0 ? keys[pos - 1] : 0;
      const float kappa_pos = kappa[pos];
      Lq = L[pos];
      const std::int64_t local = geo.keys.local_slot(key);
      int begin = pos;
      if (pos > 0 && geo.keys.local_slot(key_before) == local) {
        for (--begin; begin > 0 && geo.keys.local_slot(keys[begin - 1]) == local;) --begin;
      }
      const float* dqk = bb.dqk + (n * C + i) * C;
      const auto add = [&](std::uint64_t key_s, double L_s, float kappa_s) {
        const float d = dqk[geo.keys.token(key_s)];
        const float decay = core::decay_factor(Lq - L_s);
        drho += d * kappa_s * decay;
        dLq += d * rho * kappa_s * decay;
      };
      for (int s = begin; s < pos; ++s) add(keys[s], L[s], kappa[s]);
      add(key, Lq, kappa_pos);
    }
    drho += core::decay_factor(Lq) * dq_w;
    dLq += q_w * dq_w;
  }
  bb.dLq[read] = dLq;
  if (grad_q.data != nullptr) store_any(grad_q.data, grad_q.dtype, at.token * geo.R + r, drho);
}

// group_scans, one thread per write group (its first entry; the other positions' threads stop
// after one load), the CPU engine's scans:
//   dgamma_e = (sum_{e' >= e} dL_e' + sum_{reads at tokens >= i_e} dLq) + sum_{e' < e} dP_e'
//              + dLambda, the first sum built from the group's last entry backwards.
__global__ void group_scans(Geometry geo, Phase1Buffers p1, BackwardBuffers bb) {
  const std::int64_t e = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= geo.write_entries()) return;
  const std::int64_t CW = geo.C * geo.W, CR = geo.C * geo.R;
  const KeyLayout& rl = bb.read_layout;
  const std::int64_t n = index_div(e, CW), chunk0 = n * CW;
  // The task (its role says whether e starts a write group) and the key, loaded together.
  const SlotTask task = bb.slot_tasks[n * CR + e];
  const std::uint64_t key = p1.keys[e];
  if (task.role == kSlotIdle) return;  // inside a group, padding or masked
  const float dL_e = bb.dL[e];
  // exp(Lambda) <G, pre>, the dot's planes written at group-first positions only.
  const float dlambda = task.decay * sum_steps(bb.dlambda, bb.dot_steps, e);
  const std::int64_t end = e + task_write_size(task.sizes);
  const std::uint64_t* reads = bb.read_keys + n * CR + (task.role >= 0 ? task.role : 0);
  int read = task_read_size(task.sizes) - 1;  // the slot's last read (reads are in token order)
  const auto entry_of = [&](std::uint64_t k) { return chunk0 + geo.keys.token(k) * geo.W + geo.keys.lane(k); };

  // Suffix sums from the group's last entry back to e; entry e's (the last one formed) stays in
  // a register, the others go to dgamma and are read back below.
  float suffix = 0.0f;
  for (std::int64_t s = end - 1; s >= e; --s) {
    const std::uint64_t k = s == e ? key : p1.keys[s];
    const std::int64_t i = geo.keys.token(k);
    suffix += s == e ? dL_e : bb.dL[s];
    for (; read >= 0 && rl.token(reads[read]) >= i; --read) {
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

// Pieces of 32 values that token_grads loads before its sums and stores: kHeldCols of A / dMs
// (every row when C <= 64), kHeldLanes of dgamma (every token when W <= 128).
constexpr int kHeldCols = 2;
constexpr int kHeldLanes = 4;

// sum += a_j * b_j for j = 0 .. count - 1 in order, lane j holding a_j and b_j.
__device__ __forceinline__ void add_products(float& sum, float a_lane, float b_lane, int count) {
  for (int k = 0; k < count; ++k) {
    const float a_j = __shfl_sync(kAll, a_lane, k), b_j = __shfl_sync(kAll, b_lane, k);
    sum += a_j * b_j;
  }
}

// sum += x_j for j = 0 .. count - 1 in order, lane j holding x_j.
__device__ __forceinline__ void add_values(float& sum, float x_lane, int count) {
  for (int k = 0; k < count; ++k) sum += __shfl_sync(kAll, x_lane, k);
}

__device__ __forceinline__ int piece_count(std::int64_t remaining) {
  return remaining <= 0 ? 0 : remaining < 32 ? static_cast<int>(remaining) : 32;
}

// token_grads, one warp per token: grad_beta = rdot_i + sum_{j<i} A[i][j] dMs[i][j] (j ascending);
// grad_g = dgamma (G = W) or sum_w dgamma_(i,w) (w ascending).
// Rows are loaded 32 columns at a time, one per lane; every lane runs the serial sums
// on shuffled values (the one-thread order); G = W stores by lanes. The first 64 columns, rdot and
// the first 128 dgamma are loaded before the sums and stores (all of them when C <= 64 and
// W <= 128).
__global__ void token_grads(Geometry geo, Phase1Buffers p1, BackwardBuffers bb, AnyFloat grad_beta, AnyFloat grad_g) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  const std::int64_t ci = (static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;  // n*C + i
  if (ci >= geo.N * geo.C) return;  // whole warps
  const std::int64_t C = geo.C, W = geo.W, n = index_div(ci, C), i = ci - n * C;
  const EntryPlace at = entry_place(geo, n, i);
  if (at.t >= geo.T) return;
  // Every load before the first store (the stores may alias them for all the compiler knows): the
  // first kHeldCols pieces of A / dMs, rdot, and the first kHeldLanes pieces of the token's dgamma.
  const bool beta_out = grad_beta.data != nullptr, g_out = grad_g.data != nullptr;
  const float* a = p1.A + ci * C;
  const float* dms = bb.dms + ci * C;
  const float* dgamma = bb.dgamma + ci * W;
  float a_held[kHeldCols], dms_held[kHeldCols], dgamma_held[kHeldLanes];
#pragma unroll
  for (int k = 0; k < kHeldCols; ++k) {
    const std::int64_t j = 32 * k + lane;
    const bool mine = beta_out && j < i;
    a_held[k] = mine ? a[j] : 0.0f;
    dms_held[k] = mine ? dms[j] : 0.0f;
  }
  const float rdot = beta_out && lane == 0 ? bb.rdot[ci] : 0.0f;
#pragma unroll
  for (int k = 0; k < kHeldLanes; ++k) {
    const std::int64_t w = 32 * k + lane;
    dgamma_held[k] = g_out && w < W ? dgamma[w] : 0.0f;
  }
  if (beta_out) {
    float a_dms = 0.0f;
#pragma unroll
    for (int k = 0; k < kHeldCols; ++k) add_products(a_dms, a_held[k], dms_held[k], piece_count(i - 32 * k));
    for (std::int64_t j0 = 32 * kHeldCols; j0 < i; j0 += 32) {
      const bool mine = j0 + lane < i;
      add_products(a_dms, mine ? a[j0 + lane] : 0.0f, mine ? dms[j0 + lane] : 0.0f, piece_count(i - j0));
    }
    if (lane == 0) store_any(grad_beta.data, grad_beta.dtype, at.token, rdot + a_dms);
  }
  if (g_out) {
    if (geo.G == 1) {
      float sum = 0.0f;
#pragma unroll
      for (int k = 0; k < kHeldLanes; ++k) add_values(sum, dgamma_held[k], piece_count(W - 32 * k));
      for (std::int64_t w0 = 32 * kHeldLanes; w0 < W; w0 += 32) {
        add_values(sum, w0 + lane < W ? dgamma[w0 + lane] : 0.0f, piece_count(W - w0));
      }
      if (lane == 0) store_any(grad_g.data, grad_g.dtype, at.token, sum);
    } else {
#pragma unroll
      for (int k = 0; k < kHeldLanes; ++k) {
        const std::int64_t w = 32 * k + lane;
        if (w < W) store_any(grad_g.data, grad_g.dtype, at.token * W + w, dgamma_held[k]);
      }
      for (std::int64_t w = 32 * kHeldLanes + lane; w < W; w += 32) {
        store_any(grad_g.data, grad_g.dtype, at.token * W + w, dgamma[w]);
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

// walk_cuts.cu - where the staged slot walk (slots_staged.cu) cuts each chunk's sorted positions
// into the shares of its CTAs: at about equal work, not at equal position counts.
//
// A share's CTA walks the workers whose positions fall in it, and a worker's work sits at its one
// position: its G and M0 pieces through the ring and its G store, then its members (a write
// group's write entries and the read entries of its slot, which sit in the read half of the
// positions; a read-only group's reads). Under heavy reuse most reads belong to written slots, so
// equal position counts leave the read half's shares nearly idle: on the project's heavy_reuse
// slots the busiest of 5 shares at flagship C 64 carried 1.76x the mean share's work, of 22 at
// readme C 128 2.04x, on product keys 1.05-1.17x; cut at equal work 1.00-1.14x (host simulation of
// this cost, bench/compare/walk_shares_balance.py; docs/performance.md, "Stop 52").
//
// Cost of a position, in members: a worker's cost + the group's write and read sizes at a worker (task
// role != kSlotIdle, backward.hpp SlotTask), 0 elsewhere; the cuts from the costs:
// common/balanced_cuts.cuh. Integers only; each cut has one writer.
//
// Kernel chunk_walk_cuts: one CTA of kCutThreads per chunk (balanced_cuts). Which CTA walks a worker
// never changes a value (slots_staged.cu).
#include <cstdint>

#include "cuda/backward/backward.hpp"
#include "cuda/backward/slots_staged.hpp"
#include "cuda/common/balanced_cuts.cuh"
#include "cuda/common/cuda_check.hpp"
#include "cuda/common/workspace.hpp"

namespace sdm::cuda {
namespace {

constexpr int kCutThreads = 256;
// A worker's fixed work against one member's (the ring's two row pieces and the G store against a
// member's staged row and its dot). The host simulation's balance depends on it (flagship heavy:
// 1.01x when a worker's true cost is 4, 1.38x when it is 16 and the cut assumes 4); 4 is the
// weight stop 53 measured (docs/performance.md).
constexpr int kWorkerCost = 4;

__global__ void __launch_bounds__(kCutThreads)
    chunk_walk_cuts(const SlotTask* __restrict__ tasks, int positions, int shares, std::int32_t* __restrict__ cuts) {
  const SlotTask* chunk = tasks + static_cast<std::int64_t>(blockIdx.x) * positions;
  const auto cost = [chunk](int q) {
    const int4 head = __ldg(reinterpret_cast<const int4*>(chunk + q));  // role, local, sizes, decay's bits
    if (head.x == kSlotIdle) return 0;
    return kWorkerCost + (head.z & ((1 << kReadSizeShift) - 1)) + (head.z >> kReadSizeShift);
  };
  balanced_cuts<kCutThreads>(positions, shares, cost, cuts + static_cast<std::int64_t>(blockIdx.x) * (shares + 1));
}

}  // namespace

void plan_walk_cuts(const Geometry& geo, Workspace& ws, BackwardBuffers& bb) {
  bb.walk_shares = staged_walk_shares(geo, bb.dot_steps);
  ws.plan(&bb.walk_cuts, geo.N * (bb.walk_shares + 1));
}

void launch_walk_cuts(const Geometry& geo, const BackwardBuffers& bb, cudaStream_t stream) {
  const int positions = static_cast<int>(chunk_positions(geo));
  chunk_walk_cuts<<<static_cast<unsigned>(geo.N), kCutThreads, 0, stream>>>(
      bb.slot_tasks, positions, static_cast<int>(bb.walk_shares), bb.walk_cuts);
  check_launch("chunk_walk_cuts");
}

}  // namespace sdm::cuda

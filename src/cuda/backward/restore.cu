// restore.cu - the initial bank from the backward's row sources (restore_initial_bank,
// backward.hpp), for callers that ask the backward to hand back the initial bank
// (WriteReadOptions::restore_bank).
//
// After the reverse walk row_source[s] names the snapshot row of the first chunk that writes s
// (bank_at_chunk.cuh), whose decoded values are the initial bank's row; rows no chunk writes
// (-1) already hold it. Kernel restore_rows: one warp per stream row s, lane l owning the
// 8-column pieces 256 j + 8 l (common/rows.cuh); a sourced row gets restore_snapshot_piece's
// values (the saved bits in mode "none", else the decoded values, exact in E): bitwise the bank a
// restore chunk by chunk leaves, whose last write to a row is that chunk's snapshot. One writer
// per row, no ordering between rows.
#include "cuda/backward/backward.hpp"
#include "cuda/backward/bank_at_chunk.cuh"
#include "cuda/common/cuda_check.hpp"
#include "cuda/common/dispatch.hpp"

namespace sdm::cuda {
namespace {

constexpr int kWarps = 8;

template <typename E, bool kVec, SnapshotQuant kMode>
__global__ void __launch_bounds__(kWarps * 32)
    restore_rows(E* __restrict__ bank, const std::int64_t* __restrict__ row_source, SnapshotRows snapshot,
                 std::int64_t rows, std::int64_t hd) {
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const std::int64_t warp_stride = static_cast<std::int64_t>(gridDim.x) * kWarps;
  snapshot.mode = kMode;
  for (std::int64_t s = static_cast<std::int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32; s < rows;
       s += warp_stride) {
    const std::int64_t source = row_source[s];
    if (source == kFinalBankRow) continue;
    for (std::int64_t c0 = lane * kLaneCols; c0 < hd; c0 += kWarpCols) {
      float x[kLaneCols] = {};
      if constexpr (kMode != SnapshotQuant::none) load_snapshot_piece<kVec, E>(snapshot, source, c0, hd, x);
      restore_snapshot_piece<kVec>(snapshot, source, c0, hd, x, bank + s * hd);
    }
  }
}

}  // namespace

void restore_initial_bank(const Geometry& geo, const BackwardBuffers& bb, cudaStream_t stream) {
  const std::int64_t rows = geo.P * geo.sps;
  const std::int64_t blocks = (rows + kWarps - 1) / kWarps;
  const unsigned grid = static_cast<unsigned>(blocks < 65536 ? blocks : 65536);
  dispatch(
      [&](auto row, auto vec, auto mode) {
        using E = typename decltype(row)::type;
        restore_rows<E, decltype(vec)::value == 8, decltype(mode)::value><<<grid, kWarps * 32, 0, stream>>>(
            static_cast<E*>(bb.bank), bb.row_source, bb.snapshot, rows, geo.hd);
      },
      Rows{bb.bf16_bank}, VecWidth{bb.vec8}, Snapshot{bb.snapshot.mode});
  check_launch("restore_rows (initial bank)");
}

}  // namespace sdm::cuda

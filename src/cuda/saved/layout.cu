// layout.cu - the layout of the CUDA saving forward's `saved` buffer (uint8, 16-byte
// aligned, write_read_saved_bytes bytes), the Phase 1 pointers into it and the zeroing of the
// bytes that no other kernel writes. saved/layout.hpp states each region's contents.
//
// Regions, in this order, each starting at the next multiple of 256 bytes after the previous
// one's end (N = Nt*P chunks, rows = N*C*W snapshot rows):
//   delta, residual  f32 [N*C, hd] each                                  written by dual.cu
//   snapshot         u8 [rows, row_bytes] (row_bytes: the effective mode)  group_writer.cu
//   scales           f32 [rows], fp8 / int4 only (else empty, no gap)     group_writer.cu
//   Phase 1          keys u64 [N*C*W]; L f64 [N*C*W]; kappa, wcoef, gdecay, inv_pos, k_slot, k_eff
//                    4 bytes [N*C*W]; q_slot, q_pos, q_rho, q_w 4 bytes [N*C*R]; A, QK, X f32 [N, C, C]
//                                                                        written by phase1.cu
// Who writes what: Phase 1 writes its arrays whole (0 at padding / masked positions); the dual
// product writes delta and residual at every chunk-token row (0 for padding tokens); the group
// writer writes the snapshot row and scale at the first sorted position of each write group.
// zero_unwritten_saved zeroes the rest: the gaps between regions (zero_gaps, one CTA per gap of
// fewer than 256 bytes) and the snapshot rows and scales of the positions that start no group
// (zero_unused_rows, one warp per 32 positions). So the CUDA saving forward writes every byte of
// `saved`, as an op output: the same bytes for the same inputs, and no caller needs to zero it.
// The 256-byte region starts keep the 16-byte vector accesses and the 8-byte keys aligned.
#include "cuda/saved/layout.hpp"

#include <cstdint>

#include "cuda/common/alignment.hpp"
#include "cuda/common/cuda_check.hpp"
#include "core/snapshot_quant.hpp"

namespace sdm::cuda {

SavedLayout saved_layout(const core::WriteReadShape& shape, const WriteReadOptions& options) {
  const std::size_t chunks = static_cast<std::size_t>(shape.num_time_chunks() * shape.P);
  const std::size_t C = static_cast<std::size_t>(shape.C), hd = static_cast<std::size_t>(shape.hd);
  const std::size_t token_rows = chunks * C;
  const std::size_t write_entries = token_rows * static_cast<std::size_t>(shape.W);
  const std::size_t read_entries = token_rows * static_cast<std::size_t>(shape.R);
  const std::size_t chunk_matrix = chunks * C * C;  // elements of one [N, C, C] array
  SavedLayout layout;
  layout.mode = core::effective_snapshot_mode(options.snapshot_quant, shape.bank);
  layout.row_bytes = core::snapshot_payload_bytes(layout.mode, shape.bank, shape.hd);
  layout.has_scales = core::snapshot_scale_bytes(layout.mode) > 0;
  // Each region starts at the next multiple of 256 bytes after the previous one's end; the bytes
  // skipped are a gap.
  std::size_t end = 0;
  const auto region = [&](std::size_t& offset, std::size_t bytes) {
    offset = align256(end);
    if (offset > end) layout.gaps[layout.gap_count++] = {end, offset};
    end = offset + bytes;
  };
  const std::size_t token_bytes = token_rows * hd * sizeof(float);
  region(layout.delta, token_bytes);
  region(layout.residual, token_bytes);
  region(layout.snapshot, write_entries * layout.row_bytes);
  if (layout.has_scales) region(layout.scales, write_entries * sizeof(float));
  else layout.scales = end;
  SavedPhase1& p1 = layout.phase1;
  region(p1.keys, write_entries * sizeof(std::uint64_t));
  region(p1.L, write_entries * sizeof(double));
  constexpr std::size_t word = 4;  // f32 and i32 elements
  for (std::size_t* offset : {&p1.kappa, &p1.wcoef, &p1.gdecay, &p1.inv_pos, &p1.k_slot, &p1.k_eff}) {
    region(*offset, write_entries * word);
  }
  for (std::size_t* offset : {&p1.q_slot, &p1.q_pos, &p1.q_rho, &p1.q_w}) region(*offset, read_entries * word);
  for (std::size_t* offset : {&p1.A, &p1.QK, &p1.X}) region(*offset, chunk_matrix * sizeof(float));
  layout.total = end;
  return layout;
}

namespace {

// Block b zeroes gap b (shorter than 256 bytes).
struct GapList {
  SavedGap gaps[kMaxSavedGaps];
};

__global__ void zero_gaps(GapList list, unsigned char* base) {
  const SavedGap gap = list.gaps[blockIdx.x];
  const std::size_t at = gap.begin + threadIdx.x;
  if (at < gap.end) base[at] = 0;
}

constexpr int kRowWarps = 8;

// One warp per 32 consecutive sorted write positions of one chunk (grid: chunks x ceil(C*W / 32)
// / kRowWarps): lane l tests position q = 32 w + l (a group starts there when its slot is real and
// differs from the previous position's); the warp then zeroes the snapshot row (16-byte stores when
// the row allows, else bytes) and the scale of each position that starts no group.
__global__ void __launch_bounds__(kRowWarps * 32)
    zero_unused_rows(Geometry geo, const std::uint64_t* __restrict__ keys, unsigned char* __restrict__ rows,
                     std::size_t row_bytes, float* __restrict__ scales) {
  const int CW = static_cast<int>(geo.C * geo.W);
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int first = (static_cast<int>(blockIdx.y) * kRowWarps + static_cast<int>(threadIdx.x) / 32) * 32;
  if (first >= CW) return;
  const std::int64_t chunk = blockIdx.x;
  const KeySlots slots{keys + chunk * CW, geo.keys};
  const int q = first + lane;
  const bool unused = q < CW && !starts_group(slots, q, slots[q], geo.sps);
  const std::int64_t row0 = chunk * CW + first;
  if (unused && scales != nullptr) scales[row0 + lane] = 0.0f;
  const bool vector = aligned16(rows) && row_bytes % 16 == 0;
  for (unsigned todo = __ballot_sync(0xffffffffu, unused); todo != 0; todo &= todo - 1) {
    unsigned char* row = rows + (row0 + __ffs(todo) - 1) * row_bytes;
    if (vector) {
      for (std::size_t at = 16 * lane; at < row_bytes; at += 16 * 32) {
        *reinterpret_cast<uint4*>(row + at) = make_uint4(0, 0, 0, 0);
      }
    } else {
      for (std::size_t at = lane; at < row_bytes; at += 32) row[at] = 0;
    }
  }
}

}  // namespace

void zero_unwritten_saved(const Geometry& geo, const SavedLayout& layout, const std::uint64_t* keys,
                          unsigned char* base, cudaStream_t stream) {
  if (layout.gap_count > 0) {
    GapList list;
    for (int k = 0; k < layout.gap_count; ++k) list.gaps[k] = layout.gaps[k];
    zero_gaps<<<static_cast<unsigned>(layout.gap_count), 256, 0, stream>>>(list, base);
    check_launch("zero_gaps");
  }
  const std::int64_t CW = geo.C * geo.W;
  const dim3 grid(static_cast<unsigned>(geo.N), static_cast<unsigned>((CW + 32 * kRowWarps - 1) / (32 * kRowWarps)));
  float* scales = layout.has_scales ? reinterpret_cast<float*>(base + layout.scales) : nullptr;
  zero_unused_rows<<<grid, kRowWarps * 32, 0, stream>>>(geo, keys, base + layout.snapshot, layout.row_bytes, scales);
  check_launch("zero_unused_rows");
}

void bind_saved_phase1(const SavedLayout& layout, unsigned char* base, Phase1Buffers& buf) {
  const SavedPhase1& at = layout.phase1;
  const auto f32 = [base](std::size_t offset) { return reinterpret_cast<float*>(base + offset); };
  const auto i32 = [base](std::size_t offset) { return reinterpret_cast<std::int32_t*>(base + offset); };
  buf.keys = reinterpret_cast<std::uint64_t*>(base + at.keys);
  buf.L = reinterpret_cast<double*>(base + at.L);
  buf.kappa = f32(at.kappa);
  buf.wcoef = f32(at.wcoef);
  buf.gdecay = f32(at.gdecay);
  buf.inv_pos = i32(at.inv_pos);
  buf.k_slot = i32(at.k_slot);
  buf.k_eff = f32(at.k_eff);
  buf.q_slot = i32(at.q_slot);
  buf.q_pos = i32(at.q_pos);
  buf.q_rho = f32(at.q_rho);
  buf.q_w = f32(at.q_w);
  buf.A = f32(at.A);
  buf.QK = f32(at.QK);
  buf.X = f32(at.X);
}

}  // namespace sdm::cuda

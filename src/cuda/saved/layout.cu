// layout.cu - the layout of the CUDA saving forward's `saved` buffer (uint8, 16-byte
// aligned, write_read_saved_bytes bytes) and the Phase 1 pointers into it. saved/layout.hpp
// states each region's contents.
//
// Regions, in this order, each starting at the next multiple of 256 bytes after the previous
// one's end (N = Nt*P chunks, rows = plan.snapshot_rows snapshot rows, N*C*W in the worst case):
//   delta, residual  f32 [N*C, hd] each                                  written by dual.cu
//   scales           f32 [N*C*W], fp8 / int4 only (else empty, no gap)   group_writer.cu
//   Phase 1          keys u64 [N*C*W]; L f64 [N*C*W]; kappa, wcoef, gdecay, group_ordinal, inv_pos,
//                    k_slot, k_eff 4 bytes [N*C*W]; q_slot, q_pos, q_rho, q_w 4 bytes [N*C*R]; A, QK,
//                    X f32 [N, C, C]; group_first i64 [N + 1]               written by phase1.cu
//   snapshot         u8 [rows, row_bytes] (row_bytes: the effective mode)  group_writer.cu
// The snapshot payload comes last, so a buffer planned for fewer rows is the worst-case buffer cut
// short: every other region keeps its offset.
// Who writes what: Phase 1 writes its arrays whole (0 at padding / masked positions); the dual
// product writes delta and residual at every chunk-token row (0 for padding tokens); the group
// writer writes the snapshot row and scale of each write group at the group's row (group_first[n] +
// group_ordinal at its first sorted position; a row past the buffer's is not written). No kernel
// writes the snapshot rows and scales past the call's write groups or the gaps between regions
// (fewer than 256 bytes each), and no kernel of the
// backward reads them: they keep the caller's bytes, so `saved` needs no zeroing (docs/spec.md §11).
// The 256-byte region starts keep the 16-byte vector accesses and the 8-byte keys aligned.
#include "cuda/saved/layout.hpp"

#include <cstdint>

#include "cuda/common/alignment.hpp"
#include "core/snapshot_quant.hpp"
#include "core/snapshot_row_rule.hpp"
#include "cuda/engine.hpp"

namespace sdm::cuda {

SavedLayout saved_layout(const WriteReadPlan& plan) {
  const core::WriteReadShape& shape = plan.shape;
  const std::size_t chunks = static_cast<std::size_t>(shape.num_time_chunks() * shape.P);
  const std::size_t C = static_cast<std::size_t>(shape.C), hd = static_cast<std::size_t>(shape.hd);
  const std::size_t token_rows = chunks * C;
  const std::size_t write_entries = token_rows * static_cast<std::size_t>(shape.W);
  const std::size_t read_entries = token_rows * static_cast<std::size_t>(shape.R);
  const std::size_t chunk_matrix = chunks * C * C;  // elements of one [N, C, C] array
  SavedLayout layout;
  layout.mode = plan.snapshot;
  layout.row_bytes = core::snapshot_payload_bytes(layout.mode, shape.bank, shape.hd);
  layout.has_scales = core::snapshot_scale_bytes(layout.mode) > 0;
  // Each region starts at the next multiple of 256 bytes after the previous one's end.
  std::size_t end = 0;
  const auto region = [&](std::size_t& offset, std::size_t bytes) {
    offset = align256(end);
    end = offset + bytes;
  };
  const std::size_t token_bytes = token_rows * hd * sizeof(float);
  region(layout.delta, token_bytes);
  region(layout.residual, token_bytes);
  if (layout.has_scales) region(layout.scales, write_entries * sizeof(float));
  else layout.scales = end;
  SavedPhase1& p1 = layout.phase1;
  region(p1.keys, write_entries * sizeof(std::uint64_t));
  region(p1.L, write_entries * sizeof(double));
  constexpr std::size_t word = 4;  // f32 and i32 elements
  for (std::size_t* offset :
       {&p1.kappa, &p1.wcoef, &p1.gdecay, &p1.group_ordinal, &p1.inv_pos, &p1.k_slot, &p1.k_eff}) {
    region(*offset, write_entries * word);
  }
  for (std::size_t* offset : {&p1.q_slot, &p1.q_pos, &p1.q_rho, &p1.q_w}) region(*offset, read_entries * word);
  for (std::size_t* offset : {&p1.A, &p1.QK, &p1.X}) region(*offset, chunk_matrix * sizeof(float));
  region(p1.group_first, (chunks + 1) * sizeof(std::int64_t));
  core::check_layout_rows(plan.snapshot_rows);
  layout.rows = static_cast<std::size_t>(plan.snapshot_rows);
  region(layout.snapshot, layout.rows * layout.row_bytes);  // last: fewer rows cut the buffer short
  layout.total = end;
  return layout;
}

std::size_t write_read_saved_bytes(const WriteReadPlan& plan) { return saved_layout(plan).total; }

void bind_saved_phase1(const SavedLayout& layout, unsigned char* base, Phase1Buffers& buf) {
  const SavedPhase1& at = layout.phase1;
  const auto f32 = [base](std::size_t offset) { return reinterpret_cast<float*>(base + offset); };
  const auto i32 = [base](std::size_t offset) { return reinterpret_cast<std::int32_t*>(base + offset); };
  buf.keys = reinterpret_cast<std::uint64_t*>(base + at.keys);
  buf.L = reinterpret_cast<double*>(base + at.L);
  buf.kappa = f32(at.kappa);
  buf.wcoef = f32(at.wcoef);
  buf.gdecay = f32(at.gdecay);
  buf.group_ordinal = i32(at.group_ordinal);
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
  buf.group_first = reinterpret_cast<std::int64_t*>(base + at.group_first);
}

}  // namespace sdm::cuda

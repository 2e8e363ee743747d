// saved_layout.cu - region offsets of the CUDA saved buffer and the Phase 1 pointers into it (see
// saved_layout.hpp). Host code only.
#include "saved_layout.hpp"

#include <cstdint>

#include "alignment.hpp"
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
  layout.delta = 0;
  layout.residual = align256(token_rows * hd * sizeof(float));
  layout.snapshot = layout.residual + align256(token_rows * hd * sizeof(float));
  const std::size_t snapshot_end = layout.snapshot + write_entries * layout.row_bytes;
  layout.scales = layout.has_scales ? align256(snapshot_end) : snapshot_end;
  std::size_t end = layout.has_scales ? layout.scales + write_entries * sizeof(float) : snapshot_end;

  // Each Phase 1 region starts at the next multiple of 256 bytes.
  const auto region = [&](std::size_t& offset, std::size_t bytes) {
    offset = align256(end);
    end = offset + bytes;
  };
  SavedPhase1& p1 = layout.phase1;
  region(p1.keys, write_entries * sizeof(std::uint64_t));
  constexpr std::size_t word = 4;  // f32 and i32 elements
  for (std::size_t* offset : {&p1.L, &p1.kappa, &p1.wcoef, &p1.gdecay, &p1.inv_pos, &p1.k_slot, &p1.k_eff}) {
    region(*offset, write_entries * word);
  }
  for (std::size_t* offset : {&p1.q_slot, &p1.q_pos, &p1.q_rho, &p1.q_w}) region(*offset, read_entries * word);
  for (std::size_t* offset : {&p1.A, &p1.QK, &p1.X}) region(*offset, chunk_matrix * sizeof(float));
  layout.total = end;
  return layout;
}

void bind_saved_phase1(const SavedLayout& layout, unsigned char* base, Phase1Buffers& buf) {
  const SavedPhase1& at = layout.phase1;
  const auto f32 = [base](std::size_t offset) { return reinterpret_cast<float*>(base + offset); };
  const auto i32 = [base](std::size_t offset) { return reinterpret_cast<std::int32_t*>(base + offset); };
  buf.keys = reinterpret_cast<std::uint64_t*>(base + at.keys);
  buf.L = f32(at.L);
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

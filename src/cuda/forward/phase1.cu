// phase1.cu - Phase 1 of the chunked forward for all N chunks (phase1.hpp has the arrays and
// contracts): where its arrays live, and its launches in order: the write keys and their
// per-chunk sort (sort/entry_keys.hpp), then (saving calls) number_groups, then scan_groups, lookup_reads, pair_products and solve
// (phase1_kernels.hpp), all on the call's stream.
#include "cuda/forward/phase1.hpp"

#include "cuda/forward/phase1_kernels.hpp"
#include "cuda/sort/entry_keys.hpp"

namespace sdm::cuda {

void plan_phase1_kept(const Geometry& geo, Workspace& ws, Phase1Buffers& buf) {
  const std::int64_t ew = geo.write_entries(), er = geo.read_entries(), cc = geo.N * geo.C * geo.C;
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
}

void plan_phase1_forward_only(const Geometry& geo, Workspace& ws, Phase1Buffers& buf) {
  ws.plan(&buf.keys_unsorted, geo.write_entries());
  ws.plan(&buf.prev_pos, geo.write_entries());
  ws.plan(&buf.QX, geo.N * geo.C * geo.C);
  buf.sort_temp_bytes = entry_key_sort_bytes(geo, geo.keys, geo.W);
  ws.plan_bytes(&buf.sort_temp, buf.sort_temp_bytes);
}

void run_phase1(const Geometry& geo, const Inputs& in, bool bf16_bank, const Phase1Buffers& buf,
                cudaStream_t stream) {
  sort_write_keys(geo, in, buf.keys_unsorted, buf.keys, buf.k_slot, buf.sort_temp, stream);
  if (buf.group_first != nullptr) launch_number_groups(geo, buf.keys, buf.group_ordinal, buf.group_first, stream);
  launch_scan_groups(geo, in, bf16_bank, buf, stream);
  launch_lookup_reads(geo, in, bf16_bank, buf, stream);
  launch_pair_products(geo, buf, stream);
  launch_solve(geo, in, buf, stream);
}

}  // namespace sdm::cuda

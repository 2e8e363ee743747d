// saved_layout.cpp - region sizes and offsets of the saved buffer (see saved_layout.hpp).
#include "saved_layout.hpp"

#include "engine.hpp"

#include "core/snapshot_row_rule.hpp"

namespace sdm::cpu {
namespace {

std::size_t align_up(std::size_t bytes) { return (bytes + kSavedAlign - 1) / kSavedAlign * kSavedAlign; }

}  // namespace

SavedLayout saved_layout(const WriteReadPlan& plan) {
  const core::WriteReadShape& shape = plan.shape;
  SavedLayout layout;
  layout.snapshot = snapshot_format(shape.bank, plan.snapshot, shape.hd);
  const std::int64_t chunks = shape.num_time_chunks() * shape.P;  // N
  const auto worst_rows = static_cast<std::size_t>(chunks * shape.C * shape.W);
  core::check_layout_rows(plan.snapshot_rows);
  const auto rows = static_cast<std::size_t>(plan.snapshot_rows);
  const std::size_t token_rows = static_cast<std::size_t>(shape.P * shape.T * shape.hd) * sizeof(float);

  layout.delta = 0;
  layout.residual = align_up(layout.delta + token_rows);
  layout.scales = align_up(layout.residual + token_rows);
  layout.payload = align_up(layout.scales + (layout.snapshot.has_scale ? worst_rows * sizeof(float) : 0));
  layout.total = layout.payload + rows * layout.snapshot.row_bytes;
  return layout;
}

std::size_t write_read_saved_bytes(const WriteReadPlan& plan) { return saved_layout(plan).total; }

}  // namespace sdm::cpu

// snapshot_row_rule.cpp - the refusal of a too-small `saved` and the layouts' rows check
// (snapshot_row_rule.hpp).
#include "core/snapshot_row_rule.hpp"

#include <string>

#include "sdm/error.hpp"

namespace sdm::core {

void check_layout_rows(std::int64_t rows) {
  if (rows >= 1) return;
  throw RuntimeError("sdm internal error: a saved layout of " + std::to_string(rows) +
                     " snapshot rows (the plan gives at least 1)");
}

void check_write_groups_fit(std::int64_t groups, std::int64_t rows) {
  if (groups <= rows) return;
  throw ValueError("saved", "saved holds " + std::to_string(rows) + " snapshot rows (snapshot_rows) but the call has " +
                                std::to_string(groups) +
                                " write groups; size it with write_groups_count of these indices, or 0 for the "
                                "worst case");
}

}  // namespace sdm::core

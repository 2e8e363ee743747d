// plan_source.hpp - what a plan was made from (sdm/plan.hpp's PlanSource): recorded when a call
// is planned, compared when an entry point is handed the plan instead of planning again.
#pragma once

#include "sdm/ops.hpp"
#include "sdm/plan.hpp"

namespace sdm {

// The arguments' dtypes, devices, sizes and strides and the planning options. `readings` may be
// absent (TensorRef{}).
PlanSource plan_source(const WriteReadArgs& args, const TensorRef& readings, const WriteReadOptions& options);

// Throws sdm::ValueError("plan", ...) naming the first argument or option that differs from what
// `plan` was made from; `readings` == nullptr: readings are not compared (the backward).
void check_plan_source(const WriteReadPlan& plan, const WriteReadArgs& args, const TensorRef* readings,
                       const WriteReadOptions& options);

}  // namespace sdm

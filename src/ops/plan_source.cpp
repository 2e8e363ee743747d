// plan_source.cpp - recording and comparing a plan's source (plan_source.hpp).
#include "plan_source.hpp"

#include <string>

#include "sdm/error.hpp"

namespace sdm {
namespace {

PlannedTensor planned(const TensorRef& t) {
  PlannedTensor p;
  p.defined = t.defined();
  p.dtype = t.dtype, p.device = t.device, p.ndim = t.ndim, p.sizes = t.sizes, p.strides = t.strides;
  return p;
}

bool same(const PlannedTensor& a, const PlannedTensor& b) {
  if (a.defined != b.defined) return false;
  if (!a.defined) return true;
  if (a.dtype != b.dtype || !(a.device == b.device) || a.ndim != b.ndim) return false;
  for (int d = 0; d < a.ndim && d < TensorRef::kMaxDims; ++d) {
    const auto i = static_cast<std::size_t>(d);
    if (a.sizes[i] != b.sizes[i] || a.strides[i] != b.strides[i]) return false;
  }
  return true;
}

std::string dims(const PlannedTensor& t, const std::array<std::int64_t, TensorRef::kMaxDims>& values) {
  std::string out = "[";
  for (int d = 0; d < t.ndim && d < TensorRef::kMaxDims; ++d) {
    out += (d > 0 ? ", " : "") + std::to_string(values[static_cast<std::size_t>(d)]);
  }
  return out + "]";
}

std::string describe(const PlannedTensor& t) {
  if (!t.defined) return "absent";
  return std::string(dtype_name(t.dtype)) + " " + dims(t, t.sizes) + " (strides " + dims(t, t.strides) + ") on " +
         device_name(t.device);
}

[[noreturn]] void refuse(const char* what, const std::string& here, const std::string& planned) {
  throw ValueError("plan", std::string("plan was made for other arguments: ") + what + " is " + here +
                               " here but " + planned +
                               " in the plan; plan this call with plan_write_read on its own arguments");
}

void compare(const char* name, const TensorRef& t, const PlannedTensor& in_plan) {
  const PlannedTensor here = planned(t);
  if (!same(here, in_plan)) refuse(name, describe(here), describe(in_plan));
}

}  // namespace

PlanSource plan_source(const WriteReadArgs& args, const TensorRef& readings, const WriteReadOptions& options) {
  PlanSource s;
  s.memory = planned(args.memory), s.k_idx = planned(args.k_idx), s.k_val = planned(args.k_val);
  s.v = planned(args.v), s.beta = planned(args.beta), s.g = planned(args.g);
  s.q_idx = planned(args.q_idx), s.q_val = planned(args.q_val), s.readings = planned(readings);
  s.slots_per_stream = options.slots_per_stream, s.chunk_size = options.chunk_size;
  s.snapshot_quant = options.snapshot_quant, s.grad_bank_fp32 = options.grad_bank_fp32;
  s.snapshot_rows = options.snapshot_rows;
  return s;
}

void check_plan_source(const WriteReadPlan& plan, const WriteReadArgs& args, const TensorRef* readings,
                       const WriteReadOptions& options) {
  const PlanSource& s = plan.source;
  compare("memory", args.memory, s.memory);
  compare("k_idx", args.k_idx, s.k_idx);
  compare("k_val", args.k_val, s.k_val);
  compare("v", args.v, s.v);
  compare("beta", args.beta, s.beta);
  compare("g", args.g, s.g);
  compare("q_idx", args.q_idx, s.q_idx);
  compare("q_val", args.q_val, s.q_val);
  if (readings != nullptr) compare("readings", *readings, s.readings);
  const auto number = [](std::int64_t v) { return std::to_string(v); };
  if (options.slots_per_stream != s.slots_per_stream) {
    refuse("slots_per_stream", number(options.slots_per_stream), number(s.slots_per_stream));
  }
  if (options.chunk_size != s.chunk_size) refuse("chunk_size", number(options.chunk_size), number(s.chunk_size));
  if (options.snapshot_quant != s.snapshot_quant) {
    refuse("snapshot_quant", snapshot_quant_name(options.snapshot_quant), snapshot_quant_name(s.snapshot_quant));
  }
  if (options.grad_bank_fp32 != s.grad_bank_fp32) {
    refuse("grad_bank_fp32", options.grad_bank_fp32 ? "true" : "false", s.grad_bank_fp32 ? "true" : "false");
  }
  if (options.snapshot_rows != s.snapshot_rows) {
    refuse("snapshot_rows", number(options.snapshot_rows), number(s.snapshot_rows));
  }
}

}  // namespace sdm

// validate_blame.cpp - which tensor a shape error names when k_idx and the other tensors disagree
// on the leading dims or on W (validate_checks.hpp states the rules), and the tensors that share
// k_idx's leading dims.
#include <algorithm>
#include <string>
#include <utility>

#include "core/validate_checks.hpp"
#include "sdm/error.hpp"

namespace sdm::core::validation {

std::optional<Dims> first_two_dims(const TensorRef& t) {
  if (t.ndim < 2 || t.ndim > TensorRef::kMaxDims) return std::nullopt;
  return Dims(t.sizes.begin(), t.sizes.begin() + 2);
}

std::optional<Dims> all_but_last_dim(const TensorRef& t) {
  if (t.ndim < 1 || t.ndim > TensorRef::kMaxDims) return std::nullopt;
  return Dims(t.sizes.begin(), t.sizes.begin() + t.ndim - 1);
}

void check_k_idx_agrees(const TensorRef& k_idx, const NamedTensors& others, LeadDims lead, const char* what,
                        const char* pattern) {
  const std::optional<Dims> mine = lead(k_idx);
  if (!mine) return;
  std::vector<std::pair<Dims, std::vector<const char*>>> groups;  // leading dims -> who has them
  for (const NamedTensor& o : others) {
    if (!o.tensor.defined()) continue;
    const std::optional<Dims> dims = lead(o.tensor);
    if (!dims) continue;
    auto group = std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == *dims; });
    if (group == groups.end()) group = groups.insert(groups.end(), {*dims, {}});
    group->second.push_back(o.name);
  }
  if (groups.empty()) return;
  std::size_t agreeing = 1;  // k_idx itself
  for (const auto& group : groups) {
    if (group.first == *mine) agreeing += group.second.size();
  }
  const auto* majority = &groups.front();
  for (const auto& group : groups) {
    if (group.second.size() > majority->second.size()) majority = &group;
  }
  if (majority->first == *mine || majority->second.size() <= agreeing) return;
  std::string names;
  for (std::size_t i = 0; i < majority->second.size(); ++i) {
    names += (i == 0 ? "" : i + 1 == majority->second.size() ? " and " : ", ") + std::string(majority->second[i]);
  }
  throw ValueError("k_idx", "k_idx has " + std::string(what) + " = " + dims_string(*mine) + " but " + names +
                                " have " + dims_string(majority->first) + ": k_idx must be " + pattern +
                                " with the other tensors' " + what + ", got shape " + k_idx.shape_string());
}

void check_k_idx_width(const TensorRef& k_idx, const TensorRef& k_val, const TensorRef& g, const char* pattern) {
  auto last = [](const TensorRef& t) -> std::optional<std::int64_t> {
    if (!t.defined() || t.ndim < 1 || t.ndim > TensorRef::kMaxDims) return std::nullopt;
    return t.sizes[static_cast<std::size_t>(t.ndim - 1)];
  };
  const std::optional<std::int64_t> W = last(k_idx), k_val_W = last(k_val), g_W = last(g);
  if (!W || !k_val_W || !g_W || *k_val_W == *W || *g_W != *k_val_W || *g_W == 1) return;
  throw ValueError("k_idx", "k_idx has W = " + std::to_string(*W) + " writes per token (its last dim) but k_val and g "
                            "have " + std::to_string(*k_val_W) + ": k_idx must be " + pattern +
                            " with k_val's W, got shape " + k_idx.shape_string());
}

NamedTensors sharing_k_idx_dims(const WriteReadArgs& args, const TensorRef& readings) {
  return {{args.k_val, "k_val"}, {args.v, "v"},         {args.beta, "beta"},       {args.g, "g"},
          {args.q_idx, "q_idx"}, {args.q_val, "q_val"}, {readings, "readings"}};
}

}  // namespace sdm::core::validation

// validate_checks.hpp - the helpers the validate_* functions (validate.cpp) are tables of, inside
// src/core only: one helper per kind of check (validate_checks.cpp) and the choice of the tensor
// to blame when the leading dims disagree (validate_blame.cpp). Each throws sdm::TypeError
// (dtypes) or sdm::ValueError (everything else) naming the argument, what was expected and what
// was given; none reads tensor data.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include "core/validate.hpp"

namespace sdm::core::validation {

using Dims = std::vector<std::int64_t>;

std::string dims_string(const Dims& dims);  // "[2, 5, 3]"
Dims dims_of(const TensorRef& t);

// ---- The dtype sets -------------------------------------------------------------------

using DTypes = std::vector<DType>;

inline const DTypes kIndexDTypes = {DType::i32, DType::i64};
inline const DTypes kAnyFloat = {DType::f32, DType::bf16, DType::f16, DType::f64};
DTypes bank_dtypes(BankDTypes banks);   // bf16, f32 (and f64 for the reference)
DTypes input_dtypes(BankDTypes banks);  // f32, bf16, f16 (and f64 for the reference)

// ---- One helper per kind of check -----------------------------------------------------

void check_present(const TensorRef& t, const char* name);
void check_dtype(const TensorRef& t, const char* name, const DTypes& allowed);
void check_device(const TensorRef& t, const char* name, const Device& bank_device);

// f1 * f2 * ... of non-negative sizes, without wrapping: 0 when a factor is 0, else saturated at
// kMaxElements + 1.
std::int64_t size_product(const std::int64_t* first, const std::int64_t* last);
std::int64_t size_product(std::initializer_list<std::int64_t> factors);

// The tensor's sizes are non-negative and its element count is at most kMaxElements.
void check_element_count(const TensorRef& t, const char* name);
void check_contiguous(const TensorRef& t, const char* name);
void check_ndim(const TensorRef& t, const char* name, int ndim, const char* pattern);

// One accepted shape: its symbolic pattern ("[P, T, W]") and its dims for this call.
struct ShapeRule {
  std::string pattern;
  Dims dims;
};

void check_shape(const TensorRef& t, const char* name, std::initializer_list<ShapeRule> accepted);
void check_in_range(std::int64_t value, const std::string& what, const char* argument, std::int64_t lo,
                    std::int64_t hi);
void check_at_least(std::int64_t value, const std::string& what, const char* argument, std::int64_t lo);

// What every tensor argument is checked for first: present, dtype, on the bank's device.
// Its shape comes next, then contiguity (so that a wrong shape is reported as such).
void check_argument(const TensorRef& t, const char* name, const DTypes& dtypes, const Device& bank_device);

// A tensor whose shape is known in advance: all of the above.
void check_tensor(const TensorRef& t, const char* name, const DTypes& dtypes, const Device& bank_device,
                  std::initializer_list<ShapeRule> accepted);

// ---- Which tensor to blame (validate_blame.cpp) -------------------------------------------

// The leading dims a tensor shares with k_idx: [P, T] (its first two dims) in the chunked op, every
// dim but the last in the decode step; nullopt when it has too few dims (or a malformed ndim).
using LeadDims = std::optional<Dims> (*)(const TensorRef&);
std::optional<Dims> first_two_dims(const TensorRef& t);
std::optional<Dims> all_but_last_dim(const TensorRef& t);

// k_idx fixes the leading dims every other tensor is checked against. When k_idx is the one that
// is wrong (more of the other tensors agree on other leading dims than on k_idx's, counting k_idx
// itself), it is blamed, rather than the first tensor compared with it. A tie keeps k_idx as the
// anchor.
void check_k_idx_agrees(const TensorRef& k_idx, const NamedTensors& others, LeadDims lead, const char* what,
                        const char* pattern);

// k_idx's last dim fixes W for k_val (and for g when g is per write). When k_val and a per-write g
// agree on another W, k_idx is the odd one out and is blamed (k_val alone against k_idx is a tie:
// k_idx stays the anchor).
void check_k_idx_width(const TensorRef& k_idx, const TensorRef& k_val, const TensorRef& g, const char* pattern);

// The tensors that share k_idx's leading dims: every input but the bank, and the readings.
NamedTensors sharing_k_idx_dims(const WriteReadArgs& args, const TensorRef& readings);

}  // namespace sdm::core::validation

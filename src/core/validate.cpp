// validate.cpp - argument checks of the chunked op, its backward and the decode step
// (docs/spec.md §7, §8, §9, §11).
//
// Each kind of check is one small helper that throws with the argument's name, what was
// expected and what was given; the validate_* functions are tables of those helpers, in
// the order: bank, options, index tensors (they fix P, T, W, R), float inputs, outputs.
// Nothing here reads tensor data except the index checks.
#include "validate.hpp"

#include <algorithm>
#include <array>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include "sdm/error.hpp"

namespace sdm::core {
namespace {

using Dims = std::vector<std::int64_t>;

std::string dims_string(const Dims& dims) {
  std::string out = "[";
  for (std::size_t i = 0; i < dims.size(); ++i) out += (i ? ", " : "") + std::to_string(dims[i]);
  return out + "]";
}

Dims dims_of(const TensorRef& t) {
  return Dims(t.sizes.begin(), t.sizes.begin() + t.ndim);
}

std::string strides_string(const TensorRef& t) {
  return dims_string(Dims(t.strides.begin(), t.strides.begin() + t.ndim));
}

// ---- The dtype sets -------------------------------------------------------------------

using DTypes = std::vector<DType>;

const DTypes kIndexDTypes = {DType::i32, DType::i64};

DTypes bank_dtypes(BankDTypes banks) {
  if (banks == BankDTypes::reference) return {DType::bf16, DType::f32, DType::f64};
  return {DType::bf16, DType::f32};
}

DTypes input_dtypes(BankDTypes banks) {
  if (banks == BankDTypes::reference) return {DType::f32, DType::bf16, DType::f16, DType::f64};
  return {DType::f32, DType::bf16, DType::f16};
}

const DTypes kAnyFloat = {DType::f32, DType::bf16, DType::f16, DType::f64};

std::string dtypes_string(const DTypes& dtypes) {
  std::string out;
  for (std::size_t i = 0; i < dtypes.size(); ++i) {
    if (i) out += (i + 1 == dtypes.size()) ? " or " : ", ";
    out += dtype_name(dtypes[i]);
  }
  return out;
}

// ---- One helper per kind of check -----------------------------------------------------

void check_present(const TensorRef& t, const char* name) {
  if (!t.defined()) throw ValueError(name, std::string(name) + " is required, got an absent tensor");
}

void check_dtype(const TensorRef& t, const char* name, const DTypes& allowed) {
  if (std::find(allowed.begin(), allowed.end(), t.dtype) == allowed.end()) {
    throw TypeError(name, std::string(name) + " must be " + dtypes_string(allowed) + ", got " +
                              dtype_name(t.dtype));
  }
}

void check_device(const TensorRef& t, const char* name, const Device& bank_device) {
  if (!(t.device == bank_device)) {
    throw ValueError(name, std::string(name) + " must be on the bank's device " + device_name(bank_device) +
                               " (memory), got " + device_name(t.device));
  }
}

// f1 * f2 * ... of non-negative sizes, without wrapping: 0 when a factor is 0, else saturated at
// kMaxElements + 1.
std::int64_t size_product(const std::int64_t* first, const std::int64_t* last) {
  std::int64_t out = 1;
  bool saturated = false;
  for (; first != last; ++first) {
    if (*first == 0) return 0;
    saturated = saturated || __builtin_mul_overflow(out, *first, &out) || out > kMaxElements;
  }
  return saturated ? kMaxElements + 1 : out;
}

std::int64_t size_product(std::initializer_list<std::int64_t> factors) {
  return size_product(factors.begin(), factors.end());
}

// The tensor's sizes are non-negative and its element count is at most kMaxElements.
void check_element_count(const TensorRef& t, const char* name) {
  const std::int64_t* sizes = t.sizes.data();
  if (std::any_of(sizes, sizes + t.ndim, [](std::int64_t size) { return size < 0; })) {
    throw ValueError(name, std::string(name) + " has a negative size: shape " + t.shape_string());
  }
  if (size_product(sizes, sizes + t.ndim) > kMaxElements) {
    throw ValueError(name, std::string(name) + " of shape " + t.shape_string() + " has more than 2^52 elements, "
                               "beyond what sdm addresses");
  }
}

void check_contiguous(const TensorRef& t, const char* name) {
  if (!t.is_contiguous()) {
    throw ValueError(name, std::string(name) + " must be contiguous, got shape " + t.shape_string() +
                               " with strides " + strides_string(t));
  }
}

void check_ndim(const TensorRef& t, const char* name, int ndim, const char* pattern) {
  if (t.ndim != ndim) {
    throw ValueError(name, std::string(name) + " must be " + std::to_string(ndim) + "-D " + pattern +
                               ", got shape " + t.shape_string());
  }
}

// One accepted shape: its symbolic pattern ("[P, T, W]") and its dims for this call.
struct ShapeRule {
  std::string pattern;
  Dims dims;
};

void check_shape(const TensorRef& t, const char* name, std::initializer_list<ShapeRule> accepted) {
  const Dims got = dims_of(t);
  std::string expected;
  for (const ShapeRule& rule : accepted) {
    if (got == rule.dims) return;
    expected += (expected.empty() ? "" : " or ") + rule.pattern + " = " + dims_string(rule.dims);
  }
  throw ValueError(name, std::string(name) + " must have shape " + expected + ", got " + dims_string(got));
}

void check_in_range(std::int64_t value, const std::string& what, const char* argument, std::int64_t lo,
                    std::int64_t hi) {
  if (value < lo || value > hi) {
    throw ValueError(argument, what + " must be in " + std::to_string(lo) + ".." + std::to_string(hi) +
                                   ", got " + std::to_string(value));
  }
}

void check_at_least(std::int64_t value, const std::string& what, const char* argument, std::int64_t lo) {
  if (value < lo) {
    throw ValueError(argument, what + " must be >= " + std::to_string(lo) + ", got " + std::to_string(value));
  }
}

// What every tensor argument is checked for first: present, dtype, on the bank's device.
// Its shape comes next, then contiguity (so that a wrong shape is reported as such).
void check_argument(const TensorRef& t, const char* name, const DTypes& dtypes, const Device& bank_device) {
  check_present(t, name);
  check_tensor_ref(t, name);
  check_dtype(t, name, dtypes);
  check_device(t, name, bank_device);
  check_element_count(t, name);
}

// A tensor whose shape is known in advance: all of the above.
void check_tensor(const TensorRef& t, const char* name, const DTypes& dtypes, const Device& bank_device,
                  std::initializer_list<ShapeRule> accepted) {
  check_argument(t, name, dtypes, bank_device);
  check_shape(t, name, accepted);
  check_contiguous(t, name);
}

// The leading dims a tensor shares with k_idx: [P, T] (its first two dims) in the chunked op, every
// dim but the last in the decode step; nullopt when it has too few dims (or a malformed ndim).
using LeadDims = std::optional<Dims> (*)(const TensorRef&);

std::optional<Dims> first_two_dims(const TensorRef& t) {
  if (t.ndim < 2 || t.ndim > TensorRef::kMaxDims) return std::nullopt;
  return Dims(t.sizes.begin(), t.sizes.begin() + 2);
}

std::optional<Dims> all_but_last_dim(const TensorRef& t) {
  if (t.ndim < 1 || t.ndim > TensorRef::kMaxDims) return std::nullopt;
  return Dims(t.sizes.begin(), t.sizes.begin() + t.ndim - 1);
}

// k_idx fixes the leading dims every other tensor is checked against. When k_idx is the one that
// is wrong (more of the other tensors agree on other leading dims than on k_idx's, counting k_idx
// itself), it is blamed, rather than the first tensor compared with it. A tie keeps k_idx as the
// anchor.
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

// k_idx's last dim fixes W for k_val (and for g when g is per write). When k_val and a per-write g
// agree on another W, k_idx is the odd one out and is blamed (k_val alone against k_idx is a tie:
// k_idx stays the anchor).
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

// The tensors that share k_idx's leading dims: every input but the bank, and the readings.
NamedTensors sharing_k_idx_dims(const WriteReadArgs& args, const TensorRef& readings) {
  return {{args.k_val, "k_val"}, {args.v, "v"},         {args.beta, "beta"},       {args.g, "g"},
          {args.q_idx, "q_idx"}, {args.q_val, "q_val"}, {readings, "readings"}};
}

// The bank: 2-D [S, hd], S in 1..kMaxBankRows, hd >= 1, contiguous (docs/spec.md §7, §8).
void check_bank(const TensorRef& memory, BankDTypes banks) {
  check_present(memory, "memory");
  check_tensor_ref(memory, "memory");
  check_dtype(memory, "memory", bank_dtypes(banks));
  check_ndim(memory, "memory", 2, "[S, hd]");
  check_in_range(memory.size(0), "memory rows S", "memory", 1, kMaxBankRows);
  check_at_least(memory.size(1), "memory columns hd", "memory", 1);
  check_element_count(memory, "memory");
  check_contiguous(memory, "memory");
}

// S >= streams * slots_per_stream, decided without forming a product that could wrap. A
// slots_per_stream no bank can hold is reported as such, naming slots_per_stream.
void check_bank_holds_streams(std::int64_t S, std::int64_t streams, std::int64_t slots_per_stream) {
  const std::string needed = "streams * slots_per_stream = " + std::to_string(streams) + " * " +
                             std::to_string(slots_per_stream);
  if (slots_per_stream > kMaxBankRows / streams) {
    throw ValueError("slots_per_stream", "slots_per_stream = " + std::to_string(slots_per_stream) + " is too large: " +
                                             needed + " rows exceeds the largest bank (2^31 - 1 rows); memory has " +
                                             std::to_string(S) + " rows");
  }
  if (S < streams * slots_per_stream) {
    throw ValueError("memory", "memory must have at least " + needed + " = " +
                                   std::to_string(streams * slots_per_stream) + " rows, got " + std::to_string(S));
  }
}

// The largest working arrays of a chunked call: [P * Nt * C, max(W, R, C)] entries or chunk
// matrices, each entry up to a bank row of hd elements.
void check_call_size(const WriteReadShape& s) {
  const std::int64_t padded_tokens = size_product({s.P, s.num_time_chunks(), s.C});
  const std::int64_t widest = std::max({s.W, s.R, s.C});
  if (size_product({padded_tokens, widest, s.hd}) > kMaxElements) {
    throw ValueError("k_idx", "the call is too large: P * ceil(T / C) * C * max(W, R, C) * hd = " +
                                  std::to_string(s.P) + " * " + std::to_string(s.num_time_chunks()) + " * " +
                                  std::to_string(s.C) + " * " + std::to_string(widest) + " * " +
                                  std::to_string(s.hd) + " elements exceeds 2^52 (k_idx [P, T, W], q_idx [P, T, R], "
                                  "memory [S, hd], chunk_size)");
  }
}

// The bytes [begin, end) a tensor's elements span; empty when it is absent or has no elements.
struct ByteSpan {
  std::uintptr_t begin = 0, end = 0;
  bool empty() const { return begin == end; }
};

ByteSpan byte_span(const TensorRef& t) {
  if (t.data == nullptr || t.numel() == 0) return {};
  std::int64_t lowest = 0, highest = 0;  // element offsets of the first and last element
  for (int d = 0; d < t.ndim; ++d) {
    const std::int64_t reach = (t.sizes[static_cast<std::size_t>(d)] - 1) * t.strides[static_cast<std::size_t>(d)];
    (reach < 0 ? lowest : highest) += reach;
  }
  const auto element = static_cast<std::int64_t>(dtype_size(t.dtype));
  const auto base = reinterpret_cast<std::uintptr_t>(t.data);
  return {base + static_cast<std::uintptr_t>(lowest * element), base + static_cast<std::uintptr_t>((highest + 1) * element)};
}

void check_snapshot_quant(SnapshotQuant mode) {
  switch (mode) {
    case SnapshotQuant::none:
    case SnapshotQuant::bf16:
    case SnapshotQuant::fp8:
    case SnapshotQuant::int4: return;
  }
  throw ValueError("snapshot_quant", "snapshot_quant must be none, bf16, fp8 or int4, got the enum value " +
                                         std::to_string(static_cast<int>(mode)));
}

// ---- Index checks ---------------------------------------------------------------------

// The rows a stream's indices may address: [lo, hi).
struct RowRange {
  std::int64_t lo, hi;
  std::string owner;  // "stream 3's" or "the bank's"
};

RowRange stream_rows(std::int64_t stream, std::int64_t slots_per_stream) {
  return {stream * slots_per_stream, (stream + 1) * slots_per_stream,
          "stream " + std::to_string(stream) + "'s"};
}

// Where an index lives: "k_idx[stream 1, token 4, lane 2]" (no token for the decode step).
struct EntryPlace {
  const char* tensor;
  std::int64_t stream;
  std::optional<std::int64_t> token;
  std::string name(std::int64_t lane) const {
    std::string out = std::string(tensor) + "[stream " + std::to_string(stream);
    if (token) out += ", token " + std::to_string(*token);
    return out + ", lane " + std::to_string(lane) + "]";
  }
};

// Whether two of the `width` (<= kMaxWidth) indices are equal; `empty` is a value none of
// them has. An open-addressing set (linear probing) of at least 2 * width slots: one pass
// instead of a sort per token (the whole index check is serial and ran at ~15 % of a small
// no-grad forward with the sort). Only speeds the answer up: yes or no, as before.
template <typename Index>
bool has_repeat(const Index* idx, std::int64_t width, std::int64_t empty) {
  std::array<std::int64_t, 2 * kMaxWidth> table;
  std::size_t size = 8;
  while (size < 2 * static_cast<std::size_t>(width)) size *= 2;
  const std::size_t mask = size - 1;
  std::fill(table.begin(), table.begin() + static_cast<std::ptrdiff_t>(size), empty);
  for (std::int64_t lane = 0; lane < width; ++lane) {
    const std::int64_t value = idx[lane];
    std::size_t slot = static_cast<std::size_t>((static_cast<std::uint64_t>(value) * 0x9e3779b97f4a7c15ull) >> 40) & mask;
    while (table[slot] != empty) {
      if (table[slot] == value) return true;
      slot = (slot + 1) & mask;
    }
    table[slot] = value;
  }
  return false;
}

// Checks the `width` indices of one token: each in `rows`, and (for write slots) distinct.
template <typename Index>
void check_token_indices(const Index* idx, std::int64_t width, const RowRange& rows, bool distinct,
                         const EntryPlace& place) {
  for (std::int64_t lane = 0; lane < width; ++lane) {
    const std::int64_t value = idx[lane];
    if (value < rows.lo || value >= rows.hi) {
      throw ValueError(place.tensor, place.name(lane) + " = " + std::to_string(value) + " is outside " +
                                         rows.owner + " rows [" + std::to_string(rows.lo) + ", " +
                                         std::to_string(rows.hi) + ")");
    }
  }
  if (!distinct || width < 2 || !has_repeat(idx, width, rows.lo - 1)) return;
  // A repeat exists: report the first lane that repeats an earlier lane.
  for (std::int64_t lane = 1; lane < width; ++lane) {
    for (std::int64_t earlier = 0; earlier < lane; ++earlier) {
      if (idx[earlier] != idx[lane]) continue;
      throw ValueError(place.tensor, place.name(lane) + " = " + std::to_string(idx[lane]) +
                                         " repeats lane " + std::to_string(earlier) +
                                         "; the write slots of a token must be distinct");
    }
  }
}

// Checks the `width` indices of `t` (int32 or int64) that start at element `offset`.
void check_token(const TensorRef& t, std::int64_t offset, std::int64_t width, const RowRange& rows,
                 bool distinct, const EntryPlace& place) {
  if (t.dtype == DType::i32) {
    check_token_indices(t.data_as<const std::int32_t>() + offset, width, rows, distinct, place);
  } else {
    check_token_indices(t.data_as<const std::int64_t>() + offset, width, rows, distinct, place);
  }
}

}  // namespace

void check_tensor_ref(const TensorRef& t, const char* name) {
  if (t.ndim < 0 || t.ndim > TensorRef::kMaxDims) {
    throw ValueError(name, std::string(name) + " has ndim = " + std::to_string(t.ndim) + "; a TensorRef holds 0 to " +
                               std::to_string(TensorRef::kMaxDims) + " dimensions");
  }
  const std::int64_t* sizes = t.sizes.data();
  if (std::any_of(sizes, sizes + t.ndim, [](std::int64_t size) { return size < 0; })) {
    throw ValueError(name, std::string(name) + " has a negative size: shape " + t.shape_string());
  }
  const std::int64_t* strides = t.strides.data();
  if (std::any_of(strides, strides + t.ndim, [](std::int64_t stride) { return stride < 0; })) {
    throw ValueError(name, std::string(name) + " has a negative stride: shape " + t.shape_string() + " with strides " +
                               strides_string(t));
  }
}

void check_engine_data(const NamedTensors& required, const NamedTensors& optional) {
  auto check = [](const NamedTensor& t) {
    check_tensor_ref(t.tensor, t.name);
    if (t.tensor.data == nullptr && size_product(t.tensor.sizes.data(), t.tensor.sizes.data() + t.tensor.ndim) > 0) {
      throw ValueError(t.name, std::string(t.name) + " has no data (data == nullptr) but its shape " +
                                   t.tensor.shape_string() + " has elements; the op reads and writes tensor data (only "
                                   "the shape-only checks and plans take data-less views)");
    }
  };
  for (const NamedTensor& t : required) {
    check_present(t.tensor, t.name);
    check(t);
  }
  for (const NamedTensor& t : optional) {
    if (t.tensor.defined()) check(t);
  }
}

WriteReadShape validate_write_read(const WriteReadArgs& args, const TensorRef& readings,
                                   const WriteReadOptions& options, BankDTypes banks) {
  check_bank(args.memory, banks);
  WriteReadShape s;
  s.bank = args.memory.dtype;
  s.S = args.memory.size(0);
  s.hd = args.memory.size(1);
  const Device& device = args.memory.device;

  check_at_least(options.slots_per_stream, "slots_per_stream", "slots_per_stream", 1);
  check_in_range(options.chunk_size, "chunk_size", "chunk_size", 1, kMaxChunk);
  check_at_least(options.num_threads, "num_threads", "num_threads", 0);
  check_snapshot_quant(options.snapshot_quant);
  s.slots_per_stream = options.slots_per_stream;

  check_argument(args.k_idx, "k_idx", kIndexDTypes, device);
  check_ndim(args.k_idx, "k_idx", 3, "[P, T, W]");
  s.P = args.k_idx.size(0);
  s.T = args.k_idx.size(1);
  s.W = args.k_idx.size(2);
  check_at_least(s.P, "streams P (k_idx.shape[0])", "k_idx", 1);
  check_at_least(s.T, "tokens T (k_idx.shape[1])", "k_idx", 1);
  check_in_range(s.W, "writes per token W (k_idx.shape[2])", "k_idx", 1, kMaxWidth);
  check_k_idx_agrees(args.k_idx, sharing_k_idx_dims(args, readings), first_two_dims, "[P, T]", "[P, T, W]");
  check_k_idx_width(args.k_idx, args.k_val, args.g, "[P, T, W]");
  check_contiguous(args.k_idx, "k_idx");

  check_argument(args.q_idx, "q_idx", kIndexDTypes, device);
  check_ndim(args.q_idx, "q_idx", 3, "[P, T, R]");
  s.R = args.q_idx.size(2);
  check_shape(args.q_idx, "q_idx", {{"[P, T, R]", {s.P, s.T, s.R}}});
  check_in_range(s.R, "reads per token R (q_idx.shape[2])", "q_idx", 1, kMaxWidth);
  check_contiguous(args.q_idx, "q_idx");

  const DTypes inputs = input_dtypes(banks);
  check_tensor(args.k_val, "k_val", inputs, device, {{"[P, T, W]", {s.P, s.T, s.W}}});
  check_tensor(args.v, "v", inputs, device, {{"[P, T, hd]", {s.P, s.T, s.hd}}});
  check_tensor(args.beta, "beta", inputs, device, {{"[P, T]", {s.P, s.T}}, {"[P, T, 1]", {s.P, s.T, 1}}});
  check_tensor(args.g, "g", inputs, device, {{"[P, T, 1]", {s.P, s.T, 1}}, {"[P, T, W]", {s.P, s.T, s.W}}});
  s.G = args.g.size(2);
  check_tensor(args.q_val, "q_val", inputs, device, {{"[P, T, R]", {s.P, s.T, s.R}}});
  if (readings.defined()) {
    check_tensor(readings, "readings", banks == BankDTypes::engine ? DTypes{s.bank} : kAnyFloat, device,
                 {{"[P, T, hd]", {s.P, s.T, s.hd}}});
  }

  check_bank_holds_streams(s.S, s.P, s.slots_per_stream);
  s.C = std::min(options.chunk_size, s.T);
  check_call_size(s);
  check_disjoint({{args.memory, "memory"}, {readings, "readings"}}, named_args(args));
  return s;
}

void check_write_read_indices_of_stream(const WriteReadArgs& args, const WriteReadShape& shape, std::int64_t p) {
  const RowRange rows = stream_rows(p, shape.slots_per_stream);
  for (std::int64_t t = 0; t < shape.T; ++t) {
    const std::int64_t token = p * shape.T + t;
    check_token(args.k_idx, token * shape.W, shape.W, rows, true, {"k_idx", p, t});
    check_token(args.q_idx, token * shape.R, shape.R, rows, false, {"q_idx", p, t});
  }
}

void check_write_read_indices(const WriteReadArgs& args, const WriteReadShape& shape) {
  for (std::int64_t p = 0; p < shape.P; ++p) check_write_read_indices_of_stream(args, shape, p);
}

void validate_write_read_backward(const WriteReadArgs& args, const WriteReadShape& shape,
                                  const TensorRef& grad_readings, const TensorRef& grad_final_bank,
                                  const WriteReadGrads& grads) {
  const Device& device = args.memory.device;
  check_tensor(grad_readings, "grad_readings", kAnyFloat, device, {{"[P, T, hd]", {shape.P, shape.T, shape.hd}}});
  if (grad_final_bank.defined()) {
    check_tensor(grad_final_bank, "grad_final_bank", kAnyFloat, device, {{"[S, hd]", {shape.S, shape.hd}}});
  }
  // Each gradient output, when requested, is shaped like its input.
  const struct {
    const TensorRef& grad;
    const char* name;
    const TensorRef& input;
    const char* input_name;
  } outputs[] = {
      {grads.memory, "grad_memory", args.memory, "memory"}, {grads.k_val, "grad_k_val", args.k_val, "k_val"},
      {grads.v, "grad_v", args.v, "v"},                     {grads.beta, "grad_beta", args.beta, "beta"},
      {grads.g, "grad_g", args.g, "g"},                     {grads.q_val, "grad_q_val", args.q_val, "q_val"},
  };
  for (const auto& out : outputs) {
    if (!out.grad.defined()) continue;
    check_tensor(out.grad, out.name, kAnyFloat, device,
                 {{std::string("the shape of ") + out.input_name, dims_of(out.input)}});
  }
  // Written: the working bank (restored in place) and every gradient; against every argument.
  NamedTensors written = {{args.memory, "memory"}};
  for (const NamedTensor& grad : named_grads(grads)) written.push_back(grad);
  NamedTensors others = named_args(args);
  others.push_back({grad_readings, "grad_readings"});
  others.push_back({grad_final_bank, "grad_final_bank"});
  for (const NamedTensor& grad : named_grads(grads)) others.push_back(grad);
  check_disjoint(written, others);
}

DecodeShape validate_decode(const WriteReadArgs& args, const TensorRef& readings,
                            const DecodeOptions& options, BankDTypes banks) {
  check_bank(args.memory, banks);
  DecodeShape s;
  s.bank = args.memory.dtype;
  s.S = args.memory.size(0);
  s.hd = args.memory.size(1);
  const Device& device = args.memory.device;
  check_at_least(options.slots_per_stream, "slots_per_stream", "slots_per_stream", 0);

  // k_idx [..., W]: its leading dims are the streams, shared by every other tensor.
  check_argument(args.k_idx, "k_idx", kIndexDTypes, device);
  check_at_least(args.k_idx.ndim, "k_idx dimensions", "k_idx", 1);
  const Dims lead(args.k_idx.sizes.begin(), args.k_idx.sizes.begin() + args.k_idx.ndim - 1);
  s.streams = 1;
  for (std::int64_t d : lead) {
    check_at_least(d, "each leading (stream) dim of k_idx", "k_idx", 1);
    s.streams *= d;  // k_idx's element count (checked above) bounds the product
  }
  s.W = args.k_idx.size(-1);
  check_in_range(s.W, "writes per token W (k_idx.shape[-1])", "k_idx", 1, kMaxWidth);
  check_k_idx_agrees(args.k_idx, sharing_k_idx_dims(args, readings), all_but_last_dim, "leading (stream) dims",
                     "[..., W]");
  check_k_idx_width(args.k_idx, args.k_val, args.g, "[..., W]");
  check_contiguous(args.k_idx, "k_idx");
  auto with_last = [&lead](std::int64_t last) {
    Dims dims = lead;
    dims.push_back(last);
    return dims;
  };

  check_argument(args.q_idx, "q_idx", kIndexDTypes, device);
  check_ndim(args.q_idx, "q_idx", args.k_idx.ndim, "[..., R] with k_idx's leading dims");
  s.R = args.q_idx.size(-1);
  check_shape(args.q_idx, "q_idx", {{"[..., R]", with_last(s.R)}});
  check_in_range(s.R, "reads per token R (q_idx.shape[-1])", "q_idx", 1, kMaxWidth);
  check_contiguous(args.q_idx, "q_idx");

  const DTypes inputs = input_dtypes(banks);
  check_tensor(args.k_val, "k_val", inputs, device, {{"[..., W]", with_last(s.W)}});
  check_tensor(args.v, "v", inputs, device, {{"[..., hd]", with_last(s.hd)}});
  check_tensor(args.beta, "beta", inputs, device, {{"[..., 1]", with_last(1)}});
  check_tensor(args.g, "g", inputs, device, {{"[..., 1]", with_last(1)}, {"[..., W]", with_last(s.W)}});
  s.G = args.g.size(-1);
  check_tensor(args.q_val, "q_val", inputs, device, {{"[..., R]", with_last(s.R)}});
  if (readings.defined()) {
    check_tensor(readings, "readings", banks == BankDTypes::engine ? DTypes{s.bank} : kAnyFloat, device,
                 {{"[..., hd]", with_last(s.hd)}});
  }
  if (options.slots_per_stream >= 1) check_bank_holds_streams(s.S, s.streams, options.slots_per_stream);
  if (size_product({s.streams, std::max(s.W, s.R), s.hd}) > kMaxElements) {
    throw ValueError("k_idx", "the call is too large: streams * max(W, R) * hd = " + std::to_string(s.streams) +
                                  " * " + std::to_string(std::max(s.W, s.R)) + " * " + std::to_string(s.hd) +
                                  " elements exceeds 2^52 (k_idx [..., W], q_idx [..., R], memory [S, hd])");
  }
  check_disjoint({{args.memory, "memory"}, {readings, "readings"}}, named_args(args));
  return s;
}

void check_decode_indices(const WriteReadArgs& args, const DecodeShape& shape, const DecodeOptions& options) {
  for (std::int64_t p = 0; p < shape.streams; ++p) {
    const RowRange rows = options.slots_per_stream >= 1 ? stream_rows(p, options.slots_per_stream)
                                                        : RowRange{0, shape.S, "the bank's"};
    check_token(args.k_idx, p * shape.W, shape.W, rows, true, {"k_idx", p, std::nullopt});
    check_token(args.q_idx, p * shape.R, shape.R, rows, false, {"q_idx", p, std::nullopt});
  }
}

NamedTensors named_args(const WriteReadArgs& args) {
  return {{args.k_idx, "k_idx"}, {args.k_val, "k_val"}, {args.v, "v"},         {args.beta, "beta"},
          {args.g, "g"},         {args.q_idx, "q_idx"}, {args.q_val, "q_val"}, {args.memory, "memory"}};
}

NamedTensors named_grads(const WriteReadGrads& grads) {
  return {{grads.memory, "grad_memory"}, {grads.k_val, "grad_k_val"}, {grads.v, "grad_v"},
          {grads.beta, "grad_beta"},     {grads.g, "grad_g"},         {grads.q_val, "grad_q_val"}};
}

void check_disjoint(const NamedTensors& written, const NamedTensors& others) {
  for (const NamedTensor& w : written) {
    const ByteSpan ws = byte_span(w.tensor);
    if (ws.empty()) continue;
    for (const NamedTensor& o : others) {
      if (&o.tensor == &w.tensor) continue;
      const ByteSpan os = byte_span(o.tensor);
      if (os.empty() || os.begin >= ws.end || ws.begin >= os.end) continue;
      const std::string what = std::string(w.name) == "memory" ? "memory (the bank)" : std::string(w.name);
      throw ValueError(o.name, std::string(o.name) + " shares memory with " + what + ", which the call writes; pass " +
                                   "a tensor with its own storage (e.g. " + o.name + ".clone())");
    }
  }
}

}  // namespace sdm::core

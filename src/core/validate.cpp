// validate.cpp - argument checks of the chunked op, its backward and the decode step
// (docs/spec.md §7, §8, §9, §11).
//
// The validate_* functions are tables of the helpers of validate_checks.hpp (one per kind of
// check, each throwing with the argument's name, what was expected and what was given), in the
// order: bank, options, index tensors (they fix P, T, W, R), float inputs, outputs. Nothing here
// reads tensor data; the index checks are validate_indices.cpp, the overlap check
// validate_overlap.cpp.
#include "validate.hpp"

#include <algorithm>
#include <string>

#include "core/validate_checks.hpp"
#include "sdm/error.hpp"

namespace sdm::core {

using namespace validation;

namespace {

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

}  // namespace

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

}  // namespace sdm::core

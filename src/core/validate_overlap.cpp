// validate_overlap.cpp - the overlap check (check_disjoint: a tensor the call writes shares no
// byte with another argument, compared by the byte ranges they span) and the op's tensors by name.
#include <cstdint>
#include <string>

#include "core/validate.hpp"
#include "sdm/error.hpp"

namespace sdm::core {
namespace {

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

}  // namespace

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

// index_check.cu - device index check (see index_check.hpp).
//
// Kernel: one thread per token (P*T threads). Each thread finds its token's first violation,
// encoded as ((token * 3 + kind) << 8) | lane with kind 0 = k_idx out of range, 1 = k_idx
// repeats an earlier lane, 2 = q_idx out of range, and folds it into one device word with an
// integer atomicMin (order independent, so the result is deterministic). The host copies the
// word back (the one sync) and, only on a violation, the offending token's indices to build the
// message.
#include "cuda/common/index_check.hpp"

#include <string>
#include <vector>

#include "cuda/common/cuda_check.hpp"
#include "cuda/common/values.cuh"

namespace sdm::cuda {
namespace {

constexpr unsigned long long kNoViolation = ~0ull;

struct RowBounds {
  std::int64_t lo, hi;
};

__host__ __device__ RowBounds rows_of(const IndexCheck& c, std::int64_t stream) {
  if (c.slots_per_stream >= 1) return {stream * c.slots_per_stream, (stream + 1) * c.slots_per_stream};
  return {0, c.bank_rows};
}

__global__ void find_first_violation(Inputs in, IndexCheck c, unsigned long long* first) {
  const std::int64_t token = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (token >= c.streams * c.tokens_per_stream) return;
  const RowBounds rows = rows_of(c, token / c.tokens_per_stream);
  const auto code = [token](int kind, std::int64_t lane) {
    return ((static_cast<unsigned long long>(token) * 3 + kind) << 8) | static_cast<unsigned long long>(lane);
  };
  unsigned long long found = kNoViolation;
  for (std::int64_t w = 0; w < c.W && found == kNoViolation; ++w) {
    const std::int64_t idx = load_index(in.k_idx, in.k_index64, token * c.W + w);
    if (idx < rows.lo || idx >= rows.hi) found = code(0, w);
  }
  for (std::int64_t w = 1; w < c.W && found == kNoViolation; ++w) {
    const std::int64_t idx = load_index(in.k_idx, in.k_index64, token * c.W + w);
    for (std::int64_t e = 0; e < w; ++e) {
      if (load_index(in.k_idx, in.k_index64, token * c.W + e) == idx) {
        found = code(1, w);
        break;
      }
    }
  }
  for (std::int64_t r = 0; r < c.R && found == kNoViolation; ++r) {
    const std::int64_t idx = load_index(in.q_idx, in.q_index64, token * c.R + r);
    if (idx < rows.lo || idx >= rows.hi) found = code(2, r);
  }
  if (found != kNoViolation) atomicMin(first, found);
}

std::vector<std::int64_t> copy_token_indices(const void* data, bool index64, std::int64_t offset,
                                             std::int64_t count) {
  std::vector<std::int64_t> out(static_cast<std::size_t>(count));
  if (index64) {
    check_cuda(cudaMemcpy(out.data(), static_cast<const std::int64_t*>(data) + offset,
                          static_cast<std::size_t>(count) * sizeof(std::int64_t), cudaMemcpyDeviceToHost),
               "cudaMemcpy (index check)");
  } else {
    std::vector<std::int32_t> narrow(static_cast<std::size_t>(count));
    check_cuda(cudaMemcpy(narrow.data(), static_cast<const std::int32_t*>(data) + offset,
                          static_cast<std::size_t>(count) * sizeof(std::int32_t), cudaMemcpyDeviceToHost),
               "cudaMemcpy (index check)");
    for (std::size_t i = 0; i < narrow.size(); ++i) out[i] = narrow[i];
  }
  return out;
}

[[noreturn]] void throw_violation(const Inputs& in, const IndexCheck& c, unsigned long long code) {
  const std::int64_t lane = static_cast<std::int64_t>(code & 0xffu);
  const int kind = static_cast<int>((code >> 8) % 3);
  const std::int64_t token = static_cast<std::int64_t>((code >> 8) / 3);
  const std::int64_t stream = token / c.tokens_per_stream;
  const bool writes = kind < 2;
  const char* tensor = writes ? "k_idx" : "q_idx";
  const std::int64_t width = writes ? c.W : c.R;
  const std::vector<std::int64_t> idx =
      copy_token_indices(writes ? in.k_idx : in.q_idx, writes ? in.k_index64 : in.q_index64, token * width, width);

  std::string place = std::string(tensor) + "[stream " + std::to_string(stream);
  if (c.name_token) place += ", token " + std::to_string(token % c.tokens_per_stream);
  place += ", lane " + std::to_string(lane) + "]";
  const std::string value = std::to_string(idx[static_cast<std::size_t>(lane)]);
  if (kind == 1) {
    std::int64_t earlier = 0;
    while (idx[static_cast<std::size_t>(earlier)] != idx[static_cast<std::size_t>(lane)]) ++earlier;
    throw ValueError(tensor, place + " = " + value + " repeats lane " + std::to_string(earlier) +
                                 "; the write slots of a token must be distinct");
  }
  const RowBounds rows = rows_of(c, stream);
  const std::string owner = c.slots_per_stream >= 1 ? "stream " + std::to_string(stream) + "'s" : "the bank's";
  throw ValueError(tensor, place + " = " + value + " is outside " + owner + " rows [" + std::to_string(rows.lo) +
                               ", " + std::to_string(rows.hi) + ")");
}

}  // namespace

void check_indices_on_device(const Inputs& in, const IndexCheck& check, unsigned long long* scratch,
                             cudaStream_t stream, const std::int64_t* also, std::int64_t* also_host) {
  const std::int64_t tokens = check.streams * check.tokens_per_stream;
  check_cuda(cudaMemsetAsync(scratch, 0xff, sizeof(unsigned long long), stream), "cudaMemsetAsync (index check)");
  constexpr int kThreads = 128;
  find_first_violation<<<static_cast<unsigned>((tokens + kThreads - 1) / kThreads), kThreads, 0, stream>>>(
      in, check, scratch);
  check_launch("find_first_violation");
  unsigned long long first = kNoViolation;
  check_cuda(cudaMemcpyAsync(&first, scratch, sizeof first, cudaMemcpyDeviceToHost, stream),
             "cudaMemcpyAsync (index check)");
  if (also != nullptr) {
    check_cuda(cudaMemcpyAsync(also_host, also, sizeof *also_host, cudaMemcpyDeviceToHost, stream),
               "cudaMemcpyAsync (index check)");
  }
  check_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize (index check)");
  if (first != kNoViolation) throw_violation(in, check, first);
}

}  // namespace sdm::cuda

// stamp.cu - the CUDA side of the saved buffer's stamp (core/saved_header.hpp):
// cuda::stamp_saved and cuda::check_saved_stamp (engine.hpp).
//
// stamp_saved: one kernel writes the host-built header (its 32 words, index_hash 0) to the start
// of `saved`, then hash_indices adds the index hash into its index_hash word. Two launches, no
// sync: it runs inside a captured graph as well.
// check_saved_stamp (validate=True, not capturing): hash_indices into a workspace word, the header,
// the word and the forward's write-group total (group_first[N]) copied back, one host sync, the
// comparisons on the host (the header's messages, then core::check_write_groups_fit's).
// hash_indices: a grid-stride loop, one index_hash_term per index, summed per thread, then per
// warp by shuffles, then one integer atomicAdd per warp: a sum mod 2^64, so the value does not
// depend on the order (deterministic; no float atomics).
#include <algorithm>
#include <cstdint>

#include "cuda/common/geometry.hpp"
#include "core/saved_header.hpp"
#include "core/snapshot_row_rule.hpp"
#include "cuda/engine.hpp"
#include "cuda/common/cuda_check.hpp"
#include "cuda/common/values.cuh"
#include "cuda/common/workspace.hpp"

namespace sdm::cuda {
namespace {

constexpr int kHeaderWords = static_cast<int>(core::kSavedHeaderBytes / sizeof(std::uint64_t));

struct HeaderWords {
  std::uint64_t word[kHeaderWords];
};

__global__ void write_header(HeaderWords header, std::uint64_t* dst) {
  if (threadIdx.x < kHeaderWords) dst[threadIdx.x] = header.word[threadIdx.x];
}

__global__ void hash_indices(Inputs in, std::int64_t k_count, std::int64_t q_count, unsigned long long* sum) {
  unsigned long long partial = 0;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < k_count + q_count;
       i += stride) {
    const bool write = i < k_count;
    const std::int64_t at = write ? i : i - k_count;
    const std::int64_t value = write ? load_index(in.k_idx, in.k_index64, at) : load_index(in.q_idx, in.q_index64, at);
    partial += core::index_hash_term(write ? 0 : 1, static_cast<std::uint64_t>(at), value);
  }
  for (int offset = 16; offset > 0; offset /= 2) partial += __shfl_down_sync(0xffffffffu, partial, offset);
  if ((threadIdx.x & 31) == 0) atomicAdd(sum, partial);
}

void launch_hash(const WriteReadArgs& args, unsigned long long* sum, cudaStream_t stream) {
  const std::int64_t k_count = args.k_idx.numel(), q_count = args.q_idx.numel();
  constexpr int kThreads = 256;
  const auto blocks = static_cast<unsigned>(std::min<std::int64_t>((k_count + q_count + kThreads - 1) / kThreads, 1024));
  hash_indices<<<blocks, kThreads, 0, stream>>>(make_inputs(args), k_count, q_count, sum);
  check_launch("hash_indices");
}

}  // namespace

void stamp_saved(const core::SavedHeader& header, const WriteReadArgs& args, const TensorRef& saved,
                 const WriteReadOptions& options) {
  const DeviceGuard guard(args.memory.device.index);
  const cudaStream_t stream = stream_of(options.cuda_stream);
  HeaderWords words;
  core::SavedHeader unhashed = header;
  unhashed.index_hash = 0;
  static_assert(sizeof words == sizeof unhashed);
  __builtin_memcpy(&words, &unhashed, sizeof words);
  auto* dst = static_cast<std::uint64_t*>(saved.data);
  write_header<<<1, kHeaderWords, 0, stream>>>(words, dst);
  check_launch("write_header");
  launch_hash(args, reinterpret_cast<unsigned long long*>(&reinterpret_cast<core::SavedHeader*>(dst)->index_hash),
              stream);
}

void check_saved_stamp(const core::SavedHeader& expected, const WriteReadArgs& args, const TensorRef& saved,
                       std::size_t write_groups_at, std::int64_t snapshot_rows, const WriteReadOptions& options) {
  const DeviceGuard guard(args.memory.device.index);
  const cudaStream_t stream = stream_of(options.cuda_stream);
  if (is_capturing(stream)) return;  // no syncs inside a capture (docs/spec.md §8)
  Workspace ws(stream);
  unsigned long long* sum = nullptr;
  ws.plan(&sum, 1);
  ws.allocate();
  check_cuda(cudaMemsetAsync(sum, 0, sizeof *sum, stream), "cudaMemsetAsync (saved stamp)");
  launch_hash(args, sum, stream);
  core::SavedHeader found;
  unsigned long long index_hash = 0;
  check_cuda(cudaMemcpyAsync(&found, saved.data, sizeof found, cudaMemcpyDeviceToHost, stream),
             "cudaMemcpyAsync (saved stamp)");
  check_cuda(cudaMemcpyAsync(&index_hash, sum, sizeof index_hash, cudaMemcpyDeviceToHost, stream),
             "cudaMemcpyAsync (saved stamp)");
  std::int64_t write_groups = 0;
  check_cuda(cudaMemcpyAsync(&write_groups, static_cast<const unsigned char*>(saved.data) + write_groups_at,
                             sizeof write_groups, cudaMemcpyDeviceToHost, stream),
             "cudaMemcpyAsync (saved write groups)");
  check_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize (saved stamp)");
  core::check_saved_header(expected, found, index_hash);
  core::check_write_groups_fit(write_groups, snapshot_rows);
}

}  // namespace sdm::cuda

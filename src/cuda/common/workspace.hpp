// workspace.hpp - the scratch memory of one call: one stream-ordered allocation
// (cudaMallocAsync) carved into 256-byte aligned pieces, freed on the same stream
// (cudaFreeAsync) when the Workspace goes out of scope, also on an exception.
//
// Known gap: the launchers allocate this themselves instead of taking a caller-provided
// workspace; the stream-ordered pool keeps it cheap and graph-capturable.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "cuda/common/alignment.hpp"
#include "cuda/common/cuda_check.hpp"

namespace sdm::cuda {

class Workspace {
 public:
  explicit Workspace(cudaStream_t stream) : stream_(stream) {}
  ~Workspace() {
    if (base_ != nullptr) cudaFreeAsync(base_, stream_);
  }
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;

  // Plans a piece of `count` elements; `*slot` receives its address at allocate().
  template <typename T>
  void plan(T** slot, std::int64_t count) {
    pieces_.push_back({reinterpret_cast<void**>(slot), bytes_});
    bytes_ += align256(static_cast<std::size_t>(count) * sizeof(T));
  }
  void plan_bytes(void** slot, std::size_t bytes) {
    pieces_.push_back({slot, bytes_});
    bytes_ += align256(bytes);
  }

  void allocate() {
    if (bytes_ == 0) return;
    check_cuda(cudaMallocAsync(&base_, bytes_, stream_), "cudaMallocAsync (workspace)");
    for (const Piece& piece : pieces_) *piece.slot = static_cast<unsigned char*>(base_) + piece.offset;
  }

  std::size_t bytes() const { return bytes_; }

 private:
  struct Piece {
    void** slot;
    std::size_t offset;
  };

  cudaStream_t stream_;
  void* base_ = nullptr;
  std::size_t bytes_ = 0;
  std::vector<Piece> pieces_;
};

}  // namespace sdm::cuda

// row_entries.cuh - one row's selected entries (slot ids and gradients) loaded into a warp's
// registers, for the product-key top-k backward (register_backward.cu), in the layout of the row
// path that takes them.
//
// Layouts of the kk <= 32 M entries, M a lane:
//   by lane  (load_by_lane):  entry e = lane * M + r in slot r (register_scatter.cuh's sort)
//   by batch (load_by_batch): entry e = 32 r + lane in slot r (column_sums.cuh's batches)
// Entries past kk hold id -1 (outside every product: they contribute nothing) and gradient 0.
#pragma once

#include <cstdint>

#include "cuda/topk/score_types.cuh"

namespace sdm::cuda::topk {

template <int M>
struct RowEntries {
  std::int64_t id[M];
  float grad[M];  // the gradient as f32 (exact)
};

template <typename S, int M>
__device__ __forceinline__ void load_by_lane(const std::int64_t* ids, const typename S::Storage* grad_values, int selected,
                                             int lane, RowEntries<M>& x) {
#pragma unroll
  for (int r = 0; r < M; ++r) {
    const int e = lane * M + r;
    x.id[r] = e < selected ? ids[e] : -1;
    x.grad[r] = e < selected ? S::load(grad_values[e]) : 0.0f;
  }
}

template <typename S, int M>
__device__ __forceinline__ void load_by_batch(const std::int64_t* ids, const typename S::Storage* grad_values, int selected,
                                              int lane, RowEntries<M>& x) {
#pragma unroll
  for (int r = 0; r < M; ++r) {
    const int e = 32 * r + lane;
    x.id[r] = e < selected ? ids[e] : -1;
    x.grad[r] = e < selected ? S::load(grad_values[e]) : 0.0f;
  }
}

}  // namespace sdm::cuda::topk

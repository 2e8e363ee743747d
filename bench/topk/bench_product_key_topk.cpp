// bench_product_key_topk.cpp - times the CUDA product-key top-k (forward, backward) on the shapes
// of docs/performance.md ("Product-key top-k"): two or three factors of `side` columns, k, rows,
// bf16 and f32 random scores. (Side by side with 2.0.0: compare_2_0_0.py.) Median of --reps timed calls (CUDA events) after 3 warm-up calls; prints a
// markdown table.  Usage: sdm_gpu_topk_bench [--reps N]
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <vector>

#include "cuda/topk/product_key_topk.hpp"
#include "topk_case.hpp"

namespace {

float median_ms(const std::function<void()>& call, int reps) {
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  for (int i = 0; i < 3; ++i) call();
  std::vector<float> times;
  for (int i = 0; i < reps; ++i) {
    cudaEventRecord(start);
    call();
    cudaEventRecord(stop);
    cudaEventSynchronize(stop);
    float ms = 0;
    cudaEventElapsedTime(&ms, start, stop);
    times.push_back(ms);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 20;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--reps") == 0) reps = std::atoi(argv[i + 1]);
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("sdm_gpu_topk_bench: skipped (no CUDA device)\n");
    return 0;
  }
  using namespace sdm;
  struct Shape { std::int64_t side, factors, k, rows; };
  const Shape shapes[] = {{256, 2, 64, 16384}, {256, 2, 128, 32768}, {512, 2, 64, 16384}, {64, 3, 64, 16384},
                          {256, 2, 256, 16384}};
  std::printf("| factors | k | rows | dtype | forward ms | backward ms |\n|---|---:|---:|---|---:|---:|\n");
  for (const auto& shape : shapes) {
    for (const DType dtype : {DType::bf16, DType::f32}) {
      testing::TopkCase c;
      c.dims.assign(static_cast<std::size_t>(shape.factors), shape.side);
      c.k = shape.k;
      c.rows = shape.rows;
      c.dtype = dtype;
      testing::TopkBuffers b(c);
      const auto& plan = b.plan;
      const TensorRef values = b.matrix_ref(b.device_values, dtype, plan.selected, true);
      const TensorRef slots = b.matrix_ref(b.device_slots, DType::i64, plan.selected, true);
      const TensorRef grad_raw = b.matrix_ref(b.device_grad_raw, dtype, plan.width, true);
      const float forward = median_ms([&] { cuda::product_key_topk_forward(plan, b.raw_ref(true), values, slots, nullptr); }, reps);
      const float backward = median_ms(
          [&] { cuda::product_key_topk_backward(plan, slots, b.grad_values_ref(true), grad_raw, nullptr); }, reps);
      std::printf("| %lldx%lld | %lld | %lld | %s | %.4f | %.4f |\n", static_cast<long long>(shape.factors),
                  static_cast<long long>(shape.side), static_cast<long long>(shape.k), static_cast<long long>(shape.rows), dtype_name(dtype), forward,
                  backward);
    }
  }
  return 0;
}

// test_product_key_topk.cpp - the CUDA product-key top-k against the CPU kernels, bit for bit:
// slots, values (any NaN equals any NaN: IEEE leaves the NaN an addition returns to the
// hardware) and the backward's gradient rows, on awkward factor lists, k, dtypes, tie-heavy,
// special-value and crowded f32 scores and strided rows; two CUDA runs of each case bitwise equal; and the backward
// over slots with entries outside [0, prod(dims)) (they contribute nothing) and over each row's
// slots reversed, against the CPU's. The register backward's row paths (register_backward.cu: the
// column walk or the column sums for widths <= 1024, the sort for wider rows) each run at KMAX 32,
// 64 and 128.
// Prints one line per case and "sdm_gpu_topk_tests: N checks, F failed" last; exit status 1 on a
// failure, 0 (with a message) where no CUDA device exists. --fail-fast: stops after the first
// failing case (for mutants, which must fail). SDM_TOPK_TEST_MATCH=text runs only the cases whose
// name contains it (quick mutant runs; exit status 2 where it names no case).
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/float_convert.hpp"
#include "cpu/topk/product_key_topk.hpp"
#include "cuda/topk/product_key_topk.hpp"
#include "topk_case.hpp"

namespace sdm::testing {
namespace {

int checks = 0, failures = 0;

void expect(bool ok, const std::string& what) {
  ++checks;
  if (!ok) {
    ++failures;
    std::printf("    FAIL %s\n", what.c_str());
  }
}

void sync(const char* what) {
  const cudaError_t status = cudaDeviceSynchronize();
  if (status != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(status));
}

std::vector<unsigned char> to_host(const void* device, std::size_t bytes) {
  std::vector<unsigned char> host(bytes);
  if (bytes > 0 && cudaMemcpy(host.data(), device, bytes, cudaMemcpyDeviceToHost) != cudaSuccess) {
    throw std::runtime_error("cudaMemcpy to host failed");
  }
  return host;
}

// Fills the device gradient rows with 0xA5 bytes before every backward run, so that a run which
// leaves an element unwritten cannot pass on an earlier run's correct answer (the expected
// gradients are compared by bytes; 0xA5A5 / 0xA5A5A5A5 is not among them: finite, not a zero).
void poison_grad(void* device, std::size_t bytes) {
  if (bytes > 0 && cudaMemset(device, 0xA5, bytes) != cudaSuccess) throw std::runtime_error("cudaMemset failed");
}

bool is_nan(const unsigned char* p, DType dtype) {
  if (dtype == DType::f32) {
    float f;
    std::memcpy(&f, p, 4);
    return std::isnan(f);
  }
  std::uint16_t h;
  std::memcpy(&h, p, 2);
  return std::isnan(dtype == DType::bf16 ? core::bf16_to_float(h) : core::f16_to_float(h));
}

bool same_values(const std::vector<unsigned char>& a, const std::vector<unsigned char>& b, DType dtype) {
  const std::size_t elem = dtype_size(dtype);
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); i += elem) {
    const bool nan_a = is_nan(&a[i], dtype), nan_b = is_nan(&b[i], dtype);
    if (nan_a != nan_b || (!nan_a && std::memcmp(&a[i], &b[i], elem) != 0)) return false;
  }
  return true;
}

void run_case(const TopkCase& c) {
  TopkBuffers buffers(c);
  const auto& plan = buffers.plan;
  const std::size_t elem = dtype_size(c.dtype);
  const auto outputs = static_cast<std::size_t>(plan.rows * plan.selected);
  std::vector<unsigned char> cpu_values(outputs * elem), cpu_grad(static_cast<std::size_t>(plan.rows * plan.width) * elem);
  std::vector<std::int64_t> cpu_slots(outputs);
  cpu::product_key_topk_forward(plan, buffers.raw_ref(false), buffers.matrix_ref(cpu_values.data(), c.dtype, plan.selected, false),
                                buffers.matrix_ref(cpu_slots.data(), DType::i64, plan.selected, false), 0);
  cpu::product_key_topk_backward(plan, buffers.matrix_ref(cpu_slots.data(), DType::i64, plan.selected, false),
                                 buffers.grad_values_ref(false), buffers.matrix_ref(cpu_grad.data(), c.dtype, plan.width, false), 0);

  const TensorRef values = buffers.matrix_ref(buffers.device_values, c.dtype, plan.selected, true);
  const TensorRef slots = buffers.matrix_ref(buffers.device_slots, DType::i64, plan.selected, true);
  const TensorRef grad_raw = buffers.matrix_ref(buffers.device_grad_raw, c.dtype, plan.width, true);
  // The CUDA backward over the device slots into poisoned gradient rows, copied back.
  const auto backward = [&] {
    poison_grad(buffers.device_grad_raw, cpu_grad.size());
    cuda::product_key_topk_backward(plan, slots, buffers.grad_values_ref(true), grad_raw, nullptr);
    sync(c.name().c_str());
    return to_host(buffers.device_grad_raw, cpu_grad.size());
  };
  std::vector<unsigned char> first_values, first_slots, first_grad;
  for (int run = 0; run < 2; ++run) {
    cuda::product_key_topk_forward(plan, buffers.raw_ref(true), values, slots, nullptr);
    auto got_grad = backward();
    auto got_values = to_host(buffers.device_values, outputs * elem);
    auto got_slots = to_host(buffers.device_slots, outputs * 8);
    if (run == 0) {
      expect(std::memcmp(got_slots.data(), cpu_slots.data(), outputs * 8) == 0, c.name() + ": slots equal the CPU's");
      expect(same_values(got_values, cpu_values, c.dtype), c.name() + ": values equal the CPU's");
      expect(got_grad == cpu_grad, c.name() + ": gradient equals the CPU's");
      first_values = std::move(got_values);
      first_slots = std::move(got_slots);
      first_grad = std::move(got_grad);
    } else {
      expect(got_values == first_values && got_slots == first_slots && got_grad == first_grad,
             c.name() + ": a second run gives the same bits");
    }
  }

  // Every 5th entry moved outside the slots (below 0, at prod(dims), far above), the rest kept.
  std::vector<std::int64_t> bad_slots = cpu_slots;
  const std::int64_t outside[] = {-1, plan.slots, std::int64_t{1} << 40, -(std::int64_t{1} << 40)};
  for (std::size_t e = 0; e < bad_slots.size(); e += 5) bad_slots[e] = outside[(e / 5) % 4];
  if (cudaMemcpy(buffers.device_slots, bad_slots.data(), outputs * 8, cudaMemcpyHostToDevice) != cudaSuccess) {
    throw std::runtime_error("cudaMemcpy to device failed");
  }
  cpu::product_key_topk_backward(plan, buffers.matrix_ref(bad_slots.data(), DType::i64, plan.selected, false),
                                 buffers.grad_values_ref(false), buffers.matrix_ref(cpu_grad.data(), c.dtype, plan.width, false), 0);
  expect(backward() == cpu_grad, c.name() + ": gradient over slots outside the product equals the CPU's");

  // Each row's slots reversed (no column's entries in ascending order, as a caller's own slots may
  // be): the sums still run over each column's entries in increasing entry.
  std::vector<std::int64_t> reversed = cpu_slots;
  for (std::size_t r = 0; r < static_cast<std::size_t>(plan.rows); ++r) {
    const auto row = reversed.begin() + static_cast<std::ptrdiff_t>(r * static_cast<std::size_t>(plan.selected));
    std::reverse(row, row + plan.selected);
  }
  if (cudaMemcpy(buffers.device_slots, reversed.data(), outputs * 8, cudaMemcpyHostToDevice) != cudaSuccess) {
    throw std::runtime_error("cudaMemcpy to device failed");
  }
  cpu::product_key_topk_backward(plan, buffers.matrix_ref(reversed.data(), DType::i64, plan.selected, false),
                                 buffers.grad_values_ref(false), buffers.matrix_ref(cpu_grad.data(), c.dtype, plan.width, false), 0);
  expect(backward() == cpu_grad, c.name() + ": gradient over reversed slots equals the CPU's");
}

std::vector<TopkCase> cases() {
  const std::vector<std::pair<std::vector<std::int64_t>, std::int64_t>> shapes = {
      {{7}, 3}, {{40}, 40}, {{1000}, 200}, {{4, 4}, 5}, {{16, 16}, 64}, {{3, 5}, 4}, {{1, 9}, 4}, {{9, 1}, 9},
      {{64, 64}, 64}, {{256, 256}, 64}, {{256, 256}, 128}, {{512, 512}, 64}, {{300, 200}, 256}, {{12, 12}, 256},
      {{3, 5, 2}, 7}, {{4, 3, 5, 2}, 11}, {{16, 16, 16}, 100}, {{2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2}, 100},
      {{1, 1, 1}, 2}, {{5, 1, 3}, 15}, {{70000, 3}, 10}, {{65536}, 33},
      // The register kernel's shapes (>= 2 factors of width <= 512, k <= 128): k 128 at side 512,
      // 3 factors (side 64, and side 512 whose ids pass 2^24: 64-bit sort keys), odd widths and k.
      {{512, 512}, 128}, {{64, 64, 64}, 64}, {{512, 512, 512}, 64}, {{33, 500}, 37}, {{100, 31, 7}, 128},
      // The backward's two row paths at k 128: width 1024 sums columns in shared memory, 1025 sorts.
      {{513, 512}, 128}, {{1000, 24}, 100},
      // Stage 1's half-warp ranks at 16 keys a lane and runs of 64 (widths 129..256, k 33..64),
      // whose folds keep 8 then 4 keys a lane: unequal widths below 256 (zero keys past a width).
      {{200, 150}, 50}, {{256, 130}, 33},
      // Stage 1's half-warp tiles (widths 257..512, k 33..64: two tiles of 256 columns a factor,
      // merged): a second tile of 1 column, unequal widths, a factor narrower than one tile.
      {{257, 400}, 64}, {{512, 300}, 40}, {{100, 512}, 33},
      // The backward's sort (rows wider than 1024) at k 33..64 and k <= 32 over two factors (whose
      // forward, factors over 512 columns, runs on the general kernel).
      {{513, 512}, 40}, {{700, 600}, 20},
  };
  std::vector<TopkCase> all;
  std::uint64_t seed = 1;
  for (const auto& [dims, k] : shapes) {
    for (const DType dtype : {DType::f32, DType::bf16, DType::f16}) {
      for (const ScoreKind kind : {ScoreKind::randn, ScoreKind::ties, ScoreKind::special}) {
        TopkCase c;
        c.dims = dims;
        c.k = k;
        c.rows = dims[0] >= 1000 || (dims.size() > 1 && dims[1] >= 1000) ? 9 : 67;
        c.dtype = dtype;
        c.kind = kind;
        c.seed = seed++;
        all.push_back(c);
      }
    }
  }
  // f32 scores that the register forward's 32-bit factor keys (the score's upper bits, then the
  // column) misrank, which its checks must send to the 64-bit re-rank: crowded into a few buckets,
  // and one bucket split at the m-th column (k below the widths, so that the m-th column is in the
  // output); the half-warp ranks (with and without the halving folds) and whole-warp ones, every KMAX.
  const std::vector<std::pair<std::vector<std::int64_t>, std::int64_t>> f32_shapes = {
      {{256, 256}, 64}, {{256, 256}, 128}, {{512, 512}, 64}, {{200, 150}, 50}, {{64, 64, 64}, 40}, {{33, 500}, 20},
      {{100, 31, 7}, 6}, {{16, 16}, 10}, {{512, 300}, 128}, {{300, 512}, 50}, {{512, 257}, 64}};
  for (const auto& [dims, k] : f32_shapes) {
    for (const ScoreKind kind : {ScoreKind::crowded, ScoreKind::bucket_edge}) {
      TopkCase c;
      c.dims = dims;
      c.k = k;
      c.rows = 67;
      c.kind = kind;
      c.seed = seed++;
      all.push_back(c);
    }
  }
  // Strided rows: 16-byte aligned factors (the register kernel's vector loads) and unaligned ones.
  struct Strided { std::vector<std::int64_t> dims; std::int64_t k, row_stride; DType dtype; };
  const Strided strided_cases[] = {{{32, 32}, 50, 80, DType::bf16},
                                   {{256, 256}, 64, 520, DType::bf16},
                                   {{256, 256}, 64, 515, DType::bf16},
                                   {{256, 256}, 128, 513, DType::f32},
                                   // the half-warp tiles: vector loads where a tile lies in the row and
                                   // is 16-byte aligned (400 x bf16 = 800 bytes), scalar ones elsewhere
                                   {{400, 512}, 64, 912, DType::bf16},
                                   {{512, 512}, 64, 1032, DType::f32},
                                   {{512, 512}, 64, 1030, DType::bf16}};
  for (const auto& s : strided_cases) {
    TopkCase strided;
    strided.dims = s.dims;
    strided.k = s.k;
    strided.rows = 33;
    strided.row_stride = s.row_stride;
    strided.kind = ScoreKind::ties;
    strided.dtype = s.dtype;
    strided.seed = seed++;
    all.push_back(strided);
  }
  return all;
}

}  // namespace
}  // namespace sdm::testing

int main(int argc, char** argv) {
  const bool fail_fast = argc > 1 && std::strcmp(argv[1], "--fail-fast") == 0;
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("sdm_gpu_topk_tests: skipped (no CUDA device)\n");
    return 0;
  }
  using namespace sdm::testing;
  const char* match = std::getenv("SDM_TOPK_TEST_MATCH");
  for (const auto& c : cases()) {
    if (match != nullptr && c.name().find(match) == std::string::npos) continue;
    const int before = failures;
    try {
      run_case(c);
    } catch (const std::exception& e) {
      expect(false, c.name() + ": unexpected exception: " + e.what());
    }
    std::printf("[%s] %s\n", failures == before ? " OK " : "FAIL", c.name().c_str());
    if (fail_fast && failures > 0) break;
  }
  std::printf("sdm_gpu_topk_tests: %d checks, %d failed\n", checks, failures);
  if (checks == 0) {  // a SDM_TOPK_TEST_MATCH that names no case checks nothing: not a pass
    std::printf("sdm_gpu_topk_tests: no case matched SDM_TOPK_TEST_MATCH=\"%s\"\n", match ? match : "");
    return 2;
  }
  return failures == 0 ? 0 : 1;
}

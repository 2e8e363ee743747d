// The product-key top-k's C++ entry points (include/sdm/product_key_topk.hpp): a hand-worked
// selection, and the argument checks the PyTorch binding cannot reach (it allocates the
// outputs itself); tests/python/test_product_keys.py covers the rule and the other checks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "support/expect_rejects.hpp"
#include "sdm/error.hpp"
#include "sdm/product_key_topk.hpp"

namespace sdm {
namespace {

using testing::expect_rejects;

TensorRef matrix(void* data, DType dtype, std::int64_t rows, std::int64_t cols, std::int64_t row_stride = 0) {
  TensorRef t;
  t.data = data;
  t.dtype = dtype;
  t.ndim = 2;
  t.sizes = {rows, cols, 0, 0};
  t.strides = {row_stride > 0 ? row_stride : cols, 1, 0, 0};
  return t;
}

const std::vector<std::int64_t> kDims = {3, 2};

TEST(ProductKeyTopk, SelectsByTheRuleOnAHandWorkedRow) {
  // Factor 0 = [1, 2, 2] ranks columns 2, 1, 0 (tie: larger column first); factor 1 = [0, 0]
  // ranks 1, 0. k = 3: c = 3, candidates (i, j) with (i + 1)(j + 1) <= 3: (0,0) (0,1) (1,0) (2,0),
  // sums 2, 2, 2, 1; the tie among the first three goes to the larger i + j, then the larger i:
  // (1,0) and (0,1) before (0,0), all three kept. Slots: (2,1) = 5, (2,0) = 4, (1,1) = 3.
  std::vector<float> raw = {1, 2, 2, 0, 0}, values(3);
  std::vector<std::int64_t> slots(3);
  product_key_topk_forward(matrix(raw.data(), DType::f32, 1, 5), kDims, 3, matrix(values.data(), DType::f32, 1, 3),
                           matrix(slots.data(), DType::i64, 1, 3));
  EXPECT_EQ(slots, (std::vector<std::int64_t>{3, 4, 5}));
  EXPECT_EQ(values, (std::vector<float>{2, 2, 2}));
  std::vector<float> grad_values = {1, 10, 100}, grad_raw(5, -1);
  product_key_topk_backward(matrix(slots.data(), DType::i64, 1, 3), matrix(grad_values.data(), DType::f32, 1, 3), kDims,
                            matrix(grad_raw.data(), DType::f32, 1, 5));
  EXPECT_EQ(grad_raw, (std::vector<float>{0, 1, 110, 10, 101}));
}

TEST(ProductKeyTopk, RefusesBadOutputs) {
  std::vector<float> raw(10), values(8);
  std::vector<std::int64_t> slots(8);
  std::vector<std::int32_t> slots32(8);
  const auto in = matrix(raw.data(), DType::f32, 2, 5);
  const auto good_values = matrix(values.data(), DType::f32, 2, 4);
  const auto good_slots = matrix(slots.data(), DType::i64, 2, 4);
  expect_rejects<TypeError>([&] { product_key_topk_forward(in, kDims, 4, matrix(values.data(), DType::bf16, 2, 4), good_slots); },
                            "values", {"raw's dtype float32", "got bfloat16"});
  expect_rejects<ValueError>([&] { product_key_topk_forward(in, kDims, 4, matrix(values.data(), DType::f32, 2, 3), good_slots); },
                             "values", {"must be [2, 4]", "got [2, 3]"});
  expect_rejects<TypeError>([&] { product_key_topk_forward(in, kDims, 4, good_values, matrix(slots32.data(), DType::i32, 2, 4)); },
                            "slots", {"int64", "got int32"});
  auto strided = in;
  strided.strides = {1, 2, 0, 0};
  expect_rejects<ValueError>([&] { product_key_topk_forward(strided, kDims, 4, good_values, good_slots); }, "raw",
                             {"columns must be contiguous", "stride 2"});
  auto elsewhere = good_slots;
  elsewhere.device = Device{DeviceType::cuda, 0};
  expect_rejects<ValueError>([&] { product_key_topk_forward(in, kDims, 4, good_values, elsewhere); }, "slots",
                             {"raw's device cpu", "got cuda:0"});
  const std::vector<std::int64_t> too_wide = {kMaxProductKeySlots, 1};
  expect_rejects<ValueError>([&] { product_key_topk_selected(matrix(nullptr, DType::f32, 1, kMaxProductKeySlots + 1), too_wide, 3); },
                             "factor_dims", {"sum to more than 4294967295 columns"});
}

TEST(ProductKeyTopk, BackwardRefusesBadGradients) {
  std::vector<std::int64_t> slots(6);
  std::vector<float> grad_values(6), grad_raw(10);
  const auto s = matrix(slots.data(), DType::i64, 2, 3);
  const auto g = matrix(grad_values.data(), DType::f32, 2, 3);
  expect_rejects<TypeError>([&] { product_key_topk_backward(s, g, kDims, matrix(grad_raw.data(), DType::f64, 2, 5)); },
                            "grad_raw", {"grad_values' dtype float32", "got float64"});
  expect_rejects<ValueError>([&] { product_key_topk_backward(s, g, kDims, matrix(grad_raw.data(), DType::f32, 2, 4)); },
                             "grad_raw", {"must be [2, 5]"});
  expect_rejects<ValueError>([&] { product_key_topk_backward(s, matrix(grad_values.data(), DType::f32, 3, 2), kDims,
                                                             matrix(grad_raw.data(), DType::f32, 2, 5)); },
                             "grad_values", {"must be [2, 3]"});
}

TEST(ProductKeyTopk, BackwardRefusesSlotsOutsideTheGridUnlessTrusted) {
  // prod(kDims) = 6 slots: 6 and -1 are outside. validate (the default) names the first bad
  // entry and writes nothing; validate=false lets it contribute nothing.
  std::vector<float> grad_values = {1, 10, 100, 1000}, grad_raw(10, -1);
  const auto g = matrix(grad_values.data(), DType::f32, 2, 2);
  const auto out = matrix(grad_raw.data(), DType::f32, 2, 5);
  for (const std::int64_t bad : {std::int64_t{6}, std::int64_t{-1}}) {
    std::vector<std::int64_t> slots = {0, 5, 2, bad};
    const auto s = matrix(slots.data(), DType::i64, 2, 2);
    expect_rejects<ValueError>([&] { product_key_topk_backward(s, g, kDims, out); }, "slots",
                               {"slots[row 1, entry 1] = " + std::to_string(bad), "outside [0, prod(factor_dims)) = [0, 6)"});
    EXPECT_EQ(grad_raw, std::vector<float>(10, -1));
    ProductKeyTopkOptions trusted;
    trusted.validate = false;
    product_key_topk_backward(s, g, kDims, out, trusted);
    // Row 1: slot 2 = (1, 0) gets 100 on factor 0 column 1 and factor 1 column 0; the bad entry nothing.
    EXPECT_EQ(std::vector<float>(grad_raw.begin() + 5, grad_raw.end()), (std::vector<float>{0, 100, 0, 100, 0}));
    std::fill(grad_raw.begin(), grad_raw.end(), -1.0f);
  }
}

TEST(ProductKeyTopk, RandomFactorListsGiveAscendingInRangeSlotsScoredByTheirFactors) {
  // Random factor lists (1 to 5 factors of 1 to 40 columns), k and rows; float32 scores that are
  // small integers, so every sum is exact whatever the factor count and ties abound. Each row's
  // slots must be strictly ascending and in range, and each value the sum of its slot's factor
  // scores; the backward must send each value's gradient to exactly its columns.
  std::mt19937_64 rng(11);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<std::int64_t> dims(1 + rng() % 5);
    std::int64_t width = 0, slots_total = 1;
    for (auto& w : dims) {
      w = 1 + static_cast<std::int64_t>(rng() % 40);
      width += w;
      slots_total *= w;
    }
    const std::int64_t k = 1 + static_cast<std::int64_t>(rng() % 256), rows = 1 + static_cast<std::int64_t>(rng() % 20);
    const std::int64_t kk = std::min(k, slots_total);
    std::vector<float> raw(static_cast<std::size_t>(rows * width)), values(static_cast<std::size_t>(rows * kk));
    for (auto& x : raw) x = static_cast<float>(static_cast<int>(rng() % 7) - 3);
    std::vector<std::int64_t> slots(values.size());
    ASSERT_EQ(product_key_topk_selected(matrix(nullptr, DType::f32, rows, width), dims, k), kk);
    product_key_topk_forward(matrix(raw.data(), DType::f32, rows, width), dims, k,
                             matrix(values.data(), DType::f32, rows, kk), matrix(slots.data(), DType::i64, rows, kk));
    std::vector<float> ones(values.size(), 1.0f), grad_raw(raw.size(), -1.0f), want_grad(raw.size(), 0.0f);
    for (std::int64_t r = 0; r < rows; ++r) {
      for (std::int64_t e = 0; e < kk; ++e) {
        const std::int64_t id = slots[static_cast<std::size_t>(r * kk + e)];
        ASSERT_TRUE(id >= 0 && id < slots_total) << "trial " << trial;
        if (e > 0) {
          ASSERT_LT(slots[static_cast<std::size_t>(r * kk + e - 1)], id) << "trial " << trial;
        }
        std::int64_t rest = id, offset = width;
        float sum = 0;
        for (std::size_t f = dims.size(); f-- > 0;) {
          offset -= dims[f];
          const std::int64_t column = offset + rest % dims[f];
          rest /= dims[f];
          sum += raw[static_cast<std::size_t>(r * width + column)];
          want_grad[static_cast<std::size_t>(r * width + column)] += 1.0f;
        }
        ASSERT_EQ(values[static_cast<std::size_t>(r * kk + e)], sum) << "trial " << trial;
      }
    }
    product_key_topk_backward(matrix(slots.data(), DType::i64, rows, kk), matrix(ones.data(), DType::f32, rows, kk), dims,
                              matrix(grad_raw.data(), DType::f32, rows, width));
    ASSERT_EQ(grad_raw, want_grad) << "trial " << trial;
  }
}

}  // namespace
}  // namespace sdm

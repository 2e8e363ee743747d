#include "bench_inputs.hpp"

#include <algorithm>
#include <cstring>
#include <random>
#include <stdexcept>

#include "core/float_convert.hpp"

namespace sdm::bench {

Buffer::Buffer(DType dtype, std::vector<std::int64_t> sizes) : dtype_(dtype), sizes_(std::move(sizes)) {
  std::int64_t n = 1;
  for (auto s : sizes_) n *= s;
  bytes_.assign(static_cast<std::size_t>(n) * dtype_size(dtype_), 0);
}

TensorRef Buffer::ref() const {
  TensorRef r;
  r.data = data();
  r.dtype = dtype_;
  r.ndim = static_cast<int>(sizes_.size());
  std::int64_t stride = 1;
  for (int i = r.ndim - 1; i >= 0; --i) {
    const auto d = static_cast<std::size_t>(i);
    r.sizes[d] = sizes_[d];
    r.strides[d] = stride;
    stride *= sizes_[d];
  }
  return r;
}

TensorRef Buffer::view(std::int64_t offset, std::initializer_list<std::int64_t> sizes) const {
  auto* base = static_cast<unsigned char*>(data()) + static_cast<std::size_t>(offset) * dtype_size(dtype_);
  return TensorRef::contiguous(base, dtype_, sizes);
}

namespace {

template <typename T>
T* typed(const Buffer& b) {
  return static_cast<T*>(b.data());
}

template <typename Gen>
void fill_f32(const Buffer& b, Gen&& gen) {
  float* out = typed<float>(b);
  const std::size_t n = b.bytes() / sizeof(float);
  for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<float>(gen());
}

// `count` distinct rows of [base, base + range) in random order, written to out[0, count).
void draw_distinct(std::mt19937_64& rng, std::int64_t base, std::int64_t range, std::int64_t count,
                   std::int32_t* out) {
  std::uniform_int_distribution<std::int64_t> pick(0, range - 1);
  for (std::int64_t i = 0; i < count;) {
    const auto row = static_cast<std::int32_t>(base + pick(rng));
    if (std::find(out, out + i, row) == out + i) out[i++] = row;
  }
}

// x [P, T, L] -> [T, P, L].
Buffer time_major(const Buffer& x, DType dtype, std::int64_t P, std::int64_t T, std::int64_t L) {
  Buffer out(dtype, {T, P, L});
  const std::size_t row = static_cast<std::size_t>(L) * dtype_size(dtype);
  const auto* src = static_cast<const unsigned char*>(x.data());
  auto* dst = static_cast<unsigned char*>(out.data());
  for (std::int64_t p = 0; p < P; ++p) {
    for (std::int64_t t = 0; t < T; ++t) {
      std::memcpy(dst + static_cast<std::size_t>(t * P + p) * row, src + static_cast<std::size_t>(p * T + t) * row, row);
    }
  }
  return out;
}

}  // namespace

BenchInputs make_bench_inputs(const BenchConfig& c, DType bank_dtype, std::uint64_t seed) {
  if (c.W > c.slots_per_stream || c.R > c.slots_per_stream) {
    throw std::invalid_argument("config " + c.name + ": W and R must not exceed slots_per_stream");
  }
  BenchInputs in;
  in.config = c;
  in.bank_dtype = bank_dtype;
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::uniform_real_distribution<double> unit(0.0, 1.0);

  const std::int64_t rows = c.P * c.slots_per_stream;
  in.initial_bank = Buffer(bank_dtype, {rows, c.hd});
  const std::size_t bank_elems = static_cast<std::size_t>(rows * c.hd);
  if (bank_dtype == DType::bf16) {
    auto* bank = typed<std::uint16_t>(in.initial_bank);
    for (std::size_t i = 0; i < bank_elems; ++i) bank[i] = core::bf16_from_float(static_cast<float>(0.1 * normal(rng)));
  } else {
    fill_f32(in.initial_bank, [&] { return 0.1 * normal(rng); });
  }

  in.k_idx = Buffer(DType::i32, {c.P, c.T, c.W});
  in.q_idx = Buffer(DType::i32, {c.P, c.T, c.R});
  for (std::int64_t p = 0; p < c.P; ++p) {
    for (std::int64_t t = 0; t < c.T; ++t) {
      draw_distinct(rng, p * c.slots_per_stream, c.slots_per_stream, c.W, typed<std::int32_t>(in.k_idx) + (p * c.T + t) * c.W);
      draw_distinct(rng, p * c.slots_per_stream, c.slots_per_stream, c.R, typed<std::int32_t>(in.q_idx) + (p * c.T + t) * c.R);
    }
  }
  in.k_val = Buffer(DType::f32, {c.P, c.T, c.W});
  fill_f32(in.k_val, [&] { return 0.3 * normal(rng); });
  in.v = Buffer(DType::f32, {c.P, c.T, c.hd});
  fill_f32(in.v, [&] { return 0.1 * normal(rng); });
  in.beta = Buffer(DType::f32, {c.P, c.T, 1});
  fill_f32(in.beta, [&] { return 0.3 * unit(rng); });
  in.g = Buffer(DType::f32, {c.P, c.T, c.G});
  fill_f32(in.g, [&] { return -0.01 - 0.49 * unit(rng); });
  in.q_val = Buffer(DType::f32, {c.P, c.T, c.R});
  fill_f32(in.q_val, [&] { return 0.3 * normal(rng); });
  in.grad_readings = Buffer(DType::f32, {c.P, c.T, c.hd});
  fill_f32(in.grad_readings, [&] { return normal(rng); });

  in.k_idx_t = time_major(in.k_idx, DType::i32, c.P, c.T, c.W);
  in.k_val_t = time_major(in.k_val, DType::f32, c.P, c.T, c.W);
  in.v_t = time_major(in.v, DType::f32, c.P, c.T, c.hd);
  in.beta_t = time_major(in.beta, DType::f32, c.P, c.T, 1);
  in.g_t = time_major(in.g, DType::f32, c.P, c.T, c.G);
  in.q_idx_t = time_major(in.q_idx, DType::i32, c.P, c.T, c.R);
  in.q_val_t = time_major(in.q_val, DType::f32, c.P, c.T, c.R);
  return in;
}

WriteReadArgs BenchInputs::args(const TensorRef& bank) const {
  return {bank, k_idx.ref(), k_val.ref(), v.ref(), beta.ref(), g.ref(), q_idx.ref(), q_val.ref()};
}

WriteReadArgs BenchInputs::decode_args(const TensorRef& bank, std::int64_t t) const {
  const auto& c = config;
  return {bank,
          k_idx_t.view(t * c.P * c.W, {c.P, c.W}),
          k_val_t.view(t * c.P * c.W, {c.P, c.W}),
          v_t.view(t * c.P * c.hd, {c.P, c.hd}),
          beta_t.view(t * c.P, {c.P, 1}),
          g_t.view(t * c.P * c.G, {c.P, c.G}),
          q_idx_t.view(t * c.P * c.R, {c.P, c.R}),
          q_val_t.view(t * c.P * c.R, {c.P, c.R})};
}

}  // namespace sdm::bench

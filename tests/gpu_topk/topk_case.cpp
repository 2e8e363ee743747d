// topk_case.cpp - random product-key top-k problems on the host and the device.
#include "topk_case.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <stdexcept>

#include "core/float_convert.hpp"

namespace sdm::testing {
namespace {

void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(status));
}

void* device_copy(const std::vector<unsigned char>& host, std::size_t bytes) {
  void* p = nullptr;
  check(cudaMalloc(&p, bytes > 0 ? bytes : 1), "cudaMalloc");
  if (!host.empty()) check(cudaMemcpy(p, host.data(), host.size(), cudaMemcpyHostToDevice), "cudaMemcpy");
  return p;
}

void store(std::vector<unsigned char>& bytes, DType dtype, std::size_t i, double x) {
  if (dtype == DType::f32) {
    const float f = static_cast<float>(x);
    std::memcpy(bytes.data() + 4 * i, &f, 4);
  } else {
    const std::uint16_t h = dtype == DType::bf16 ? core::bf16_from_double(x) : core::f16_from_double(x);
    std::memcpy(bytes.data() + 2 * i, &h, 2);
  }
}

double draw(ScoreKind kind, std::mt19937_64& rng) {
  std::normal_distribution<double> normal;
  std::uniform_int_distribution<int> half_steps(-3, 3), pick(0, 9), ulps(0, 4095);
  if (kind == ScoreKind::randn || kind == ScoreKind::bucket_edge) return normal(rng);
  if (kind == ScoreKind::crowded) return (pick(rng) < 8 ? 1.0 : -1.0) * (1.0 + std::ldexp(ulps(rng), -23));
  const double tie = half_steps(rng) / 2.0;
  if (kind == ScoreKind::ties) return tie;
  switch (pick(rng)) {
    case 0: return -0.0;
    case 1: return 0.0;
    case 2: return std::nan("");
    case 3: return -INFINITY;
    case 4: return INFINITY;
    default: return tie;
  }
}

// ScoreKind::bucket_edge's scores of one row (factors of widths dims side by side): factor
// `edge` holds m - 1 distinct large scores, then at its m-th best column the smaller of two columns
// holding +-0.75 and its f32 neighbour away from 0 (ranked by the scores' upper bits and then the
// column, the other one would be m-th), the rest below (m = min(k, width)); every other factor has
// one score far above its others, so the k best slots use the edge factor's top m columns.
void bucket_edge_row(std::vector<double>& row, const std::vector<std::int64_t>& dims, std::int64_t k, std::size_t edge,
                     std::mt19937_64& rng) {
  std::int64_t at = 0;
  for (std::size_t f = 0; f < dims.size(); ++f) {
    const std::int64_t width = dims[f], m = f == edge ? std::min(k, width) : 1;
    std::vector<std::int64_t> order(static_cast<std::size_t>(width));
    for (std::int64_t c = 0; c < width; ++c) order[static_cast<std::size_t>(c)] = at + c;
    std::shuffle(order.begin(), order.end(), rng);
    auto x = [&](std::int64_t t) -> double& { return row[static_cast<std::size_t>(order[static_cast<std::size_t>(t)])]; };
    for (std::int64_t t = 0; t < width; ++t) x(t) = t < m - 1 || f != edge ? 1000.0 - 4.0 * static_cast<double>(t) : -1000.0 - static_cast<double>(t);
    if (f != edge) {
      for (std::int64_t t = 1; t < width; ++t) x(t) = -1000.0 - static_cast<double>(t);
    } else if (width > m) {  // the pair: +0.75 and its successor, or -0.75 and its predecessor
      const double near = 0.75, far = static_cast<double>(std::nextafter(0.75f, 1.0f));
      const bool positive = (rng() & 1u) != 0;
      const auto a = order[static_cast<std::size_t>(m - 1)], b = order[static_cast<std::size_t>(m)];
      row[static_cast<std::size_t>(std::min(a, b))] = positive ? far : -near;
      row[static_cast<std::size_t>(std::max(a, b))] = positive ? near : -far;
    }
    at += width;
  }
}

}  // namespace

std::string TopkCase::name() const {
  std::string s = "dims [";
  for (std::size_t f = 0; f < dims.size(); ++f) {
    if (f > 0) s += ",";
    s += std::to_string(dims[f]);
  }
  const char* kinds[] = {"randn", "ties", "special", "crowded", "bucket_edge"};
  s += "] k " + std::to_string(k);
  s += " rows " + std::to_string(rows);
  s += " ";
  s += dtype_name(dtype);
  s += " ";
  s += kinds[static_cast<int>(kind)];
  if (row_stride > 0) s += " strided";
  return s;
}

TopkBuffers::TopkBuffers(const TopkCase& c) {
  std::int64_t width = 0;
  for (const auto w : c.dims) width += w;
  const std::int64_t stride = c.row_stride > 0 ? c.row_stride : width;
  TensorRef shape;
  shape.dtype = c.dtype;
  shape.ndim = 2;
  shape.sizes = {c.rows, width, 0, 0};
  shape.strides = {stride, 1, 0, 0};
  plan = core::plan_product_key_topk(shape, c.dims, c.k);
  const std::size_t elem = dtype_size(c.dtype);
  std::mt19937_64 rng(c.seed);
  raw.assign(static_cast<std::size_t>(c.rows * stride) * elem, 0);
  for (std::int64_t r = 0; r < c.rows; ++r) {
    std::vector<double> row(static_cast<std::size_t>(stride));
    for (auto& v : row) v = draw(c.kind, rng);
    if (c.kind == ScoreKind::bucket_edge) bucket_edge_row(row, c.dims, c.k, static_cast<std::size_t>(r) % c.dims.size(), rng);
    for (std::int64_t i = 0; i < stride; ++i) store(raw, c.dtype, static_cast<std::size_t>(r * stride + i), row[static_cast<std::size_t>(i)]);
  }
  const auto grads = static_cast<std::size_t>(c.rows * plan.selected);
  grad_values.assign(grads * elem, 0);
  std::normal_distribution<double> normal;
  for (std::size_t i = 0; i < grads; ++i) store(grad_values, c.dtype, i, normal(rng));
  device_raw = device_copy(raw, raw.size());
  device_values = device_copy({}, grads * elem);
  device_slots = device_copy({}, grads * 8);
  device_grad_values = device_copy(grad_values, grad_values.size());
  device_grad_raw = device_copy({}, static_cast<std::size_t>(c.rows * width) * elem);
}

TopkBuffers::~TopkBuffers() {
  for (void* p : {device_raw, device_values, device_slots, device_grad_values, device_grad_raw}) cudaFree(p);
}

TensorRef TopkBuffers::matrix_ref(void* data, DType dtype, std::int64_t cols, bool device) const {
  TensorRef ref;
  ref.data = data;
  ref.dtype = dtype;
  ref.device = device ? Device{DeviceType::cuda, 0} : Device{};
  ref.ndim = 2;
  ref.sizes = {plan.rows, cols, 0, 0};
  ref.strides = {cols, 1, 0, 0};
  return ref;
}

TensorRef TopkBuffers::raw_ref(bool device) const {
  TensorRef ref = matrix_ref(device ? device_raw : const_cast<unsigned char*>(raw.data()), plan.dtype, plan.width,
                             device);
  ref.strides[0] = static_cast<std::int64_t>(raw.size() / dtype_size(plan.dtype)) / (plan.rows > 0 ? plan.rows : 1);
  return ref;
}

TensorRef TopkBuffers::grad_values_ref(bool device) const {
  return matrix_ref(device ? device_grad_values : const_cast<unsigned char*>(grad_values.data()), plan.dtype,
                    plan.selected, device);
}

}  // namespace sdm::testing

// product_key_topk.cpp - CPU product-key top-k, forward and backward.
//
// Forward, one row at a time (rows split over threads; a row's result depends on its row
// only, so any thread count gives the same bits):
//   1. factor 0: every column keyed (score_key(value), column); nth_element + sort keep the
//      n = min(k, n_0) largest keys, i.e. ranked by value, larger column first on ties;
//   2. stage f: factor f ranked the same way (m columns); the candidate rank pairs
//      (i, j), (i + 1) * (j + 1) <= c, are keyed (score_key(running[i] + factor[j]), i + j, i)
//      and the c largest kept (nth_element); an intermediate stage sorts them into the next
//      running list (sums rounded to a 16-bit input dtype), the last one by slot id.
// Numerics: sums in float32 (float64 for float64 input), one rounding per stored value.
// Backward, per row: for each factor, the (column, position) pairs of the selected slots
// sorted, each column's run summed in position order and stored once; other columns 0.
#include "cpu/topk/product_key_topk.hpp"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <vector>

#include "core/float_convert.hpp"
#include "cpu/engine/thread_pool.hpp"
#include "cpu/engine/worker_split.hpp"

namespace sdm::cpu {
namespace {

// Storage <-> arithmetic of one score dtype. Acc is the sum type, Key the score_key type.
struct F32Scores {
  using Storage = float;
  using Acc = float;
  static float load(float x) { return x; }
  static float store(float x) { return x; }
  static float round(float x) { return x; }
};
struct BF16Scores {
  using Storage = std::uint16_t;
  using Acc = float;
  static float load(std::uint16_t x) { return core::bf16_to_float(x); }
  static std::uint16_t store(float x) { return core::bf16_from_float(x); }
  static float round(float x) { return core::round_to_bf16(x); }
};
struct F16Scores {
  using Storage = std::uint16_t;
  using Acc = float;
  static float load(std::uint16_t x) { return core::f16_to_float(x); }
  static std::uint16_t store(float x) { return core::f16_from_float(x); }
  static float round(float x) { return core::round_to_f16(x); }
};
struct F64Scores {
  using Storage = double;
  using Acc = double;
  static double load(double x) { return x; }
  static double store(double x) { return x; }
  static double round(double x) { return x; }
};

// A ranked item: the score key, then a tie payload (a column, or (i + j) << 8 | i for a pair);
// larger is better in both.
template <typename Key>
struct Ranked {
  Key key;
  std::uint32_t payload;
  bool operator>(const Ranked& o) const { return key != o.key ? key > o.key : payload > o.payload; }
};

// Reorders items so that the `keep` best come first, sorted best first when `sorted`.
template <typename Item>
void keep_best(std::vector<Item>& items, std::size_t keep, bool sorted) {
  const auto better = std::greater<Item>();
  if (keep < items.size()) std::nth_element(items.begin(), items.begin() + keep, items.end(), better);
  items.resize(keep);
  if (sorted) std::sort(items.begin(), items.end(), better);
}

template <typename S>
class RowSelector {
 public:
  using Acc = typename S::Acc;
  using Key = decltype(core::score_key(Acc{}));

  explicit RowSelector(const core::ProductKeyPlan& plan) : plan_(plan) {}

  void run(const typename S::Storage* row, typename S::Storage* out_values, std::int64_t* out_slots) {
    const auto factors = plan_.dims.size();
    rank_factor(row, 0);
    running_val_.resize(ranked_.size());
    running_id_.resize(ranked_.size());
    for (std::size_t r = 0; r < ranked_.size(); ++r) {
      running_val_[r] = factor_val_[r];
      running_id_[r] = ranked_[r].payload;
    }
    if (factors == 1) return store_selection(out_values, out_slots);
    for (std::size_t f = 1; f < factors; ++f) {
      rank_factor(row, f);
      run_stage(f, f + 1 == factors, out_values, out_slots);
    }
  }

 private:
  // ranked_ / factor_val_: factor f's min(k, n_f) best columns, best first.
  void rank_factor(const typename S::Storage* row, std::size_t f) {
    const std::int64_t width = plan_.dims[f];
    const typename S::Storage* x = row + plan_.offsets[f];
    ranked_.resize(static_cast<std::size_t>(width));
    for (std::int64_t c = 0; c < width; ++c) {
      ranked_[static_cast<std::size_t>(c)] = {core::score_key(S::load(x[c])), static_cast<std::uint32_t>(c)};
    }
    keep_best(ranked_, static_cast<std::size_t>(std::min(plan_.k, width)), true);
    factor_val_.resize(ranked_.size());
    for (std::size_t r = 0; r < ranked_.size(); ++r) factor_val_[r] = S::load(x[ranked_[r].payload]);
  }

  // The running list in ascending slot order, with its scores rounded to the input dtype.
  void store_selection(typename S::Storage* out_values, std::int64_t* out_slots) {
    order_.resize(running_id_.size());
    for (std::size_t r = 0; r < order_.size(); ++r) order_[r] = r;
    std::sort(order_.begin(), order_.end(), [&](std::size_t a, std::size_t b) { return running_id_[a] < running_id_[b]; });
    for (std::size_t e = 0; e < order_.size(); ++e) {
      out_slots[e] = static_cast<std::int64_t>(running_id_[order_[e]]);
      out_values[e] = S::store(running_val_[order_[e]]);
    }
  }

  void run_stage(std::size_t f, bool last, typename S::Storage* out_values, std::int64_t* out_slots) {
    const std::int64_t n = static_cast<std::int64_t>(running_val_.size());
    const std::int64_t m = static_cast<std::int64_t>(factor_val_.size());
    const std::int64_t c = std::min(plan_.k, n * m);
    pairs_.clear();
    for (std::int64_t i = 0; i < n && i < c; ++i) {
      const std::int64_t j_end = std::min(m, c / (i + 1));
      for (std::int64_t j = 0; j < j_end; ++j) {
        const Acc sum = running_val_[static_cast<std::size_t>(i)] + factor_val_[static_cast<std::size_t>(j)];
        pairs_.push_back({core::score_key(sum), static_cast<std::uint32_t>((i + j) << 8 | i)});
      }
    }
    keep_best(pairs_, static_cast<std::size_t>(c), !last);
    const auto width = static_cast<std::uint64_t>(plan_.dims[f]);
    next_val_.resize(pairs_.size());
    next_id_.resize(pairs_.size());
    for (std::size_t p = 0; p < pairs_.size(); ++p) {
      const std::uint32_t i = pairs_[p].payload & 0xffu;
      const std::uint32_t j = (pairs_[p].payload >> 8) - i;
      const Acc sum = running_val_[i] + factor_val_[j];
      next_val_[p] = last ? sum : S::round(sum);
      next_id_[p] = running_id_[i] * width + ranked_[j].payload;
    }
    running_val_.swap(next_val_);
    running_id_.swap(next_id_);
    if (last) store_selection(out_values, out_slots);
  }

  const core::ProductKeyPlan& plan_;
  std::vector<Ranked<Key>> ranked_, pairs_;
  std::vector<Acc> factor_val_, running_val_, next_val_;
  std::vector<std::uint64_t> running_id_, next_id_;
  std::vector<std::size_t> order_;
};

template <typename S>
void forward_rows(const core::ProductKeyPlan& plan, const TensorRef& raw, const TensorRef& values,
                  const TensorRef& slots, int num_threads) {
  const int threads = resolve_num_threads(num_threads);
  const std::int64_t workers = worker_count(plan.rows, threads);
  std::vector<RowSelector<S>> selectors(static_cast<std::size_t>(workers), RowSelector<S>(plan));
  const auto* base = raw.data_as<const typename S::Storage>();
  for_each_item(plan.rows, workers, threads, [&](std::int64_t row, std::int64_t worker) {
    selectors[static_cast<std::size_t>(worker)].run(base + row * raw.strides[0],
                                                    values.data_as<typename S::Storage>() + row * plan.selected,
                                                    slots.data_as<std::int64_t>() + row * plan.selected);
  });
}

template <typename S>
void backward_rows(const core::ProductKeyPlan& plan, const TensorRef& slots, const TensorRef& grad_values,
                   const TensorRef& grad_raw, int num_threads) {
  using Acc = typename S::Acc;
  const int threads = resolve_num_threads(num_threads);
  const std::int64_t workers = worker_count(plan.rows, threads);
  const std::int64_t kk = plan.selected;
  std::vector<std::vector<std::uint64_t>> scratch(static_cast<std::size_t>(workers));
  for_each_item(plan.rows, workers, threads, [&](std::int64_t row, std::int64_t worker) {
    const std::int64_t* ids = slots.data_as<const std::int64_t>() + row * kk;
    const auto* g = grad_values.data_as<const typename S::Storage>() + row * kk;
    auto* out = grad_raw.data_as<typename S::Storage>() + row * plan.width;
    std::fill(out, out + plan.width, S::store(Acc{0}));
    auto& runs = scratch[static_cast<std::size_t>(worker)];
    for (std::size_t f = 0; f < plan.dims.size(); ++f) {
      runs.clear();
      for (std::int64_t e = 0; e < kk; ++e) {
        if (ids[e] < 0 || ids[e] >= plan.slots) continue;
        const auto column = static_cast<std::uint64_t>(ids[e] / plan.radix[f] % plan.dims[f]);
        runs.push_back(column << 8 | static_cast<std::uint64_t>(e));
      }
      std::sort(runs.begin(), runs.end());
      for (std::size_t r = 0; r < runs.size();) {
        const std::uint64_t column = runs[r] >> 8;
        Acc sum = 0;
        for (; r < runs.size() && (runs[r] >> 8) == column; ++r) sum += S::load(g[runs[r] & 0xffu]);
        out[plan.offsets[f] + static_cast<std::int64_t>(column)] = S::store(sum);
      }
    }
  });
}

}  // namespace

void product_key_topk_forward(const core::ProductKeyPlan& plan, const TensorRef& raw, const TensorRef& values,
                              const TensorRef& slots, int num_threads) {
  if (plan.rows == 0) return;
  switch (plan.dtype) {
    case DType::f32: return forward_rows<F32Scores>(plan, raw, values, slots, num_threads);
    case DType::bf16: return forward_rows<BF16Scores>(plan, raw, values, slots, num_threads);
    case DType::f16: return forward_rows<F16Scores>(plan, raw, values, slots, num_threads);
    default: return forward_rows<F64Scores>(plan, raw, values, slots, num_threads);
  }
}

void product_key_topk_backward(const core::ProductKeyPlan& plan, const TensorRef& slots,
                               const TensorRef& grad_values, const TensorRef& grad_raw, int num_threads) {
  if (plan.rows == 0) return;
  switch (plan.dtype) {
    case DType::f32: return backward_rows<F32Scores>(plan, slots, grad_values, grad_raw, num_threads);
    case DType::bf16: return backward_rows<BF16Scores>(plan, slots, grad_values, grad_raw, num_threads);
    case DType::f16: return backward_rows<F16Scores>(plan, slots, grad_values, grad_raw, num_threads);
    default: return backward_rows<F64Scores>(plan, slots, grad_values, grad_raw, num_threads);
  }
}

}  // namespace sdm::cpu

// Hand-built TensorRefs (include/sdm/types.hpp) that no binding would make: ndim outside 0..4
// (5, 100, -1), a negative size, a negative stride, and data == nullptr with a non-empty shape.
// include/sdm/ops.hpp promises that every entry point validates its arguments first: each
// such argument of every entry point is refused with sdm::ValueError naming it (never a crash, an
// out-of-bounds read of sizes[] / strides[] under ASan / UBSan, or a std::length_error), and
// nothing is written. The shape-only entry points (check_write_read, check_decode_step,
// plan_write_read, write_read_saved_bytes, product_key_topk_selected) take data-less views, as the
// PyTorch binding's fake kernels pass them, and accept them.
#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "sdm/error.hpp"
#include "sdm/ops.hpp"
#include "sdm/plan.hpp"
#include "sdm/product_key_topk.hpp"
#include "sdm/reference.hpp"
#include "support/expect_rejects.hpp"
#include "support/host_tensor.hpp"
#include "support/problem.hpp"

namespace sdm::testing {
namespace {

// One way to break a TensorRef, and a fragment its error message must contain.
struct Breakage {
  const char* what;
  std::function<void(TensorRef&)> apply;
  const char* fragment;
};

std::vector<Breakage> shape_breakages() {
  return {
      {"ndim 5", [](TensorRef& t) { t.ndim = 5; }, "ndim = 5; a TensorRef holds 0 to 4 dimensions"},
      {"ndim 100", [](TensorRef& t) { t.ndim = 100; }, "ndim = 100"},
      {"ndim -1", [](TensorRef& t) { t.ndim = -1; }, "ndim = -1"},
      {"negative size", [](TensorRef& t) { t.sizes[0] = -3; }, "has a negative size: shape [-3"},
      {"negative stride", [](TensorRef& t) { t.strides[0] = -1; }, "has a negative stride"},
  };
}

Breakage no_data() {
  return {"data == nullptr", [](TensorRef& t) { t.data = nullptr; },
          "has no data (data == nullptr) but its shape"};
}

// Every argument of the chunked entry points, as the calls pass them.
struct ChunkedCall {
  Problem pb = make_problem(spec_of(2, 5, 3, 2, 4, 8, 1, DType::f32, 21));
  HostTensor readings = pb.make_readings(DType::f32);
  WriteReadOptions options;
  HostTensor saved, grad_readings, grad_final_bank, grad_memory, grad_v;
  WriteReadArgs args;
  TensorRef readings_ref, saved_ref, grad_readings_ref, grad_final_bank_ref;
  WriteReadGrads grads;

  ChunkedCall() {
    options.slots_per_stream = pb.spec.slots_per_stream;
    options.chunk_size = 2;
    args = pb.args();
    const std::int64_t S = pb.bank_rows(), hd = pb.spec.hd;
    saved = HostTensor(DType::u8, {static_cast<std::int64_t>(write_read_saved_bytes(args, options))});
    grad_readings = HostTensor(DType::f32, readings.sizes());
    for (std::int64_t i = 0; i < grad_readings.numel(); ++i) grad_readings.set(i, 0.01 * static_cast<double>(i % 7));
    grad_final_bank = HostTensor(DType::f32, {S, hd});
    grad_memory = HostTensor(DType::f32, {S, hd});
    grad_v = HostTensor(DType::f32, pb.v.sizes());
    reset();
  }
  void reset() {
    args = pb.args();
    readings_ref = readings.ref();
    saved_ref = saved.ref();
    grad_readings_ref = grad_readings.ref();
    grad_final_bank_ref = grad_final_bank.ref();
    grads = WriteReadGrads{};
    grads.memory = grad_memory.ref();
    grads.v = grad_v.ref();
  }
  // The named arguments of the forward (and of every chunked entry point).
  std::vector<std::pair<const char*, TensorRef*>> inputs() {
    return {{"memory", &args.memory}, {"k_idx", &args.k_idx}, {"k_val", &args.k_val}, {"v", &args.v},
            {"beta", &args.beta},     {"g", &args.g},         {"q_idx", &args.q_idx}, {"q_val", &args.q_val}};
  }
};

// `call` is refused with a ValueError naming `name` whose message has `fragment`, and neither the
// bank nor the readings changed.
void expect_refused(const std::function<void()>& call, const std::string& name, const std::string& fragment,
                    const HostTensor& bank, const HostTensor& readings, const std::string& context) {
  SCOPED_TRACE(context);
  const HostTensor bank_before = bank.to(bank.dtype());
  const HostTensor readings_before = readings.to(readings.dtype());
  expect_rejects<ValueError>(call, name, {fragment});
  EXPECT_TRUE(bank.bitwise_equal(bank_before));
  EXPECT_TRUE(readings.bitwise_equal(readings_before));
}

TEST(MalformedRefs, ForwardRefusesEachBrokenArgumentByName) {
  ChunkedCall c;
  std::vector<Breakage> breakages = shape_breakages();
  breakages.push_back(no_data());
  for (const Breakage& b : breakages) {
    c.reset();
    std::vector<std::pair<const char*, TensorRef*>> targets = c.inputs();
    targets.push_back({"readings", &c.readings_ref});
    for (auto& [name, ref] : targets) {
      c.reset();
      b.apply(*ref);
      expect_refused([&] { write_read_forward(c.args, c.readings_ref, c.options); }, name, b.fragment, c.pb.memory,
                     c.readings, std::string("write_read_forward, ") + name + ": " + b.what);
    }
  }
  c.reset();
  EXPECT_NO_THROW(write_read_forward(c.args, c.readings_ref, c.options));
}

TEST(MalformedRefs, SavingForwardAndBackwardRefuseEachBrokenArgumentByName) {
  ChunkedCall c;
  std::vector<Breakage> breakages = shape_breakages();
  breakages.push_back(no_data());
  for (const Breakage& b : breakages) {
    std::vector<const char*> names = {"memory", "k_idx", "k_val", "v", "beta", "g", "q_idx", "q_val", "readings", "saved"};
    for (const char* name : names) {
      c.reset();
      std::vector<std::pair<const char*, TensorRef*>> targets = c.inputs();
      targets.push_back({"readings", &c.readings_ref});
      targets.push_back({"saved", &c.saved_ref});
      for (auto& [n, ref] : targets) {
        if (std::string(n) == name) b.apply(*ref);
      }
      expect_refused([&] { write_read_forward_saving(c.args, c.readings_ref, c.saved_ref, c.options); }, name,
                     b.fragment, c.pb.memory, c.readings, std::string("write_read_forward_saving, ") + name + ": " + b.what);
    }
  }
  // The backward (on the bank the saving forward leaves), each of its arguments broken in turn.
  c.reset();
  ASSERT_NO_THROW(write_read_forward_saving(c.args, c.readings_ref, c.saved_ref, c.options));
  for (const Breakage& b : breakages) {
    std::vector<const char*> names = {"memory",        "k_idx",           "k_val",       "v",     "beta", "g", "q_idx",
                                      "q_val",         "saved",           "grad_readings", "grad_final_bank",
                                      "grad_memory",   "grad_v"};
    for (const char* name : names) {
      c.reset();
      std::vector<std::pair<const char*, TensorRef*>> targets = c.inputs();
      targets.push_back({"saved", &c.saved_ref});
      targets.push_back({"grad_readings", &c.grad_readings_ref});
      targets.push_back({"grad_final_bank", &c.grad_final_bank_ref});
      targets.push_back({"grad_memory", &c.grads.memory});
      targets.push_back({"grad_v", &c.grads.v});
      for (auto& [n, ref] : targets) {
        if (std::string(n) == name) b.apply(*ref);
      }
      const HostTensor grad_v_before = c.grad_v.to(DType::f32);
      expect_refused([&] { write_read_backward(c.args, c.saved_ref, c.grad_readings_ref, c.grad_final_bank_ref, c.grads, c.options); },
                     name, b.fragment, c.pb.memory, c.readings, std::string("write_read_backward, ") + name + ": " + b.what);
      EXPECT_TRUE(c.grad_v.bitwise_equal(grad_v_before)) << name << ": " << b.what;
    }
  }
  c.reset();
  EXPECT_NO_THROW(write_read_backward(c.args, c.saved_ref, c.grad_readings_ref, c.grad_final_bank_ref, c.grads, c.options));
}

TEST(MalformedRefs, DecodeStepRefusesEachBrokenArgumentByName) {
  ProblemSpec spec = spec_of(3, 1, 3, 2, 4, 8, 1, DType::f32, 22);
  spec.beta_3d = true;
  const Problem pb = make_problem(spec);
  HostTensor readings = pb.make_readings(DType::f32);
  DecodeOptions options;
  options.slots_per_stream = spec.slots_per_stream;
  std::vector<Breakage> breakages = shape_breakages();
  breakages.push_back(no_data());
  for (const Breakage& b : breakages) {
    for (const char* name : {"memory", "k_idx", "k_val", "v", "beta", "g", "q_idx", "q_val", "readings"}) {
      WriteReadArgs args = pb.args();
      TensorRef out = readings.ref();
      std::vector<std::pair<const char*, TensorRef*>> targets = {
          {"memory", &args.memory}, {"k_idx", &args.k_idx}, {"k_val", &args.k_val}, {"v", &args.v},
          {"beta", &args.beta},     {"g", &args.g},         {"q_idx", &args.q_idx}, {"q_val", &args.q_val},
          {"readings", &out}};
      for (auto& [n, ref] : targets) {
        if (std::string(n) == name) b.apply(*ref);
      }
      expect_refused([&] { decode_step(args, out, options); }, name, b.fragment, pb.memory, readings,
                     std::string("decode_step, ") + name + ": " + b.what);
      // The float64 reference validates the same way.
      expect_refused([&] { reference::decode_step(args, out, options); }, name, b.fragment, pb.memory, readings,
                     std::string("reference::decode_step, ") + name + ": " + b.what);
    }
  }
  EXPECT_NO_THROW(decode_step(pb.args(), readings.ref(), options));
}

TEST(MalformedRefs, ReferenceRefusesEachBrokenArgumentByName) {
  ChunkedCall c;
  std::vector<Breakage> breakages = shape_breakages();
  breakages.push_back(no_data());
  for (const Breakage& b : breakages) {
    for (const char* name : {"memory", "k_idx", "k_val", "v", "beta", "g", "q_idx", "q_val", "readings"}) {
      c.reset();
      std::vector<std::pair<const char*, TensorRef*>> targets = c.inputs();
      targets.push_back({"readings", &c.readings_ref});
      for (auto& [n, ref] : targets) {
        if (std::string(n) == name) b.apply(*ref);
      }
      expect_refused([&] { reference::write_read_forward(c.args, c.readings_ref, c.options); }, name, b.fragment,
                     c.pb.memory, c.readings, std::string("reference::write_read_forward, ") + name + ": " + b.what);
    }
  }
}

// The shape-only entry points: malformed shapes are refused by name; data-less views accepted.
TEST(MalformedRefs, ShapeOnlyEntryPointsRefuseBrokenShapesAndAcceptDataLessViews) {
  ChunkedCall c;
  for (const Breakage& b : shape_breakages()) {
    for (auto& [name, ref] : c.inputs()) {
      c.reset();
      b.apply(*ref);
      const std::string context = std::string(name) + ": " + b.what;
      SCOPED_TRACE(context);
      expect_rejects<ValueError>([&] { check_write_read(c.args, c.readings_ref, c.options); }, name, {b.fragment});
      expect_rejects<ValueError>([&] { (void)plan_write_read(c.args, c.options); }, name, {b.fragment});
      expect_rejects<ValueError>([&] { (void)write_read_saved_bytes(c.args, c.options); }, name, {b.fragment});
    }
    c.reset();
    b.apply(c.readings_ref);
    expect_rejects<ValueError>([&] { check_write_read(c.args, c.readings_ref, c.options); }, "readings", {b.fragment});
  }
  // Every tensor data-less (as to_shape_ref in bindings/torch/tensor_ref.cpp makes them).
  c.reset();
  for (auto& entry : c.inputs()) entry.second->data = nullptr;
  c.readings_ref.data = nullptr;
  EXPECT_NO_THROW(check_write_read(c.args, c.readings_ref, c.options));
  EXPECT_NO_THROW((void)plan_write_read(c.args, c.options));
  EXPECT_EQ(write_read_saved_bytes(c.args, c.options), static_cast<std::size_t>(c.saved.numel()));

  ProblemSpec spec = spec_of(3, 1, 3, 2, 4, 8, 1, DType::f32, 23);
  spec.beta_3d = true;
  const Problem pb = make_problem(spec);
  HostTensor readings = pb.make_readings(DType::f32);
  for (const Breakage& b : shape_breakages()) {
    WriteReadArgs args = pb.args();
    b.apply(args.q_val);
    expect_rejects<ValueError>([&] { check_decode_step(args, readings.ref(), DecodeOptions{}); }, "q_val", {b.fragment});
  }
  WriteReadArgs args = pb.args();
  for (TensorRef* t : {&args.memory, &args.k_idx, &args.k_val, &args.v, &args.beta, &args.g, &args.q_idx, &args.q_val}) {
    t->data = nullptr;
  }
  TensorRef out = readings.ref();
  out.data = nullptr;
  EXPECT_NO_THROW(check_decode_step(args, out, DecodeOptions{}));
}

// An engine needs the readings it writes: an absent one is refused by name.
TEST(MalformedRefs, EnginesRequireTheReadings) {
  ChunkedCall c;
  expect_rejects<ValueError>([&] { write_read_forward(c.args, TensorRef{}, c.options); }, "readings", {"required"});
  expect_rejects<ValueError>([&] { write_read_forward_saving(c.args, TensorRef{}, c.saved_ref, c.options); }, "readings",
                             {"required"});
  ProblemSpec spec = spec_of(3, 1, 3, 2, 4, 8, 1, DType::f32, 24);
  spec.beta_3d = true;
  const Problem pb = make_problem(spec);
  expect_rejects<ValueError>([&] { decode_step(pb.args(), TensorRef{}, DecodeOptions{}); }, "readings", {"required"});
}

TEST(MalformedRefs, ProductKeyTopkRefusesEachBrokenArgumentByName) {
  const std::array<std::int64_t, 2> dims = {4, 4};
  const std::int64_t rows = 3, k = 5;
  HostTensor raw(DType::f32, {rows, 8});
  for (std::int64_t i = 0; i < raw.numel(); ++i) raw.set(i, 0.1 * static_cast<double>((i * 7) % 11));
  HostTensor values(DType::f32, {rows, k}), slots(DType::i64, {rows, k});
  HostTensor grad_values(DType::f32, {rows, k}), grad_raw(DType::f32, {rows, 8});
  std::vector<Breakage> breakages = shape_breakages();
  breakages.push_back(no_data());
  for (const Breakage& b : breakages) {
    for (const char* name : {"raw", "values", "slots"}) {
      TensorRef r = raw.ref(), v = values.ref(), s = slots.ref();
      b.apply(std::string(name) == "raw" ? r : std::string(name) == "values" ? v : s);
      const HostTensor slots_before = slots.to(DType::i64);
      SCOPED_TRACE(std::string("product_key_topk_forward, ") + name + ": " + b.what);
      expect_rejects<ValueError>([&] { product_key_topk_forward(r, dims, k, v, s); }, name, {b.fragment});
      EXPECT_TRUE(slots.bitwise_equal(slots_before));
    }
  }
  ASSERT_NO_THROW(product_key_topk_forward(raw.ref(), dims, k, values.ref(), slots.ref()));
  for (const Breakage& b : breakages) {
    for (const char* name : {"slots", "grad_values", "grad_raw"}) {
      TensorRef s = slots.ref(), gv = grad_values.ref(), gr = grad_raw.ref();
      b.apply(std::string(name) == "slots" ? s : std::string(name) == "grad_values" ? gv : gr);
      SCOPED_TRACE(std::string("product_key_topk_backward, ") + name + ": " + b.what);
      expect_rejects<ValueError>([&] { product_key_topk_backward(s, gv, dims, gr); }, name, {b.fragment});
    }
  }
  EXPECT_NO_THROW(product_key_topk_backward(slots.ref(), grad_values.ref(), dims, grad_raw.ref()));
  // The shape-only count: broken shapes refused, a data-less raw accepted.
  for (const Breakage& b : shape_breakages()) {
    TensorRef r = raw.ref();
    b.apply(r);
    expect_rejects<ValueError>([&] { (void)product_key_topk_selected(r, dims, k); }, "raw", {b.fragment});
  }
  TensorRef shape_only = raw.ref();
  shape_only.data = nullptr;
  EXPECT_EQ(product_key_topk_selected(shape_only, dims, k), k);
}

}  // namespace
}  // namespace sdm::testing

// A caller's plan handed to the saving forward and the backward (sdm/plan.hpp): the planned calls
// give the bits of the unplanned ones, and a plan made for other arguments or options is refused
// by naming "plan" and what differs, with nothing written.
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <string>

#include "sdm/error.hpp"
#include "sdm/ops.hpp"
#include "sdm/plan.hpp"
#include "support/expect_rejects.hpp"
#include "support/host_tensor.hpp"
#include "support/problem.hpp"

namespace sdm::testing {
namespace {

class PlanHandoff : public ::testing::Test {
 protected:
  PlanHandoff() : pb(make_problem(spec_of(2, 9, 3, 2, 6, 8, 1, DType::bf16, 21))) {
    options.slots_per_stream = pb.spec.slots_per_stream;
    options.chunk_size = 4;
    options.snapshot_quant = SnapshotQuant::fp8;
  }

  HostTensor new_saved(const WriteReadPlan& plan) const {
    return HostTensor(DType::u8, {static_cast<std::int64_t>(plan.saved_bytes)});
  }

  // A saving forward with `plan` on `args` that must be refused: "plan" and every fragment are
  // named, and the bank, the readings and `saved` are as they were.
  void expect_forward_refused(const WriteReadPlan& plan, const WriteReadArgs& args, const TensorRef& readings,
                              const WriteReadOptions& call_options, std::initializer_list<std::string> fragments) {
    HostTensor saved = new_saved(plan);
    const HostTensor bank_before = pb.memory.to(pb.memory.dtype());
    expect_rejects<ValueError>([&] { write_read_forward_saving(plan, args, readings, saved.ref(), call_options); },
                               "plan", fragments);
    EXPECT_TRUE(pb.memory.bitwise_equal(bank_before));
    EXPECT_TRUE(saved.bitwise_equal(new_saved(plan)));
  }

  Problem pb;
  WriteReadOptions options;
};

TEST_F(PlanHandoff, PlannedCallsGiveTheBitsOfUnplannedOnes) {
  const HostTensor bank0 = pb.memory.to(pb.memory.dtype());
  HostTensor readings_a = pb.make_readings(DType::bf16), readings_b = pb.make_readings(DType::bf16);
  const WriteReadPlan plan = plan_write_read(pb.args(), readings_a.ref(), options);
  EXPECT_EQ(plan.saved_bytes, write_read_saved_bytes(pb.args(), options));
  HostTensor saved_a = new_saved(plan), saved_b = new_saved(plan);
  write_read_forward_saving(plan, pb.args(), readings_a.ref(), saved_a.ref(), options);
  const HostTensor final_a = pb.memory.to(pb.memory.dtype());
  pb.memory = bank0.to(bank0.dtype());
  write_read_forward_saving(pb.args(), readings_b.ref(), saved_b.ref(), options);
  EXPECT_TRUE(readings_a.bitwise_equal(readings_b));
  EXPECT_TRUE(saved_a.bitwise_equal(saved_b));
  EXPECT_TRUE(pb.memory.bitwise_equal(final_a));

  const HostTensor dy = pb.make_readings(DType::f32);
  HostTensor grad_v_a(DType::f32, pb.v.sizes()), grad_v_b(DType::f32, pb.v.sizes());
  HostTensor grad_bank_a(plan.bank_grad, pb.memory.sizes()), grad_bank_b(plan.bank_grad, pb.memory.sizes());
  WriteReadGrads grads_a, grads_b;
  grads_a.v = grad_v_a.ref(), grads_a.memory = grad_bank_a.ref();
  grads_b.v = grad_v_b.ref(), grads_b.memory = grad_bank_b.ref();
  const HostTensor final_bank = pb.memory.to(pb.memory.dtype());
  write_read_backward(plan, pb.args(), saved_a.ref(), dy.ref(), TensorRef{}, grads_a, options);
  pb.memory = final_bank.to(final_bank.dtype());
  write_read_backward(pb.args(), saved_a.ref(), dy.ref(), TensorRef{}, grads_b, options);
  EXPECT_TRUE(grad_v_a.bitwise_equal(grad_v_b));
  EXPECT_TRUE(grad_bank_a.bitwise_equal(grad_bank_b));
}

TEST_F(PlanHandoff, APlanOfOtherTensorsIsRefusedByName) {
  HostTensor readings = pb.make_readings(DType::bf16);
  const WriteReadPlan plan = plan_write_read(pb.args(), readings.ref(), options);
  // Another problem of one more token: every tensor but the bank has other sizes; k_idx is named first.
  const Problem longer = make_problem(spec_of(2, 10, 3, 2, 6, 8, 1, DType::bf16, 21));
  HostTensor longer_readings = longer.make_readings(DType::bf16);
  expect_forward_refused(plan, longer.args(), longer_readings.ref(), options,
                         {"k_idx", "[2, 10, 3]", "[2, 9, 3]", "plan_write_read"});
  // One tensor of another dtype.
  WriteReadArgs args = pb.args();
  const HostTensor k_val_bf16 = pb.k_val.to(DType::bf16);
  args.k_val = k_val_bf16.ref();
  expect_forward_refused(plan, args, readings.ref(), options, {"k_val", "bfloat16", "float32"});
  // Readings other than the planned ones.
  HostTensor f32_readings = pb.make_readings(DType::f32);
  expect_forward_refused(plan, pb.args(), f32_readings.ref(), options, {"readings", "float32", "bfloat16"});
  // A plan made without readings does not serve a saving forward.
  const WriteReadPlan no_readings = plan_write_read(pb.args(), options);
  expect_forward_refused(no_readings, pb.args(), readings.ref(), options, {"readings", "absent in the plan"});
}

TEST_F(PlanHandoff, APlanOfOtherOptionsIsRefusedByName) {
  HostTensor readings = pb.make_readings(DType::bf16);
  const WriteReadPlan plan = plan_write_read(pb.args(), readings.ref(), options);
  const std::function<void(WriteReadOptions&)> changes[] = {
      [](WriteReadOptions& o) { o.chunk_size = 3; },
      [](WriteReadOptions& o) { o.slots_per_stream = 0; },
      [](WriteReadOptions& o) { o.snapshot_quant = SnapshotQuant::int4; },
      [](WriteReadOptions& o) { o.grad_bank_fp32 = true; },
  };
  const char* names[] = {"chunk_size", "slots_per_stream", "snapshot_quant", "grad_bank_fp32"};
  for (int i = 0; i < 4; ++i) {
    WriteReadOptions other = options;
    changes[i](other);
    expect_forward_refused(plan, pb.args(), readings.ref(), other, {names[i]});
  }
  // Options the plan does not depend on may differ.
  WriteReadOptions threads = options;
  threads.num_threads = 1;
  HostTensor saved = new_saved(plan);
  write_read_forward_saving(plan, pb.args(), readings.ref(), saved.ref(), threads);
}

TEST_F(PlanHandoff, TheBackwardRefusesAPlanOfOtherArguments) {
  HostTensor readings = pb.make_readings(DType::bf16);
  const WriteReadPlan plan = plan_write_read(pb.args(), readings.ref(), options);
  HostTensor saved = new_saved(plan);
  write_read_forward_saving(plan, pb.args(), readings.ref(), saved.ref(), options);
  WriteReadOptions other = options;
  other.grad_bank_fp32 = true;
  const HostTensor dy = pb.make_readings(DType::f32);
  HostTensor grad_v(DType::f32, pb.v.sizes());
  WriteReadGrads grads;
  grads.v = grad_v.ref();
  const HostTensor bank_before = pb.memory.to(pb.memory.dtype());
  expect_rejects<ValueError>([&] { write_read_backward(plan, pb.args(), saved.ref(), dy.ref(), TensorRef{}, grads, other); },
                             "plan", {"grad_bank_fp32", "true", "false"});
  EXPECT_TRUE(pb.memory.bitwise_equal(bank_before));
  EXPECT_TRUE(grad_v.bitwise_equal(HostTensor(DType::f32, pb.v.sizes())));
}

}  // namespace
}  // namespace sdm::testing

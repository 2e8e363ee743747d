// Entry-point rules that need the dispatcher (src/ops/dispatch.cpp): a meta bank (shapes only)
// is refused by every engine entry point, `saved` may not share memory with another argument,
// and an impossible slots_per_stream is refused before any work even with validate = false
// (where the index check would not run). Each rejected call must leave every buffer as it was.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <string>

#include "sdm/error.hpp"
#include "sdm/ops.hpp"
#include "sdm/plan.hpp"
#include "support/expect_rejects.hpp"
#include "support/host_tensor.hpp"
#include "support/problem.hpp"

namespace sdm::testing {
namespace {

class EntryPointRejects : public ::testing::Test {
 protected:
  EntryPointRejects() : pb(make_problem(spec_of(2, 7, 3, 2, 5, 8, 1, DType::f32, 11))) {
    options.slots_per_stream = pb.spec.slots_per_stream;
    options.chunk_size = 4;
    readings = pb.make_readings(DType::f32);
  }
  // `call` is rejected with ErrorT naming `argument`, and the bank and readings are unchanged.
  template <typename ErrorT>
  void expect_rejects_untouched(const std::function<void()>& call, const char* argument,
                                std::initializer_list<std::string> fragments) {
    const HostTensor bank_before = pb.memory.to(pb.memory.dtype());
    const HostTensor readings_before = readings.to(readings.dtype());
    expect_rejects<ErrorT>(call, argument, fragments);
    EXPECT_TRUE(pb.memory.bitwise_equal(bank_before));
    EXPECT_TRUE(readings.bitwise_equal(readings_before));
  }

  Problem pb;
  WriteReadOptions options;
  HostTensor readings;
};

TEST_F(EntryPointRejects, MetaBankIsRefusedByEveryEngineEntryPoint) {
  WriteReadArgs args = pb.args();
  args.memory.device = Device{DeviceType::meta, 0};
  for (TensorRef* t : {&args.k_idx, &args.k_val, &args.v, &args.beta, &args.g, &args.q_idx, &args.q_val}) {
    t->device = args.memory.device;
  }
  TensorRef out = readings.ref();
  out.device = args.memory.device;
  expect_rejects_untouched<ValueError>([&] { write_read_forward(args, out, options); }, "memory", {"meta"});
  // The saving forward and the backward, with a buffer of the (CPU-layout) planned size.
  const WriteReadPlan plan = plan_write_read(args, options);
  HostTensor storage(DType::u8, {static_cast<std::int64_t>(plan.saved_bytes)});
  TensorRef saved = storage.ref();
  saved.device = args.memory.device;
  expect_rejects_untouched<ValueError>([&] { write_read_forward_saving(args, out, saved, options); }, "memory",
                                       {"meta"});
  expect_rejects_untouched<ValueError>([&] { write_read_backward(args, saved, out, TensorRef{}, WriteReadGrads{}, options); },
                                       "memory", {"meta"});
  // The shape-only check accepts the same meta arguments.
  EXPECT_NO_THROW(check_write_read(args, out, options));

  // The decode step: one token per stream, every tensor on meta.
  ProblemSpec spec = spec_of(2, 1, 3, 2, 5, 8, 1, DType::f32, 13);
  spec.beta_3d = true;
  Problem one = make_problem(spec);
  WriteReadArgs decode_args = one.args();
  for (TensorRef* t : {&decode_args.memory, &decode_args.k_idx, &decode_args.k_val, &decode_args.v, &decode_args.beta,
                       &decode_args.g, &decode_args.q_idx, &decode_args.q_val}) {
    t->device = Device{DeviceType::meta, 0};
  }
  HostTensor decode_readings = one.make_readings(DType::f32);
  TensorRef decode_out = decode_readings.ref();
  decode_out.device = Device{DeviceType::meta, 0};
  const HostTensor bank_before = one.memory.to(DType::f32);
  expect_rejects<ValueError>([&] { decode_step(decode_args, decode_out, DecodeOptions{}); }, "memory", {"meta"});
  EXPECT_TRUE(one.memory.bitwise_equal(bank_before));
  EXPECT_NO_THROW(check_decode_step(decode_args, decode_out, DecodeOptions{}));
}

TEST_F(EntryPointRejects, MetaInputWithACpuBankNamesTheInput) {
  WriteReadArgs args = pb.args();
  args.v.device = Device{DeviceType::meta, 0};
  expect_rejects_untouched<ValueError>([&] { check_write_read(args, readings.ref(), options); }, "v",
                                       {"bank's device cpu", "got meta"});
  expect_rejects_untouched<ValueError>([&] { write_read_forward(args, readings.ref(), options); }, "v",
                                       {"got meta"});
}

TEST_F(EntryPointRejects, HugeSlotsPerStreamIsRefusedWithoutValidation) {
  options.validate = false;
  for (std::int64_t slots : {std::int64_t{1} << 62, INT64_MAX}) {
    options.slots_per_stream = slots;
    expect_rejects_untouched<ValueError>([&] { write_read_forward(pb.args(), readings.ref(), options); },
                                         "slots_per_stream", {"too large"});
    DecodeOptions decode;
    decode.slots_per_stream = slots;
    decode.validate = false;
    ProblemSpec spec = spec_of(2, 1, 3, 2, 5, 8, 1, DType::f32, 12);
    spec.beta_3d = true;  // decode's beta is [..., 1]
    Problem one = make_problem(spec);
    HostTensor one_readings = one.make_readings(DType::f32);
    const HostTensor before = one.memory.to(DType::f32);
    expect_rejects<ValueError>([&] { decode_step(one.args(), one_readings.ref(), decode); }, "slots_per_stream",
                               {"too large"});
    EXPECT_TRUE(one.memory.bitwise_equal(before));
  }
}

TEST_F(EntryPointRejects, SavedSharingTheBankOrAnInputIsRefused) {
  const auto bytes = static_cast<std::int64_t>(write_read_saved_bytes(pb.args(), options));
  // One allocation holding the saved buffer and, after it, a copy of v.
  HostTensor joint(DType::u8, {bytes + 256 + pb.v.numel() * 4});
  const TensorRef saved = TensorRef::contiguous(joint.ref().data, DType::u8, {bytes});
  WriteReadArgs args = pb.args();
  args.v.data = static_cast<std::uint8_t*>(joint.ref().data) + bytes - 4;  // overlaps saved's end
  expect_rejects_untouched<ValueError>([&] { write_read_forward_saving(args, readings.ref(), saved, options); },
                                       "v", {"shares memory with saved"});
  args.v.data = static_cast<std::uint8_t*>(joint.ref().data) + bytes + 256;  // beside it: fine
  std::copy_n(static_cast<const std::uint8_t*>(pb.v.ref().data), pb.v.numel() * 4,
              static_cast<std::uint8_t*>(args.v.data));
  EXPECT_NO_THROW(write_read_forward_saving(args, readings.ref(), saved, options));
}

TEST_F(EntryPointRejects, BackwardGradientSharingSavedIsRefused) {
  const auto bytes = static_cast<std::int64_t>(write_read_saved_bytes(pb.args(), options));
  HostTensor storage(DType::u8, {bytes});
  const TensorRef saved = storage.ref();
  write_read_forward_saving(pb.args(), readings.ref(), saved, options);
  const HostTensor saved_before = storage.to(DType::u8);
  const HostTensor dy = pb.make_readings(DType::f32);
  WriteReadGrads grads;
  grads.v = TensorRef::contiguous(saved.data, DType::f32, {pb.spec.P, pb.spec.T, pb.spec.hd});
  expect_rejects<ValueError>([&] { write_read_backward(pb.args(), saved, dy.ref(), TensorRef{}, grads, options); },
                             "saved", {"shares memory with grad_v"});
  EXPECT_TRUE(storage.bitwise_equal(saved_before));
}

}  // namespace
}  // namespace sdm::testing

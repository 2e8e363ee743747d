// The checks on the `saved` buffer of the saving forward and the backward (src/ops/dispatch.cpp,
// docs/spec.md §8): dtype, shape and size, device, start alignment. Each breaks one property of a valid
// buffer, expects the error naming `saved` with the rule in its message, and checks that the
// rejected call wrote nothing (bank, readings, gradients unchanged).
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <string>

#include "sdm/error.hpp"
#include "sdm/ops.hpp"
#include "support/expect_rejects.hpp"
#include "support/host_tensor.hpp"
#include "support/problem.hpp"

namespace sdm::testing {
namespace {

class SavedBufferChecks : public ::testing::Test {
 protected:
  SavedBufferChecks() : pb(make_problem(spec_of(2, 9, 3, 2, 6, 8, 1, DType::f32, 5))) {
    options.slots_per_stream = pb.spec.slots_per_stream;
    options.chunk_size = 4;
    bytes = static_cast<std::int64_t>(write_read_saved_bytes(pb.args(), options));
    // Room for a start 1 byte past an aligned address, as a view at an offset would have.
    storage = HostTensor(DType::u8, {bytes + static_cast<std::int64_t>(kSavedAlignment)});
    dy = HostTensor(DType::f32, pb.make_readings(DType::f32).sizes());
    grad_v = HostTensor(DType::f32, pb.v.sizes());
  }

  // A valid saved buffer (the storage's aligned start), or the same bytes one byte later.
  TensorRef saved_at(std::int64_t offset) const {
    return TensorRef::contiguous(static_cast<std::uint8_t*>(storage.ref().data) + offset, DType::u8, {bytes});
  }

  // Runs the saving forward, then the backward, with `saved`; checks that a rejected call left
  // the bank, the readings and the gradient untouched.
  void expect_both_reject(const TensorRef& saved, const std::function<void(const std::function<void()>&)>& expect) {
    const HostTensor bank_before = pb.memory.to(pb.memory.dtype());
    HostTensor readings = pb.make_readings(DType::f32);
    expect([&] { write_read_forward_saving(pb.args(), readings.ref(), saved, options); });
    EXPECT_TRUE(pb.memory.bitwise_equal(bank_before));
    EXPECT_TRUE(readings.bitwise_equal(pb.make_readings(DType::f32)));
    WriteReadGrads grads;
    grads.v = grad_v.ref();
    expect([&] { write_read_backward(pb.args(), saved, dy.ref(), TensorRef{}, grads, options); });
    EXPECT_TRUE(pb.memory.bitwise_equal(bank_before));
    EXPECT_TRUE(grad_v.bitwise_equal(HostTensor(DType::f32, pb.v.sizes())));
  }

  Problem pb;
  WriteReadOptions options;
  std::int64_t bytes = 0;
  HostTensor storage, dy, grad_v;
};

TEST_F(SavedBufferChecks, AValidBufferIsAccepted) {
  ASSERT_EQ(reinterpret_cast<std::uintptr_t>(storage.ref().data) % kSavedAlignment, 0u);
  HostTensor readings = pb.make_readings(DType::f32);
  write_read_forward_saving(pb.args(), readings.ref(), saved_at(0), options);
  WriteReadGrads grads;
  grads.v = grad_v.ref();
  write_read_backward(pb.args(), saved_at(0), dy.ref(), TensorRef{}, grads, options);
}

TEST_F(SavedBufferChecks, RejectsAnotherDtype) {
  HostTensor as_f32(DType::f32, {bytes / 4});
  expect_both_reject(as_f32.ref(), [](const std::function<void()>& call) {
    expect_rejects<TypeError>(call, "saved", {"saved must be uint8", "got float32"});
  });
}

TEST_F(SavedBufferChecks, RejectsAnotherSize) {
  const TensorRef short_by_one =
      TensorRef::contiguous(storage.ref().data, DType::u8, {bytes - 1});
  expect_both_reject(short_by_one, [&](const std::function<void()>& call) {
    expect_rejects<ValueError>(call, "saved", {"contiguous 1-D uint8 buffer of " + std::to_string(bytes) + " bytes"});
  });
}

TEST_F(SavedBufferChecks, RejectsTwoDimensions) {
  const TensorRef two_d = TensorRef::contiguous(storage.ref().data, DType::u8, {1, bytes});
  expect_both_reject(two_d, [](const std::function<void()>& call) {
    expect_rejects<ValueError>(call, "saved", {"contiguous 1-D uint8 buffer"});
  });
}

TEST_F(SavedBufferChecks, RejectsAnotherDevice) {
  TensorRef on_cuda = saved_at(0);
  on_cuda.device = Device{DeviceType::cuda, 0};
  expect_both_reject(on_cuda, [](const std::function<void()>& call) {
    expect_rejects<ValueError>(call, "saved", {"saved must be on cpu", "got cuda:0"});
  });
}

TEST_F(SavedBufferChecks, RejectsAMisalignedStart) {
  expect_both_reject(saved_at(1), [](const std::function<void()>& call) {
    expect_rejects<ValueError>(call, "saved", {"16-byte aligned address", "1 bytes past a multiple of 16"});
  });
}

}  // namespace
}  // namespace sdm::testing

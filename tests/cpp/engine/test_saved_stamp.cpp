// The stamp of the saving forward's `saved` buffer (src/core/saved_header.hpp, docs/spec.md §11):
// with validate, the backward refuses a buffer not made for its call (another call's shape or
// options, other index values, an overwritten or foreign stamp) by naming `saved` and the field
// that differs, and writes nothing; with validate=False the buffer is trusted, as the indices are.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <string>

#include "core/saved_header.hpp"
#include "sdm/error.hpp"
#include "sdm/ops.hpp"
#include "support/expect_rejects.hpp"
#include "support/host_tensor.hpp"
#include "support/problem.hpp"

namespace sdm::testing {
namespace {

class SavedStamp : public ::testing::Test {
 protected:
  SavedStamp() : pb(make_problem(spec_of(2, 9, 3, 2, 6, 8, 1, DType::f32, 11))) {
    options.slots_per_stream = pb.spec.slots_per_stream;
    options.chunk_size = 4;
    saved = HostTensor(DType::u8, {static_cast<std::int64_t>(write_read_saved_bytes(pb.args(), options))});
    HostTensor readings = pb.make_readings(DType::f32);
    write_read_forward_saving(pb.args(), readings.ref(), saved.ref(), options);
    dy = HostTensor(DType::f32, pb.make_readings(DType::f32).sizes());
    grad_v = HostTensor(DType::f32, pb.v.sizes());
  }

  core::SavedHeader header() const {
    core::SavedHeader h;
    std::memcpy(&h, saved.ref().data, sizeof h);
    return h;
  }
  void set_header(const core::SavedHeader& h) { std::memcpy(saved.ref().data, &h, sizeof h); }

  void backward() {
    WriteReadGrads grads;
    grads.v = grad_v.ref();
    write_read_backward(pb.args(), saved.ref(), dy.ref(), TensorRef{}, grads, options);
  }

  // The backward refuses `saved` with every fragment in its message and leaves the bank and the
  // gradient as they were.
  void expect_refused(std::initializer_list<std::string> fragments) {
    const HostTensor bank_before = pb.memory.to(pb.memory.dtype());
    expect_rejects<ValueError>([&] { backward(); }, "saved", fragments);
    EXPECT_TRUE(pb.memory.bitwise_equal(bank_before));
    EXPECT_TRUE(grad_v.bitwise_equal(HostTensor(DType::f32, pb.v.sizes())));
  }

  Problem pb;
  WriteReadOptions options;
  HostTensor saved, dy, grad_v;
};

TEST_F(SavedStamp, TheForwardStampsItsCall) {
  const core::SavedHeader h = header();
  EXPECT_EQ(h.magic, core::kSavedMagic);
  EXPECT_EQ(h.version, core::kSavedVersion);
  EXPECT_EQ(h.engine, static_cast<std::uint64_t>(core::SavedEngine::cpu));
  EXPECT_EQ(h.fields[0], 2);  // P
  EXPECT_EQ(h.fields[2], 3);  // W
  EXPECT_EQ(h.fields[8], 4);  // C
  EXPECT_EQ(h.index_hash, core::index_hash_on_host(pb.args()));
  backward();  // its own call is accepted
}

TEST_F(SavedStamp, OtherIndexValuesAreRefused) {
  // Still a valid call (a read slot of stream 0 moved to another row of stream 0).
  auto* q = pb.q_idx.ref().data_as<std::int32_t>();
  q[5] = (q[5] + 1) % static_cast<std::int32_t>(pb.spec.slots_per_stream);
  expect_refused({"other index values", "k_idx and q_idx"});
}

TEST_F(SavedStamp, AnotherCallsFieldIsNamedWithBothValues) {
  core::SavedHeader h = header();
  h.fields[2] = 4;  // made for W = 4
  set_header(h);
  expect_refused({"writes per token W = 4", "this call has 3"});
}

TEST_F(SavedStamp, AnotherSnapshotModeIsNamed) {
  core::SavedHeader h = header();
  h.fields[10] = static_cast<std::int64_t>(SnapshotQuant::fp8);
  set_header(h);
  expect_refused({"snapshot_quant (effective) = fp8", "this call has none"});
}

TEST_F(SavedStamp, AnotherEnginesLayoutIsRefused) {
  core::SavedHeader h = header();
  h.engine = static_cast<std::uint64_t>(core::SavedEngine::cuda);
  set_header(h);
  expect_refused({"made by the cuda engine", "this call runs the cpu engine"});
}

TEST_F(SavedStamp, AnotherFormatVersionIsRefused) {
  core::SavedHeader h = header();
  h.version = core::kSavedVersion + 1;
  set_header(h);
  expect_refused({"format version " + std::to_string(core::kSavedVersion + 1),
                  "reads version " + std::to_string(core::kSavedVersion)});
}

TEST_F(SavedStamp, RandomBytesAreRefused) {
  auto* bytes = saved.ref().data_as<std::uint8_t>();
  std::uint32_t state = 12345;
  for (std::int64_t i = 0; i < saved.ref().numel(); ++i) {
    state = state * 1664525u + 1013904223u;
    bytes[i] = static_cast<std::uint8_t>(state >> 24);
  }
  expect_refused({"does not start with the stamp"});
}

TEST_F(SavedStamp, WithoutValidateTheBufferIsTrusted) {
  core::SavedHeader h = header();
  h.fields[2] = 4;
  set_header(h);
  options.validate = false;
  backward();  // no check made: the caller vouches for the buffer
  SUCCEED();
}

}  // namespace
}  // namespace sdm::testing

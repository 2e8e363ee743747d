// The CPU index check splits the streams over the engine's threads (src/ops/dispatch.cpp):
// with bad indices in several streams it must still report the lowest failing stream, as
// the sequential check (core::check_write_read_indices) does, for any thread count, in the
// forward and the saving forward (the backward runs the same helper).
#include <gtest/gtest.h>

#include <string>

#include "sdm/error.hpp"
#include "sdm/ops.hpp"
#include "support/engine_run.hpp"
#include "support/expect_rejects.hpp"
#include "support/problem.hpp"

namespace sdm::testing {
namespace {

TEST(IndexCheckThreads, TheLowestFailingStreamIsReportedOnAnyThreadCount) {
  ProblemSpec spec = spec_of(5, 12, 3, 2, 8, 16, 1, DType::f32, 61);
  Problem pb = make_problem(spec);
  // Stream 3: an out-of-range write slot at token 2; stream 1: a repeated write slot at
  // token 7 (lane 2 repeats lane 0); stream 4: an out-of-range read at token 0.
  pb.k_idx.set((3 * spec.T + 2) * spec.W + 1, static_cast<double>(3 * spec.slots_per_stream - 1));
  const std::int64_t repeat = (1 * spec.T + 7) * spec.W;
  pb.k_idx.set(repeat + 2, pb.k_idx.get(repeat));
  pb.q_idx.set((4 * spec.T + 0) * spec.R + 1, 0);
  for (int threads : {1, 2, 3, 7}) {
    SCOPED_TRACE(::testing::Message() << "threads " << threads);
    WriteReadOptions options;
    options.slots_per_stream = spec.slots_per_stream;
    options.chunk_size = 4;
    options.num_threads = threads;
    const std::initializer_list<std::string> fragments = {"k_idx[stream 1, token 7, lane 2]", "repeats lane 0"};
    expect_rejects<ValueError>([&] { engine_forward(pb, options); }, "k_idx", fragments);
    expect_rejects<ValueError>([&] { engine_forward_saving(pb, options); }, "k_idx", fragments);
  }
}

}  // namespace
}  // namespace sdm::testing

// The float64 reference against the golden vectors of tests/data/golden_f64.json, computed by
// an independent float64 implementation (tests/data/README.md): readings, final bank and every
// gradient, f64 bank, to 1e-12 relative (max|a - b| / max|b|).
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "support/golden.hpp"
#include "sdm/reference.hpp"

namespace sdm::testing {
namespace {

constexpr double kTolerance = 1e-12;

WriteReadOptions options_for(const GoldenCase& gc) {
  WriteReadOptions options;
  options.slots_per_stream = gc.problem.spec.slots_per_stream;
  return options;
}

TEST(Golden, FileHasTheDocumentedCases) {
  const auto cases = load_golden_cases();
  ASSERT_EQ(cases.size(), 4u);
  bool per_write_decay = false, several_streams = false;
  for (const auto& gc : cases) {
    per_write_decay |= gc.problem.spec.G > 1;
    several_streams |= gc.problem.spec.P > 1;
  }
  EXPECT_TRUE(per_write_decay);
  EXPECT_TRUE(several_streams);
}

TEST(Golden, ForwardMatches) {
  for (const auto& gc : load_golden_cases()) {
    SCOPED_TRACE(gc.name);
    HostTensor bank = gc.problem.memory.to(DType::f64);
    HostTensor readings(DType::f64, gc.readings.sizes());
    WriteReadArgs args = gc.problem.args();
    args.memory = bank.ref();
    reference::write_read_forward(args, readings.ref(), options_for(gc));
    const double e_readings = rel_error(readings, gc.readings);
    const double e_bank = rel_error(bank, gc.final_bank);
    std::printf("[golden %s] forward rel error: readings %.3g, final bank %.3g\n", gc.name.c_str(), e_readings,
                e_bank);
    EXPECT_LE(e_readings, kTolerance);
    EXPECT_LE(e_bank, kTolerance);
  }
}

TEST(Golden, BackwardMatches) {
  for (const auto& gc : load_golden_cases()) {
    SCOPED_TRACE(gc.name);
    const Problem& pb = gc.problem;
    HostTensor d_memory(DType::f64, pb.memory.sizes()), d_k_val(DType::f64, pb.k_val.sizes());
    HostTensor d_v(DType::f64, pb.v.sizes()), d_beta(DType::f64, pb.beta.sizes());
    HostTensor d_g(DType::f64, pb.g.sizes()), d_q_val(DType::f64, pb.q_val.sizes());
    const WriteReadGrads grads{d_memory.ref(), d_k_val.ref(), d_v.ref(), d_beta.ref(), d_g.ref(), d_q_val.ref()};
    const HostTensor initial = pb.memory.to(DType::f64);
    reference::write_read_backward(pb.args(), gc.weight_readings.ref(), gc.weight_final_bank.ref(), grads,
                                   options_for(gc));
    EXPECT_TRUE(pb.memory.bitwise_equal(initial)) << "the backward modified the initial bank";

    const struct {
      const char* name;
      const HostTensor& got;
      const HostTensor& expected;
    } checks[] = {{"memory", d_memory, gc.grad_memory}, {"k_val", d_k_val, gc.grad_k_val},
                  {"v", d_v, gc.grad_v},                {"beta", d_beta, gc.grad_beta},
                  {"g", d_g, gc.grad_g},                {"q_val", d_q_val, gc.grad_q_val}};
    std::string line;
    for (const auto& check : checks) {
      const double e = rel_error(check.got, check.expected);
      char buffer[64];
      std::snprintf(buffer, sizeof buffer, " %s %.3g", check.name, e);
      line += buffer;
      EXPECT_LE(e, kTolerance) << "gradient of " << check.name;
    }
    std::printf("[golden %s] backward rel error:%s\n", gc.name.c_str(), line.c_str());
  }
}

}  // namespace
}  // namespace sdm::testing

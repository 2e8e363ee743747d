// The CPU engine gives the same bits on every bf16 store path (bf16_store.hpp: baseline
// x86-64 vectors vs AVX2 vs AVX-512, chosen at run time): a full saving forward + backward on a bf16
// bank with bf16 gradient rows, forced through each path, compared bitwise.
#include <gtest/gtest.h>

#include <string>

#include "cpu/engine/bf16_store.hpp"
#include "cpu/engine/row_kernels_avx512.hpp"
#include "support/engine_run.hpp"

namespace sdm::testing {
namespace {

struct FullRun {
  ForwardRun forward;
  GradRun grads;
};

FullRun full_run_on(cpu::Bf16StorePath path, const Problem& pb, const WriteReadOptions& options,
                    const HostTensor& dy, const HostTensor& d_final) {
  cpu::set_bf16_store_path(path);
  FullRun run;
  run.forward = engine_forward_saving(pb, options);
  run.grads = engine_backward(pb, run.forward, dy, d_final, options, DType::bf16);
  cpu::set_bf16_store_path(cpu::Bf16StorePath::automatic);
  return run;
}

// Each wide path against the baseline; a path this CPU lacks is skipped.
void check_bf16_store_path_agrees(cpu::Bf16StorePath path) {
  // hd 70: whole 16-column blocks plus a tail; T 90 with C 16: a partial last chunk.
  const ProblemSpec spec = spec_of(3, 90, 3, 4, 70, 24, 3, DType::bf16, 140);
  const Problem pb = make_problem(spec);
  const HostTensor dy = random_tensor({spec.P, spec.T, spec.hd}, 1.0, 141);
  const HostTensor d_final = random_tensor({pb.bank_rows(), spec.hd}, 1.0, 142);
  WriteReadOptions options;
  options.slots_per_stream = spec.slots_per_stream;
  options.chunk_size = 16;
  options.num_threads = 2;
  const FullRun base = full_run_on(cpu::Bf16StorePath::baseline, pb, options, dy, d_final);
  const FullRun wide = full_run_on(path, pb, options, dy, d_final);
  EXPECT_TRUE(base.forward.readings.bitwise_equal(wide.forward.readings)) << "readings";
  EXPECT_TRUE(base.forward.final_bank.bitwise_equal(wide.forward.final_bank)) << "final bank";
  EXPECT_TRUE(base.forward.saved.bitwise_equal(wide.forward.saved)) << "saved";
  EXPECT_TRUE(base.grads.memory.bitwise_equal(wide.grads.memory)) << "grad memory";
  EXPECT_TRUE(base.grads.k_val.bitwise_equal(wide.grads.k_val)) << "grad k_val";
  EXPECT_TRUE(base.grads.v.bitwise_equal(wide.grads.v)) << "grad v";
  EXPECT_TRUE(base.grads.g.bitwise_equal(wide.grads.g)) << "grad g";
  EXPECT_TRUE(base.grads.q_val.bitwise_equal(wide.grads.q_val)) << "grad q_val";
  EXPECT_TRUE(base.grads.bank_after.bitwise_equal(wide.grads.bank_after)) << "restored bank";
}

TEST(EngineIsaPaths, Bf16StorePathsAgreeBitwise) {
  if (!cpu::bf16_store_path_available(cpu::Bf16StorePath::avx2)) GTEST_SKIP() << "this CPU has no AVX2";
  check_bf16_store_path_agrees(cpu::Bf16StorePath::avx2);
}

TEST(EngineIsaPaths, Bf16StoreAvx512PathAgreesBitwise) {
  if (!cpu::bf16_store_path_available(cpu::Bf16StorePath::avx512)) GTEST_SKIP() << "this CPU has no AVX-512";
  check_bf16_store_path_agrees(cpu::Bf16StorePath::avx512);
}

// The same on the row-kernel paths (row_kernels_avx512.hpp: baseline 4-wide vectors vs the
// row-blocked AVX-512 sums and 8-lane dots), with an f32 and a bf16 bank; hd 150: one whole
// 128-column block, a partial one and a masked tail.
FullRun full_run_on(cpu::RowKernelPath path, const Problem& pb, const WriteReadOptions& options,
                    const HostTensor& dy, const HostTensor& d_final, DType grad_dtype) {
  cpu::set_row_kernel_path(path);
  FullRun run;
  run.forward = engine_forward_saving(pb, options);
  run.grads = engine_backward(pb, run.forward, dy, d_final, options, grad_dtype);
  cpu::set_row_kernel_path(cpu::RowKernelPath::automatic);
  return run;
}

TEST(EngineIsaPaths, RowKernelPathsAgreeBitwise) {
  if (!cpu::row_kernel_path_available(cpu::RowKernelPath::avx512)) GTEST_SKIP() << "this CPU has no AVX-512";
  for (const DType bank : {DType::bf16, DType::f32}) {
    const ProblemSpec spec = spec_of(3, 90, 3, 4, 150, 24, 3, bank, 150);
    const Problem pb = make_problem(spec);
    const HostTensor dy = random_tensor({spec.P, spec.T, spec.hd}, 1.0, 151);
    const HostTensor d_final = random_tensor({pb.bank_rows(), spec.hd}, 1.0, 152);
    WriteReadOptions options;
    options.slots_per_stream = spec.slots_per_stream;
    options.chunk_size = 16;
    options.num_threads = 2;
    const FullRun base = full_run_on(cpu::RowKernelPath::baseline, pb, options, dy, d_final, bank);
    const FullRun wide = full_run_on(cpu::RowKernelPath::avx512, pb, options, dy, d_final, bank);
    SCOPED_TRACE(bank == DType::bf16 ? "bf16 bank" : "f32 bank");
    EXPECT_TRUE(base.forward.readings.bitwise_equal(wide.forward.readings)) << "readings";
    EXPECT_TRUE(base.forward.final_bank.bitwise_equal(wide.forward.final_bank)) << "final bank";
    EXPECT_TRUE(base.forward.saved.bitwise_equal(wide.forward.saved)) << "saved";
    EXPECT_TRUE(base.grads.memory.bitwise_equal(wide.grads.memory)) << "grad memory";
    EXPECT_TRUE(base.grads.k_val.bitwise_equal(wide.grads.k_val)) << "grad k_val";
    EXPECT_TRUE(base.grads.v.bitwise_equal(wide.grads.v)) << "grad v";
    EXPECT_TRUE(base.grads.g.bitwise_equal(wide.grads.g)) << "grad g";
    EXPECT_TRUE(base.grads.q_val.bitwise_equal(wide.grads.q_val)) << "grad q_val";
    EXPECT_TRUE(base.grads.bank_after.bitwise_equal(wide.grads.bank_after)) << "restored bank";
  }
}

}  // namespace
}  // namespace sdm::testing

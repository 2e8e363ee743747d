// A write slot repeated among the W lanes of one token with validate = false (docs/spec.md §8):
// the token's first lane naming the row writes it, every later lane naming it is masked like an
// out-of-range entry. So a call with repeats equals, bitwise, the same call with each repeating
// lane given an out-of-range index instead (the CPU engine's forward, saving forward, backward and
// decode step), the float64 reference applies the same rule, and a repeated lane's k_val (and,
// for per-lane decay, g) gets a zero gradient. Includes the GPU test's heavy case (tests/gpu): one
// slot written by every lane of every token of a 64-token chunk.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "sdm/ops.hpp"
#include "sdm/reference.hpp"
#include "support/engine_run.hpp"
#include "support/host_tensor.hpp"
#include "support/problem.hpp"

namespace sdm::testing {
namespace {

// One repeat: token (p, t)'s lane `lane` names the slot of its lane `source` (< lane).
struct Repeat {
  std::int64_t p, t, lane, source;
};

// The problem with the repeats applied, and its twin with each repeating lane masked (an index
// at its stream's end, outside its rows).
struct Twins {
  Problem repeated, masked;
};

Twins make_twins(const ProblemSpec& spec, const std::vector<Repeat>& repeats) {
  Twins out{make_problem(spec), Problem{}};
  out.masked = out.repeated;
  for (const Repeat& r : repeats) {
    const std::int64_t token = r.p * spec.T + r.t;
    out.repeated.k_idx.set(token * spec.W + r.lane, out.repeated.k_idx.get(token * spec.W + r.source));
    out.masked.k_idx.set(token * spec.W + r.lane, static_cast<double>((r.p + 1) * spec.slots_per_stream));
  }
  return out;
}

WriteReadOptions unchecked(const ProblemSpec& spec, std::int64_t C) {
  WriteReadOptions o;
  o.slots_per_stream = spec.slots_per_stream;
  o.chunk_size = C;
  o.validate = false;
  return o;
}

double tolerance(DType bank) { return bank == DType::f32 ? 1e-4 : 2e-2; }

// Forward, saving forward and backward with repeats equal the masked twin bitwise; the reference
// (which masks on its own) agrees with both.
void expect_first_lane_writes(const ProblemSpec& spec, const std::vector<Repeat>& repeats, std::int64_t C) {
  SCOPED_TRACE("C " + std::to_string(C) + " W " + std::to_string(spec.W) + " G " + std::to_string(spec.G) + " bank " +
               dtype_name(spec.bank));
  const Twins twins = make_twins(spec, repeats);
  const WriteReadOptions options = unchecked(spec, C);
  const ForwardRun got = engine_forward(twins.repeated, options);
  const ForwardRun want = engine_forward(twins.masked, options);
  EXPECT_TRUE(got.readings.bitwise_equal(want.readings));
  EXPECT_TRUE(got.final_bank.bitwise_equal(want.final_bank));
  const ForwardRun ref = reference_forward(twins.repeated, options);
  const ForwardRun ref_masked = reference_forward(twins.masked, options);
  EXPECT_TRUE(ref.readings.bitwise_equal(ref_masked.readings));
  EXPECT_LE(rel_error(got.readings, ref.readings), tolerance(spec.bank));
  EXPECT_LE(rel_error(got.final_bank, ref.final_bank), tolerance(spec.bank));

  const ForwardRun saving = engine_forward_saving(twins.repeated, options);
  const ForwardRun saving_masked = engine_forward_saving(twins.masked, options);
  EXPECT_TRUE(saving.readings.bitwise_equal(want.readings));
  const HostTensor dy = random_tensor({spec.P, spec.T, spec.hd}, 1.0, 5);
  const HostTensor dbank = random_tensor({twins.repeated.bank_rows(), spec.hd}, 0.5, 6);
  const GradRun grads = engine_backward(twins.repeated, saving, dy, dbank, options, DType::f32);
  const GradRun grads_masked = engine_backward(twins.masked, saving_masked, dy, dbank, options, DType::f32);
  EXPECT_TRUE(grads.memory.bitwise_equal(grads_masked.memory));
  EXPECT_TRUE(grads.k_val.bitwise_equal(grads_masked.k_val));
  EXPECT_TRUE(grads.v.bitwise_equal(grads_masked.v));
  EXPECT_TRUE(grads.beta.bitwise_equal(grads_masked.beta));
  EXPECT_TRUE(grads.g.bitwise_equal(grads_masked.g));
  EXPECT_TRUE(grads.q_val.bitwise_equal(grads_masked.q_val));
  for (const Repeat& r : repeats) {
    const std::int64_t entry = (r.p * spec.T + r.t) * spec.W + r.lane;
    EXPECT_EQ(grads.k_val.get(entry), 0.0) << "k_val gradient of a repeated lane";
    if (spec.G == spec.W && spec.W > 1) {
      EXPECT_EQ(grads.g.get(entry), 0.0) << "g gradient of a repeated lane";
    }
  }
  const GradRun ref_grads = reference_backward(twins.repeated, dy, dbank, options);
  EXPECT_LE(rel_error(grads.v, ref_grads.v), tolerance(spec.bank));
  EXPECT_LE(rel_error(grads.k_val, ref_grads.k_val), tolerance(spec.bank));
  EXPECT_LE(rel_error(grads.memory, ref_grads.memory), tolerance(spec.bank));
}

TEST(RepeatedWriteSlots, TheFirstLaneWritesAndTheRepeatsAreMasked) {
  for (DType bank : {DType::f32, DType::bf16}) {
    for (std::int64_t G : {std::int64_t{1}, std::int64_t{4}}) {
      ProblemSpec spec = spec_of(2, 9, 4, 3, 5, 10, G, bank, 31);
      // Every lane of token (0, 3) on lane 0's slot; single repeats elsewhere (lane 2 of (1, 5)
      // repeats lane 1, lane 3 of (0, 7) repeats lane 0, and of (1, 8) lane 2).
      const std::vector<Repeat> repeats = {{0, 3, 1, 0}, {0, 3, 2, 0}, {0, 3, 3, 0}, {1, 5, 2, 1},
                                           {0, 7, 3, 0}, {1, 8, 3, 2}};
      for (std::int64_t C : {1, 4, 9}) expect_first_lane_writes(spec, repeats, C);
    }
  }
}

// The GPU test's case (tests/gpu): one slot written by every lane of every token of a chunk,
// C * W entries naming one row of one chunk (more than the 511 a 9-bit group size could hold).
TEST(RepeatedWriteSlots, OneSlotWrittenByEveryLaneOfEveryTokenOfAChunk) {
  ProblemSpec spec = spec_of(1, 64, 16, 4, 8, 40, 16, DType::f32, 32);
  spec.beta_max = 0.05;
  // Lane 0 of every token names slot 3 (legal: a slot written by every token); lanes 1.. repeat
  // it in one twin and are masked in the other.
  Twins twins = make_twins(spec, {});
  for (std::int64_t t = 0; t < spec.T; ++t) {
    for (Problem* pb : {&twins.repeated, &twins.masked}) {
      // Lane 0 takes slot 3; a lane that held slot 3 takes lane 0's former slot (still distinct).
      const double former = pb->k_idx.get(t * spec.W);
      for (std::int64_t w = 1; w < spec.W; ++w) {
        if (pb->k_idx.get(t * spec.W + w) == 3.0) pb->k_idx.set(t * spec.W + w, former);
      }
      pb->k_idx.set(t * spec.W, 3.0);
    }
    for (std::int64_t w = 1; w < spec.W; ++w) {
      twins.repeated.k_idx.set(t * spec.W + w, 3.0);
      twins.masked.k_idx.set(t * spec.W + w, static_cast<double>(spec.slots_per_stream));
    }
  }
  const WriteReadOptions options = unchecked(spec, 64);
  const ForwardRun got = engine_forward(twins.repeated, options);
  const ForwardRun want = engine_forward(twins.masked, options);
  EXPECT_TRUE(got.readings.bitwise_equal(want.readings));
  EXPECT_TRUE(got.final_bank.bitwise_equal(want.final_bank));
  const ForwardRun ref = reference_forward(twins.repeated, options);
  EXPECT_LE(rel_error(got.readings, ref.readings), 1e-4);
  const ForwardRun saving = engine_forward_saving(twins.repeated, options);
  const HostTensor dy = random_tensor({spec.P, spec.T, spec.hd}, 1.0, 7);
  const GradRun grads = engine_backward(twins.repeated, saving, dy, HostTensor{}, options, DType::f32);
  const GradRun ref_grads = reference_backward(twins.repeated, dy, HostTensor{}, options);
  EXPECT_LE(rel_error(grads.k_val, ref_grads.k_val), 1e-4);
  EXPECT_LE(rel_error(grads.g, ref_grads.g), 1e-4);
  EXPECT_LE(rel_error(grads.memory, ref_grads.memory), 1e-4);
  EXPECT_LE(rel_error(grads.v, ref_grads.v), 1e-4);
}

TEST(RepeatedWriteSlots, DecodeStepFirstLaneWrites) {
  for (DType bank : {DType::f32, DType::bf16}) {
    for (std::int64_t G : {std::int64_t{1}, std::int64_t{4}}) {
      ProblemSpec spec = spec_of(3, 1, 4, 3, 6, 10, G, bank, 33);
      spec.beta_3d = true;
      const Twins twins = make_twins(spec, {{1, 0, 1, 0}, {1, 0, 2, 0}, {1, 0, 3, 0}, {2, 0, 3, 1}});
      for (std::int64_t sps : {std::int64_t{0}, spec.slots_per_stream}) {
        DecodeOptions options;
        options.slots_per_stream = sps;
        options.validate = false;
        Problem a = twins.repeated, b = twins.masked, c = twins.repeated;
        if (sps == 0) {
          // Rows are only bounded by the bank: mask with an index past it.
          for (std::int64_t i = 0; i < b.k_idx.numel(); ++i) {
            if (b.k_idx.get(i) != a.k_idx.get(i)) b.k_idx.set(i, static_cast<double>(a.bank_rows()));
          }
        }
        HostTensor ya = a.make_readings(bank), yb = b.make_readings(bank);
        decode_step(a.args(), ya.ref(), options);
        decode_step(b.args(), yb.ref(), options);
        EXPECT_TRUE(ya.bitwise_equal(yb)) << "sps " << sps;
        EXPECT_TRUE(a.memory.bitwise_equal(b.memory)) << "sps " << sps;
        HostTensor yr(DType::f64, ya.sizes());
        HostTensor ref_bank = c.memory.to(DType::f64);
        WriteReadArgs ref_args = c.args();
        ref_args.memory = ref_bank.ref();
        reference::decode_step(ref_args, yr.ref(), options);
        EXPECT_LE(rel_error(ya, yr), bank == DType::f32 ? 1e-5 : 2e-2) << "sps " << sps;
      }
    }
  }
}

}  // namespace
}  // namespace sdm::testing

// Properties of the CPU engine (docs/spec.md §11-Z.6), through the public entry points:
// chunk-size invariance (tolerance), no-grad == saving forward (bitwise), thread-count
// invariance and run-to-run determinism (bitwise), the backward's in-place restore of the
// bank (bitwise), untouched rows (bitwise), validate=false with out-of-range indices
// (nothing outside the bank touched), NaN isolation between streams, grad_bank_fp32, and
// that the backward modifies neither `saved` nor its inputs.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <set>
#include <vector>

#include "core/float_convert.hpp"
#include "support/engine_run.hpp"

namespace sdm::testing {
namespace {

WriteReadOptions options_for(const ProblemSpec& spec, std::int64_t chunk) {
  WriteReadOptions o;
  o.slots_per_stream = spec.slots_per_stream;
  o.chunk_size = chunk;
  return o;
}

// Everything one forward + backward produces.
struct FullRun {
  ForwardRun forward;
  GradRun grads;
};

FullRun full_run(const Problem& pb, const WriteReadOptions& options, const HostTensor& dy, const HostTensor& d_final) {
  FullRun run;
  run.forward = engine_forward_saving(pb, options);
  run.grads = engine_backward(pb, run.forward, dy, d_final, options, DType::f32);
  return run;
}

void expect_bitwise_equal(const FullRun& a, const FullRun& b, const std::string& what) {
  EXPECT_TRUE(a.forward.readings.bitwise_equal(b.forward.readings)) << what << ": readings";
  EXPECT_TRUE(a.forward.final_bank.bitwise_equal(b.forward.final_bank)) << what << ": final bank";
  EXPECT_TRUE(a.forward.saved.bitwise_equal(b.forward.saved)) << what << ": saved";
  EXPECT_TRUE(a.grads.memory.bitwise_equal(b.grads.memory)) << what << ": grad memory";
  EXPECT_TRUE(a.grads.k_val.bitwise_equal(b.grads.k_val)) << what << ": grad k_val";
  EXPECT_TRUE(a.grads.v.bitwise_equal(b.grads.v)) << what << ": grad v";
  EXPECT_TRUE(a.grads.beta.bitwise_equal(b.grads.beta)) << what << ": grad beta";
  EXPECT_TRUE(a.grads.g.bitwise_equal(b.grads.g)) << what << ": grad g";
  EXPECT_TRUE(a.grads.q_val.bitwise_equal(b.grads.q_val)) << what << ": grad q_val";
  EXPECT_TRUE(a.grads.bank_after.bitwise_equal(b.grads.bank_after)) << what << ": restored bank";
}

// ---- chunk size ------------------------------------------------------------------------

// Results depend on C only through f32 rounding (docs/spec.md §11). Metric: rel error of each
// output against C = 1. Tolerance f32 1e-5 (measured <= 3.2e-7), bf16 2e-2 (bf16 rows
// rounded once per chunk instead of once per token; measured <= 7.1e-3).
TEST(EngineProperties, ChunkSizeInvariance) {
  for (DType bank : {DType::f32, DType::bf16}) {
    const ProblemSpec spec = spec_of(3, 200, 3, 4, 9, 30, 3, bank, 101);
    const Problem pb = make_problem(spec);
    const HostTensor dy = random_tensor({spec.P, spec.T, spec.hd}, 1.0, 102);
    const HostTensor d_final = random_tensor({pb.bank_rows(), spec.hd}, 1.0, 103);
    const FullRun base = full_run(pb, options_for(spec, 1), dy, d_final);
    const double tol = bank == DType::f32 ? 1e-5 : 2e-2;
    for (std::int64_t chunk : {7, 16, 64, 256}) {
      const FullRun run = full_run(pb, options_for(spec, chunk), dy, d_final);
      const std::string what = std::string(dtype_name(bank)) + " C = " + std::to_string(chunk);
      EXPECT_LE(rel_error(run.forward.readings, base.forward.readings), tol) << what;
      EXPECT_LE(rel_error(run.forward.final_bank, base.forward.final_bank), tol) << what;
      EXPECT_LE(rel_error(run.grads.memory, base.grads.memory), tol) << what;
      EXPECT_LE(rel_error(run.grads.k_val, base.grads.k_val), tol) << what;
      EXPECT_LE(rel_error(run.grads.v, base.grads.v), tol) << what;
      EXPECT_LE(rel_error(run.grads.beta, base.grads.beta), tol) << what;
      EXPECT_LE(rel_error(run.grads.g, base.grads.g), tol) << what;
      EXPECT_LE(rel_error(run.grads.q_val, base.grads.q_val), tol) << what;
      // Different chunkings round differently: the comparison is not vacuous.
      if (chunk == 64) {
        EXPECT_FALSE(run.forward.readings.bitwise_equal(base.forward.readings)) << what;
      }
    }
  }
}

// ---- determinism -------------------------------------------------------------------------

TEST(EngineProperties, NoGradAndSavingForwardAgreeBitwise) {
  for (DType bank : {DType::f32, DType::bf16}) {
    for (std::int64_t chunk : {1, 16, 64}) {
      const ProblemSpec spec = spec_of(3, 100, 4, 3, 11, 20, 1, bank, 110);
      const Problem pb = make_problem(spec);
      const WriteReadOptions options = options_for(spec, chunk);
      const ForwardRun no_grad = engine_forward(pb, options);
      const ForwardRun saving = engine_forward_saving(pb, options);
      EXPECT_TRUE(no_grad.readings.bitwise_equal(saving.readings)) << dtype_name(bank) << " C " << chunk;
      EXPECT_TRUE(no_grad.final_bank.bitwise_equal(saving.final_bank)) << dtype_name(bank) << " C " << chunk;
    }
  }
}

// 1, 2 and 4 threads give the same bits. P = 1 with hd = 70 also exercises the forward's
// column tiles (1 tile on one thread, 2 tiles otherwise); P = 3 the split over streams.
TEST(EngineProperties, ThreadCountInvariance) {
  for (std::int64_t P : {1, 3}) {
    for (DType bank : {DType::f32, DType::bf16}) {
      const ProblemSpec spec = spec_of(P, 90, 3, 4, 70, 24, 3, bank, 120);
      const Problem pb = make_problem(spec);
      const HostTensor dy = random_tensor({spec.P, spec.T, spec.hd}, 1.0, 121);
      const HostTensor d_final = random_tensor({pb.bank_rows(), spec.hd}, 1.0, 122);
      WriteReadOptions options = options_for(spec, 16);
      options.num_threads = 1;
      const FullRun one = full_run(pb, options, dy, d_final);
      for (int threads : {2, 4}) {
        options.num_threads = threads;
        expect_bitwise_equal(one, full_run(pb, options, dy, d_final),
                             std::string(dtype_name(bank)) + " P " + std::to_string(P) + " threads " +
                                 std::to_string(threads));
      }
    }
  }
}

TEST(EngineProperties, TwoRunsAgreeBitwise) {
  const ProblemSpec spec = spec_of(3, 77, 5, 3, 13, 16, 1, DType::bf16, 130);
  const Problem pb = make_problem(spec);
  const HostTensor dy = random_tensor({spec.P, spec.T, spec.hd}, 1.0, 131);
  WriteReadOptions options = options_for(spec, 16);
  options.num_threads = 4;
  expect_bitwise_equal(full_run(pb, options, dy, HostTensor()), full_run(pb, options, dy, HostTensor()), "rerun");
}

// Readings and the final bank never depend on the snapshot mode (docs/spec.md §5); the saved
// buffer shrinks with the mode (f32 bank: none > bf16 > fp8 > int4), and "bf16" on a bf16
// bank is "none".
TEST(EngineProperties, SnapshotModeLeavesTheForwardUnchanged) {
  for (DType bank : {DType::f32, DType::bf16}) {
    const ProblemSpec spec = spec_of(3, 90, 4, 3, 11, 20, 4, bank, 115);
    const Problem pb = make_problem(spec);
    WriteReadOptions options = options_for(spec, 16);
    const ForwardRun none = engine_forward_saving(pb, options);
    std::int64_t previous_bytes = none.saved.numel();
    for (SnapshotQuant mode : {SnapshotQuant::bf16, SnapshotQuant::fp8, SnapshotQuant::int4}) {
      options.snapshot_quant = mode;
      const ForwardRun run = engine_forward_saving(pb, options);
      const std::string what = std::string(dtype_name(bank)) + " " + snapshot_quant_name(mode);
      EXPECT_TRUE(run.readings.bitwise_equal(none.readings)) << what;
      EXPECT_TRUE(run.final_bank.bitwise_equal(none.final_bank)) << what;
      if (bank == DType::bf16 && mode == SnapshotQuant::bf16) {
        EXPECT_TRUE(run.saved.bitwise_equal(none.saved)) << what;
      } else {
        EXPECT_LT(run.saved.numel(), previous_bytes) << what;
      }
      previous_bytes = run.saved.numel();
    }
  }
}

// ---- what the backward leaves behind -------------------------------------------------------

// The working bank is restored in place to the initial bank, bit for bit (snapshot "none").
TEST(EngineProperties, BackwardRestoresTheInitialBank) {
  for (DType bank : {DType::f32, DType::bf16}) {
    for (std::int64_t chunk : {1, 7, 64}) {
      const ProblemSpec spec = spec_of(3, 70, 4, 2, 6, 9, 4, bank, 140);
      const Problem pb = make_problem(spec);
      const HostTensor dy = random_tensor({spec.P, spec.T, spec.hd}, 1.0, 141);
      const FullRun run = full_run(pb, options_for(spec, chunk), dy, HostTensor());
      EXPECT_FALSE(run.forward.final_bank.bitwise_equal(pb.memory));
      EXPECT_TRUE(run.grads.bank_after.bitwise_equal(pb.memory)) << dtype_name(bank) << " C " << chunk;
    }
  }
}

TEST(EngineProperties, BackwardModifiesNeitherSavedNorInputs) {
  const ProblemSpec spec = spec_of(3, 50, 3, 3, 7, 12, 3, DType::f32, 150);
  const Problem pb = make_problem(spec);
  const Problem copy = pb;
  const WriteReadOptions options = options_for(spec, 16);
  const HostTensor dy = random_tensor({spec.P, spec.T, spec.hd}, 1.0, 151);
  const HostTensor d_final = random_tensor({pb.bank_rows(), spec.hd}, 1.0, 152);
  const ForwardRun forward = engine_forward_saving(pb, options);
  const HostTensor saved_before = forward.saved.to(DType::u8);
  const HostTensor dy_before = dy.to(DType::f32), d_final_before = d_final.to(DType::f32);
  engine_backward(pb, forward, dy, d_final, options, DType::f32);
  EXPECT_TRUE(forward.saved.bitwise_equal(saved_before));
  EXPECT_TRUE(dy.bitwise_equal(dy_before));
  EXPECT_TRUE(d_final.bitwise_equal(d_final_before));
  EXPECT_TRUE(pb.k_idx.bitwise_equal(copy.k_idx));
  EXPECT_TRUE(pb.k_val.bitwise_equal(copy.k_val));
  EXPECT_TRUE(pb.v.bitwise_equal(copy.v));
  EXPECT_TRUE(pb.beta.bitwise_equal(copy.beta));
  EXPECT_TRUE(pb.g.bitwise_equal(copy.g));
  EXPECT_TRUE(pb.q_idx.bitwise_equal(copy.q_idx));
  EXPECT_TRUE(pb.q_val.bitwise_equal(copy.q_val));
}

// ---- untouched rows ----------------------------------------------------------------------

// Rows no token writes keep their bits; rows beyond P * slots_per_stream are never touched
// by the forward or the backward, and their gradient is grad_final_bank's.
TEST(EngineProperties, UnwrittenAndExtraRowsUntouched) {
  for (DType bank : {DType::f32, DType::bf16}) {
    ProblemSpec spec = spec_of(3, 20, 2, 3, 5, 64, 1, bank, 160);
    spec.extra_rows = 7;
    const Problem pb = make_problem(spec);
    const WriteReadOptions options = options_for(spec, 8);
    std::set<std::int64_t> written;
    for (std::int64_t i = 0; i < pb.k_idx.numel(); ++i) written.insert(static_cast<std::int64_t>(pb.k_idx.get(i)));
    const HostTensor dy = random_tensor({spec.P, spec.T, spec.hd}, 1.0, 161);
    const HostTensor d_final = random_tensor({pb.bank_rows(), spec.hd}, 1.0, 162);
    const FullRun run = full_run(pb, options, dy, d_final);
    std::int64_t unwritten = 0;
    for (std::int64_t row = 0; row < pb.bank_rows(); ++row) {
      if (written.count(row)) continue;
      ++unwritten;
      for (std::int64_t c = 0; c < spec.hd; ++c) {
        const std::int64_t i = row * spec.hd + c;
        ASSERT_EQ(run.forward.final_bank.get(i), pb.memory.get(i)) << "row " << row;
        if (row >= spec.P * spec.slots_per_stream) {
          ASSERT_EQ(run.grads.memory.get(i), d_final.get(i)) << "extra row " << row;
        }
      }
    }
    EXPECT_GE(unwritten, spec.extra_rows + 10);
  }
}

// ---- validate = false ----------------------------------------------------------------------

// Out-of-range indices (negative, past the bank, in the extra rows, in another stream's rows)
// with validation off are masked: nothing outside the bank is read or written (guard rows of
// NaN around it stay as they are and no NaN reaches an output), extra rows are untouched,
// masked entries get zero gradients, and the results equal the reference's (which masks the
// same entries) within the usual f32 tolerance.
TEST(EngineProperties, ValidateFalseMasksOutOfRangeIndices) {
  ProblemSpec spec = spec_of(3, 40, 3, 3, 5, 10, 3, DType::f32, 170);
  spec.extra_rows = 4;
  Problem pb = make_problem(spec);
  const std::int64_t S = pb.bank_rows(), hd = spec.hd, guard = 16;
  const std::int64_t bad[] = {-1, -guard, S, S + guard - 1, spec.P * spec.slots_per_stream + 1};
  std::set<std::int64_t> masked_writes, masked_reads;
  for (std::int64_t p = 0; p < spec.P; ++p) {
    for (std::int64_t t = 3 * p; t < spec.T; t += 7) {
      const std::int64_t other_stream_row = ((p + 1) % spec.P) * spec.slots_per_stream;
      const std::int64_t k = (p * spec.T + t) * spec.W + t % spec.W;
      const std::int64_t q = (p * spec.T + t) * spec.R + (t + 1) % spec.R;
      pb.k_idx.set(k, static_cast<double>(t % 2 ? bad[t % 5] : other_stream_row));
      pb.q_idx.set(q, static_cast<double>(bad[(t + 2) % 5]));
      masked_writes.insert(k);
      masked_reads.insert(q);
    }
  }
  WriteReadOptions options = options_for(spec, 8);
  options.validate = false;

  // The bank lives inside a larger buffer with NaN guard rows on both sides.
  HostTensor buffer(DType::f32, {S + 2 * guard, hd});
  for (std::int64_t i = 0; i < buffer.numel(); ++i) buffer.set(i, std::numeric_limits<double>::quiet_NaN());
  auto* bank_data = static_cast<float*>(buffer.ref().data) + guard * hd;
  std::memcpy(bank_data, pb.memory.ref().data, static_cast<std::size_t>(S * hd) * sizeof(float));
  const HostTensor buffer_before = buffer.to(DType::f32);
  WriteReadArgs args = pb.args();
  args.memory = TensorRef::contiguous(bank_data, DType::f32, {S, hd});

  HostTensor readings = pb.make_readings(DType::f32);
  HostTensor saved(DType::u8, {static_cast<std::int64_t>(write_read_saved_bytes(args, options))});
  write_read_forward_saving(args, readings.ref(), saved.ref(), options);
  const HostTensor dy = random_tensor({spec.P, spec.T, hd}, 1.0, 171);
  GradRun grads;
  grads.memory = HostTensor(DType::f32, {S, hd});
  grads.k_val = HostTensor(DType::f32, pb.k_val.sizes());
  grads.v = HostTensor(DType::f32, pb.v.sizes());
  grads.beta = HostTensor(DType::f32, pb.beta.sizes());
  grads.g = HostTensor(DType::f32, pb.g.sizes());
  grads.q_val = HostTensor(DType::f32, pb.q_val.sizes());
  write_read_backward(args, saved.ref(), dy.ref(), TensorRef{},
                      {grads.memory.ref(), grads.k_val.ref(), grads.v.ref(), grads.beta.ref(), grads.g.ref(),
                       grads.q_val.ref()},
                      options);

  const auto* before = static_cast<const std::uint32_t*>(buffer_before.ref().data);
  const auto* after = static_cast<const std::uint32_t*>(buffer.ref().data);
  for (std::int64_t i = 0; i < guard * hd; ++i) {
    ASSERT_EQ(after[i], before[i]) << "guard row before the bank, element " << i;
    ASSERT_EQ(after[(guard + S) * hd + i], before[(guard + S) * hd + i]) << "guard row after the bank, element " << i;
  }
  // After the backward the bank is the initial bank again, extra rows included.
  EXPECT_EQ(std::memcmp(bank_data, pb.memory.ref().data, static_cast<std::size_t>(S * hd) * sizeof(float)), 0);
  for (double y : readings.to_f64()) ASSERT_TRUE(std::isfinite(y));
  for (std::int64_t k : masked_writes) {
    EXPECT_EQ(grads.k_val.get(k), 0.0);
    if (spec.G == spec.W) {
      EXPECT_EQ(grads.g.get(k), 0.0);
    }
  }
  for (std::int64_t q : masked_reads) EXPECT_EQ(grads.q_val.get(q), 0.0);

  const ForwardRun reference = reference_forward(pb, options);
  EXPECT_LE(rel_error(readings, reference.readings), 1e-4);
  const GradRun want = reference_backward(pb, dy, HostTensor(), options);
  EXPECT_LE(rel_error(grads.memory, want.memory), 1e-4);
  EXPECT_LE(rel_error(grads.k_val, want.k_val), 1e-4);
  EXPECT_LE(rel_error(grads.v, want.v), 1e-4);
  EXPECT_LE(rel_error(grads.beta, want.beta), 1e-4);
  EXPECT_LE(rel_error(grads.g, want.g), 1e-4);
  EXPECT_LE(rel_error(grads.q_val, want.q_val), 1e-4);
}

// ---- NaN / Inf -------------------------------------------------------------------------------

// A NaN in one stream's input propagates (IEEE) inside that stream only; the other streams'
// outputs are bit-identical to a clean run, and nothing crashes.
TEST(EngineProperties, NanStaysInItsStream) {
  const ProblemSpec spec = spec_of(3, 40, 3, 3, 5, 10, 1, DType::bf16, 180);
  const Problem clean = make_problem(spec);
  Problem poisoned = clean;
  const std::int64_t stream = 1, token = 9;
  poisoned.v.set((stream * spec.T + token) * spec.hd + 2, std::numeric_limits<double>::quiet_NaN());
  poisoned.g.set(stream * spec.T + token + 5, -std::numeric_limits<double>::infinity());
  const WriteReadOptions options = options_for(spec, 16);
  const HostTensor dy = random_tensor({spec.P, spec.T, spec.hd}, 1.0, 181);
  const FullRun a = full_run(clean, options, dy, HostTensor());
  const FullRun b = full_run(poisoned, options, dy, HostTensor());

  // Elements [p * per_stream, (p + 1) * per_stream) of x and y have the same bits.
  auto stream_slice_equal = [&](const HostTensor& x, const HostTensor& y, std::int64_t p, std::int64_t per_stream) {
    const std::size_t size = dtype_size(x.dtype());
    const auto offset = static_cast<std::size_t>(p * per_stream) * size;
    return std::memcmp(static_cast<const char*>(x.ref().data) + offset, static_cast<const char*>(y.ref().data) + offset,
                       static_cast<std::size_t>(per_stream) * size) == 0;
  };
  bool any_nan = false;
  for (double y : b.forward.readings.to_f64()) any_nan = any_nan || std::isnan(y);
  EXPECT_TRUE(any_nan);
  for (std::int64_t p : {0, 2}) {
    EXPECT_TRUE(stream_slice_equal(a.forward.readings, b.forward.readings, p, spec.T * spec.hd)) << p;
    EXPECT_TRUE(stream_slice_equal(a.forward.final_bank, b.forward.final_bank, p, spec.slots_per_stream * spec.hd));
    EXPECT_TRUE(stream_slice_equal(a.grads.memory, b.grads.memory, p, spec.slots_per_stream * spec.hd)) << p;
    EXPECT_TRUE(stream_slice_equal(a.grads.v, b.grads.v, p, spec.T * spec.hd)) << p;
    EXPECT_TRUE(stream_slice_equal(a.grads.k_val, b.grads.k_val, p, spec.T * spec.W)) << p;
    EXPECT_TRUE(stream_slice_equal(a.grads.q_val, b.grads.q_val, p, spec.T * spec.R)) << p;
    EXPECT_TRUE(stream_slice_equal(a.grads.g, b.grads.g, p, spec.T)) << p;
  }
}

// ---- grad_bank_fp32 (docs/spec.md §4) ------------------------------------------------------------------

TEST(EngineProperties, GradBankFp32) {
  ProblemSpec spec = spec_of(3, 60, 3, 3, 7, 12, 1, DType::bf16, 190);
  const Problem pb = make_problem(spec);
  const HostTensor dy = random_tensor({spec.P, spec.T, spec.hd}, 1.0, 191);
  const HostTensor d_final = random_tensor({pb.bank_rows(), spec.hd}, 1.0, 192);
  WriteReadOptions options = options_for(spec, 16);
  const ForwardRun forward = engine_forward_saving(pb, options);
  auto is_bf16 = [](double x) { return core::round_to_bf16(static_cast<float>(x)) == static_cast<float>(x); };

  // false: the rows are bf16 between chunks, so even an f32 output holds bf16 values.
  const GradRun rows_bf16 = engine_backward(pb, forward, dy, d_final, options, DType::f32);
  for (double x : rows_bf16.memory.to_f64()) ASSERT_TRUE(is_bf16(x));

  // true: f32 rows, cast once at the end: a bf16 output is the rounding of the f32 one.
  options.grad_bank_fp32 = true;
  const GradRun rows_f32 = engine_backward(pb, forward, dy, d_final, options, DType::f32);
  const GradRun cast_once = engine_backward(pb, forward, dy, d_final, options, DType::bf16);
  EXPECT_TRUE(cast_once.memory.bitwise_equal(rows_f32.memory.to(DType::bf16)));
  bool any_wider = false;
  for (double x : rows_f32.memory.to_f64()) any_wider = any_wider || !is_bf16(x);
  EXPECT_TRUE(any_wider);
  // ... and is closer to the exact gradient.
  const GradRun exact = reference_backward(pb, dy, d_final, options);
  EXPECT_LT(rel_error(rows_f32.memory, exact.memory), rel_error(rows_bf16.memory, exact.memory));

  // An f32 bank always keeps f32 rows: the option changes nothing.
  spec.bank = DType::f32;
  const Problem pb32 = make_problem(spec);
  WriteReadOptions o32 = options_for(spec, 16);
  const ForwardRun f32_forward = engine_forward_saving(pb32, o32);
  const GradRun off = engine_backward(pb32, f32_forward, dy, d_final, o32, DType::f32);
  o32.grad_bank_fp32 = true;
  const GradRun on = engine_backward(pb32, f32_forward, dy, d_final, o32, DType::f32);
  EXPECT_TRUE(off.memory.bitwise_equal(on.memory));
}

}  // namespace
}  // namespace sdm::testing

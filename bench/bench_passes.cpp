#include "bench_passes.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <stdexcept>

#include <sys/resource.h>

#include "sdm/ops.hpp"

namespace sdm::bench {

const std::vector<Pass>& all_passes() {
  static const std::vector<Pass> passes = {Pass::fwd, Pass::fwd_save, Pass::fwd_bwd, Pass::decode};
  return passes;
}

const char* pass_name(Pass pass) {
  switch (pass) {
    case Pass::fwd: return "fwd";
    case Pass::fwd_save: return "fwd_save";
    case Pass::fwd_bwd: return "fwd_bwd";
    case Pass::decode: return "decode";
  }
  return "unknown";
}

Pass parse_pass(const std::string& name) {
  for (Pass pass : all_passes()) {
    if (name == pass_name(pass)) return pass;
  }
  throw std::invalid_argument("unknown pass \"" + name + "\"; known: fwd, fwd_save, fwd_bwd, decode, all");
}

namespace {

// Bytes of one snapshot row (docs/spec.md §5): the row in the bank dtype, bf16, or an 8-bit
// (fp8) or 4-bit (int4) payload plus one f32 scale.
double snapshot_row_bytes(std::int64_t hd, DType bank, SnapshotQuant snapshot) {
  switch (snapshot) {
    case SnapshotQuant::none: return static_cast<double>(hd * static_cast<std::int64_t>(dtype_size(bank)));
    case SnapshotQuant::bf16: return static_cast<double>(hd * 2);
    case SnapshotQuant::fp8: return static_cast<double>(hd + 4);
    case SnapshotQuant::int4: return static_cast<double>((hd + 1) / 2 + 4);
  }
  return 0.0;
}

}  // namespace

// The bytes a pass must move, per token of each of the P streams, with `row` = hd
// elements of the bank dtype and `snap` = one snapshot row (snapshot_row_bytes):
//   fwd, decode:  (W + W + R) * row      W rows read, W rows written, R rows read
//   fwd_save:     fwd + W * snap         plus the snapshot of the W pre-write rows
//   fwd_bwd:      fwd_save + W * snap + W * row + R * row + 2 * (W + R) * row
//                 the backward reads the snapshot, writes the W restored rows, reads the
//                 R read rows, and reads and updates the bank-gradient rows (bank dtype)
//                 at the W write and R read slots
// Per-token vectors (v, readings, the saved delta / residual) and the C x C solves are
// left out: they are O(hd) per token against O((W + R) * hd) for the rows.
double pass_bytes(const BenchConfig& c, DType bank, Pass pass, SnapshotQuant snapshot) {
  const double row = static_cast<double>(c.hd * static_cast<std::int64_t>(dtype_size(bank)));
  const double snap = snapshot_row_bytes(c.hd, bank, snapshot);
  const double W = static_cast<double>(c.W), R = static_cast<double>(c.R);
  const double fwd = (2.0 * W + R) * row;
  double per_token = fwd;
  if (pass == Pass::fwd_save || pass == Pass::fwd_bwd) per_token += W * snap;
  if (pass == Pass::fwd_bwd) per_token += W * snap + (W + R) * row + 2.0 * (W + R) * row;
  return per_token * static_cast<double>(c.P * c.T);
}

namespace {

// The buffers one pass works on, allocated once per pass outside the timed region.
struct Workspace {
  Buffer bank, readings, saved;
  Buffer grad_bank, grad_k_val, grad_v, grad_beta, grad_g, grad_q_val;
};

// User + system CPU time of the process (every thread), in ms.
double process_cpu_ms() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  auto ms = [](const timeval& t) { return static_cast<double>(t.tv_sec) * 1e3 + static_cast<double>(t.tv_usec) / 1e3; };
  return ms(usage.ru_utime) + ms(usage.ru_stime);
}

// FNV-1a over the bytes of the buffers (an empty buffer adds nothing).
std::uint64_t fnv1a(std::initializer_list<const Buffer*> buffers) {
  std::uint64_t h = 1469598103934665603ull;
  for (const Buffer* b : buffers) {
    const auto* p = static_cast<const unsigned char*>(b->data());
    for (std::size_t i = 0; i < b->bytes(); ++i) h = (h ^ p[i]) * 1099511628211ull;
  }
  return h;
}

void restore_bank(const BenchInputs& in, const Buffer& bank) {
  std::memcpy(bank.data(), in.initial_bank.data(), in.initial_bank.bytes());
}

void run_once(const BenchInputs& in, Pass pass, const WriteReadOptions& options, Workspace& ws) {
  const auto& c = in.config;
  const WriteReadArgs args = in.args(ws.bank.ref());
  switch (pass) {
    case Pass::fwd:
      write_read_forward(args, ws.readings.ref(), options);
      return;
    case Pass::fwd_save:
      write_read_forward_saving(args, ws.readings.ref(), ws.saved.ref(), options);
      return;
    case Pass::fwd_bwd: {
      write_read_forward_saving(args, ws.readings.ref(), ws.saved.ref(), options);
      const WriteReadGrads grads{ws.grad_bank.ref(), ws.grad_k_val.ref(), ws.grad_v.ref(),
                                 ws.grad_beta.ref(), ws.grad_g.ref(),     ws.grad_q_val.ref()};
      write_read_backward(args, ws.saved.ref(), in.grad_readings.ref(), TensorRef{}, grads, options);
      return;
    }
    case Pass::decode: {
      DecodeOptions decode_options;
      decode_options.slots_per_stream = c.slots_per_stream;
      decode_options.validate = options.validate;
      for (std::int64_t t = 0; t < c.T; ++t) {
        const TensorRef step_readings = ws.readings.view(t * c.P * c.hd, {c.P, c.hd});
        decode_step(in.decode_args(ws.bank.ref(), t), step_readings, decode_options);
      }
      return;
    }
  }
}

}  // namespace

PassResult run_pass(const BenchInputs& in, Pass pass, const PassSettings& settings) {
  const auto& c = in.config;
  WriteReadOptions options;
  options.slots_per_stream = c.slots_per_stream;
  options.chunk_size = c.C;
  options.snapshot_quant = settings.snapshot;
  options.num_threads = settings.threads;
  options.validate = settings.validate;

  Workspace ws;
  ws.bank = Buffer(in.bank_dtype, {c.P * c.slots_per_stream, c.hd});
  ws.readings = Buffer(in.bank_dtype, {c.P, c.T, c.hd});
  if (pass == Pass::fwd_save || pass == Pass::fwd_bwd) {
    restore_bank(in, ws.bank);
    const std::size_t saved_bytes = write_read_saved_bytes(in.args(ws.bank.ref()), options);
    ws.saved = Buffer(DType::u8, {static_cast<std::int64_t>(saved_bytes)});
  }
  if (pass == Pass::fwd_bwd) {
    ws.grad_bank = Buffer(in.bank_dtype, {c.P * c.slots_per_stream, c.hd});
    ws.grad_k_val = Buffer(DType::f32, {c.P, c.T, c.W});
    ws.grad_v = Buffer(DType::f32, {c.P, c.T, c.hd});
    ws.grad_beta = Buffer(DType::f32, {c.P, c.T, 1});
    ws.grad_g = Buffer(DType::f32, {c.P, c.T, c.G});
    ws.grad_q_val = Buffer(DType::f32, {c.P, c.T, c.R});
  }

  PassResult result;
  double cpu_ms = 0.0, wall_ms = 0.0;
  for (int run = 0; run < settings.warmup + settings.repeat; ++run) {
    restore_bank(in, ws.bank);
    const double cpu_start = process_cpu_ms();
    const auto start = std::chrono::steady_clock::now();
    run_once(in, pass, options, ws);
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    if (run >= settings.warmup) {
      result.ms.push_back(ms);
      wall_ms += ms;
      cpu_ms += process_cpu_ms() - cpu_start;
    }
  }
  result.cpu_per_wall = cpu_ms / wall_ms;
  if (settings.digest) {
    std::fprintf(stderr, "digest %s %s threads %d: %016llx\n", c.name.c_str(), pass_name(pass), settings.threads,
                 static_cast<unsigned long long>(fnv1a({&ws.bank, &ws.readings, &ws.saved, &ws.grad_bank, &ws.grad_k_val,
                                                        &ws.grad_v, &ws.grad_beta, &ws.grad_g, &ws.grad_q_val})));
  }
  std::vector<double> sorted = result.ms;
  std::sort(sorted.begin(), sorted.end());
  const std::size_t n = sorted.size();
  result.median_ms = n % 2 == 1 ? sorted[n / 2] : 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]);
  return result;
}

}  // namespace sdm::bench

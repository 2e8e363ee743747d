// bench_cuda.cu - GPU benchmark of the CUDA engine on the benchmark configurations.
//
//   sdm_gpu_bench [--json FILE] [--configs small,readme,...] [--reps N] [--training-only]
//                 [--snapshot none,fp8,int4] [--slots product_key,heavy_reuse,strided]
//                 [--chunks 64,128,256] [--digest] [--timeline]
//
// Per config, slot pattern and chunk size: the chunked op's no-grad forward and saving forward
// (validate=False, bf16 bank, bf16 k_val / v / q_val, f32 beta / g, int32 indices; values drawn on
// the device, slots by the host generators of bench/slot_patterns.hpp), each eager through the
// public API and replayed from a CUDA graph (the no-grad forward; 100 steps of the decode step),
// which shows the time without host launch overhead.
// --slots: the slot patterns (default product_key,heavy_reuse: product-key top-k over a correlated
// latent, and the same with a few keys winning for most tokens; strided a synthetic one with
// nearly no reuse). Each row names its pattern and the fraction of a chunk's write entries that hit
// distinct rows ("distinct").
// --chunks: the chunk sizes C (default 64).
// Reports the median of N timed runs (CUDA events, after one warm-up), tokens/s, the bytes that
// must move (per token: W rows read + W rows written + R rows read, plus W snapshot rows written
// in a saving call; entries, not distinct rows, so reuse raises the fraction) and that traffic's
// bandwidth as a fraction of the device-to-device copy bandwidth measured in the same run (bytes
// read + written). Exits 0 with a message without a GPU.
// --training-only: only the training step (saving forward + backward) of the chunked configs.
// --snapshot: the snapshot modes (docs/spec.md §5) of the saving forward and the training step, one row
// each (default none); per mode the extra device memory of the training step is printed, with its
// ratio to mode none's and the time's ratio to none's when none is in the list.
// --digest: after a training step's timed runs, a 64-bit hash of the readings, the saved buffer
// and the six gradients' bytes (bench/digest.hpp: FNV-1a per 1 MiB block on the host's threads,
// then over the blocks' hashes), one line per config / pattern / chunk / mode: two builds
// that must agree bitwise (a kernel change that keeps every f32 chain) print the same digests;
// then a "digests" line with one hash per tensor (readings, saved, memory, k_val, v, beta, g,
// q_val), to tell which outputs a change moves.
// --timeline: after its timed runs, one more training step per config and mode recorded kernel by
// kernel (kernel_timeline.hpp: CUPTI's activity records), printed as a table per kernel name with
// the time during which no kernel ran; without --training-only, one no-grad forward per config
// likewise.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "bench_config.hpp"
#include "core/snapshot_quant.hpp"
#include "device_tensor.hpp"
#include "device_timing.hpp"
#include "digest.hpp"
#include "kernel_timeline.hpp"
#include "parse_list.hpp"
#include "sdm/options.hpp"
#include "sdm/ops.hpp"
#include "slot_patterns.hpp"

namespace {

using namespace sdm;
using namespace sdm::testing;

using Config = bench::BenchConfig;

// The configs run without --configs (bench/bench_config.cpp holds them all, CPU sizes too).
const std::vector<std::string> kDefaultConfigs = {"small", "readme", "big", "flagship", "decode8", "decode64"};

// ---- inputs drawn on the device ----------------------------------------------------------

__device__ std::uint64_t mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

__device__ float uniform(std::uint64_t seed, std::int64_t i) {  // [0, 1)
  return static_cast<float>(mix(seed * 0x100000001b3ull + static_cast<std::uint64_t>(i)) >> 40) * 0x1p-24f;
}

__global__ void fill_float(void* out, bool bf16, std::int64_t n, std::uint64_t seed, float lo, float hi) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const float x = lo + (hi - lo) * uniform(seed, i);
    if (bf16) static_cast<std::uint16_t*>(out)[i] = static_cast<std::uint16_t>(__float_as_uint(x) >> 16);
    else static_cast<float*>(out)[i] = x;
  }
}

void fill(DeviceTensor& t, std::uint64_t seed, float lo, float hi) {
  const std::int64_t n = static_cast<std::int64_t>(t.bytes() / dtype_size(t.ref().dtype));
  fill_float<<<1024, 256>>>(t.data(), t.ref().dtype == DType::bf16, n, seed, lo, hi);
  cuda_ok(cudaGetLastError(), "fill_float");
}

// A host slot tensor [lead..., width] on the device.
DeviceTensor device_slots(const std::vector<std::int32_t>& slots, std::vector<std::int64_t> sizes) {
  DeviceTensor t(DType::i32, std::move(sizes));
  cuda_ok(cudaMemcpy(t.data(), slots.data(), t.bytes(), cudaMemcpyHostToDevice), "slots to the device");
  return t;
}

struct Inputs {
  DeviceTensor memory, k_idx, k_val, v, beta, g, q_idx, q_val, readings;
  double distinct = 1.0;      // distinct rows / write entries of a chunk of `chunk` tokens (mean)
  double read_written = 0.0;  // read entries whose row the chunk writes / read entries (mean)
  Inputs(const Config& c, bench::SlotPattern pattern, std::int64_t chunk) {
    const std::vector<std::int64_t> lead = c.decode ? std::vector<std::int64_t>{c.P} : std::vector<std::int64_t>{c.P, c.T};
    const auto with = [&](std::int64_t last) {
      std::vector<std::int64_t> s = lead;
      s.push_back(last);
      return s;
    };
    memory = DeviceTensor(DType::bf16, {c.P * c.slots_per_stream, c.hd});
    // Decode configs: P streams of one token each.
    const std::int64_t streams = c.P, tokens = c.decode ? 1 : c.T;
    const bench::WriteReadSlots slots =
        bench::make_write_read_slots(pattern, streams, tokens, c.W, c.R, c.slots_per_stream, 7);
    k_idx = device_slots(slots.writes, with(c.W));
    q_idx = device_slots(slots.reads, with(c.R));
    distinct = bench::distinct_fraction(slots.writes, streams, tokens, c.W, chunk);
    read_written = bench::read_written_fraction(slots, streams, tokens, c.W, c.R, chunk);
    k_val = DeviceTensor(DType::bf16, with(c.W));
    q_val = DeviceTensor(DType::bf16, with(c.R));
    v = DeviceTensor(DType::bf16, with(c.hd));
    beta = DeviceTensor(DType::f32, with(1));
    g = DeviceTensor(DType::f32, with(1));
    readings = DeviceTensor(DType::bf16, with(c.hd));
    fill(memory, 1, -0.1f, 0.1f);
    fill(k_val, 2, -0.3f, 0.3f);
    fill(q_val, 3, -0.3f, 0.3f);
    fill(v, 4, -0.1f, 0.1f);
    fill(beta, 5, 0.0f, 0.3f);
    fill(g, 6, -0.5f, -0.01f);
    cuda_ok(cudaDeviceSynchronize(), "input generation");
  }
  WriteReadArgs args() const {
    return {memory.ref(), k_idx.ref(), k_val.ref(), v.ref(), beta.ref(), g.ref(), q_idx.ref(), q_val.ref()};
  }
};

// ---- timing and digests -------------------------------------------------------------------

// The digest of a device tensor's bytes (digest.hpp), copied to the host in pieces of whole blocks.
std::uint64_t digest_of(const DeviceTensor& t) {
  constexpr std::size_t kPiece = 256 * bench::BlockDigest::kBlockBytes;
  bench::BlockDigest d;
  std::vector<unsigned char> host(std::min(t.bytes(), kPiece));
  for (std::size_t at = 0; at < t.bytes(); at += kPiece) {
    const std::size_t n = std::min(kPiece, t.bytes() - at);
    cuda_ok(cudaMemcpy(host.data(), static_cast<const unsigned char*>(t.data()) + at, n, cudaMemcpyDeviceToHost),
            "digest copy");
    d.add(host.data(), n);
  }
  return d.value();
}

using bench::copy_bandwidth;
using bench::median_ms;
using bench::parse_list;

// Median time of one replay of a CUDA graph holding what `record(stream)` enqueues.
template <typename F>
double graph_replay_ms(int reps, F&& record) {
  cudaStream_t stream;
  cuda_ok(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  cudaGraph_t graph;
  cuda_ok(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
  record(stream);
  cuda_ok(cudaStreamEndCapture(stream, &graph), "cudaStreamEndCapture");
  cudaGraphExec_t exec;
  cuda_ok(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");
  const double ms = median_ms(reps, [&] {
    cuda_ok(cudaGraphLaunch(exec, stream), "cudaGraphLaunch");
    cuda_ok(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  });
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
  return ms;
}

// What one set of rows measures: a config, its slot pattern and chunk size, and the pattern's
// distinct fraction at that chunk size.
struct Case {
  const Config& c;
  bench::SlotPattern pattern;
  std::int64_t chunk;
  double distinct;
};

struct Row {
  std::string config, slots, mode;
  std::int64_t chunk;
  double distinct, ms, tokens_per_s, gbytes, fraction;
};

// Bank rows each token must move (bf16 rows of hd), by pass:
//   forward: W rows read + W written + R read;  saving forward: + W snapshot rows written;
//   saving forward + backward: + W snapshot rows read, W restored, R read, 2 (W + R) gradient
//   rows (read and written). A snapshot row counts as `snapshot_row` bank rows (its payload and
//   scale bytes over 2 hd: 1 for none, about 1/2 for fp8, 1/4 for int4).
double rows_per_token(const Config& c, double snapshot_row, bool backward) {
  const auto W = static_cast<double>(c.W), R = static_cast<double>(c.R);
  double rows = 2 * W + R + snapshot_row * W;
  if (backward) rows += snapshot_row * W + W + R + 2 * (W + R);
  return rows;
}

// Bytes of one snapshot row of the bf16 bank in `mode`, in bank rows.
double snapshot_row_size(const Config& c, SnapshotQuant mode) {
  const std::size_t bytes = core::snapshot_payload_bytes(mode, DType::bf16, c.hd) + core::snapshot_scale_bytes(mode);
  return static_cast<double>(bytes) / static_cast<double>(2 * c.hd);
}

Row make_row(const Case& k, const std::string& mode, double ms, double rows, double copy_bw) {
  const Config& c = k.c;
  const double tokens = static_cast<double>(c.P * c.T);
  const double bytes = tokens * rows * static_cast<double>(c.hd) * 2.0;
  return {c.name, bench::slot_pattern_name(k.pattern), mode, k.chunk, k.distinct, ms, tokens / (ms * 1e-3),
          bytes * 1e-9, bytes / (ms * 1e-3) / copy_bw};
}

// The no-grad forward: eager, replayed from a CUDA graph, and eager with validate=True.
void bench_no_grad_forward(const Case& c, int reps, Inputs& in, const WriteReadOptions& opt, double copy_bw,
                           std::vector<Row>& rows) {
  const WriteReadArgs args = in.args();
  const double fwd_rows = rows_per_token(c.c, 0.0, false);
  rows.push_back(make_row(c, "forward no-grad", median_ms(reps, [&] { write_read_forward(args, in.readings.ref(), opt); }),
                          fwd_rows, copy_bw));
  rows.push_back(make_row(c, "forward no-grad, graph replay", graph_replay_ms(reps, [&](cudaStream_t stream) {
    WriteReadOptions on_stream = opt;
    on_stream.cuda_stream = stream;
    write_read_forward(args, in.readings.ref(), on_stream);
  }), fwd_rows, copy_bw));
  WriteReadOptions validating = opt;
  validating.validate = true;
  rows.push_back(make_row(c, "forward no-grad, validate",
                          median_ms(reps, [&] { write_read_forward(args, in.readings.ref(), validating); }), fwd_rows,
                          copy_bw));
}

void bench_chunked(const Config& c, bench::SlotPattern pattern, std::int64_t chunk, int reps, bool training_only,
                   bool timeline, bool digests, const std::vector<SnapshotQuant>& modes, double copy_bw,
                   std::vector<Row>& rows) {
  Inputs in(c, pattern, chunk);
  const Case k{c, pattern, chunk, in.distinct};
  const std::string label = std::string(c.name) + ", " + bench::slot_pattern_name(pattern) + ", C " +
                            std::to_string(chunk);
  std::printf("%s: distinct fraction of a chunk's write entries %.3f, read entries on rows the chunk writes %.3f\n",
              label.c_str(), in.distinct, in.read_written);
  WriteReadOptions opt;
  opt.slots_per_stream = c.slots_per_stream;
  opt.chunk_size = chunk;
  opt.validate = false;
  const WriteReadArgs args = in.args();
  if (!training_only) {
    bench_no_grad_forward(k, reps, in, opt, copy_bw, rows);
    if (timeline) {
      KernelTimeline recorder;
      recorder.start();
      write_read_forward(args, in.readings.ref(), opt);
      print_timeline(recorder.stop(), (label + " no-grad forward").c_str(), stdout);
    }
  }

  // A training step: the saving forward, then the backward of <readings, grad_readings>; the
  // backward restores the bank (approximately for a lossy snapshot mode, so the bank drifts a
  // little over the repetitions; the work per step does not change). Extra device memory = the
  // saved buffer + the peak the engine's stream-ordered scratch reached in the default memory
  // pool (cudaMallocAsync), gradient outputs not counted.
  const std::int64_t P = c.P, T = c.T;
  DeviceTensor grad_readings(DType::f32, {P, T, c.hd});
  fill(grad_readings, 9, -1.0f, 1.0f);
  DeviceTensor grad_memory(DType::bf16, {P * c.slots_per_stream, c.hd}), grad_k_val(DType::bf16, {P, T, c.W});
  DeviceTensor grad_v(DType::bf16, {P, T, c.hd}), grad_beta(DType::f32, {P, T, 1}), grad_g(DType::f32, {P, T, 1});
  DeviceTensor grad_q_val(DType::bf16, {P, T, c.R});
  const WriteReadGrads grads{grad_memory.ref(), grad_k_val.ref(), grad_v.ref(), grad_beta.ref(), grad_g.ref(),
                             grad_q_val.ref()};
  cudaMemPool_t pool;
  cuda_ok(cudaDeviceGetDefaultMemPool(&pool, 0), "cudaDeviceGetDefaultMemPool");
  double none_ms = 0.0, none_extra = 0.0;
  for (const SnapshotQuant mode : modes) {
    opt.snapshot_quant = mode;
    const std::string tag = std::string(", snapshot ") + snapshot_quant_name(mode);
    DeviceTensor saved(DType::u8, {static_cast<std::int64_t>(write_read_saved_bytes(args, opt))});
    if (!training_only) {
      rows.push_back(make_row(k, "forward saving" + tag, median_ms(reps, [&] {
        write_read_forward_saving(args, in.readings.ref(), saved.ref(), opt);
      }), rows_per_token(c, snapshot_row_size(c, mode), false), copy_bw));
    }
    std::uint64_t zero = 0, peak = 0;
    cuda_ok(cudaDeviceSynchronize(), "before the training step");
    cuda_ok(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &zero), "reset pool high-water mark");
    const double ms = median_ms(reps, [&] {
      write_read_forward_saving(args, in.readings.ref(), saved.ref(), opt);
      write_read_backward(args, saved.ref(), grad_readings.ref(), TensorRef{}, grads, opt);
    });
    if (digests) {
      const std::pair<const char*, const DeviceTensor*> parts[] = {
          {"readings", &in.readings}, {"saved", &saved}, {"memory", &grad_memory}, {"k_val", &grad_k_val},
          {"v", &grad_v}, {"beta", &grad_beta}, {"g", &grad_g}, {"q_val", &grad_q_val}};
      std::vector<std::uint64_t> each;
      for (const auto& part : parts) each.push_back(digest_of(*part.second));
      std::printf("digest %s, snapshot %s: %016llx\n", label.c_str(), snapshot_quant_name(mode),
                  static_cast<unsigned long long>(bench::combine_digests(each)));
      std::printf("digests %s, snapshot %s:", label.c_str(), snapshot_quant_name(mode));
      for (std::size_t k = 0; k < each.size(); ++k) {
        std::printf(" %s %016llx", parts[k].first, static_cast<unsigned long long>(each[k]));
      }
      std::printf("\n");
    }
    if (timeline) {
      KernelTimeline recorder;
      recorder.start();
      write_read_forward_saving(args, in.readings.ref(), saved.ref(), opt);
      write_read_backward(args, saved.ref(), grad_readings.ref(), TensorRef{}, grads, opt);
      print_timeline(recorder.stop(), (label + " training step" + tag).c_str(), stdout);
    }
    const double step_rows = rows_per_token(c, snapshot_row_size(c, mode), true);
    rows.push_back(make_row(k, "forward saving + backward" + tag, ms, step_rows, copy_bw));
    cuda_ok(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &peak), "read pool high-water mark");
    const double extra = static_cast<double>(saved.bytes() + peak);
    std::printf("%s training step, snapshot %s: %.3f ms, extra device memory %.3f GB (saved %.3f GB + scratch peak "
                "%.3f GB)",
                label.c_str(), snapshot_quant_name(mode), ms, extra * 1e-9, static_cast<double>(saved.bytes()) * 1e-9,
                static_cast<double>(peak) * 1e-9);
    if (mode == SnapshotQuant::none) {
      none_ms = ms;
      none_extra = extra;
    } else if (none_ms > 0.0) {
      std::printf("; vs none: time x%.3f, extra memory x%.3f", ms / none_ms, extra / none_extra);
    }
    std::printf("\n");
  }
}

void bench_decode(const Config& c, int reps, double copy_bw, std::vector<Row>& rows) {
  Inputs in(c, bench::SlotPattern::product_key, 1);
  const Case k{c, bench::SlotPattern::product_key, 1, in.distinct};
  DecodeOptions opt;
  opt.slots_per_stream = c.slots_per_stream;
  opt.validate = false;
  const WriteReadArgs args = in.args();
  constexpr int kSteps = 100;
  const double eager = median_ms(reps, [&] {
    for (int s = 0; s < kSteps; ++s) decode_step(args, in.readings.ref(), opt);
  });
  rows.push_back(make_row(k, "decode step, eager", eager / kSteps, rows_per_token(c, 0.0, false), copy_bw));

  const double graphed = graph_replay_ms(reps, [&](cudaStream_t stream) {
    DecodeOptions on_stream = opt;
    on_stream.cuda_stream = stream;
    for (int s = 0; s < kSteps; ++s) decode_step(args, in.readings.ref(), on_stream);
  });
  rows.push_back(make_row(k, "decode step, graph replay", graphed / kSteps, rows_per_token(c, 0.0, false), copy_bw));
}

}  // namespace

int main(int argc, char** argv) {
  std::string json_path;
  std::vector<std::string> configs = kDefaultConfigs;
  int reps = 5;
  bool training_only = false, timeline = false, digests = false;
  std::vector<SnapshotQuant> modes = {SnapshotQuant::none};
  std::vector<bench::SlotPattern> patterns = {bench::SlotPattern::product_key, bench::SlotPattern::heavy_reuse};
  std::vector<std::int64_t> chunks = {64};
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--json" && i + 1 < argc) json_path = argv[++i];
    else if (a == "--configs" && i + 1 < argc) configs = parse_list(argv[++i], [](const std::string& x) { return x; });
    else if (a == "--reps" && i + 1 < argc) reps = std::max(1, std::atoi(argv[++i]));
    else if (a == "--training-only") training_only = true;
    else if (a == "--timeline") timeline = true;
    else if (a == "--digest") digests = true;
    else if (a == "--snapshot" && i + 1 < argc) modes = parse_list(argv[++i], parse_snapshot_quant);
    else if (a == "--slots" && i + 1 < argc) patterns = parse_list(argv[++i], bench::parse_slot_pattern);
    else if (a == "--chunks" && i + 1 < argc) {
      chunks = parse_list(argv[++i], [](const std::string& x) { return static_cast<std::int64_t>(std::stoll(x)); });
    }
  }
  try {
    for (const std::string& name : configs) bench::find_config(name);
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "sdm_gpu_bench: --configs: %s\n", e.what());
    return 2;
  }
  if (!cuda_device_available()) {
    std::printf("sdm_gpu_bench: skipped (no CUDA device)\n");
    return 0;
  }
  cudaDeviceProp prop{};
  cuda_ok(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  const double copy_bw = copy_bandwidth();
  std::printf("device: %s, %d SMs; measured copy bandwidth %.0f GB/s (read + write)\n", prop.name,
              prop.multiProcessorCount, copy_bw * 1e-9);
  std::vector<Row> rows;
  for (const std::string& name : configs) {
    const Config& c = bench::find_config(name);
    std::printf("running %s ...\n", c.name.c_str());
    std::fflush(stdout);
    if (c.decode) {
      bench_decode(c, reps, copy_bw, rows);
      continue;
    }
    for (const bench::SlotPattern pattern : patterns) {
      for (const std::int64_t chunk : chunks) {
        bench_chunked(c, pattern, chunk, reps, training_only, timeline, digests, modes, copy_bw, rows);
      }
    }
  }
  std::printf("\n| config | slots | C | distinct | mode | ms | tokens/s | GB must move | fraction of copy bw |\n"
              "|---|---|---|---|---|---|---|---|---|\n");
  for (const Row& r : rows) {
    std::printf("| %s | %s | %lld | %.3f | %s | %.4f | %.3g | %.4f | %.3f |\n", r.config.c_str(), r.slots.c_str(),
                static_cast<long long>(r.chunk), r.distinct, r.mode.c_str(), r.ms, r.tokens_per_s, r.gbytes,
                r.fraction);
  }
  if (!json_path.empty()) {
    FILE* f = std::fopen(json_path.c_str(), "w");
    if (f != nullptr) {
      std::fprintf(f, "{\"device\": \"%s\", \"copy_bandwidth_gbs\": %.1f, \"rows\": [\n", prop.name, copy_bw * 1e-9);
      for (std::size_t i = 0; i < rows.size(); ++i) {
        const Row& r = rows[i];
        std::fprintf(f, "  {\"config\": \"%s\", \"slots\": \"%s\", \"chunk\": %lld, \"distinct\": %.4f, "
                        "\"mode\": \"%s\", \"ms\": %.6f, \"tokens_per_s\": %.1f, "
                        "\"gbytes_must_move\": %.6f, \"fraction_of_copy_bw\": %.4f}%s\n",
                     r.config.c_str(), r.slots.c_str(), static_cast<long long>(r.chunk), r.distinct, r.mode.c_str(), r.ms, r.tokens_per_s, r.gbytes, r.fraction,
                     i + 1 < rows.size() ? "," : "");
      }
      std::fprintf(f, "]}\n");
      std::fclose(f);
    }
  }
  return 0;
}

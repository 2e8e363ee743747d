// decode.cpp - one token per stream of the SDM recurrence, in place (docs/spec.md §1, §9).
//
// Inputs (the leading dims of k_idx are the Q streams, flattened stream-major; contiguous):
//   memory   [S, hd]  bf16 / f32, updated in place
//   k_idx    [Q, W]   int32 / int64 absolute rows     k_val [Q, W]  f32 / bf16 / f16
//   v        [Q, hd]  float                           beta  [Q, 1]  float
//   g        [Q, G]   float, G = 1 (shared) or W (per write)
//   q_idx    [Q, R]   int32 / int64 absolute rows     q_val [Q, R]  float
//   readings [Q, hd]  bank dtype (output)
// Math, per stream, with d_w = exp(g_w) (g_0 for every w when G = 1), docs/spec.md §1:
//   r_w   = d_w * M[k_w]                       decayed write rows
//   ret   = sum_w kappa_w * r_w                retrieved (w ascending)
//   delta = beta * (v - ret)
//   M[k_w] <- rnd_E(r_w + kappa_w * delta)     written rows, rounded to E once
//   y     = rnd_E(sum_r rho_r * M[q_r])        reads see this token's writes (r ascending)
// Numerics (docs/spec.md §1, §3): kappa, v, rho rounded to the bank dtype E, then used in
// f32; beta, g, d in f32; r, ret, delta, the new rows and the reading sums in f32; reads
// load the rounded updated rows.
// Decomposition, worker count and masking: stated above decode_all, decode_step and stage_token.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>

#include "core/repeated_writes.hpp"
#include "core/tensor_access.hpp"
#include "core/validate.hpp"
#include "decode.hpp"
#include "element_io.hpp"
#include "engine.hpp"
#include "thread_pool.hpp"

namespace sdm::cpu {
namespace {

constexpr std::int64_t kTileCols = 64;
constexpr std::int64_t kMaskedRow = -1;
// Row traffic per worker. Measured on a 2-core AMD EPYC (bf16 bank, hd 512, W = R = 64,
// 1 vs 2 workers per step): 192 KiB of rows took 60 vs 94 us, 384 KiB 150 vs 98 us, 3 MiB
// 1.8 vs 1.1 ms; the pool's hand-off costs tens of microseconds per call.
constexpr std::int64_t kBytesPerWorker = std::int64_t{192} << 10;

// One stream's token staged in f32 (and bank dtype rounding), rows already masked.
struct StagedToken {
  std::array<std::int64_t, core::kMaxWidth> write_row;
  std::array<float, core::kMaxWidth> kappa, decay;
  std::array<std::int64_t, core::kMaxWidth> read_row;
  std::array<float, core::kMaxWidth> rho;
  float beta = 0.0f;
};

struct DecodeJob {
  const WriteReadArgs& args;
  const TensorRef& readings;
  const core::DecodeShape& shape;
  std::int64_t slots_per_stream;  // 0: rows are only bounded by the bank
};

// Out-of-range entries (only reachable with validation off, docs/spec.md §8): an index outside
// the stream's rows (or outside [0, S) when slots_per_stream == 0) is masked: its row is
// neither decayed nor written and contributes 0 to ret and y. No access leaves the bank. A write
// lane repeating an earlier lane's row is masked the same way (core/repeated_writes.hpp).
void stage_token(const DecodeJob& job, std::int64_t stream, StagedToken& tok) {
  const auto& a = job.args;
  const auto& sh = job.shape;
  const std::int64_t lo = job.slots_per_stream > 0 ? stream * job.slots_per_stream : 0;
  const std::int64_t hi = job.slots_per_stream > 0 ? std::min(sh.S, lo + job.slots_per_stream) : sh.S;
  auto checked_row = [&](std::int64_t row) { return row >= lo && row < hi ? row : kMaskedRow; };
  for (std::int64_t w = 0; w < sh.W; ++w) {
    const auto i = static_cast<std::size_t>(w);
    tok.write_row[i] = checked_row(core::load_index(a.k_idx, stream * sh.W + w));
    tok.kappa[i] = round_to_bank(sh.bank, load_element(a.k_val, stream * sh.W + w));
    tok.decay[i] = std::exp(load_element(a.g, stream * sh.G + (sh.G == 1 ? 0 : w)));
  }
  core::mask_repeated_writes(tok.write_row.data(), sh.W, kMaskedRow);
  for (std::int64_t r = 0; r < sh.R; ++r) {
    const auto i = static_cast<std::size_t>(r);
    tok.read_row[i] = checked_row(core::load_index(a.q_idx, stream * sh.R + r));
    tok.rho[i] = round_to_bank(sh.bank, load_element(a.q_val, stream * sh.R + r));
  }
  tok.beta = load_element(a.beta, stream);
}

// Asks for the cache lines of columns [col0, col0 + n) of every listed (unmasked) row
// before any is used: the rows are random, so their DRAM latencies overlap instead of
// adding up.
template <typename Elem>
void prefetch_rows(const Elem* bank, std::int64_t hd, std::int64_t col0, std::int64_t n,
                   const std::int64_t* rows, std::int64_t count) {
#if defined(__GNUC__)
  constexpr std::int64_t kLineElems = 64 / static_cast<std::int64_t>(sizeof(Elem));
  for (std::int64_t k = 0; k < count; ++k) {
    if (rows[k] == kMaskedRow) continue;
    const Elem* first = bank + rows[k] * hd + col0;
    for (std::int64_t c = 0; c < n; c += kLineElems) __builtin_prefetch(first + c);
    __builtin_prefetch(first + n - 1);
  }
#else
  (void)bank, (void)hd, (void)col0, (void)n, (void)rows, (void)count;
#endif
}

// Columns [col0, col0 + n) of one stream's token: write, then read (n <= kTileCols).
template <typename Elem>
void decode_columns(const DecodeJob& job, std::int64_t stream, const StagedToken& tok,
                    std::int64_t col0, std::int64_t n) {
  using E = BankElem<Elem>;
  const auto& sh = job.shape;
  Elem* bank = job.args.memory.data_as<Elem>();
  auto row_at = [&](std::int64_t row) { return bank + row * sh.hd + col0; };

  prefetch_rows<Elem>(bank, sh.hd, col0, n, tok.write_row.data(), sh.W);
  prefetch_rows<Elem>(bank, sh.hd, col0, n, tok.read_row.data(), sh.R);
  float acc[kTileCols] = {};  // ret, then delta
  for (std::int64_t w = 0; w < sh.W; ++w) {
    const auto i = static_cast<std::size_t>(w);
    if (tok.write_row[i] == kMaskedRow) continue;
    const Elem* row = row_at(tok.write_row[i]);
    const float kappa = tok.kappa[i], decay = tok.decay[i];
    for (std::int64_t c = 0; c < n; ++c) acc[c] += kappa * (decay * E::load(row[c]));
  }
  const std::int64_t v0 = stream * sh.hd + col0;
  float v[kTileCols];
  load_elements(job.args.v, v0, n, v);
  for (std::int64_t c = 0; c < n; ++c) acc[c] = tok.beta * (E::load(E::store(v[c])) - acc[c]);
  for (std::int64_t w = 0; w < sh.W; ++w) {
    const auto i = static_cast<std::size_t>(w);
    if (tok.write_row[i] == kMaskedRow) continue;
    Elem* row = row_at(tok.write_row[i]);
    const float kappa = tok.kappa[i], decay = tok.decay[i];
    for (std::int64_t c = 0; c < n; ++c) row[c] = E::store(decay * E::load(row[c]) + kappa * acc[c]);
  }
  float y[kTileCols] = {};
  for (std::int64_t r = 0; r < sh.R; ++r) {
    const auto i = static_cast<std::size_t>(r);
    if (tok.read_row[i] == kMaskedRow) continue;
    const Elem* row = row_at(tok.read_row[i]);
    const float rho = tok.rho[i];
    for (std::int64_t c = 0; c < n; ++c) y[c] += rho * E::load(row[c]);
  }
  Elem* out = job.readings.data_as<Elem>() + v0;
  for (std::int64_t c = 0; c < n; ++c) out[c] = E::store(y[c]);
}

// Parallel decomposition: one work item per (stream, tile of kTileCols columns), split over
// the pool by parallel_for. The recurrence is column-separable (no sum runs across
// columns) and streams own private rows (a precondition, docs/spec.md §1), so each item writes
// then reads its own columns of its own rows and no two items touch the same bytes. Every
// column is computed by the same fixed sequence of f32 operations whatever the item
// split, hence results are bitwise independent of the thread count.
template <typename Elem>
void decode_all(const DecodeJob& job, int threads) {
  const auto& sh = job.shape;
  const std::int64_t tiles = (sh.hd + kTileCols - 1) / kTileCols;
  parallel_for(sh.streams * tiles, threads, [&](std::int64_t item) {
    const std::int64_t stream = item / tiles;
    const std::int64_t col0 = (item % tiles) * kTileCols;
    StagedToken tok;
    stage_token(job, stream, tok);
    decode_columns<Elem>(job, stream, tok, col0, std::min(kTileCols, sh.hd - col0));
  });
}

}  // namespace

void decode_step_on_threads(const WriteReadArgs& args, const TensorRef& readings,
                            const core::DecodeShape& shape, const DecodeOptions& options, int threads) {
  const DecodeJob job{args, readings, shape, options.slots_per_stream};
  if (shape.bank == DType::bf16) {
    decode_all<std::uint16_t>(job, threads);
  } else {
    decode_all<float>(job, threads);
  }
}

// Worker count: a step moves few bytes (streams * (2W + R) rows), and handing work to the
// pool costs tens of microseconds, so the step takes one worker per kBytesPerWorker of row
// traffic, up to the configured count ($SDM_NUM_THREADS or the hardware's).
void decode_step(const WriteReadArgs& args, const TensorRef& readings,
                 const core::DecodeShape& shape, const DecodeOptions& options) {
  const std::int64_t row_bytes = shape.hd * static_cast<std::int64_t>(dtype_size(shape.bank));
  const std::int64_t step_bytes = shape.streams * (2 * shape.W + shape.R) * row_bytes;
  const std::int64_t wanted = std::max<std::int64_t>(1, step_bytes / kBytesPerWorker);
  const int threads = static_cast<int>(std::min<std::int64_t>(wanted, resolve_num_threads(0)));
  decode_step_on_threads(args, readings, shape, options, threads);
}

}  // namespace sdm::cpu

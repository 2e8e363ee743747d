// slot_patterns.hpp - the bank rows the benchmarks write and read: host-side generators of the
// k_idx / q_idx tensors [P, T, width] (absolute rows, stream p's in [p*sps, (p+1)*sps), the
// `width` slots of a token distinct), one per addressing pattern, and the reuse statistics that
// set the cost of a chunk (the fraction of a chunk's write entries that hit distinct rows, and of
// its read entries that land on rows it writes).
//
// Patterns:
//   strided      token t's slots offset_t + w * (sps / width) + jitter_w (mod sps): every slot of a
//                token in its own stride, offsets independent per token (little reuse; flatters
//                the kernels: nearly every slot group has one entry).
//   product_key  a layer's addressing: product-key top-k (docs/spec.md §10: n = isqrt(sps) keys per factor,
//                factor top-k1 with k1 = min(width, n), top-width of the k1 x k1 candidate sums,
//                slots ascending) of scores z_t . proj over a temporally correlated latent z
//                (AR(1): z_t = 0.9 z_{t-1} + sqrt(1 - 0.81) noise, 64 dims, Gaussian noise and
//                projections): consecutive tokens share slots; a chunk of 64 tokens hits 0.4-0.55 distinct rows.
//   heavy_reuse  the same with a fixed bias on a few keys of each factor, so that a few keys win
//                for most tokens (as in trained layers): a chunk of 64 hits 0.15-0.2 distinct rows.
// Deterministic for a seed on every platform (own generator, no std distributions).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace sdm::bench {

enum class SlotPattern { strided, product_key, heavy_reuse };

// "strided" / "product_key" / "heavy_reuse" (std::invalid_argument naming the value otherwise).
SlotPattern parse_slot_pattern(const std::string& name);
const char* slot_pattern_name(SlotPattern pattern);

// The k_idx [P, T, W] and q_idx [P, T, R] slots of one draw (stream-major, token-major, lane
// fastest). product_key / heavy_reuse: writes and reads from one latent and one set of key biases,
// each side with its own projection, as a layer's write and read keys are two projections of one
// token over the same keys (bench/compare's inputs are drawn so too). So under heavy_reuse most
// read entries (about 0.7 of a chunk's) land on rows the chunk writes, under product_key few (about
// 0.05). strided: writes and reads drawn independently.
struct WriteReadSlots {
  std::vector<std::int32_t> writes, reads;
};
WriteReadSlots make_write_read_slots(SlotPattern pattern, std::int64_t P, std::int64_t T, std::int64_t W,
                                     std::int64_t R, std::int64_t sps, std::uint64_t seed);

// Mean over the chunks of C tokens (the last partial one included) of distinct rows / entries.
double distinct_fraction(const std::vector<std::int32_t>& slots, std::int64_t P, std::int64_t T, std::int64_t width,
                         std::int64_t C);

// Mean over the chunks of C tokens of the fraction of read entries whose row the chunk writes.
double read_written_fraction(const WriteReadSlots& slots, std::int64_t P, std::int64_t T, std::int64_t W,
                             std::int64_t R, std::int64_t C);

}  // namespace sdm::bench

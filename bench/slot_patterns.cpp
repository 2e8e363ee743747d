// slot_patterns.cpp - the benchmarks' slot generators (slot_patterns.hpp).
#include "slot_patterns.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>
#include <thread>

namespace sdm::bench {
namespace {

constexpr int kLatentDims = 64;
constexpr double kLatentRho = 0.9;     // AR(1) correlation of consecutive tokens' latents
constexpr double kProjScale = 1.0 / 8;  // proj ~ N(0, 1/64): factor scores ~ N(0, 1)
constexpr double kHeavyBias = 1.45;      // std of the heavy_reuse pattern's fixed per-key score bias

std::uint64_t mix(std::uint64_t x) {  // splitmix64
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// A counter-based stream of uniforms and normals (Box-Muller), the same on every platform.
class Draws {
 public:
  explicit Draws(std::uint64_t seed) : state_(mix(seed)) {}
  double uniform() {  // (0, 1)
    state_ = mix(state_);
    return (static_cast<double>(state_ >> 11) + 0.5) * 0x1p-53;
  }
  double normal() {
    const double r = std::sqrt(-2.0 * std::log(uniform())), a = 6.283185307179586 * uniform();
    return r * std::cos(a);
  }

 private:
  std::uint64_t state_;
};

// Runs body(p, t_begin, t_end) over the P x T tokens split into contiguous ranges on the host's
// threads (no result depends on the split).
template <typename Body>
void for_token_ranges(std::int64_t P, std::int64_t T, Body&& body) {
  const std::int64_t threads = std::max<std::int64_t>(1, std::thread::hardware_concurrency());
  const std::int64_t per_stream = std::max<std::int64_t>(1, (threads + P - 1) / P);
  const std::int64_t span = (T + per_stream - 1) / per_stream;
  std::vector<std::thread> pool;
  for (std::int64_t p = 0; p < P; ++p) {
    for (std::int64_t t0 = 0; t0 < T; t0 += span) pool.emplace_back(body, p, t0, std::min(T, t0 + span));
  }
  for (std::thread& t : pool) t.join();
}

std::vector<std::int32_t> strided_slots(std::int64_t P, std::int64_t T, std::int64_t width, std::int64_t sps,
                                        std::uint64_t seed) {
  std::vector<std::int32_t> out(static_cast<std::size_t>(P * T * width));
  const std::int64_t stride = sps / width;
  for (std::int64_t token = 0; token < P * T; ++token) {
    const std::int64_t p = token / T;
    const auto offset = static_cast<std::int64_t>(mix(seed ^ static_cast<std::uint64_t>(token)) % sps);
    for (std::int64_t w = 0; w < width; ++w) {
      const std::int64_t i = token * width + w;
      const auto jitter = static_cast<std::int64_t>(mix(seed + static_cast<std::uint64_t>(i)) % stride);
      out[static_cast<std::size_t>(i)] = static_cast<std::int32_t>(p * sps + (offset + w * stride + jitter) % sps);
    }
  }
  return out;
}

// The addressing state of one product-key draw: every stream's latent (AR(1) over tokens, 64
// dims), the keys' fixed score biases, and the writes' and reads' own projections.
struct ProductKeyDraw {
  std::int64_t P, T, sps, n;  // n = isqrt(sps) keys per factor
  std::vector<float> z, key_bias, write_proj, read_proj;
};

// Draws, in this order: the latents, the writes' projection, the key biases (standard deviation
// `bias`, 0: none), then the reads' projection (so the writes of a seed are those drawn before
// the reads shared the latent).
ProductKeyDraw draw_product_keys(std::int64_t P, std::int64_t T, std::int64_t sps, std::uint64_t seed, double bias) {
  ProductKeyDraw d{P, T, sps, static_cast<std::int64_t>(std::sqrt(static_cast<double>(sps))), {}, {}, {}, {}};
  const std::int64_t keys = 2 * d.n;
  Draws draws(seed);
  d.z.resize(static_cast<std::size_t>(P * T * kLatentDims));
  const double innovation = std::sqrt(1.0 - kLatentRho * kLatentRho);
  for (std::int64_t p = 0; p < P; ++p) {
    for (std::int64_t t = 0; t < T; ++t) {
      for (int k = 0; k < kLatentDims; ++k) {
        const std::size_t i = static_cast<std::size_t>((p * T + t) * kLatentDims + k);
        d.z[i] = static_cast<float>(t == 0 ? draws.normal() : kLatentRho * d.z[i - kLatentDims] + innovation * draws.normal());
      }
    }
  }
  const auto projection = [&] {
    std::vector<float> proj(static_cast<std::size_t>(kLatentDims * keys));
    for (float& x : proj) x = static_cast<float>(kProjScale * draws.normal());
    return proj;
  };
  d.write_proj = projection();
  d.key_bias.resize(static_cast<std::size_t>(keys));
  for (float& x : d.key_bias) x = static_cast<float>(bias * draws.normal());
  d.read_proj = projection();
  return d;
}

// Product-key top-width slots of every token (slot_patterns.hpp) of scores z_t . proj + key_bias.
std::vector<std::int32_t> product_key_slots(const ProductKeyDraw& draw, const std::vector<float>& proj,
                                            std::int64_t width) {
  const std::int64_t P = draw.P, T = draw.T, n = draw.n, sps = draw.sps, keys = 2 * n, k1 = std::min(width, n);
  if (n * n < width) throw std::invalid_argument("product_key slots: width exceeds isqrt(sps)^2");
  const std::vector<float>& z = draw.z;
  const std::vector<float>& key_bias = draw.key_bias;
  std::vector<std::int32_t> out(static_cast<std::size_t>(P * T * width));
  for_token_ranges(P, T, [&](std::int64_t p, std::int64_t t_begin, std::int64_t t_end) {
    std::vector<float> score(static_cast<std::size_t>(keys)), sums(static_cast<std::size_t>(k1 * k1));
    std::vector<std::int64_t> top[2], cand(static_cast<std::size_t>(k1 * k1));
    for (std::int64_t t = t_begin; t < t_end; ++t) {
      const float* zt = z.data() + (p * T + t) * kLatentDims;
      for (std::int64_t k = 0; k < keys; ++k) {
        float s = key_bias[static_cast<std::size_t>(k)];
        for (int d = 0; d < kLatentDims; ++d) s += zt[d] * proj[static_cast<std::size_t>(d * keys + k)];
        score[static_cast<std::size_t>(k)] = s;
      }
      // Factor top-k1: descending score, ties to the smaller key (docs/spec.md §10).
      for (int f = 0; f < 2; ++f) {
        top[f].resize(static_cast<std::size_t>(n));
        std::iota(top[f].begin(), top[f].end(), std::int64_t{0});
        const float* sf = score.data() + f * n;
        std::partial_sort(top[f].begin(), top[f].begin() + k1, top[f].end(), [&](std::int64_t a, std::int64_t b) {
          return sf[a] != sf[b] ? sf[a] > sf[b] : a < b;
        });
      }
      for (std::int64_t a = 0; a < k1; ++a) {
        for (std::int64_t b = 0; b < k1; ++b) {
          const std::int64_t c = a * k1 + b, i1 = top[0][static_cast<std::size_t>(a)],
                             i2 = top[1][static_cast<std::size_t>(b)];
          sums[static_cast<std::size_t>(c)] = score[static_cast<std::size_t>(i1)] + score[static_cast<std::size_t>(n + i2)];
          cand[static_cast<std::size_t>(c)] = i1 * n + i2;
        }
      }
      // Top-width of the candidate sums: descending sum, ties to the smaller slot; then ascending slots.
      std::vector<std::int64_t> order(static_cast<std::size_t>(k1 * k1));
      std::iota(order.begin(), order.end(), std::int64_t{0});
      std::nth_element(order.begin(), order.begin() + (width - 1), order.end(), [&](std::int64_t a, std::int64_t b) {
        const float sa = sums[static_cast<std::size_t>(a)], sb = sums[static_cast<std::size_t>(b)];
        return sa != sb ? sa > sb : cand[static_cast<std::size_t>(a)] < cand[static_cast<std::size_t>(b)];
      });
      std::int32_t* row = out.data() + (p * T + t) * width;
      for (std::int64_t w = 0; w < width; ++w) {
        row[w] = static_cast<std::int32_t>(p * sps + cand[static_cast<std::size_t>(order[static_cast<std::size_t>(w)])]);
      }
      std::sort(row, row + width);
    }
  });
  return out;
}

}  // namespace

SlotPattern parse_slot_pattern(const std::string& name) {
  if (name == "strided") return SlotPattern::strided;
  if (name == "product_key") return SlotPattern::product_key;
  if (name == "heavy_reuse") return SlotPattern::heavy_reuse;
  throw std::invalid_argument("slot pattern: expected strided, product_key or heavy_reuse, got '" + name + "'");
}

const char* slot_pattern_name(SlotPattern pattern) {
  switch (pattern) {
    case SlotPattern::strided: return "strided";
    case SlotPattern::product_key: return "product_key";
    case SlotPattern::heavy_reuse: return "heavy_reuse";
  }
  return "?";
}

WriteReadSlots make_write_read_slots(SlotPattern pattern, std::int64_t P, std::int64_t T, std::int64_t W,
                                     std::int64_t R, std::int64_t sps, std::uint64_t seed) {
  for (const std::int64_t width : {W, R}) {
    if (width < 1 || width > sps) throw std::invalid_argument("make_write_read_slots: W and R must be in [1, sps]");
  }
  if (pattern == SlotPattern::strided) return {strided_slots(P, T, W, sps, seed), strided_slots(P, T, R, sps, seed + 1)};
  const ProductKeyDraw draw =
      draw_product_keys(P, T, sps, seed, pattern == SlotPattern::heavy_reuse ? kHeavyBias : 0.0);
  return {product_key_slots(draw, draw.write_proj, W), product_key_slots(draw, draw.read_proj, R)};
}

namespace {

// The mean over every stream's chunks of C tokens (the last partial one included) of
// fraction(p, t0, t1) (`empty` when there are none).
template <typename Fraction>
double mean_over_chunks(std::int64_t P, std::int64_t T, std::int64_t C, double empty, Fraction&& fraction) {
  double sum = 0.0;
  std::int64_t chunks = 0;
  for (std::int64_t p = 0; p < P; ++p) {
    for (std::int64_t t0 = 0; t0 < T; t0 += C, ++chunks) sum += fraction(p, t0, std::min(T, t0 + C));
  }
  return chunks > 0 ? sum / static_cast<double>(chunks) : empty;
}

// A chunk's slots [t0, t1) x width of stream p, sorted.
std::vector<std::int32_t> sorted_chunk(const std::vector<std::int32_t>& slots, std::int64_t T, std::int64_t width,
                                       std::int64_t p, std::int64_t t0, std::int64_t t1) {
  const std::int32_t* first = slots.data() + (p * T + t0) * width;
  std::vector<std::int32_t> chunk(first, first + (t1 - t0) * width);
  std::sort(chunk.begin(), chunk.end());
  return chunk;
}

}  // namespace

double distinct_fraction(const std::vector<std::int32_t>& slots, std::int64_t P, std::int64_t T, std::int64_t width,
                         std::int64_t C) {
  return mean_over_chunks(P, T, C, 1.0, [&](std::int64_t p, std::int64_t t0, std::int64_t t1) {
    std::vector<std::int32_t> chunk = sorted_chunk(slots, T, width, p, t0, t1);
    const auto distinct = std::unique(chunk.begin(), chunk.end()) - chunk.begin();
    return static_cast<double>(distinct) / static_cast<double>(chunk.size());
  });
}

double read_written_fraction(const WriteReadSlots& slots, std::int64_t P, std::int64_t T, std::int64_t W,
                             std::int64_t R, std::int64_t C) {
  return mean_over_chunks(P, T, C, 0.0, [&](std::int64_t p, std::int64_t t0, std::int64_t t1) {
    const std::vector<std::int32_t> written = sorted_chunk(slots.writes, T, W, p, t0, t1);
    const std::int32_t* reads = slots.reads.data() + (p * T + t0) * R;
    std::int64_t hits = 0;
    for (std::int64_t i = 0; i < (t1 - t0) * R; ++i) {
      hits += std::binary_search(written.begin(), written.end(), reads[i]) ? 1 : 0;
    }
    return static_cast<double>(hits) / static_cast<double>((t1 - t0) * R);
  });
}

}  // namespace sdm::bench

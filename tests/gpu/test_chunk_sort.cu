// test_chunk_sort.cu - GPU test of the per-chunk key sort (src/cuda/sort/chunk_sort.hpp), and the
// main of sdm_gpu_sort_tests (with the entry-key tests, test_entry_keys.cu). A plain program run
// by gpu_test_harness.hpp like the other GPU tests: one line per case and its failed checks; the
// exit status 1 on any failed check, 0 with a message where no CUDA device exists.
//
// Keys are made like the engine's (common/geometry.hpp's KeyLayout): chunk n | random local slot |
// token i | lane x, stored in entry order n*C*X + i*X + x. Slots are drawn uniformly, from a few
// values, or mostly equal to the all-ones pattern of the slot bits (the value of the sort's tile
// padding). sort_chunk_keys's output must equal, bit for bit, cub::DeviceRadixSort::SortKeys on
// [begin_bit, total_bits) (the engine's previous sort) and a host std::stable_sort on those bits.
// Shapes: chunks {1, 3, 128, 513} x keys per chunk {1, 7, 1000, 1024, 4095, 4096, 8192, 8193 (the
// device-wide fallback)}, slot widths 1 .. 30; the three engine configurations (small, readme,
// flagship key counts and slot widths); 70000 chunks (more than 65535 CTAs in gridDim.x).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include <cub/device/device_radix_sort.cuh>

#include "cuda/common/geometry.hpp"
#include "cuda/sort/chunk_sort.hpp"
#include "device_array.hpp"
#include "entry_key_tests.hpp"
#include "gpu_test_harness.hpp"

namespace {

using sdm::cuda::bits_for;
using sdm::cuda::ChunkSort;
using sdm::cuda::KeyLayout;
using sdm::testing::cuda_ok;
using sdm::testing::CudaStream;
using DeviceKeys = sdm::testing::DeviceArray<std::uint64_t>;
using sdm::testing::expect;

enum class Slots { uniform, few, mostly_all_ones };

const char* slots_name(Slots s) {
  return s == Slots::uniform ? "uniform" : s == Slots::few ? "few values" : "mostly all-ones";
}

struct Case {
  std::int64_t chunks, per_chunk;
  int slot_bits;
  Slots slots;
};

// The engine's lanes for a chunk of per_chunk = C * X keys: the largest of 16, 8, 5, 3, 1 dividing it.
std::int64_t lanes_for(std::int64_t per_chunk) {
  for (const std::int64_t x : {16, 8, 5, 3}) {
    if (per_chunk % x == 0) return x;
  }
  return 1;
}

std::vector<std::uint64_t> make_keys(const Case& c, const KeyLayout& layout, std::int64_t lanes, std::mt19937_64& rng) {
  const std::uint64_t all_ones = (std::uint64_t{1} << c.slot_bits) - 1;
  std::uniform_int_distribution<std::uint64_t> any(0, all_ones);
  const std::uint64_t few[4] = {0, all_ones, any(rng), any(rng)};
  std::vector<std::uint64_t> keys;
  keys.reserve(static_cast<std::size_t>(c.chunks * c.per_chunk));
  for (std::int64_t n = 0; n < c.chunks; ++n) {
    for (std::int64_t i = 0; i < c.per_chunk / lanes; ++i) {
      for (std::int64_t x = 0; x < lanes; ++x) {
        std::uint64_t slot = any(rng);
        if (c.slots == Slots::few) slot = few[rng() % 4];
        if (c.slots == Slots::mostly_all_ones && rng() % 4 != 0) slot = all_ones;
        keys.push_back(layout.encode(n, static_cast<std::int64_t>(slot), i, x));
      }
    }
  }
  return keys;
}

// Index of the first difference, or -1.
std::int64_t first_difference(const std::vector<std::uint64_t>& a, const std::vector<std::uint64_t>& b) {
  if (a.size() != b.size()) return 0;
  const auto at = std::mismatch(a.begin(), a.end(), b.begin());
  return at.first == a.end() ? -1 : static_cast<std::int64_t>(at.first - a.begin());
}

void run_case(const Case& c, std::mt19937_64& rng, cudaStream_t stream) {
  const std::int64_t lanes = lanes_for(c.per_chunk);
  KeyLayout layout;
  layout.lane_bits = bits_for(static_cast<std::uint64_t>(lanes - 1));
  layout.token_bits = bits_for(static_cast<std::uint64_t>(c.per_chunk / lanes - 1));
  layout.slot_bits = c.slot_bits;
  layout.chunk_bits = bits_for(static_cast<std::uint64_t>(c.chunks - 1));
  const int begin = layout.lane_bits + layout.token_bits, total = layout.total_bits();
  const std::vector<std::uint64_t> keys = make_keys(c, layout, lanes, rng);
  const std::size_t count = keys.size();

  const ChunkSort plan = sdm::cuda::plan_chunk_sort(c.chunks, c.per_chunk, begin, begin + c.slot_bits, total);
  // The planned path: the smallest block tile holding a chunk, else the device-wide sort.
  std::int64_t want_tile = 0;
  for (const std::int64_t tile : {1024, 2048, 4096, 8192}) {
    if (want_tile == 0 && c.per_chunk <= tile) want_tile = tile;
  }
  std::printf("  chunks %6lld x %5lld keys (X %2lld, bits %2d..%2d..%2d, %-15s) %s", static_cast<long long>(c.chunks),
              static_cast<long long>(c.per_chunk), static_cast<long long>(lanes), begin, begin + c.slot_bits, total,
              slots_name(c.slots), plan.tile != 0 ? "block tile" : "device-wide");
  if (plan.tile != 0) std::printf(" %lld", static_cast<long long>(plan.tile));
  std::printf("\n");
  expect(plan.tile == want_tile && (plan.tile != 0 || plan.temp_bytes > 0),
         "planned path: tile " + std::to_string(plan.tile) + ", want " + std::to_string(want_tile) +
             " (0: device-wide, with temp storage)");

  DeviceKeys in(keys), out(count), ref(count), temp(plan.temp_bytes / sizeof(std::uint64_t) + 1);
  out.fill_bytes(0xab);  // unwritten keys show up
  sdm::cuda::sort_chunk_keys(plan, in.get(), out.get(), temp.get(), stream);

  std::size_t ref_temp_bytes = 0;
  cuda_ok(cub::DeviceRadixSort::SortKeys(nullptr, ref_temp_bytes, in.get(), ref.get(), count, begin, total),
          "cub size query");
  DeviceKeys ref_temp(ref_temp_bytes / sizeof(std::uint64_t) + 1);
  cuda_ok(cub::DeviceRadixSort::SortKeys(ref_temp.get(), ref_temp_bytes, in.get(), ref.get(), count, begin, total,
                                         stream),
          "cub::DeviceRadixSort::SortKeys");
  cuda_ok(cudaStreamSynchronize(stream), "cudaStreamSynchronize");

  std::vector<std::uint64_t> host = keys;
  std::stable_sort(host.begin(), host.end(),
                   [begin](std::uint64_t a, std::uint64_t b) { return (a >> begin) < (b >> begin); });
  const std::vector<std::uint64_t> got = out.to_host();
  const std::int64_t vs_cub = first_difference(got, ref.to_host()), vs_host = first_difference(got, host);
  expect(vs_cub < 0, "== cub::DeviceRadixSort::SortKeys (first difference at " + std::to_string(vs_cub) + ")");
  expect(vs_host < 0, "== host std::stable_sort (first difference at " + std::to_string(vs_host) + ")");
}

void run_cases(const std::vector<Case>& cases, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  const CudaStream stream;
  for (const Case& c : cases) run_case(c, rng, stream.get());
}

// Chunks {1, 3, 128, 513} x keys per chunk {1, 7, 1000, 1024, 4095, 4096, 8192, 8193}: every tile
// and the device-wide fallback, slot widths and slot distributions cycled through.
void test_shapes() {
  std::vector<Case> cases;
  const int widths[] = {1, 7, 15, 17, 24, 30};
  const Slots modes[] = {Slots::uniform, Slots::few, Slots::mostly_all_ones};
  int k = 0;
  for (const std::int64_t chunks : {1, 3, 128, 513}) {
    for (const std::int64_t per_chunk : {1, 7, 1000, 1024, 4095, 4096, 8192, 8193}) {
      cases.push_back({chunks, per_chunk, widths[k % 6], modes[(k / 6) % 3]});
      ++k;
    }
  }
  run_cases(cases, 20240607);
}

// Every engine config sorts 32-bit values (slot bits + log2(tile) <= 32, chunk_sort.cu); widths 24
// and 30 above take the 64-bit sort.
void test_engine_configs() {
  run_cases({{128, 1024, 15, Slots::uniform},   // small: W = 16, C = 64
             {256, 4096, 16, Slots::uniform},   // readme: W = 64, C = 64
             {256, 4096, 19, Slots::uniform},   // big: 262144 slots (the widest narrow sort: 19 + 12 bits)
             {512, 8192, 17, Slots::uniform},   // flagship: W = 128, C = 64
             {512, 8192, 17, Slots::mostly_all_ones}},
            20240608);
}

void test_many_chunks() { run_cases({{70000, 7, 15, Slots::few}}, 20240609); }

}  // namespace

// Arguments: substrings of test names to run (all tests without any), --verbose (gpu_test_harness.hpp).
int main(int argc, char** argv) {
  const sdm::testing::GpuTest tests[] = {
      {"shapes: chunks x keys per chunk x slot widths", test_shapes},
      {"engine configurations: small, readme, big, flagship", test_engine_configs},
      {"70000 chunks: gridDim.x beyond 65535", test_many_chunks},
      {"entry keys: shapes, == the replaced kernels", sdm::testing::test_entry_key_shapes},
      {"entry keys: readme and flagship", sdm::testing::test_entry_key_engine_configs},
  };
  return sdm::testing::run_gpu_tests("sdm_gpu_sort_tests", tests, argc, argv);
}

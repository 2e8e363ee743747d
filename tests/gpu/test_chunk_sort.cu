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
// Shapes: chunks {1, 3, 128, 513} x keys per chunk {1, 7, 1000, 1024, 4095, 4096, 8192, 8193},
// slot widths 1 .. 30; the engine configurations (small, readme, big, flagship key counts and slot
// widths); the 16384-key tile (chunks of 8193 .. 16384 keys, its 32-bit and 64-bit sorts, C 128 x
// W 128 and C 100 x W 150 among them) and the device-wide sort just above it and at the largest
// engine chunk (65536 keys); 70000 chunks (more than 65535 CTAs in gridDim.x). Each case checks the
// planned path too (the tile, or the device-wide sort).
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
  std::int64_t lanes = 0;  // X (W or R) dividing per_chunk; 0: lanes_for(per_chunk)
};

// Lanes for a chunk of per_chunk = C * X keys: the largest of 16, 8, 5, 3, 1 dividing it.
std::int64_t lanes_for(std::int64_t per_chunk) {
  for (const std::int64_t x : {16, 8, 5, 3}) {
    if (per_chunk % x == 0) return x;
  }
  return 1;
}

// The current device's shared memory per block with the opt-in (cudaFuncSetAttribute) limit.
int shared_memory_optin() {
  int device = 0, bytes = 0;
  cuda_ok(cudaGetDevice(&device), "cudaGetDevice");
  cuda_ok(cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, device), "cudaDeviceGetAttribute");
  return bytes;
}

// Whether a tile's sort takes 32-bit words: the slot bits and a position in the tile fit 32 bits.
bool narrow_tile(std::int64_t tile, int slot_bits) {
  return slot_bits + bits_for(static_cast<std::uint64_t>(tile - 1)) <= 32;
}

// The planned path: the smallest block tile holding a chunk, else (0) the device-wide sort; the
// device-wide sort too for the 64-bit 16384 tile (cub's storage in CUDA 13.0: 132 KiB of shared
// memory) where a block may not opt in to that much (99 KiB on sm_86, sm_89, sm_120; sm_80 and
// sm_90 may).
std::int64_t planned_tile(const Case& c) {
  for (const std::int64_t tile : {1024, 2048, 4096, 8192, 16384}) {
    if (c.per_chunk > tile) continue;
    if (tile == 16384 && !narrow_tile(tile, c.slot_bits) && shared_memory_optin() < 132 * 1024) return 0;
    return tile;
  }
  return 0;
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
  const std::int64_t lanes = c.lanes != 0 ? c.lanes : lanes_for(c.per_chunk);
  KeyLayout layout;
  layout.lane_bits = bits_for(static_cast<std::uint64_t>(lanes - 1));
  layout.token_bits = bits_for(static_cast<std::uint64_t>(c.per_chunk / lanes - 1));
  layout.slot_bits = c.slot_bits;
  layout.chunk_bits = bits_for(static_cast<std::uint64_t>(c.chunks - 1));
  const int begin = layout.lane_bits + layout.token_bits, total = layout.total_bits();
  const std::vector<std::uint64_t> keys = make_keys(c, layout, lanes, rng);
  const std::size_t count = keys.size();

  const ChunkSort plan = sdm::cuda::plan_chunk_sort(c.chunks, c.per_chunk, begin, begin + c.slot_bits, total);
  const std::int64_t want_tile = planned_tile(c);
  std::printf("  chunks %6lld x %5lld keys (X %3lld, bits %2d..%2d..%2d, %-15s) %s", static_cast<long long>(c.chunks),
              static_cast<long long>(c.per_chunk), static_cast<long long>(lanes), begin, begin + c.slot_bits, total,
              slots_name(c.slots), plan.tile != 0 ? "block tile" : "device-wide");
  if (plan.tile != 0) {
    std::printf(" %lld (%s)", static_cast<long long>(plan.tile),
                narrow_tile(plan.tile, c.slot_bits) ? "32-bit words" : "64-bit keys");
  }
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
// (8193: the 16384 one; the device-wide sort in test_tile_16384), slot widths and slot
// distributions cycled through.
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

// Every engine config at C 64 sorts 32-bit values (slot bits + log2(tile) <= 32, chunk_sort.cu);
// widths 24 and 30 above take the 64-bit sort (and big at C 256, test_tile_16384).
void test_engine_configs() {
  run_cases({{128, 1024, 15, Slots::uniform},   // small: W = 16, C = 64
             {256, 4096, 16, Slots::uniform},   // readme: W = 64, C = 64
             {256, 4096, 19, Slots::uniform},   // big: 262144 slots (the widest narrow sort: 19 + 12 bits)
             {512, 8192, 17, Slots::uniform},   // flagship: W = 128, C = 64
             {512, 8192, 17, Slots::mostly_all_ones}},
            20240608);
}

// The 16384-key tile (1024 threads x 16 keys): chunks of 8193 .. 16384 keys, its 32-bit sort (slot
// bits + 14 <= 32: up to 18 slot bits) and its 64-bit sort (19 and more), the engine's shapes and
// awkward counts (not a multiple of a warp's 32 or of 16 keys a thread), equal slots (stability)
// and real slots equal to the padding's all-ones pattern; then the device-wide sort just above the
// tile and at the largest chunk of an engine call (C 256 x W 256, kMaxChunk x kMaxWidth).
void test_tile_16384() {
  run_cases({{256, 16384, 17, Slots::uniform, 128},         // flagship C 128: W = R = 128, P 8, T 4096
             {256, 16384, 17, Slots::few, 128},
             {256, 16384, 17, Slots::mostly_all_ones, 128},
             {64, 15000, 17, Slots::uniform, 150},          // C 100 x W 150
             {64, 15000, 9, Slots::few, 150},
             {3, 8193, 18, Slots::few},                     // one past the 8192 tile; 18 + 14 = 32 bits
             {5, 9999, 18, Slots::uniform},
             {7, 12289, 1, Slots::uniform},                 // one slot bit: about half the keys equal
             {2, 16383, 7, Slots::mostly_all_ones},
             {1, 16384, 18, Slots::mostly_all_ones},
             {64, 16384, 19, Slots::uniform, 64},           // big C 256: W 64, 2^18 slots, 19 + 14 > 32
             {64, 16384, 19, Slots::few, 64},
             {9, 13000, 24, Slots::mostly_all_ones},
             {3, 16383, 30, Slots::few},
             {2, 8200, 19, Slots::uniform},
             {5, 16385, 17, Slots::few},                    // device-wide: one past the tile
             {3, 16385, 24, Slots::uniform},
             {4, 65536, 17, Slots::few, 256}},              // device-wide: C 256 x W 256
            20240611);
}

void test_many_chunks() { run_cases({{70000, 7, 15, Slots::few}}, 20240609); }

}  // namespace

// Arguments: substrings of test names to run (all tests without any), --verbose (gpu_test_harness.hpp).
int main(int argc, char** argv) {
  const sdm::testing::GpuTest tests[] = {
      {"shapes: chunks x keys per chunk x slot widths", test_shapes},
      {"engine configurations: small, readme, big, flagship", test_engine_configs},
      {"16384-key tile: 8193 .. 16384 keys per chunk, 32- and 64-bit sorts", test_tile_16384},
      {"70000 chunks: gridDim.x beyond 65535", test_many_chunks},
      {"entry keys: shapes, == the replaced kernels", sdm::testing::test_entry_key_shapes},
      {"entry keys: readme and flagship", sdm::testing::test_entry_key_engine_configs},
  };
  return sdm::testing::run_gpu_tests("sdm_gpu_sort_tests", tests, argc, argv);
}

// test_entry_keys.cu - GPU tests of the entry keys (src/cuda/sort/entry_keys.hpp: make_entry_keys
// and the per-chunk sort), in sdm_gpu_sort_tests (entry_key_tests.hpp).
//
// For every case the write keys, k_slot and the read keys in entry order must equal, bit for bit,
// the two kernels they replaced (tests/cpp/support/entry_key_oracle.hpp: make_write_keys and
// make_read_keys at commit 67d0cb6), with and without the repeat mask (Inputs::distinct_writes),
// int32 and int64 indices; the sorted keys must equal a host stable sort of those keys on their
// chunk and slot bits. Outputs are filled with 0xab first, so an unwritten entry shows up.
// Cases: entry_key_oracle.hpp's shapes (int32 and int64 indices alternately), indices outside the
// stream's rows, negative and far; and the readme and flagship configurations (W = 64 and 128;
// flagship at C 64 and 128).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "cuda/sort/entry_keys.hpp"
#include "device_array.hpp"
#include "entry_key_oracle.hpp"
#include "entry_key_tests.hpp"
#include "gpu_test_harness.hpp"

namespace {

using sdm::cuda::Geometry;
using sdm::cuda::KeyLayout;
using sdm::testing::cuda_ok;
using sdm::testing::DeviceArray;
using sdm::testing::expect;

using sdm::testing::KeyShape;

Geometry geometry_of(const KeyShape& c) {
  sdm::core::WriteReadShape shape;
  shape.P = c.P, shape.T = c.T, shape.W = c.W, shape.R = c.R, shape.hd = 1, shape.slots_per_stream = c.sps;
  shape.S = c.P * c.sps;
  shape.C = std::min(c.C, c.T);
  return sdm::cuda::make_geometry(shape);
}

// Index of the first difference, or -1.
template <typename T>
std::int64_t first_difference(const std::vector<T>& a, const std::vector<T>& b) {
  if (a.size() != b.size()) return 0;
  const auto at = std::mismatch(a.begin(), a.end(), b.begin());
  return at.first == a.end() ? -1 : static_cast<std::int64_t>(at.first - a.begin());
}

std::vector<std::uint64_t> host_sorted(std::vector<std::uint64_t> keys, const KeyLayout& layout) {
  const int begin = layout.lane_bits + layout.token_bits;
  std::stable_sort(keys.begin(), keys.end(),
                   [begin](std::uint64_t a, std::uint64_t b) { return (a >> begin) < (b >> begin); });
  return keys;
}

void expect_same(std::int64_t difference, const std::string& what) {
  expect(difference < 0, what + " (first difference at " + std::to_string(difference) + ")");
}

// The op's index tensor on the device, int32 or int64.
struct DeviceIndices {
  DeviceArray<std::int32_t> i32;
  DeviceArray<std::int64_t> i64;
  DeviceIndices(const std::vector<std::int64_t>& idx, bool index64)
      : i32(index64 ? std::vector<std::int32_t>{} : std::vector<std::int32_t>(idx.begin(), idx.end())),
        i64(index64 ? idx : std::vector<std::int64_t>{}) {}
};

void run_case(const KeyShape& c, bool index64, std::mt19937_64& rng, cudaStream_t stream) {
  const Geometry geo = geometry_of(c);
  std::printf("  P %lld T %4lld C %3lld W %3lld R %3lld sps %5lld %s\n", static_cast<long long>(c.P),
              static_cast<long long>(c.T), static_cast<long long>(geo.C), static_cast<long long>(c.W),
              static_cast<long long>(c.R), static_cast<long long>(c.sps), index64 ? "int64" : "int32");
  const std::vector<std::int64_t> k_idx = sdm::testing::oracle_indices(geo, geo.W, !index64, rng);
  const DeviceIndices device_k_idx(k_idx, index64);
  const auto writes = static_cast<std::size_t>(geo.write_entries());
  DeviceArray<std::uint64_t> unsorted(writes), sorted(writes);
  DeviceArray<std::int32_t> k_slot(writes);
  DeviceArray<unsigned char> temp(sdm::cuda::entry_key_sort_bytes(geo, geo.keys, geo.W));
  for (const bool distinct : {false, true}) {
    sdm::cuda::Inputs in;
    in.k_idx = index64 ? static_cast<const void*>(device_k_idx.i64.get()) : device_k_idx.i32.get();
    in.k_index64 = index64;
    in.distinct_writes = distinct;
    unsorted.fill_bytes(0xab), sorted.fill_bytes(0xab), k_slot.fill_bytes(0xab);
    sdm::cuda::sort_write_keys(geo, in, unsorted.get(), sorted.get(), k_slot.get(), temp.get(), stream);
    cuda_ok(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    const sdm::testing::OracleKeys want = sdm::testing::oracle_write_keys(geo, k_idx, distinct);
    const std::string mode = distinct ? "writes (distinct)" : "writes (repeats masked)";
    expect_same(first_difference(unsorted.to_host(), want.keys), mode + ": keys == the replaced kernel's");
    expect_same(first_difference(k_slot.to_host(), want.slots), mode + ": k_slot == the replaced kernel's");
    expect_same(first_difference(sorted.to_host(), host_sorted(want.keys, geo.keys)), mode + ": sorted == host");
  }

  const KeyLayout read_layout = sdm::cuda::entry_key_layout(geo, geo.R);
  const std::vector<std::int32_t> q_slot =
      sdm::testing::oracle_q_slots(geo, sdm::testing::oracle_indices(geo, geo.R, true, rng));
  const auto reads = static_cast<std::size_t>(geo.read_entries());
  const DeviceArray<std::int32_t> device_q_slot(q_slot);
  DeviceArray<std::uint64_t> read_unsorted(reads), read_sorted(reads);
  DeviceArray<unsigned char> read_temp(sdm::cuda::entry_key_sort_bytes(geo, read_layout, geo.R));
  read_unsorted.fill_bytes(0xab), read_sorted.fill_bytes(0xab);
  sdm::cuda::sort_read_keys(geo, read_layout, device_q_slot.get(), read_unsorted.get(), read_sorted.get(),
                            read_temp.get(), stream);
  cuda_ok(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  const std::vector<std::uint64_t> want = sdm::testing::oracle_read_keys(geo, read_layout, q_slot);
  expect_same(first_difference(read_unsorted.to_host(), want), "reads: keys == the replaced kernel's");
  expect_same(first_difference(read_sorted.to_host(), host_sorted(want, read_layout)), "reads: sorted == host");
}

void run_cases(const std::vector<KeyShape>& cases, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  const sdm::testing::CudaStream stream;
  bool index64 = false;
  for (const KeyShape& c : cases) {
    run_case(c, index64, rng, stream.get());
    index64 = !index64;
  }
}

}  // namespace

namespace sdm::testing {

void test_entry_key_shapes() { run_cases(entry_key_shapes(), 20240701); }

void test_entry_key_engine_configs() {
  run_cases({{2, 8192, 64, 64, 64, 36864},      // readme
             {8, 4096, 64, 128, 128, 65536},    // flagship
             {8, 4096, 128, 128, 128, 65536}},  // flagship C 128: 16384 keys a chunk (the 16384 tile)
            20240702);
}

}  // namespace sdm::testing

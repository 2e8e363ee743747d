// bench_config.hpp - the named problem sizes of the benchmarks, one registry for the CPU runner
// (sdm_bench) and the GPU one (bench/cuda, sdm_gpu_bench).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace sdm::bench {

struct BenchConfig {
  std::string name;
  std::int64_t hd = 0;                // bank row width
  std::int64_t slots_per_stream = 0;  // rows owned by one stream
  std::int64_t W = 0, R = 0;          // writes / reads per token
  std::int64_t P = 0;                 // streams
  std::int64_t T = 0;                 // tokens per stream
  std::int64_t C = 0;                 // chunk size
  std::int64_t G = 1;                 // log-decays per token (1 or W)
  bool decode = false;                // a decode config: P streams of one token (T == 1)
};

// Every registered config, in a fixed order: tiny (smoke runs), small, mid (CPU sizes); readme,
// big, flagship (the GPU's chunked sizes; small too); decode8, decode64 (decode steps).
const std::vector<BenchConfig>& bench_configs();

// The config called `name`; throws std::invalid_argument listing the known names.
const BenchConfig& find_config(const std::string& name);

}  // namespace sdm::bench

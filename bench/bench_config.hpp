// bench_config.hpp - the named problem sizes of the benchmark runner.
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
};

// Every registered config, in a fixed order: tiny (smoke runs), small, mid.
const std::vector<BenchConfig>& bench_configs();

// The config called `name`; throws std::invalid_argument listing the known names.
const BenchConfig& find_config(const std::string& name);

}  // namespace sdm::bench

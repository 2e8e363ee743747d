#include "bench_config.hpp"

#include <stdexcept>

namespace sdm::bench {

const std::vector<BenchConfig>& bench_configs() {
  //                                 name    hd   slots/stream  W   R   P  T     C
  static const std::vector<BenchConfig> configs = {
      {"tiny", 24, 256, 4, 3, 2, 100, 16, 1},
      {"small", 128, 16384, 16, 16, 4, 2048, 64, 1},
      {"mid", 256, 65536, 32, 32, 2, 4096, 64, 1},
  };
  return configs;
}

const BenchConfig& find_config(const std::string& name) {
  std::string known;
  for (const auto& config : bench_configs()) {
    if (config.name == name) return config;
    known += (known.empty() ? "" : ", ") + config.name;
  }
  throw std::invalid_argument("unknown config \"" + name + "\"; known: " + known);
}

}  // namespace sdm::bench

#include "bench_config.hpp"

#include <stdexcept>

namespace sdm::bench {

const std::vector<BenchConfig>& bench_configs() {
  //                                 name    hd   slots/stream  W    R    P   T     C   G  decode
  static const std::vector<BenchConfig> configs = {
      {"tiny", 24, 256, 4, 3, 2, 100, 16, 1, false},
      {"small", 128, 16384, 16, 16, 4, 2048, 64, 1, false},
      {"mid", 256, 65536, 32, 32, 2, 4096, 64, 1, false},
      {"readme", 768, 36864, 64, 64, 2, 8192, 64, 1, false},
      {"big", 2048, 262144, 64, 64, 2, 8192, 64, 1, false},
      {"flagship", 1024, 65536, 128, 128, 8, 4096, 64, 1, false},
      {"decode8", 768, 36864, 64, 64, 8, 1, 1, 1, true},
      {"decode64", 768, 36864, 64, 64, 64, 1, 1, 1, true},
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

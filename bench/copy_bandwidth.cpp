#include "copy_bandwidth.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

namespace sdm::bench {

CopyBandwidth measure_copy_bandwidth(std::size_t buffer_bytes, int threads, int trials) {
  // Both buffers are written before timing so no page fault lands inside a trial.
  std::vector<unsigned char> source(buffer_bytes, 1), destination(buffer_bytes, 0);
  CopyBandwidth result;
  result.buffer_bytes = buffer_bytes;
  result.threads = std::max(1, threads);
  result.trials = trials;
  double best_seconds = 0.0;
  for (int trial = 0; trial < trials; ++trial) {
    const auto start = std::chrono::steady_clock::now();
    std::vector<std::thread> workers;
    for (int k = 0; k < result.threads; ++k) {
      const std::size_t begin = buffer_bytes * static_cast<std::size_t>(k) / static_cast<std::size_t>(result.threads);
      const std::size_t end = buffer_bytes * static_cast<std::size_t>(k + 1) / static_cast<std::size_t>(result.threads);
      workers.emplace_back([&, begin, end] { std::memcpy(destination.data() + begin, source.data() + begin, end - begin); });
    }
    for (auto& worker : workers) worker.join();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (trial == 0 || seconds < best_seconds) best_seconds = seconds;
  }
  result.gb_per_s = 2.0 * static_cast<double>(buffer_bytes) / best_seconds / 1e9;
  return result;
}

}  // namespace sdm::bench

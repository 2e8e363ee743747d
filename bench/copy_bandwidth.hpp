// copy_bandwidth.hpp - the DRAM copy bandwidth the benchmark compares against.
#pragma once

#include <cstddef>

namespace sdm::bench {

struct CopyBandwidth {
  double gb_per_s = 0.0;        // (read + write bytes) / second, best trial
  std::size_t buffer_bytes = 0; // bytes copied per trial (each of source and destination)
  int threads = 1;
  int trials = 0;
};

// memcpy of a `buffer_bytes` buffer (choose it much larger than the caches) split into
// `threads` contiguous slices copied concurrently; best of `trials`. Counts 2 * buffer_bytes
// per trial (each byte read once and written once), the convention of STREAM "copy" and of
// the byte counts of the passes.
CopyBandwidth measure_copy_bandwidth(std::size_t buffer_bytes, int threads, int trials);

}  // namespace sdm::bench

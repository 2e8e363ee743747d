// worker_split.hpp - parallel_for with a per-worker scratch slot.
//
// for_each_item(items, workers, threads, body) runs body(item, worker) for every item in
// [0, items): the items are cut into `workers` contiguous ranges (a function of items and
// workers only) and range k runs serially with worker index k, so each worker can own
// scratch memory. Results are independent of the split as long as an item's outputs depend
// on its inputs only (scratch is fully rewritten before it is read).
#pragma once

#include <algorithm>
#include <cstdint>

#include "thread_pool.hpp"

namespace sdm::cpu {

// The number of workers (scratch slots) for `items` items on `threads` threads.
inline std::int64_t worker_count(std::int64_t items, int threads) {
  return std::max<std::int64_t>(1, std::min<std::int64_t>(items, threads));
}

template <typename Body>
void for_each_item(std::int64_t items, std::int64_t workers, int threads, const Body& body) {
  parallel_for(workers, threads, [&](std::int64_t worker) {
    const std::int64_t begin = items * worker / workers;
    const std::int64_t end = items * (worker + 1) / workers;
    for (std::int64_t item = begin; item < end; ++item) body(item, worker);
  });
}

}  // namespace sdm::cpu

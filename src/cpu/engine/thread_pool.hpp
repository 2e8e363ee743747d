// thread_pool.hpp - a small persistent pool for the CPU engine.
//
// parallel_for(n, threads, fn) runs fn(i) for every i in [0, n). Work is split into at most
// `threads` contiguous ranges fixed by (n, threads) alone, so a body that writes only its
// own outputs gives bitwise identical results for any thread count. The calling thread
// takes the first range; nested calls run serially on the calling thread.
#pragma once

#include <cstdint>
#include <functional>

namespace sdm::cpu {

// 0 -> $SDM_NUM_THREADS if set (>= 1), else std::thread::hardware_concurrency().
int resolve_num_threads(int requested);

void parallel_for(std::int64_t n, int threads, const std::function<void(std::int64_t)>& body);

}  // namespace sdm::cpu

#include "thread_pool.hpp"

#include <algorithm>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/env_knobs.hpp"
#include "sdm/error.hpp"

namespace sdm::cpu {
namespace {

thread_local bool tl_inside_parallel = false;

// Workers sleep until a job is posted; each takes the ranges r = worker_id + 1, + stride, ...
class Pool {
 public:
  static Pool& instance() {
    static Pool pool;
    return pool;
  }

  void run(std::int64_t n, int ranges, const std::function<void(std::int64_t)>& body) {
    std::lock_guard<std::mutex> serial(run_mutex_);
    ensure_workers(ranges - 1);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      job_ = {&body, n, ranges};
      pending_ = ranges - 1;
      error_ = nullptr;
      ++generation_;
    }
    wake_.notify_all();
    run_range(0);
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, [&] { return pending_ == 0; });
    if (error_) std::rethrow_exception(error_);
  }

  ~Pool() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    for (auto& t : workers_) t.join();
  }

 private:
  struct Job {
    const std::function<void(std::int64_t)>* body = nullptr;
    std::int64_t n = 0;
    int ranges = 1;
  };

  void ensure_workers(int count) {
    while (static_cast<int>(workers_.size()) < count) {
      const int id = static_cast<int>(workers_.size()) + 1;
      workers_.emplace_back([this, id] { worker_loop(id); });
    }
  }

  void run_range(int r) {
    const std::int64_t begin = job_.n * r / job_.ranges;
    const std::int64_t end = job_.n * (r + 1) / job_.ranges;
    tl_inside_parallel = true;
    try {
      for (std::int64_t i = begin; i < end; ++i) (*job_.body)(i);
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!error_) error_ = std::current_exception();
    }
    tl_inside_parallel = false;
  }

  void worker_loop(int id) {
    std::uint64_t seen = 0;
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
        if (stop_) return;
        seen = generation_;
        if (id >= job_.ranges) continue;
      }
      run_range(id);
      std::lock_guard<std::mutex> lock(mutex_);
      if (--pending_ == 0) done_.notify_one();
    }
  }

  std::mutex run_mutex_, mutex_;
  std::condition_variable wake_, done_;
  std::vector<std::thread> workers_;
  Job job_;
  int pending_ = 0;
  std::uint64_t generation_ = 0;
  bool stop_ = false;
  std::exception_ptr error_;
};

}  // namespace

int resolve_num_threads(int requested) {
  if (requested < 0) {
    throw ValueError("num_threads", "num_threads must be >= 0 (0 = automatic), got " +
                                        std::to_string(requested));
  }
  if (requested > 0) return requested;
  if (const std::int64_t threads = core::env_count("SDM_NUM_THREADS", 4096); threads > 0) {
    return static_cast<int>(threads);
  }
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

void parallel_for(std::int64_t n, int threads, const std::function<void(std::int64_t)>& body) {
  if (n <= 0) return;
  const int ranges = static_cast<int>(std::min<std::int64_t>(n, std::max(1, threads)));
  if (ranges == 1 || tl_inside_parallel) {
    for (std::int64_t i = 0; i < n; ++i) body(i);
    return;
  }
  Pool::instance().run(n, ranges, body);
}

}  // namespace sdm::cpu

// The CPU engine's thread pool (src/cpu/engine/thread_pool.hpp): coverage, the fixed
// contiguous split, exceptions, nesting, and the SDM_NUM_THREADS rules.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "cpu/engine/thread_pool.hpp"
#include "sdm/error.hpp"
#include "support/scoped_env.hpp"

namespace sdm::cpu {
namespace {

TEST(ParallelFor, CoversEveryIndexExactlyOnce) {
  for (std::int64_t n : {0, 1, 2, 3, 5, 7, 16, 63, 64, 1000}) {
    for (int threads : {0, 1, 2, 3, 4, 8, 17}) {
      std::vector<std::atomic<int>> hits(static_cast<std::size_t>(n));
      parallel_for(n, threads, [&](std::int64_t i) { hits[static_cast<std::size_t>(i)].fetch_add(1); });
      for (std::int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(hits[static_cast<std::size_t>(i)].load(), 1) << "n=" << n << " threads=" << threads << " i=" << i;
      }
    }
  }
}

// Each thread runs one contiguous ascending range, and there are at most `threads` ranges.
TEST(ParallelFor, SplitsIntoAtMostThreadsContiguousRanges) {
  for (int threads : {1, 2, 3, 4}) {
    const std::int64_t n = 101;
    std::mutex mutex;
    std::map<std::thread::id, std::vector<std::int64_t>> by_thread;
    parallel_for(n, threads, [&](std::int64_t i) {
      std::lock_guard<std::mutex> lock(mutex);
      by_thread[std::this_thread::get_id()].push_back(i);
    });
    EXPECT_LE(static_cast<int>(by_thread.size()), threads);
    std::int64_t total = 0;
    for (const auto& [id, indices] : by_thread) {
      for (std::size_t k = 1; k < indices.size(); ++k) EXPECT_EQ(indices[k], indices[k - 1] + 1);
      total += static_cast<std::int64_t>(indices.size());
    }
    EXPECT_EQ(total, n);
  }
}

TEST(ParallelFor, PropagatesAnExceptionAndStaysUsable) {
  const std::int64_t n = 40;
  // The throwing index lies in the last range, which a worker (not the caller) runs.
  EXPECT_THROW(
      {
        try {
          parallel_for(n, 4, [&](std::int64_t i) {
            if (i == n - 1) throw std::runtime_error("body failed at " + std::to_string(i));
          });
        } catch (const std::runtime_error& e) {
          EXPECT_STREQ(e.what(), "body failed at 39");
          throw;
        }
      },
      std::runtime_error);
  EXPECT_THROW(parallel_for(n, 1, [](std::int64_t) { throw std::logic_error("serial"); }), std::logic_error);

  std::vector<std::atomic<int>> hits(static_cast<std::size_t>(n));
  parallel_for(n, 4, [&](std::int64_t i) { hits[static_cast<std::size_t>(i)].fetch_add(1); });
  for (const auto& h : hits) EXPECT_EQ(h.load(), 1);
}

TEST(ParallelFor, NestedCallsCoverEveryPair) {
  const std::int64_t outer = 6, inner = 11;
  std::vector<std::atomic<int>> hits(static_cast<std::size_t>(outer * inner));
  parallel_for(outer, 3, [&](std::int64_t i) {
    parallel_for(inner, 3, [&](std::int64_t j) { hits[static_cast<std::size_t>(i * inner + j)].fetch_add(1); });
  });
  for (std::size_t k = 0; k < hits.size(); ++k) EXPECT_EQ(hits[k].load(), 1) << "pair " << k;
}

TEST(ResolveNumThreads, ExplicitRequestWins) {
  const testing::ScopedEnv env("SDM_NUM_THREADS", "3");
  EXPECT_EQ(resolve_num_threads(1), 1);
  EXPECT_EQ(resolve_num_threads(5), 5);
}

TEST(ResolveNumThreads, ZeroReadsTheEnvironment) {
  {
    const testing::ScopedEnv env("SDM_NUM_THREADS", "3");
    EXPECT_EQ(resolve_num_threads(0), 3);
  }
  {
    const testing::ScopedEnv env("SDM_NUM_THREADS", nullptr);
    const int hardware = static_cast<int>(std::thread::hardware_concurrency());
    EXPECT_EQ(resolve_num_threads(0), std::max(1, hardware));
  }
}

TEST(ResolveNumThreads, RejectsBadEnvironmentValuesNamingTheVariable) {
  for (const char* bad : {"", "0", "-2", "abc", "4x", "1.5", "5000"}) {
    const testing::ScopedEnv env("SDM_NUM_THREADS", bad);
    try {
      resolve_num_threads(0);
      ADD_FAILURE() << "SDM_NUM_THREADS=\"" << bad << "\" was accepted";
    } catch (const ValueError& e) {
      EXPECT_EQ(e.argument(), "SDM_NUM_THREADS");
      const std::string message = e.what();
      EXPECT_NE(message.find("SDM_NUM_THREADS"), std::string::npos) << message;
      EXPECT_NE(message.find(std::string("\"") + bad + "\""), std::string::npos) << message;
    }
  }
}

TEST(ResolveNumThreads, RejectsANegativeRequest) {
  try {
    resolve_num_threads(-1);
    ADD_FAILURE() << "num_threads = -1 was accepted";
  } catch (const ValueError& e) {
    EXPECT_EQ(e.argument(), "num_threads");
    EXPECT_NE(std::string(e.what()).find("-1"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace sdm::cpu

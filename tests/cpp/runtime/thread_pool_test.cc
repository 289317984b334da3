#include "runtime/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

namespace ember::runtime {

TEST(ThreadPool, CoversEveryIndexOnce) {
    ThreadPool pool(4);
    std::vector<std::atomic<int>> hits(100000);
    pool.parallel_for(static_cast<int64_t>(hits.size()), 1000, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) hits[i]++;
    });
    for (auto& h : hits) ASSERT_EQ(h.load(), 1);
}

TEST(ThreadPool, ConcurrentCallersAndNesting) {
    ThreadPool pool(3);
    std::atomic<int64_t> total{0};
    std::vector<std::thread> callers;
    for (int t = 0; t < 4; ++t) {
        callers.emplace_back([&] {
            for (int r = 0; r < 50; ++r) {
                pool.parallel_for(1000, 10, [&](int64_t b, int64_t e) {
                    // A nested call runs inline instead of deadlocking.
                    pool.parallel_for(e - b, 1, [&](int64_t b2, int64_t e2) { total += e2 - b2; });
                });
            }
        });
    }
    for (auto& c : callers) c.join();
    EXPECT_EQ(total.load(), 4 * 50 * 1000);
}

}  // namespace ember::runtime

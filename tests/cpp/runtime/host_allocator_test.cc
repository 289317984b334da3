#include "runtime/host_allocator.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

namespace ember::runtime {

TEST(HostAllocator, PinnedLookupAndDeferredReuse) {
    HostAllocator h;
    Stream s(0, 1, 0);
    void* p = *h.allocate(10000);
    EXPECT_TRUE(h.is_pinned(static_cast<char*>(p) + 9999));
    int x = 0;
    EXPECT_FALSE(h.is_pinned(&x));
    std::atomic<bool> release{false};
    auto seq = s.enqueue("copy", [&] {
        while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        return Status();
    });
    ASSERT_TRUE(h.record_use(p, s, *seq));
    h.free(p);
    void* q = *h.allocate(10000);
    EXPECT_NE(p, q) << "a block an in-flight copy uses is not reused";
    release = true;
    s.wait_for(*seq);
    h.free(q);
    void* r = *h.allocate(10000);
    void* r2 = *h.allocate(10000);
    EXPECT_TRUE(r == p || r2 == p);
    h.free(r);
    h.free(r2);
    EXPECT_EQ(h.allocated_bytes(), 0u);
    h.empty_cache();
    EXPECT_EQ(h.cached_bytes(), 0u);
}

}  // namespace ember::runtime

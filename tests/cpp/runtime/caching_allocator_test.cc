#include "runtime/caching_allocator.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <thread>

namespace ember::runtime {
namespace {

struct Fixture : ::testing::Test {
    Stream s0{0, 0, 0};
    Stream s1{0, 1, 0};
    void sync_all() {
        s0.wait_for(s0.enqueued());
        s1.wait_for(s1.enqueued());
    }
    CachingAllocator alloc{0, 64ull << 20, [this] { sync_all(); }};
    int64_t allocated() { return alloc.stats().allocated_bytes[kAllPools].current; }
    int64_t reserved() { return alloc.stats().reserved_bytes[kAllPools].current; }
};

}  // namespace

TEST_F(Fixture, AlignsRoundsAndTracksStats) {
    void* a = *alloc.allocate(1, s0);
    void* b = *alloc.allocate(1000, s0);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(a) % 64, 0u);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(b) % 64, 0u);
    EXPECT_EQ(allocated(), 512 + 1024);
    EXPECT_EQ(alloc.stats().requested_bytes[kAllPools].current, 1001);
    EXPECT_EQ(reserved(), 2 << 20) << "small requests share one 2 MiB segment";
    EXPECT_TRUE(alloc.owns(static_cast<char*>(b) + 10));
    alloc.free(a);
    alloc.free(b);
    EXPECT_EQ(allocated(), 0);
    EXPECT_EQ(alloc.stats().allocated_bytes[kAllPools].peak, 512 + 1024);
    alloc.empty_cache();
    EXPECT_EQ(reserved(), 0);
    EXPECT_EQ(*alloc.allocate(0, s0), nullptr);
}

TEST_F(Fixture, ReusesFreedBlocksOnTheSameStream) {
    void* a = *alloc.allocate(4 << 20, s0);
    alloc.free(a);
    void* b = *alloc.allocate(4 << 20, s0);
    EXPECT_EQ(a, b) << "cached block reused";
    void* c = *alloc.allocate(4 << 20, s1);
    EXPECT_NE(b, c) << "another stream's cached block is not reused";
    alloc.free(b);
    alloc.free(c);
    EXPECT_EQ(alloc.stats().num_device_alloc, 2);
}

TEST_F(Fixture, SplitsAndMerges) {
    void* big = *alloc.allocate(8 << 20, s0);
    alloc.free(big);
    void* part = *alloc.allocate(3 << 20, s0);
    EXPECT_EQ(part, big) << "large cached block split for a smaller request";
    EXPECT_GT(alloc.stats().inactive_split_bytes[kAllPools].current, 0);
    alloc.free(part);
    EXPECT_EQ(alloc.stats().inactive_split_bytes[kAllPools].current, 0) << "halves merged";
    alloc.empty_cache();
    EXPECT_EQ(reserved(), 0);
}

TEST_F(Fixture, RecordStreamDefersReuseUntilOtherStreamFinishes) {
    void* a = *alloc.allocate(1 << 16, s0);
    std::atomic<bool> release{false};
    ASSERT_TRUE(s1.enqueue("reader", [&] {
        while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        return Status();
    }).ok());
    alloc.record_stream(a, s1);
    alloc.free(a);
    void* b = *alloc.allocate(1 << 16, s0);
    EXPECT_NE(a, b) << "block still in use by s1 must not be handed out";
    release = true;
    s1.wait_for(s1.enqueued());
    alloc.free(b);
    void* c = *alloc.allocate(1 << 16, s0);
    void* d = *alloc.allocate(1 << 16, s0);
    EXPECT_TRUE(c == a || d == a) << "block returns once s1 finished";
    alloc.free(c);
    alloc.free(d);
    EXPECT_EQ(allocated(), 0);
}

TEST_F(Fixture, OutOfMemoryIsAnErrorWithSummaryAndDeviceStaysUsable) {
    void* a = *alloc.allocate(40 << 20, s0);
    auto fail = alloc.allocate(40 << 20, s0);
    ASSERT_FALSE(fail.ok());
    EXPECT_EQ(fail.status().code(), StatusCode::kOutOfMemory);
    EXPECT_NE(fail.status().message().find("out of memory"), std::string::npos);
    EXPECT_NE(fail.status().message().find("memory summary"), std::string::npos);
    EXPECT_EQ(alloc.stats().num_ooms, 1);
    alloc.free(a);
    // The cached 40 MiB segment is on s0; a request from s1 succeeds after the cache is flushed.
    auto ok = alloc.allocate(60 << 20, s1);
    ASSERT_TRUE(ok.ok()) << ok.status().message();
    alloc.free(*ok);
    EXPECT_EQ(allocated(), 0);
}

}  // namespace ember::runtime

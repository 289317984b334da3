// Many host threads allocating, enqueueing, recording events and freeing on several streams at
// once; at the end every byte must be back and every task accounted for.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "runtime/device.h"
#include "runtime/event.h"

namespace ember::runtime {

TEST(Stress, ThreadsStreamsEventsAllocFree) {
    Device dev(0, 2, 256ull << 20);
    constexpr int kThreads = 8;
    constexpr int kIters = 1500;
    std::vector<Stream*> streams = {&dev.default_stream()};
    for (int i = 0; i < 3; ++i) streams.push_back(&dev.create_stream(0));
    std::atomic<int64_t> executed{0};
    std::atomic<int> corrupt{0};

    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
        threads.emplace_back([&, t] {
            std::mt19937 rng(t);
            for (int i = 0; i < kIters; ++i) {
                Stream& s = *streams[rng() % streams.size()];
                size_t bytes = 1 + rng() % (rng() % 8 == 0 ? (3 << 20) : 4096);
                auto p = dev.allocator().allocate(bytes, s);
                ASSERT_TRUE(p.ok()) << p.status().message();
                auto* mem = static_cast<unsigned char*>(*p);
                unsigned char tag = static_cast<unsigned char>(t * 31 + i);
                ASSERT_TRUE(s.enqueue("write", [=, &executed, &corrupt] {
                    std::memset(mem, tag, bytes);
                    if (mem[bytes - 1] != tag || mem[0] != tag) corrupt++;
                    executed++;
                    return Status();
                }).ok());
                if (rng() % 4 == 0) {
                    // Hand the buffer to another stream through an event.
                    Stream& other = *streams[rng() % streams.size()];
                    Event e;
                    ASSERT_TRUE(e.record(s).ok());
                    ASSERT_TRUE(e.block(other).ok());
                    dev.allocator().record_stream(mem, other);
                    ASSERT_TRUE(other.enqueue("read", [=, &executed, &corrupt] {
                        if (mem[0] != tag) corrupt++;
                        executed++;
                        return Status();
                    }).ok());
                }
                dev.allocator().free(mem);
            }
        });
    }
    for (auto& th : threads) th.join();
    ASSERT_TRUE(dev.synchronize().ok());
    EXPECT_EQ(corrupt.load(), 0) << "a block was reused while queued work still used it";
    EXPECT_GE(executed.load(), kThreads * kIters);
    MemoryStats st = dev.allocator().stats();
    EXPECT_EQ(st.allocated_bytes[kAllPools].current, 0);
    EXPECT_EQ(st.allocation[kAllPools].current, 0);
    dev.allocator().empty_cache();
    EXPECT_EQ(dev.allocator().stats().reserved_bytes[kAllPools].current, 0);
    EXPECT_EQ(dev.allocator().stats().active[kAllPools].current, 0);
}

}  // namespace ember::runtime

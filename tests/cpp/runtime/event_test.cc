#include "runtime/event.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

namespace ember::runtime {
namespace {
Status sleep_ms(int ms) {
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    return Status();
}
}  // namespace

TEST(Event, CrossStreamWaitOrdersWork) {
    Stream a(0, 1, 0), b(0, 2, 0);
    std::atomic<int> value{0};
    ASSERT_TRUE(a.enqueue("producer", [&] {
        sleep_ms(40);
        value = 42;
        return Status();
    }).ok());
    Event e;
    ASSERT_TRUE(e.record(a).ok());
    EXPECT_FALSE(e.query());
    ASSERT_TRUE(e.block(b).ok());
    int seen = -1;
    ASSERT_TRUE(b.enqueue("consumer", [&] {
        seen = value.load();
        return Status();
    }).ok());
    ASSERT_TRUE(b.synchronize().ok());
    EXPECT_EQ(seen, 42);
    EXPECT_TRUE(e.query());
}

TEST(Event, ElapsedTimeNeedsTimingAndCompletion) {
    Stream s(0, 1, 0);
    Event start(true), end(true), untimed;
    ASSERT_TRUE(start.record(s).ok());
    ASSERT_TRUE(s.enqueue("sleep", [] { return sleep_ms(20); }).ok());
    ASSERT_TRUE(end.record(s).ok());
    ASSERT_TRUE(end.synchronize().ok());
    auto ms = start.elapsed_ms(end);
    ASSERT_TRUE(ms.ok());
    EXPECT_GE(*ms, 15.0);
    ASSERT_TRUE(untimed.record(s).ok());
    EXPECT_FALSE(start.elapsed_ms(untimed).ok());
    Event never(true);
    EXPECT_FALSE(start.elapsed_ms(never).ok());
}

TEST(Event, UnrecordedEventIsComplete) {
    Stream s(0, 1, 0);
    Event e;
    EXPECT_TRUE(e.query());
    EXPECT_TRUE(e.synchronize().ok());
    EXPECT_TRUE(e.block(s).ok());
}

}  // namespace ember::runtime

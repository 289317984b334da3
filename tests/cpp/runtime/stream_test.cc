#include "runtime/stream.h"

#include <gtest/gtest.h>

#include <chrono>
#include <stdexcept>
#include <thread>
#include <vector>

#include "base/env.h"

namespace ember::runtime {

TEST(Stream, RunsInOrderAndAsynchronously) {
    Stream s(0, 1, 0);
    std::vector<int> order;
    auto seq1 = s.enqueue("slow", [&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(30));
        order.push_back(1);
        return Status();
    });
    ASSERT_TRUE(seq1.ok());
    EXPECT_FALSE(s.query()) << "enqueue must return before the work runs";
    auto seq2 = s.enqueue("fast", [&] {
        order.push_back(2);
        return Status();
    });
    EXPECT_EQ(*seq2, *seq1 + 1);
    EXPECT_TRUE(s.synchronize().ok());
    EXPECT_TRUE(s.query());
    EXPECT_EQ(order, (std::vector<int>{1, 2}));
}

TEST(Stream, ErrorIsReportedAtNextSyncWithOpNameAndStreamKeepsWorking) {
    Stream s(0, 1, 0);
    ASSERT_TRUE(s.enqueue("aten::bad_op", [] { return Status(StatusCode::kInternal, "boom"); }).ok());
    ASSERT_TRUE(s.enqueue("throws", []() -> Status { throw std::runtime_error("second"); }).ok());
    Status st = s.synchronize();
    ASSERT_FALSE(st.ok());
    EXPECT_EQ(st.code(), StatusCode::kKernelFailed);
    EXPECT_NE(st.message().find("aten::bad_op"), std::string::npos);
    EXPECT_NE(st.message().find("boom"), std::string::npos);
    // Reported once, then cleared; later work runs normally.
    int ran = 0;
    ASSERT_TRUE(s.enqueue("ok", [&] {
        ran = 1;
        return Status();
    }).ok());
    EXPECT_TRUE(s.synchronize().ok());
    EXPECT_EQ(ran, 1);
}

TEST(Stream, SyncModeRunsInlineAndFailsAtTheCall) {
    env::set_sync_mode(true);
    Stream s(0, 1, 0);
    std::thread::id ran_on;
    ASSERT_TRUE(s.enqueue("inline", [&] {
        ran_on = std::this_thread::get_id();
        return Status();
    }).ok());
    EXPECT_EQ(ran_on, std::this_thread::get_id());
    auto bad = s.enqueue("aten::fails_now", [] { return Status(StatusCode::kInternal, "x"); });
    env::set_sync_mode(false);
    ASSERT_FALSE(bad.ok());
    EXPECT_NE(bad.status().message().find("aten::fails_now"), std::string::npos);
    EXPECT_TRUE(s.synchronize().ok()) << "the error was already reported";
}

}  // namespace ember::runtime

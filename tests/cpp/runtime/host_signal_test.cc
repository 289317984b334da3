#include "runtime/host_signal.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>

#include "runtime/event.h"
#include "runtime/stream.h"

namespace ember::runtime {
namespace {
using std::chrono::milliseconds;

Status wait_task(const std::shared_ptr<HostSignal>& s, milliseconds timeout) {
    return s->wait(timeout, "ember all_reduce");
}
}  // namespace

TEST(HostSignal, StreamWorkAfterTheWaitRunsAfterTheHostSets) {
    Stream s(0, 1, 0);
    auto signal = std::make_shared<HostSignal>();
    std::atomic<int> host_value{0};
    int seen = -1;
    ASSERT_TRUE(s.enqueue("wait", [signal] { return wait_task(signal, milliseconds(5000)); }).ok());
    ASSERT_TRUE(s.enqueue("after", [&] {
        seen = host_value.load();
        return Status();
    }).ok());
    std::this_thread::sleep_for(milliseconds(30));
    EXPECT_FALSE(s.query());
    host_value = 7;
    signal->set();
    ASSERT_TRUE(s.synchronize().ok());
    EXPECT_EQ(seen, 7);
}

TEST(HostSignal, AnErrorReachesAStreamThatWaitsOnAnEventAfterIt) {
    Stream comm(0, 1, 0), user(0, 2, 0);
    auto signal = std::make_shared<HostSignal>();
    ASSERT_TRUE(comm.enqueue("ember all_reduce", [signal] {
        return wait_task(signal, milliseconds(5000));
    }).ok());
    Event done;
    ASSERT_TRUE(done.record(comm).ok());
    ASSERT_TRUE(done.block(user).ok());
    signal->set("ember all_reduce failed on rank 0 of 2: peer gone");
    signal->set("a second set is ignored");
    Status st = user.synchronize();
    ASSERT_FALSE(st.ok());
    EXPECT_NE(st.message().find("peer gone"), std::string::npos) << st.message();
}

TEST(HostSignal, AWaitThatOutlastsItsTimeoutFailsNamingTheWork) {
    HostSignal signal;
    Status st = signal.wait(milliseconds(20), "ember broadcast");
    ASSERT_FALSE(st.ok());
    EXPECT_NE(st.message().find("ember broadcast"), std::string::npos) << st.message();
    EXPECT_FALSE(signal.is_set());
}

}  // namespace ember::runtime

#include "runtime/graph.h"

#include <gtest/gtest.h>

#include <vector>

#include "runtime/caching_allocator.h"

namespace ember::runtime {

TEST(Graph, CaptureRecordsWithoutRunningAndReplaysInOrder) {
    Stream s(0, 1, 0);
    Graph g;
    std::vector<int> log;
    ASSERT_TRUE(s.begin_capture(&g).ok());
    EXPECT_FALSE(s.begin_capture(&g).ok()) << "one capture at a time";
    ASSERT_TRUE(s.enqueue("a", [&] { log.push_back(1); return Status(); }).ok());
    ASSERT_TRUE(s.enqueue("b", [&] { log.push_back(2); return Status(); }).ok());
    EXPECT_EQ(s.enqueued(), 0u) << "captured work is not queued";
    ASSERT_TRUE(s.end_capture().ok());
    EXPECT_TRUE(s.synchronize().ok());
    EXPECT_TRUE(log.empty());
    EXPECT_EQ(g.size(), 2u);
    ASSERT_TRUE(g.replay(s).ok());
    ASSERT_TRUE(g.replay(s).ok());
    EXPECT_TRUE(s.synchronize().ok());
    EXPECT_EQ(log, (std::vector<int>{1, 2, 1, 2}));
}

TEST(Graph, SynchronizingDuringCaptureFailsAndSoDoesTheCapture) {
    Stream s(0, 1, 0);
    Graph g;
    ASSERT_TRUE(s.begin_capture(&g).ok());
    Status st = s.synchronize();
    ASSERT_FALSE(st.ok());
    EXPECT_NE(st.message().find("capturing a graph"), std::string::npos) << st.message();
    EXPECT_FALSE(s.end_capture().ok());
    EXPECT_TRUE(s.synchronize().ok()) << "the stream works again after the capture";
}

TEST(Graph, BlocksAllocatedDuringCaptureAreHeldUntilTheGraphIsReleased) {
    Stream s(0, 0, 0);
    CachingAllocator alloc(0, 64ull << 20, [&] { s.wait_for(s.enqueued()); });
    void* before = *alloc.allocate(4096, s);
    alloc.free(before);  // cached, free, not the graph's
    Graph g;
    alloc.begin_graph(g.id());
    void* tmp = *alloc.allocate(4096, s);
    alloc.free(tmp);  // an intermediate of the captured step: reused inside the capture
    void* kept = *alloc.allocate(4096, s);
    EXPECT_EQ(kept, tmp) << "a replay runs in capture order, so reuse inside the capture is safe";
    void* last = *alloc.allocate(4096, s);
    alloc.free(last);  // freed and never reused in the capture: still written by every replay
    alloc.end_graph();
    std::vector<void*> later;
    for (int i = 0; i < 4; ++i) {
        later.push_back(*alloc.allocate(4096, s));
        EXPECT_NE(later.back(), kept);
        EXPECT_NE(later.back(), last) << "the graph still owns the blocks it freed";
    }
    alloc.free(kept);  // the graph keeps it after its tensor is gone
    later.push_back(*alloc.allocate(4096, s));
    EXPECT_NE(later.back(), kept);
    for (void* p : later) alloc.free(p);
    alloc.empty_cache();
    EXPECT_GT(alloc.stats().reserved_bytes[kAllPools].current, 0) << "the graph's blocks pin their segment";
    alloc.release_graph(g.id());
    alloc.empty_cache();
    EXPECT_EQ(alloc.stats().reserved_bytes[kAllPools].current, 0) << "release_graph gives the blocks back";
    EXPECT_EQ(alloc.stats().active_bytes[kAllPools].current, 0) << "each block counted inactive once";
}

TEST(Graph, ARemainderSplitOffAGraphBlockStaysTheGraphs) {
    Stream s(0, 0, 0);
    CachingAllocator alloc(0, 64ull << 20, [&] { s.wait_for(s.enqueued()); });
    Graph g;
    alloc.begin_graph(g.id());
    void* big = *alloc.allocate(4 << 20, s);  // written by the capture, then freed
    alloc.free(big);
    void* part = *alloc.allocate(3 << 19, s);  // large pool: reuses the start, the rest is split off
    EXPECT_EQ(part, big);
    alloc.end_graph();
    char* lo = static_cast<char*>(big);
    char* hi = lo + (4 << 20);
    for (int i = 0; i < 4; ++i) {
        char* p = static_cast<char*>(*alloc.allocate(3 << 19, s));
        EXPECT_FALSE(p >= lo && p < hi) << "memory a replay writes was handed out after the capture";
    }
    alloc.release_graph(g.id());
}

TEST(Graph, EmptyCacheDuringCaptureKeepsTheGraphsFreedBlocks) {
    Stream s(0, 0, 0);
    CachingAllocator alloc(0, 64ull << 20, [&] { s.wait_for(s.enqueued()); });
    Graph g;
    alloc.begin_graph(g.id());
    alloc.free(*alloc.allocate(4 << 20, s));  // a whole segment, written and freed in the capture
    alloc.empty_cache();
    EXPECT_GT(alloc.stats().reserved_bytes[kAllPools].current, 0) << "the segment went back to the system";
    alloc.end_graph();
    alloc.release_graph(g.id());
    alloc.empty_cache();
    EXPECT_EQ(alloc.stats().reserved_bytes[kAllPools].current, 0);
}

}  // namespace ember::runtime

#include "profiler/tracer.h"

#include <gtest/gtest.h>

#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "runtime/caching_allocator.h"
#include "runtime/stream.h"

namespace ember::profiler {
namespace {

std::vector<Record> of_kind(const Trace& t, RecordKind kind) {
    std::vector<Record> out;
    for (const Record& r : t.records)
        if (r.kind == kind) out.push_back(r);
    return out;
}

int32_t this_tid() { return static_cast<int32_t>(::syscall(SYS_gettid)); }

struct CountingListener : instrument::Listener {
    int enqueues = 0;
    void on_enqueue(int, int64_t, uint64_t, const char*) override { ++enqueues; }
};

}  // namespace

TEST(Tracer, StreamWorkGivesEnqueueAndKernelRecordsWithMatchingSeq) {
    static const char* const kNames[] = {"k0", "k1", "k2", "k3", "k4"};
    Tracer tracer;
    tracer.start();
    {
        runtime::Stream s(0, 7, 0);
        for (const char* name : kNames) {
            ASSERT_TRUE(s.enqueue(name, [] {
                std::this_thread::sleep_for(std::chrono::milliseconds(1));
                return Status();
            }).ok());
        }
        ASSERT_TRUE(s.synchronize().ok());
    }
    tracer.stop();
    Trace t = tracer.collect();
    ASSERT_TRUE(std::is_sorted(t.records.begin(), t.records.end(),
                               [](auto& a, auto& b) { return a.ts_ns < b.ts_ns; }));

    auto enq = of_kind(t, RecordKind::kEnqueue);
    auto ker = of_kind(t, RecordKind::kKernel);
    ASSERT_EQ(enq.size(), 5u);
    ASSERT_EQ(ker.size(), 5u);
    for (size_t i = 0; i < 5; ++i) {
        EXPECT_EQ(enq[i].seq, i + 1);
        EXPECT_EQ(enq[i].device, 0);
        EXPECT_EQ(enq[i].stream, 7);
        EXPECT_EQ(t.str(enq[i].name), kNames[i]);
        EXPECT_EQ(enq[i].thread, this_tid()) << "enqueue is recorded on the host thread";

        EXPECT_EQ(ker[i].seq, i + 1) << "kernels run in enqueue order";
        EXPECT_EQ(ker[i].stream, 7);
        EXPECT_EQ(t.str(ker[i].name), kNames[i]);
        EXPECT_GE(ker[i].dur_ns, 1'000'000 - 50'000) << "the 1 ms sleep is inside the span";
        EXPECT_NE(ker[i].thread, this_tid()) << "kernels run on the stream's worker";
        if (i > 0) {
            EXPECT_LE(ker[i - 1].ts_ns + ker[i - 1].dur_ns, ker[i].ts_ns)
                << "spans on one stream follow each other";
        }
    }
}

TEST(Tracer, AllocAndFreeRecordsReturnToBaseline) {
    runtime::Stream s(0, 0, 0);
    runtime::CachingAllocator alloc(0, 64ull << 20, [&] { s.wait_for(s.enqueued()); });
    void* keep = *alloc.allocate(4096, s);  // allocated before tracing: the baseline
    Tracer tracer;
    tracer.start();
    void* a = *alloc.allocate(1000, s);
    void* b = *alloc.allocate(3 << 20, s);
    alloc.free(a);
    void* c = *alloc.allocate(512, s);
    alloc.free(b);
    alloc.free(c);
    tracer.stop();
    alloc.free(keep);

    Trace t = tracer.collect();
    auto allocs = of_kind(t, RecordKind::kAlloc);
    auto frees = of_kind(t, RecordKind::kFree);
    ASSERT_EQ(allocs.size(), 3u);
    ASSERT_EQ(frees.size(), 3u);
    EXPECT_EQ(allocs[0].ptr, reinterpret_cast<uintptr_t>(a));
    EXPECT_EQ(allocs[0].bytes, 1024u) << "the block size, rounded";
    EXPECT_GE(allocs[1].bytes, size_t{3} << 20);
    EXPECT_EQ(frees[0].ptr, reinterpret_cast<uintptr_t>(a));

    uint64_t baseline = allocs[0].allocated - allocs[0].bytes;
    EXPECT_EQ(baseline, 4096u);
    int64_t running = static_cast<int64_t>(baseline);
    for (const Record& r : t.records) {
        if (r.kind == RecordKind::kAlloc) running += static_cast<int64_t>(r.bytes);
        if (r.kind == RecordKind::kFree) running -= static_cast<int64_t>(r.bytes);
        if (r.kind == RecordKind::kAlloc || r.kind == RecordKind::kFree) {
            EXPECT_EQ(static_cast<int64_t>(r.allocated), running);
            EXPECT_EQ(r.device, 0);
        }
    }
    EXPECT_EQ(t.records.back().allocated, baseline);
}

TEST(Tracer, ConcurrentHostThreadsLoseNothing) {
    constexpr int kThreads = 8;
    constexpr int kPerThread = 5000;  // > kChunkRecords, so chunks are added under load
    Tracer tracer;
    tracer.start();
    runtime::Stream s(0, 3, 0);
    std::vector<std::thread> threads;
    for (int i = 0; i < kThreads; ++i) {
        threads.emplace_back([&, i] {
            std::string op = "op_" + std::to_string(i);
            for (int j = 0; j < kPerThread; ++j) {
                tracer.host_op_begin(op, "[[2, 3]]", "train.py:" + std::to_string(j % 7));
                tracer.instant("tick");
                if (j % 100 == 0) (void)s.enqueue("work", [] { return Status(); });
                tracer.host_op_end();
            }
        });
    }
    // collect() while the writers run sees a growing prefix of each thread's records.
    size_t seen = 0;
    for (int i = 0; i < 20; ++i) {
        size_t n = tracer.collect().records.size();
        EXPECT_GE(n, seen);
        seen = n;
    }
    for (auto& th : threads) th.join();
    ASSERT_TRUE(s.synchronize().ok());
    tracer.stop();

    Trace t = tracer.collect();
    constexpr size_t kEnqueues = kThreads * (kPerThread / 100);
    EXPECT_EQ(t.records.size(), size_t{kThreads} * kPerThread * 2 + 2 * kEnqueues);
    EXPECT_EQ(tracer.record_count(), t.records.size());
    EXPECT_EQ(of_kind(t, RecordKind::kInstant).size(), size_t{kThreads} * kPerThread);
    EXPECT_EQ(of_kind(t, RecordKind::kKernel).size(), kEnqueues);
    auto ops = of_kind(t, RecordKind::kHostOp);
    ASSERT_EQ(ops.size(), size_t{kThreads} * kPerThread);
    // Each thread's ops carry its own name and are strictly sequential on that thread.
    for (int i = 0; i < kThreads; ++i) {
        std::vector<Record> mine;
        std::string want = "op_" + std::to_string(i);
        for (const Record& r : ops)
            if (t.str(r.name) == want) mine.push_back(r);
        ASSERT_EQ(mine.size(), size_t{kPerThread});
        for (size_t j = 1; j < mine.size(); ++j) {
            EXPECT_EQ(mine[j].thread, mine[0].thread);
            EXPECT_LE(mine[j - 1].ts_ns + mine[j - 1].dur_ns, mine[j].ts_ns);
        }
        EXPECT_EQ(t.str(mine[0].shapes), "[[2, 3]]");
        EXPECT_EQ(t.str(mine[8].source), "train.py:1");
    }
}

TEST(Tracer, NothingIsRecordedAfterStopAndThePreviousListenerReturns) {
    CountingListener previous;
    instrument::set_listener(&previous);
    runtime::Stream s(0, 1, 0);
    runtime::CachingAllocator alloc(0, 64ull << 20, [&] { s.wait_for(s.enqueued()); });
    {
        Tracer tracer;
        tracer.start();
        EXPECT_EQ(instrument::listener(), &tracer);
        ASSERT_TRUE(s.enqueue("before", [] { return Status(); }).ok());
        ASSERT_TRUE(s.synchronize().ok());
        tracer.stop();
        EXPECT_EQ(instrument::listener(), &previous);
        size_t n = tracer.record_count();
        EXPECT_EQ(n, 2u);

        ASSERT_TRUE(s.enqueue("after", [] { return Status(); }).ok());
        ASSERT_TRUE(s.synchronize().ok());
        alloc.free(*alloc.allocate(100, s));
        tracer.host_op_begin("late");
        tracer.host_op_end();
        tracer.instant("late");
        tracer.fallback("late", 1, 1, 10);
        // Callbacks reaching a stopped tracer directly (a thread that loaded it before stop).
        tracer.on_enqueue(0, 1, 99, "late");
        tracer.on_alloc(0, nullptr, 1, 1, 1);
        EXPECT_EQ(tracer.record_count(), n);
        EXPECT_EQ(tracer.collect().records.size(), n);
    }
    EXPECT_EQ(previous.enqueues, 1) << "only the enqueue after stop() reached it";
    instrument::set_listener(nullptr);
}

TEST(Tracer, HostRecordsCarryTheirFields) {
    Tracer tracer;
    tracer.start();
    tracer.host_op_begin("aten::mm", "[[4, 8], [8, 2]]", "model.py:12");
    tracer.host_op_begin("aten::empty");
    tracer.host_op_end();
    tracer.copy(CopyKind::kH2D, 4096, 0, 0, 3);
    tracer.host_op_end();
    tracer.synchronize_begin(-1);
    tracer.synchronize_end(-1);
    tracer.fallback("aten::special_op", 100, 50, 2000);
    tracer.event_record(0, 1, 42, 5);
    tracer.event_wait(0, 2, 42);
    tracer.compile_phase("dynamo", 1000, true);
    tracer.on_end(0, 1, 1, "orphan");  // no on_start seen: no span
    tracer.host_op_end();              // unmatched: ignored
    tracer.stop();

    Trace t = tracer.collect();
    auto ops = of_kind(t, RecordKind::kHostOp);
    ASSERT_EQ(ops.size(), 2u);
    const Record& mm = t.str(ops[0].name) == "aten::mm" ? ops[0] : ops[1];
    const Record& empty = t.str(ops[0].name) == "aten::mm" ? ops[1] : ops[0];
    EXPECT_EQ(t.str(mm.shapes), "[[4, 8], [8, 2]]");
    EXPECT_EQ(t.str(mm.source), "model.py:12");
    EXPECT_EQ(t.str(empty.shapes), "");
    EXPECT_LE(mm.ts_ns, empty.ts_ns);
    EXPECT_LE(empty.ts_ns + empty.dur_ns, mm.ts_ns + mm.dur_ns) << "nested";

    auto copies = of_kind(t, RecordKind::kCopy);
    ASSERT_EQ(copies.size(), 1u);
    EXPECT_EQ(copies[0].copy_kind, CopyKind::kH2D);
    EXPECT_EQ(copies[0].bytes, 4096u);
    EXPECT_EQ(copies[0].seq, 3u);
    EXPECT_STREQ(copy_kind_name(copies[0].copy_kind), "H2D");

    auto syncs = of_kind(t, RecordKind::kSynchronize);
    ASSERT_EQ(syncs.size(), 1u);
    EXPECT_EQ(syncs[0].device, -1);

    auto fb = of_kind(t, RecordKind::kFallback);
    ASSERT_EQ(fb.size(), 1u);
    EXPECT_EQ(t.str(fb[0].name), "aten::special_op");
    EXPECT_EQ(fb[0].bytes, 100u);
    EXPECT_EQ(fb[0].bytes_to_device, 50u);
    EXPECT_EQ(fb[0].dur_ns, 2000);

    auto rec = of_kind(t, RecordKind::kEventRecord);
    auto wait = of_kind(t, RecordKind::kEventWait);
    ASSERT_EQ(rec.size(), 1u);
    ASSERT_EQ(wait.size(), 1u);
    EXPECT_EQ(rec[0].event_id, 42u);
    EXPECT_EQ(rec[0].seq, 5u);
    EXPECT_EQ(wait[0].stream, 2);
    EXPECT_EQ(wait[0].seq, 0u);

    auto comp = of_kind(t, RecordKind::kCompilePhase);
    ASSERT_EQ(comp.size(), 1u);
    EXPECT_TRUE(comp[0].cache_hit);
    EXPECT_EQ(comp[0].dur_ns, 1000);
    EXPECT_STREQ(kind_name(comp[0].kind), "compile");
    EXPECT_TRUE(of_kind(t, RecordKind::kKernel).empty());
}

TEST(Tracer, SpansOpenAcrossARestartAreDropped) {
    Tracer tracer;
    tracer.start();
    tracer.host_op_begin("open_at_stop");
    tracer.synchronize_begin(0);
    tracer.stop();
    tracer.start();
    tracer.synchronize_end(0);
    tracer.host_op_begin("inner");
    tracer.host_op_end();
    tracer.host_op_end();  // closes open_at_stop, which began in the earlier session
    tracer.stop();
    Trace t = tracer.collect();
    auto ops = of_kind(t, RecordKind::kHostOp);
    ASSERT_EQ(ops.size(), 1u);
    EXPECT_EQ(t.str(ops[0].name), "inner");
    EXPECT_TRUE(of_kind(t, RecordKind::kSynchronize).empty());
}

TEST(Tracer, ReusedNameAddressIsNotConfused) {
    Tracer tracer;
    tracer.start();
    char name[8] = "first";
    tracer.on_enqueue(0, 0, 1, name);
    std::snprintf(name, sizeof(name), "second");
    tracer.on_enqueue(0, 0, 2, name);
    tracer.stop();
    Trace t = tracer.collect();
    ASSERT_EQ(t.records.size(), 2u);
    EXPECT_EQ(t.str(t.records[0].name), "first");
    EXPECT_EQ(t.str(t.records[1].name), "second");
}

// Not a timing assertion (tests never fail on time): prints the per-event cost for the log.
// Measured on warm memory: the first touch of a fresh page can cost more than a record, and the
// chunk pool keeps pages from an earlier Tracer for the next one.
TEST(Tracer, OverheadPerEvent) {
    constexpr int kN = 15000;  // 45000 records: fits in the chunks the warm-up leaves pooled
    {
        Tracer warm;
        warm.start();
        for (int i = 0; i < 3 * kN; ++i) warm.instant("warm");
    }
    Tracer tracer;
    tracer.start();
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < kN; ++i) {
        tracer.on_enqueue(0, 0, i + 1, "aten::add");
        tracer.on_start(0, 0, i + 1, "aten::add");
        tracer.on_end(0, 0, i + 1, "aten::add");
    }
    auto t1 = std::chrono::steady_clock::now();
    for (int i = 0; i < kN; ++i) {
        tracer.host_op_begin("aten::add", "[[2, 3], [2, 3]]", "train.py:10");
        tracer.host_op_end();
    }
    auto t2 = std::chrono::steady_clock::now();
    tracer.stop();
    auto ns = [](auto d) { return std::chrono::duration<double, std::nano>(d).count(); };
    std::printf("[ tracer   ] enqueue+kernel: %.1f ns/record, host op: %.1f ns/record\n",
                ns(t1 - t0) / (2.0 * kN), ns(t2 - t1) / kN);
    EXPECT_EQ(tracer.record_count(), size_t{3} * kN);
}

}  // namespace ember::profiler

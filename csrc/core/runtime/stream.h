// Stream: an in-order queue of work on one device, run by its own worker thread.
//
// Ordering: tasks run one after another in enqueue order. Each task gets a sequence number
// (1, 2, ...); completed() is the highest number that has finished, so "has work N finished?"
// is a comparison, which is how events and the allocator's stream-ordered reuse are built.
//
// Errors: a task that fails (returns a non-ok Status or throws) has its message stored with the
// name it was enqueued under; later tasks still run. The stored error is returned, and cleared,
// by the next synchronizing call (synchronize(), or take_error() from a caller that waited).
// With env::sync_mode() on, enqueue waits for earlier work, runs the task on the calling thread
// and returns its error at once.
//
// Capture: between begin_capture(graph) and end_capture(), enqueue() records tasks into the
// graph instead of queueing them (runtime/graph.h), and synchronize() fails: the work it would
// wait for has not run, so a value read back would be stale (CUDA refuses the same calls while
// a stream captures). end_capture() reports that failure again.
//
// Thread-safety: every method may be called from any thread. The worker starts on first use and
// is joined by the destructor after the queue drains.
//
// Cost: small kernels make the queue run dry between enqueues, so the hand-off is kept off the
// futex where it can be: the worker takes every queued task under one lock, spins briefly for
// more before it sleeps, and is signalled only when it does sleep; a finished task wakes
// waiters only when there are some.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

#include "base/status.h"

namespace ember::runtime {

using Task = std::function<Status()>;
class Graph;

// Whether this process is a fork() child of one whose streams had started: the worker threads
// did not come along, so queued work would never run. Every enqueue and synchronizing call then
// fails with kFailedPrecondition ("use the 'spawn' start method"), as CUDA refuses a forked child.
bool forked_after_use();

class Stream {
  public:
    Stream(int device, int64_t id, int priority);
    ~Stream();
    Stream(const Stream&) = delete;
    Stream& operator=(const Stream&) = delete;

    int device() const { return device_; }
    int64_t id() const { return id_; }
    int priority() const { return priority_; }

    // Queues `task`. `name` must outlive the task (a literal or a dispatcher-owned op name).
    // Returns the task's sequence number; in sync mode, the task's error instead if it failed.
    StatusOr<uint64_t> enqueue(const char* name, Task task);

    uint64_t enqueued() const { return enqueued_.load(std::memory_order_acquire); }
    uint64_t completed() const { return completed_.load(std::memory_order_acquire); }
    bool query() const { return completed() >= enqueued(); }
    bool is_done(uint64_t seq) const { return completed() >= seq; }

    // Blocks the calling thread until task `seq` has finished. Does not report errors.
    void wait_for(uint64_t seq);
    // Waits for all queued work, then returns and clears the stored error.
    Status synchronize();
    // Returns and clears the stored error without waiting.
    Status take_error();
    // The stored error, left in place (a stream that waits on this one inherits it).
    Status peek_error();

    Status begin_capture(Graph* graph);
    Status end_capture();
    bool capturing() const { return capture_.load(std::memory_order_acquire) != nullptr; }

  private:
    struct Item {
        uint64_t seq;
        const char* name;
        Task task;
    };
    void worker_loop();
    Status run(const Item& item);
    void finish(uint64_t seq);  // publishes completion and wakes waiters if any
    void record_error(const char* name, const Status& st);

    const int device_;
    const int64_t id_;
    const int priority_;

    std::mutex mu_;
    std::condition_variable work_cv_;
    std::condition_variable done_cv_;
    std::deque<Item> queue_;
    std::atomic<uint64_t> enqueued_{0};
    std::atomic<uint64_t> completed_{0};
    std::atomic<bool> worker_sleeping_{false};  // set under mu_ before the worker waits
    std::atomic<int> waiters_{0};               // threads in wait_for
    Status error_;
    std::atomic<Graph*> capture_{nullptr};
    bool capture_failed_ = false;  // a synchronizing call came during the capture (under mu_)
    bool stop_ = false;
    std::thread worker_;
    std::mutex inline_mu_;  // serializes sync-mode tasks run on caller threads
};

}  // namespace ember::runtime

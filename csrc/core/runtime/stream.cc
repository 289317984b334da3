#include "runtime/stream.h"

#include <pthread.h>

#include <atomic>
#include <exception>
#include <mutex>
#include <string>

#include "base/env.h"
#include "base/instrument.h"
#include "runtime/graph.h"

namespace ember::runtime {
namespace {

constexpr int kSpinIterations = 4000;  // about 10-40 us with pause instructions

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#else
    std::this_thread::yield();
#endif
}

}  // namespace

namespace {
std::atomic<bool> g_forked_after_use{false};

Status forked_error() {
    return Status(StatusCode::kFailedPrecondition,
                  "ember: cannot use the device in a process forked after the parent used it (its worker "
                  "threads are not in the child). Start worker processes with the 'spawn' method: "
                  "torch.multiprocessing.set_start_method('spawn'), or DataLoader(multiprocessing_context='spawn')");
}
}  // namespace

bool forked_after_use() { return g_forked_after_use.load(std::memory_order_relaxed); }

Stream::Stream(int device, int64_t id, int priority)
    : device_(device), id_(id), priority_(priority) {}

Stream::~Stream() {
    {
        std::lock_guard<std::mutex> lock(mu_);
        stop_ = true;
    }
    work_cv_.notify_all();
    if (worker_.joinable()) {
        if (forked_after_use()) worker_.detach();  // a fork child's copy of a thread that is not there
        else worker_.join();
    }
}

Status Stream::run(const Item& item) {
    auto* l = instrument::listener();
    if (l) l->on_start(device_, id_, item.seq, item.name);
    Status st;
    try {
        st = item.task();
    } catch (const std::exception& e) {
        st = Status(StatusCode::kKernelFailed, e.what());
    } catch (...) {
        st = Status(StatusCode::kKernelFailed, "unknown exception");
    }
    if (l) l->on_end(device_, id_, item.seq, item.name);
    return st;
}

void Stream::record_error(const char* name, const Status& st) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!error_.ok()) return;  // keep the first failure: later ones are usually its consequences
    StatusCode code = st.code() == StatusCode::kOutOfMemory ? st.code() : StatusCode::kKernelFailed;
    error_ = Status(code, std::string("ember: kernel '") + name + "' failed on ember:" +
                              std::to_string(device_) + " stream " + std::to_string(id_) + ": " +
                              st.message());
}

StatusOr<uint64_t> Stream::enqueue(const char* name, Task task) {
    if (forked_after_use()) return forked_error();
    if (Graph* g = capture_.load(std::memory_order_acquire)) {
        std::lock_guard<std::mutex> lock(mu_);
        g->add(name, std::move(task));
        return enqueued_.load(std::memory_order_relaxed);  // nothing new will run
    }
    if (env::sync_mode()) {
        std::lock_guard<std::mutex> inline_lock(inline_mu_);
        EMBER_RETURN_IF_ERROR(synchronize());
        uint64_t seq = enqueued_.fetch_add(1) + 1;
        if (auto* l = instrument::listener()) l->on_enqueue(device_, id_, seq, name);
        Status st = run(Item{seq, name, std::move(task)});
        finish(seq);
        if (!st.ok()) {
            record_error(name, st);
            return take_error();
        }
        return seq;
    }
    uint64_t seq;
    {
        std::lock_guard<std::mutex> lock(mu_);
        seq = enqueued_.load(std::memory_order_relaxed) + 1;
        queue_.push_back(Item{seq, name, std::move(task)});
        enqueued_.store(seq, std::memory_order_release);
        if (!worker_.joinable()) {
            static std::once_flag at_fork;
            std::call_once(at_fork, [] {
                pthread_atfork(nullptr, nullptr, [] { g_forked_after_use.store(true, std::memory_order_relaxed); });
            });
            worker_ = std::thread([this] { worker_loop(); });
        }
    }
    if (auto* l = instrument::listener()) l->on_enqueue(device_, id_, seq, name);
    // The flag was set under mu_ before the worker's wait released it, so after our push under
    // mu_ a sleeping worker is always seen here.
    if (worker_sleeping_.load(std::memory_order_seq_cst)) work_cv_.notify_one();
    return seq;
}

void Stream::finish(uint64_t seq) {
    completed_.store(seq, std::memory_order_seq_cst);
    // Dekker-style with wait_for: it counts itself in, then checks completed_; we store
    // completed_, then check the count. One of us sees the other. Taking mu_ before notifying
    // means a waiter that counted itself in is either already waiting or will see seq.
    if (waiters_.load(std::memory_order_seq_cst) > 0) {
        { std::lock_guard<std::mutex> lock(mu_); }
        done_cv_.notify_all();
    }
}

void Stream::worker_loop() {
    std::deque<Item> batch;
    for (;;) {
        // Spin a little before sleeping: the next small kernel usually arrives within
        // microseconds, and a futex sleep/wake costs more than that.
        for (int i = 0; i < kSpinIterations && enqueued_.load(std::memory_order_acquire) <= completed(); ++i) {
            cpu_relax();
        }
        {
            std::unique_lock<std::mutex> lock(mu_);
            if (queue_.empty() && !stop_) {
                worker_sleeping_.store(true, std::memory_order_seq_cst);
                work_cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
                worker_sleeping_.store(false, std::memory_order_relaxed);
            }
            if (queue_.empty()) return;  // stop_ and drained
            batch.swap(queue_);
        }
        for (Item& item : batch) {
            Status st = run(item);
            if (!st.ok()) record_error(item.name, st);
            const uint64_t seq = item.seq;
            item.task = nullptr;  // release what the task holds before the work counts as done
            finish(seq);
        }
        batch.clear();
    }
}

void Stream::wait_for(uint64_t seq) {
    if (is_done(seq) || forked_after_use()) return;
    std::unique_lock<std::mutex> lock(mu_);
    waiters_.fetch_add(1, std::memory_order_seq_cst);
    done_cv_.wait(lock, [&] { return completed_.load(std::memory_order_seq_cst) >= seq; });
    waiters_.fetch_sub(1, std::memory_order_relaxed);
}

Status Stream::synchronize() {
    if (capturing()) {
        std::lock_guard<std::mutex> lock(mu_);
        capture_failed_ = true;
        return Status(StatusCode::kFailedPrecondition,
                      "ember: operation not permitted while ember:" + std::to_string(device_) + " stream " +
                          std::to_string(id_) + " is capturing a graph: it waits for work that has not run "
                          "(reading a value back with .item() or .cpu(), printing a tensor, an op that runs "
                          "on the CPU fallback, a data-dependent shape such as nonzero or masked indexing)");
    }
    wait_for(enqueued());
    return take_error();
}

Status Stream::begin_capture(Graph* graph) {
    std::lock_guard<std::mutex> lock(mu_);
    if (capture_.load(std::memory_order_relaxed) != nullptr)
        return Status(StatusCode::kFailedPrecondition, "ember: this stream is already capturing a graph");
    capture_failed_ = false;
    capture_.store(graph, std::memory_order_release);
    return Status();
}

Status Stream::end_capture() {
    std::lock_guard<std::mutex> lock(mu_);
    if (capture_.load(std::memory_order_relaxed) == nullptr)
        return Status(StatusCode::kFailedPrecondition, "ember: this stream is not capturing a graph");
    capture_.store(nullptr, std::memory_order_release);
    if (capture_failed_)
        return Status(StatusCode::kFailedPrecondition,
                      "ember: graph capture failed: an operation during the capture waited for the device "
                      "(see the first error)");
    return Status();
}

Status Stream::peek_error() {
    std::lock_guard<std::mutex> lock(mu_);
    return error_;
}

Status Stream::take_error() {
    if (forked_after_use()) return forked_error();
    std::lock_guard<std::mutex> lock(mu_);
    Status st = std::move(error_);
    error_ = Status();
    return st;
}

}  // namespace ember::runtime

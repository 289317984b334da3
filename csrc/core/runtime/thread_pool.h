// ThreadPool: the compute threads of one device. Kernels split work with parallel_for.
//
// Participants claim chunks from a shared counter, so a thread the OS has descheduled (the host
// thread, the stream worker and the pool share few cores) delays nobody: the others take its
// chunks. A call is split into up to kChunksPerThread chunks per thread for the same reason.
//
// Thread-safety: parallel_for may be called from several threads at once (one per stream);
// calls are served one at a time so that each gets every thread, which keeps large kernels fast
// and ordering simple. The calling thread takes part in the work. Work functions must not throw
// and must not call parallel_for on the same pool (nested calls run serially instead).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "base/status.h"

namespace ember::runtime {

// Elements of simple work (a few flops each) a chunk must have before splitting pays: waking a
// sleeping pool thread costs tens of microseconds on a busy small machine (about 50 us measured on
// 2 cores), which is what a single thread needs for roughly half a million elements.
constexpr int64_t kParallelGrain = 1 << 16;

// Chunks per thread a call is split into at most (each still at least `grain` elements).
constexpr int64_t kChunksPerThread = 4;

class ThreadPool {
  public:
    explicit ThreadPool(int num_threads);
    ~ThreadPool();
    ThreadPool(const ThreadPool&) = delete;
    ThreadPool& operator=(const ThreadPool&) = delete;

    int num_threads() const { return static_cast<int>(workers_.size()) + 1; }

    // Runs fn(begin, end) over [0, n) in chunks of at least `grain` elements.
    void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

    // Runs fn(i, pool) for each of n independent items (tensors of a list, blocks of a product)
    // and returns the first failure in item order. With several items they are spread over the
    // threads and each runs whole (fn gets a null pool); a single item gets this pool to split
    // itself.
    template <typename F>
    Status for_each_item(int64_t n, F&& fn) {
        if (n <= 0) return Status();
        if (n == 1) return fn(int64_t{0}, this);
        std::vector<Status> results(static_cast<size_t>(n));
        parallel_for(n, 1, [&](int64_t b, int64_t e) {
            for (int64_t i = b; i < e; ++i) results[static_cast<size_t>(i)] = fn(i, static_cast<ThreadPool*>(nullptr));
        });
        for (Status& st : results) {
            if (!st.ok()) return st;
        }
        return Status();
    }

  private:
    void worker_loop();
    void run_chunks();

    std::vector<std::thread> workers_;
    std::mutex call_mu_;  // one parallel_for at a time

    // Hand-off: the caller publishes the call's fields and its claim word, then bumps
    // generation_; workers spin on it briefly before sleeping on work_cv_, and are signalled only
    // when some sleep. The caller likewise spins on pending_chunks_ before sleeping on done_cv_.
    // claim_ packs (call id, chunk count, next chunk): a participant takes chunk i by a
    // compare-exchange from i to i + 1 under the same call id, so a late worker can never take a
    // chunk of a call that already finished, and the fields it then reads stay valid until its
    // chunk is counted done.
    std::mutex mu_;
    std::condition_variable work_cv_;
    std::condition_variable done_cv_;
    const std::function<void(int64_t, int64_t)>* fn_ = nullptr;
    int64_t n_ = 0;
    int64_t chunk_ = 0;
    uint64_t call_id_ = 0;  // written by the caller under call_mu_ only
    std::atomic<uint64_t> claim_{0};
    std::atomic<int64_t> pending_chunks_{0};
    std::atomic<uint64_t> generation_{0};
    std::atomic<int> sleepers_{0};
    std::atomic<bool> caller_waiting_{false};
    std::atomic<bool> stop_{false};
};

}  // namespace ember::runtime

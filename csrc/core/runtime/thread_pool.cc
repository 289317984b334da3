#include "runtime/thread_pool.h"

#include <algorithm>

namespace ember::runtime {
namespace {
thread_local bool t_inside_pool = false;
}

ThreadPool::ThreadPool(int num_threads) {
    for (int i = 1; i < std::max(1, num_threads); ++i) {
        workers_.emplace_back([this, i] { worker_loop(i); });
    }
}

ThreadPool::~ThreadPool() {
    {
        std::lock_guard<std::mutex> lock(mu_);
        stop_ = true;
    }
    work_cv_.notify_all();
    for (auto& t : workers_) t.join();
}

void ThreadPool::run_chunk(int id) {
    const std::function<void(int64_t, int64_t)>* fn;
    int64_t begin, end;
    {
        std::lock_guard<std::mutex> lock(mu_);
        if (fn_ == nullptr || id >= chunks_) return;
        fn = fn_;
        begin = id * chunk_;
        end = std::min(n_, begin + chunk_);
    }
    if (begin < end) (*fn)(begin, end);
    std::lock_guard<std::mutex> lock(mu_);
    if (--pending_chunks_ == 0) done_cv_.notify_all();
}

void ThreadPool::worker_loop(int id) {
    t_inside_pool = true;
    uint64_t seen = 0;
    for (;;) {
        {
            std::unique_lock<std::mutex> lock(mu_);
            work_cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
            if (stop_) return;
            seen = generation_;
        }
        run_chunk(id);
    }
}

void ThreadPool::parallel_for(int64_t n, int64_t grain,
                              const std::function<void(int64_t, int64_t)>& fn) {
    if (n <= 0) return;
    grain = std::max<int64_t>(1, grain);
    if (workers_.empty() || n <= grain || t_inside_pool) {
        fn(0, n);
        return;
    }
    std::lock_guard<std::mutex> call_lock(call_mu_);
    int64_t threads = num_threads();
    int64_t chunks = std::min<int64_t>(threads, (n + grain - 1) / grain);
    {
        std::lock_guard<std::mutex> lock(mu_);
        fn_ = &fn;
        n_ = n;
        chunk_ = (n + chunks - 1) / chunks;
        chunks_ = chunks;
        pending_chunks_ = chunks;
        ++generation_;
    }
    work_cv_.notify_all();
    t_inside_pool = true;
    run_chunk(0);
    t_inside_pool = false;
    std::unique_lock<std::mutex> lock(mu_);
    done_cv_.wait(lock, [&] { return pending_chunks_ == 0; });
    fn_ = nullptr;
}

}  // namespace ember::runtime

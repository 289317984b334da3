#include "runtime/thread_pool.h"

#include <algorithm>

namespace ember::runtime {
namespace {

thread_local bool t_inside_pool = false;

// Spinning this long before sleeping lets back-to-back kernels skip a futex wake-up each.
constexpr int kSpinIterations = 2000;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#else
    std::this_thread::yield();
#endif
}

// claim_ layout: call id in the high 40 bits, chunk count and next chunk in 12 bits each.
constexpr int kChunkBits = 12;
constexpr uint64_t kChunkMask = (uint64_t{1} << kChunkBits) - 1;
constexpr int64_t kMaxChunks = static_cast<int64_t>(kChunkMask);

inline uint64_t claim_word(uint64_t call, int64_t chunks) {
    return (call << (2 * kChunkBits)) | (static_cast<uint64_t>(chunks) << kChunkBits);
}

}  // namespace

ThreadPool::ThreadPool(int num_threads) {
    for (int i = 1; i < std::max(1, num_threads); ++i) {
        workers_.emplace_back([this] { worker_loop(); });
    }
}

ThreadPool::~ThreadPool() {
    {
        std::lock_guard<std::mutex> lock(mu_);
        stop_.store(true);
        generation_.fetch_add(1);
    }
    work_cv_.notify_all();
    for (auto& t : workers_) t.join();
}

void ThreadPool::run_chunks() {
    for (;;) {
        uint64_t c = claim_.load(std::memory_order_acquire);
        const uint64_t next = c & kChunkMask, chunks = (c >> kChunkBits) & kChunkMask;
        if (next >= chunks) return;
        if (!claim_.compare_exchange_weak(c, c + 1, std::memory_order_acq_rel, std::memory_order_acquire)) continue;
        // The call's fields were written before its claim word (release, read by the acquire
        // above), and the caller keeps them until this chunk is counted done.
        const int64_t begin = static_cast<int64_t>(next) * chunk_;
        const int64_t end = std::min(n_, begin + chunk_);
        if (begin < end) (*fn_)(begin, end);
        if (pending_chunks_.fetch_sub(1, std::memory_order_seq_cst) == 1 &&
            caller_waiting_.load(std::memory_order_seq_cst)) {
            { std::lock_guard<std::mutex> lock(mu_); }
            done_cv_.notify_all();
        }
    }
}

void ThreadPool::worker_loop() {
    t_inside_pool = true;
    uint64_t seen = 0;
    for (;;) {
        for (int i = 0; i < kSpinIterations && generation_.load(std::memory_order_acquire) == seen; ++i) cpu_relax();
        if (generation_.load(std::memory_order_acquire) == seen) {
            std::unique_lock<std::mutex> lock(mu_);
            // Dekker with parallel_for: we count ourselves asleep, then re-check the generation;
            // it bumps the generation, then checks for sleepers. One of us sees the other.
            sleepers_.fetch_add(1, std::memory_order_seq_cst);
            work_cv_.wait(lock, [&] { return generation_.load(std::memory_order_seq_cst) != seen; });
            sleepers_.fetch_sub(1, std::memory_order_relaxed);
        }
        if (stop_.load()) return;
        seen = generation_.load(std::memory_order_acquire);
        run_chunks();
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
    const int64_t threads = num_threads();
    const int64_t chunks = std::min<int64_t>({threads * kChunksPerThread, (n + grain - 1) / grain, kMaxChunks});
    fn_ = &fn;
    n_ = n;
    chunk_ = (n + chunks - 1) / chunks;
    // Rounding the chunk size up can leave trailing chunks empty; count only the real ones.
    const int64_t real = (n + chunk_ - 1) / chunk_;
    pending_chunks_.store(real, std::memory_order_relaxed);
    claim_.store(claim_word(++call_id_, real), std::memory_order_release);
    generation_.fetch_add(1, std::memory_order_seq_cst);
    if (sleepers_.load(std::memory_order_seq_cst) > 0) {
        { std::lock_guard<std::mutex> lock(mu_); }
        work_cv_.notify_all();
    }
    t_inside_pool = true;
    run_chunks();
    t_inside_pool = false;
    for (int i = 0; i < kSpinIterations && pending_chunks_.load(std::memory_order_acquire) > 0; ++i) cpu_relax();
    if (pending_chunks_.load(std::memory_order_acquire) > 0) {
        std::unique_lock<std::mutex> lock(mu_);
        caller_waiting_.store(true, std::memory_order_seq_cst);
        done_cv_.wait(lock, [&] { return pending_chunks_.load(std::memory_order_seq_cst) == 0; });
        caller_waiting_.store(false, std::memory_order_relaxed);
    }
    fn_ = nullptr;
}

}  // namespace ember::runtime

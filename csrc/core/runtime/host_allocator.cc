#include "runtime/host_allocator.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>

namespace ember::runtime {
namespace {
size_t round_host(size_t n) { return (n + 4095) / 4096 * 4096; }
}  // namespace

HostAllocator::~HostAllocator() {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [base, b] : blocks_) {
        if (!b.in_use) std::free(const_cast<char*>(base));
    }
}

StatusOr<void*> HostAllocator::allocate(size_t bytes) {
    if (bytes == 0) return static_cast<void*>(nullptr);
    size_t size = round_host(bytes);
    std::lock_guard<std::mutex> lock(mu_);
    process_deferred_locked();
    auto it = free_.lower_bound(size);
    if (it != free_.end() && it->first <= size * 2) {
        const char* base = it->second;
        free_.erase(it);
        Block& b = blocks_[base];
        b.in_use = true;
        cached_bytes_ -= b.size;
        allocated_bytes_ += b.size;
        return static_cast<void*>(const_cast<char*>(base));
    }
    void* mem = std::aligned_alloc(4096, size);
    if (mem == nullptr) {
        return out_of_memory("pinned host memory: cannot allocate " + std::to_string(bytes) +
                             " bytes");
    }
    // Locking the pages is what makes them "pinned" on a real device; here it is best effort,
    // since RLIMIT_MEMLOCK is often small and the virtual device reads host memory directly.
    (void)mlock(mem, size);
    blocks_[static_cast<const char*>(mem)] = Block{size, true, {}};
    allocated_bytes_ += size;
    return mem;
}

std::map<const char*, HostAllocator::Block>::iterator HostAllocator::find_locked(const void* ptr) {
    auto p = static_cast<const char*>(ptr);
    auto it = blocks_.upper_bound(p);
    if (it == blocks_.begin()) return blocks_.end();
    --it;
    if (p < it->first || p >= it->first + it->second.size) return blocks_.end();
    return it;
}

void HostAllocator::free(void* ptr) {
    if (ptr == nullptr) return;
    std::lock_guard<std::mutex> lock(mu_);
    auto it = blocks_.find(static_cast<const char*>(ptr));
    if (it == blocks_.end() || !it->second.in_use) return;
    Block& b = it->second;
    b.in_use = false;
    allocated_bytes_ -= b.size;
    cached_bytes_ += b.size;
    deferred_.push_back(it->first);
    process_deferred_locked();
}

void HostAllocator::process_deferred_locked() {
    for (size_t i = 0; i < deferred_.size();) {
        Block& b = blocks_[deferred_[i]];
        bool done = std::all_of(b.uses.begin(), b.uses.end(),
                                [](const auto& u) { return u.first->is_done(u.second); });
        if (done) {
            b.uses.clear();
            free_.emplace(b.size, deferred_[i]);
            deferred_[i] = deferred_.back();
            deferred_.pop_back();
        } else {
            ++i;
        }
    }
}

bool HostAllocator::record_use(const void* ptr, Stream& stream, uint64_t seq) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = find_locked(ptr);
    if (it == blocks_.end()) return false;
    for (auto& u : it->second.uses) {
        if (u.first == &stream) {
            u.second = std::max(u.second, seq);
            return true;
        }
    }
    it->second.uses.emplace_back(&stream, seq);
    return true;
}

bool HostAllocator::is_pinned(const void* ptr) const {
    std::lock_guard<std::mutex> lock(mu_);
    return const_cast<HostAllocator*>(this)->find_locked(ptr) != blocks_.end();
}

void HostAllocator::empty_cache() {
    std::lock_guard<std::mutex> lock(mu_);
    process_deferred_locked();
    for (auto& [size, base] : free_) {
        munlock(base, size);
        std::free(const_cast<char*>(base));
        blocks_.erase(base);
        cached_bytes_ -= size;
    }
    free_.clear();
}

size_t HostAllocator::cached_bytes() const {
    std::lock_guard<std::mutex> lock(mu_);
    return cached_bytes_;
}

size_t HostAllocator::allocated_bytes() const {
    std::lock_guard<std::mutex> lock(mu_);
    return allocated_bytes_;
}

}  // namespace ember::runtime

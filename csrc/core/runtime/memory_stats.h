// Allocator statistics, with the same meaning and names as torch.cuda.memory_stats(), so that
// tools written for CUDA read Ember's numbers without translation.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>

namespace ember::runtime {

struct Stat {
    int64_t current = 0;
    int64_t peak = 0;
    int64_t allocated = 0;  // cumulative increases
    int64_t freed = 0;      // cumulative decreases

    void add(int64_t n) {
        if (n >= 0) {
            current += n;
            allocated += n;
            peak = std::max(peak, current);
        } else {
            current += n;
            freed -= n;
        }
    }
    void reset_peak() { peak = current; }
    void reset_accumulated() { allocated = freed = 0; }
};

// Index 0 is all pools; 1 the small pool (blocks <= 1 MiB); 2 the large pool.
enum PoolIndex { kAllPools = 0, kSmallPool = 1, kLargePool = 2, kNumPoolIndices = 3 };

struct MemoryStats {
    Stat allocation[kNumPoolIndices];
    Stat segment[kNumPoolIndices];
    Stat active[kNumPoolIndices];
    Stat inactive_split[kNumPoolIndices];
    Stat allocated_bytes[kNumPoolIndices];
    Stat reserved_bytes[kNumPoolIndices];
    Stat active_bytes[kNumPoolIndices];
    Stat inactive_split_bytes[kNumPoolIndices];
    Stat requested_bytes[kNumPoolIndices];
    int64_t num_alloc_retries = 0;
    int64_t num_ooms = 0;
    int64_t num_sync_all_streams = 0;
    int64_t num_device_alloc = 0;
    int64_t num_device_free = 0;
    uint64_t capacity_bytes = 0;

    template <typename F>
    void for_each_stat(F&& f) {
        for (Stat* s : {allocation, segment, active, inactive_split, allocated_bytes, reserved_bytes,
                        active_bytes, inactive_split_bytes, requested_bytes}) {
            for (int i = 0; i < kNumPoolIndices; ++i) f(s[i]);
        }
    }
};

// A human-readable table in the spirit of torch.cuda.memory_summary().
std::string format_memory_summary(int device, const MemoryStats& stats);
// "1.50 GiB" style.
std::string format_bytes(uint64_t bytes);

}  // namespace ember::runtime

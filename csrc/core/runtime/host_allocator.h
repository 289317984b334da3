// HostAllocator: page-locked ("pinned") host memory, the only host memory that asynchronous
// copies may read or write after the host call returns.
//
// A pinned block that an in-flight copy uses must not be reused before the copy ran, even if
// the owner frees it at once (x.pin_memory().to("ember", non_blocking=True) does exactly this).
// record_use() fences the block at the end of a stream's queue; free() of a fenced block defers
// the release until every fence has completed. Freed blocks are cached by size for reuse.
//
// Thread-safety: all methods may be called from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "runtime/stream.h"

namespace ember::runtime {

class HostAllocator {
  public:
    HostAllocator() = default;
    ~HostAllocator();
    HostAllocator(const HostAllocator&) = delete;
    HostAllocator& operator=(const HostAllocator&) = delete;

    StatusOr<void*> allocate(size_t bytes);
    void free(void* ptr);
    // `ptr` may point inside a block. Returns false if it is not pinned memory.
    bool record_use(const void* ptr, Stream& stream, uint64_t seq);
    bool is_pinned(const void* ptr) const;
    void empty_cache();
    size_t cached_bytes() const;
    size_t allocated_bytes() const;

  private:
    struct Block {
        size_t size = 0;
        bool in_use = false;
        std::vector<std::pair<Stream*, uint64_t>> uses;
    };
    std::map<const char*, Block>::iterator find_locked(const void* ptr);
    void process_deferred_locked();

    mutable std::mutex mu_;
    std::map<const char*, Block> blocks_;            // base -> block, in use or cached
    std::multimap<size_t, const char*> free_;        // cached blocks by size
    std::vector<const char*> deferred_;              // freed, waiting on fences
    size_t allocated_bytes_ = 0;
    size_t cached_bytes_ = 0;
};

}  // namespace ember::runtime

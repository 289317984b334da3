// CachingAllocator: device memory for one device, pooled and reused without returning it to the
// system, in the manner of CUDA's caching allocator.
//
// - Size classes: requests round up to 512 B (so every block is 64-byte aligned or better).
//   Requests up to 1 MiB come from 2 MiB segments in the small pool; larger ones get their own
//   segment (rounded to 2 MiB) in the large pool. A cached block larger than a request is split;
//   freed neighbours merge.
// - Stream-ordered reuse: every block belongs to the stream it was allocated on. A freed block
//   returns at once to that stream's pool: work queued later on the same stream runs after the
//   work that used it. A block also used on other streams (record_stream) returns only after
//   those streams have finished the work queued up to the free. Cached memory is handed back to
//   the system only after all streams of the device are synchronized.
// - Capacity: reserved bytes never exceed capacity(). When a request does not fit, the allocator
//   synchronizes the device, releases cached segments and retries; if it still does not fit it
//   returns kOutOfMemory with a memory summary, and the device stays usable.
//
// - Graphs: a block allocated while a graph captures (begin_graph .. end_graph) belongs to that
//   graph. Inside the capture, freed blocks are reused as usual (a replay runs the kernels in
//   capture order, so the same reuse is safe then); from end_graph() on, the graph's blocks stay
//   out of the pools, freed or not, until release_graph(), because every replay writes them
//   again (runtime/graph.h).
//
// Thread-safety: all methods may be called concurrently from any thread. The allocator never
// calls back into the caller while holding its lock.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "runtime/memory_stats.h"
#include "runtime/stream.h"

namespace ember::runtime {

class CachingAllocator {
  public:
    // `synchronize_device` waits for all work queued on the device (never throws, ignores errors).
    CachingAllocator(int device, uint64_t capacity, std::function<void()> synchronize_device);
    ~CachingAllocator();
    CachingAllocator(const CachingAllocator&) = delete;
    CachingAllocator& operator=(const CachingAllocator&) = delete;

    // Returns nullptr for 0 bytes.
    StatusOr<void*> allocate(size_t bytes, Stream& stream);
    // `ptr` must come from allocate(); nullptr is ignored.
    void free(void* ptr);
    // Marks `ptr` as used by work queued on `stream` (a stream other than its own).
    void record_stream(void* ptr, Stream& stream);
    // Releases every cached, unused segment to the system (synchronizes the device first).
    void empty_cache();

    bool owns(const void* ptr) const;
    void begin_graph(int64_t graph);
    void end_graph();
    void release_graph(int64_t graph);
    int device() const { return device_; }
    uint64_t capacity() const { return capacity_; }
    MemoryStats stats() const;
    void reset_peak_stats();
    void reset_accumulated_stats();
    std::string summary() const;

  private:
    struct Block;
    struct BlockLess {
        bool operator()(const Block* a, const Block* b) const;
    };
    using Pool = std::set<Block*, BlockLess>;

    Block* find_free_block(Pool& pool, Stream* stream, size_t size);
    StatusOr<Block*> new_segment(size_t size, Stream* stream, bool small);
    Block* split(Block* block, size_t size, Pool& pool);
    void release_block(Block* block);  // back to its pool, merging neighbours
    void retire(Block* block);         // release_block once no other stream may use it
    bool graph_owned(const Block* b) const;  // kept for a live graph that is not capturing
    void process_pending();
    void release_cached_segments();
    void pool_insert(Block* b);
    void pool_erase(Block* b);
    // Block objects and the nodes of pools and allocated_ are recycled: a small tensor's
    // allocate/free would otherwise cost four heap allocations and four frees (a split's Block,
    // two pool nodes, a map node), a measurable share of a small op's host time.
    Block* make_block();
    void drop_block(Block* b);
    void track(Block* b);     // allocated_[b->ptr] = b
    void untrack(std::unordered_map<void*, Block*>::iterator it);
    Pool& pool_of(const Block* b) { return b->is_small ? small_pool_ : large_pool_; }
    std::string oom_message(size_t requested) const;

    const int device_;
    const uint64_t capacity_;
    std::function<void()> synchronize_device_;

    mutable std::mutex mu_;
    Pool small_pool_;
    Pool large_pool_;
    std::unordered_map<void*, Block*> allocated_;
    std::vector<Block*> spare_blocks_;
    std::vector<Pool::node_type> spare_pool_nodes_;
    std::vector<std::unordered_map<void*, Block*>::node_type> spare_map_nodes_;
    std::vector<Block*> pending_;            // freed, waiting on other streams
    std::map<const char*, size_t> segments_;  // base -> size, for owns()
    int64_t capturing_graph_ = 0;
    std::set<int64_t> live_graphs_;
    std::unordered_map<int64_t, std::vector<Block*>> held_;  // freed blocks a graph still writes
    MemoryStats stats_;

    struct Block {
        char* ptr = nullptr;
        size_t size = 0;
        size_t requested = 0;
        Stream* stream = nullptr;
        Block* prev = nullptr;
        Block* next = nullptr;
        bool allocated = false;
        bool is_small = false;
        int64_t graph = 0;  // the graph that captured its allocation, while that graph lives
        // Work queued on `stream` up to this sequence number may still use the block; its
        // memory goes back to the system only after that work has finished.
        uint64_t free_fence = 0;
        std::vector<std::pair<Stream*, uint64_t>> uses;  // other streams, and their fences
        bool is_split() const { return prev != nullptr || next != nullptr; }
    };
};

}  // namespace ember::runtime

#include "runtime/caching_allocator.h"

#include <algorithm>
#include <cstdlib>
#include <tuple>

#include "base/instrument.h"

namespace ember::runtime {
namespace {

constexpr size_t kMinBlock = 512;
constexpr size_t kSmallSize = 1 << 20;         // requests up to this use the small pool
constexpr size_t kSmallSegment = 2 << 20;      // small pool segments
constexpr size_t kSegmentRound = 2 << 20;      // large segments round to this
constexpr size_t kLargeSplitRemainder = 1 << 20;
constexpr size_t kMaxSpare = 256;              // recycled Blocks and container nodes kept, each

size_t round_size(size_t n) { return n < kMinBlock ? kMinBlock : (n + kMinBlock - 1) / kMinBlock * kMinBlock; }

template <typename F>
void for_pool(bool small, F&& f) {
    f(kAllPools);
    f(small ? kSmallPool : kLargePool);
}

}  // namespace

bool CachingAllocator::BlockLess::operator()(const Block* a, const Block* b) const {
    return std::tie(a->stream, a->size, a->ptr) < std::tie(b->stream, b->size, b->ptr);
}

CachingAllocator::CachingAllocator(int device, uint64_t capacity,
                                   std::function<void()> synchronize_device)
    : device_(device), capacity_(capacity), synchronize_device_(std::move(synchronize_device)) {
    stats_.capacity_bytes = capacity;
}

CachingAllocator::~CachingAllocator() {
    // Blocks still allocated belong to tensors that outlive the device (process exit); their
    // memory goes with the process. Free what the cache holds.
    std::lock_guard<std::mutex> lock(mu_);
    for (Block* b : pending_) b->uses.clear();
    for (auto& [base, size] : segments_) std::free(const_cast<char*>(base));
    for (Block* b : spare_blocks_) delete b;
}

CachingAllocator::Block* CachingAllocator::make_block() {
    if (spare_blocks_.empty()) return new Block();
    Block* b = spare_blocks_.back();
    spare_blocks_.pop_back();
    return b;
}

void CachingAllocator::drop_block(Block* b) {
    if (spare_blocks_.size() >= kMaxSpare) {
        delete b;
        return;
    }
    std::vector<std::pair<Stream*, uint64_t>> uses = std::move(b->uses);
    uses.clear();
    *b = Block();
    b->uses = std::move(uses);  // keeps its capacity
    spare_blocks_.push_back(b);
}

void CachingAllocator::track(Block* b) {
    if (spare_map_nodes_.empty()) {
        allocated_.emplace(b->ptr, b);
        return;
    }
    auto node = std::move(spare_map_nodes_.back());
    spare_map_nodes_.pop_back();
    node.key() = b->ptr;
    node.mapped() = b;
    allocated_.insert(std::move(node));
}

void CachingAllocator::untrack(std::unordered_map<void*, Block*>::iterator it) {
    auto node = allocated_.extract(it);
    if (spare_map_nodes_.size() < kMaxSpare) spare_map_nodes_.push_back(std::move(node));
}

void CachingAllocator::pool_insert(Block* b) {
    if (spare_pool_nodes_.empty()) {
        pool_of(b).insert(b);
    } else {
        auto node = std::move(spare_pool_nodes_.back());
        spare_pool_nodes_.pop_back();
        node.value() = b;
        pool_of(b).insert(std::move(node));
    }
    if (b->is_split()) {
        for_pool(b->is_small, [&](int i) {
            stats_.inactive_split[i].add(1);
            stats_.inactive_split_bytes[i].add(static_cast<int64_t>(b->size));
        });
    }
}

void CachingAllocator::pool_erase(Block* b) {
    auto node = pool_of(b).extract(b);
    if (!node.empty() && spare_pool_nodes_.size() < kMaxSpare) spare_pool_nodes_.push_back(std::move(node));
    if (b->is_split()) {
        for_pool(b->is_small, [&](int i) {
            stats_.inactive_split[i].add(-1);
            stats_.inactive_split_bytes[i].add(-static_cast<int64_t>(b->size));
        });
    }
}

CachingAllocator::Block* CachingAllocator::find_free_block(Pool& pool, Stream* stream,
                                                           size_t size) {
    Block key;
    key.stream = stream;
    key.size = size;
    auto it = pool.lower_bound(&key);
    if (it == pool.end() || (*it)->stream != stream) return nullptr;
    Block* b = *it;
    pool_erase(b);
    return b;
}

StatusOr<CachingAllocator::Block*> CachingAllocator::new_segment(size_t size, Stream* stream,
                                                                bool small) {
    size_t seg = small ? kSmallSegment : (size + kSegmentRound - 1) / kSegmentRound * kSegmentRound;
    if (static_cast<uint64_t>(stats_.reserved_bytes[kAllPools].current) + seg > capacity_) {
        return out_of_memory("capacity");
    }
    void* mem = std::aligned_alloc(4096, seg);
    if (mem == nullptr) return out_of_memory("host");
    Block* b = make_block();
    b->ptr = static_cast<char*>(mem);
    b->size = seg;
    b->stream = stream;
    b->is_small = small;
    segments_.emplace(b->ptr, seg);
    ++stats_.num_device_alloc;
    for_pool(small, [&](int i) {
        stats_.segment[i].add(1);
        stats_.reserved_bytes[i].add(static_cast<int64_t>(seg));
    });
    return b;
}

CachingAllocator::Block* CachingAllocator::split(Block* b, size_t size, Pool& pool) {
    size_t remaining = b->size - size;
    bool worth = b->is_small ? remaining >= kMinBlock : remaining > kLargeSplitRemainder;
    if (!worth) return b;
    Block* rest = make_block();
    rest->ptr = b->ptr + size;
    rest->size = remaining;
    rest->stream = b->stream;
    rest->is_small = b->is_small;
    rest->graph = b->graph;  // a capture may have written that memory: it stays the graph's
    rest->free_fence = b->free_fence;
    rest->prev = b;
    rest->next = b->next;
    if (rest->next) rest->next->prev = rest;
    b->next = rest;
    b->size = size;
    pool_insert(rest);
    (void)pool;
    return b;
}

StatusOr<void*> CachingAllocator::allocate(size_t bytes, Stream& stream) {
    if (bytes == 0) return static_cast<void*>(nullptr);
    size_t size = round_size(bytes);
    bool small = size <= kSmallSize;
    std::unique_lock<std::mutex> lock(mu_);
    process_pending();
    Pool& pool = small ? small_pool_ : large_pool_;
    Block* b = find_free_block(pool, &stream, size);
    if (b == nullptr) {
        auto seg = new_segment(size, &stream, small);
        if (!seg.ok()) {
            // Free what the cache holds and try once more, as CUDA's allocator does.
            ++stats_.num_alloc_retries;
            ++stats_.num_sync_all_streams;
            lock.unlock();
            synchronize_device_();
            lock.lock();
            process_pending();
            release_cached_segments();
            b = find_free_block(pool, &stream, size);
            if (b == nullptr) {
                seg = new_segment(size, &stream, small);
                if (!seg.ok()) {
                    ++stats_.num_ooms;
                    return out_of_memory(oom_message(bytes));
                }
            }
        }
        if (b == nullptr) b = *seg;
    }
    b = split(b, size, pool);
    b->allocated = true;
    b->requested = bytes;
    b->graph = capturing_graph_;
    track(b);
    int64_t sz = static_cast<int64_t>(b->size);
    for_pool(b->is_small, [&](int i) {
        stats_.allocation[i].add(1);
        stats_.allocated_bytes[i].add(sz);
        stats_.active[i].add(1);
        stats_.active_bytes[i].add(sz);
        stats_.requested_bytes[i].add(static_cast<int64_t>(bytes));
    });
    if (auto* l = instrument::listener()) {
        l->on_alloc(device_, b->ptr, b->size,
                    static_cast<size_t>(stats_.allocated_bytes[kAllPools].current),
                    static_cast<size_t>(stats_.reserved_bytes[kAllPools].current));
    }
    return static_cast<void*>(b->ptr);
}

void CachingAllocator::free(void* ptr) {
    if (ptr == nullptr) return;
    std::lock_guard<std::mutex> lock(mu_);
    auto it = allocated_.find(ptr);
    if (it == allocated_.end()) return;  // not ours: a bug upstream, but never crash in a deleter
    Block* b = it->second;
    untrack(it);
    b->allocated = false;
    b->free_fence = b->stream->enqueued();
    int64_t sz = static_cast<int64_t>(b->size);
    for_pool(b->is_small, [&](int i) {
        stats_.allocation[i].add(-1);
        stats_.allocated_bytes[i].add(-sz);
        stats_.requested_bytes[i].add(-static_cast<int64_t>(b->requested));
    });
    if (auto* l = instrument::listener()) {
        l->on_free(device_, b->ptr, b->size,
                   static_cast<size_t>(stats_.allocated_bytes[kAllPools].current),
                   static_cast<size_t>(stats_.reserved_bytes[kAllPools].current));
    }
    if (graph_owned(b)) {
        held_[b->graph].push_back(b);
        return;
    }
    retire(b);
}

bool CachingAllocator::graph_owned(const Block* b) const {
    return b->graph != 0 && b->graph != capturing_graph_ && live_graphs_.count(b->graph) != 0;
}

void CachingAllocator::retire(Block* b) {
    if (!b->uses.empty()) {
        // Fence each other stream at its current end of queue; reuse waits for those.
        for (auto& [s, seq] : b->uses) seq = s->enqueued();
        pending_.push_back(b);
        process_pending();
        return;
    }
    release_block(b);
}

void CachingAllocator::begin_graph(int64_t graph) {
    std::lock_guard<std::mutex> lock(mu_);
    capturing_graph_ = graph;
    live_graphs_.insert(graph);
}

void CachingAllocator::end_graph() {
    std::lock_guard<std::mutex> lock(mu_);
    const int64_t graph = capturing_graph_;
    capturing_graph_ = 0;
    if (graph == 0) return;
    // Blocks the capture freed were reused within it; the free ones left over are the graph's
    // too (a replay writes them again), so they leave the pools.
    std::vector<Block*> owned;
    for (Pool* pool : {&small_pool_, &large_pool_}) {
        for (Block* b : *pool) {
            if (b->graph == graph) owned.push_back(b);
        }
    }
    for (Block* b : owned) {
        pool_erase(b);
        // Active again (the graph's memory) until release_graph retires it a second time.
        for_pool(b->is_small, [&](int i) {
            stats_.active[i].add(1);
            stats_.active_bytes[i].add(static_cast<int64_t>(b->size));
        });
        held_[graph].push_back(b);
    }
}

void CachingAllocator::release_graph(int64_t graph) {
    std::lock_guard<std::mutex> lock(mu_);
    if (live_graphs_.erase(graph) == 0) return;
    if (capturing_graph_ == graph) capturing_graph_ = 0;
    for (auto& [ptr, b] : allocated_) {
        if (b->graph == graph) b->graph = 0;  // a live tensor: freed the ordinary way later
    }
    auto it = held_.find(graph);
    if (it == held_.end()) return;
    std::vector<Block*> blocks = std::move(it->second);
    held_.erase(it);
    for (Block* b : blocks) {
        b->graph = 0;
        b->free_fence = b->stream->enqueued();  // after the replays queued so far
        retire(b);
    }
}

void CachingAllocator::release_block(Block* b) {
    int64_t sz = static_cast<int64_t>(b->size);
    for_pool(b->is_small, [&](int i) {
        stats_.active[i].add(-1);
        stats_.active_bytes[i].add(-sz);
    });
    for (Block* n : {b->prev, b->next}) {
        if (n == nullptr || n->allocated || !n->uses.empty()) continue;
        if (pool_of(n).count(n) == 0) continue;  // pending
        pool_erase(n);
        uint64_t fence = std::max(n->free_fence, b->free_fence);
        const int64_t graph = b->graph != 0 ? b->graph : n->graph;  // any part a capture wrote keeps it
        if (n == b->prev) {
            n->graph = graph;
            n->free_fence = fence;
            n->size += b->size;
            n->next = b->next;
            if (n->next) n->next->prev = n;
            drop_block(b);
            b = n;
        } else {
            b->graph = graph;
            b->free_fence = fence;
            b->size += n->size;
            b->next = n->next;
            if (b->next) b->next->prev = b;
            drop_block(n);
        }
    }
    pool_insert(b);
}

void CachingAllocator::process_pending() {
    auto done = [](Block* b) {
        return std::all_of(b->uses.begin(), b->uses.end(),
                           [](const auto& u) { return u.first->is_done(u.second); });
    };
    for (size_t i = 0; i < pending_.size();) {
        Block* b = pending_[i];
        if (done(b)) {
            b->uses.clear();
            pending_[i] = pending_.back();
            pending_.pop_back();
            if (graph_owned(b)) held_[b->graph].push_back(b);
            else release_block(b);
        } else {
            ++i;
        }
    }
}

void CachingAllocator::record_stream(void* ptr, Stream& stream) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = allocated_.find(ptr);
    if (it == allocated_.end()) return;
    Block* b = it->second;
    if (b->stream == &stream) return;
    for (auto& u : b->uses)
        if (u.first == &stream) return;
    b->uses.emplace_back(&stream, 0);
}

void CachingAllocator::release_cached_segments() {
    for (Pool* pool : {&small_pool_, &large_pool_}) {
        for (auto it = pool->begin(); it != pool->end();) {
            Block* b = *it;
            // Work queued after the caller synchronized may still use a freed block; a block a
            // capture wrote is the graph's memory (every replay writes it again).
            if (b->is_split() || !b->stream->is_done(b->free_fence) || b->graph != 0) {
                ++it;
                continue;
            }
            it = pool->erase(it);
            for_pool(b->is_small, [&](int i) {
                stats_.segment[i].add(-1);
                stats_.reserved_bytes[i].add(-static_cast<int64_t>(b->size));
            });
            ++stats_.num_device_free;
            segments_.erase(b->ptr);
            std::free(b->ptr);
            drop_block(b);
        }
    }
}

void CachingAllocator::empty_cache() {
    synchronize_device_();
    std::lock_guard<std::mutex> lock(mu_);
    process_pending();
    release_cached_segments();
}

bool CachingAllocator::owns(const void* ptr) const {
    auto p = static_cast<const char*>(ptr);
    std::lock_guard<std::mutex> lock(mu_);
    auto it = segments_.upper_bound(p);
    if (it == segments_.begin()) return false;
    --it;
    return p >= it->first && p < it->first + it->second;
}

MemoryStats CachingAllocator::stats() const {
    std::lock_guard<std::mutex> lock(mu_);
    return stats_;
}

void CachingAllocator::reset_peak_stats() {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.for_each_stat([](Stat& s) { s.reset_peak(); });
}

void CachingAllocator::reset_accumulated_stats() {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.for_each_stat([](Stat& s) { s.reset_accumulated(); });
    stats_.num_alloc_retries = stats_.num_ooms = stats_.num_sync_all_streams = 0;
    stats_.num_device_alloc = stats_.num_device_free = 0;
}

std::string CachingAllocator::summary() const { return format_memory_summary(device_, stats()); }

std::string CachingAllocator::oom_message(size_t requested) const {
    const auto& s = stats_;
    uint64_t reserved = static_cast<uint64_t>(s.reserved_bytes[kAllPools].current);
    uint64_t allocated = static_cast<uint64_t>(s.allocated_bytes[kAllPools].current);
    return "ember:" + std::to_string(device_) + " out of memory. Tried to allocate " +
           format_bytes(requested) + ". Device capacity " + format_bytes(capacity_) + ", " +
           format_bytes(allocated) + " allocated by tensors, " + format_bytes(reserved) +
           " reserved in total. Free tensors you no longer need, use smaller batches, or raise "
           "the limit with EMBER_DEVICE_MEMORY (e.g. EMBER_DEVICE_MEMORY=16GiB).\n" +
           format_memory_summary(device_, s);
}

}  // namespace ember::runtime

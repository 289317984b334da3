#include "allocator.h"

#include <ATen/core/CachingHostAllocator.h>
#include <c10/core/CachingDeviceAllocator.h>

#include <atomic>
#include <cstring>
#include <mutex>
#include <unordered_map>

#include "check.h"
#include "context.h"
#include "kernels/copy.h"

namespace ember::torch_glue {
namespace {

using c10::CachingDeviceAllocator::DeviceStats;
using c10::CachingDeviceAllocator::StatArray;

// torch.profiler(profile_memory=True): each allocation and free is reported with the device's
// allocated and reserved totals, as CUDA's allocator reports them, so the memory columns and
// memory timelines cover ember. Sizes of blocks allocated while profiling are remembered until
// their free; nothing is recorded when the profiler does not ask.
struct ProfiledBlocks {
    std::mutex mu;
    std::unordered_map<void*, size_t> sizes;
    std::atomic<bool> any{false};  // frees skip the lock until something was profiled
};
ProfiledBlocks& profiled() {
    static auto* blocks = new ProfiledBlocks();  // outlives frees at exit
    return *blocks;
}

void report_to_profiler(void* ptr, int64_t delta, int dev) {
    runtime::MemoryStats s = runtime::device(dev).allocator().stats();
    c10::reportMemoryUsageToProfiler(ptr, delta, s.allocated_bytes[runtime::kAllPools].current,
                                     s.reserved_bytes[runtime::kAllPools].current,
                                     c10::Device(c10::DeviceType::PrivateUse1, static_cast<c10::DeviceIndex>(dev)));
}

void delete_device_memory(void* ptr) {
    int dev = runtime::device_of(ptr);
    if (dev < 0) return;
    runtime::device(dev).allocator().free(ptr);
    ProfiledBlocks& p = profiled();
    if (!p.any.load(std::memory_order_relaxed)) return;
    size_t bytes = 0;
    {
        std::lock_guard<std::mutex> lock(p.mu);
        auto it = p.sizes.find(ptr);
        if (it == p.sizes.end()) return;
        bytes = it->second;
        p.sizes.erase(it);
    }
    if (c10::memoryProfilingEnabled()) report_to_profiler(ptr, -static_cast<int64_t>(bytes), dev);
}

void copy_stat(StatArray& dst, const runtime::Stat* src) {
    for (int i = 0; i < runtime::kNumPoolIndices; ++i) {
        dst[i].current = src[i].current;
        dst[i].peak = src[i].peak;
        dst[i].allocated = src[i].allocated;
        dst[i].freed = src[i].freed;
    }
}

class DeviceAllocator final : public c10::DeviceAllocator {
  public:
    c10::DataPtr allocate(size_t n) override {
        int index = runtime::current_device();
        runtime::Device& dev = device_for(static_cast<c10::DeviceIndex>(index));
        void* ptr = value_or_raise(dev.allocator().allocate(n, dev.current_stream()));
        if (ptr != nullptr && c10::memoryProfilingEnabled()) {
            {
                ProfiledBlocks& p = profiled();
                std::lock_guard<std::mutex> lock(p.mu);
                p.sizes[ptr] = n;
                p.any.store(true, std::memory_order_relaxed);
            }
            report_to_profiler(ptr, static_cast<int64_t>(n), index);
        }
        return {ptr, ptr, &delete_device_memory,
                c10::Device(c10::DeviceType::PrivateUse1, static_cast<c10::DeviceIndex>(index))};
    }
    c10::DeleterFnPtr raw_deleter() const override { return &delete_device_memory; }

    void copy_data(void* dest, const void* src, std::size_t count) const override {
        // Device-to-device bytes, ordered after queued work on the current stream.
        int index = runtime::device_of(dest);
        runtime::Device& dev = device_for(static_cast<c10::DeviceIndex>(index));
        enqueue(dev.current_stream(), "copy_data", [dest, src, count] {
            std::memcpy(dest, src, count);
            return Status();
        });
    }

    bool initialized() override { return true; }
    void emptyCache(c10::MempoolId_t) override {
        for (int i = 0; i < runtime::device_count(); ++i) runtime::device(i).allocator().empty_cache();
    }
    void recordStream(const c10::DataPtr& ptr, c10::Stream stream) override {
        if (ptr.get() == nullptr) return;
        runtime::Device& dev = device_for(stream.device_index());
        runtime::Stream* s = value_or_raise(dev.stream(stream.id()));
        int owner = runtime::device_of(ptr.get());
        if (owner >= 0) runtime::device(owner).allocator().record_stream(ptr.get(), *s);
    }
    DeviceStats getDeviceStats(c10::DeviceIndex device) override {
        runtime::MemoryStats s = device_for(device).allocator().stats();
        DeviceStats out;
        copy_stat(out.allocation, s.allocation);
        copy_stat(out.segment, s.segment);
        copy_stat(out.active, s.active);
        copy_stat(out.inactive_split, s.inactive_split);
        copy_stat(out.allocated_bytes, s.allocated_bytes);
        copy_stat(out.reserved_bytes, s.reserved_bytes);
        copy_stat(out.active_bytes, s.active_bytes);
        copy_stat(out.inactive_split_bytes, s.inactive_split_bytes);
        copy_stat(out.requested_bytes, s.requested_bytes);
        out.num_alloc_retries = s.num_alloc_retries;
        out.num_ooms = s.num_ooms;
        out.num_sync_all_streams = s.num_sync_all_streams;
        out.num_device_alloc = s.num_device_alloc;
        out.num_device_free = s.num_device_free;
        return out;
    }
    void resetAccumulatedStats(c10::DeviceIndex device) override {
        device_for(device).allocator().reset_accumulated_stats();
    }
    void resetPeakStats(c10::DeviceIndex device) override {
        device_for(device).allocator().reset_peak_stats();
    }
    std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex device) override {
        auto& a = device_for(device).allocator();
        auto reserved = static_cast<size_t>(a.stats().reserved_bytes[runtime::kAllPools].current);
        return {a.capacity() - reserved, a.capacity()};
    }
};

void delete_pinned(void* ptr) { runtime::host_allocator().free(ptr); }

// Pinned host memory, registered as PrivateUse1's host allocator so that torch.accelerator's
// host-cache calls (empty_host_cache, host memory stats) reach core's HostAllocator.
class PinnedAllocator final : public at::HostAllocator {
  public:
    c10::DataPtr allocate(size_t n) override {
        void* ptr = value_or_raise(runtime::host_allocator().allocate(n));
        return {ptr, ptr, &delete_pinned, c10::Device(c10::DeviceType::CPU)};
    }
    c10::DeleterFnPtr raw_deleter() const override { return &delete_pinned; }
    void copy_data(void* dest, const void* src, std::size_t count) const override {
        std::memcpy(dest, src, count);
    }
    // Fences the block at the end of the stream's queue: it is not reused before work queued so
    // far on that stream has run.
    bool record_event(void* ptr, void*, c10::Stream stream) override {
        if (stream.device_type() != c10::DeviceType::PrivateUse1) return false;
        runtime::Stream* s = value_or_raise(device_for(stream.device_index()).stream(stream.id()));
        return runtime::host_allocator().record_use(ptr, *s, s->enqueued());
    }
    void empty_cache() override { runtime::host_allocator().empty_cache(); }
    at::HostStats get_stats() override {
        at::HostStats out;
        auto& h = runtime::host_allocator();
        auto in_use = static_cast<int64_t>(h.allocated_bytes());
        auto total = in_use + static_cast<int64_t>(h.cached_bytes());
        out.active_bytes.current = in_use;
        out.allocated_bytes.current = total;
        return out;
    }
    void reset_accumulated_stats() override {}
    void reset_peak_stats() override {}
};

DeviceAllocator g_device_allocator;
PinnedAllocator g_pinned_allocator;

}  // namespace

REGISTER_ALLOCATOR(c10::DeviceType::PrivateUse1, &g_device_allocator);
REGISTER_HOST_ALLOCATOR(c10::DeviceType::PrivateUse1, &g_pinned_allocator);

c10::Allocator* device_allocator() { return &g_device_allocator; }
c10::Allocator* pinned_allocator() { return &g_pinned_allocator; }

void resize_storage_bytes(const c10::Storage& storage, size_t new_bytes) {
    TORCH_CHECK(storage.resizable(), "ember: trying to resize a storage that is not resizable");
    size_t old_bytes = storage.nbytes();
    if (new_bytes == old_bytes) return;
    c10::DeviceIndex index = storage.device().index();
    runtime::Device& dev = device_for(index);
    int previous = runtime::current_device();
    runtime::set_current_device(dev.index());
    c10::DataPtr fresh = g_device_allocator.allocate(new_bytes);
    runtime::set_current_device(previous);
    size_t keep = std::min(old_bytes, new_bytes);
    if (keep > 0) {
        void* dst = fresh.get();
        const void* src = storage.data();
        enqueue(dev.current_stream(), "resize_storage", [dst, src, keep] {
            std::memcpy(dst, src, keep);
            return Status();
        });
    }
    // The old block returns to the current stream's pool; the copy above is queued before any
    // later reuse of it on that stream.
    storage.unsafeGetStorageImpl()->set_data_ptr_noswap(std::move(fresh));
    storage.unsafeGetStorageImpl()->set_nbytes(new_bytes);
}

}  // namespace ember::torch_glue

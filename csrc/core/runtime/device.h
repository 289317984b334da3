// Device: one virtual accelerator — its memory (caching allocator), its streams and its
// compute threads. The process-wide registry below is the interface a real chip's driver would
// provide in place of the host executor; nothing above it knows that the device is the CPU.
//
// Lifetime: devices are created on first use and live until the process exits (they are never
// destroyed, so no worker thread is joined during static destruction). Tests may construct
// private Device objects, which join their threads when destroyed.
//
// Thread-safety: every method may be called from any thread. The current device and each
// device's current stream are per host thread, as in CUDA.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "base/status.h"
#include "runtime/caching_allocator.h"
#include "runtime/host_allocator.h"
#include "runtime/stream.h"
#include "runtime/thread_pool.h"

namespace ember::runtime {

// Bumped when the device interface changes incompatibly.
constexpr int kApiVersion = 1;
// Streams per device before create_stream() starts handing out existing ones round-robin.
constexpr int kMaxStreamsPerDevice = 64;

class Device {
  public:
    Device(int index, int num_threads, uint64_t capacity);
    ~Device();
    Device(const Device&) = delete;
    Device& operator=(const Device&) = delete;

    int index() const { return index_; }
    ThreadPool& pool() { return *pool_; }
    CachingAllocator& allocator() { return *allocator_; }

    Stream& default_stream() { return *streams_[0]; }
    Stream& create_stream(int priority);
    StatusOr<Stream*> stream(int64_t id);
    int64_t num_streams() const;

    Stream& current_stream();
    void set_current_stream(Stream& stream);

    // Waits for every stream; returns (and clears) the first stored error.
    Status synchronize();

    // The stream that is capturing a graph on this device, or null (runtime/graph.h). Work
    // queued on any other stream of the device meanwhile would run at once, outside the graph.
    Stream* capture_stream() const { return capture_stream_.load(std::memory_order_acquire); }
    void set_capture_stream(Stream* s) { capture_stream_.store(s, std::memory_order_release); }

  private:
    void wait_all_streams();

    const int index_;
    std::unique_ptr<ThreadPool> pool_;
    mutable std::mutex streams_mu_;
    std::vector<std::unique_ptr<Stream>> streams_;
    int64_t next_reuse_ = 1;
    std::unique_ptr<CachingAllocator> allocator_;
    std::atomic<Stream*> capture_stream_{nullptr};
};

int device_count();
// `index` must be in [0, device_count()).
Device& device(int index);
StatusOr<Device*> checked_device(int index);
// The device whose memory holds `ptr`, or -1.
int device_of(const void* ptr);
HostAllocator& host_allocator();

int current_device();
void set_current_device(int index);

}  // namespace ember::runtime

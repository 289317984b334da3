#include "runtime/device.h"

#include <array>
#include <string>

#include "base/env.h"

namespace ember::runtime {

Device::Device(int index, int num_threads, uint64_t capacity)
    : index_(index), pool_(std::make_unique<ThreadPool>(num_threads)) {
    streams_.push_back(std::make_unique<Stream>(index, 0, 0));
    allocator_ = std::make_unique<CachingAllocator>(index, capacity, [this] { wait_all_streams(); });
}

Device::~Device() {
    wait_all_streams();
    allocator_.reset();
    std::lock_guard<std::mutex> lock(streams_mu_);
    streams_.clear();
}

Stream& Device::create_stream(int priority) {
    std::lock_guard<std::mutex> lock(streams_mu_);
    if (static_cast<int64_t>(streams_.size()) < kMaxStreamsPerDevice) {
        auto id = static_cast<int64_t>(streams_.size());
        streams_.push_back(std::make_unique<Stream>(index_, id, priority));
        return *streams_.back();
    }
    Stream& s = *streams_[next_reuse_];
    next_reuse_ = next_reuse_ + 1 >= kMaxStreamsPerDevice ? 1 : next_reuse_ + 1;
    return s;
}

StatusOr<Stream*> Device::stream(int64_t id) {
    std::lock_guard<std::mutex> lock(streams_mu_);
    if (id < 0 || id >= static_cast<int64_t>(streams_.size())) {
        return invalid_argument("ember:" + std::to_string(index_) + " has no stream " +
                                std::to_string(id));
    }
    return streams_[id].get();
}

int64_t Device::num_streams() const {
    std::lock_guard<std::mutex> lock(streams_mu_);
    return static_cast<int64_t>(streams_.size());
}

namespace {
// Per host thread: current device and, per device, the current stream's id.
thread_local int t_current_device = 0;
thread_local std::vector<int64_t> t_current_stream;
}  // namespace

Stream& Device::current_stream() {
    if (index_ < static_cast<int>(t_current_stream.size())) {
        int64_t id = t_current_stream[index_];
        if (id != 0) {
            std::lock_guard<std::mutex> lock(streams_mu_);
            if (id < static_cast<int64_t>(streams_.size())) return *streams_[id];
        }
    }
    return default_stream();
}

void Device::set_current_stream(Stream& stream) {
    if (static_cast<int>(t_current_stream.size()) <= index_) t_current_stream.resize(index_ + 1, 0);
    t_current_stream[index_] = stream.id();
}

void Device::wait_all_streams() {
    std::vector<Stream*> all;
    {
        std::lock_guard<std::mutex> lock(streams_mu_);
        for (auto& s : streams_) all.push_back(s.get());
    }
    for (Stream* s : all) s->wait_for(s->enqueued());
}

Status Device::synchronize() {
    std::vector<Stream*> all;
    {
        std::lock_guard<std::mutex> lock(streams_mu_);
        for (auto& s : streams_) all.push_back(s.get());
    }
    Status first;
    for (Stream* s : all) {
        Status st = s->synchronize();
        if (first.ok() && !st.ok()) first = st;
    }
    return first;
}

namespace {
constexpr int kMaxDevices = 64;
std::array<Device*, kMaxDevices> g_devices{};
std::array<std::once_flag, kMaxDevices> g_device_once;
}  // namespace

int device_count() { return std::min(env::device_count(), kMaxDevices); }

Device& device(int index) {
    std::call_once(g_device_once[index], [index] {
        // Never deleted: see the lifetime note in the header.
        g_devices[index] = new Device(index, env::num_threads(), env::device_memory_bytes());
    });
    return *g_devices[index];
}

StatusOr<Device*> checked_device(int index) {
    if (index < 0 || index >= device_count()) {
        return invalid_argument("invalid ember device index " + std::to_string(index) +
                                ": there are " + std::to_string(device_count()) +
                                " ember devices (set EMBER_DEVICE_COUNT for more)");
    }
    return &device(index);
}

int device_of(const void* ptr) {
    for (int i = 0; i < device_count(); ++i) {
        if (g_devices[i] != nullptr && g_devices[i]->allocator().owns(ptr)) return i;
    }
    return -1;
}

HostAllocator& host_allocator() {
    static auto* alloc = new HostAllocator();
    return *alloc;
}

int current_device() { return t_current_device; }
void set_current_device(int index) { t_current_device = index; }

}  // namespace ember::runtime

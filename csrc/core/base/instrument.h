// Instrumentation points where a profiler attaches: enqueue, kernel start/end, alloc, free.
//
// Cost when nobody listens: one relaxed atomic load and a predictable branch per event. A
// listener is installed for the whole process; its callbacks run on whichever thread produced
// the event (host threads for enqueue/alloc/free, stream workers for start/end), so they must be
// thread-safe and must not block or call into Python.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace ember::instrument {

struct Listener {
    virtual ~Listener() = default;
    virtual void on_enqueue(int device, int64_t stream, uint64_t seq, const char* name) {}
    virtual void on_start(int device, int64_t stream, uint64_t seq, const char* name) {}
    virtual void on_end(int device, int64_t stream, uint64_t seq, const char* name) {}
    // Totals after the event: bytes handed out, and bytes the allocator holds from the system.
    virtual void on_alloc(int device, const void* ptr, size_t bytes, size_t allocated_total,
                          size_t reserved_total) {}
    virtual void on_free(int device, const void* ptr, size_t bytes, size_t allocated_total,
                         size_t reserved_total) {}
    // A step inside the running kernel (a compiled graph's fused kernel or library call), on the
    // stream worker between that kernel's on_start and on_end. `label` names the step and the
    // user's source lines it came from; steps do not nest.
    virtual void on_step_begin(const char* label) {}
    virtual void on_step_end(const char* label) {}
};

// The installed listener or nullptr. The caller keeps the listener alive until it is replaced.
inline std::atomic<Listener*>& listener_slot() {
    static std::atomic<Listener*> slot{nullptr};
    return slot;
}
inline Listener* listener() { return listener_slot().load(std::memory_order_acquire); }
inline void set_listener(Listener* l) { listener_slot().store(l, std::memory_order_release); }

}  // namespace ember::instrument

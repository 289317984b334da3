// Tracer: records what the runtime does (enqueues, kernels, allocations) and what the PyTorch
// glue reports (host ops, copies, fallbacks, events, synchronizes, compile phases) as Records
// in per-thread buffers, to be merged once by collect().
//
// Cost: an event is a relaxed load of the enabled flag, a thread_local lookup, a steady-clock
// read and a few stores into the calling thread's own buffer — no lock and no allocation on the
// hot path (measured on warm memory: 30-60 ns a record; a host op, with two clock reads and
// three strings to look up, about 90 ns). Locks are taken only the first time a thread records into this
// Tracer (to register its buffer), the first time a thread sees a given string (to intern it),
// and every kChunkRecords records (a chunk from a process-wide pool of touched memory, which
// destroyed Tracers refill). Memory grows with the number of events until the Tracer is
// destroyed.
//
// Clock: steady-clock ns since the first start(). A span (kernel, host op, synchronize) is
// written when it ends, with its start time. Stream::enqueue fires on_enqueue after queueing,
// so a kernel's start may precede its enqueue record by a little; consumers pair them by
// (device, stream, seq), never by order. Alloc/free records carry the allocated and reserved
// totals after the event.
//
// Lifecycle, as the glue drives it:
//   Tracer t; t.start();   installs t as instrument::listener(), remembering the previous one
//   ... work ...
//   synchronize the devices   so that every enqueued kernel has ended: a kernel still running
//                             at stop() has no span (its enqueue record stays)
//   t.stop();              stops recording and restores the previous listener (if nobody
//                          replaced t meanwhile)
//   Trace trace = t.collect();
// start() after stop() resumes into the same buffers and the same time origin.
//
// Thread-safety: every method may be called from any thread. Listener callbacks and host
// methods called before start() or after stop() return without recording; a thread already
// inside a callback when stop() runs may still append that one record. Such a thread (or one
// that loaded the listener pointer just before stop) still calls into this object, so the
// Tracer must outlive every such call: destroy it only once no device work or allocation can
// be in flight from the traced period (the glue keeps the last Tracer alive). Buffers are
// released only by the destructor, so stop() never invalidates a writer.
//
// Spans on the host (host_op_begin/end, synchronize_begin/end) are per calling thread: end
// closes the innermost open one begun on the same thread. A span open across stop() or
// start() is dropped, not recorded with a wrong duration.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/instrument.h"
#include "profiler/record.h"

namespace ember::profiler {

class Tracer final : public instrument::Listener {
  public:
    // Records per buffer chunk; a chunk is allocated whole, so record addresses stay fixed.
    static constexpr size_t kChunkRecords = 1024;

    Tracer();
    // Uninstalls itself if still installed. See the lifetime rule above.
    ~Tracer() override;
    Tracer(const Tracer&) = delete;
    Tracer& operator=(const Tracer&) = delete;

    void start();
    void stop();
    bool active() const { return enabled_.load(std::memory_order_relaxed); }

    // Steady-clock ns since the first start(), the clock of every Record::ts_ns. The glue uses
    // it to time spans it reports with a duration (fallback, compile_phase, copy).
    int64_t now_ns() const;

    // All records so far, merged and sorted by time, with the string table. Safe at any time
    // (it sees each thread's committed records); complete after the devices were synchronized
    // and stop() returned. Takes the tracer's lock: threads registering or interning a new
    // string wait for it.
    Trace collect() const;
    // Records committed so far, over all threads.
    size_t record_count() const;

    // instrument::Listener. `name` must stay valid for the call only; it is copied on first
    // sight and then found by address (and checked by content, so a reused address is safe).
    void on_enqueue(int device, int64_t stream, uint64_t seq, const char* name) override;
    void on_start(int device, int64_t stream, uint64_t seq, const char* name) override;
    void on_end(int device, int64_t stream, uint64_t seq, const char* name) override;
    void on_alloc(int device, const void* ptr, size_t bytes, size_t allocated_total,
                  size_t reserved_total) override;
    void on_free(int device, const void* ptr, size_t bytes, size_t allocated_total,
                 size_t reserved_total) override;
    void on_step_begin(const char* label) override;
    void on_step_end(const char* label) override;

    // Host side, called by the glue on the thread doing the work. Strings are copied.
    // An op call (e.g. "aten::add") with its input shapes and Python source line; nests.
    void host_op_begin(std::string_view name, std::string_view shapes = {},
                       std::string_view source = {});
    void host_op_end();
    // A transfer. seq > 0 ties it to the stream work (device, stream, seq) that performs it;
    // duration_ns > 0 makes it a host span [now - duration, now] (a synchronous copy).
    void copy(CopyKind kind, uint64_t bytes, int device, int64_t stream, uint64_t seq,
              int64_t duration_ns = 0);
    // An op that ran on the CPU, reported when it finished: span [now - duration, now].
    void fallback(std::string_view op, uint64_t bytes_to_host, uint64_t bytes_to_device,
                  int64_t duration_ns);
    // Event `event_id` marks (device, stream) at `seq` (the stream work it completes after).
    void event_record(int device, int64_t stream, uint64_t event_id, uint64_t seq);
    // (device, stream) waits for event `event_id`; `seq` is the queued wait's own sequence
    // number when the glue knows it, else 0 (the exporter then finds the wait by time).
    void event_wait(int device, int64_t stream, uint64_t event_id, uint64_t seq = 0);
    // The host blocks on `device` (-1: all devices). Not nested within one thread.
    void synchronize_begin(int device);
    void synchronize_end(int device);
    // A compile step that took `duration_ns` and just ended: span [now - duration, now].
    void compile_phase(std::string_view name, int64_t duration_ns, bool cache_hit);
    void instant(std::string_view name);

    // The calling thread's correlation id (torch.profiler's id for the op being run), stamped
    // into Record::event_id of each enqueue record the thread makes; 0 clears it. Lets the glue
    // link each kernel to the op call that queued it.
    static void set_correlation(uint64_t id);

  private:
    struct Chunk;
    struct ThreadBuffer;

    // Chunks come from a process-wide pool of already-touched memory and go back to it when the
    // Tracer is destroyed: a first touch of fresh pages costs more than the record itself.
    static std::unique_ptr<Chunk> take_chunk();
    static void return_chunks(std::vector<std::unique_ptr<Chunk>>& chunks);
    static void prewarm_chunks();

    // This thread's buffer, registered on first use. Lock-free after the first call.
    ThreadBuffer& buffer();
    // Where the next record goes, default-constructed and stamped with the thread id; the
    // caller fills it, then commit() publishes it to collect().
    Record& next_slot(ThreadBuffer& b);
    static void commit(ThreadBuffer& b);
    // String ids. The thread's cache answers without a lock after the first sight.
    uint32_t intern(ThreadBuffer& b, const char* s);
    uint32_t intern(ThreadBuffer& b, std::string_view s);
    uint32_t intern_locked(std::string_view s);  // mu_ held
    // An alloc or free record (on_alloc/on_free).
    void memory_event(RecordKind kind, int device, const void* ptr, size_t bytes, size_t allocated_total,
                      size_t reserved_total);
    // A span of `duration_ns` ending now, on the calling thread; the caller fills the rest.
    Record& span_ending_now(ThreadBuffer& b, RecordKind kind, int64_t duration_ns);

    const uint64_t id_;  // unique per Tracer ever made: thread_local caches key on it
    std::atomic<bool> enabled_{false};
    std::atomic<uint32_t> generation_{0};  // bumped by start(); open spans remember theirs
    std::atomic<int64_t> origin_ns_{0};    // steady-clock time of the first start()
    instrument::Listener* previous_ = nullptr;
    bool installed_ = false;   // lifecycle_mu_
    bool started_once_ = false;  // lifecycle_mu_
    std::mutex lifecycle_mu_;  // start/stop

    mutable std::mutex mu_;  // buffers_, by_thread_, strings_, string_ids_
    std::vector<std::unique_ptr<ThreadBuffer>> buffers_;
    std::unordered_map<uint64_t, ThreadBuffer*> by_thread_;  // by a per-thread serial number
    std::vector<std::unique_ptr<std::string>> strings_;  // stable addresses for thread caches
    std::unordered_map<std::string_view, uint32_t> string_ids_;
};

}  // namespace ember::profiler

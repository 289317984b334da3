// Record: one thing the tracer saw, as a plain struct so that appending one is a handful of
// stores into a per-thread buffer. Every kind uses the same struct; fields a kind does not use
// keep their defaults. Strings are ids into the string table returned with the records (see
// Trace), because names must be copied off the hot path only once per distinct string.
//
// The Python exporter (python/torch_ember/profiler/_schema.py) takes these records as dicts with
// the same field names and kind_name()/copy_kind_name() as the "kind"/"copy_kind" strings.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ember::profiler {

enum class RecordKind : uint8_t {
    kEnqueue,       // host thread queued work: device, stream, seq, name; instant
    kKernel,        // a stream worker ran that work: device, stream, seq, name; span
    kAlloc,         // caching allocator handed out a block: device, ptr, bytes, allocated
    kFree,          // a block came back: device, ptr, bytes, allocated (after the free)
    kHostOp,        // host_op_begin..end: name, shapes, source; span on the calling thread
    kCopy,          // a transfer: copy_kind, bytes, device, stream, seq; span if it had a duration
    kFallback,      // an op ran on the CPU: name, bytes (to host), bytes_to_device; span
    kEventRecord,   // event event_id recorded on (device, stream) at seq; instant
    kEventWait,     // (device, stream) made to wait on event event_id (its queued seq if known)
    kSynchronize,   // host blocked on device (-1: all devices); span
    kCompilePhase,  // a compile step: name, cache_hit; span
    kInstant,       // a named point in time on the calling thread
    kStep,          // a step inside a kernel (compiled graph): device, stream, seq of the kernel,
                    // name = the step's label; span nested in that kernel's span
};

enum class CopyKind : uint8_t { kNone, kH2D, kD2H, kD2D };

// "enqueue", "kernel", "alloc", "free", "host_op", "copy", "fallback", "event_record",
// "event_wait", "synchronize", "compile", "instant": the Python schema's "kind" values.
const char* kind_name(RecordKind kind);
// "", "H2D", "D2H", "D2D".
const char* copy_kind_name(CopyKind kind);

struct Record {
    RecordKind kind = RecordKind::kInstant;
    CopyKind copy_kind = CopyKind::kNone;
    bool cache_hit = false;
    int32_t device = -1;     // -1: not about a device (host records, synchronize of all devices)
    int32_t thread = 0;      // OS thread id (gettid) of the thread that produced the record
    int64_t stream = -1;     // stream id within `device`; -1 when not about a stream
    uint64_t seq = 0;        // the stream's sequence number of the work; 0 when unknown
    int64_t ts_ns = 0;       // steady-clock ns since Tracer::start(); a span's start
    int64_t dur_ns = 0;      // span length; 0 for instants
    uint32_t name = 0;       // string ids; 0 is the empty string
    uint32_t shapes = 0;
    uint32_t source = 0;
    uint64_t ptr = 0;        // alloc/free block address
    uint64_t bytes = 0;      // alloc/free block size, copy size, fallback bytes copied to host
    uint64_t bytes_to_device = 0;  // fallback: bytes copied back to the device
    uint64_t allocated = 0;  // alloc/free: device bytes allocated after this event
    int64_t reserved = -1;   // alloc/free: device bytes reserved; -1 when the hook does not say
    uint64_t event_id = 0;   // event_record/event_wait: the glue's id for the event;
                             // enqueue: the host's correlation id (Tracer::set_correlation)
};

// What collect() returns: records from every thread, sorted by ts_ns (ties keep each thread's
// order), and the strings their name/shapes/source ids index. strings[0] is "".
struct Trace {
    std::vector<Record> records;
    std::vector<std::string> strings;

    const std::string& str(uint32_t id) const { return strings[id]; }
};

}  // namespace ember::profiler

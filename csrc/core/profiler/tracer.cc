#include "profiler/tracer.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <new>

namespace ember::profiler {
namespace {

int64_t steady_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

// Unique for the life of the process, unlike std::thread::id, which a new thread may reuse:
// a reused key would hand a dead thread's half-open spans to a new one.
uint64_t thread_serial() {
    static std::atomic<uint64_t> next{1};
    static thread_local uint64_t serial = next.fetch_add(1, std::memory_order_relaxed);
    return serial;
}

std::atomic<uint64_t> next_tracer_id{1};

// Transparent hashing so the per-thread text cache is searched by string_view without a copy.
struct TextHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

// An open span remembers the start() generation it began in, so that a span left open across
// stop()/start() is dropped rather than stretched over the gap.
struct OpenSpan {
    int64_t ts = 0;
    uint32_t name = 0, shapes = 0, source = 0;
    uint32_t generation = 0;
    int device = -1;
};

// Free chunks kept across Tracers. Never destroyed, so a Tracer destroyed during static
// destruction can still return its chunks.
template <typename Chunk>
struct FreeChunks {
    static constexpr size_t kMaxKept = 64;   // ~7 MiB of records kept warm after profiling
    static constexpr size_t kPrewarm = 8;    // touched by start(), ahead of the first records
    std::mutex mu;
    std::vector<std::unique_ptr<Chunk>> chunks;

    static FreeChunks& get() {
        static auto* pool = new FreeChunks();
        return *pool;
    }
};

struct OpenKernel {
    int device = -1;
    int64_t stream = -1;
    uint64_t seq = 0;
    int64_t ts = 0;
    uint32_t generation = 0;
};

}  // namespace

// Raw storage: records are constructed one at a time as they are appended, so a new chunk is
// not zeroed, and a recycled one needs no reset.
struct Tracer::Chunk {
    alignas(Record) unsigned char storage[sizeof(Record) * kChunkRecords];
    std::atomic<Chunk*> next{nullptr};

    Record* at(size_t i) { return std::launder(reinterpret_cast<Record*>(storage) + i); }
};

// One per (Tracer, thread). Everything but `committed` and the chunk links is touched only by
// the owning thread; collect() reads `committed` (acquire) and then that many records.
struct Tracer::ThreadBuffer {
    static constexpr int kMaxHostDepth = 128;
    static constexpr int kMaxKernelDepth = 8;  // sync-mode work runs inline, so it can nest

    explicit ThreadBuffer(int32_t tid) : tid(tid) {
        chunks.push_back(take_chunk());
        head = tail = chunks.back().get();
    }

    const int32_t tid;
    std::vector<std::unique_ptr<Chunk>> chunks;  // ownership only; readers follow `next`
    Chunk* head = nullptr;
    Chunk* tail = nullptr;
    size_t tail_used = 0;
    size_t count = 0;                  // owner's copy of `committed`
    std::atomic<size_t> committed{0};  // published records

    std::array<OpenSpan, kMaxHostDepth> host_ops;
    int host_depth = 0;
    int host_overflow = 0;  // begins past kMaxHostDepth, matched by ends that record nothing
    OpenSpan sync;
    bool sync_open = false;
    std::array<OpenKernel, kMaxKernelDepth> kernels;
    int kernel_depth = 0;
    int64_t step_start = -1;  // the open step's start (steps do not nest)

    struct Interned {
        uint32_t id;
        const char* text;  // the table's copy: compared on a hit, since an address can be reused
    };
    std::unordered_map<const char*, Interned> by_ptr;
    std::unordered_map<std::string, uint32_t, TextHash, std::equal_to<>> by_text;
};

Tracer::Tracer() : id_(next_tracer_id.fetch_add(1, std::memory_order_relaxed)) {
    strings_.push_back(std::make_unique<std::string>());
    string_ids_.emplace(*strings_[0], 0);
}

Tracer::~Tracer() {
    stop();
    for (auto& b : buffers_) return_chunks(b->chunks);
}

std::unique_ptr<Tracer::Chunk> Tracer::take_chunk() {
    std::unique_ptr<Chunk> c;
    {
        auto& pool = FreeChunks<Chunk>::get();
        std::lock_guard<std::mutex> lock(pool.mu);
        if (!pool.chunks.empty()) {
            c = std::move(pool.chunks.back());
            pool.chunks.pop_back();
        }
    }
    if (!c) c = std::make_unique_for_overwrite<Chunk>();
    c->next.store(nullptr, std::memory_order_relaxed);
    return c;
}

void Tracer::return_chunks(std::vector<std::unique_ptr<Chunk>>& chunks) {
    auto& pool = FreeChunks<Chunk>::get();
    std::lock_guard<std::mutex> lock(pool.mu);
    for (auto& c : chunks) {
        if (pool.chunks.size() >= FreeChunks<Chunk>::kMaxKept) break;
        pool.chunks.push_back(std::move(c));
    }
    chunks.clear();
}

void Tracer::prewarm_chunks() {
    auto& pool = FreeChunks<Chunk>::get();
    std::lock_guard<std::mutex> lock(pool.mu);
    while (pool.chunks.size() < FreeChunks<Chunk>::kPrewarm) {
        auto c = std::make_unique_for_overwrite<Chunk>();
        std::memset(c->storage, 0, sizeof(c->storage));  // fault the pages in now
        pool.chunks.push_back(std::move(c));
    }
}

void Tracer::start() {
    prewarm_chunks();
    std::lock_guard<std::mutex> lock(lifecycle_mu_);
    if (!started_once_) {
        origin_ns_.store(steady_ns(), std::memory_order_relaxed);
        started_once_ = true;
    }
    if (!installed_) {
        previous_ = instrument::listener_slot().exchange(this, std::memory_order_acq_rel);
        installed_ = true;
    }
    generation_.fetch_add(1, std::memory_order_relaxed);
    enabled_.store(true, std::memory_order_release);
}

void Tracer::stop() {
    std::lock_guard<std::mutex> lock(lifecycle_mu_);
    enabled_.store(false, std::memory_order_release);
    if (!installed_) return;
    // Restore the previous listener only if the slot still holds us; whoever replaced us owns it.
    instrument::Listener* expected = this;
    instrument::listener_slot().compare_exchange_strong(expected, previous_,
                                                        std::memory_order_acq_rel);
    installed_ = false;
    previous_ = nullptr;
}

int64_t Tracer::now_ns() const { return steady_ns() - origin_ns_.load(std::memory_order_relaxed); }

Tracer::ThreadBuffer& Tracer::buffer() {
    struct Slot {
        uint64_t tracer = 0;
        ThreadBuffer* buf = nullptr;
    };
    // Trivial, so access needs no TLS init guard; it caches the last Tracer this thread used.
    static thread_local Slot slot;
    if (slot.tracer == id_) return *slot.buf;
    uint64_t serial = thread_serial();
    std::lock_guard<std::mutex> lock(mu_);
    auto& entry = by_thread_[serial];
    if (entry == nullptr) {
        buffers_.push_back(
            std::make_unique<ThreadBuffer>(static_cast<int32_t>(::syscall(SYS_gettid))));
        entry = buffers_.back().get();
    }
    slot = Slot{id_, entry};
    return *entry;
}

Record& Tracer::next_slot(ThreadBuffer& b) {
    if (b.tail_used == kChunkRecords) {
        b.chunks.push_back(take_chunk());
        Chunk* c = b.chunks.back().get();
        // Linked before any record in it is committed; commit()'s release publishes both.
        b.tail->next.store(c, std::memory_order_release);
        b.tail = c;
        b.tail_used = 0;
    }
    Record* r = new (b.tail->at(b.tail_used++)) Record();
    r->thread = b.tid;
    return *r;
}

void Tracer::commit(ThreadBuffer& b) { b.committed.store(++b.count, std::memory_order_release); }

uint32_t Tracer::intern_locked(std::string_view s) {
    auto it = string_ids_.find(s);
    if (it != string_ids_.end()) return it->second;
    auto id = static_cast<uint32_t>(strings_.size());
    strings_.push_back(std::make_unique<std::string>(s));
    string_ids_.emplace(*strings_.back(), id);
    return id;
}

uint32_t Tracer::intern(ThreadBuffer& b, const char* s) {
    if (s == nullptr || *s == '\0') return 0;
    auto it = b.by_ptr.find(s);
    if (it != b.by_ptr.end() && std::strcmp(it->second.text, s) == 0) return it->second.id;
    ThreadBuffer::Interned e;
    {
        std::lock_guard<std::mutex> lock(mu_);
        e.id = intern_locked(s);
        e.text = strings_[e.id]->c_str();
    }
    b.by_ptr[s] = e;
    return e.id;
}

uint32_t Tracer::intern(ThreadBuffer& b, std::string_view s) {
    if (s.empty()) return 0;
    auto it = b.by_text.find(s);
    if (it != b.by_text.end()) return it->second;
    uint32_t id;
    {
        std::lock_guard<std::mutex> lock(mu_);
        id = intern_locked(s);
    }
    b.by_text.emplace(std::string(s), id);
    return id;
}

Record& Tracer::span_ending_now(ThreadBuffer& b, RecordKind kind, int64_t duration_ns) {
    int64_t end = now_ns();
    Record& r = next_slot(b);
    r.kind = kind;
    r.dur_ns = std::max<int64_t>(duration_ns, 0);
    r.ts_ns = end - r.dur_ns;
    return r;
}

// --- listener callbacks -------------------------------------------------------------------

namespace {
thread_local uint64_t t_correlation = 0;
}  // namespace

void Tracer::set_correlation(uint64_t id) { t_correlation = id; }

void Tracer::on_enqueue(int device, int64_t stream, uint64_t seq, const char* name) {
    if (!active()) return;
    ThreadBuffer& b = buffer();
    int64_t t = now_ns();
    uint32_t id = intern(b, name);
    Record& r = next_slot(b);
    r.kind = RecordKind::kEnqueue;
    r.device = device;
    r.stream = stream;
    r.seq = seq;
    r.name = id;
    r.ts_ns = t;
    r.event_id = t_correlation;
    commit(b);
}

void Tracer::on_start(int device, int64_t stream, uint64_t seq, const char* name) {
    if (!active()) return;
    ThreadBuffer& b = buffer();
    if (b.kernel_depth == ThreadBuffer::kMaxKernelDepth) return;  // its on_end finds no match
    b.kernels[b.kernel_depth++] =
        OpenKernel{device, stream, seq, now_ns(), generation_.load(std::memory_order_relaxed)};
}

void Tracer::on_end(int device, int64_t stream, uint64_t seq, const char* name) {
    if (!active()) return;
    int64_t t = now_ns();
    ThreadBuffer& b = buffer();
    // Normally the top entry; a miss means on_start came before start() (no span: we do not
    // know when it began).
    int k = b.kernel_depth - 1;
    while (k >= 0 && !(b.kernels[k].seq == seq && b.kernels[k].stream == stream &&
                       b.kernels[k].device == device)) {
        --k;
    }
    if (k < 0) return;
    OpenKernel open = b.kernels[k];
    b.kernel_depth = k;
    if (open.generation != generation_.load(std::memory_order_relaxed)) return;
    uint32_t id = intern(b, name);
    Record& r = next_slot(b);
    r.kind = RecordKind::kKernel;
    r.device = device;
    r.stream = stream;
    r.seq = seq;
    r.name = id;
    r.ts_ns = open.ts;
    r.dur_ns = t - open.ts;
    commit(b);
}

void Tracer::on_step_begin(const char* label) {
    if (!active()) return;
    buffer().step_start = now_ns();
}

void Tracer::on_step_end(const char* label) {
    if (!active()) return;
    ThreadBuffer& b = buffer();
    const int64_t start = b.step_start;
    b.step_start = -1;
    if (start < 0 || b.kernel_depth == 0) return;  // not inside a traced kernel
    const OpenKernel& k = b.kernels[b.kernel_depth - 1];
    const int64_t t = now_ns();
    uint32_t id = intern(b, label);
    Record& r = next_slot(b);
    r.kind = RecordKind::kStep;
    r.device = k.device;
    r.stream = k.stream;
    r.seq = k.seq;
    r.name = id;
    r.ts_ns = start;
    r.dur_ns = t - start;
    commit(b);
}

void Tracer::on_alloc(int device, const void* ptr, size_t bytes, size_t allocated_total,
                      size_t reserved_total) {
    memory_event(RecordKind::kAlloc, device, ptr, bytes, allocated_total, reserved_total);
}

void Tracer::on_free(int device, const void* ptr, size_t bytes, size_t allocated_total,
                     size_t reserved_total) {
    memory_event(RecordKind::kFree, device, ptr, bytes, allocated_total, reserved_total);
}

void Tracer::memory_event(RecordKind kind, int device, const void* ptr, size_t bytes, size_t allocated_total,
                          size_t reserved_total) {
    if (!active()) return;
    ThreadBuffer& b = buffer();
    int64_t t = now_ns();
    Record& r = next_slot(b);
    r.kind = kind;
    r.device = device;
    r.ptr = reinterpret_cast<uintptr_t>(ptr);
    r.bytes = bytes;
    r.allocated = allocated_total;
    r.reserved = static_cast<int64_t>(reserved_total);
    r.ts_ns = t;
    commit(b);
}

// --- host side ----------------------------------------------------------------------------

void Tracer::host_op_begin(std::string_view name, std::string_view shapes,
                           std::string_view source) {
    if (!active()) return;
    ThreadBuffer& b = buffer();
    uint32_t gen = generation_.load(std::memory_order_relaxed);
    // A stale top means every open span is from before a restart (ends were missed while
    // stopped): forget them so the stack cannot fill up over many sessions.
    if (b.host_depth > 0 && b.host_ops[b.host_depth - 1].generation != gen) {
        b.host_depth = 0;
        b.host_overflow = 0;
    }
    if (b.host_depth == ThreadBuffer::kMaxHostDepth) {
        ++b.host_overflow;
        return;
    }
    OpenSpan& s = b.host_ops[b.host_depth++];
    s.name = intern(b, name);
    s.shapes = intern(b, shapes);
    s.source = intern(b, source);
    s.generation = gen;
    s.ts = now_ns();  // last, so interning a new string is not charged to the op
}

void Tracer::host_op_end() {
    if (!active()) return;
    int64_t t = now_ns();
    ThreadBuffer& b = buffer();
    if (b.host_overflow > 0) {
        --b.host_overflow;
        return;
    }
    if (b.host_depth == 0) return;
    OpenSpan s = b.host_ops[--b.host_depth];
    if (s.generation != generation_.load(std::memory_order_relaxed)) return;
    Record& r = next_slot(b);
    r.kind = RecordKind::kHostOp;
    r.ts_ns = s.ts;
    r.dur_ns = t - s.ts;
    r.name = s.name;
    r.shapes = s.shapes;
    r.source = s.source;
    commit(b);
}

void Tracer::copy(CopyKind kind, uint64_t bytes, int device, int64_t stream, uint64_t seq,
                  int64_t duration_ns) {
    if (!active()) return;
    ThreadBuffer& b = buffer();
    Record& r = span_ending_now(b, RecordKind::kCopy, duration_ns);
    r.copy_kind = kind;
    r.bytes = bytes;
    r.device = device;
    r.stream = stream;
    r.seq = seq;
    commit(b);
}

void Tracer::fallback(std::string_view op, uint64_t bytes_to_host, uint64_t bytes_to_device,
                      int64_t duration_ns) {
    if (!active()) return;
    ThreadBuffer& b = buffer();
    uint32_t id = intern(b, op);
    Record& r = span_ending_now(b, RecordKind::kFallback, duration_ns);
    r.name = id;
    r.bytes = bytes_to_host;
    r.bytes_to_device = bytes_to_device;
    commit(b);
}

void Tracer::event_record(int device, int64_t stream, uint64_t event_id, uint64_t seq) {
    if (!active()) return;
    ThreadBuffer& b = buffer();
    Record& r = span_ending_now(b, RecordKind::kEventRecord, 0);
    r.device = device;
    r.stream = stream;
    r.event_id = event_id;
    r.seq = seq;
    commit(b);
}

void Tracer::event_wait(int device, int64_t stream, uint64_t event_id, uint64_t seq) {
    if (!active()) return;
    ThreadBuffer& b = buffer();
    Record& r = span_ending_now(b, RecordKind::kEventWait, 0);
    r.device = device;
    r.stream = stream;
    r.event_id = event_id;
    r.seq = seq;
    commit(b);
}

void Tracer::synchronize_begin(int device) {
    if (!active()) return;
    ThreadBuffer& b = buffer();
    b.sync.generation = generation_.load(std::memory_order_relaxed);
    b.sync.device = device;
    b.sync.ts = now_ns();
    b.sync_open = true;
}

void Tracer::synchronize_end(int device) {
    if (!active()) return;
    int64_t t = now_ns();
    ThreadBuffer& b = buffer();
    if (!b.sync_open) return;
    b.sync_open = false;
    if (b.sync.generation != generation_.load(std::memory_order_relaxed)) return;
    Record& r = next_slot(b);
    r.kind = RecordKind::kSynchronize;
    r.device = b.sync.device;
    r.ts_ns = b.sync.ts;
    r.dur_ns = t - b.sync.ts;
    commit(b);
}

void Tracer::compile_phase(std::string_view name, int64_t duration_ns, bool cache_hit) {
    if (!active()) return;
    ThreadBuffer& b = buffer();
    uint32_t id = intern(b, name);
    Record& r = span_ending_now(b, RecordKind::kCompilePhase, duration_ns);
    r.name = id;
    r.cache_hit = cache_hit;
    commit(b);
}

void Tracer::instant(std::string_view name) {
    if (!active()) return;
    ThreadBuffer& b = buffer();
    uint32_t id = intern(b, name);
    Record& r = span_ending_now(b, RecordKind::kInstant, 0);
    r.name = id;
    commit(b);
}

// --- collection ---------------------------------------------------------------------------

Trace Tracer::collect() const {
    Trace trace;
    std::lock_guard<std::mutex> lock(mu_);
    size_t total = 0;
    for (const auto& b : buffers_) total += b->committed.load(std::memory_order_acquire);
    trace.records.reserve(total);
    for (const auto& b : buffers_) {
        size_t n = b->committed.load(std::memory_order_acquire);
        Chunk* c = b->head;
        for (size_t i = 0; i < n; ++i) {
            if (i > 0 && i % kChunkRecords == 0) c = c->next.load(std::memory_order_acquire);
            trace.records.push_back(*c->at(i % kChunkRecords));
        }
    }
    std::stable_sort(trace.records.begin(), trace.records.end(),
                     [](const Record& a, const Record& b) { return a.ts_ns < b.ts_ns; });
    // Every id a committed record holds was interned before the commit, under mu_ (held here).
    trace.strings.reserve(strings_.size());
    for (const auto& s : strings_) trace.strings.push_back(*s);
    return trace;
}

size_t Tracer::record_count() const {
    std::lock_guard<std::mutex> lock(mu_);
    size_t total = 0;
    for (const auto& b : buffers_) total += b->committed.load(std::memory_order_acquire);
    return total;
}

}  // namespace ember::profiler

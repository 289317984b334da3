#include "profiler_bridge.h"

#include <ATen/record_function.h>
#include <c10/util/Exception.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <vector>

#include "runtime/device.h"

namespace ember::torch_glue {
namespace {

std::atomic<profiler::Tracer*> g_tracer{nullptr};
std::atomic<SourceProvider> g_source{nullptr};

struct State {
    std::mutex mu;
    // Stopped tracers are kept: a hook that loaded the pointer just before stop() may still be
    // inside one. Two generations back, nothing can be.
    std::vector<std::unique_ptr<profiler::Tracer>> tracers;
    std::unique_ptr<profiler::Tracer> running;
    std::optional<at::CallbackHandle> callback;
    ProfilerOptions options;
};

State& state() {
    static State* s = new State();  // leaked: hooks may run during interpreter teardown
    return *s;
}

// Waits for all queued work without taking the streams' stored errors: those belong to the
// user's next synchronizing call.
void wait_for_devices() {
    for (int d = 0; d < runtime::device_count(); ++d) {
        runtime::Device& dev = runtime::device(d);
        for (int64_t id = 0; id < dev.num_streams(); ++id) {
            auto s = dev.stream(id);
            if (s.ok()) (*s)->wait_for((*s)->enqueued());
        }
    }
}

std::string format_inputs(const at::RecordFunction& fn) {
    std::ostringstream os;
    bool first = true;
    for (const c10::IValue& v : fn.inputs()) {
        if (!v.isTensor()) continue;
        const at::Tensor& t = v.toTensor();
        if (!first) os << ", ";
        first = false;
        if (!t.defined()) {
            os << "None";
            continue;
        }
        os << c10::toString(t.scalar_type()) << t.sizes();
    }
    return os.str();
}

std::unique_ptr<at::ObserverContext> on_op_start(const at::RecordFunction& fn) {
    profiler::Tracer* t = tracer();
    if (t == nullptr) return nullptr;
    const ProfilerOptions& o = state().options;
    std::string shapes = o.record_shapes ? format_inputs(fn) : std::string();
    std::string source;
    if (o.with_stack) {
        if (SourceProvider p = g_source.load(std::memory_order_acquire)) source = p();
    }
    t->host_op_begin(fn.name(), shapes, source);
    return nullptr;
}

void on_op_end(const at::RecordFunction&, at::ObserverContext*) {
    if (profiler::Tracer* t = tracer()) t->host_op_end();
}

}  // namespace

profiler::Tracer* tracer() { return g_tracer.load(std::memory_order_relaxed); }

bool profiler_running() { return tracer() != nullptr; }

void set_source_provider(SourceProvider provider) { g_source.store(provider, std::memory_order_release); }

void profiler_start(const ProfilerOptions& options) {
    State& s = state();
    std::lock_guard<std::mutex> lock(s.mu);
    TORCH_CHECK(!s.running, "ember: a profile is already running; stop it before starting another");
    wait_for_devices();
    while (s.tracers.size() > 2) s.tracers.erase(s.tracers.begin());
    s.options = options;
    s.running = std::make_unique<profiler::Tracer>();
    s.running->start();
    g_tracer.store(s.running.get(), std::memory_order_release);
    if (options.host_ops) {
        auto cb = at::RecordFunctionCallback(&on_op_start, &on_op_end)
                      .needsInputs(options.record_shapes)
                      .scopes({at::RecordScope::FUNCTION, at::RecordScope::BACKWARD_FUNCTION,
                               at::RecordScope::USER_SCOPE});
        s.callback = at::addGlobalCallback(cb);
    }
}

profiler::Trace profiler_stop() {
    State& s = state();
    std::lock_guard<std::mutex> lock(s.mu);
    TORCH_CHECK(s.running, "ember: no profile is running");
    if (s.callback) {
        at::removeCallback(*s.callback);
        s.callback.reset();
    }
    wait_for_devices();
    g_tracer.store(nullptr, std::memory_order_release);
    s.running->stop();
    profiler::Trace trace = s.running->collect();
    s.tracers.push_back(std::move(s.running));
    return trace;
}

CopySpan::CopySpan(profiler::CopyKind kind, uint64_t bytes, int device, int64_t stream)
    : tracer_(tracer()), kind_(kind), bytes_(bytes), device_(device), stream_(stream) {
    if (tracer_) start_ = tracer_->now_ns();
}

CopySpan::~CopySpan() {
    if (tracer_) tracer_->copy(kind_, bytes_, device_, stream_, 0, std::max<int64_t>(1, tracer_->now_ns() - start_));
}

}  // namespace ember::torch_glue

#include "graph_capture.h"

#include <ATen/core/GraphImplInterface.h>

#include <atomic>
#include <fstream>
#include <string>

#include "check.h"

namespace ember::torch_glue {
namespace {
std::atomic<int> g_captures{0};

Status refused(const std::string& message) { return Status(StatusCode::kFailedPrecondition, "ember graph: " + message); }
}  // namespace

bool any_capture() { return g_captures.load(std::memory_order_acquire) != 0; }

void check_not_capturing_elsewhere(runtime::Stream& stream, const char* name) {
    runtime::Stream* c = runtime::device(stream.device()).capture_stream();
    if (c == nullptr || c == &stream) return;
    raise_status(refused(std::string("'") + name + "' was queued on stream " + std::to_string(stream.id()) +
                         " while stream " + std::to_string(c->id()) + " of ember:" + std::to_string(stream.device()) +
                         " captures a graph; it would run now, outside the graph. Capture on one stream."));
}

void check_not_capturing(int device, const char* what, const char* why) {
    if (!any_capture()) return;
    runtime::Device& d = runtime::device(device);
    if (d.capture_stream() != nullptr && d.capture_stream() == &d.current_stream())
        raise_status(refused(std::string(what) + " cannot be captured: " + why));
}

GraphCapture::~GraphCapture() {
    try {
        reset();
    } catch (...) {  // a destructor must not throw (at interpreter exit the device may be gone)
    }
}

void GraphCapture::capture_begin(int device) {
    if (stream_ != nullptr) raise_status(refused("capture_begin() while this graph is capturing"));
    if (graph_) raise_status(refused("this graph was already captured; call reset() before capturing again"));
    runtime::Device& d = runtime::device(device);
    if (d.capture_stream() != nullptr) raise_status(refused("another graph is capturing on this device"));
    runtime::Stream& s = d.current_stream();
    auto graph = std::make_unique<runtime::Graph>();
    d.allocator().begin_graph(graph->id());
    Status st = s.begin_capture(graph.get());
    if (!st.ok()) {
        d.allocator().end_graph();
        d.allocator().release_graph(graph->id());
        raise_status(st);
    }
    d.set_capture_stream(&s);
    g_captures.fetch_add(1, std::memory_order_acq_rel);
    device_ = device;
    graph_ = std::move(graph);
    stream_ = &s;
}

Status GraphCapture::stop_capturing() {
    runtime::Device& d = runtime::device(device_);
    Status st = stream_->end_capture();
    d.allocator().end_graph();
    d.set_capture_stream(nullptr);
    g_captures.fetch_sub(1, std::memory_order_acq_rel);
    stream_ = nullptr;
    return st;
}

void GraphCapture::capture_end() {
    if (stream_ == nullptr) raise_status(refused("capture_end() without capture_begin()"));
    Status st = stop_capturing();
    if (!st.ok()) {
        release();
        raise_status(st);
    }
    captured_ = true;
}

void GraphCapture::replay() {
    if (stream_ != nullptr) raise_status(refused("replay() while the graph is capturing"));
    if (!captured_) raise_status(refused("replay() of a graph that holds no capture"));
    runtime::Stream& s = runtime::device(device_).current_stream();
    if (s.capturing()) raise_status(refused("replay() on a stream that is capturing"));
    replayed_.insert(&s);
    EMBER_CHECK(graph_->replay(s));
}

void GraphCapture::reset() {
    if (stream_ != nullptr) (void)stop_capturing();  // abandoned mid-capture (an exception in it)
    release();
}

void GraphCapture::release() {
    if (graph_) {
        // Replays on other streams than the capture's are not ordered with the allocator's
        // reuse of the graph's blocks: wait for them first.
        for (runtime::Stream* s : replayed_) s->wait_for(s->enqueued());
        runtime::device(device_).allocator().release_graph(graph_->id());
    }
    graph_.reset();
    replayed_.clear();
    captured_ = false;
}

namespace {

// torch.accelerator.Graph on ember: PyTorch's device-generic graph API creates one of these per
// graph through the GraphImplRegistry (keyed by the device type's name).
struct AcceleratorGraph final : at::GraphImplInterface {
    explicit AcceleratorGraph(const at::GraphImplArgs&) {}
    void capture_begin(at::MempoolId_t pool, at::GraphCaptureMode) override {
        TORCH_CHECK(pool.first == 0 && pool.second == 0, "ember graphs do not share memory pools yet");
        capture.capture_begin(runtime::current_device());
    }
    void capture_end() override { capture.capture_end(); }
    void instantiate() override {}
    void replay() override { capture.replay(); }
    void reset() override { capture.reset(); }
    at::MempoolId_t pool() const override { return {0, 0}; }
    void enable_debug_mode() override {}
    void debug_dump(const std::string& path) override {
        std::ofstream out(path);
        out << capture.num_kernels() << " kernels\n";
    }
    GraphCapture capture;
};

}  // namespace

}  // namespace ember::torch_glue

namespace at {
// The key is the device type's name as c10::DeviceTypeName gives it for PrivateUse1 ("EMBER").
REGISTER_GRAPH_IMPL(EMBER, ember::torch_glue::AcceleratorGraph);
}  // namespace at

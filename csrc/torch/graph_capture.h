// Graph capture for Python (torch.ember.EmberGraph): one device's kernels recorded on its current
// stream between capture_begin and capture_end, replayed on the current stream (runtime/graph.h
// holds the semantics). While a graph captures, work queued on another stream of the device is
// refused (it would run at once, outside the graph), and so are random ops (every replay would
// draw the same numbers), copies from CPU memory that must be staged (a replay would copy the
// capture's values again) and anything that waits for the device.
#pragma once

#include <cstdint>
#include <memory>
#include <set>

#include "runtime/device.h"
#include "runtime/graph.h"

namespace ember::torch_glue {

class GraphCapture {
  public:
    GraphCapture() = default;
    ~GraphCapture();
    GraphCapture(const GraphCapture&) = delete;
    GraphCapture& operator=(const GraphCapture&) = delete;

    void capture_begin(int device);
    void capture_end();
    void replay();
    // Waits for the replays queued so far, gives the graph's memory back, forgets the kernels.
    void reset();
    int64_t num_kernels() const { return graph_ ? static_cast<int64_t>(graph_->size()) : 0; }
    bool capturing() const { return stream_ != nullptr; }

  private:
    Status stop_capturing();  // ends the capture on the stream, the allocator and the device
    void release();
    int device_ = -1;
    std::unique_ptr<runtime::Graph> graph_;
    runtime::Stream* stream_ = nullptr;    // while capturing
    bool captured_ = false;
    std::set<runtime::Stream*> replayed_;  // streams that replays were queued on
};

// Raises unless work may be queued on `stream` now (no other stream of its device captures).
void check_not_capturing_elsewhere(runtime::Stream& stream, const char* name);
// Raises when the current stream of `device` captures a graph: `what` cannot be captured, `why`.
void check_not_capturing(int device, const char* what, const char* why);
// Whether any graph is capturing in this process (a fast test before the checks above).
bool any_capture();

}  // namespace ember::torch_glue
